"""Kernels for the software-pipelining tests (TVMScript needs its source in a file): the golden case's builders
and loops that cannot be pipelined as written."""
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases.gemm_pipelined import _gemm as gemm, _rowsum as rowsum  # noqa: F401


def _on(kernel, arch):
    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


def refused(kind: str, stages=2, arch: str = "sm_80"):
    """A row-sum loop over 4 column tiles of X, broken in the way ``kind`` names."""
    m, bn, n = 64, 32, 128

    @T.prim_func
    def kernel(X: T.Buffer((m, n), "float32"), R: T.Buffer((m,), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        X_s = T.alloc_buffer((m, bn), "float32", scope="shared")
        acc = T.alloc_buffer((m, bn), "float32", scope="local.fragment")
        row = T.alloc_buffer((m,), "float32", scope="local.fragment")
        Tx.fill(acc[0:m, 0:bn], T.float32(0))
        if kind == "used_after":
            Tx.fill(X_s[0:m, 0:bn], T.float32(0))
        for ko in T.serial(4, annotations={"num_stages": stages}):
            if kind == "read_first":
                for i in T.parallel(m):
                    for j in T.parallel(bn):
                        acc[i, j] = acc[i, j] + X_s[i, j]
            if kind == "nested":
                if ko < 3:
                    Tx.copy(X_s[0:m, 0:bn], X[0:m, ko * bn:ko * bn + bn])
            elif kind != "no_copy":
                Tx.copy(X_s[0:m, 0:bn], X[0:m, ko * bn:ko * bn + bn])
            if kind == "other_writer":
                for i in T.parallel(m):
                    for j in T.parallel(bn):
                        X_s[i, j] = X_s[i, j] * T.float32(2)
            if kind == "source_written":
                for i in T.parallel(m):
                    for j in T.parallel(bn):
                        X[i, ko * bn + j] = T.float32(0)
            for i in T.parallel(m):
                for j in T.parallel(bn):
                    acc[i, j] = acc[i, j] + X_s[i, j]
        Tx.sum(row[0:m], acc[0:m, 0:bn], axes=[1])
        Tx.copy(R[0:m], row[0:m])
    return _on(kernel, arch)


def big_tiles(stages: int):
    """A gemm K loop whose tiles (2 x 16 KiB of fp16) fit once but not ``stages`` times in 48 KiB (the golden
    case's gemm with static shared tiles)."""
    return gemm(128, 128, 256, 64, stages, "sm_80")


def narrow_rows(stages: int = 2, width: int = 2):
    """fp16 tiles ``width`` elements wide: each thread's chunk is 2 * width bytes (4: the narrowest cp.async)."""
    @T.prim_func
    def kernel(X: T.Buffer((128, 8 * width), "float16"), R: T.Buffer((128, width), "float16")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        X_s = T.alloc_buffer((128, width), "float16", scope="shared")
        acc = T.alloc_buffer((128, width), "float16", scope="local.fragment")
        Tx.fill(acc[0:128, 0:width], T.float16(0))
        for ko in T.serial(8, annotations={"num_stages": stages}):
            Tx.copy(X_s[0:128, 0:width], X[0:128, ko * width:ko * width + width])
            for i in T.parallel(128):
                for j in T.parallel(width):
                    acc[i, j] = T.max(acc[i, j], X_s[i, j])
        Tx.copy(R[0:128, 0:width], acc[0:128, 0:width])
    return _on(kernel, "sm_80")




def rowsum_symbolic(stages: int = 3):
    """The row sum of a symbolic number n of columns in ceildiv(n, 32) tiles, the last partial."""
    return rowsum(64, None, 32, stages, "sm_80")
