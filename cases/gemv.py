"""A gemv written as TileLang's ``examples/gemv`` writes it (``gemv_alloc_reducer``): one block per
``block_M`` rows, a pipelined loop over ``block_N``-wide column tiles (a copied through shared memory into a
fragment, x copied into a fragment), and a ``T.parallel(block_M, block_N)`` nest accumulating
``o_reducer[i] += a[i, j] * x[j]`` into ``tilelayout.lang.alloc_reducer(block_M, "float32", replication="all")``,
finalized once after the loop and copied out as float16. The ``plain`` variant writes the accumulator as an
ordinary fragment with a 256-wide column tile on 128 threads: keeping each row in one thread would need 257
fragment registers per thread, so inference makes it a reducer on its own (``passes/inference/auto_reducers.py``).

Inference takes the nest's loop layout from ``a_frag`` and gives the reducer, as its layout, that loop layout
projected onto the rows: each row is replicated over exactly the threads that run iterations of it, so every
thread keeps partials of a few rows (not a whole row of 128 products) and ``finalize_reducer`` combines them with
warp shuffles. The loop never runs an iteration in two threads (that would count its update twice).
"""
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support
from tilelayout import lang as L

TILELANG = """TileLang 0.1.15 (maint/peer twin: gemv_alloc_reducer as examples/gemv writes it, legacy
`T.alloc_reducer(block_M, T.float32, replication="all")`). sm_80, both models: the same layouts as ours --
a_frag thread `_i % 16 * 16 + _j // 8`, o_reducer thread `_i % 16 * 16 + _rep`, slot `_i // 16`, 16 replicas.
sm_90a (128 threads), both models: TileLang warp-specialises (consumer threads 128..255) and gives a_frag one whole
column per thread (thread `_j`) and o_reducer every row in every thread (128 replicas, 128 registers); ours
keeps the sm_80 shape (o_reducer thread `_i % 8 * 16 + _rep`, 16 slots). ptxas (maint/peer/codegen_tilelang.py
against maint/bench_codegen.py): sm_80 TileLang 80 registers, ours 60; sm_90a TileLang 240 registers and a
512-byte stack frame, ours 72 and none. Plain variant (ordinary fragment accumulator, sm_80): TileLang keeps
each row in one thread (a_frag thread `_i`, x_frag 128 replicas, o_acc unreplicated) and ptxas gives it 66
registers; ours is split into a reducer (16 threads per row) and gets 94 (64 unsplit: ptxas streams the row)."""


def _on(kernel, arch):
    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


def _gemv(m: int, n: int, block_m: int, block_n: int, threads: int, stages: int, arch: str, reducer: bool):
    """``o = a @ x`` (float16 in and out, float32 partials) accumulated in ``o_reducer`` (a reducer, finalized
    after the loop) or, with ``reducer=False``, in the ordinary fragment ``o_acc``."""
    @T.prim_func
    def kernel(a: T.Buffer((m, n), "float16"), x: T.Buffer((n,), "float16"), o: T.Buffer((m,), "float16")):
        i0_m = T.launch_thread("blockIdx.x", m // block_m)
        tx = T.launch_thread("threadIdx.x", threads)
        a_smem = T.alloc_buffer((block_m, block_n), "float16", scope="shared.dyn")
        a_frag = T.alloc_buffer((block_m, block_n), "float16", scope="local.fragment")
        x_frag = T.alloc_buffer((block_n,), "float16", scope="local.fragment")
        # meta_var: ``acc`` names the accumulator without renaming it (the goldens key on o_reducer / o_acc)
        if reducer:
            o_reducer = L.alloc_reducer(block_m, "float32", replication="all")
            acc = T.meta_var(o_reducer)
        else:
            o_acc = T.alloc_buffer((block_m,), "float32", scope="local.fragment")
            acc = T.meta_var(o_acc)
        Tx.fill(acc[0:block_m], T.float32(0))
        for i0_n in T.serial(n // block_n, annotations={"num_stages": stages}):
            Tx.copy(a_smem[0:block_m, 0:block_n], a[i0_m * block_m:i0_m * block_m + block_m,
                                                     i0_n * block_n:i0_n * block_n + block_n])
            Tx.copy(a_frag[0:block_m, 0:block_n], a_smem[0:block_m, 0:block_n])
            Tx.copy(x_frag[0:block_n], x[i0_n * block_n:i0_n * block_n + block_n])
            for i1_m in T.parallel(block_m):
                for i1_n in T.parallel(block_n):
                    acc[i1_m] = acc[i1_m] + T.Cast("float32", a_frag[i1_m, i1_n] * x_frag[i1_n])
        if reducer:
            L.finalize_reducer(acc)
        Tx.copy(o[i0_m * block_m:i0_m * block_m + block_m], acc[0:block_m])
    return _on(kernel, arch)


def gemv_reducer(m: int = 256, n: int = 256, block_m: int = 128, block_n: int = 128, threads: int = 256,
                 stages: int = 2, arch: str = "sm_80"):
    """TileLang's gemv_alloc_reducer: o = a @ x, float16 in and out, float32 partials."""
    return _gemv(m, n, block_m, block_n, threads, stages, arch, reducer=True)


def gemv_plain(m: int = 256, n: int = 1024, block_m: int = 128, block_n: int = 256, threads: int = 128,
               stages: int = 2, arch: str = "sm_80"):
    """The same gemv with an ordinary fragment as the accumulator (``acc[i] += a[i, j] * x[j]``): keeping each
    row in one thread needs 257 fragment registers per thread here, over the budget, so inference splits the
    rows across threads on its own (``auto_reducers``: the accumulator becomes a reducer, finalized after the
    loop)."""
    return _gemv(m, n, block_m, block_n, threads, stages, arch, reducer=False)


VARIANTS = {
    "sm80_reducer_256x1024_t256": lambda: gemv_reducer(n=1024, arch="sm_80"),
    "sm90a_reducer_256x1024_t128": lambda: gemv_reducer(n=1024, threads=128, stages=3, arch="sm_90a"),
    "sm80_plain_256x1024_b256_t128": lambda: gemv_plain(arch="sm_80"),
}


def _ref(d):
    a, x = d["a"], d["x"]
    prod = (a * x[None, :]).astype(np.float16).astype(np.float64)      # the float16 product, as the kernel forms it
    return {"o": prod.sum(axis=1)}


REFERENCE = {name: _ref for name in VARIANTS}
TOLERANCE = {name: (2e-2, 5e-2) for name in VARIANTS}


def check(variant, model, result):
    name = "o_acc" if "plain" in variant else "o_reducer"
    red = result["buffers"][name]
    _support.assert_valid_fragment(name, red)
    if "plain" in variant:
        assert red["replicate"] > 1, f"o_acc must be split across threads (a reducer): {red}"
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
        if key.startswith("i1_m,i1_n"):
            assert loop["replicate"] == 1, f"{key}: a replicated loop would count reducer updates twice: {loop}"
            _support.assert_owned(key, loop, name, red, lambda i, j: (i,))
