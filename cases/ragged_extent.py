"""A fragment width larger than, and not a multiple of, the thread count (TileLang #2398).

229 (or 192) columns over 128 threads: some threads hold two elements, some one. Correct
behaviour: a valid predicated layout -- every element on exactly one (thread, slot) inside the
thread range, the loop layout covering all columns, each iteration on the thread that holds the
element it writes -- instead of "no available layout".
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90), both models, all three variants (loop 1x229, loop 1x192, copy
1x229; 128 threads): `InternalError: Check failed: (has_best) is false: no available layout found`
-- every free-mode attempt throws and is swallowed. Widths that are multiples of 128 compile.
Still open."""


def ragged(n: int, threads: int, copy: bool = False):
    """``n`` columns over ``threads`` threads, written by a loop (``Y = 2 X``) or, with ``copy``, by a copy."""
    @T.prim_func
    def kernel(X: T.Buffer((1, n), "float32"), Y: T.Buffer((1, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        frag = T.alloc_buffer((1, n), "float32", scope="local.fragment")
        if copy:
            Tx.copy(frag[0:1, 0:n], X[0:1, 0:n])
        else:
            for i in T.parallel(1):
                for j in T.parallel(n):
                    frag[i, j] = X[i, j] * T.float32(2)
        Tx.copy(Y[0:1, 0:n], frag[0:1, 0:n])
    return kernel


VARIANTS = {
    "loop_1x229_t128": lambda: ragged(229, 128),
    "loop_1x192_t128": lambda: ragged(192, 128),
    "copy_1x229_t128": lambda: ragged(229, 128, copy=True),
}

WIDTH = {"loop_1x229_t128": 229, "loop_1x192_t128": 192, "copy_1x229_t128": 229}


def check(variant, model, result):
    frag = result["buffers"]["frag"]
    assert frag["input_shape"] == [1, WIDTH[variant]], f"frag must cover [1, {WIDTH[variant]}], got {frag['input_shape']}"
    assert frag["replicate"] == 1, f"frag needs no replication, got {frag['replicate']}"
    _support.assert_valid_fragment("frag", frag)
    assert len(result["loops"]) == (0 if variant.startswith("copy") else 1), f"loops: {sorted(result['loops'])}"
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
        _support.assert_owned(key, loop, "frag", frag, lambda i, j: (i, j), write=True)
