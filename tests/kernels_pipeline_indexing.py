"""Pipelined loops indexed the way TileLang's examples index them (TVMScript needs its source in a file): named
offsets, offsets read from memory, copies under a block-uniform condition and a reshaped view of a parameter
as the copy source."""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases.grouped_gemm import _offsets as grouped_offsets, grouped_gemm  # noqa: F401
from cases.pipelined_indexing import _on, block_sparse, conv_im2col, named_offsets  # noqa: F401


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


def _rowsum_with_hazard(m: int, n: int, bn: int, hazard: str):
    """Row sums of X through a 2-stage pipelined shared tile, with a ``hazard`` for the pipeliner: "thread" copies
    only in threads below 64, "view" copies from a reshaped view of X and zeroes X in the loop."""
    view = hazard == "view"

    @T.prim_func
    def kernel(X: T.Buffer((m, n), "float32"), R: T.Buffer((m,), "float32")):
        tx = T.launch_thread("threadIdx.x", 128)
        X_s = T.alloc_buffer((m, bn), "float32", scope="shared")
        acc = T.alloc_buffer((m, bn), "float32", scope="local.fragment")
        row = T.alloc_buffer((m,), "float32", scope="local.fragment")
        if view:
            X_view = T.decl_buffer((m * n // bn, bn), "float32", data=X.data)
        Tx.fill(acc[0:m, 0:bn], T.float32(0))
        for ko in T.serial(n // bn, annotations={"num_stages": 2}):
            if view:
                Tx.copy(X_s[0:m, 0:bn], X_view[ko * m:ko * m + m, 0:bn])
            else:
                if tx < 64:
                    Tx.copy(X_s[0:m, 0:bn], X[0:m, ko * bn:ko * bn + bn])
            for i in T.parallel(m):
                for j in T.parallel(bn):
                    acc[i, j] = acc[i, j] + X_s[i, j]
                    if view:
                        X[i, ko * bn + j] = T.float32(0)
        Tx.sum(row[0:m], acc[0:m, 0:bn], axes=[1])
        Tx.copy(R[0:m], row[0:m])
    return _on(kernel, "sm_80")


def thread_conditional_copy(m: int = 64, bn: int = 32, n: int = 128):
    """A copy under a condition on the thread index: the pipeline's barrier needs the whole block."""
    return _rowsum_with_hazard(m, n, bn, "thread")


def view_source_written(n: int = 128, bn: int = 32):
    """The loop copies from a view of X and also stores to X: an early copy would read stale data."""
    return _rowsum_with_hazard(64, n, bn, "view")
