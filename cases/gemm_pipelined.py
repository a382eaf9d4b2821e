"""Software-pipelined K loops (TileLang's ``T.Pipelined(n, num_stages=s)``; here the loop annotation
``num_stages``): a gemm with 2 and 3 stages on sm_80 (mma.sync), sm_90 (mma.sync realising the wgmma layout)
and sm_90a (wgmma), with K-loop extents equal to and just above the stage count, and a column-tiled row sum
(a pipelined loop with no gemm: the consumer is a parallel loop reading the shared tile), also over a symbolic
column count (EXTENTS: tile multiples, a partial last tile, fewer tiles than stages, less than one tile).

Pipelining is decided after inference and does not change any layout: A_s / B_s / X_s get the same layout in
every stage (the stage is the outermost dimension of the lowered buffer), so the snapshots equal those of the
same loop without the annotation. Lowering issues the copies of iteration k + s - 1 with cp.async (TMA on
sm_90a) while iteration k computes; ``maint/run.py --numeric`` runs that schedule on the CPU, where cp.async lands
only after its wait_group and a barrier, a TMA load at the mbarrier wait completing its phase (a wrong schedule
reads poison).
"""
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15, both cost models, sm_80 and sm_90 (maint/peer twins with T.Pipelined(n,
num_stages=s)). TileLang multi-buffers before its layout inference, so its A_s / B_s / X_s carry the stage as
the outermost input dimension ([s, 64, 32]); stage by stage they equal ours as flat offsets in every variant
(64B swizzle for A_s [64, 32], 128B for B_s [32, 128] in two 64-column panels, X_s row-major, which we record as
no layout). Fragments and loops: on sm_80 acc_f (mma.sync, 2x2 warps), acc, row and the row-sum loop equal ours
as mappings. On sm_90 TileLang warp-specialises the pipelined loop (a producer warpgroup in front of the
consumers), so its fragments have thread_range [128, 256); shifted to [0, 128) they equal ours as mappings
(acc_f is the wgmma accumulator in both); the symbolic row sum (n = T.dynamic("n"), T.Pipelined(T.ceildiv(n,
32), num_stages=3), sm_90 only) equals ours the same way. TileLang also lists its T.clear loops, which we lower
as fills.
Difference: we keep one thread group (no producer warpgroup): on sm_80 and sm_90 every thread issues cp.async; on
sm_90a thread 0 issues TMA loads (A_s one 64B-swizzled box, B_s two 128B-swizzled panels per stage, the swizzles
being the inferred layouts') and every thread waits on the stage's mbarrier. The staged fp16 epilogue on sm_90a
(`staged_c_sm90a_s3_128x128`, TileLang twin run with --arch sm_90a): acc_f equals TileLang's shifted from its
consumer range [128, 256), neither side gives C_s a layout, and both store acc_f into C_s with stmatrix.x4 (16
per thread); A_s and B_s are one allocation (``stage_arena``) whose bytes C_s takes after the loop: 48 KiB of
dynamic shared memory, as TileLang (49 KiB in all with its barriers)."""


def _gemm(m: int, n: int, k: int, bk: int, stages: int, arch: str, threads: int = 128, scope: str = "shared",
          staged: bool = False):
    """C = A @ B through pipelined shared tiles; ``staged``: an fp16 result staged through ``C_s``."""
    steps = k // bk
    c_dtype = "float16" if staged else "float32"

    @T.prim_func
    def kernel(A: T.Buffer((m, k), "float16"), B: T.Buffer((k, n), "float16"), C: T.Buffer((m, n), c_dtype)):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        A_s = T.alloc_buffer((m, bk), "float16", scope=scope)
        B_s = T.alloc_buffer((bk, n), "float16", scope=scope)
        if staged:
            C_s = T.alloc_buffer((m, n), "float16", scope=scope)
        acc_f = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        Tx.fill(acc_f[0:m, 0:n], T.float32(0))
        for ko in T.serial(steps, annotations={"num_stages": stages}):
            Tx.copy(A_s[0:m, 0:bk], A[0:m, ko * bk:ko * bk + bk])
            Tx.copy(B_s[0:bk, 0:n], B[ko * bk:ko * bk + bk, 0:n])
            Tx.gemm(acc_f[0:m, 0:n], A_s[0:m, 0:bk], B_s[0:bk, 0:n], acc_f[0:m, 0:n], False, False, 1.0, 1.0)
        if staged:
            Tx.copy(C_s[0:m, 0:n], acc_f[0:m, 0:n])
            Tx.copy(C[0:m, 0:n], C_s[0:m, 0:n])
        else:
            Tx.copy(C[0:m, 0:n], acc_f[0:m, 0:n])
    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


def _gemm_staged(m: int, n: int, k: int, bk: int, stages: int, arch: str, threads: int = 128):
    """TileLang's gemm example as written: dynamic shared tiles, an fp16 result staged through ``C_s``."""
    return _gemm(m, n, k, bk, stages, arch, threads, scope="shared.dyn", staged=True)


def _rowsum(m: int, n: int | None, bn: int, stages: int, arch: str, threads: int = 128):
    """Row sums of X through a pipelined shared tile. With ``n`` None the column count is symbolic, in
    ceildiv(n, bn) tiles: the last tile is partial (its bounds-guarded load becomes cp.async's zero-filling
    src-size form) and n < bn * stages leaves fewer iterations than stages."""
    @T.macro
    def body(X, R, steps):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        X_s = T.alloc_buffer((m, bn), "float32", scope="shared")
        acc = T.alloc_buffer((m, bn), "float32", scope="local.fragment")
        row = T.alloc_buffer((m,), "float32", scope="local.fragment")
        Tx.fill(acc[0:m, 0:bn], T.float32(0))
        for ko in T.serial(steps, annotations={"num_stages": stages}):
            Tx.copy(X_s[0:m, 0:bn], X[0:m, ko * bn:ko * bn + bn])
            for i in T.parallel(m):
                for j in T.parallel(bn):
                    acc[i, j] = acc[i, j] + X_s[i, j]
        Tx.sum(row[0:m], acc[0:m, 0:bn], axes=[1])
        Tx.copy(R[0:m], row[0:m])

    if n is None:
        @T.prim_func
        def kernel(x: T.handle, r: T.handle):
            n = T.int32()
            X = T.match_buffer(x, (m, n), "float32")
            R = T.match_buffer(r, (m,), "float32")
            body(X, R, T.ceildiv(n, bn))
    else:
        @T.prim_func
        def kernel(X: T.Buffer((m, n), "float32"), R: T.Buffer((m,), "float32")):
            body(X, R, n // bn)
    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


VARIANTS = {
    "sm80_s2_k128": lambda: _gemm(64, 128, 128, 32, 2, "sm_80"),
    "sm80_s3_k96": lambda: _gemm(64, 128, 96, 32, 3, "sm_80"),        # extent == stages
    "sm80_s3_k128": lambda: _gemm(64, 128, 128, 32, 3, "sm_80"),      # extent just above
    "sm90_s3_k128": lambda: _gemm(64, 128, 128, 32, 3, "sm_90"),
    "sm90a_s2_k128": lambda: _gemm(64, 128, 128, 32, 2, "sm_90a"),
    "sm90a_s3_k96": lambda: _gemm(64, 128, 96, 32, 3, "sm_90a"),
    "staged_c_sm80_s3_128x128": lambda: _gemm_staged(128, 128, 128, 32, 3, "sm_80"),
    "staged_c_sm90a_s3_128x128": lambda: _gemm_staged(128, 128, 128, 32, 3, "sm_90a"),
    "rowsum_sm80_s2": lambda: _rowsum(64, 256, 32, 2, "sm_80"),
    "rowsum_sm90_s3": lambda: _rowsum(64, 256, 32, 3, "sm_90"),
    "rowsum_dynamic_sm80_s3": lambda: _rowsum(64, None, 32, 3, "sm_80"),
}

#: sizes ``run.py --numeric`` runs the symbolic variant at: tile multiples, a partial last tile, fewer tiles
#: than stages, less than one tile
EXTENTS = {"rowsum_dynamic_sm80_s3": [{"n": 128}, {"n": 200}, {"n": 40}, {"n": 7}]}


def _gemm_ref(d):
    return {"C": d["A"].astype(np.float64) @ d["B"].astype(np.float64)}


def _rowsum_ref(d):
    return {"R": d["X"].astype(np.float64).sum(axis=1)}


REFERENCE = {name: (_rowsum_ref if name.startswith("rowsum") else _gemm_ref) for name in VARIANTS}
TOLERANCE = {name: (1e-4, 1e-4) if name.startswith("rowsum") else (2e-2, 2e-2) for name in VARIANTS}


def check(variant, model, result):
    if variant.startswith("rowsum"):
        acc = result["buffers"]["acc"]
        _support.assert_valid_fragment("acc", acc)
        for key, loop in result["loops"].items():
            _support.assert_covers(key, loop)
        return
    acc = result["buffers"]["acc_f"]
    _support.assert_valid_fragment("acc_f", acc)
    _support.assert_replicate("acc_f", acc, 1)
    for name in ("A_s", "B_s"):
        assert result["buffers"][name]["kind"] == "Layout", f"{name} must get a shared swizzle: {result['buffers']}"
