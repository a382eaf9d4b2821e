"""Combining split-KV attention partials (the ``combine`` kernel of TileLang's ``examples/deepseek_mla`` and
``examples/flash_decoding``, ported as written).

Flash decoding splits the key sequence of one query into ``num_split`` parts; each part writes its partial output
row and its log-sum-exp (base 2). One block per (head, batch) then combines them: a serial loop takes the largest
log-sum-exp into a local scalar, a second sums ``exp2(lse_k - max)`` into another, and for every split a
parallel nest loads the partial row into ``po_local`` and a second one adds it, scaled by ``exp2(lse_k -
lse_total)``, into the float32 accumulator ``o_accum_local``; a last nest stores the row. The scalars are
``T.alloc_local`` arrays whose every store is block-uniform (global reads and other such scalars), which the
parallel nests read at every element. Pinned:

- ``po_local`` and ``o_accum_local`` share one layout, spread over every thread (no replica), so the row is
  loaded, scaled and stored without moving an element between threads;
- the local scalars stay local (per-thread registers, no layout), and a nest reading one needs nothing of
  its layout;
- lowered and run on the CPU, the kernel matches a numpy combine written from the definitions
  (``sum_k exp2(lse_k - lse) * partial_k`` with ``lse = log2(sum_k exp2(lse_k))``).
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90, both models) gives the same layouts as ours in all three variants
(`maint/peer/tilelang_output.txt`): po_local and o_accum_local share one unreplicated layout over every
thread. Correct; we must match."""


def _combine(batch: int, heads: int, num_split: int, dim: int, threads: int):
    @T.prim_func
    def kernel(glse: T.Buffer((batch, heads, num_split), "float32"),
               Output_partial: T.Buffer((batch, heads, num_split, dim), "float16"),
               Output: T.Buffer((batch, heads, dim), "float16")):
        by = T.launch_thread("blockIdx.x", heads)
        bz = T.launch_thread("blockIdx.y", batch)
        tx = T.launch_thread("threadIdx.x", threads)
        po_local = T.alloc_buffer((dim,), "float16", scope="local.fragment")
        o_accum_local = T.alloc_buffer((dim,), "float32", scope="local.fragment")
        lse_local_split = T.alloc_buffer((1,), "float32", scope="local")
        lse_logsum_local = T.alloc_buffer((1,), "float32", scope="local")
        lse_max_local = T.alloc_buffer((1,), "float32", scope="local")
        scale_local = T.alloc_buffer((1,), "float32", scope="local")
        lse_logsum_local[0] = T.float32(0)
        Tx.fill(o_accum_local[0:dim], T.float32(0))
        lse_max_local[0] = T.float32(-3.4028234663852886e38)
        for k in T.serial(num_split):
            lse_max_local[0] = T.max(lse_max_local[0], glse[bz, by, k])
        for k in T.serial(num_split):
            lse_local_split[0] = glse[bz, by, k]
            lse_logsum_local[0] = lse_logsum_local[0] + T.exp2(lse_local_split[0] - lse_max_local[0])
        lse_logsum_local[0] = T.log2(lse_logsum_local[0]) + lse_max_local[0]
        for k in T.serial(num_split):
            for i in T.parallel(dim):
                po_local[i] = Output_partial[bz, by, k, i]
            lse_local_split[0] = glse[bz, by, k]
            scale_local[0] = T.exp2(lse_local_split[0] - lse_logsum_local[0])
            for i in T.parallel(dim):
                o_accum_local[i] = o_accum_local[i] + T.Cast("float32", po_local[i]) * scale_local[0]
        for i in T.parallel(dim):
            Output[bz, by, i] = T.Cast("float16", o_accum_local[i])
    return kernel


#: (batch, heads, splits, head dim, threads): the MLA decode example's combine (value dim 512, 128 threads),
#: flash decoding's GQA example (dim 128, 16 splits), and a 64-thread block over a 64-wide row
SHAPES = {
    "mla_d512_s4_t128": (2, 4, 4, 512, 128),
    "gqa_d128_s16_t128": (2, 3, 16, 128, 128),
    "d64_s8_t64": (1, 2, 8, 64, 64),
}

VARIANTS = {name: (lambda s=shape: _combine(*s)) for name, shape in SHAPES.items()}


def _reference(d: dict) -> dict:
    lse = d["glse"].astype(np.float64)                                   # (batch, heads, splits)
    part = d["Output_partial"].astype(np.float64)                        # (batch, heads, splits, dim)
    total = np.log2(np.exp2(lse - lse.max(-1, keepdims=True)).sum(-1, keepdims=True)) + lse.max(-1, keepdims=True)
    weights = np.exp2(lse - total)                                       # sums to 1 over the splits
    return {"Output": (weights[..., None] * part).sum(axis=2)}


REFERENCE = {name: _reference for name in VARIANTS}
TOLERANCE = {name: (2e-3, 2e-3) for name in VARIANTS}     # the row is stored as float16


def check(variant, model, result):
    buffers = result["buffers"]
    threads = SHAPES[variant][4]
    for name in ("po_local", "o_accum_local"):
        _support.assert_valid_fragment(name, buffers[name])
        _support.assert_replicate(name, buffers[name], 1)
    assert buffers["po_local"] == buffers["o_accum_local"], \
        f"po_local and o_accum_local differ: {buffers['po_local']} vs {buffers['o_accum_local']}"
    used = np.unique(_support.block_threads(buffers["o_accum_local"]))
    assert used.size == threads, f"o_accum_local uses {used.size} of {threads} threads"
    for name in ("lse_local_split", "lse_logsum_local", "lse_max_local", "scale_local"):
        assert name not in buffers, f"the local scalar {name} was given a layout: {buffers[name]}"
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
        _support.assert_replicate(f"loop {key}", loop, 1)
        for name in ("po_local", "o_accum_local"):
            _support.assert_owned(key, loop, name, buffers[name], lambda i: (i,), write=True)
