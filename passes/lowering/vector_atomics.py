"""Vector atomic adds: one ``red.global.add.v4.f32`` (or ``.v2``) for 4 (2) consecutive float32 elements.

PTX has vector reductions on global memory from sm_90 (``red{.global}.add{.v2,.v4}.f32``; CUDA's ``float2`` /
``float4`` ``atomicAdd`` overloads compile to them). A slot loop whose body is one float32 atomic add of a
register into global memory becomes one vector reduction per group of ``width`` slots when the target
elements of the group are consecutive and aligned to the vector (the last index moves by one per slot, the
others stay), and so are the values read; anything else keeps one scalar ``atomicAdd`` per element, as do
half-precision atomics (their packed ``f16x2`` form is not emitted) and every target before sm_90. On the CPU
the reduction is an ordinary update of each element (``atomics.py``).
"""
from __future__ import annotations

from tvm import sym, tirx
from tvm.ir import Range, TensorLoad

from tilelayout.expr import row_major_offset
from tilelayout.lang import atomic_of
from tilelayout.layout import substitute

from ..hardware import sm_version
from ..ir_utils import int_value

__all__ = ["vector_atomic_lanes", "vectorize_atomic"]


def vector_atomic_lanes(body, target) -> int:
    """Most elements one atomic of ``body`` (a slot loop body) may update at once on ``target`` (1: none)."""
    found = []

    def visit(node):
        if isinstance(node, tirx.Evaluate):
            at = atomic_of(node.value)
            found.append(at)
        elif isinstance(node, tirx.SeqStmt):
            found.append(None)
        elif isinstance(node, tirx.IfThenElse) and node.else_case is None:
            visit(node.then_case)
        else:
            found.append(None)

    visit(body)
    if len(found) != 1 or found[0] is None or found[0].kind != "add":
        return 1
    target_buf = found[0].target.source
    dtype, scope, sm = str(target_buf.dtype), str(target_buf.scope() or "global"), sm_version(target)
    return 4 if dtype == "float32" and scope == "global" and sm >= 90 else 1


def _contiguous(indices: list, lane, start, width: int, ana) -> bool:
    """Slot ``start + e`` reads element ``e`` after slot ``start``'s: the last index moves by one, others stay."""
    for k, idx in enumerate(indices):
        first = substitute(idx, {lane: start})
        for e in range(1, width):
            step = substitute(idx, {lane: start + e}) - first
            if not ana.can_prove(step == (e if k == len(indices) - 1 else 0)):
                return False
    return True


def vectorize_atomic(body, lane, start, width: int, bounds: dict):
    """``body`` (one atomic add over slot ``lane``, possibly under a guard invariant in each group) as one vector
    atomic for the group of ``width`` slots from ``start``; None when the elements are not provably consecutive
    and aligned to the vector (the caller keeps scalar atomics). ``bounds``: var -> (min, extent)."""
    if isinstance(body, tirx.IfThenElse):
        inner = vectorize_atomic(body.then_case, lane, start, width, bounds)
        return None if inner is None else tirx.IfThenElse(body.condition, inner, None)
    at = atomic_of(body.value) if isinstance(body, tirx.Evaluate) else None
    if at is None or not isinstance(at.value, TensorLoad):
        return None
    value = at.value
    if str(value.source.dtype) != str(at.target.source.dtype):
        return None
    ana = sym.Analyzer()
    for v, (lo, ext) in bounds.items():
        if int_value(lo) is not None and int_value(ext) is not None:
            ana.bind(v, Range.from_min_extent(int_value(lo), int_value(ext)))
    for access in (at.target, value):
        if not _contiguous(list(access.indices), lane, start, width, ana):
            return None
        flat = row_major_offset([substitute(i, {lane: start}) for i in access.indices],
                                [int_value(x) if int_value(x) is not None else x for x in access.source.shape])
        if not ana.can_prove(tirx.floormod(flat, width) == 0):
            return None

    def element(access, e):
        return tirx.BufferLoad(access.source, [ana.simplify(substitute(i, {lane: start + e})) for i in access.indices])

    from .lower_gemm import ptx_call
    return ptx_call(f"red.global.add.v{width}.f32", tirx.address_of(element(at.target, 0)),
                    *[element(value, e) for e in range(width)])
