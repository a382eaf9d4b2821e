"""Top-k gating of a mixture-of-experts router (TileLang's ``examples/topk`` kernel, ported as written).

Each block takes ``bm`` token rows of router logits into a fragment and, ``k`` times in a serial loop:
row-maximum into ``max_val``; a parallel nest writes the column of every element equal to its row's maximum
into an int32 fragment (``-1`` elsewhere), whose row-maximum is the winning expert; a second nest masks the
winners; a 1-D nest stores the value and index at column ``t`` of the outputs. Pinned:

- ``scores`` and ``expand_idx`` share one layout (every nest reads them element by element together: any
  difference would be a conversion inside the loop, ``k`` times);
- the row results ``max_val`` and ``max_idx`` live in exactly the threads holding their row, replicated over
  them: both nests read ``max_val[i]`` at every ``(i, j)``, so every holder of row ``i`` needs it, and an
  owner subset would cost a broadcast per iteration;
- the int32 reduction and the replicated 1-D store (one replica writes, the rest are guarded) run correctly:
  the numeric check compares the lowered kernel with a numpy top-k written from the kernel's semantics
  (ties: the highest column wins and every tied element is masked at once).
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90, both models) gives the same layouts as ours in all three variants:
e128_k6_b64_t128 scores/expand_idx thread `_i % 4 * 32 + _j // 4`, index `_i // 4 * 4 + _j % 4`; max_val/max_idx
`_i % 4 * 32 + _rep`, replicate 32; e64_k8_b128_t256 `_i % 16 * 16 + _j // 4` / `_i % 16 * 16 + _rep`, replicate
16; e256_k4_b32_t128 `_i % 2 * 64 + _j // 4` / `_i % 2 * 64 + _rep`, replicate 64. Correct; we must match."""


def _topk(blocks: int, bm: int, n: int, k: int, threads: int):
    m = blocks * bm

    @T.prim_func
    def kernel(logits: T.Buffer((m, n), "float32"), gates: T.Buffer((m, k), "float32"),
               indices: T.Buffer((m, k), "int32")):
        bx = T.launch_thread("blockIdx.x", blocks)
        tx = T.launch_thread("threadIdx.x", threads)
        scores = T.alloc_buffer((bm, n), "float32", scope="local.fragment")
        max_val = T.alloc_buffer((bm,), "float32", scope="local.fragment")
        expand_idx = T.alloc_buffer((bm, n), "int32", scope="local.fragment")
        max_idx = T.alloc_buffer((bm,), "int32", scope="local.fragment")
        Tx.copy(scores[0:bm, 0:n], logits[bx * bm:bx * bm + bm, 0:n])
        for t in T.serial(k):
            Tx.fill(expand_idx[0:bm, 0:n], -1)
            Tx.max(max_val[0:bm], scores[0:bm, 0:n], axes=[1])
            for i in T.parallel(bm):
                for j in T.parallel(n):
                    expand_idx[i, j] = T.if_then_else(max_val[i] == scores[i, j], j, expand_idx[i, j])
            Tx.max(max_idx[0:bm], expand_idx[0:bm, 0:n], axes=[1])
            for i in T.parallel(bm):
                for j in T.parallel(n):
                    scores[i, j] = T.if_then_else(max_val[i] == scores[i, j], T.float32(-10000.0), scores[i, j])
            for i in T.parallel(bm):
                gates[bx * bm + i, t] = max_val[i]
                indices[bx * bm + i, t] = max_idx[i]
    return kernel


#: (blocks, block rows, experts, k, threads): TileLang's example defaults (320 tokens, 128 experts, top 6,
#: 64-row blocks, 128 threads), then two points of its autotuning space
SHAPES = {
    "e128_k6_b64_t128": (5, 64, 128, 6, 128),
    "e64_k8_b128_t256": (2, 128, 64, 8, 256),
    "e256_k4_b32_t128": (3, 32, 256, 4, 128),
}

VARIANTS = {name: (lambda s=shape: _topk(*s)) for name, shape in SHAPES.items()}


def _reference(k: int):
    def top_k(d):
        x = d["logits"].astype(np.float32).copy()
        cols = np.arange(x.shape[1])
        gates = np.empty((x.shape[0], k), dtype=np.float32)
        idx = np.empty((x.shape[0], k), dtype=np.int32)
        for t in range(k):
            best = x.max(axis=1)
            won = x == best[:, None]
            gates[:, t] = best
            idx[:, t] = np.where(won, cols, -1).max(axis=1)
            x[won] = np.float32(-10000.0)
        return {"gates": gates, "indices": idx}
    return top_k


REFERENCE = {name: _reference(shape[3]) for name, shape in SHAPES.items()}


def check(variant, model, result):
    buffers = result["buffers"]
    for name in ("scores", "expand_idx", "max_val", "max_idx"):
        _support.assert_valid_fragment(name, buffers[name])
    assert buffers["scores"] == buffers["expand_idx"], \
        f"scores and expand_idx differ: {buffers['scores']} vs {buffers['expand_idx']}"
    for key, loop, per_row in _support.row_statistic_loops(result, "scores", ("max_val", "max_idx")):
        if per_row:         # the store of row results: each reads its own row's
            for name in ("max_val", "max_idx"):
                _support.assert_owned(key, loop, name, buffers[name], lambda i: (i,))
            continue
        # the two element nests: read scores, expand_idx and the row maximum, write one of the first two
        for name, write in (("scores", "#2" in key), ("expand_idx", "#2" not in key)):
            _support.assert_owned(key, loop, name, buffers[name], lambda i, j: (i, j), write=write)
        _support.assert_owned(key, loop, "max_val", buffers["max_val"], lambda i, j: (i,))
