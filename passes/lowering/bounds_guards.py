"""Safe global memory: guard every global access whose index TVM's analyzer cannot prove inside the buffer.

TileLang kernels read past a tensor's end and rely on its safe-memory legalisation: the last, partial tile
of a shape that is not a tile multiple (static or symbolic, ``A: (m, 64)`` over ``ceildiv(m, 64)`` blocks),
and data-dependent offsets (a grouped gemm's ``m_start = offsets[g]``, a decode kernel's group offset). This
pass runs after the tile ops became loops and before partitioning, so every access still has its
program-level index (``A[m_start + v0, v1]``) and the analyzer knows every variable's range: the thread and
block extents, each enclosing loop, the enclosing ``if`` conditions (and an ``if_then_else``'s), and what a
bound scalar (``Bind``) stands for. Where it cannot prove ``0 <= idx < extent`` in some dimension:

- a load becomes ``if_then_else(in_bounds, A[idx], pad)``: the pad is 0, or the buffer's entry of the
  function attribute ``tilelayout.safe_memory_pad`` (``passes/safe_memory.py``);
- a store, and an atomic update, runs under ``if in_bounds``: it is dropped outside.

Accesses proven in bounds stay as they are (a kernel whose every access is provable lowers unchanged).
Partitioning carries the guards into every thread; the vectoriser keeps a vector only where the guard takes
one value on all of its lanes (``loop_vectorize``); a pipelined copy turns a zero-padded guarded load into
cp.async's zero-filling form (``software_pipeline``). Each guard is recorded in the function attribute
``tilelayout.safe_memory_guards`` (buffer, access, dimensions, statement), which ``tilelayout show`` and
``explain`` print. ``tilelayout.safe_memory = False`` on the function turns the pass off.
"""
from __future__ import annotations

from typing import Any

import tvm
from tvm import sym, tirx
from tvm.ir import Range, TensorLoad

from tilelayout.expr import expr_text
from tilelayout.lang import atomic_of

from ..ir_utils import mutate
from ..safe_memory import GUARDS_ATTR, pad_const, pad_values, safe_memory_enabled
from .loop_partition import LoweringError

__all__ = ["guard_out_of_bounds", "guard_records", "GUARDS_ATTR"]

#: longest statement text kept in a guard record
_STATEMENT_CHARS = 160


def _is_global(buf) -> bool:
    return str(buf.scope()) in ("", "global")


def _is_if_then_else(e) -> bool:
    return isinstance(e, tvm.ir.Call) and str(getattr(e.op, "name", "")) in ("tirx.if_then_else", "prim.if_then_else")


def _access_text(buf, indices) -> str:
    return f"{buf.name}[{', '.join(expr_text(i) for i in indices)}]"


def _statement_text(stmt) -> str:
    if isinstance(stmt, tirx.BufferStore):
        text = f"{_access_text(stmt.buffer, stmt.indices)} = {expr_text(stmt.value)}"
    else:
        text = expr_text(stmt.value) if isinstance(stmt, tirx.Evaluate) else type(stmt).__name__
    text = " ".join(text.split())
    return text if len(text) <= _STATEMENT_CHARS else text[:_STATEMENT_CHARS - 3] + "..."


class _Guards:
    """The analyzer over the ranges in scope, and the guards written so far (the record)."""

    def __init__(self, pads: dict):
        self.ana = sym.Analyzer()
        self.pads = pads
        self.records: list = []
        self.statement = None          # the statement whose accesses are being guarded

    def bind_range(self, var, lo, ext) -> None:
        try:
            self.ana.bind(var, Range.from_min_extent(lo, ext))
        except Exception:  # noqa: BLE001 - a variable bound twice keeps its first range
            pass

    def bind_value(self, var, value) -> None:
        if "int" not in str(var.ty):
            return
        try:
            self.ana.bind(var, value)
        except Exception:  # noqa: BLE001 - as above
            pass

    def condition(self, buf, indices, access: str) -> Any:
        """The in-bounds condition of ``buf[indices]`` the analyzer cannot prove (recorded), or None."""
        parts, dims = [], []
        for d, (idx, ext) in enumerate(zip(indices, buf.shape)):
            if isinstance(idx, (tirx.Ramp, tirx.Broadcast)):
                if self.ana.can_prove(_lowest(idx) >= 0) and self.ana.can_prove(_highest(idx) < ext):
                    continue
                raise LoweringError(f"global buffer {buf.name}: the vector index {expr_text(idx)} of dimension {d} "
                                    f"may leave the buffer and cannot be guarded lane by lane; write it as a "
                                    f"loop, or turn the guards off with the function attribute "
                                    f"tilelayout.safe_memory = False")
            low = not self.ana.can_prove(idx >= 0)
            high = not self.ana.can_prove(idx < ext)
            if low:
                parts.append(idx >= 0)
            if high:
                parts.append(idx < ext)
            if low or high:
                dims.append(d)
        if not parts:
            return None
        stmt = _statement_text(self.statement) if self.statement is not None else _access_text(buf, indices)
        entry = {"buffer": str(buf.name), "access": access, "dims": dims, "index": _access_text(buf, indices),
                 "statement": stmt}
        if entry not in self.records:
            self.records.append(entry)
        return tirx.all(*parts) if len(parts) > 1 else parts[0]

    def pad(self, buf):
        return pad_const(str(buf.dtype), self.pads.get(str(buf.name), 0.0))


def _fact(cond):
    """A branch condition as the analyzer can use it: ``tvm_thread_invariant(c)`` (a uniform branch) is ``c``."""
    while isinstance(cond, tvm.ir.Call) and str(getattr(cond.op, "name", "")) == "tirx.tvm_thread_invariant":
        cond = cond.args[0]
    if isinstance(cond, tirx.Not):
        return tirx.Not(_fact(cond.a))
    return cond


def _lowest(idx):
    if isinstance(idx, tirx.Broadcast):
        return idx.value
    return tirx.min(idx.base, idx.base + idx.stride * (idx.lanes - 1))


def _highest(idx):
    if isinstance(idx, tirx.Broadcast):
        return idx.value
    return tirx.max(idx.base, idx.base + idx.stride * (idx.lanes - 1))


def guard_out_of_bounds(func):
    """``func`` with every possibly out-of-bounds global access guarded and the guards recorded in
    ``tilelayout.safe_memory_guards``; unchanged when ``tilelayout.safe_memory`` is False."""
    if not safe_memory_enabled(func):
        return func
    g = _Guards(pad_values(func))
    handlers: list = []

    def under(cond, node):
        """``node`` guarded with ``cond`` known to hold."""
        if node is None:
            return None
        with g.ana.constraint_scope(_fact(cond)):
            return mutate(node, handlers)

    def on_attr(node, mutator):
        if node.attr_key == "thread_extent" and isinstance(node.node, tirx.IterVar):
            g.bind_range(node.node.var, 0, node.value)
        return mutator.default_mutate(node)

    def on_for(loop, mutator):
        g.bind_range(loop.loop_var, loop.min, loop.extent)
        return mutator.default_mutate(loop)

    def on_bind(node, mutator):
        node = mutator.default_mutate(node)
        g.bind_value(node.var, node.value)
        return node

    def on_let(node, mutator):
        value = mutate(node.value, handlers)
        g.bind_value(node.var, value)
        return tirx.LetStmt(node.var, value, mutate(node.body, handlers))

    def on_if(node, mutator):
        cond = mutate(node.condition, handlers)
        return tirx.IfThenElse(cond, under(node.condition, node.then_case),
                               under(tirx.Not(node.condition), node.else_case))

    def on_call(e, mutator):
        if str(getattr(e.op, "name", "")) == "tirx.address_of":
            return e                   # an atomic's target: the atomic statement is guarded as a whole
        if not _is_if_then_else(e):
            return mutator.default_mutate(e)
        cond = mutate(e.args[0], handlers)
        return tirx.if_then_else(cond, under(e.args[0], e.args[1]), under(tirx.Not(e.args[0]), e.args[2]))

    def on_load(e, mutator):
        e = mutator.default_mutate(e)
        if not tirx.is_buffer_var(e.source) or not _is_global(e.source):
            return e
        cond = g.condition(e.source, list(e.indices), "load")
        if cond is None:
            return e
        return tirx.if_then_else(cond, e, g.pad(e.source))

    def on_store(s, mutator):
        outer, g.statement = g.statement, s
        try:
            s = mutator.default_mutate(s)
            if not _is_global(s.buffer):
                return s
            cond = g.condition(s.buffer, list(s.indices), "store")
        finally:
            g.statement = outer
        return s if cond is None else tirx.IfThenElse(cond, s, None)

    def on_eval(e, mutator):
        outer, g.statement = g.statement, e
        try:
            e = mutator.default_mutate(e)
            at = atomic_of(e.value)
            if at is None or not tirx.is_buffer_var(at.target.source) or not _is_global(at.target.source):
                return e
            cond = g.condition(at.target.source, list(at.target.indices), f"atomic {at.kind}")
        finally:
            g.statement = outer
        return e if cond is None else tirx.IfThenElse(cond, e, None)

    handlers += [(tirx.AttrStmt, on_attr), (tirx.For, on_for), (tirx.Bind, on_bind), (tirx.LetStmt, on_let),
                 (tirx.IfThenElse, on_if), (tvm.ir.Call, on_call), (TensorLoad, on_load),
                 (tirx.BufferStore, on_store), (tirx.Evaluate, on_eval)]
    body = mutate(func.body, handlers)
    return func.with_body(body).with_attr(GUARDS_ATTR, g.records)


def guard_records(func) -> list:
    """The guards ``guard_out_of_bounds`` recorded on a lowered function, as plain dicts (program order)."""
    attrs = func.attrs
    if attrs is None or GUARDS_ATTR not in attrs:
        return []
    out = []
    for entry in attrs[GUARDS_ATTR]:
        out.append({"buffer": str(entry["buffer"]), "access": str(entry["access"]),
                    "dims": [int(d) for d in entry["dims"]], "index": str(entry["index"]),
                    "statement": str(entry["statement"])})
    return out
