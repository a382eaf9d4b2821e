"""How a loop layout and a fragment layout determine each other.

- ``loop_from_fragment``: a loop that accesses ``frag[idx(x)]`` runs iteration x in the threads holding
  that element (TileLang's ComputeLoopLayoutFromBuffer).
- ``complete_fragment``: a fragment without a layout takes the layout the loop induces through its
  access (CompleteBufferFragment), with TileLang's defects fixed: a loop that covers only part of the
  fragment cannot define it (#2957), and broadcast reads fall back to full replication (#1729).
- ``ownership_error``: exact check, by enumeration, that every thread running an iteration holds what it
  reads and that the threads writing an element are exactly its holders.
"""
from __future__ import annotations
from tilelayout.expr import mentions as _mentions

import numpy as np
from tvm import tirx
from tvm.ir import Range

from tilelayout.errors import InferenceError, LayoutConflictError, LayoutError
from tilelayout.evaluate import evaluate, grid_env
from tilelayout.fragment import Fragment, fully_replicated
from tilelayout.layout import Layout, placeholder, rep_placeholder, substitute

from .loop_nest import LoopNest
from .scan_split import split_completion, split_derived_loop, split_owns
from .serial_axes import lift, project, widened

__all__ = ["PartialCoverage", "loop_from_fragment", "complete_fragment", "reaches_partly", "ownership_error", "access_points",
           "is_common_access"]

#: loops with more points than this are not validated by enumeration
VALIDATION_LIMIT = 1 << 21


class PartialCoverage(InferenceError):
    """The loop reaches only part of a fragment, so it cannot define the fragment's layout."""


def is_common_access(nest: LoopNest, access) -> bool:
    """Indices are exactly the loop variables in order over the buffer's whole shape."""
    if len(access.indices) != len(nest.loop_vars):
        return False
    if list(access.buffer.shape) != list(nest.extents):
        return False
    return all(isinstance(i, tirx.Var) and i.same_as(v) for i, v in zip(access.indices, nest.loop_vars))


def _on_placeholders(nest: LoopNest, exprs: list) -> list:
    vmap = {v: placeholder(k) for k, v in enumerate(nest.loop_vars)}
    return [substitute(e, vmap) for e in exprs]


def access_points(nest: LoopNest, access) -> np.ndarray:
    """Flat element index of the accessed fragment element at every loop point (shape: loop extents; read-only).
    Kept on the nest per access: the ownership, coverage and spill checks of every attempt ask for the same."""
    kept = nest.__dict__.setdefault("_access_points", {})
    hit = kept.get(id(access))
    if hit is not None and hit[0] is access:
        return hit[1]
    flat = _access_points(nest, access)
    flat.setflags(write=False)
    kept[id(access)] = (access, flat)
    return flat


def _access_points(nest: LoopNest, access) -> np.ndarray:
    env = grid_env(nest.loop_vars, nest.extents)
    shape = tuple(nest.extents)
    flat = np.zeros(shape, dtype=np.int64)
    for dim, (idx, ext) in enumerate(zip(access.indices, access.buffer.shape)):
        try:
            val = np.broadcast_to(evaluate(idx, env), shape)
        except Exception as err:
            inner = [v.name for v in nest.inner_vars if _mentions(idx, [v])] if not isinstance(idx, int) else []
            if inner:
                raise InferenceError(
                    f"{nest.describe()}: {access} indexes fragment {access.buffer.name} with the serial loop variable "
                    f"{', '.join(inner)} inside the parallel nest; layouts are inferred over the parallel variables "
                    f"only, so index fragments with T.parallel loop variables (make the inner loop T.parallel)") from None
            raise InferenceError(f"{nest.describe()}: cannot evaluate index {idx} of {access}: {err}") from None
        if val.min() < 0 or val.max() >= ext:
            bad = np.unravel_index(int(np.argmax((val < 0) | (val >= ext))), shape)
            raise InferenceError(
                f"{nest.describe()}: access {access} leaves buffer {access.buffer.name} (shape "
                f"{list(access.buffer.shape)}) at loop point {[int(b) for b in bad]}: index {idx} is "
                f"{int(val[bad])} there, outside [0, {int(ext)}) of dimension {dim}; {_out_of_bounds_hint(nest, idx, ext)}")
        flat = flat * ext + val
    return flat


def _out_of_bounds_hint(nest: LoopNest, idx, ext) -> str:
    """Why an index leaves the fragment: a bare loop variable running further than the dimension, or an
    offset / stride pushing it past the edge."""
    for var, extent in zip(nest.loop_vars, nest.extents):
        if hasattr(idx, "same_as") and idx.same_as(var):
            return (f"the loop over {var.name} ({extent} iterations) is larger than the fragment's dimension "
                    f"({ext}); loop over the fragment's extent or give the fragment the loop's")
    return "its offset or stride takes it past the fragment's edge; shrink the loop range or enlarge the fragment so every index fits"


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
    from tilelayout.fragment import _collect_pieces
    dom = {placeholder(k): Range(0, e) for k, e in enumerate(nest.extents)}
    used: dict = {}
    for e in idx:
        pieces = _collect_pieces(e, dom)
        if pieces is None:
            return None
        for name, ps in pieces.items():
            used.setdefault(name, []).extend(ps)
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


def ownership_error(nest: LoopNest, loop: Fragment, access, frag: Fragment) -> "Violation | None":
    """None when the threads running each iteration hold the element read (reads) or are exactly its
    holders (writes); otherwise the first violation (a ``Violation``: ``str()`` gives it in words)."""
    if split_owns(nest, loop, access, frag):
        return None        # a lang.cumsum row split over warp lanes: each lane holds exactly its chunk
    wide = widened(nest, access)
    if wide is not None:
        return ownership_error(wide[0], lift(loop, wide[0]), wide[1], frag)
    if nest.size > VALIDATION_LIMIT or not frag.is_static:
        return None
    if loop is frag and is_common_access(nest, access):
        return None
    loop_lo = (loop.thread_range or (0, 0))[0]
    frag_lo = (frag.thread_range or (0, 0))[0]
    if loop.replicate_size > frag.replicate_size and loop.is_static and loop.is_injective():
        # an injective loop runs every point in replicate_size distinct threads, more than any element has
        # holders: the first point already fails, found without tabulating every (point, replica)
        return _first_point_error(nest, loop, access, frag, loop_lo, frag_lo)
    runs, elem, grid, axes = _point_tables(nest, loop, access)
    runs = runs + loop_lo
    not_held = _not_held(frag, elem, runs)
    point = thread = None
    if not_held.any():
        point, k = (int(x) for x in np.argwhere(not_held)[0])
        thread, reading = int(runs[point, k]), True
    elif access.is_write and not access.is_constant and runs.shape[1] != frag.replicate_size:
        # runners are a subset of holders and both are duplicate-free per point: equal iff equally many
        owners = frag.thread_table().reshape(-1, frag.replicate_size) + frag_lo
        held = owners[elem]
        point = 0
        k = next(k for k in range(held.shape[1]) if held[0, k] not in set(runs[0].tolist()))
        thread, reading = int(held[0, k]), False
    if point is None:
        return None
    coord = [0] * len(nest.extents)
    for d, c in zip(axes, np.unravel_index(point, grid)):
        coord[d] = int(c)
    if reading:
        what = f"thread {thread} runs iteration {coord} but does not hold the element of {access.buffer.name} it " \
               f"{'writes' if access.is_write else 'reads'}"
    else:
        what = f"thread {thread} holds the element of {access.buffer.name} written at iteration {coord} but does not " \
               f"run that iteration, so its copy would go stale"
    return Violation(what, access, loop, frag)


class Violation:
    """An ownership violation, as ``ownership_error`` reports it: a sentence naming the thread, the iteration,
    the access and both layouts, formatted only when read (the search mostly needs only that one exists, and
    printing two layouts goes through TVM's script printer)."""

    __slots__ = ("what", "access", "loop", "frag", "_text")

    def __init__(self, what: str, access, loop, frag):
        self.what, self.access, self.loop, self.frag, self._text = what, access, loop, frag, None

    def __str__(self) -> str:
        if self._text is None:
            self._text = f"{self.what} (access {self.access}; loop layout {self.loop!r}; fragment layout {self.frag!r})"
        return self._text

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return repr(str(self))


def _not_held(frag: Fragment, elem: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """(points, replicas) mask: runner thread ``runs[p, k]`` does not hold element ``elem[p]`` of ``frag``. Looked
    up in the fragment's row-sorted holder table (one holder: compared; everyone: a range test; few elements: an
    (elements x threads) table; else a binary search over (element, thread) keys)."""
    holders = frag.holder_table()
    if holders.shape[1] == 1:
        return runs != holders[elem]
    if frag.is_fully_replicated:
        lo = (frag.thread_range or (0, 0))[0]
        return (runs < lo) | (runs >= lo + frag.replicate_size)
    width = int(max(runs.max(), holders.max())) + 1
    if int(min(runs.min(), holders.min())) < 0:     # keys need non-negative threads: compare row by row
        return ~(runs[:, :, None] == holders[elem][:, None, :]).any(axis=2)
    if holders.shape[0] * width <= max(1 << 16, 4 * runs.size):
        # few elements (a reduction's row results held by many threads): an (elements x threads) table is small
        holds = np.zeros((holders.shape[0], width), dtype=bool)
        holds[np.arange(holders.shape[0])[:, None], holders] = True
        return ~holds[elem[:, None], runs]
    have = (np.arange(holders.shape[0], dtype=np.int64)[:, None] * width + holders).reshape(-1)
    want = elem[:, None] * width + runs
    pos = np.minimum(np.searchsorted(have, want.reshape(-1)), have.size - 1).reshape(want.shape)
    return have[pos] != want


def _point_tables(nest: LoopNest, loop: Fragment, access):
    """Runner threads (points, replicas) and accessed element (points,) over the loop axes along which either
    varies, the other axes held at 0 (a check there holds or fails alike at every value of them), so a
    replicated loop over a large nest is never tabulated whole. Also the reduced grid and its axes."""
    ext = [int(e) for e in nest.extents]
    n, reps = len(ext), loop.replicate_size
    elem = access_points(nest, access)
    env = grid_env(loop.forward_vars + [rep_placeholder()], ext + [reps])
    thr = np.asarray(evaluate(loop.forward_thread, env), dtype=np.int64)
    thr = thr.reshape((1,) * (n + 1 - thr.ndim) + thr.shape)
    axes = [d for d in range(n) if thr.shape[d] > 1 or (ext[d] > 1 and (np.diff(elem, axis=d) != 0).any())]
    pick = tuple(slice(None) if d in axes else slice(0, 1) for d in range(n))
    grid = tuple(ext[d] for d in axes)
    size = int(np.prod(grid, dtype=np.int64)) if grid else 1
    runs = np.ascontiguousarray(np.broadcast_to(thr, tuple(ext) + (reps,))[pick]).reshape(size, reps)
    return runs, np.ascontiguousarray(elem[pick]).reshape(size), grid, axes


def _first_point_error(nest: LoopNest, loop: Fragment, access, frag: Fragment, loop_lo: int, frag_lo: int) -> str:
    """The violation ``ownership_error`` reports at loop point 0 (its first point), computed at that point only."""
    from tilelayout.evaluate import evaluate
    env = {v: np.int64(0) for v in loop.forward_vars}
    env[rep_placeholder()] = np.arange(loop.replicate_size, dtype=np.int64)
    runners = np.broadcast_to(evaluate(loop.forward_thread, env), (loop.replicate_size,)) + loop_lo
    elem = int(access_points(nest, access).reshape(-1)[0])
    coords = np.unravel_index(elem, tuple(int(s) for s in access.buffer.shape))
    fenv = {v: np.int64(c) for v, c in zip(frag.forward_vars, coords)}
    fenv[rep_placeholder()] = np.arange(frag.replicate_size, dtype=np.int64)
    holders = set((np.broadcast_to(evaluate(frag.forward_thread, fenv), (frag.replicate_size,)) + frag_lo).tolist())
    thread = next(int(t) for t in runners if int(t) not in holders)
    coord = [0] * len(nest.extents)
    what = f"thread {thread} runs iteration {coord} but does not hold the element of {access.buffer.name} it " \
           f"{'writes' if access.is_write else 'reads'}"
    return Violation(what, access, loop, frag)
