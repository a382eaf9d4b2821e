"""Pipelined K loops indexed the way TileLang's examples index them: a tiled gemm whose offsets are named
scalars (``row0 = by * 64``, ``k0 = ko * 32`` inside the loop), the block-sparse gemm whose copies and gemm
run under ``if BlockMask[by, bx, ko]`` (the condition carried into every stage: the mask is read for the
iteration being issued and again for the one computed), and conv2d as an implicit gemm whose weight tile is
copied from a reshaped view of the weights (``T.decl_buffer(..., data=weight.data)``) while the data tile is
gathered by a parallel loop (im2col) that stays synchronous. All sm_80, 2 or 3 stages.

Named scalars are inlined into the tile ops before inference, so the copies infer exactly as if the offsets
were written out (16-byte vectors; A_s / B_s get the gemm's swizzles); pipelining does not change a layout.
``maint/run.py --numeric`` runs the cp.async schedule on the CPU, where a copy lands only at its wait_group
and barrier. A grouped gemm (offsets read from memory before the loop) is tested in
tests/test_pipeline_indexing.py with real offsets: random ones would index out of bounds.
"""
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15, sm_80, both cost models (maint/peer twins written as TileLang's examples write
them: `row0 = by * 64` scalars, `if BlockMask[by, bx, k]:` under T.Pipelined, `T.Tensor(shape, dtype,
weight.data)` views). TileLang multi-buffers before inference, so its shared tiles carry the stage as an
outer dimension ([s, 64, 32]); stage by stage A_s, B_s and weight_s equal ours as flat offsets in every
variant and model, and the accumulators (C_local, out_local) and data_s equal ours (maint/peer/compare.py).
Difference: the im2col gather loop (TileLang's key i_j_fused[2048], listed twice) gives each thread 8
consecutive columns (thread (32 i + j) % 1024 // 8); ours gives 4 (thread i % 16 * 8 + j // 4), so its
shared stores are 8 bytes wide where TileLang's are 16."""

def _on(kernel, arch):
    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


def named_offsets(m: int = 128, n: int = 128, k: int = 128, bm: int = 64, bn: int = 64, bk: int = 32,
                  stages: int = 2, arch: str = "sm_80"):
    """A tiled gemm whose offsets are named scalars, inside and outside the pipelined loop."""
    @T.prim_func
    def kernel(A: T.Buffer((m, k), "float16"), B: T.Buffer((k, n), "float16"), C: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", n // bn)
        by = T.launch_thread("blockIdx.y", m // bm)
        tx = T.launch_thread("threadIdx.x", 128)
        A_s = T.alloc_buffer((bm, bk), "float16", scope="shared")
        B_s = T.alloc_buffer((bk, bn), "float16", scope="shared")
        C_local = T.alloc_buffer((bm, bn), "float32", scope="local.fragment")
        row0 = by * bm
        col0 = bx * bn
        Tx.fill(C_local[0:bm, 0:bn], T.float32(0))
        for ko in T.serial(k // bk, annotations={"num_stages": stages}):
            k0 = ko * bk
            Tx.copy(A_s[0:bm, 0:bk], A[row0:row0 + bm, k0:k0 + bk])
            Tx.copy(B_s[0:bk, 0:bn], B[k0:k0 + bk, col0:col0 + bn])
            Tx.gemm(C_local[0:bm, 0:bn], A_s[0:bm, 0:bk], B_s[0:bk, 0:bn], C_local[0:bm, 0:bn], False, False,
                    1.0, 1.0)
        Tx.copy(C[row0:row0 + bm, col0:col0 + bn], C_local[0:bm, 0:bn])
    return _on(kernel, arch)


def block_sparse(m: int = 128, n: int = 128, k: int = 256, bm: int = 64, bn: int = 64, bk: int = 32,
                 stages: int = 2, arch: str = "sm_80"):
    """TileLang's block-sparse gemm: the K tile's copies and gemm run only where the block mask is set."""
    @T.prim_func
    def kernel(A: T.Buffer((m, k), "float16"), B: T.Buffer((k, n), "float16"),
               BlockMask: T.Buffer((m // bm, n // bn, k // bk), "int8"), C: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", n // bn)
        by = T.launch_thread("blockIdx.y", m // bm)
        tx = T.launch_thread("threadIdx.x", 128)
        A_s = T.alloc_buffer((bm, bk), "float16", scope="shared")
        B_s = T.alloc_buffer((bk, bn), "float16", scope="shared")
        C_local = T.alloc_buffer((bm, bn), "float32", scope="local.fragment")
        Tx.fill(C_local[0:bm, 0:bn], T.float32(0))
        for ko in T.serial(k // bk, annotations={"num_stages": stages}):
            if BlockMask[by, bx, ko] != T.int8(0):
                Tx.copy(A_s[0:bm, 0:bk], A[by * bm:by * bm + bm, ko * bk:ko * bk + bk])
                Tx.copy(B_s[0:bk, 0:bn], B[ko * bk:ko * bk + bk, bx * bn:bx * bn + bn])
                Tx.gemm(C_local[0:bm, 0:bn], A_s[0:bm, 0:bk], B_s[0:bk, 0:bn], C_local[0:bm, 0:bn], False, False,
                        1.0, 1.0)
        Tx.copy(C[by * bm:by * bm + bm, bx * bn:bx * bn + bn], C_local[0:bm, 0:bn])
    return _on(kernel, arch)


def conv_im2col(batch: int = 2, h: int = 8, w: int = 8, c: int = 32, f: int = 64, kh: int = 3, stride: int = 1,
                pad: int = 1, bm: int = 64, bn: int = 64, bk: int = 32, stages: int = 2, arch: str = "sm_80"):
    """TileLang's conv2d as an implicit gemm: the data tile is gathered by a parallel loop (im2col), the weight
    tile copied from the weights viewed as a (kh * kw * c, f) matrix (a reshaped view of the parameter)."""
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (w + 2 * pad - kh) // stride + 1
    kk = kh * kh * c
    assert kk % bk == 0 and batch * oh * ow % bm == 0 and f % bn == 0, "tiles must divide the implicit gemm"

    @T.prim_func
    def kernel(data: T.Buffer((batch, h, w, c), "float16"), weight: T.Buffer((kh, kh, c, f), "float16"),
               out: T.Buffer((batch, oh, ow, f), "float32")):
        bx = T.launch_thread("blockIdx.x", f // bn)
        by = T.launch_thread("blockIdx.y", batch * oh * ow // bm)
        tx = T.launch_thread("threadIdx.x", 128)
        data_s = T.alloc_buffer((bm, bk), "float16", scope="shared")
        weight_s = T.alloc_buffer((bk, bn), "float16", scope="shared")
        out_local = T.alloc_buffer((bm, bn), "float32", scope="local.fragment")
        weight_flat = T.decl_buffer((kk, f), "float16", data=weight.data)
        out_flat = T.decl_buffer((batch * oh * ow, f), "float32", data=out.data)
        Tx.fill(out_local[0:bm, 0:bn], T.float32(0))
        for ko in T.serial(kk // bk, annotations={"num_stages": stages}):
            for i in T.parallel(bm):
                for j in T.parallel(bk):
                    kq = T.meta_var(ko * bk + j)
                    mq = T.meta_var(by * bm + i)
                    ah = T.meta_var(mq % (oh * ow) // ow * stride + kq // (kh * c) - pad)
                    aw = T.meta_var(mq % ow * stride + kq // c % kh - pad)
                    data_s[i, j] = T.if_then_else(ah >= 0 and aw >= 0 and ah < h and aw < w,
                                                  data[mq // (oh * ow), ah, aw, kq % c], T.float16(0))
            Tx.copy(weight_s[0:bk, 0:bn], weight_flat[ko * bk:ko * bk + bk, bx * bn:bx * bn + bn])
            Tx.gemm(out_local[0:bm, 0:bn], data_s[0:bm, 0:bk], weight_s[0:bk, 0:bn], out_local[0:bm, 0:bn], False,
                    False, 1.0, 1.0)
        Tx.copy(out_flat[by * bm:by * bm + bm, bx * bn:bx * bn + bn], out_local[0:bm, 0:bn])
    return _on(kernel, arch)


VARIANTS = {
    "sm80_named_offsets_s2": lambda: named_offsets(stages=2, arch="sm_80"),
    "sm80_block_sparse_s3": lambda: block_sparse(stages=3, arch="sm_80"),
    "sm80_conv_im2col_s2": lambda: conv_im2col(stages=2, arch="sm_80"),
}


def _gemm_ref(d):
    return {"C": d["A"].astype(np.float64) @ d["B"].astype(np.float64)}


def _block_sparse_ref(d, bm=64, bn=64, bk=32):
    A, B, mask = d["A"].astype(np.float64), d["B"].astype(np.float64), d["BlockMask"]
    C = np.zeros((A.shape[0], B.shape[1]))
    for by in range(mask.shape[0]):
        for bx in range(mask.shape[1]):
            for ko in range(mask.shape[2]):
                if mask[by, bx, ko] != 0:
                    C[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn] += \
                        A[by * bm:(by + 1) * bm, ko * bk:(ko + 1) * bk] @ B[ko * bk:(ko + 1) * bk, bx * bn:(bx + 1) * bn]
    return {"C": C}


def _conv_ref(d, pad=1):
    data, weight = d["data"].astype(np.float64), d["weight"].astype(np.float64)
    n, h, w, c = data.shape
    kh, kw, _, f = weight.shape
    padded = np.zeros((n, h + 2 * pad, w + 2 * pad, c))
    padded[:, pad:pad + h, pad:pad + w] = data
    out = np.zeros((n, h, w, f))
    for i in range(kh):
        for j in range(kw):
            out += padded[:, i:i + h, j:j + w, :] @ weight[i, j]
    return {"out": out}


REFERENCE = {"sm80_named_offsets_s2": _gemm_ref, "sm80_block_sparse_s3": _block_sparse_ref,
             "sm80_conv_im2col_s2": _conv_ref}
TOLERANCE = {name: (2e-2, 2e-2) for name in VARIANTS}

_ACC = {"sm80_named_offsets_s2": "C_local", "sm80_block_sparse_s3": "C_local", "sm80_conv_im2col_s2": "out_local"}
_TILES = {"sm80_named_offsets_s2": ("A_s", "B_s"), "sm80_block_sparse_s3": ("A_s", "B_s"),
          "sm80_conv_im2col_s2": ("data_s", "weight_s")}


def check(variant, model, result):
    acc = result["buffers"][_ACC[variant]]
    _support.assert_valid_fragment(_ACC[variant], acc)
    _support.assert_replicate(_ACC[variant], acc, 1)
    for name in _TILES[variant]:
        assert result["buffers"][name]["kind"] == "Layout", f"{name} must get a shared swizzle: {result['buffers']}"
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
