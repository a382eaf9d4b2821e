"""Row max feeding a broadcast subtract: the softmax-shaped component.

Copy-in, ``Tx.max`` over axis 1, a loop reading ``row_max[i]`` for every column, copy-out. The
reduced fragment's replication is the free degree (one element per row, needed by every column
lane); the elementwise fragments stay unreplicated; both models agree.
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90), both models. 128x256/256: x, y, loop `_i % 4 * 64 + _j // 4` /
`_i // 4 * 4 + _j % 4`; row_max `_i % 4 * 64 + _rep` / `_i // 4`, replicate 64, output [32].
64x128/128: `_i % 4 * 32 + _j // 4`, row_max replicate 32, output [16]."""


def _softmaxish(m: int, n: int, threads: int):
    @T.prim_func
    def kernel(A: T.Buffer((m, n), "float32"), B: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        x = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        row_max = T.alloc_buffer((m,), "float32", scope="local.fragment")
        y = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        Tx.copy(x[0:m, 0:n], A[0:m, 0:n])
        Tx.max(row_max[0:m], x[0:m, 0:n], axes=[1])
        for i in T.parallel(m):
            for j in T.parallel(n):
                y[i, j] = x[i, j] - row_max[i]
        Tx.copy(B[0:m, 0:n], y[0:m, 0:n])
    return kernel


VARIANTS = {
    "64x128_t128": lambda: _softmaxish(64, 128, 128),
    "128x256_t256": lambda: _softmaxish(128, 256, 256),
}


def check(variant, model, result):
    buffers = result["buffers"]
    for name in ("x", "y"):
        _support.assert_replicate(name, buffers[name], 1)
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
        _support.assert_owned(key, loop, "row_max", buffers["row_max"], lambda i, j: (i,))
        _support.assert_owned(key, loop, "x", buffers["x"], lambda i, j: (i, j))
        _support.assert_owned(key, loop, "y", buffers["y"], lambda i, j: (i, j), write=True)
