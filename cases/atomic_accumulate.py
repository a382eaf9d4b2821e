"""Atomic read-modify-writes inside parallel loops (TileLang's ``T.atomic_add``; spelled
``tilelayout.lang.atomic_add(B[i], v)`` or TVM's ``T.cuda.atomic_add(T.address_of(B[i]), v)``).

Split-K row sums: every block reduces its K slice into a replicated row-sum fragment and adds it to the
global result atomically. The loop over rows inherits the fragment's 16 replicas, so only replica 0 may
perform the atomic (the replica guard covers atomics like stores); the atomic stays scalar (never inside
a vector lane loop). Histogram in shared memory: the bins are zeroed, updated atomically by every thread
and copied out; barriers go before and after the atomic nest (TVM's barrier insertion does not see an
atomic through ``address_of`` as an access). On the CPU the atomics run as plain updates, threads in turn.
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support
from tilelayout import lang

TILELANG = """TileLang 0.1.15 (sm_90; maint/peer, both models), `T.atomic_add(Out[i], s[i])` and
`T.atomic_add(H[(A[i, j] % bins + bins) % bins], 1)`: the same layouts as ours. Split-K: F thread
_i % 8 * 16 + _j // 4, s and the row loop thread _i % 8 * 16 + _rep with 16 replicas, slot _i // 8. Histogram: the
fused loop i_j_fused[4096] thread _i % 128, slot _i // 128 (our (i, j) loop, equal as a mapping); bin loops thread
_i. (The peer prints layouts only; TileLang's generated code was not compared.)"""


def split_k(m: int, k: int, splits: int, threads: int):
    kt = k // splits

    @T.prim_func
    def kernel(A: T.Buffer((m, k), "float32"), Out: T.Buffer((m,), "float32")):
        bx = T.launch_thread("blockIdx.x", splits)
        tx = T.launch_thread("threadIdx.x", threads)
        F = T.alloc_buffer((m, kt), "float32", scope="local.fragment")
        s = T.alloc_buffer((m,), "float32", scope="local.fragment")
        Tx.copy(F[0:m, 0:kt], A[0:m, bx * kt:bx * kt + kt])
        Tx.sum(s[0:m], F[0:m, 0:kt], axes=[1])
        for i in T.parallel(m):
            lang.atomic_add(Out[i], s[i])
    return kernel


def _histogram(m: int, n: int, bins: int, threads: int):
    @T.prim_func
    def kernel(A: T.Buffer((m, n), "int32"), Hist: T.Buffer((bins,), "int32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        H = T.alloc_shared((bins,), "int32")
        for b in T.parallel(bins):
            H[b] = 0
        for i in T.parallel(m):
            for j in T.parallel(n):
                lang.atomic_add(H[(A[i, j] % bins + bins) % bins], 1)
        for b in T.parallel(bins):
            Hist[b] = H[b]
    return kernel


VARIANTS = {
    "split_k_rowsum_64x256_k4_t128": lambda: split_k(64, 256, 4, 128),
    "shared_histogram_64x64_b16_t128": lambda: _histogram(64, 64, 16, 128),
}

REFERENCE = {
    "split_k_rowsum_64x256_k4_t128": lambda a: {"Out": a["Out"] + a["A"].sum(axis=1, dtype=np.float64).astype(np.float32)},
    "shared_histogram_64x64_b16_t128": lambda a: {"Hist": np.bincount(np.mod(a["A"], 16).ravel(), minlength=16).astype(np.int32)},
}

TOLERANCE = {"split_k_rowsum_64x256_k4_t128": (1e-4, 1e-3)}


def check(variant, model, result):
    (key,) = _support.loops_with_extents(result, [64] if variant.startswith("split") else [64, 64])
    _support.assert_covers(key, result["loops"][key])
