"""A tensor-core gemm tile: C = A @ B for fp16 (64, 32) x (32, 64) with a float32 accumulator, 128 threads.

The operands are staged through shared memory, the accumulator is a ``local.fragment``; inference gives it
the layout of the gemm's instruction (mma.sync on sm_80, wgmma on sm_90a) and lowering emits that
instruction. ``reference`` is the same product in numpy, for ``tilelayout check``.
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

M, N, K = 64, 64, 32


@T.prim_func
def gemm(A: T.Buffer((M, K), "float16"), B: T.Buffer((K, N), "float16"), C: T.Buffer((M, N), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    A_s = T.alloc_buffer((M, K), "float16", scope="shared")
    B_s = T.alloc_buffer((K, N), "float16", scope="shared")
    acc = T.alloc_buffer((M, N), "float32", scope="local.fragment")
    Tx.copy(A_s[0:M, 0:K], A[0:M, 0:K])
    Tx.copy(B_s[0:K, 0:N], B[0:K, 0:N])
    # D, A, B, C, transpose_A, transpose_B, alpha, beta: acc = 1 * A_s @ B_s + 0 * acc
    Tx.gemm(acc[0:M, 0:N], A_s[0:M, 0:K], B_s[0:K, 0:N], acc[0:M, 0:N], False, False,
            T.float32(1.0), T.float32(0.0))
    Tx.copy(C[0:M, 0:N], acc[0:M, 0:N])


def reference(inputs: dict) -> dict:
    """What ``C`` must hold, computed with numpy alone (``tilelayout check --reference``)."""
    return {"C": (inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)).astype(np.float32)}
