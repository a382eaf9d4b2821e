"""Safe global memory (``passes/lowering/bounds_guards.py``): a global access whose index the analyzer cannot prove
inside the buffer is guarded (a load reads the pad, a store is dropped), recorded, and can be turned off.

Every kernel runs lowered on the CPU against numpy written here, which shares nothing with the lowering. The
windows are chosen so that an unguarded access would show: in a row-major buffer a column past a row's end is
the next row's first element, so a missing load guard changes a row sum and a missing store guard overwrites
an element the kernel never writes.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import tilelayout as tl
from conftest import main_text
from tilelayout.errors import ConfigError
from tilelayout.passes.lowering.bounds_guards import guard_records
from tilelayout.passes.lowering.pipeline import lower_func

MODELS = ("register-count", "io-aware")


def _parse(text: str):
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx})


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _run(func, *arrays, model="register-count", target=None):
    out = [a.copy() for a in arrays]
    tl.build_cpu(func, target=target, cost_model=model)(*out)
    return out


# ---------------------------------------------------------------------------------------------------
# A partial last tile of a static shape: 100 x 40 in 32 x 32 tiles (a 4 x 2 grid; the last row of tiles has 4
# rows, the last column of tiles 8 columns).

PARTIAL = main_text('A: T.Buffer((100, 40), "float32"), B: T.Buffer((100, 40), "float32"), S: T.Buffer((100, 2), "float32")',
                    threads=64, blocks=(2, 4), body='''
    F = T.alloc_buffer((32, 32), "float32", scope="local.fragment")
    s = T.alloc_buffer((32,), "float32", scope="local.fragment")
    Tx.copy(F[0:32, 0:32], A[by * 32:by * 32 + 32, bx * 32:bx * 32 + 32])
    Tx.sum(s[0:32], F[0:32, 0:32], axes=[1])
    for i in T.parallel(32):
        for j in T.parallel(32):
            F[i, j] = F[i, j] * T.float32(2) + T.float32(1)
    Tx.copy(B[by * 32:by * 32 + 32, bx * 32:bx * 32 + 32], F[0:32, 0:32])
    for i in T.parallel(32):
        S[by * 32 + i, bx] = s[i]
''')


def _partial_reference(A, B, S):
    B, S = B.copy(), S.copy()
    B[...] = A * 2 + 1
    S[:, 0] = A[:, :32].astype(np.float64).sum(axis=1)
    S[:, 1] = A[:, 32:].astype(np.float64).sum(axis=1)      # the 24 padded columns add 0
    return B, S


@pytest.mark.parametrize("model", MODELS)
def test_partial_last_tile_pads_loads_and_drops_stores(model):
    func = _parse(PARTIAL)
    A, B, S = _rand(100, 40), np.full((100, 40), 7.0, np.float32), np.full((100, 2), 7.0, np.float32)
    _, got_b, got_s = _run(func, A, B, S, model=model)
    want_b, want_s = _partial_reference(A, B, S)
    np.testing.assert_array_equal(got_b, want_b)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-5, atol=1e-5)
    records = guard_records(lower_func(func, cost_model=model))
    assert {(r["buffer"], r["access"], tuple(r["dims"])) for r in records} == \
        {("A", "load", (0, 1)), ("B", "store", (0, 1)), ("S", "store", (0,))}
    assert tl.passes.check_numeric(func, cost_model=model).ok     # the numpy interpreter pads alike


def test_partial_tile_guard_is_one_per_vector_when_the_end_is_a_vector_boundary():
    """40 columns end on a 4-lane boundary: the loads stay 4-wide with one guard per vector; 30 columns do not,
    and the width falls to 2 (30 = 15 x 2) instead of running a vector past the end."""
    from maint.lanes import lowered_lanes
    assert lowered_lanes(_parse(PARTIAL))["A"] == 4
    narrow = PARTIAL.replace("(100, 40)", "(100, 30)")     # the second column of tiles lies wholly outside
    assert lowered_lanes(_parse(narrow))["A"] == 2
    A = _rand(100, 30)
    _, got_b, got_s = _run(_parse(narrow), A, np.zeros((100, 30), np.float32), np.zeros((100, 2), np.float32))
    np.testing.assert_array_equal(got_b, A * 2 + 1)
    np.testing.assert_allclose(got_s[:, 0], A.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got_s[:, 1], np.zeros(100, np.float32))


# ---------------------------------------------------------------------------------------------------
# A grouped gemm's data-dependent offsets: block g reads its rows from m_start = offsets[g] (TileLang's grouped
# gemm example), and the last groups run past the end of A and C (or start before it).

GROUPED = '''
@T.prim_func
def main(A: T.Buffer((100, 32), "float16"), W: T.Buffer((32, 32), "float16"), O: T.Buffer((4,), "int32"),
         C: T.Buffer((100, 32), "float32")):
    g = T.launch_thread("blockIdx.x", 4)
    tx = T.launch_thread("threadIdx.x", 128)
    A_s = T.alloc_buffer((64, 32), "float16", scope="shared")
    W_s = T.alloc_buffer((32, 32), "float16", scope="shared")
    acc = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    m_start = O[g]
    Tx.copy(A_s[0:64, 0:32], A[m_start:m_start + 64, 0:32])
    Tx.copy(W_s[0:32, 0:32], W[0:32, 0:32])
    Tx.fill(acc[0:64, 0:32], T.float32(0))
    Tx.gemm(acc[0:64, 0:32], A_s[0:64, 0:32], W_s[0:32, 0:32], acc[0:64, 0:32], False, False, 1.0, 1.0)
    Tx.copy(C[m_start:m_start + 64, 0:32], acc[0:64, 0:32])
'''


def _grouped_reference(A, W, offsets, C):
    C = C.copy()
    full = A.astype(np.float32) @ W.astype(np.float32)
    for start in offsets:                      # groups in block order; rows outside [0, 100) are dropped
        rows = [r for r in range(start, start + 64) if 0 <= r < 100]
        C[rows] = full[rows]
    return C


@pytest.mark.parametrize("offsets", [[0, 20, 60, 90], [-30, 36, 70, 99]], ids=["past-the-end", "before-and-after"])
def test_grouped_offsets_read_from_a_tensor_are_guarded(offsets):
    func = _parse(GROUPED).with_attr("target", tvm.target.Target({"kind": "cuda", "arch": "sm_80"}))
    rng = np.random.default_rng(1)
    A = rng.standard_normal((100, 32)).astype(np.float16)
    W = rng.standard_normal((32, 32)).astype(np.float16)
    O = np.array(offsets, np.int32)
    C = np.full((100, 32), 5.0, np.float32)
    *_, got = _run(func, A, W, O, C)
    np.testing.assert_allclose(got, _grouped_reference(A, W, O, C), rtol=2e-2, atol=2e-2)
    records = guard_records(lower_func(func))
    assert [(r["buffer"], r["access"], r["dims"]) for r in records] == [("A", "load", [0]), ("C", "store", [0])]
    # the named offset ``m_start = O[g]`` (a read-only parameter) is inlined into the copy before lowering
    assert records[0]["index"] == "A[O[g] + v0, v1]"


# ---------------------------------------------------------------------------------------------------
# The switch, the pad, and kernels that need no guard.

def test_turning_safe_memory_off_removes_every_guard():
    func = _parse(PARTIAL)
    on = lower_func(func)
    off = lower_func(func.with_attr("tilelayout.safe_memory", False))
    assert guard_records(on) and not guard_records(off)
    assert "if_then_else" in on.script() and "if_then_else" not in off.script()
    with pytest.raises(ConfigError, match="tilelayout.safe_memory must be True or False"):
        lower_func(func.with_attr("tilelayout.safe_memory", "no"))


def test_declared_pad_is_what_a_guarded_load_reads():
    """A row max over a partial tile is right only with a -inf pad (0 would win over negative rows)."""
    text = main_text('A: T.Buffer((40, 20), "float32"), M: T.Buffer((40,), "float32")', threads=32, blocks=2, body='''
    F = T.alloc_buffer((32, 32), "float32", scope="local.fragment")
    m = T.alloc_buffer((32,), "float32", scope="local.fragment")
    Tx.copy(F[0:32, 0:32], A[bx * 32:bx * 32 + 32, 0:32])
    Tx.max(m[0:32], F[0:32, 0:32], axes=[1])
    Tx.copy(M[bx * 32:bx * 32 + 32], m[0:32])
''')
    A = -np.abs(_rand(40, 20)) - 1
    func = _parse(text).with_attr("tilelayout.safe_memory_pad", {"A": float("-inf")})
    _, got = _run(func, A, np.zeros(40, np.float32))
    np.testing.assert_array_equal(got, A.max(axis=1))
    _, zero_pad = _run(_parse(text), A, np.zeros(40, np.float32))
    np.testing.assert_array_equal(zero_pad, np.zeros(40, np.float32))     # the default pad is 0
    assert tl.passes.check_numeric(func).ok
    with pytest.raises(ConfigError, match="pad of buffer A must be a number"):
        lower_func(_parse(text).with_attr("tilelayout.safe_memory_pad", {"A": "low"}))


def test_a_provably_in_bounds_kernel_gets_no_guard():
    text = PARTIAL.replace("(100, 40)", "(128, 64)").replace("(100, 2)", "(128, 2)")
    low = lower_func(_parse(text))
    assert guard_records(low) == []
    assert "if_then_else" not in low.script()
    A = _rand(128, 64)
    _, got_b, _ = _run(_parse(text), A, np.zeros((128, 64), np.float32), np.zeros((128, 2), np.float32))
    np.testing.assert_array_equal(got_b, A * 2 + 1)


def test_a_guard_the_program_already_wrote_is_not_doubled():
    text = main_text('A: T.Buffer((100,), "float32"), B: T.Buffer((100,), "float32")', threads=32, blocks=4, body='''
    for i in T.parallel(32):
        if bx * 32 + i < 100:
            B[bx * 32 + i] = T.if_then_else(bx * 32 + i < 100, A[bx * 32 + i], T.float32(0)) + T.float32(1)
''')
    low = lower_func(_parse(text))
    assert guard_records(low) == []
    A = _rand(100)
    _, got = _run(_parse(text), A, np.zeros(100, np.float32))
    np.testing.assert_array_equal(got, A + 1)


def test_guards_are_reported_by_show_and_explain(tmp_path):
    from io import StringIO
    from tilelayout.cli import main
    path = tmp_path / "kernel.py"
    path.write_text("from tvm.script import tirx as T\nfrom tvm.tirx.script import tile as Tx\n" + PARTIAL)
    for command in ("show", "explain"):
        out, err = StringIO(), StringIO()
        assert main([command, f"{path}:main", "--quiet"], out, err) == 0, err.getvalue()
        text = out.getvalue()
        assert "safe memory: load A[by * 32 + v0, bx * 32 + v1] guarded in dimensions 0, 1" in text, text
        assert "safe memory: store S[by * 32 + i, bx] guarded in dimension 0" in text, text


def test_an_atomic_outside_its_buffer_is_dropped():
    """A histogram whose bin index comes from the data: values outside 0 .. 7 would update memory past H."""
    text = main_text('A: T.Buffer((96,), "int32"), H: T.Buffer((8,), "int32")', threads=32, body='''
    for i in T.parallel(96):
        T.cuda.atomic_add(T.address_of(H[A[i]]), 1)
''')
    func = _parse(text)
    records = guard_records(lower_func(func))
    assert [(r["buffer"], r["access"], r["dims"]) for r in records] == [("H", "atomic add", [0])]
    A = np.random.default_rng(3).integers(-6, 14, 96).astype(np.int32)
    _, got = _run(func, A, np.zeros(8, np.int32))
    np.testing.assert_array_equal(got, np.bincount(A[(A >= 0) & (A < 8)], minlength=8))
    assert tl.passes.check_numeric(func).ok


ROWSUM_PIPELINED = '''
@T.prim_func
def main(X: T.Buffer((64, N), "float32"), R: T.Buffer((64,), "float32")):
    T.func_attr({"target": T.target({"kind": "cuda", "arch": "sm_80"})})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    X_s = T.alloc_buffer((64, 32), "float32", scope="shared")
    acc = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    row = T.alloc_buffer((64,), "float32", scope="local.fragment")
    Tx.fill(acc[0:64, 0:32], T.float32(0))
    for ko in T.serial(STEPS, annotations={"num_stages": 3}):
        Tx.copy(X_s[0:64, 0:32], X[0:64, ko * 32:ko * 32 + 32])
        for i in T.parallel(64):
            for j in T.parallel(32):
                acc[i, j] = acc[i, j] + X_s[i, j]
    Tx.sum(row[0:64], acc[0:64, 0:32], axes=[1])
    Tx.copy(R[0:64], row[0:64])
'''


@pytest.mark.parametrize("n, chunk", [(100, 16), (98, 8)])
def test_a_pipelined_partial_tile_is_copied_by_zero_filling_cp_async(n, chunk):
    """The last K tile of a 3-stage cp.async pipeline runs past the columns: its guarded loads become
    cp.async's src-size form (16-byte chunks when the end is a 4-float boundary, 8-byte ones for 98 columns)."""
    func = _parse(ROWSUM_PIPELINED.replace("N)", f"{n})").replace("STEPS", str((n + 31) // 32)))
    source = tl.passes.cuda_source(func)
    assert f"cp_async_{'cg' if chunk == 16 else 'ca'}_src_size" in source and f"], {chunk}, %2;" in source
    X = _rand(64, n)
    _, got = _run(func, X, np.zeros(64, np.float32))
    np.testing.assert_allclose(got, X.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
