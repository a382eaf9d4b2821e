"""Loop vectorize: give every partitioned nest's innermost slot loop the widest safe vector width.

Slot loops are made by partitioning, after inference: their widths are this pass's decision, recorded on
each slot loop (``VECTOR_WIDTH_KEY``). The width comes from ``vector_width.plan_vector_width`` -- the shared
rule inference's planner and the io-aware model apply to user loops -- applied to the partitioned body:
global/shared accesses must move contiguously and aligned with the slot, stores that do not move with it stay
scalar, register accesses only cap the width by element size, and the whole is bounded by
``hardware.max_vector_load_bits(target, global_only)``. Guards (padding,
thread range, ``rep == 0``) must be invariant inside each vector, as TileLang requires; they are then
hoisted or evaluated once per vector so TVM's VectorizeLoop emits real vector loads and stores.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from tilelayout.layout import substitute

from ..hardware import func_target, max_vector_load_bits, normalize_target
from ..ir_utils import int_value, mapped, mutate, prim_func_pass, thread_launch, walk
from ..vector_width import plan_vector_width, same_in_group, value_lane_cap
from .loop_marks import SLOT_LOOP_KEY
from .atomics import has_atomic
from .vector_atomics import vector_atomic_lanes, vectorize_atomic

__all__ = ["LoopVectorize", "vectorize_function", "VECTOR_WIDTH_KEY"]

#: annotation recording the chosen width on the slot loop (1 = left scalar)
VECTOR_WIDTH_KEY = "tilelayout.vector_width"


@dataclass(frozen=True)
class _Buf:
    """What the width rule needs to know of a buffer."""

    name: str
    bits: int
    shape: list
    scope: str
    dtype: str = ""

    @property
    def is_fragment(self) -> bool:
        return self.scope == "local.fragment"

    @property
    def is_local(self) -> bool:
        return self.scope.startswith("local")

    @property
    def is_shared(self) -> bool:
        return self.scope.startswith("shared")


def LoopVectorize(target=None):
    """Pass: vectorize the innermost slot loop of every partitioned nest."""
    return prim_func_pass("tilelayout.LoopVectorize",
                          lambda func: vectorize_function(func, func_target(func, target)))


def vectorize_function(func, target=None):
    target = normalize_target(target)
    tx, threads = thread_launch(func)
    scope: list = []      # enclosing loops (var, extent) with constant bounds from 0

    def on_for(loop, mutator):
        if SLOT_LOOP_KEY in loop.annotations:
            return _vectorize(loop, scope, tx, threads, target)
        lo, ext = int_value(loop.min), int_value(loop.extent)
        pushed = lo == 0 and ext is not None
        if pushed:
            scope.append((loop.loop_var, ext))
        try:
            return mutator.default_mutate(loop)
        finally:
            if pushed:
                scope.pop()

    return func.with_body(mutate(func.body, [(tirx.For, on_for)]))


def _accesses(body) -> list:
    out = []

    def info(buf) -> _Buf:
        return _Buf(str(buf.name), tvm.DataType(buf.dtype).bits, [int_value(s) if int_value(s) is not None else s
                                                                  for s in buf.shape], buf.scope() or "global",
                    str(buf.dtype))

    walk(body, [(tirx.BufferStore, lambda s: out.append((info(s.buffer), list(s.indices), True))),
                (TensorLoad, lambda e: out.append((info(e.source), list(e.indices), False)))])
    return out


def _conditions(body) -> list:
    out = []

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name).endswith("if_then_else"):
            out.append(c.args[0])

    walk(body, [(tirx.IfThenElse, lambda s: out.append(s.condition)), (tvm.ir.Call, on_call)])
    return out


def slot_loop_width(loop, scope: list, tx, threads: int, target) -> int:
    """The vector width for one slot loop (1 when it must stay scalar)."""
    ext = int_value(loop.extent)
    if ext is None or int_value(loop.min) != 0:
        return 1
    accesses = _accesses(loop.body)
    if not accesses:
        return 1
    atomic_lanes = vector_atomic_lanes(loop.body, target) if has_atomic(loop.body) else None
    if atomic_lanes == 1:       # an atomic is one scalar read-modify-write per lane, unless vector atomics exist
        return 1
    global_only = not any(b.is_shared or b.is_local for b, _, _ in accesses)
    max_bits = max_vector_load_bits(target, global_only=global_only)
    outer = list(scope) + ([(tx, threads)] if tx is not None else [])
    loop_vars = [v for v, _ in outer] + [loop.loop_var]
    extents = [e for _, e in outer] + [ext]
    width = plan_vector_width(loop_vars, extents, [a for a in accesses if a[1]], max_bits,
                              value_lane_cap(loop.body))
    if atomic_lanes is not None:
        width = min(width, atomic_lanes)
    conds = _conditions(loop.body)
    while width > 1 and not all(_invariant(c, loop.loop_var, ext, width, outer) for c in conds):
        width //= 2
    return width


def _invariant(expr, var, extent: int, width: int, outer: list) -> bool:
    """``expr`` takes one value inside every aligned group of ``width`` iterations of ``var``."""
    return _invariant_in(expr, var, extent, width, dict(outer))


def _invariant_in(expr, var, extent: int, width: int, bounds: dict) -> bool:
    return same_in_group(expr, var, extent, width, bounds) or \
        _comparison_invariant(expr, var, extent, width, bounds)


def _comparison_invariant(expr, var, extent: int, width: int, bounds: dict) -> bool:
    """A conjunction / disjunction / negation of integer comparisons, each invariant in the group: ``a < b`` holds
    exactly when ``(a - b) // width < 0``, so the comparison is invariant when that quotient is. This proves a
    safe-memory guard ``base + lane < extent`` one value per vector when ``extent`` and the vector's start are
    multiples of the width (a partial tile that ends on a vector boundary)."""
    if isinstance(expr, (tirx.And, tirx.Or)):
        return all(_invariant_in(x, var, extent, width, bounds) for x in (expr.a, expr.b))
    if isinstance(expr, tirx.Not):
        return _invariant_in(expr.a, var, extent, width, bounds)
    # ``a < b`` and its negation ``a >= b`` hinge on the sign of ``a - b``; ``a > b`` and ``a <= b`` on ``b - a``
    for kinds, diff in (((tirx.LT, tirx.GE), lambda a, b: a - b), ((tirx.GT, tirx.LE), lambda a, b: b - a)):
        if isinstance(expr, kinds) and str(expr.a.ty).startswith("int") and str(expr.b.ty).startswith("int"):
            return same_in_group(tirx.floordiv(diff(expr.a, expr.b), width), var, extent, width, bounds)
    return False


def _vectorize(loop, scope: list, tx, threads: int, target):
    width = slot_loop_width(loop, scope, tx, threads, target)
    ann = {str(k): v for k, v in loop.annotations.items()}
    ann[VECTOR_WIDTH_KEY] = width
    ext = int_value(loop.extent)
    if width == 1:
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, None, ann, loop.step)
    var = loop.loop_var
    hi, lane = tirx.Var(f"{var.name}_o", "int32"), tirx.Var(f"{var.name}_v", "int32")
    base = hi * width if ext > width else tirx.const(0, "int32")
    if has_atomic(loop.body):
        bounds = {v: (0, e) for v, e in scope}
        bounds.update({tx: (0, threads)} if tx is not None else {})
        bounds.update({var: (0, ext), hi: (0, max(1, ext // width))})
        vec = vectorize_atomic(loop.body, var, base, width, bounds)
        if vec is None:
            ann[VECTOR_WIDTH_KEY] = 1
            return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, None, ann, loop.step)
        if ext == width:
            return _annotated(tirx.For(hi, 0, 1, tirx.ForKind.SERIAL, vec, None, ann), ann)
        return tirx.For(hi, 0, ext // width, tirx.ForKind.SERIAL, vec, None, ann)
    body = substitute(loop.body, {var: base + lane})
    # guards are invariant inside a vector: evaluate them at the vector's first lane, hoisting the outer one
    hoisted = None
    if isinstance(body, tirx.IfThenElse) and body.else_case is None:
        hoisted = substitute(body.condition, {lane: tirx.const(0, "int32")})
        body = body.then_case
    first = {lane: tirx.const(0, "int32")}
    body = mapped(body, [(tirx.IfThenElse, lambda s: tirx.IfThenElse(
        substitute(s.condition, first), s.then_case, s.else_case)), (tvm.ir.Call, lambda c: _select_once(c, first))])
    inner = tirx.For(lane, 0, width, tirx.ForKind.VECTORIZED, body)
    if hoisted is not None:
        inner = tirx.IfThenElse(hoisted, inner, None)
    if ext == width:
        return _annotated(inner, ann)
    return tirx.For(hi, 0, ext // width, tirx.ForKind.SERIAL, inner, None, ann)


def _select_once(call, first: dict):
    """An ``if_then_else`` with its (lane-invariant) condition evaluated at the vector's first lane: one scalar
    condition per vector, so TVM emits a vector load under a branch, not a per-lane select that reads every
    lane (a safe-memory guard must keep the load from running outside the buffer)."""
    if isinstance(call.op, tvm.ir.Op) and str(call.op.name).endswith("if_then_else"):
        return tirx.if_then_else(substitute(call.args[0], first), call.args[1], call.args[2])
    return call


def _annotated(stmt, ann: dict):
    """Keep the slot-loop annotations on the vector loop when no outer loop remains."""
    if isinstance(stmt, tirx.For):
        merged = {str(k): v for k, v in stmt.annotations.items()}
        merged.update(ann)
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, stmt.body, None, merged, stmt.step)
    then = stmt.then_case
    return tirx.IfThenElse(stmt.condition, _annotated(then, ann), stmt.else_case)
