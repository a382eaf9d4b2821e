"""Prefix sums along fragment rows: a serial loop inside a parallel nest (the manual scan), and
``tilelayout.lang.cumsum`` (TileLang's ``T.cumsum``) forwards, reversed and over a shared tile.

``for i in T.parallel(m): for j in T.serial(1, n): F[i, j] = F[i, j] + F[i, j - 1]`` walks each row
sequentially, so the row must live in the thread running iteration ``i``: the serial axis becomes register
slots of one thread (``F``: thread ``i``, slot ``j``), and lowering unrolls the serial loop so each slot is a
compile-time register. Layouts that spread a row over threads (the coalesced copy's) are refused as roots,
naming the serial access. Over a shared tile the serial loop walks memory, and no fragment constrains it.
``lang.cumsum`` over a whole fragment with more threads than rows (a power-of-two number of threads per row,
up to a warp) splits each row over that many lanes instead: contiguous chunks, scanned per lane, joined by
warp shuffles.
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support
from tilelayout import lang

TILELANG = """TileLang 0.1.15 (sm_90; maint/peer, both models). Manual scan (`for i in T.Parallel(128): for j in
T.serial(1, 128): F[i, j] = F[i, j] + F[i, j - 1]`): compile-time crash, `InternalError: Check failed:
(StructuralEqual()(it->second.indices, indices)) is false: F: (i, j - 1) and (i, j)` (one index per buffer per loop,
#3005). T.cumsum(F, dim=1) over a 64x32 fp32 fragment, 64 threads: F keeps the copy's layout (thread
_i % 8 * 8 + _j // 4, slot _i // 8 * 4 + _j % 4) and the scan goes through a 64x32 shared scratch tile `scan_smem`
(a round trip through shared memory); here the row stays in one thread and the scan runs in registers.
With 128 threads for the 64 rows, TileLang holds 16 registers per thread; we split each row over 2 lanes of
a warp (16 contiguous elements each, a chunk scan joined by a warp-shuffle scan of the chunk totals) and hold
16 as well, where keeping whole rows held 32 (and left half the threads replicating the other half)."""


def _scan(m: int, n: int, threads: int, how: str):
    """``B`` = prefix sums of ``A`` through a fragment F: ``"manual"`` (the serial loop along rows),
    ``"cumsum"`` or ``"cumsum_reverse"`` (``lang.cumsum`` of F along rows), ``"shared_dim0"`` (``lang.cumsum`` of
    a shared tile along columns into F)."""
    @T.prim_func
    def kernel(A: T.Buffer((m, n), "float32"), B: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        if how == "shared_dim0":
            S = T.alloc_shared((m, n), "float32")
        F = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        if how == "shared_dim0":
            Tx.copy(S[0:m, 0:n], A[0:m, 0:n])
            lang.cumsum(S, F, dim=0)
        else:
            Tx.copy(F[0:m, 0:n], A[0:m, 0:n])
            if how == "manual":
                for i in T.parallel(m):
                    for j in T.serial(1, n):
                        F[i, j] = F[i, j] + F[i, j - 1]
            else:
                lang.cumsum(F, dim=1, reverse=how == "cumsum_reverse")
        Tx.copy(B[0:m, 0:n], F[0:m, 0:n])
    return kernel


def manual_scan(m: int, n: int, threads: int):
    return _scan(m, n, threads, "manual")


def _cumsum_shared(m: int, n: int, threads: int):
    return _scan(m, n, threads, "shared_dim0")


VARIANTS = {
    "manual_f32_128x128_t128": lambda: manual_scan(128, 128, 128),
    "cumsum_f32_64x32_t64": lambda: _scan(64, 32, 64, "cumsum"),
    "cumsum_reverse_f32_64x32_t128": lambda: _scan(64, 32, 128, "cumsum_reverse"),
    "cumsum_shared_dim0_f32_32x64_t64": lambda: _scan(32, 64, 64, "shared_dim0"),
}


def _rows(a):
    return {"B": __import__("numpy").cumsum(a["A"], axis=1)}


REFERENCE = {
    "manual_f32_128x128_t128": _rows,
    "cumsum_f32_64x32_t64": _rows,
    "cumsum_reverse_f32_64x32_t128": lambda a: {"B": __import__("numpy").cumsum(a["A"][:, ::-1], axis=1)[:, ::-1]},
    "cumsum_shared_dim0_f32_32x64_t64": lambda a: {"B": __import__("numpy").cumsum(a["A"], axis=0)},
}

TOLERANCE = {v: (1e-5, 1e-4) for v in VARIANTS}


def check(variant, model, result):
    frag = result["buffers"]["F"]
    threads = _support.thread_table(frag)
    if variant.startswith("cumsum_shared"):
        # dim 0 is walked serially in shared memory; the fragment read of each column stays in one thread
        assert (threads == threads[:1]).all(), f"F: each column must be held by one thread: {frag}"
        return
    if variant.startswith("cumsum_reverse"):
        # 64 rows, 128 threads: each row on 2 consecutive lanes of one warp, contiguous halves, every thread busy
        rows, n = threads.shape[0], threads.shape[1]
        lanes = 128 // rows
        want = (np.arange(rows)[:, None] * lanes + np.arange(n)[None, :] // (n // lanes))[..., None]
        assert frag["replicate"] == 1 and (threads == want).all(), f"F: rows split over {lanes} lanes expected: {frag}"
        return
    assert (threads == threads[:, :1]).all(), f"F: each row must be held by one thread (serial axis): {frag}"
