"""Kernels that were once silently wrong (or crashed): each runs the lowered code on the CPU against a numpy
reference written here, independently of the lowering, or checks the typed error a bad kernel gets.

Kernels are TVMScript text parsed with ``tvm.script.from_source``.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilelayout as tl
from tilelayout.errors import TileLayoutError

MODELS = ("register-count", "io-aware")


def _parse(text: str):
    import tvm
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx})


def _run(text: str, *arrays, model: str = "register-count"):
    """The lowered kernel run on the CPU (threads serialised) on copies of ``arrays``."""
    out = [a.copy() for a in arrays]
    tl.build_cpu(_parse(text), cost_model=model)(*out)
    return out


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


# ---------------------------------------------------------------------------------------------------
# 1. Tile ops and parallel nests under a thread-dependent `if`: the fragment used to be laid out over all
# 128 threads although only 64 ran the ops, so half of the elements were never written.

UNDER_IF = '''
@T.prim_func
def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    F = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    if COND:
        Tx.copy(F[0:64, 0:64], A[0:64, 0:64])
        for i in T.parallel(64):
            for j in T.parallel(64):
                F[i, j] = F[i, j] * T.float32(2) + T.float32(1)
        Tx.copy(B[0:64, 0:64], F[0:64, 0:64])
'''


@pytest.mark.parametrize("cond, lo, ext", [("tx < 64", 0, 64), ("tx >= 64", 64, 64), ("64 <= tx and tx < 96", 64, 32),
                                           ("tx > 31 and tx <= 40", 32, 9)])
@pytest.mark.parametrize("model", MODELS)
def test_ops_under_thread_condition_run_on_that_range(cond, lo, ext, model):
    text = UNDER_IF.replace("COND", cond)
    res = tl.infer_layouts(_parse(text), cost_model=model)
    assert res.buffers["F"].thread_range == (lo, ext)
    assert all(l.thread_range[0] >= lo and l.thread_range[0] + l.thread_extent <= lo + ext for l in res.loops.values())
    A = _rand(64, 64)
    _, B = _run(text, A, np.zeros_like(A), model=model)
    np.testing.assert_array_equal(B, A * 2 + 1)


PRODUCER_CONSUMER = '''
@T.prim_func
def main(A: T.Buffer((64, 32), "float32"), B: T.Buffer((64, 32), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    S = T.alloc_buffer((64, 32), "float32", scope="shared")
    P = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    C = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    m = T.alloc_buffer((64,), "float32", scope="local.fragment")
    if tx < 64:
        Tx.copy(P[0:64, 0:32], A[0:64, 0:32])
        for i in T.parallel(64):
            for j in T.parallel(32):
                P[i, j] = P[i, j] + T.float32(3)
        Tx.copy(S[0:64, 0:32], P[0:64, 0:32])
    T.tvm_storage_sync("shared")
    if tx >= 64:
        Tx.copy(C[0:64, 0:32], S[0:64, 0:32])
        Tx.max(m[0:64], C[0:64, 0:32], axes=[1])
        for i in T.parallel(64):
            for j in T.parallel(32):
                C[i, j] = C[i, j] - m[i]
        Tx.copy(B[0:64, 0:32], C[0:64, 0:32])
'''


@pytest.mark.parametrize("model", MODELS)
def test_warp_specialised_producer_consumer(model):
    res = tl.infer_layouts(_parse(PRODUCER_CONSUMER), cost_model=model)
    assert res.buffers["P"].thread_range == (0, 64)
    assert res.buffers["C"].thread_range == (64, 64) and res.buffers["m"].thread_range == (64, 64)
    A = _rand(64, 32)
    _, B = _run(PRODUCER_CONSUMER, A, np.zeros_like(A), model=model)
    P = A + 3
    np.testing.assert_allclose(B, P - P.max(axis=1, keepdims=True), rtol=1e-6)


SHARED_ACROSS_RANGES = '''
@T.prim_func
def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    F = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(F[0:64, 0:64], A[0:64, 0:64])
    if tx < 64:
        Tx.copy(B[0:64, 0:64], F[0:64, 0:64])
'''


def test_fragment_shared_between_ranges_is_refused_or_correct():
    # the fragment is written by all 128 threads, then read by threads 0..63 only: either the layout puts every
    # element of F on threads 0..63 (correct), or the kernel is refused naming the op and the range
    A = _rand(64, 64)
    try:
        _, B = _run(SHARED_ACROSS_RANGES, A, np.zeros_like(A))
    except TileLayoutError as err:
        assert "[0, 64)" in str(err) and "copy B" in str(err)
    else:
        np.testing.assert_array_equal(B, A)


@pytest.mark.parametrize("cond", ["tx % 2 == 0", "tx < 32 or tx >= 96", "tx < bx + 64"])
def test_non_range_thread_condition_is_refused(cond):
    text = UNDER_IF.replace("COND", cond)
    with pytest.raises(TileLayoutError, match="copy F"):
        tl.infer_layouts(_parse(text))


def test_reduction_needing_a_barrier_under_a_thread_condition_is_refused():
    # 9 threads (32..40) hold each row of C: combining them needs a shared-memory exchange behind __syncthreads,
    # which threads outside the condition never reach (a deadlock on a GPU)
    text = PRODUCER_CONSUMER.replace("tx >= 64", "tx > 31 and tx <= 40")
    with pytest.raises(TileLayoutError, match="barrier"):
        tl.infer_layouts(_parse(text))


def test_thread_range_reaches_cuda_source():
    src = tl.cuda_source(_parse(PRODUCER_CONSUMER))
    assert "threadIdx.x" in src and "64" in src
