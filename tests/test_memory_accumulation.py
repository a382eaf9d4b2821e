"""Stores to one global or shared element from several parallel iterations, float self-comparisons (NaN tests)
and storage-scope spellings. Each accepted kernel runs lowered on the CPU against a numpy reference written
here; each refusal is checked for its type and for naming the buffer. The one-thread-per-element property of a
memory update is checked by enumerating the chosen loop layout (the CPU check runs threads one after another
and could not see two threads updating one element)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tilelayout as tl
from conftest import gemm_body, main_text
from tilelayout.evaluate import evaluate, grid_env
from tilelayout.layout import rep_placeholder

MODELS = ("register-count", "io-aware")


def _parse(text: str):
    import tvm
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx})


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


HEAD = '''
@T.prim_func
def main(A: T.Buffer((BLOCKS * 8, 16), "float32"), O: T.Buffer((BLOCKS * 8, 4), "float32")):
    bx = T.launch_thread("blockIdx.x", BLOCKS)
    tx = T.launch_thread("threadIdx.x", THREADS)
'''

NEST = '''    for i in T.parallel(8):
        for j in T.parallel(16):
            BODY
'''

#: name -> (extra lines before the nest, the nest body, numpy reference of O from (A, O))
UPDATES = {
    "sum_global": ("", "O[bx * 8 + i, 0] = O[bx * 8 + i, 0] + A[bx * 8 + i, j]",
                   lambda a, o: _col(o, 0, o[:, 0] + a.sum(1))),
    "max_global": ("", "O[bx * 8 + i, 1] = T.max(O[bx * 8 + i, 1], A[bx * 8 + i, j])",
                   lambda a, o: _col(o, 1, np.maximum(o[:, 1], a.max(1)))),
    "grouped_global": ("", "O[bx * 8 + i, j // 4] = O[bx * 8 + i, j // 4] + A[bx * 8 + i, j]",
                       lambda a, o: o + a.reshape(-1, 4, 4).sum(-1)),
    "guarded_update": ("", "if A[bx * 8 + i, j] > T.float32(0):\n                O[bx * 8 + i, 2] = O[bx * 8 + i, 2] + A[bx * 8 + i, j]",
                       lambda a, o: _col(o, 2, o[:, 2] + np.where(a > 0, a, 0).sum(1))),
    "fragment_source": ('''    F = T.alloc_buffer((8, 16), "float32", scope="local.fragment")
    Tx.copy(F[0:8, 0:16], A[bx * 8:bx * 8 + 8, 0:16])
''', "O[bx * 8 + i, 3] = O[bx * 8 + i, 3] + F[i, j] * T.float32(2)",
                        lambda a, o: _col(o, 3, o[:, 3] + 2 * a.sum(1))),
}


def _col(o, c, values):
    out = o.copy()
    out[:, c] = values
    return out


def _kernel(name: str, threads: int = 32, blocks: int = 2) -> str:
    pre, body, _ = UPDATES[name]
    head = HEAD.replace("BLOCKS", str(blocks)).replace("THREADS", str(threads))
    return head + pre + NEST.replace("BODY", body)


def _threads_per_element(layout, extents, element) -> dict:
    """{element: set of threads running an iteration that stores it} (replica 0), by enumeration."""
    env = grid_env(layout.forward_vars + [rep_placeholder()], list(extents) + [1])
    thread = np.broadcast_to(evaluate(layout.forward_thread, env), tuple(extents) + (1,))[..., 0]
    out: dict = {}
    for point in np.ndindex(*extents):
        out.setdefault(element(*point), set()).add(int(thread[point]))
    return out


@pytest.mark.parametrize("threads", (32, 128, 5))
@pytest.mark.parametrize("name", sorted(UPDATES))
@pytest.mark.parametrize("model", MODELS)
def test_memory_update_runs_each_element_in_one_thread(name, model, threads):
    text = _kernel(name, threads)
    res = tl.infer_layouts(_parse(text), cost_model=model)
    (loop,) = [lay for key, lay in res.loops.items() if key.startswith("i,j[8x16]")]
    group = 4 if name == "grouped_global" else 16
    owners = _threads_per_element(loop, (8, 16), lambda i, j: (i, j // group))
    assert all(len(t) == 1 for t in owners.values()), owners
    A, O = _rand(16, 16), _rand(16, 4, seed=1)
    a, o = A.copy(), O.copy()
    tl.build_cpu(_parse(text), cost_model=model)(a, o)
    np.testing.assert_allclose(o, UPDATES[name][2](A, O), rtol=1e-5, atol=1e-5)


SHARED = main_text('A: T.Buffer((8, 16), "float32"), O: T.Buffer((8,), "float32")', threads=64, body='''
    S = T.alloc_buffer((8,), "float32", scope="SCOPE")
    for i in T.parallel(8):
        S[i] = T.float32(0)
    for i in T.parallel(8):
        for j in T.parallel(16):
            S[i] = S[i] + A[i, j] * A[i, j]
    for i in T.parallel(8):
        O[i] = S[i]
''')


@pytest.mark.parametrize("scope", ("shared", "shared.dyn"))
@pytest.mark.parametrize("model", MODELS)
def test_shared_accumulator_is_summed_in_one_thread_per_row(scope, model):
    text = SHARED.replace("SCOPE", scope)
    A = _rand(8, 16)
    o = np.zeros(8, "float32")
    tl.build_cpu(_parse(text), cost_model=model)(A.copy(), o)
    np.testing.assert_allclose(o, (A * A).sum(1), rtol=1e-5)
    src = tl.cuda_source(_parse(text))
    assert "__shared__" in src


RACES = {
    "plain_store": "O[i, 0] = A[i, j]",
    "two_stores": "O[i, 0] = O[i, 0] + A[i, j]\n            O[i, 0] = O[i, 0] * T.float32(2)",
    "other_element": "O[i, 0] = O[i, 1] + A[i, j]",
}


@pytest.mark.parametrize("name", sorted(RACES))
def test_write_race_is_refused_by_name(name):
    text = HEAD.replace("BLOCKS", "1").replace("THREADS", "32") + NEST.replace("BODY", RACES[name])
    with pytest.raises(tl.WriteRaceError) as err:
        tl.infer_layouts(_parse(text))
    assert "buffer O" in str(err.value) and "line" in str(err.value)


def test_update_under_a_conflicting_fragment_layout_is_refused_with_the_fix():
    text = main_text('A: T.Buffer((64, 32), "float16"), B: T.Buffer((32, 64), "float16"), O: T.Buffer((64,), "float32")',
                     threads=128, body=gemm_body(64, 64, 32, acc="C") + '''
    for i in T.parallel(64):
        for j in T.parallel(64):
            O[i] = O[i] + C[i, j]
''')
    with pytest.raises(tl.WriteRaceError) as err:
        tl.infer_layouts(_parse(text))
    msg = str(err.value)
    assert "O" in msg and "Tx.sum" in msg and "atomic_add" in msg


def test_store_under_a_one_iteration_condition_is_not_a_race():
    text = HEAD.replace("BLOCKS", "1").replace("THREADS", "32") + NEST.replace(
        "BODY", "if j == 5:\n                O[i, 0] = A[i, j]")
    A, O = _rand(8, 16), _rand(8, 4, seed=1)
    o = O.copy()
    tl.build_cpu(_parse(text))(A.copy(), o)
    np.testing.assert_array_equal(o, _col(O, 0, A[:, 5]))


FRAGMENT_FORM = main_text('A: T.Buffer((8, 16), "float32"), O: T.Buffer((8,), "float32")', threads=32, body='''
    F = T.alloc_buffer((8, 16), "float32", scope="local.fragment")
    r = T.alloc_buffer((8,), "float32", scope="local.fragment")
    Tx.copy(F[0:8, 0:16], A[0:8, 0:16])
    Tx.fill(r[0:8], T.float32(0))
    for i in T.parallel(8):
        for j in T.parallel(16):
            BODY
    Tx.copy(O[0:8], r[0:8])
''')


@pytest.mark.parametrize("body, reference", [
    ("r[i] = F[i, j]", lambda a: a[:, -1]),                       # the last iteration's value, in every holder
    ("r[i] = r[i] + F[i, j]", lambda a: a.sum(1)),                 # the iterations in order, in every holder
    ("r[i] = T.max(r[i], F[i, j] - T.float32(1))", lambda a: np.maximum(0, (a - 1).max(1))),
])
@pytest.mark.parametrize("model", MODELS)
def test_fragment_written_by_many_iterations_keeps_iteration_order(body, reference, model):
    text = FRAGMENT_FORM.replace("BODY", body)
    A = _rand(8, 16)
    o = np.zeros(8, "float32")
    tl.build_cpu(_parse(text), cost_model=model)(A.copy(), o)
    np.testing.assert_allclose(o, reference(A), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------
# float self-comparisons are NaN tests

NAN = main_text('A: T.Buffer((64,), "DT"), B: T.Buffer((64,), "DT")', threads=64, body='''
    for i in T.parallel(64):
        B[i] = EXPR
''')


@pytest.mark.parametrize("dtype", ("float32", "float16"))
@pytest.mark.parametrize("expr, reference", [
    ("T.if_then_else(A[i] != A[i], T.DT(-1), A[i])", lambda a: np.where(np.isnan(a), -1, a)),
    ("T.if_then_else(A[i] == A[i], A[i], T.DT(0))", lambda a: np.where(np.isnan(a), 0, a)),
    ("T.if_then_else(A[i] <= A[i], A[i], T.DT(3))", lambda a: np.where(np.isnan(a), 3, a)),
])
def test_self_comparison_is_a_nan_test(expr, reference, dtype):
    text = NAN.replace("EXPR", expr).replace("DT", dtype)
    A = np.arange(64).astype(dtype)
    A[::3] = np.nan
    B = np.zeros(64, dtype)
    tl.build_cpu(_parse(text))(A.copy(), B)
    np.testing.assert_array_equal(B, reference(A).astype(dtype))
    src = tl.cuda_source(_parse(text))
    body = src[src.index("main_kernel("):]
    # isnan(x) reaches CUDA as the IEEE self-comparison ``x != x`` (nvcc keeps it, fast math included)
    assert re.search(r"(\(?[\w\[\]\(\)\. ]+\)?) != \1", body) or "isnan" in body, body


# ---------------------------------------------------------------------------------------------------
# storage scopes

SCOPED = main_text('A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")', threads=128, body='''
    tile = T.alloc_buffer((64, 64), "float32", scope="SCOPE")
    Tx.copy(tile[0:64, 0:64], A[0:64, 0:64])
    Tx.copy(B[0:64, 0:64], tile[0:64, 0:64])
''')


@pytest.mark.parametrize("scope, suggestion", [("fragment", "local.fragment"), ("local.fragments", "local.fragment"),
                                               ("shared.dynamic", "shared.dyn"), ("Shared", "shared")])
def test_unknown_scope_is_refused_with_the_closest_valid_one(scope, suggestion):
    with pytest.raises(tl.ScopeError) as err:
        tl.infer_layouts(_parse(SCOPED.replace("SCOPE", scope)))
    assert "buffer tile" in str(err.value) and f'did you mean "{suggestion}"' in str(err.value)


@pytest.mark.parametrize("scope", ("shared", "shared.dyn", "local.fragment"))
def test_valid_scopes_copy_correctly(scope):
    A = _rand(64, 64)
    B = np.zeros_like(A)
    tl.build_cpu(_parse(SCOPED.replace("SCOPE", scope)))(A.copy(), B)
    np.testing.assert_array_equal(A, B)
