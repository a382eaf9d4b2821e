"""fp16 load -> fp32 compute -> fp32 store: two element widths in one component.

The search must keep ``x16`` and ``x32`` consistent (one logical point, one thread) while each
copy wants a vector sized by its own dtype (8 x fp16 = 4 x fp32 = 16 bytes). Register count keeps
the fp16 split, io-aware the fp32 one; neither replicates.
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90), x16 = x32 = loop. 128x128/128: io-aware `_i % 4 * 32 + _j // 4` /
`_i // 4 * 4 + _j % 4`, register-count `_i % 8 * 16 + _j // 8` / `_i // 8 * 8 + _j % 8`.
64x512/256: io-aware `_i % 2 * 128 + _j // 4` / `_i // 2 * 4 + _j % 4`, register-count
`_i % 4 * 64 + _j // 8` / `_i // 4 * 8 + _j % 8`."""


def _chain(m: int, n: int, threads: int):
    @T.prim_func
    def kernel(A: T.Buffer((m, n), "float16"), B: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        x16 = T.alloc_buffer((m, n), "float16", scope="local.fragment")
        x32 = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        Tx.copy(x16[0:m, 0:n], A[0:m, 0:n])
        for i in T.parallel(m):
            for j in T.parallel(n):
                x32[i, j] = T.Cast("float32", x16[i, j]) * T.float32(2)
        Tx.copy(B[0:m, 0:n], x32[0:m, 0:n])
    return kernel


VARIANTS = {
    "128x128_t128": lambda: _chain(128, 128, 128),
    "64x512_t256": lambda: _chain(64, 512, 256),
}

# io-aware picks the 4-wide split for both dtypes (the fp32 side decides)
VECTOR_ANCHOR = {
    "128x128_t128": {"io-aware": {"A": 4, "B": 4}, "register-count": {"A": 8, "B": 4}},
    "64x512_t256": {"io-aware": {"A": 4, "B": 4}, "register-count": {"A": 8, "B": 4}},
}


def check(variant, model, result):
    for name in ("x16", "x32"):
        _support.assert_replicate(name, result["buffers"][name], 1)
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
        _support.assert_owned(key, loop, "x16", result["buffers"]["x16"], lambda i, j: (i, j))
        _support.assert_owned(key, loop, "x32", result["buffers"]["x32"], lambda i, j: (i, j), write=True)
