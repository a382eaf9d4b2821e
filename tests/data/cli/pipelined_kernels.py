"""Pipelined gemms for ``tilelayout show``: one K loop with 2 stages, and two K loops both named ``k``."""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx


@T.macro
def _k_loop(acc, A, B, A_s, B_s, m: int, n: int, bk: int, stages: int):
    """``acc += A @ B`` over 4 K tiles of width ``bk``, staged through A_s / B_s in a loop of ``stages`` stages."""
    for k in T.serial(4, annotations={"num_stages": stages}):
        Tx.copy(A_s[0:m, 0:bk], A[0:m, k * bk:k * bk + bk])
        Tx.copy(B_s[0:bk, 0:n], B[k * bk:k * bk + bk, 0:n])
        Tx.gemm(acc[0:m, 0:n], A_s[0:m, 0:bk], B_s[0:bk, 0:n], acc[0:m, 0:n], False, False, 1.0, 1.0)


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
        _k_loop(acc, A, B, A_s, B_s, 128, 128, 64, 2)
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
        _k_loop(acc, A, B, A_s, B_s, 64, 64, 32, 2)
        _k_loop(acc, D, E, D_s, E_s, 64, 64, 32, 3)
        Tx.copy(C[0:64, 0:64], acc[0:64, 0:64])

    return kernel


def reference_two_k_loops(inputs):
    """C = A @ B + D @ E in float64."""
    f = lambda n: inputs[n].astype("float64")
    return {"C": f("A") @ f("B") + f("D") @ f("E")}
