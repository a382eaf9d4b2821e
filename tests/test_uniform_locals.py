"""Conditions on block-uniform per-thread data (``passes/inference/uniform_locals.py``).

TileLang's block-sparse attention copies its row of the block mask into a local array and runs each attention
step under ``if block_mask[k]``. A local buffer every store of which is block-uniform may guard tile ops (every
thread takes the branch); any store that can differ between threads keeps the condition refused. On the CPU, the
branch (which holds barriers) is taken once after asserting every thread agrees.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import tirx

import tilelayout as tl
from conftest import main_text
from tilelayout.errors import TileLayoutError
from tilelayout.passes.ir_utils import walk
from tilelayout.passes.lowering.pipeline import build_cpu_lowered, lower_func


def _parse(text: str):
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx})


FLAGGED = main_text('A: T.Buffer((64, 64), "float32"), M: T.Buffer((4,), "int32"), B: T.Buffer((64, 64), "float32")',
                    threads=128, body='''
    flags = T.alloc_buffer((4,), "int32", scope="local")
    S = T.alloc_buffer((64, 64), "float32", scope="shared")
    F = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.fill(F[0:64, 0:64], T.float32(0))
    for v in T.serial(4):
        STORE
    for k in T.serial(4):
        if flags[k] > 0:
            Tx.copy(S[0:64, 0:64], A[0:64, 0:64])
            for i in T.parallel(64):
                for j in T.parallel(64):
                    F[i, j] = F[i, j] + S[i, j] * T.Cast("float32", k + 1)
    Tx.copy(B[0:64, 0:64], F[0:64, 0:64])
''')

UNIFORM = FLAGGED.replace("STORE", "flags[v] = M[v]")


@pytest.mark.parametrize("model", ["register-count", "io-aware"])
def test_ops_under_a_uniform_local_flag_run_on_every_thread_and_match_numpy(model):
    func = _parse(UNIFORM)
    result = tl.infer_layouts(func, cost_model=model)
    assert result.buffers["F"].thread_range == (0, 128)
    A = np.random.default_rng(0).standard_normal((64, 64)).astype("float32")
    for mask in ([1, 0, 1, 1], [0, 0, 0, 0], [0, 1, 0, 0]):
        M, B = np.array(mask, dtype="int32"), np.zeros_like(A)
        tl.build_cpu(func, cost_model=model)(A.copy(), M, B)
        weight = sum(k + 1 for k in range(4) if mask[k] > 0)
        np.testing.assert_allclose(B, A * weight, rtol=1e-6)


@pytest.mark.parametrize("store, why", [
    ("flags[v] = M[v] + tx", "a store to it reads tx"),                                       # the thread index
    ("if tx < 64:\n            flags[v] = M[v]", "a store to it reads tx"),                   # under a thread condition
    # bound to the index: the name is substituted (passes/index_binds.py), so the store reads tx itself
    ("t: T.int32 = tx * 0 + tx\n        flags[v] = M[v] * t", "a store to it reads tx"),
    ("flags[v] = T.Cast(\"int32\", F[v, 0])", "a store to it reads fragment F"),             # one holder's value
])
def test_a_flag_that_can_differ_between_threads_keeps_the_condition_refused(store, why):
    with pytest.raises(TileLayoutError, match="per-thread value") as info:
        tl.infer_layouts(_parse(FLAGGED.replace("STORE", store)))
    assert f"(flags: {why}" in str(info.value)


def test_one_varying_store_anywhere_makes_the_flag_varying():
    """Order does not matter: a later store of the thread index into the flags (after the loop) still makes
    every read of them varying, since the loop could run again in a caller's larger loop nest."""
    text = UNIFORM.replace("    Tx.copy(B[0:64, 0:64], F[0:64, 0:64])", "    flags[0] = tx\n    Tx.copy(B[0:64, 0:64], F[0:64, 0:64])")
    with pytest.raises(TileLayoutError, match="per-thread value"):
        tl.infer_layouts(_parse(text))


def test_a_flag_stored_inside_a_parallel_loop_is_varying():
    text = FLAGGED.replace("    for v in T.serial(4):\n        STORE", "    for v in T.parallel(4):\n        flags[v] = M[v]")
    with pytest.raises(TileLayoutError, match="inside a parallel or thread-bound loop"):
        tl.infer_layouts(_parse(text))


def test_the_cpu_check_fails_loudly_when_threads_disagree_on_the_flag():
    """Edit the lowered kernel so that odd threads see other flags: on a GPU they would split at the barriers
    inside the branch; the CPU run must raise rather than take one side."""
    lowered = lower_func(_parse(UNIFORM), cost_model="register-count")
    tx = []
    walk(lowered.body, [(tirx.AttrStmt, lambda n: tx.append(n.node.var) if n.attr_key == "thread_extent" and
                         str(n.node.thread_tag) == "threadIdx.x" else None)])

    def on_store(s):
        if str(s.buffer.name) == "flags":
            return tirx.BufferStore(s.buffer, s.value + tirx.floormod(tx[0], 2), list(s.indices))
        return s
    from tilelayout.ir_walk import mutate_typed
    edited = lowered.with_body(mutate_typed(lowered.body, [(tirx.BufferStore, lambda s, m: on_store(
        m.default_mutate(s)))]))
    kernel = build_cpu_lowered(edited)
    A = np.ones((64, 64), dtype="float32")
    with pytest.raises(Exception, match="disagree"):
        kernel(A, np.array([0, 1, 0, 0], dtype="int32"), np.zeros_like(A))
    build_cpu_lowered(lowered)(A, np.array([0, 1, 0, 0], dtype="int32"), np.zeros_like(A))   # unedited: runs


def test_a_flag_a_tile_op_writes_is_varying():
    """A tile op's per-thread writes into a local buffer are not followed: one uniform store besides does not
    make the buffer uniform."""
    text = FLAGGED.replace("    for v in T.serial(4):\n        STORE",
                           "    for v in T.serial(4):\n        flags[v] = M[v]\n    Tx.fill(flags[0:4], 1)")
    with pytest.raises(TileLayoutError, match="tile op .* writes it"):
        tl.infer_layouts(_parse(text))


def test_a_uniform_branch_around_a_shared_tile_builds_for_cuda(monkeypatch):
    """TVM's barrier insertion refuses inside any if it is not told is thread-invariant: the flag branch (a
    shared tile written and read inside) is wrapped in tvm_thread_invariant, thread guards are not; without the
    wrapper the CUDA build stops ("Cannot insert syncs inside condition", fuzz seeds 2470-2494)."""
    from tilelayout.passes.lowering import lower_tile_ops, pipeline, uniform_branches
    func = _parse(UNIFORM)
    lowered = lower_func(func, cost_model="register-count")
    conds = []
    walk(lowered.body, [(tirx.IfThenElse, lambda s: conds.append(s.condition))])
    wrapped = [c for c in conds if uniform_branches.is_marked(c)]
    assert wrapped and all("flags" in str(c) for c in wrapped)
    assert all("tx" in str(c) or "threadIdx" in str(c) for c in conds if not uniform_branches.is_marked(c))
    assert "__global__" in pipeline.cuda_source(func, cost_model="register-count")
    # lower_func imports it from uniform_branches when it runs; lower_tile_ops holds its own name
    for module in (uniform_branches, lower_tile_ops):
        monkeypatch.setattr(module, "mark_uniform_branches", lambda f: f)
    with pytest.raises(TileLayoutError, match="Cannot insert syncs"):
        pipeline.cuda_source(func, cost_model="register-count")
