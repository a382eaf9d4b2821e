"""Flash-attention forward as TileLang users write it (examples/flash_attention/example_mha_fwd_bhsd.py).

Q tile in shared memory, a serial loop over K/V blocks, ``S = Q K^T`` into a register accumulator, the
online softmax (running row max, ``exp2``, row sum, rescale of the output accumulator), ``P = S`` cast to
fp16 and kept in registers as the A operand of ``O += P V``, and ``O /= l`` at the end. The variant name
starts with its target (the kernel carries it as its ``target`` attribute).

It pins: both gemms take one instruction and one warp partition (all warps on M: ``warp_policy="full_row"``
as the example writes it, or chosen jointly for the chain when the user gives no policy); ``S``, ``P`` and
``O`` give every row to the same four lanes of one warp (mma.sync/wgmma accumulator lanes) and the row
vectors (running max, scale, sum, log-sum) live exactly there, replicated over the quad (replicate 4).
"""
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (maint/peer, both cost models; each variant compared on its own target with
maint/peer/compare.py). Every variant TileLang infers equals ours as mappings: acc_s, acc_s_cast, acc_o, the
five row vectors, every loop and the Q/K/V/O shared swizzles (sm_80: mma.sync accumulator, warp
i // (bm / warps) owns contiguous rows; sm_90: wgmma, warp w of a warpgroup owns rows 16w..16w+15 of each
64-row block; row vectors `... + _rep`, replicate 4). Where we differ, sm80_d64_b64x64_t128_default_policy
(no warp_policy): TileLang plans each gemm alone with its Square default (2x2 warps), so acc_s_cast gets the
second gemm's A layout replicated over N-warps that acc_s cannot feed, and it stops with "InternalError:
Layout infer conflict between acc_s and acc_s_cast in T.Parallel loop"; we see that the gemms are chained
and put all warps on M for both. On sm_90 Square already gives one warpgroup on M and both agree."""

NEG_INF = float("-inf")


def attention(arch: str, dim: int, bm: int, bn: int, threads: int, causal: bool, policy: bool = True,
              batch: int = 1, heads: int = 1, seq: int = 0, masked: bool = False, stages: int = 0):
    """The kernel; with ``masked`` it takes a block mask ``BlockSparseMask`` and runs a K/V block only where the
    query block's mask row is set (``block_sparse_attention``: the same kernel otherwise, so one body serves);
    ``stages`` annotates the K/V loop with ``num_stages`` (TileLang's ``T.Pipelined``)."""
    seq = seq or 2 * max(bm, bn)
    scale = (1.0 / dim) ** 0.5 * 1.44269504      # softmax in base 2: exp(x / sqrt(d)) = exp2(x * scale)
    blocks = seq // bn
    shape = (batch, heads, seq, dim)
    notes = {"num_stages": stages} if stages else {}

    @T.macro
    def step(Q_shared, K_shared, V_shared, acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale,
             scores_sum, logsum, K, V, bx, by, bz, k):
        Tx.copy(K_shared[0:bn, 0:dim], K[bz, by, k * bn:k * bn + bn, 0:dim])
        if causal:
            for i in T.parallel(bm):
                for j in T.parallel(bn):
                    acc_s[i, j] = T.if_then_else(bx * bm + i >= k * bn + j, T.float32(0), T.float32(NEG_INF))
        else:
            Tx.fill(acc_s[0:bm, 0:bn], T.float32(0))
        if policy:
            Tx.gemm(acc_s[0:bm, 0:bn], Q_shared[0:bm, 0:dim], K_shared[0:bn, 0:dim], acc_s[0:bm, 0:bn], False,
                    True, T.float32(1), T.float32(1), warp_policy="full_row")
        else:
            Tx.gemm(acc_s[0:bm, 0:bn], Q_shared[0:bm, 0:dim], K_shared[0:bn, 0:dim], acc_s[0:bm, 0:bn], False,
                    True, T.float32(1), T.float32(1))
        Tx.copy(scores_max_prev[0:bm], scores_max[0:bm])
        Tx.fill(scores_max[0:bm], T.float32(NEG_INF))
        Tx.max(scores_max[0:bm], acc_s[0:bm, 0:bn], axes=[1], accum=True)
        for i in T.parallel(bm):
            scores_max[i] = T.max(scores_max[i], scores_max_prev[i])
        for i in T.parallel(bm):
            scores_scale[i] = T.exp2(scores_max_prev[i] * T.float32(scale) - scores_max[i] * T.float32(scale))
        for i in T.parallel(bm):
            for j in T.parallel(bn):
                acc_s[i, j] = T.exp2(acc_s[i, j] * T.float32(scale) - scores_max[i] * T.float32(scale))
        Tx.sum(scores_sum[0:bm], acc_s[0:bm, 0:bn], axes=[1])
        for i in T.parallel(bm):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        Tx.copy(acc_s_cast[0:bm, 0:bn], acc_s[0:bm, 0:bn])
        for i in T.parallel(bm):
            for j in T.parallel(dim):
                acc_o[i, j] = acc_o[i, j] * scores_scale[i]
        Tx.copy(V_shared[0:bn, 0:dim], V[bz, by, k * bn:k * bn + bn, 0:dim])
        if policy:
            Tx.gemm(acc_o[0:bm, 0:dim], acc_s_cast[0:bm, 0:bn], V_shared[0:bn, 0:dim], acc_o[0:bm, 0:dim],
                    False, False, T.float32(1), T.float32(1), warp_policy="full_row")
        else:
            Tx.gemm(acc_o[0:bm, 0:dim], acc_s_cast[0:bm, 0:bn], V_shared[0:bn, 0:dim], acc_o[0:bm, 0:dim],
                    False, False, T.float32(1), T.float32(1))

    @T.macro
    def body(Q, K, V, O, BlockSparseMask):
        bx = T.launch_thread("blockIdx.x", seq // bm)
        by = T.launch_thread("blockIdx.y", heads)
        bz = T.launch_thread("blockIdx.z", batch)
        tx = T.launch_thread("threadIdx.x", threads)
        Q_shared = T.alloc_buffer((bm, dim), "float16", scope="shared.dyn")
        K_shared = T.alloc_buffer((bn, dim), "float16", scope="shared.dyn")
        V_shared = T.alloc_buffer((bn, dim), "float16", scope="shared.dyn")
        O_shared = T.alloc_buffer((bm, dim), "float16", scope="shared.dyn")
        acc_s = T.alloc_buffer((bm, bn), "float32", scope="local.fragment")
        acc_s_cast = T.alloc_buffer((bm, bn), "float16", scope="local.fragment")
        acc_o = T.alloc_buffer((bm, dim), "float32", scope="local.fragment")
        scores_max = T.alloc_buffer((bm,), "float32", scope="local.fragment")
        scores_max_prev = T.alloc_buffer((bm,), "float32", scope="local.fragment")
        scores_scale = T.alloc_buffer((bm,), "float32", scope="local.fragment")
        scores_sum = T.alloc_buffer((bm,), "float32", scope="local.fragment")
        logsum = T.alloc_buffer((bm,), "float32", scope="local.fragment")
        if masked:
            block_mask = T.alloc_buffer((blocks,), "bool", scope="local")
        Tx.copy(Q_shared[0:bm, 0:dim], Q[bz, by, bx * bm:bx * bm + bm, 0:dim])
        Tx.fill(acc_o[0:bm, 0:dim], T.float32(0))
        Tx.fill(logsum[0:bm], T.float32(0))
        Tx.fill(scores_max[0:bm], T.float32(NEG_INF))
        if masked:
            for vj in T.serial(blocks):
                block_mask[vj] = BlockSparseMask[bz, by, bx, vj]
        for k in T.serial(T.min(blocks, (bx * bm + bm + bn - 1) // bn) if causal else blocks, annotations=notes):
            if masked:
                if block_mask[k]:
                    step(Q_shared, K_shared, V_shared, acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev,
                         scores_scale, scores_sum, logsum, K, V, bx, by, bz, k)
            else:
                step(Q_shared, K_shared, V_shared, acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev,
                     scores_scale, scores_sum, logsum, K, V, bx, by, bz, k)
        for i in T.parallel(bm):
            for j in T.parallel(dim):
                acc_o[i, j] = acc_o[i, j] / logsum[i]
        Tx.copy(O_shared[0:bm, 0:dim], acc_o[0:bm, 0:dim])
        Tx.copy(O[bz, by, bx * bm:bx * bm + bm, 0:dim], O_shared[0:bm, 0:dim])

    if masked:
        @T.prim_func
        def kernel(Q: T.Buffer(shape, "float16"), K: T.Buffer(shape, "float16"), V: T.Buffer(shape, "float16"),
                   BlockSparseMask: T.Buffer((batch, heads, seq // bm, blocks), "bool"), O: T.Buffer(shape, "float16")):
            body(Q, K, V, O, BlockSparseMask)
    else:
        @T.prim_func
        def kernel(Q: T.Buffer(shape, "float16"), K: T.Buffer(shape, "float16"), V: T.Buffer(shape, "float16"),
                   O: T.Buffer(shape, "float16")):
            body(Q, K, V, O, None)

    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


def _flash(arch: str, dim: int, bm: int, bn: int, threads: int, causal: bool, policy: bool = True,
           batch: int = 1, heads: int = 1, stages: int = 0):
    return attention(arch, dim, bm, bn, threads, causal, policy, batch, heads, stages=stages)


SHAPES = {  # (dim, block_M, block_N, threads, causal)
    "d64_b64x64_t128": (64, 64, 64, 128, False),
    "d64_b64x64_t128_causal": (64, 64, 64, 128, True),
    "d128_b128x128_t256": (128, 128, 128, 256, False),
    "d128_b128x128_t256_causal": (128, 128, 128, 256, True),
    "d64_b128x128_t128_causal": (64, 128, 128, 128, True),
    "d128_b64x64_t128": (128, 64, 64, 128, False),
}
ARCHS = {"sm80": "sm_80", "sm90": "sm_90"}

VARIANTS, REFERENCE, TOLERANCE = {}, {}, {}
for _tag, _arch in ARCHS.items():
    for _name, _shape in SHAPES.items():
        VARIANTS[f"{_tag}_{_name}"] = (lambda a=_arch, s=_shape: _flash(a, *s))
    VARIANTS[f"{_tag}_d64_b64x64_t128_default_policy"] = (lambda a=_arch: _flash(a, 64, 64, 64, 128, False, policy=False))
# TileLang's T.Pipelined(..., num_stages=1): K and V by cp.async, issued and waited for within the iteration
VARIANTS["sm80_d64_b64x64_t128_stages1"] = lambda: _flash("sm_80", 64, 64, 64, 128, False, stages=1)


def _attention(causal: bool):
    """softmax(Q K^T / sqrt(d)) V per (batch, head), in float64, written without the kernel's tricks
    (no online softmax, no base-2 exponent, no blocks)."""
    def ref(d):
        q, k, v = (d[n].astype(np.float64) for n in ("Q", "K", "V"))
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        if causal:
            rows, cols = s.shape[-2:]
            s = np.where(np.arange(rows)[:, None] >= np.arange(cols)[None, :], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        return {"O": (p / p.sum(-1, keepdims=True)) @ v}
    return ref


for _variant in VARIANTS:
    REFERENCE[_variant] = _attention(_variant.endswith("_causal"))
    TOLERANCE[_variant] = (2e-2, 2e-2)     # P is rounded to fp16 before P V, O is stored as fp16


def _expected_thread(variant: str, rows: int, cols: int) -> np.ndarray:
    """Thread of element (i, j) of an accumulator with all warps on M, from the PTX fragment tables:
    lane = 4 * (i % 8) + (j % 8) // 2; mma.sync: warp i // (rows / warps); wgmma: warpgroup g takes rows
    g * rows / groups.., and inside it warp w the rows 16w..16w+15 of every 64-row block."""
    dim, bm, bn, threads, causal = SHAPES.get(variant.split("_", 1)[1], (64, 64, 64, 128, False))
    i, j = np.indices((rows, cols))
    lane = 4 * (i % 8) + (j % 8) // 2
    warps = threads // 32
    if variant.startswith("sm90"):
        groups = warps // 4
        warp = 4 * (i // (rows // groups)) + (i % 64) // 16
    else:
        warp = i // (rows // warps)
    return warp * 32 + lane


def check(variant, model, result):
    bufs = result["buffers"]
    dim, bm, bn, threads, causal = SHAPES.get(variant.split("_", 1)[1], (64, 64, 64, 128, False))
    for name, shape in (("acc_s", (bm, bn)), ("acc_s_cast", (bm, bn)), ("acc_o", (bm, dim))):
        _support.assert_valid_fragment(name, bufs[name])
        _support.assert_replicate(name, bufs[name], 1)
        got = _support.thread_table(bufs[name])[..., 0]
        want = _expected_thread(variant, *shape)
        assert np.array_equal(got, want), f"{name}: not the all-warps-on-M accumulator layout of {variant}"
    for name in ("acc_s_cast", "acc_o"):
        _support.assert_same_rows("acc_s", bufs["acc_s"], name, bufs[name])
    for name in ("scores_max", "scores_max_prev", "scores_scale", "scores_sum", "logsum"):
        _support.assert_valid_fragment(name, bufs[name])
        _support.assert_replicate(name, bufs[name], 4)          # the quad of lanes sharing a row
        _support.assert_same_rows("acc_s", bufs["acc_s"], name, bufs[name])
    rows = ("scores_max", "scores_max_prev", "scores_scale", "scores_sum", "logsum")
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
        extents = _support.loop_extents(key)
        for name in rows:                     # every loop reads or writes row statistics at (i,)
            _support.assert_owned(key, loop, name, bufs[name], (lambda i, j: (i,)) if len(extents) == 2
                                  else (lambda i: (i,)), write=len(extents) == 1)
        for name in ("acc_s", "acc_o"):        # the 2-D loops run each element where its accumulator is
            if len(extents) == 2 and bufs[name]["input_shape"] == extents:
                _support.assert_owned(key, loop, name, bufs[name], lambda i, j: (i, j), write=True)
    for name in ("Q_shared", "K_shared", "V_shared"):
        assert bufs[name]["kind"] == "Layout", f"{name} must get a shared swizzle"
