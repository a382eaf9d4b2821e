"""Unroll every loop whose variable indexes a register array, so each access has a constant slot.

A per-thread array (``local`` scope: the fragments after partitioning, reduction scratch, conversion
buffers) stays in registers only when every index into it is a compile-time constant; one runtime index and
ptxas moves the whole array to local memory -- a stack frame, with no spill bytes reported. nvcc unrolls some
small loops on its own, not all (a 512-element fragment, a softmax's row loops), so the lowering decides:
a serial loop of constant extent whose variable reaches an index of a local array, directly or through a
``Bind``, becomes ``ForKind.UNROLLED`` (TVM unrolls it before printing the CUDA). Loops whose variable
indexes only shared or global memory (a pipelined K loop) are left rolled, and so is a loop that holds a
loop staying rolled (a main loop whose body has its own K steps) or whose unrolled body would exceed
``MAX_UNROLLED_STORES`` statements: there the kernel's own runtime index decides, not the partition.
"""
from __future__ import annotations

from tvm import tirx
from tvm.ir import TensorLoad

from ..ir_utils import int_value, mapped, walk

__all__ = ["unroll_register_loops", "register_index_vars", "MAX_UNROLLED_STORES"]

#: the most stores one unrolled loop may expand to (a 512-element fragment updated one scalar at a time fits)
MAX_UNROLLED_STORES = 4096


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
                and not _holds_rolled_loop(f) and _stores(f.body) * int_value(f.extent) <= MAX_UNROLLED_STORES):
            return tirx.For(f.loop_var, f.min, f.extent, tirx.ForKind.UNROLLED, f.body, None, f.annotations,
                            f.step)
        return f
    return func.with_body(mapped(func.body, [(tirx.For, on_for)]))


def _indexes_register(loop) -> bool:
    """The loop's own variable reaches a register index inside its body."""
    return any(v.same_as(loop.loop_var) for v in register_index_vars(loop.body))


def _holds_rolled_loop(loop) -> bool:
    """A serial loop stays inside ``loop``'s body (its inner loops were decided first: bottom-up)."""
    found: list = []
    walk(loop.body, [(tirx.For, lambda f: found.append(1) if f.kind == tirx.ForKind.SERIAL else None)])
    return bool(found)


def _stores(stmt) -> int:
    """Stores ``stmt`` executes once unrolled (inner unrolled loops counted by their extent)."""
    if isinstance(stmt, tirx.BufferStore):
        return 1
    if isinstance(stmt, tirx.For):
        ext = int_value(stmt.extent) if stmt.kind == tirx.ForKind.UNROLLED else 1
        return (ext or 1) * _stores(stmt.body)
    if isinstance(stmt, tirx.SeqStmt):
        return sum(_stores(s) for s in stmt.seq)
    if isinstance(stmt, tirx.IfThenElse):
        return _stores(stmt.then_case) + (_stores(stmt.else_case) if stmt.else_case is not None else 0)
    body = getattr(stmt, "body", None)
    return _stores(body) if body is not None else 1
