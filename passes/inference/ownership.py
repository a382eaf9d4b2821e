"""The ownership check: by enumeration, every thread running an iteration of a parallel nest holds the fragment
element it reads, and the threads writing an element are exactly its holders.

Both sides run it: inference to judge every candidate layout, the partitioner (``verify=True``) to check the
layouts it is given before it trusts them. It is a check, not a rule that derives a layout, so it lives apart
from ``fragment_rules``.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx

from tilelayout.errors import InferenceError
from tilelayout.evaluate import evaluate, grid_env
from tilelayout.expr import mentions as _mentions
from tilelayout.fragment import Fragment
from tilelayout.layout import rep_placeholder

from .loop_nest import LoopNest
from .scan_split import split_owns
from .serial_axes import lift, widened

__all__ = ["ownership_error", "Violation", "access_points", "is_common_access", "VALIDATION_LIMIT"]


#: loops with more points than this are not validated by enumeration
VALIDATION_LIMIT = 1 << 21


def is_common_access(nest: LoopNest, access) -> bool:
    """Indices are exactly the loop variables in order over the buffer's whole shape."""
    if len(access.indices) != len(nest.loop_vars):
        return False
    if list(access.buffer.shape) != list(nest.extents):
        return False
    return all(isinstance(i, tirx.Var) and i.same_as(v) for i, v in zip(access.indices, nest.loop_vars))


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
        held = _holders(frag, frag_lo)[elem]
        point = 0
        k = next(k for k in range(held.shape[1]) if held[0, k] not in set(runs[0].tolist()))
        thread, reading = int(held[0, k]), False
    elif access.is_write and access.is_constant and runs.size:
        # every iteration writes the one element: together the runners must reach all its holders (a copy of
        # a one-element region under ``tx < 179`` into a fragment pinned to all 224 threads; fuzz 15006/122)
        ran = set(runs.reshape(-1).tolist())
        missing = [int(t) for t in _holders(frag, frag_lo)[int(elem.reshape(-1)[0])] if int(t) not in ran]
        if missing:
            point, thread, reading = 0, missing[0], False
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


def _holders(frag: Fragment, frag_lo: int) -> np.ndarray:
    """(elements, replicas): the block threads holding each element of ``frag``."""
    return frag.thread_table().reshape(-1, frag.replicate_size) + frag_lo


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
