"""Pipelined loops indexed the way TileLang's examples index them (TVMScript needs its source in a file): named
offsets, offsets read from memory, copies under a block-uniform condition and a reshaped view of a parameter
as the copy source."""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases.pipelined_indexing import _on, block_sparse, conv_im2col, named_offsets  # noqa: F401


def grouped_gemm(sizes=(64, 40, 100), k: int = 128, n: int = 64, bm: int = 64, bn: int = 64, bk: int = 32,
                 stages: int = 2, arch: str = "sm_80"):
    """TileLang's grouped gemm: group g owns rows [offsets[g], offsets[g] + sizes[g]) of A and C and B[g]; block
    bx finds its group by scanning the padded offsets, so the copy's row offset and B's group index are read
    from memory before the loop. A has ``bm`` rows of slack below the last group (the last block's tile reads
    them; nothing is stored there)."""
    groups = len(sizes)
    total = sum(sizes)
    blocks = sum(-(-s // bm) for s in sizes)

    @T.prim_func
    def kernel(A: T.Buffer((total + bm, k), "float16"), B: T.Buffer((groups, k, n), "float16"),
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
    return _on(kernel, arch)


def grouped_offsets(sizes, bm: int = 64):
    """(sizes, offsets, padded offsets) as the grouped gemm's host code builds them."""
    offsets, padded = [], []
    o = p = 0
    for s in sizes:
        offsets.append(o)
        padded.append(p)
        o += s
        p += -(-s // bm) * bm
    return list(sizes), offsets, padded


def offset_written_in_loop(k: int = 128, n: int = 64, bm: int = 64, bn: int = 64, bk: int = 32):
    """A running group index updated inside the pipelined loop: a copy issued early would use a stale one."""
    @T.prim_func
    def kernel(A: T.Buffer((256, k), "float16"), B: T.Buffer((4, k, n), "float16"), C: T.Buffer((64, n), "float32"),
               groups: T.Buffer((k // bk,), "int32")):
        tx = T.launch_thread("threadIdx.x", 128)
        A_s = T.alloc_buffer((bm, bk), "float16", scope="shared")
        B_s = T.alloc_buffer((bk, bn), "float16", scope="shared")
        C_local = T.alloc_buffer((bm, bn), "float32", scope="local.fragment")
        cur_batch_idx = T.alloc_buffer((1,), "int32", scope="local")
        cur_batch_idx[0] = 0
        Tx.fill(C_local[0:bm, 0:bn], T.float32(0))
        for ko in T.serial(k // bk, annotations={"num_stages": 2}):
            cur_batch_idx[0] = (cur_batch_idx[0] + groups[ko]) % 4
            Tx.copy(A_s[0:bm, 0:bk], A[0:bm, ko * bk:ko * bk + bk])
            Tx.copy(B_s[0:bk, 0:bn], B[cur_batch_idx[0], ko * bk:ko * bk + bk, 0:bn])
            Tx.gemm(C_local[0:bm, 0:bn], A_s[0:bm, 0:bk], B_s[0:bk, 0:bn], C_local[0:bm, 0:bn], False, False,
                    1.0, 1.0)
        Tx.copy(C[0:bm, 0:bn], C_local[0:bm, 0:bn])
    return _on(kernel, "sm_80")


def conditional_copy_read_outside(k: int = 128, bm: int = 64, bn: int = 64, bk: int = 32):
    """A copied only where the mask is set but read by the gemm every iteration: in the loop as written an
    unset mask reuses the previous tile, which a multi-buffered stage no longer holds."""
    @T.prim_func
    def kernel(A: T.Buffer((bm, k), "float16"), B: T.Buffer((k, bn), "float16"), mask: T.Buffer((k // bk,), "int8"),
               C: T.Buffer((bm, bn), "float32")):
        tx = T.launch_thread("threadIdx.x", 128)
        A_s = T.alloc_buffer((bm, bk), "float16", scope="shared")
        B_s = T.alloc_buffer((bk, bn), "float16", scope="shared")
        C_local = T.alloc_buffer((bm, bn), "float32", scope="local.fragment")
        Tx.fill(C_local[0:bm, 0:bn], T.float32(0))
        for ko in T.serial(k // bk, annotations={"num_stages": 2}):
            if mask[ko] != T.int8(0):
                Tx.copy(A_s[0:bm, 0:bk], A[0:bm, ko * bk:ko * bk + bk])
            Tx.copy(B_s[0:bk, 0:bn], B[ko * bk:ko * bk + bk, 0:bn])
            Tx.gemm(C_local[0:bm, 0:bn], A_s[0:bm, 0:bk], B_s[0:bk, 0:bn], C_local[0:bm, 0:bn], False, False,
                    1.0, 1.0)
        Tx.copy(C[0:bm, 0:bn], C_local[0:bm, 0:bn])
    return _on(kernel, "sm_80")


def thread_conditional_copy(m: int = 64, bn: int = 32, n: int = 128):
    """A copy under a condition on the thread index: the pipeline's barrier needs the whole block."""
    @T.prim_func
    def kernel(X: T.Buffer((m, n), "float32"), R: T.Buffer((m,), "float32")):
        tx = T.launch_thread("threadIdx.x", 128)
        X_s = T.alloc_buffer((m, bn), "float32", scope="shared")
        acc = T.alloc_buffer((m, bn), "float32", scope="local.fragment")
        row = T.alloc_buffer((m,), "float32", scope="local.fragment")
        Tx.fill(acc[0:m, 0:bn], T.float32(0))
        for ko in T.serial(n // bn, annotations={"num_stages": 2}):
            if tx < 64:
                Tx.copy(X_s[0:m, 0:bn], X[0:m, ko * bn:ko * bn + bn])
            for i in T.parallel(m):
                for j in T.parallel(bn):
                    acc[i, j] = acc[i, j] + X_s[i, j]
        Tx.sum(row[0:m], acc[0:m, 0:bn], axes=[1])
        Tx.copy(R[0:m], row[0:m])
    return _on(kernel, "sm_80")


def view_source_written(n: int = 128, bn: int = 32):
    """The loop copies from a view of X and also stores to X: an early copy would read stale data."""
    @T.prim_func
    def kernel(X: T.Buffer((64, n), "float32"), R: T.Buffer((64,), "float32")):
        tx = T.launch_thread("threadIdx.x", 128)
        X_s = T.alloc_buffer((64, bn), "float32", scope="shared")
        acc = T.alloc_buffer((64, bn), "float32", scope="local.fragment")
        row = T.alloc_buffer((64,), "float32", scope="local.fragment")
        X_view = T.decl_buffer((64 * n // bn, bn), "float32", data=X.data)
        Tx.fill(acc[0:64, 0:bn], T.float32(0))
        for ko in T.serial(n // bn, annotations={"num_stages": 2}):
            Tx.copy(X_s[0:64, 0:bn], X_view[ko * 64:ko * 64 + 64, 0:bn])
            for i in T.parallel(64):
                for j in T.parallel(bn):
                    acc[i, j] = acc[i, j] + X_s[i, j]
                    X[i, ko * bn + j] = T.float32(0)
        Tx.sum(row[0:64], acc[0:64, 0:bn], axes=[1])
        Tx.copy(R[0:64], row[0:64])
    return _on(kernel, "sm_80")
