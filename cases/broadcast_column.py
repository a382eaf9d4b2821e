"""A per-column vector ``w`` (fragment) scaling every row of a tile: ``Out[i, j] = X[i, j] * w[j]``.

Two attempts compete. Copy-first gives ``w`` one element per thread and makes the loop walk a column
per thread (every row a separate vector step: 4x the issue cost). Loop-first plans the coalesced
4-wide loop and completes ``w`` from it: each column is read by 4 threads, so ``w`` gets exactly those
4 replicas (condensed, not fully replicated), and its slot stays thread-independent: no spill.
io-aware picks the coalesced loop; register-count keeps the 1-register ``w``. (The spill term itself
is pinned by ``register_spill``.)
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90; maint/peer) picks our layouts, equal as mappings. register-count: w
thread i, slot 0; loop thread j, slot i. io-aware: loop thread i % 4 * 32 + j // 4, slot i // 4 * 4 + j % 4;
w replicated 4x (thread rep * 32 + i // 4, slot i % 4). Its io-aware model has no spill term."""


def _scale(m: int, n: int, threads: int):
    @T.prim_func
    def kernel(W: T.Buffer((n,), "float32"), X: T.Buffer((m, n), "float32"), Out: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        w = T.alloc_buffer((n,), "float32", scope="local.fragment")
        Tx.copy(w[0:n], W[0:n])
        for i in T.parallel(m):
            for j in T.parallel(n):
                Out[i, j] = X[i, j] * w[j]
    return kernel


VARIANTS = {
    "m64_n128_t128": lambda: _scale(64, 128, 128),
}


def check(variant, model, result):
    (key,) = result["loops"]
    loop = result["loops"][key]
    _support.assert_covers(key, loop)
    _support.assert_owned(key, loop, "w", result["buffers"]["w"], lambda i, j: (j,))
    if model == "io-aware":
        _support.assert_replicate(f"loop {key}", loop, 1)
        assert loop["output_shape"] == [64], f"io-aware must pick the coalesced 4-wide loop: {loop}"
    else:
        _support.assert_replicate("w", result["buffers"]["w"], 1)
