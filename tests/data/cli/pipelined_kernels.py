"""Pipelined gemms for ``tilelayout show``: one K loop with 2 stages, and two K loops both named ``k``."""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx


def one_k_loop():
    """128x128x256 gemm, 128x64 / 64x128 float16 tiles in 2 stages: 32 KiB of tiles, 64 KiB allocated."""

    @T.prim_func
    def kernel(A: T.Buffer((128, 256), "float16"), B: T.Buffer((256, 128), "float16"),
               C: T.Buffer((128, 128), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        A_s = T.alloc_buffer((128, 64), "float16", scope="shared.dyn")
        B_s = T.alloc_buffer((64, 128), "float16", scope="shared.dyn")
        acc = T.alloc_buffer((128, 128), "float32", scope="local.fragment")
        Tx.fill(acc[0:128, 0:128], T.float32(0))
        for k in T.serial(4, annotations={"num_stages": 2}):
            Tx.copy(A_s[0:128, 0:64], A[0:128, k * 64:k * 64 + 64])
            Tx.copy(B_s[0:64, 0:128], B[k * 64:k * 64 + 64, 0:128])
            Tx.gemm(acc[0:128, 0:128], A_s[0:128, 0:64], B_s[0:64, 0:128], acc[0:128, 0:128], False, False,
                    1.0, 1.0)
        Tx.copy(C[0:128, 0:128], acc[0:128, 0:128])

    return kernel


def two_k_loops():
    """Two pipelined loops with one loop variable name (2 and 3 stages) accumulating into one fragment."""

    @T.prim_func
    def kernel(A: T.Buffer((64, 128), "float16"), B: T.Buffer((128, 64), "float16"),
               D: T.Buffer((64, 128), "float16"), E: T.Buffer((128, 64), "float16"),
               C: T.Buffer((64, 64), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        A_s = T.alloc_buffer((64, 32), "float16", scope="shared.dyn")
        B_s = T.alloc_buffer((32, 64), "float16", scope="shared.dyn")
        D_s = T.alloc_buffer((64, 32), "float16", scope="shared.dyn")
        E_s = T.alloc_buffer((32, 64), "float16", scope="shared.dyn")
        acc = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
        Tx.fill(acc[0:64, 0:64], T.float32(0))
        for k in T.serial(4, annotations={"num_stages": 2}):
            Tx.copy(A_s[0:64, 0:32], A[0:64, k * 32:k * 32 + 32])
            Tx.copy(B_s[0:32, 0:64], B[k * 32:k * 32 + 32, 0:64])
            Tx.gemm(acc[0:64, 0:64], A_s[0:64, 0:32], B_s[0:32, 0:64], acc[0:64, 0:64], False, False, 1.0, 1.0)
        for k in T.serial(4, annotations={"num_stages": 3}):
            Tx.copy(D_s[0:64, 0:32], D[0:64, k * 32:k * 32 + 32])
            Tx.copy(E_s[0:32, 0:64], E[k * 32:k * 32 + 32, 0:64])
            Tx.gemm(acc[0:64, 0:64], D_s[0:64, 0:32], E_s[0:32, 0:64], acc[0:64, 0:64], False, False, 1.0, 1.0)
        Tx.copy(C[0:64, 0:64], acc[0:64, 0:64])

    return kernel


def reference_two_k_loops(inputs):
    """C = A @ B + D @ E in float64."""
    f = lambda n: inputs[n].astype("float64")
    return {"C": f("A") @ f("B") + f("D") @ f("E")}
