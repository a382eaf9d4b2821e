"""A fragment pinned by the user with a TIRx ``TileLayout`` (``layout=`` on the buffer) is a strict fact.

``acc`` carries an mma-style thread/lane layout written in TIRx's own notation (laneid/warpid axes).
Inference must read it through ``from_tile_layout``, keep it under both models, and derive every loop
that touches ``acc`` from it; the copies in and out follow the pin instead of planning their own
coalesced layout. A default TIRx layout (every buffer has one) must not count as a pin: ``tmp`` here
is free and simply follows ``acc``.
"""
from tvm.script import tirx as T
from tvm.tirx.layout import S, TileLayout, laneid, warpid
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90, both models), given the same pin through
T.annotate_layout({acc: T.Fragment(...)}), keeps acc as pinned and lays out tmp and the loop identically
(equal as mappings). TIRx's TileLayout notation itself has no TileLang counterpart."""

# 128x128 over 4 warps (2x2): i = (2 warp-rows, 4 atoms, 2 halves, 8 lanes), j = (2 warp-cols, 8 atoms, 4 lanes, 2)
_MMA = TileLayout(S[(2, 4, 2, 8, 2, 8, 4, 2):(2 @ warpid, 32, 2, 4 @ laneid, 1 @ warpid, 4, 1 @ laneid, 1)])


def _pinned():
    @T.prim_func
    def kernel(A: T.Buffer((128, 128), "float32"), B: T.Buffer((128, 128), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        acc = T.alloc_buffer((128, 128), "float32", scope="local.fragment", layout=_MMA)
        tmp = T.alloc_buffer((128, 128), "float32", scope="local.fragment")
        Tx.copy(acc[0:128, 0:128], A[0:128, 0:128])
        for i in T.parallel(128):
            for j in T.parallel(128):
                tmp[i, j] = acc[i, j] * T.float32(0.5)
        Tx.copy(B[0:128, 0:128], tmp[0:128, 0:128])
    return kernel


VARIANTS = {"mma_pin_128x128_t128": _pinned}

_PIN = {"thread": "_i // 64 * 64 + _j // 64 * 32 + _i % 8 * 4 + _j % 8 // 2",
        "index": "_i % 64 // 16 * 32 + _j % 64 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"}


def check(variant, model, result):
    import numpy as np
    from tilelayout import Fragment
    from tilelayout.exprparse import parse_expr
    from tilelayout.expr import _BY_NAME
    pin = Fragment.from_exprs([128, 128], parse_expr(_PIN["thread"], _BY_NAME), [parse_expr(_PIN["index"], _BY_NAME)])
    for name in ("acc", "tmp"):
        got = result["buffers"][name]
        assert np.array_equal(_support.thread_table(got), pin.thread_table()), f"{name} must follow the pin: {got}"
        assert np.array_equal(_support.index_table(got)[..., 0], pin.table()[..., 0]), f"{name} slots must follow the pin"
    (key,) = result["loops"]
    _support.assert_owned(key, result["loops"][key], "acc", result["buffers"]["acc"], lambda i, j: (i, j))
