"""Parallel loops of different extents sharing one fragment (TileLang #2957).

``frag`` has 256 elements; a 100-iteration loop writes its head and a 256-iteration loop reads
(or rewrites) all of it. Correct behaviour: ``frag``'s layout covers all 256 elements, every loop
layout's domain is its loop's full extent (no iteration dropped), and every iteration runs on a
thread that holds the element it touches (writes reach every replica).
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90), both models, both variants: silently wrong. frag gets
`Fragment([100] -> [1])`, thread `_i`, index `0`, threads 100 -- the small loop's layout -- and the
256-iteration loops inherit it (loop layout domain [100]), so iterations 100..255 are predicated
away (`tx < 100`): C[100:256] is never written. Still open (fix proposed in #3063)."""

FULL = 256


def _mixed(small: int, full: int, threads: int, write: bool):
    """A ``small``-iteration loop writes frag; then ``C = frag + 1`` (read), or a ``full`` loop rewrites frag
    first and C copies it (write)."""
    @T.prim_func
    def kernel(C: T.Buffer((full,), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        frag = T.alloc_buffer((full,), "float32", scope="local.fragment")
        Tx.fill(frag[0:full], T.float32(0))
        for i in T.parallel(small):
            frag[i] = T.float32(7 if write else 5)
        if write:
            for i in T.parallel(full):
                frag[i] = T.float32(5)
            for i in T.parallel(full):
                C[i] = frag[i]
        else:
            for i in T.parallel(full):
                C[i] = frag[i] + T.float32(1)
    return kernel


VARIANTS = {
    "read_100_to_256_t128": lambda: _mixed(100, FULL, 128, write=False),
    "write_100_to_256_t128": lambda: _mixed(100, FULL, 128, write=True),
}

#: which loops write frag (the others read it), by loop key
WRITES = {
    "read_100_to_256_t128": {"i[100]"},
    "write_100_to_256_t128": {"i[100]", "i[256]"},
}


def check(variant, model, result):
    frag = result["buffers"]["frag"]
    assert frag["input_shape"] == [FULL], f"frag's layout must cover all {FULL} elements, got {frag['input_shape']}"
    _support.assert_valid_fragment("frag", frag)
    expected_keys = {"read_100_to_256_t128": ["i[100]", "i[256]"],
                     "write_100_to_256_t128": ["i[100]", "i[256]", "i[256]#2"]}[variant]
    assert sorted(result["loops"]) == expected_keys, f"loops {sorted(result['loops'])}, expected {expected_keys}"
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
        _support.assert_owned(key, loop, "frag", frag, lambda i: (i,), write=key in WRITES[variant])
