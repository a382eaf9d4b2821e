"""Row softmax over a (256, 128) float32 matrix, 32 rows per block of 128 threads.

A kernel as a user writes it: plain TVMScript TIRx with tile ops (``Tx.copy``, ``Tx.max``, ``Tx.sum``) and
parallel loops over ``local.fragment`` buffers. Nothing in it says which thread holds which element; the
``tilelayout`` pass decides that. ``reference`` is an independent numpy version for ``tilelayout check``.
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

ROWS, COLS, BLOCK_ROWS = 256, 128, 32


@T.prim_func
def row_softmax(A: T.Buffer((ROWS, COLS), "float32"), B: T.Buffer((ROWS, COLS), "float32")):
    bx = T.launch_thread("blockIdx.x", ROWS // BLOCK_ROWS)
    tx = T.launch_thread("threadIdx.x", 128)
    x = T.alloc_buffer((BLOCK_ROWS, COLS), "float32", scope="local.fragment")
    row_max = T.alloc_buffer((BLOCK_ROWS,), "float32", scope="local.fragment")
    row_sum = T.alloc_buffer((BLOCK_ROWS,), "float32", scope="local.fragment")
    r0 = bx * BLOCK_ROWS
    Tx.copy(x[0:BLOCK_ROWS, 0:COLS], A[r0:r0 + BLOCK_ROWS, 0:COLS])     # destination first
    Tx.max(row_max[0:BLOCK_ROWS], x[0:BLOCK_ROWS, 0:COLS], axes=[1])
    for i in T.parallel(BLOCK_ROWS):
        for j in T.parallel(COLS):
            x[i, j] = T.exp(x[i, j] - row_max[i])
    Tx.sum(row_sum[0:BLOCK_ROWS], x[0:BLOCK_ROWS, 0:COLS], axes=[1])
    for i in T.parallel(BLOCK_ROWS):
        for j in T.parallel(COLS):
            x[i, j] = x[i, j] / row_sum[i]
    Tx.copy(B[r0:r0 + BLOCK_ROWS, 0:COLS], x[0:BLOCK_ROWS, 0:COLS])


def reference(inputs: dict) -> dict:
    """What ``B`` must hold, computed with numpy alone (``tilelayout check --reference``)."""
    a = inputs["A"].astype(np.float64)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return {"B": (e / e.sum(axis=1, keepdims=True)).astype(np.float32)}
