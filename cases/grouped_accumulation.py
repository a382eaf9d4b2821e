"""Several parallel iterations updating one fragment element (TileLang #1374):
``for i, j in parallel(16, 448): acc[i, j // 32] += B[i, j]``.

Each group of 32 iterations accumulates into one element, so the group must run in that element's thread,
one iteration after another. The loop takes the element's thread and, as its register slot, the element's
slot times 32 plus the digits the access does not use (``j % 32``): injective, and every holder runs exactly
its own updates. Lowering keeps the accumulation scalar: a vector store across lanes that all hit one
register would drop all but one update (a bug this case pins: the lane-wise store now needs distinct,
consecutive register slots).
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90; maint/peer, both models). 16x448, group 32, 128 threads (#1374): acc is
replicated 32 times (thread (_i * 14 + _j) % 4 * 32 + _rep, slot (_i * 14 + _j) // 4) while the loop runs
iteration (i, j) on thread (_i * 448 + _j) % 128: the 32 updates of one element land in 32 different threads, each
adding one term to its own replica, so the replicas disagree and none holds the sum (the wrong result reported in
#1374). Here: acc thread (_i * 14 + _j) % 128, and the loop runs the whole group in that thread. 64x128, group 4:
acc thread _i % 16 * 8 + _j // 4, loop thread _i % 16 * 8 + _j // 16 with 64 slots: the same mapping as ours under
register-count."""


def _grouped(m: int, n: int, group: int, threads: int):
    g = n // group

    @T.prim_func
    def kernel(B: T.Buffer((m, n), "float32"), Out: T.Buffer((m, g), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        acc = T.alloc_buffer((m, g), "float32", scope="local.fragment")
        Tx.fill(acc[0:m, 0:g], T.float32(0))
        for i in T.parallel(m):
            for j in T.parallel(n):
                acc[i, j // group] = acc[i, j // group] + B[i, j]
        Tx.copy(Out[0:m, 0:g], acc[0:m, 0:g])
    return kernel


VARIANTS = {
    "issue1374_16x448_g32_t128": lambda: _grouped(16, 448, 32, 128),
    "rows64x128_g4_t128": lambda: _grouped(64, 128, 4, 128),
}


def _ref(group):
    return lambda a: {"Out": a["B"].reshape(a["B"].shape[0], -1, group).sum(axis=-1, dtype=np.float64).astype(np.float32)}


REFERENCE = {"issue1374_16x448_g32_t128": _ref(32), "rows64x128_g4_t128": _ref(4)}
TOLERANCE = {v: (1e-5, 1e-4) for v in VARIANTS}


def check(variant, model, result):
    group = 32 if variant.startswith("issue") else 4
    (key,) = [k for k in result["loops"]]
    loop = result["loops"][key]
    _support.assert_covers(key, loop)
    _support.assert_owned(key, loop, "acc", result["buffers"]["acc"], lambda i, j: (i, j // group), write=True)
