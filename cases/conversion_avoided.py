"""A conflict that a conflict-free plan avoids: no conversion may be inserted.

``r`` is filled, then ``sum(x, axis 1)`` accumulates into it. Starting the free-level search from the fill
plans ``r`` one element per thread, which cannot receive the reduction (every thread holding a source row
must hold its result): that attempt fails with a layout conflict. Starting from the copy of ``x`` gives
``r`` the reduction's layout and no conflict at all. Conversions are only for conflicts no plan avoids, so
``r`` must not be split and the reduction's layout must win; ``check`` pins both by enumeration.
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90, both models; maint/peer): compiles; r takes the reduction's layout
(thread `_i % 4 * 32 + _rep`, 32 replicas, slot `_i // 4`), equal to ours; no restaging."""


def _kernel(m: int, n: int, threads: int):
    @T.prim_func
    def kernel(A: T.Buffer((m, n), "float32"), R: T.Buffer((m,), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        x = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        r = T.alloc_buffer((m,), "float32", scope="local.fragment")
        Tx.fill(r[0:m], T.float32(0))
        Tx.copy(x[0:m, 0:n], A[0:m, 0:n])
        Tx.sum(r[0:m], x[0:m, 0:n], axes=[1], accum=True)
        Tx.copy(R[0:m], r[0:m])
    return kernel


VARIANTS = {"accumulate_rows_64x128_t128": lambda: _kernel(64, 128, 128)}
REFERENCE = {"accumulate_rows_64x128_t128": lambda d: {"R": d["A"].sum(axis=1)}}


def check(variant, model, result):
    bufs = result["buffers"]
    assert not any(name.endswith("_cv") for name in bufs), f"no conversion may be inserted: {sorted(bufs)}"
    x, r = bufs["x"], bufs["r"]
    _support.assert_valid_fragment("r", r)
    # every thread holding an element of row i of x holds r[i]
    xt, rt = _support.block_threads(x), _support.block_threads(r)
    for i in range(xt.shape[0]):
        missing = set(xt[i].reshape(-1).tolist()) - set(rt[i].reshape(-1).tolist())
        assert not missing, f"row {i}: threads {sorted(missing)[:4]} hold x but not r"
