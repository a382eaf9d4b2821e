"""A row reduction whose destination keeps one owner per row (TileLang's own reduction test).

A 128x128 fp32 fragment is summed (and, in a second variant, max-reduced) over its rows into a (128,)
fragment that is then copied out. The copy-out gives the destination one owner per element (4 registers per
thread); after the cross-thread combine every thread holding a source row has that row's result, so the
owners simply keep it. Replicating the destination over every holder of a row (32 threads) costs 128
registers instead of 4; the register-count model must find the cheaper attempt (516 registers in all, as
TileLang gives), and lowering must realise it (combine over all holders, owners keep the value).
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90, register-count), the same layouts as ours in every variant: sum_128x128_t32 x
`_j // 4` (512 registers), s `_i // 4` slot `_i % 4` (4 registers): 516 in all; max_64x256_t64 s `_i` (1
register); max_64x256_t128 s `_i % 2 * 64 + _rep`, replicate 64 (32 registers)."""


def reduce_lines(m: int, n: int, threads: int, reducer: str, axis: int = 1):
    """``B = reducer(A, axis)`` through a fragment (also the row and column reductions of ``maint/bench_kernels``)."""
    r = m if axis == 1 else n

    @T.prim_func
    def kernel(A: T.Buffer((m, n), "float32"), B: T.Buffer((r,), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        x = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        s = T.alloc_buffer((r,), "float32", scope="local.fragment")
        Tx.copy(x[0:m, 0:n], A[0:m, 0:n])
        if reducer == "sum":
            Tx.sum(s[0:r], x[0:m, 0:n], axes=[axis])
        else:
            Tx.max(s[0:r], x[0:m, 0:n], axes=[axis])
        Tx.copy(B[0:r], s[0:r])
    return kernel


VARIANTS = {
    "sum_128x128_t32": lambda: reduce_lines(128, 128, 32, "sum"),
    "max_64x256_t64": lambda: reduce_lines(64, 256, 64, "max"),
    # the copy-out's planned owners (threads i and 64 + i) are not all holders of row i (threads
    # i % 2 * 64 + 0..63): no owner subset exists, the destination stays on every holder of its row
    "max_64x256_t128": lambda: reduce_lines(64, 256, 128, "max"),
}

REFERENCE = {
    "sum_128x128_t32": lambda d: {"B": d["A"].astype(np.float64).sum(axis=1).astype(np.float32)},
    "max_64x256_t64": lambda d: {"B": d["A"].max(axis=1)},
    "max_64x256_t128": lambda d: {"B": d["A"].max(axis=1)},
}
OWNER_SUBSET = ("sum_128x128_t32", "max_64x256_t64")


def _registers(d: dict) -> int:
    return int(np.prod(d["output_shape"]))


def check(variant, model, result):
    buffers = result["buffers"]
    for name in ("x", "s"):
        _support.assert_valid_fragment(name, buffers[name])
    # every owner of a row's result holds some of that row's source elements (it can receive the combine)
    x_threads, s_threads = _support.thread_table(buffers["x"]), _support.thread_table(buffers["s"])
    for row in range(s_threads.shape[0]):
        assert set(s_threads[row].tolist()) <= set(x_threads[row].reshape(-1).tolist()), f"row {row}"
    if model == "register-count" and variant in OWNER_SUBSET:
        # one owner per row: no registers spent on replicas of the result
        _support.assert_replicate("s", buffers["s"], 1)
