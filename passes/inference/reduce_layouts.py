"""The layouts a reduction of a fragment implies: the partials' layout (the source's with the reduced axes
turned into replicas) and whose holders combine the partials. The reduce rule (``op_rules``) proposes them;
``annotations`` records ``reduction_decision`` for lowering, which follows the record.
"""
from __future__ import annotations

from tvm import tirx

from tilelayout.errors import InferenceError, LayoutError
from tilelayout.expr import row_major_offset
from tilelayout.fragment import Fragment, fully_replicated
from tilelayout.layout import placeholder, rep_placeholder, substitute

from .fragment_rules import _condensed

__all__ = ["reducer_layout", "reduced_layout", "combining_layout", "reduction_decision", "slot_count"]


def reducer_layout(src: Fragment, axis: int) -> Fragment:
    """Destination layout of reducing ``src`` along ``axis``: the reduced coordinate becomes replicas."""
    n = src.input_dim
    extent = src.input_shape[axis]
    r = rep_placeholder()
    coords, k = [], 0
    for d in range(n):
        if d == axis:
            coords.append(tirx.floormod(r, extent))
        else:
            coords.append(placeholder(k))
            k += 1
    vmap = dict(zip(src.forward_vars, coords))
    vmap[r] = tirx.floordiv(r, extent)
    thread = substitute(src.forward_thread, vmap)
    shape = [s for d, s in enumerate(src.input_shape) if d != axis] or [1]
    if n == 1:
        thread = substitute(thread, {placeholder(0): tirx.const(0, "int32")})
    try:
        out = Fragment.from_exprs(shape, thread, None, extent * src.replicate_size)
    except LayoutError:
        # a wrapped thread map (``(_i * 32 + _rep) % 100``) has no derivable slot map: one slot per element
        out = Fragment.from_exprs(shape, thread, [_flat_index(shape)], extent * src.replicate_size)
    out = _distinct_replicas(_condensed(out))
    return out.bind_thread_range(*src.thread_range) if src.thread_range is not None else out


def _flat_index(shape: list):
    """Row-major element number over ``shape`` in the placeholders (one register slot per element)."""
    return row_major_offset([placeholder(k) for k in range(len(shape))], shape)


def _distinct_replicas(frag: Fragment) -> Fragment:
    """``frag`` with no replica repeating a thread that another replica of the element already gives.

    Reducing ``(_i * 7 + _j) % 32`` over 96 rows gives holders ``(_rep * 7 + _i) % 32`` for 96 replicas: each
    thread three times, which no (slot, thread) packing can hold. Every thread holds every element there, so
    that is the layout; otherwise the fewest leading replicas that reach every holder (checked by
    enumeration: same holders, injective), else a clear refusal."""
    if frag.replicate_size == 1 or not frag.is_static:
        return frag
    total, shape = frag.replicate_size, list(frag.input_shape)
    every = fully_replicated(shape, frag.thread_extent)
    if every.contains(frag) and frag.contains(every):
        return every        # every thread holds every element: say so (invertible, unlike a modular map)
    if frag.is_injective():
        return frag
    flat = _flat_index(shape)
    for d in range(1, total + 1):       # the first d replicas, when they already reach every holder
        for index in (None, [flat]):      # the derived slot map, else one slot per element
            try:
                cand = Fragment.from_exprs(shape, frag.forward_thread, index, d)
            except LayoutError:
                continue
            if cand.is_injective() and cand.contains(frag):
                return cand
    raise InferenceError(f"reducing gives a destination layout whose replicas share threads irregularly ({frag!r}); "
                         f"no fragment layout holds it")


def reduced_layout(src: Fragment, axes) -> Fragment:
    """``src`` reduced over ``axes`` (``reducer_layout``, highest axis first): every thread holding source
    elements of a result holds its partial."""
    out = src
    for axis in sorted(axes, reverse=True):
        out = reducer_layout(out, axis)
    return out


def combining_layout(reduced: Fragment, dst: Fragment | None) -> Fragment:
    """The layout whose holders combine a reduction's partials (``reduced``: ``reduced_layout`` of the source),
    the rule lowering's ``reduce`` follows: the destination's when it holds every result wherever ``reduced``
    does, else ``reduced`` itself (a destination keeping the results in a subset of those threads, or in
    memory: all of them combine, then each owner takes its elements). Fuzz seed 1764: the barrier check once
    judged an owner subset's holders (one thread each) while lowering combined over warps under
    ``if tx < 65``, and refused after inference."""
    if dst is not None and dst.containment_error(reduced) is None:
        return dst
    return reduced


def reduction_decision(src: Fragment, axes, dst: Fragment | None, threads: int) -> tuple:
    """(reduced layout, ``"destination"`` | ``"reduced"``): the partials' layout, bound to the launched threads
    when the source is unbound, and whose holders combine them (``combining_layout``); recorded per reduction
    (``annotate.REDUCTIONS_ATTR``) for lowering to follow."""
    reduced = reduced_layout(src, axes)
    if reduced.thread_range is None:
        reduced = reduced.bind_thread_range(0, threads)
    return reduced, "destination" if combining_layout(reduced, dst) is dst else "reduced"


def slot_count(frag: Fragment) -> float:
    """Registers per thread of ``frag`` (infinite when symbolic, so a symbolic layout is never preferred)."""
    out = 1
    for s in frag.output_shape:
        if not isinstance(s, int):
            return float("inf")
        out *= s
    return out
