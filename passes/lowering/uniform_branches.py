"""Telling TVM which branches every thread takes alike, so that its barrier insertion may place barriers inside.

apache-tvm 0.27's ``ThreadSync`` inserts the ``__syncthreads`` a shared-memory hazard needs, but refuses inside any
``if`` whose condition is not wrapped in ``tvm_thread_invariant`` ("Cannot insert syncs inside condition"): it
cannot tell a uniform branch from a divergent one. Block-sparse attention's ``if block_mask[k]`` around a shared
tile written and read in the branch, or any ``if`` on a loop variable around such a tile, stopped the CUDA build
(fuzz seeds 2470-2494 with the ``flagged`` step; the CPU check, which serialises threads, passed them).

A condition is wrapped when it names no thread index and reads only global buffers and local buffers every
thread holds equal (``inference/uniform_locals``): every thread takes the branch alike, which is what the
wrapper promises. Thread-dependent guards (partition guards, ``tx < 64`` regions) stay unwrapped, so TVM still
never puts a barrier where only part of the block would reach it. The CPU build unwraps (``unwrap``).
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from .from_inference import uniform_local_buffers
from ..ir_utils import mapped, walk

__all__ = ["mark_uniform_branches", "unwrap", "is_marked"]

_INVARIANT = "tirx.tvm_thread_invariant"


def is_marked(cond) -> bool:
    return isinstance(cond, tvm.ir.Call) and isinstance(cond.op, tvm.ir.Op) and str(cond.op.name) == _INVARIANT


def mark_uniform_branches(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with the condition of every block-uniform ``if`` wrapped in ``tvm_thread_invariant``."""
    uniform = uniform_local_buffers(func.body)
    threads = uniform.thread_vars
    if not threads:
        return func

    def invariant(cond) -> bool:
        names: list = []
        walk(cond, [(tirx.Var, names.append)])
        if any(any(v.same_as(t) for t in threads) for v in names):
            return False
        ok = [True]

        def on_load(e):
            scope = str(e.source.scope())
            if not (scope in ("global", "") or (scope in ("local", "local.var") and str(e.source.name) in uniform)):
                ok[0] = False
        walk(cond, [(TensorLoad, on_load)])
        return ok[0]

    def on_if(s):
        if is_marked(s.condition) or not invariant(s.condition):
            return s
        return tirx.IfThenElse(tirx.call_intrin("bool", _INVARIANT, s.condition), s.then_case, s.else_case)

    return func.with_body(mapped(func.body, [(tirx.IfThenElse, on_if)]))


def unwrap(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every ``tvm_thread_invariant(c)`` condition back to ``c`` (the CPU build)."""
    def on_if(s):
        if not is_marked(s.condition):
            return s
        return tirx.IfThenElse(s.condition.args[0], s.then_case, s.else_case)

    return func.with_body(mapped(func.body, [(tirx.IfThenElse, on_if)]))
