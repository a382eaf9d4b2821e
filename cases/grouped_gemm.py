"""TileLang's grouped gemm (``examples/grouped_gemm/example_grouped_gemm_fwd.py``) as it is written there: group
g owns rows ``[batch_offsets[g], batch_offsets[g] + batch_sizes[g])`` of A and C and the matrix ``B[g]``; block
``bx`` finds its group by scanning ``batch_padded_offsets`` into a one-element local, reads its row offset
``m_start`` and row count ``actual_rows`` from those tensors, and runs a pipelined K loop whose A tile starts at
``m_start`` (a partial tile past a group's end reads the next group's rows or the pad) and whose B tile is
``B[cur_batch_idx]``; the store keeps ``i < actual_rows``.

The offsets are read from memory before the loop, so the copies' row offset and group index are block-uniform
values the pipeline issues with each stage. The numeric checks give the offset tensors the values the
example's host code builds for groups of 64, 40 and 100 rows (function attribute ``tilelayout.numeric_inputs``):
the 40-row group's tile runs 24 rows into the next group and the 100-row group's last tile 28 rows past A's end
(read as 0 under safe memory; its stores are dropped by ``i < actual_rows``). The numpy REFERENCE repeats the
example block by block.
"""
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (maint/peer twin: the example's kernel with its `T.alloc_var` group index, trans_b
False). Both models: C_local is the same mapping as ours (on sm_90a offset by TileLang's warp specialisation to
threads 128..255); A_s and B_s carry TileLang's stage dimension ([s, 64, 32], multi-buffered before inference) and
equal ours stage by stage, as in the other pipelined gemms. ptxas (maint/peer/codegen_tilelang.py against
maint/bench_codegen.py): sm_80 TileLang 104 registers, ours 77; sm_90a TileLang 240, ours 60."""

SIZES = (64, 40, 100)
BM, BN, BK, K, N = 64, 64, 32, 128, 64


def grouped_gemm(sizes=SIZES, k: int = K, n: int = N, bm: int = BM, bn: int = BN, bk: int = BK, stages: int = 2,
                 arch: str = "sm_80"):
    groups = len(sizes)
    total = sum(sizes)
    blocks = sum(-(-s // bm) for s in sizes)

    @T.prim_func
    def kernel(A: T.Buffer((total, k), "float16"), B: T.Buffer((groups, k, n), "float16"),
               C: T.Buffer((total, n), "float32"), batch_sizes: T.Buffer((groups,), "int32"),
               batch_offsets: T.Buffer((groups,), "int32"), batch_padded_offsets: T.Buffer((groups,), "int32")):
        bx = T.launch_thread("blockIdx.x", blocks)
        by = T.launch_thread("blockIdx.y", n // bn)
        tx = T.launch_thread("threadIdx.x", 128)
        A_s = T.alloc_buffer((bm, bk), "float16", scope="shared")
        B_s = T.alloc_buffer((bk, bn), "float16", scope="shared")
        C_local = T.alloc_buffer((bm, bn), "float32", scope="local.fragment")
        cur_batch_idx = T.alloc_buffer((1,), "int32", scope="local")
        m_start_padded = bx * bm
        cur_batch_idx[0] = 0
        for i in T.serial(groups):
            cur_batch_idx[0] = T.if_then_else(m_start_padded >= batch_padded_offsets[i], i, cur_batch_idx[0])
        m_start = m_start_padded - batch_padded_offsets[cur_batch_idx[0]] + batch_offsets[cur_batch_idx[0]]
        actual_rows = T.max(0, T.min(bm, batch_sizes[cur_batch_idx[0]] + batch_padded_offsets[cur_batch_idx[0]]
                                     - m_start_padded))
        Tx.fill(C_local[0:bm, 0:bn], T.float32(0))
        for ko in T.serial(k // bk, annotations={"num_stages": stages}):
            Tx.copy(A_s[0:bm, 0:bk], A[m_start:m_start + bm, ko * bk:ko * bk + bk])
            Tx.copy(B_s[0:bk, 0:bn], B[cur_batch_idx[0], ko * bk:ko * bk + bk, by * bn:by * bn + bn])
            Tx.gemm(C_local[0:bm, 0:bn], A_s[0:bm, 0:bk], B_s[0:bk, 0:bn], C_local[0:bm, 0:bn], False, False,
                    1.0, 1.0)
        for i in T.parallel(bm):
            for j in T.parallel(bn):
                if i < actual_rows:
                    C[m_start + i, by * bn + j] = C_local[i, j]
    sizes_, offsets, padded = _offsets(sizes, bm)
    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch})).with_attr(
        "tilelayout.numeric_inputs", {"batch_sizes": sizes_, "batch_offsets": offsets, "batch_padded_offsets": padded})


def _offsets(sizes, bm: int):
    """(sizes, offsets, padded offsets) as the example's host code builds them."""
    offsets, padded, o, p = [], [], 0, 0
    for s in sizes:
        offsets.append(o)
        padded.append(p)
        o += s
        p += -(-s // bm) * bm
    return list(sizes), offsets, padded


VARIANTS = {
    "sm80_groups64_40_100_s2": lambda: grouped_gemm(stages=2, arch="sm_80"),
    "sm90a_groups64_40_100_s3": lambda: grouped_gemm(stages=3, arch="sm_90a"),
}


def _ref(d, bm=BM, bn=BN):
    """Each block as the example runs it, in block order, with safe memory: rows outside A read 0, stores
    outside C are dropped."""
    A, B = d["A"].astype(np.float64), d["B"].astype(np.float64)
    sizes, offsets, padded = d["batch_sizes"], d["batch_offsets"], d["batch_padded_offsets"]
    C = d["C"].astype(np.float64).copy()
    total, n = C.shape
    blocks = sum(-(-s // bm) for s in SIZES)
    for by in range(n // bn):
        for bx in range(blocks):
            start_padded = bx * bm
            g = 0
            for i in range(len(sizes)):
                g = i if start_padded >= padded[i] else g
            m_start = start_padded - int(padded[g]) + int(offsets[g])
            rows = max(0, min(bm, int(sizes[g]) + int(padded[g]) - start_padded))
            tile = np.zeros((bm, A.shape[1]))
            for r in range(bm):
                if 0 <= m_start + r < total:
                    tile[r] = A[m_start + r]
            out = tile @ B[g][:, by * bn:(by + 1) * bn]
            for r in range(rows):
                if 0 <= m_start + r < total:
                    C[m_start + r, by * bn:(by + 1) * bn] = out[r]
    return {"C": C}


REFERENCE = {name: _ref for name in VARIANTS}
TOLERANCE = {name: (2e-2, 2e-2) for name in VARIANTS}


def check(variant, model, result):
    acc = result["buffers"]["C_local"]
    _support.assert_valid_fragment("C_local", acc)
    _support.assert_replicate("C_local", acc, 1)
    for name in ("A_s", "B_s"):
        assert result["buffers"][name]["kind"] == "Layout", f"{name} must get a shared swizzle: {result['buffers']}"
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
