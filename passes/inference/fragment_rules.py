"""How a loop layout and a fragment layout determine each other.

- ``loop_from_fragment``: a loop that accesses ``frag[idx(x)]`` runs iteration x in the threads holding
  that element (TileLang's ComputeLoopLayoutFromBuffer).
- ``complete_fragment``: a fragment without a layout takes the layout the loop induces through its
  access (CompleteBufferFragment), with TileLang's defects fixed: a loop that covers only part of the
  fragment cannot define it (#2957), and broadcast reads fall back to full replication (#1729).

The ownership check both sides run (``ownership_error``, with ``access_points`` and ``is_common_access``) is
``ownership.py``; its names stay importable from here.
"""
from __future__ import annotations
from tilelayout.expr import mentions as _mentions

import numpy as np
from tvm import tirx
from tvm.ir import Range

from tilelayout.errors import InferenceError, LayoutConflictError, LayoutError
from tilelayout.fragment import Fragment, fully_replicated
from tilelayout.layout import Layout, placeholder, rep_placeholder, substitute

from .loop_nest import LoopNest
from .ownership import (VALIDATION_LIMIT, Violation, _not_held, access_points, is_common_access,  # noqa: F401
                        ownership_error)
from .scan_split import split_completion, split_derived_loop
from .serial_axes import lift, project, widened

__all__ = ["PartialCoverage", "loop_from_fragment", "complete_fragment", "reaches_partly", "ownership_error", "access_points",
           "is_common_access"]

class PartialCoverage(InferenceError):
    """The loop reaches only part of a fragment, so it cannot define the fragment's layout."""


def _on_placeholders(nest: LoopNest, exprs: list) -> list:
    vmap = {v: placeholder(k) for k, v in enumerate(nest.loop_vars)}
    return [substitute(e, vmap) for e in exprs]


def everyone(shape, thread_range: tuple) -> Fragment:
    """Every thread of ``thread_range`` (min, extent) holds every element."""
    lo, ext = thread_range
    return fully_replicated(shape, ext).bind_thread_range(lo, ext)


def loop_from_fragment(nest: LoopNest, access, frag: Fragment, thread_range: tuple) -> Fragment:
    """Loop layout that runs iteration x in the threads holding ``frag[idx(x)]`` (``thread_range``: the
    (min, extent) of the threads running the op, used when ``frag`` is not bound to a range)."""
    split = split_derived_loop(nest, access, frag, thread_range)
    if split is not None:  # a lang.cumsum row split over warp lanes: its own loop layout
        return split
    wide = widened(nest, access)
    if wide is not None:   # serial loops index the fragment: derive on the widened domain, then project
        return project(loop_from_fragment(*wide, frag, thread_range), nest, access)
    if is_common_access(nest, access):
        return frag.bind_thread_range(*thread_range) if frag.thread_range is None else frag
    access_points(nest, access)  # bounds check: a loop larger than the fragment is refused clearly (#2957)
    idx = _on_placeholders(nest, access.indices)
    thread = substitute(frag.forward_thread, dict(zip(frag.forward_vars, idx)))
    if nest.inner_vars and _mentions(thread, nest.inner_vars):
        raise LayoutConflictError(
            f"{nest.describe()}: access {access} makes the owning thread depend on a serial inner loop; "
            f"a thread-distributed fragment cannot be indexed by a sequential loop variable")
    err = None
    try:
        loop = Fragment.from_exprs(nest.extents, thread, None, frag.replicate_size)
    except LayoutError as error:
        loop, err = None, error
    if loop is None or (nest.size <= VALIDATION_LIMIT and not loop.is_injective()):
        # no slot map derivable from the thread map alone (a wrapped ``(_i * 96 + _j) % 256`` over part of the
        # fragment): the fragment's own slots, read through the access, serve when distinct per iteration
        index = [substitute(e, dict(zip(frag.forward_vars, idx))) for e in frag.forward_index]
        try:
            fallback = Fragment.from_exprs(nest.extents, thread, index, frag.replicate_size)
        except LayoutError:
            fallback = None
        if fallback is not None and fallback.is_injective():
            loop = fallback
        elif (grouped := _grouped_loop(nest, idx, thread, index, frag)) is not None:
            loop = grouped
        elif loop is None:
            raise InferenceError(f"{nest.describe()}: cannot derive a loop layout from {frag.kind} of "
                                 f"{access.buffer.name} through {access}: {err}") from None
    rng = frag.thread_range or thread_range
    return loop.bind_thread_range(*rng)


def dynamic_slot_accesses(nest: LoopNest, loop: Fragment, layouts) -> list:
    """Fragment accesses whose register slot, once the nest is partitioned by ``loop``, depends on the
    thread index or on a serial inner loop variable: such a fragment cannot stay in registers.
    ``layouts``: buffer name -> layout. Decided by enumeration whenever the nest is static and the access
    does not involve an inner serial loop (the symbolic test can fail to simplify a provably constant
    slot, e.g. for 3-D nests); symbolically otherwise. Kept on the nest per (loop, layouts of the fragments it
    touches): the loop rule asks for each candidate and the io-aware model's spill term again for the chosen one."""
    key = (loop.key, loop.thread_range, tuple(
        None if layouts.get(a.buffer.name) is None else
        (layouts[a.buffer.name].key, getattr(layouts[a.buffer.name], "thread_range", None))
        for a in nest.fragment_accesses()))
    kept = nest.__dict__.setdefault("_dynamic_slots", {})
    if key not in kept:
        kept[key] = tuple(_dynamic_slot_accesses(nest, loop, layouts))
    return list(kept[key])


def _dynamic_slot_accesses(nest: LoopNest, loop: Fragment, layouts) -> list:
    out, symbolic = [], []
    for a in nest.fragment_accesses():
        frag = layouts.get(a.buffer.name)
        if frag is None or a.is_constant:
            continue
        exact = _slot_varies_by_enumeration(nest, loop, a, frag)
        if exact is None:
            symbolic.append((a, frag))
        elif exact:
            out.append(a)
    if symbolic:
        hits = _dynamic_symbolic(nest, loop, symbolic)
        out = [a for a in nest.fragment_accesses() if any(a is b for b in out + hits)]
    return out


def _slot_varies_by_enumeration(nest: LoopNest, loop: Fragment, access, frag: Fragment) -> bool | None:
    """Does some loop slot read different fragment slots in different threads? None when not decidable
    by enumeration (inner serial variables in the indices, symbolic or very large domains)."""
    if nest.inner_vars and _mentions_any(access.indices, nest.inner_vars):
        return None
    if (frag is loop or frag.key == loop.key) and is_common_access(nest, access):
        return False        # the fragment's slot at each point is the loop's own slot there
    if nest.size > VALIDATION_LIMIT or not frag.is_static or not loop.is_static:
        return None
    try:
        lparts = np.asarray(loop.table(), dtype=np.int64).reshape(nest.size, -1)
        fparts = np.asarray(frag.table(), dtype=np.int64).reshape(-1, len(frag.output_shape))
        lslot = np.ravel_multi_index(tuple(lparts.T), tuple(int(e) for e in loop.output_shape))
        fslot = np.ravel_multi_index(tuple(fparts.T), tuple(int(e) for e in frag.output_shape))
        read = fslot[access_points(nest, access).reshape(-1)]
    except (LayoutError, InferenceError, TypeError, ValueError):
        return None
    return varies_within(lslot, read)


def varies_within(keys: np.ndarray, values: np.ndarray) -> bool:
    """Is ``values`` not a function of ``keys`` (some key seen with two values)? One representative value per
    key, then every entry compared with its key's: O(n), no sort."""
    if keys.size == 0:
        return False
    rep = np.zeros(int(keys.max()) + 1, dtype=values.dtype)
    rep[keys] = values
    return bool((rep[keys] != values).any())


def _mentions_any(exprs, variables) -> bool:
    return any(_mentions(e, variables) for e in exprs if not isinstance(e, int))


def _dynamic_symbolic(nest: LoopNest, loop: Fragment, accesses: list) -> list:
    from tvm import sym
    try:
        inv = loop.inverse_with_info(allow_padding=True)[0]
    except LayoutError:
        return []
    slots = [tirx.Var(f"slot{k}", "int32") for k in range(loop.output_dim)]
    thread = tirx.Var("thread", "int32")
    ana = sym.Analyzer()
    for v, ext in zip(slots + [thread], list(loop.output_shape) + [loop.thread_extent]):
        ana.bind(v, Range(0, ext))
    coords = [ana.simplify(substitute(e, dict(zip(inv.forward_vars, slots + [thread])))) for e in inv.forward_index]
    # serial loops of constant extent that index fragments are unrolled by lowering: their slots are constants
    dynamic = [thread] + [l.var for l in getattr(nest.op, "inner_loops", ())
                          if l.var is not None and not isinstance(l.extent, int)]
    out = []
    for a, frag in accesses:
        idx = [substitute(e, dict(zip(nest.loop_vars, coords))) for e in a.indices]
        index = [ana.simplify(substitute(e, dict(zip(frag.forward_vars, idx)))) for e in frag.forward_index]
        if any(_mentions(e, dynamic) for e in index):
            out.append(a)
    return out


def reaches_partly(nest: LoopNest, access) -> bool:
    """Does the loop reach only part of the fragment through ``access`` (when ``complete_fragment`` raises
    PartialCoverage)? False when the access covers it, or cannot be evaluated (completion reports that)."""
    if is_common_access(nest, access):
        return False
    try:
        points = access_points(nest, access)
    except (LayoutError, InferenceError):
        return False
    hit = np.zeros(int(np.prod(access.buffer.shape)), dtype=bool)
    hit[points.reshape(-1)] = True
    return not hit.all()


def complete_fragment(nest: LoopNest, loop: Fragment, access, thread_range: tuple, read_only: bool) -> Fragment:
    """The fragment layout a loop induces through one access of it (``thread_range``: the (min, extent) of
    the threads running the op)."""
    split = split_completion(nest, loop, access)
    if split is not None:  # the split loop layout of a lang.cumsum scan: the row split over its lanes
        return split
    wide = widened(nest, access)
    if wide is not None:   # serial loops index the fragment: complete it on the widened domain
        return complete_fragment(wide[0], lift(loop, wide[0]), wide[1], thread_range, read_only)
    buf = access.buffer
    rng = loop.thread_range or thread_range
    if is_common_access(nest, access):
        return loop
    points = access_points(nest, access)
    size = int(np.prod(buf.shape))
    hit = np.zeros(size, dtype=bool)
    hit[points.reshape(-1)] = True
    if not hit.all():
        missing = [int(x) for x in np.unravel_index(int(np.argmin(hit)), tuple(buf.shape))]
        raise PartialCoverage(f"{nest.describe()} reaches only part of fragment {buf.name} (element {missing} is "
                              f"never accessed), so it cannot define its layout")
    idx = _on_placeholders(nest, access.indices)
    counts = np.bincount(points.reshape(-1), minlength=size)
    if (counts == 1).all():
        inv = Layout.from_exprs(nest.extents, idx).inverse()
        coords = inv.forward_index
        loop_vars = loop.forward_vars
        thread = substitute(loop.forward_thread, dict(zip(loop_vars, coords)))
        try:
            frag = Fragment.from_exprs(buf.shape, thread, None, loop.replicate_size)
        except LayoutError:
            # no slot map derivable from a wrapped thread map (``(_j * 12 + _i) % 160`` through a transposed
            # write): one iteration per element, so the loop's own slots, read back through the access, serve
            index = [substitute(e, dict(zip(loop_vars, coords))) for e in loop.forward_index]
            frag = Fragment.from_exprs(buf.shape, thread, index, loop.replicate_size)
    else:
        frag = _broadcast_completion(nest, loop, idx, buf)
        if frag is not None:
            # replica digits that land in the loop's slots are the same thread: drop them before judging
            # injectivity (TileLang condenses first, then falls back to full replication for #1729)
            frag = _condensed(frag)
            # fewer replicas than threads cannot give every thread every element: no need to build everyone's
            if read_only and frag.replicate_size >= thread_range[1] and \
                    frag.contains(everyone(buf.shape, thread_range)):
                return everyone(buf.shape, thread_range)     # every thread holds everything: say so
        if frag is None or not frag.is_injective():
            if read_only:
                return everyone(buf.shape, thread_range)
            raise InferenceError(f"{nest.describe()} writes fragment {buf.name} through {access} with several loop "
                                 f"iterations per element; no thread/slot layout makes that write well defined")
    frag = _condensed(frag).bind_thread_range(*rng)
    if not frag.is_injective():
        if read_only:
            return everyone(buf.shape, thread_range)
        raise InferenceError(f"{nest.describe()}: the layout induced on {buf.name} ({frag!r}) is not injective")
    return frag


def _condensed(frag: Fragment) -> Fragment:
    """``frag.condense_rep_var()`` when every element keeps exactly the same holders (checked by
    enumeration); ``frag`` itself otherwise (the symbolic condensing can misread wrapped thread maps such
    as ``(_i * 640 + _rep) % 256``)."""
    condensed = frag.condense_rep_var()
    if condensed is frag or condensed.same_holders(frag):
        return condensed
    return frag


def _grouped_loop(nest: LoopNest, idx: list, thread, index: list, frag: Fragment) -> Fragment | None:
    """Several iterations reach one element (``acc[i, j // 32]``): they run in the element's thread, one after
    another, at slots (element slot, the loop digits the access does not use); None when that is not injective."""
    unused = _unused_digits(nest, idx)
    if unused is None or unused[1] == 1:
        return None
    extra, extra_ext = unused
    flat = tirx.const(0, "int32")
    for e, ext in zip(index, frag.output_shape):
        flat = flat * ext + e
    try:
        loop = Fragment.from_exprs(nest.extents, thread, [flat * extra_ext + extra], frag.replicate_size)
    except LayoutError:
        return None
    return loop if nest.size <= VALIDATION_LIMIT and loop.is_injective() else None


def _unused_digits(nest: LoopNest, idx: list):
    """(expression, extent) of the loop digits an access does not use, flattened row-major: they index the
    iterations that reach one element. None when the access is not a sum of digit pieces."""
    from tilelayout.fragment import _merged_pieces
    dom = {placeholder(k): Range(0, e) for k, e in enumerate(nest.extents)}
    used = _merged_pieces(idx, dom)
    if used is None:
        return None
    extra, extra_ext = tirx.const(0, "int32"), 1
    for k, ext in enumerate(nest.extents):
        v = placeholder(k)
        taken = sorted(used.get(v.name, []))
        gaps, expected = [], 1
        for lower, e in taken:
            if lower > expected:
                gaps.append((expected, lower // expected))
            expected = max(expected, lower * e)
        if expected < ext:
            gaps.append((expected, -(-ext // expected)))
        for lower, e in reversed(gaps):
            piece = tirx.floormod(tirx.floordiv(v, lower), e)
            extra = extra * e + piece
            extra_ext *= e
    return extra, extra_ext


def _broadcast_completion(nest: LoopNest, loop: Fragment, idx: list, buf) -> Fragment | None:
    """Each element is read by several iterations: their loop replicas become the fragment's replicas."""
    unused = _unused_digits(nest, idx)
    if unused is None:
        return None
    extra, extra_ext = unused
    try:
        inv = Layout.from_exprs(nest.extents, idx + [extra]).inverse()
    except LayoutError:
        return None
    r = rep_placeholder()
    coords = [substitute(e, {placeholder(len(buf.shape)): tirx.floormod(r, extra_ext)}) for e in inv.forward_index]
    loop_map = dict(zip(loop.forward_vars, coords))
    loop_map[r] = tirx.floordiv(r, extra_ext)
    thread = substitute(loop.forward_thread, loop_map)
    try:
        return Fragment.from_exprs(buf.shape, thread, None, extra_ext * loop.replicate_size)
    except LayoutError:
        return None
