"""Tiled copies whose global regions start at block-index offsets (``A[by*BM:..., bx*BN:...]``).

Every real kernel copies such sub-regions. The block indices are foreign to the fragment, so an
offset region must score and rank exactly like a zero-offset one: the layouts equal the
elementwise-copy family for the tile shape, coalesced and unreplicated.
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

TILELANG = """TileLang 0.1.15 (sm_90), both models: fp16 64x64 tile of 256x256 -> `_i % 16 * 8 + _j // 8` /
`_i // 16 * 8 + _j % 8` (output [32]); fp32 32x128 tile of 128x512 -> `_i % 4 * 32 + _j // 4` /
`_i // 4 * 4 + _j % 4`."""


def _tiled(m: int, n: int, bm: int, bn: int, dtype: str, threads: int):
    @T.prim_func
    def kernel(A: T.Buffer((m, n), dtype), B: T.Buffer((m, n), dtype)):
        bx = T.launch_thread("blockIdx.x", n // bn)
        by = T.launch_thread("blockIdx.y", m // bm)
        tx = T.launch_thread("threadIdx.x", threads)
        frag = T.alloc_buffer((bm, bn), dtype, scope="local.fragment")
        Tx.copy(frag[0:bm, 0:bn], A[by * bm:by * bm + bm, bx * bn:bx * bn + bn])
        Tx.copy(B[by * bm:by * bm + bm, bx * bn:bx * bn + bn], frag[0:bm, 0:bn])
    return kernel


VARIANTS = {
    "fp16_tile64x64_t128": lambda: _tiled(256, 256, 64, 64, "float16", 128),
    "fp32_tile32x128_t128": lambda: _tiled(128, 512, 32, 128, "float32", 128),
}

CUTE_STATEMENTS = {
    "fp16_tile64x64_t128": {"frag": [256, 256]},
    "fp32_tile32x128_t128": {"frag": [128, 512]},
}


def check(variant, model, result):
    assert result["buffers"]["frag"]["replicate"] == 1, f"a tiled round trip needs no replication: {result['buffers']['frag']}"
