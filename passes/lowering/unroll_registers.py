"""Unroll every loop whose variable indexes a register array, so each access has a constant slot.

A per-thread array (``local`` scope: the fragments after partitioning, reduction scratch, conversion
buffers) stays in registers only when every index into it is a compile-time constant; one runtime index and
ptxas moves the whole array to local memory -- a stack frame, with no spill bytes reported. nvcc unrolls some
small loops on its own, not all (a 512-element fragment, a softmax's row loops), so the lowering decides:
a serial loop of constant extent whose variable reaches an index of a local array, directly or through a
``Bind``, becomes ``ForKind.UNROLLED`` (TVM unrolls it before printing the CUDA). Loops whose variable
indexes only shared or global memory (a pipelined K loop) are left rolled, and so is a loop that holds a
main loop's work (a barrier, an asynchronous copy, a loop of runtime extent) or whose unrolled body would
exceed ``MAX_UNROLLED_STORES`` stores: such a loop is the kernel's own (a per-thread mask read by the K
loop), and copying its body per iteration would cost more than the local-memory access it saves.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from ..ir_utils import int_value, mapped, walk

__all__ = ["unroll_register_loops", "register_index_vars", "MAX_UNROLLED_STORES", "UNROLLED_KEY"]

#: the most stores one unrolled loop may expand to, inner loops of constant extent counted at their extent (a
#: 512-element fragment folded one scalar at a time fits; every thread visiting a 64x32 tile under an owner
#: guard does not: ptxas then takes minutes over 2,048 predicated stores)
MAX_UNROLLED_STORES = 1024
#: loop annotation on every loop this pass unrolled (a program loop, not an instruction's own register loop)
UNROLLED_KEY = "tilelayout.unrolled"


def _is_register(buf) -> bool:
    return str(buf.scope()).startswith("local") and str(buf.scope()) != "local.var"


def register_index_vars(stmt) -> list:
    """The variables that appear in an index of a register array inside ``stmt``, with the ``Bind``
    variables expanded to the variables of their values."""
    binds: dict = {}
    walk(stmt, [(tirx.Bind, lambda b: binds.__setitem__(b.var, b.value))])
    indices: list = []

    def on_access(buf, idx):
        if _is_register(buf):
            indices.extend(idx)
    walk(stmt, [(tirx.BufferStore, lambda s: on_access(s.buffer, s.indices)),
                (TensorLoad, lambda e: on_access(e.source, e.indices) if tirx.is_buffer_var(e.source) else None)])
    found: list = []

    def on_var(v):
        if any(v.same_as(x) for x in found):
            return
        found.append(v)
        if v in binds:
            walk(binds[v], [(tirx.Var, on_var)])
    for e in indices:
        walk(e, [(tirx.Var, on_var)])
    return found


def unroll_register_loops(func):
    """``func`` with every constant-extent serial loop that indexes a register array unrolled."""
    used = register_index_vars(func.body)
    if not used:
        return func

    def on_for(f):
        if (f.kind == tirx.ForKind.SERIAL and int_value(f.extent) is not None and int_value(f.min) is not None
                and any(f.loop_var.same_as(v) for v in used) and _indexes_register(f)
                and not _holds_main_loop_work(f) and _stores(f.body) * int_value(f.extent) <= MAX_UNROLLED_STORES):
            notes = {**dict(f.annotations or {}), UNROLLED_KEY: True}    # was a serial loop of the program
            return tirx.For(f.loop_var, f.min, f.extent, tirx.ForKind.UNROLLED, f.body, None, notes, f.step)
        return f
    return func.with_body(mapped(func.body, [(tirx.For, on_for)]))


def _indexes_register(loop) -> bool:
    """The loop's own variable reaches a register index inside its body."""
    return any(v.same_as(loop.loop_var) for v in register_index_vars(loop.body))


#: calls that mark a main loop's work: barriers and asynchronous copies are ordered per iteration, and a body
#: holding them is a pipeline step, not per-register arithmetic
_MAIN_LOOP_CALLS = ("storage_sync", "barrier", "cp_async", "commit_group", "wait_group", "mbarrier")


def _holds_main_loop_work(loop) -> bool:
    """``loop``'s body holds a loop of runtime extent, a barrier or an asynchronous copy."""
    found: list = []

    def on_for(f):
        if int_value(f.extent) is None:
            found.append(1)

    def on_call(c):
        name = str(getattr(c.op, "name", ""))
        if any(word in name for word in _MAIN_LOOP_CALLS):
            found.append(1)
    walk(loop.body, [(tirx.For, on_for), (tvm.ir.Call, on_call)])
    return bool(found)


def _stores(stmt) -> int:
    """Stores ``stmt`` executes once unrolled (inner unrolled loops counted by their extent)."""
    if isinstance(stmt, tirx.BufferStore):
        return 1
    if isinstance(stmt, tirx.For):      # nvcc unrolls small constant loops itself: count them at their extent
        return (int_value(stmt.extent) or 1) * _stores(stmt.body)
    if isinstance(stmt, tirx.SeqStmt):
        return sum(_stores(s) for s in stmt.seq)
    if isinstance(stmt, tirx.IfThenElse):
        return _stores(stmt.then_case) + (_stores(stmt.else_case) if stmt.else_case is not None else 0)
    body = getattr(stmt, "body", None)
    return _stores(body) if body is not None else 1
