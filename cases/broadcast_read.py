"""A tiny fragment read by every iteration of a wide parallel loop (TileLang #1729).

``s_frag`` has fewer elements than threads. The two models disagree on purpose:
register-count keeps the legacy 1-slot, partially replicated ``s_frag`` whose induced loop layout
puts all of ``j`` on each thread (2 of 256 threads' worth of distinct work, the rest redundant);
io-aware must see the issue cost of that and pick a fully replicated ``s_frag`` with a
non-replicated, coalesced loop. ``check`` enforces the io-aware side.
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90). register-count: s_frag thread `_rep * 2 + _i`, index `0`,
replicate 128; loop `_rep * 2 + _i` / `_j`, replicate 128 (the #1729 collapse; 4x1024/128:
`_rep * 4 + _i`, replicate 32). io-aware: s_frag `_rep` / `_i`, replicate = threads; loop
`(_i * 640 + _j // 4) % 256` / `(_i * 640 + _j // 4) // 256 * 4 + _j % 4` (4x1024: `_j % 512 // 4` /
`_i * 8 + _j // 512 * 4 + _j % 4`), replicate 1."""


def _broadcast(rows: int, cols: int, threads: int):
    @T.prim_func
    def kernel(S: T.Buffer((rows,), "float32"), Out: T.Buffer((rows, cols), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        s_frag = T.alloc_buffer((rows,), "float32", scope="local.fragment")
        Tx.copy(s_frag[0:rows], S[0:rows])
        for i in T.parallel(rows):
            for j in T.parallel(cols):
                Out[i, j] = s_frag[i] * T.float32(2)
    return kernel


VARIANTS = {
    "issue1729_2x2560_t256": lambda: _broadcast(2, 2560, 256),
    "rows4_cols1024_t128": lambda: _broadcast(4, 1024, 128),
}

THREADS = {"issue1729_2x2560_t256": 256, "rows4_cols1024_t128": 128}

VECTOR_ANCHOR = {
    "issue1729_2x2560_t256": {"io-aware": {"S": 2, "Out": 4}, "register-count": {"Out": 4, "S": 1}},
    "rows4_cols1024_t128": {"io-aware": {"S": 4, "Out": 4}, "register-count": {"Out": 4, "S": 1}},
}


def check(variant, model, result):
    frag = result["buffers"]["s_frag"]
    (key,) = result["loops"]
    loop = result["loops"][key]
    _support.assert_covers(key, loop)
    _support.assert_owned(key, loop, "s_frag", frag, lambda i, j: (i,))
    if model == "io-aware":
        _support.assert_replicate("s_frag", frag, THREADS[variant])
        _support.assert_replicate(f"loop {key}", loop, 1)
