"""Static tiles over dynamic global shapes (``m = T.int32()``, a grid of ``ceildiv(m, tile)`` blocks).

Layouts depend only on the static tiles, so inference is the same as for a fixed shape; what this case
pins is the rest: the last, partial tile reads past the end of the global buffers and must read 0 there,
and its stores past the end must be dropped (the predicates `bounds_guards.py` inserts, TileLang's
safe-memory legalisation). `EXTENTS` lists the sizes `run.py --numeric` runs each variant at: tile
multiples (no partial tile), sizes that are not (a partial last tile), and sizes smaller than one tile.
The numpy interpreter binds the extents from the arrays and models the partial tile on its own.
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90; maint/peer, both models) with `m = T.dynamic("m")`: every buffer and loop
equals ours as a mapping (maint/peer/compare.py). rows_scale: F and the loop thread _i % 8 * 16 + _j // 4, slot
_i // 8 * 4 + _j % 4. row_sums: F thread _i % 4 * 32 + _j // 4; s thread _i % 4 * 32 + _rep, replicate 32.
staged_2d: F thread _i % 16 * 4 + _j // 8. gemm_m: C_frag the wgmma accumulator, thread _i // 16 * 32 + _i % 8
* 4 + _j % 8 // 2. The peer prints layouts only: TileLang's guards for the partial tile (its safe-memory
legalisation) were not compared with ours."""


def _rows_scale(tile: int, n: int, threads: int):
    @T.prim_func
    def kernel(a: T.handle, b: T.handle):
        m = T.int32()
        A = T.match_buffer(a, (m, n), "float32")
        B = T.match_buffer(b, (m, n), "float32")
        bx = T.launch_thread("blockIdx.x", T.ceildiv(m, tile))
        tx = T.launch_thread("threadIdx.x", threads)
        F = T.alloc_buffer((tile, n), "float32", scope="local.fragment")
        Tx.copy(F[0:tile, 0:n], A[bx * tile:bx * tile + tile, 0:n])
        for i in T.parallel(tile):
            for j in T.parallel(n):
                F[i, j] = F[i, j] * T.float32(2) + T.float32(1)
        Tx.copy(B[bx * tile:bx * tile + tile, 0:n], F[0:tile, 0:n])
    return kernel


def _row_sums(tile: int, n: int, threads: int):
    @T.prim_func
    def kernel(a: T.handle, s_out: T.handle):
        m = T.int32()
        A = T.match_buffer(a, (m, n), "float32")
        S = T.match_buffer(s_out, (m,), "float32")
        bx = T.launch_thread("blockIdx.x", T.ceildiv(m, tile))
        tx = T.launch_thread("threadIdx.x", threads)
        F = T.alloc_buffer((tile, n), "float32", scope="local.fragment")
        s = T.alloc_buffer((tile,), "float32", scope="local.fragment")
        Tx.copy(F[0:tile, 0:n], A[bx * tile:bx * tile + tile, 0:n])
        Tx.sum(s[0:tile], F[0:tile, 0:n], axes=[1])
        Tx.copy(S[bx * tile:bx * tile + tile], s[0:tile])
    return kernel


def _staged_2d(tile: int, threads: int):
    @T.prim_func
    def kernel(a: T.handle, b: T.handle):
        m = T.int32()
        n = T.int32()
        A = T.match_buffer(a, (m, n), "float16")
        B = T.match_buffer(b, (m, n), "float16")
        bx = T.launch_thread("blockIdx.x", T.ceildiv(n, tile))
        by = T.launch_thread("blockIdx.y", T.ceildiv(m, tile))
        tx = T.launch_thread("threadIdx.x", threads)
        S = T.alloc_shared((tile, tile), "float16")
        F = T.alloc_buffer((tile, tile), "float16", scope="local.fragment")
        Tx.copy(S[0:tile, 0:tile], A[by * tile:by * tile + tile, bx * tile:bx * tile + tile])
        Tx.copy(F[0:tile, 0:tile], S[0:tile, 0:tile])
        for i in T.parallel(tile):
            for j in T.parallel(tile):
                F[i, j] = F[i, j] + T.float16(1)
        Tx.copy(B[by * tile:by * tile + tile, bx * tile:bx * tile + tile], F[0:tile, 0:tile])
    return kernel


def _gemm_m(tile: int, n: int, k: int, threads: int):
    @T.prim_func
    def kernel(a: T.handle, b: T.handle, c: T.handle):
        m = T.int32()
        A = T.match_buffer(a, (m, k), "float16")
        B = T.match_buffer(b, (k, n), "float16")
        C = T.match_buffer(c, (m, n), "float32")
        bx = T.launch_thread("blockIdx.x", T.ceildiv(m, tile))
        tx = T.launch_thread("threadIdx.x", threads)
        A_s = T.alloc_buffer((tile, k), "float16", scope="shared")
        B_s = T.alloc_buffer((k, n), "float16", scope="shared")
        C_frag = T.alloc_buffer((tile, n), "float32", scope="local.fragment")
        Tx.copy(A_s[0:tile, 0:k], A[bx * tile:bx * tile + tile, 0:k])
        Tx.copy(B_s[0:k, 0:n], B[0:k, 0:n])
        Tx.gemm(C_frag[0:tile, 0:n], A_s[0:tile, 0:k], B_s[0:k, 0:n], C_frag[0:tile, 0:n], False, False, 1.0, 0.0)
        Tx.copy(C[bx * tile:bx * tile + tile, 0:n], C_frag[0:tile, 0:n])
    return kernel


VARIANTS = {
    "rows_scale_64x64_t128": lambda: _rows_scale(64, 64, 128),
    "row_sums_64x128_t128": lambda: _row_sums(64, 128, 128),
    "staged_2d_32x32_t64": lambda: _staged_2d(32, 64),
    "gemm_m_64x64x32_t128": lambda: _gemm_m(64, 64, 32, 128),
}

#: the sizes each variant is run at by ``run.py --numeric``: multiples of the tile, not multiples, under one tile
EXTENTS = {
    "rows_scale_64x64_t128": [{"m": 128}, {"m": 100}, {"m": 37}],
    "row_sums_64x128_t128": [{"m": 192}, {"m": 130}, {"m": 5}],
    "staged_2d_32x32_t64": [{"m": 64, "n": 96}, {"m": 70, "n": 45}, {"m": 3, "n": 31}],
    "gemm_m_64x64x32_t128": [{"m": 128}, {"m": 100}, {"m": 17}],
}


def _sixteen(x):
    return x.astype(np.float16)


REFERENCE = {
    "rows_scale_64x64_t128": lambda a: {"B": a["A"] * np.float32(2) + np.float32(1)},
    "row_sums_64x128_t128": lambda a: {"S": a["A"].astype(np.float64).sum(axis=1).astype(np.float32)},
    "staged_2d_32x32_t64": lambda a: {"B": _sixteen(a["A"] + np.float16(1))},
    "gemm_m_64x64x32_t128": lambda a: {"C": (a["A"].astype(np.float64) @ a["B"].astype(np.float64))
                                       .astype(np.float32)},
}

TOLERANCE = {"row_sums_64x128_t128": (1e-4, 1e-4), "gemm_m_64x64x32_t128": (1e-3, 1e-3)}


def check(variant, model, result):
    for name, d in result["buffers"].items():
        if d["kind"] == "Fragment":
            _support.assert_valid_fragment(name, d)
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
    if variant.startswith("rows_scale"):
        (key,) = _support.loops_with_extents(result, [64, 64])
        _support.assert_owned(key, result["loops"][key], "F", result["buffers"]["F"], lambda i, j: (i, j))
