"""The numeric check judges correct kernels correct: multi-dimensional thread blocks, per-thread local arrays in the
numpy interpreter, float sums written as serial loops compared within a tolerance."""
from __future__ import annotations

import numpy as np
import tvm
import pytest
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

import tilelayout as tl
from tilelayout.passes.lowering.pipeline import check_numeric, random_inputs, reference_outputs
from tilelayout.reference import UnsupportedByReference, run_reference
from conftest import parse_main

MODELS = ("register-count", "io-aware")


# ------------------------------------------------------------------------------------ threadIdx.y / threadIdx.z

shift_rows_xy = parse_main('A: T.Buffer((32, 64), "int32"), B: T.Buffer((32, 64), "int32"), '
                           'C: T.Buffer((4, 32), "int32")', threads=(32, 4), name="shift_rows_xy", body='''
    F = T.alloc_buffer((32, 64), "int32", scope="local.fragment")
    Tx.copy(F[0:32, 0:64], A[0:32, 0:64])
    for i in T.parallel(32):
        for j in T.parallel(64):
            F[i, j] = F[i, j] * 3 + i
    Tx.copy(B[0:32, 0:64], F[0:32, 0:64])
    C[ty, tx] = ty * 100 + tx
''')


row_sums_xyz = parse_main('A: T.Buffer((16, 64), "float32"), B: T.Buffer((16,), "float32")',
                          threads=(16, 2, 2), name="row_sums_xyz", body='''
    F = T.alloc_buffer((16, 64), "float32", scope="local.fragment")
    s = T.alloc_buffer((16,), "float32", scope="local.fragment")
    Tx.copy(F[0:16, 0:64], A[0:16, 0:64])
    Tx.sum(s[0:16], F[0:16, 0:64], axes=[1])
    Tx.copy(B[0:16], s[0:16])
''')


def _shift_rows_numpy(d):
    return {"B": d["A"] * 3 + np.arange(32, dtype=np.int32)[:, None],
            "C": (np.arange(4)[:, None] * 100 + np.arange(32)[None, :]).astype(np.int32)}


@pytest.mark.parametrize("model", MODELS)
def test_a_block_of_x_and_y_threads_is_checked_against_numpy(model):
    # an integer kernel is compared exactly: the exactness decision must not need the 1-D op graph
    res = check_numeric(shift_rows_xy, _shift_rows_numpy, cost_model=model)
    assert res.ok and res.exact, res.message
    assert check_numeric(shift_rows_xy, cost_model=model).ok      # against the numpy interpreter too


def test_a_block_of_x_and_y_threads_is_checked_by_the_command(tmp_path, capsys):
    from tilelayout.cli import main
    kernel = tmp_path / "kernel.tir"
    kernel.write_text(shift_rows_xy.script())
    ref = tmp_path / "ref.py"
    ref.write_text("import numpy as np\n\ndef ref(d):\n"
                   "    return {'B': d['A'] * 3 + np.arange(32, dtype=np.int32)[:, None],\n"
                   "            'C': (np.arange(4)[:, None] * 100 + np.arange(32)[None, :]).astype(np.int32)}\n")
    assert main(["check", str(kernel), "--quiet"]) == 0
    assert main(["check", str(kernel), "--quiet", "--reference", f"{ref}:ref"]) == 0
    assert "ok: match (exact)" in capsys.readouterr().out


def test_a_block_of_x_y_and_z_threads_sums_rows():
    res = check_numeric(row_sums_xyz, lambda d: {"B": d["A"].sum(1)})
    assert res.ok and not res.exact, res.message


# ------------------------------------------------------------------------------------ per-thread local arrays

per_thread_row_sum = parse_main('A: T.Buffer((128, 48), "float32"), B: T.Buffer((128,), "float32")',
                                threads=128, name="per_thread_row_sum", body='''
    acc = T.alloc_buffer((1,), "float32", scope="local")
    acc[0] = T.float32(0)
    for k in T.serial(48):
        acc[0] = acc[0] + A[tx, k]
    B[tx] = acc[0]
''')


per_thread_window = parse_main('A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")',
                               threads=64, name="per_thread_window", body='''
    w = T.alloc_buffer((3,), "float32", scope="local")
    for k in T.serial(3):
        w[k] = A[(tx + k) % 64]
    if w[0] > T.float32(0):                       # a branch on each thread's own copy
        B[tx] = w[0] * T.float32(2) - w[2]
    else:
        B[tx] = w[1]
''')


def test_the_interpreter_gives_each_thread_its_own_local_array():
    inputs = random_inputs(per_thread_row_sum, seed=1)
    out = run_reference(per_thread_row_sum, inputs).outputs["B"]
    np.testing.assert_allclose(out, inputs["A"].sum(1), rtol=1e-5, atol=1e-5)


def test_the_interpreter_branches_on_each_threads_local_copy():
    inputs = random_inputs(per_thread_window, seed=2)
    a = inputs["A"]
    w = np.stack([np.roll(a, -k) for k in range(3)])
    want = np.where(w[0] > 0, w[0] * np.float32(2) - w[2], w[1])
    np.testing.assert_array_equal(run_reference(per_thread_window, inputs).outputs["B"], want)


@pytest.mark.parametrize("model", MODELS)
def test_a_correct_per_thread_accumulation_passes_the_check(model):
    assert check_numeric(per_thread_row_sum, cost_model=model).ok
    assert check_numeric(per_thread_window, cost_model=model).ok


per_thread_value_in_a_tile_op = parse_main('A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")',
                                           threads=64, name="per_thread_value_in_a_tile_op", body='''
    v = T.alloc_buffer((1,), "float32", scope="local")
    v[0] = A[tx]
    Tx.fill(B[0:64], v[0])
''')


def test_a_per_thread_value_where_threads_run_together_is_refused_by_the_interpreter():
    with pytest.raises(UnsupportedByReference, match="per-thread value of v"):
        run_reference(per_thread_value_in_a_tile_op, random_inputs(per_thread_value_in_a_tile_op))


# ------------------------------------------------------------------------------------ float sums in serial loops

def test_a_serial_float_sum_is_compared_within_a_tolerance():
    # numpy sums pairwise, the kernel in order: the last bits differ on most rows
    for seed in range(3):
        res = check_numeric(per_thread_row_sum, lambda d: {"B": d["A"].sum(1)}, seed=seed)
        assert res.ok and not res.exact, res.message
    assert not reference_outputs(per_thread_row_sum, lambda d: {"B": d["A"].sum(1)}).exact


def test_a_wrong_serial_sum_still_fails():
    res = check_numeric(per_thread_row_sum, lambda d: {"B": d["A"][:, 1:].sum(1)})
    assert not res.ok and "B:" in res.message


def test_copies_and_integer_kernels_stay_exact():
    assert reference_outputs(shift_rows_xy, _shift_rows_numpy).exact


# ------------------------------------------------------------------------------------ plain stores to a fragment

_D_WRITE = """
    d[0] = A[3] * T.float32(2)"""
_D_READ = """
    for i in T.parallel(64):
        B[i] = A[i] + d[0]"""


def _one_element_fragment(name: str, *statements: str):
    """A one-element fragment ``d`` next to a 64-thread loop, its store and its read in the order given: the same
    kernel written before it is read and read before it is written."""
    body = '\n    d = T.alloc_buffer((1,), "float32", scope="local.fragment")' + "".join(statements) + "\n"
    return parse_main('A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")', threads=64, name=name, body=body)


one_element_fragment = _one_element_fragment("one_element_fragment", _D_WRITE, _D_READ)
one_element_fragment_read_first = _one_element_fragment("one_element_fragment_read_first", _D_READ, _D_WRITE)


@pytest.mark.parametrize("model", MODELS)
def test_a_fragment_written_by_a_plain_store_is_initialised_even_when_strict(model, monkeypatch):
    import warnings
    monkeypatch.setenv("TILELAYOUT_STRICT", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error", tl.UninitializedReadWarning)
        tl.infer_layouts(one_element_fragment, cost_model=model)
        res = check_numeric(one_element_fragment, lambda d: {"B": d["A"] + d["A"][3] * np.float32(2)},
                            cost_model=model)
    assert res.ok, res.message


def test_a_fragment_read_before_its_plain_store_is_still_reported(monkeypatch):
    monkeypatch.setenv("TILELAYOUT_STRICT", "1")
    with pytest.raises(tl.UninitializedReadError, match="reads fragment d before any op writes it"):
        tl.infer_layouts(one_element_fragment_read_first)


# ------------------------------------------------------------------------------------ pipelined fp8 on the CPU

def _staged_fp8_copy(stages: int, arch: str):
    kernel = parse_main('X: T.Buffer((64, 128), "float8_e4m3fn"), Y: T.Buffer((64, 128), "float32")',
                        threads=128, name="kernel", values={"stages": stages}, body='''
    X_s = T.alloc_buffer((64, 32), "float8_e4m3fn", scope="shared")
    F = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    for ko in T.serial(4, annotations={"num_stages": stages}):
        Tx.copy(X_s[0:64, 0:32], X[0:64, ko * 32:ko * 32 + 32])
        for i in T.parallel(64):
            for j in T.parallel(32):
                F[i, j] = T.Cast("float32", X_s[i, j]) * T.float32(2)
        Tx.copy(Y[0:64, ko * 32:ko * 32 + 32], F[0:64, 0:32])
''')
    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


def _staged_fp8_gemm(stages: int, arch: str, dtype: str = "float8_e4m3fn"):
    kernel = parse_main('A: T.Buffer((64, 128), dtype), B: T.Buffer((64, 128), dtype), '
                        'C: T.Buffer((64, 64), "float32")', threads=128, name="kernel", values={"stages": stages, "dtype": dtype}, body='''
    A_s = T.alloc_buffer((64, 32), dtype, scope="shared")
    B_s = T.alloc_buffer((64, 32), dtype, scope="shared")
    C_frag = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.fill(C_frag[0:64, 0:64], T.float32(0))
    for ko in T.serial(4, annotations={"num_stages": stages}):
        Tx.copy(A_s[0:64, 0:32], A[0:64, ko * 32:ko * 32 + 32])
        Tx.copy(B_s[0:64, 0:32], B[0:64, ko * 32:ko * 32 + 32])
        Tx.gemm(C_frag[0:64, 0:64], A_s[0:64, 0:32], B_s[0:64, 0:32], C_frag[0:64, 0:64], False, True,
                T.float32(1), T.float32(1))
    Tx.copy(C[0:64, 0:64], C_frag[0:64, 0:64])
''')
    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])
def test_a_pipelined_fp8_copy_runs_on_the_cpu(stages, arch):
    res = check_numeric(_staged_fp8_copy(stages, arch), lambda d: {"Y": d["X"].astype(np.float32) * 2})
    assert res.ok and res.exact, res.message


@pytest.mark.parametrize("arch,dtype", [("sm_89", "float8_e4m3fn"), ("sm_90a", "float8_e5m2")])
def test_a_pipelined_fp8_gemm_runs_on_the_cpu(arch, dtype):
    def reference(d):
        return {"C": d["A"].astype(np.float64) @ d["B"].astype(np.float64).T}
    res = check_numeric(_staged_fp8_gemm(2, arch, dtype), reference, tolerance=(1e-5, 1e-5))
    assert res.ok, res.message


def test_the_fp8_poison_of_a_staged_tile_is_a_nan_code():
    import ml_dtypes
    from tilelayout.passes.lowering.cpu_fp8 import constant_code
    for dtype in ("float8_e4m3fn", "float8_e5m2"):
        code = np.array([constant_code(float("nan"), dtype)], np.uint8).view(getattr(ml_dtypes, dtype))
        assert np.isnan(code.astype(np.float32)).all()
        assert constant_code(1e9, dtype) == np.array([ml_dtypes.finfo(getattr(ml_dtypes, dtype)).max],
                                                     getattr(ml_dtypes, dtype)).view(np.uint8)[0]


# ------------------------------------------------------------------------------------ the fuzzer draws these classes

def test_the_fuzzer_draws_the_check_classes_and_keeps_other_kernels_unchanged():
    import random
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from maint import fuzz
    notes = set()
    for k in range(80):
        kernel = fuzz.generate(1, k)
        notes |= set(kernel.notes)
        extra = fuzz._pick(random.Random(f"tilelayout-fuzz-check:1:{k}"), fuzz.CHECK_CLASSES)
        from maint.fuzz_races import racy_kernel
        from maint.fuzz_reducers import reducer_kernel
        if extra == "none" and racy_kernel(1, k) is None and reducer_kernel(1, k) is None:
            # the text earlier runs generated: its own streams
            plain = fuzz.Gen(random.Random(f"tilelayout-fuzz:1:{k}"), 5,
                             random.Random(f"tilelayout-fuzz-safe:1:{k}")).build().text
            text = "\n".join(line for line in kernel.text.split("\n") if "T.func_attr" not in line)
            if "float-identity" in kernel.notes:     # its statements and buffers added, the rest as before
                lines = iter(text.split("\n"))
                assert all(any(line == have for have in lines) for line in plain.split("\n")
                           if not line.startswith("def main("))
            else:
                assert text == plain
    assert {"local-accumulate", "shared-cumsum", "threads-xy"} <= notes
    assert any(n.startswith("staged-float8") for n in notes)
    # a per-thread local accumulation drawn with no other class (its own check is the point here)
    kernel = next(k for k in (fuzz.generate(1, i) for i in range(200))
                  if "local-accumulate" in k.notes and not any(n.startswith(("pipelined", "safe-")) for n in k.notes))
    assert {o.kind for o in fuzz.check(kernel)} == {"ok"}


@pytest.mark.parametrize("form", ("constant", "scaled", "overflow"))
def test_the_fuzzer_draws_float_identities_and_they_check_out(form):
    """Each form of the float-identity class (``(c + x) - c``, ``(x + y c) - y' c``, ``x big - x' big``) is
    drawn, and a kernel of it passes the numeric check (it mismatches when the cancellation is not guarded)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from maint import fuzz
    import warnings
    from tilelayout.errors import TileLayoutResourceWarning
    kernel = next(k for k in (fuzz.generate(99, i) for i in range(200))
                  if f"float-identity-{form}" in k.notes and "gemm" not in k.notes and not k.pins)
    with warnings.catch_warnings():     # a random kernel may be over the register budget: the fuzzer only warns
        warnings.simplefilter("ignore", TileLayoutResourceWarning)
        assert {o.kind for o in fuzz.check(kernel)} == {"ok"}, kernel.text


local_scale_in_a_nest = parse_main('A: T.Buffer((4, 64), "float32"), W: T.Buffer((4,), "float32"), '
                                   'B: T.Buffer((64,), "float32")', threads=32, name="local_scale_in_a_nest", body='''
    acc = T.alloc_buffer((64,), "float32", scope="local.fragment")
    scale = T.alloc_buffer((1,), "float32", scope="local")
    Tx.fill(acc[0:64], T.float32(0))
    for k in T.serial(4):
        scale[0] = W[k] * T.float32(2)               # every thread computes the same value
        for i in T.parallel(64):
            acc[i] = acc[i] + A[k, i] * scale[0]
    Tx.copy(B[0:64], acc[0:64])
''')


def test_a_local_value_every_thread_holds_alike_scales_a_parallel_accumulation_once():
    inputs = random_inputs(local_scale_in_a_nest, seed=5)
    want = (inputs["A"].astype(np.float64) * (2 * inputs["W"].astype(np.float64))[:, None]).sum(0)
    np.testing.assert_allclose(run_reference(local_scale_in_a_nest, inputs).outputs["B"], want, rtol=1e-5, atol=1e-5)
