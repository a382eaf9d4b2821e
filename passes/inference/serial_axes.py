"""Serial loops inside parallel nests that index fragments (scans, running sums).

``for i in T.parallel(128): for j in T.serial(1, 128): F[i, j] = F[i, j] + F[i, j - 1]`` walks a row of
``F`` sequentially, so the whole row must live in the thread that runs iteration ``i``. Layout inference
reasons over the parallel variables only; an access that also uses serial variables is handled by
*widening*: every fragment dimension indexed by serial variables becomes an extra loop axis over that
dimension's whole extent, on which the thread must not depend. A loop layout is lifted onto the widened
domain (same thread, the new axes as extra register slots) and a layout derived on the widened domain is
projected back (refused, naming the axis, when its thread varies along a serial axis).

Checking ownership over the whole widened dimension asks for more than the serial loop reaches (the
thread must hold the entire row, not just the part the loop touches); that only makes inference stricter.
"""
from __future__ import annotations

import itertools

import numpy as np
from tvm import tirx

from tilelayout.errors import InferenceError, LayoutConflictError
from tilelayout.evaluate import evaluate
from tilelayout.expr import mentions
from tilelayout.fragment import Fragment
from tilelayout.layout import placeholder, substitute

from .loop_nest import LoopNest
from .ops import Access

__all__ = ["widened", "lift", "project", "serial_vars_of"]

#: serial iteration spaces larger than this are not bounds-checked point by point (then refused)
_ENUM_LIMIT = 1 << 20


def _vars_in(expr, variables) -> list:
    return [w for w in variables if mentions(expr, [w])]


def serial_vars_of(nest: LoopNest, access) -> list:
    """The serial (inner) loop variables an access's indices mention, in nest order."""
    if not nest.inner_vars:
        return []
    return [v for v in nest.inner_vars if any(_vars_in(i, [v]) for i in access.indices)]


def _inner_loop(nest: LoopNest, var):
    return next(l for l in nest.op.inner_loops if l.var is not None and l.var.same_as(var))


def _check_bounds(nest: LoopNest, access, dims: list, serial: list) -> None:
    """Every value the serial variables give the widened dimensions lies inside the fragment."""
    loops = [_inner_loop(nest, v) for v in serial]
    for loop in loops:
        if not isinstance(loop.min, int) or not isinstance(loop.extent, int):
            raise InferenceError(
                f"{nest.describe()}: serial loop {loop.var.name} indexes fragment {access.buffer.name} ({access}) "
                f"but its bounds ({loop.min}, extent {loop.extent}) are not constants; give it constant bounds")
    size = int(np.prod([l.extent for l in loops])) if loops else 1
    if size > _ENUM_LIMIT:
        raise InferenceError(f"{nest.describe()}: serial loops {[l.var.name for l in loops]} over {access} span "
                             f"{size} iterations, too many to bounds-check; split them")
    grids = np.meshgrid(*[np.arange(l.min, l.min + l.extent) for l in loops], indexing="ij")
    env = {l.var: g for l, g in zip(loops, grids)}
    for d in dims:
        try:
            val = np.asarray(evaluate(access.indices[d], env))
        except Exception as err:  # noqa: BLE001 - any evaluation failure is a refusal with the reason
            raise InferenceError(f"{nest.describe()}: cannot evaluate index {access.indices[d]} of {access} over "
                                 f"the serial loops: {err}") from None
        ext = access.buffer.shape[d]
        if val.size and (val.min() < 0 or val.max() >= ext):
            raise InferenceError(
                f"{nest.describe()}: access {access} leaves fragment {access.buffer.name} (dimension {d} has extent "
                f"{ext}, the serial loops reach {int(val.min())}..{int(val.max())})")


def widened(nest: LoopNest, access) -> tuple[LoopNest, Access] | None:
    """(nest over the parallel axes plus one axis per serially indexed fragment dimension, the access on it),
    or None when the access uses no serial loop variable."""
    serial = serial_vars_of(nest, access)
    if not serial:
        return None
    dims = []
    for d, idx in enumerate(access.indices):
        s = _vars_in(idx, serial)
        if not s:
            continue
        par = _vars_in(idx, nest.loop_vars)
        if par:
            raise InferenceError(
                f"{nest.describe()}: {access} mixes serial loop variable(s) {[v.name for v in s]} with parallel "
                f"variable(s) {[v.name for v in par]} in one index of fragment {access.buffer.name}; a serial loop "
                f"must index fragment dimensions of its own (e.g. F[i, j] with i parallel and j serial)")
        dims.append(d)
    rest = [v for v in serial if not any(_vars_in(access.indices[d], [v]) for d in dims)]
    if rest:  # mentioned, but not in an index (cannot happen; defensive)
        raise InferenceError(f"{nest.describe()}: cannot place serial variables {[v.name for v in rest]} of {access}")
    _check_bounds(nest, access, dims, serial)
    wvars = [tirx.Var(f"w{d}", "int32") for d in dims]
    indices = list(access.indices)
    for d, w in zip(dims, wvars):
        indices[d] = w
    wnest = LoopNest(nest.op, list(nest.loop_vars) + wvars, list(nest.extents) + [access.buffer.shape[d] for d in dims],
                     [Access(access.buffer, indices, access.is_read, access.is_write)], [], nest.is_user_loop, nest.key)
    return wnest, wnest.accesses[0]


def lift(loop: Fragment, wnest: LoopNest) -> Fragment:
    """The loop layout on the widened domain: same thread, the widened axes appended to the register slot."""
    n = len(loop.input_shape)
    extra = list(wnest.extents[n:])
    flat = tirx.const(0, "int32")
    for k, e in enumerate(extra):
        flat = flat * e + placeholder(n + k)
    slot = tirx.const(0, "int32")
    for idx, ext in zip(loop.forward_index, loop.output_shape):
        slot = slot * ext + idx
    width = int(np.prod(extra))
    out = Fragment.from_exprs(list(wnest.extents), loop.forward_thread, [slot * width + flat], loop.replicate_size)
    return out.bind_thread_range(*loop.thread_range) if loop.thread_range is not None else out


def project(wloop: Fragment, nest: LoopNest, access) -> Fragment:
    """A widened loop layout back on the parallel axes; refused when a serial axis would cross threads."""
    n = len(nest.extents)
    table = wloop.thread_table()                  # (*parallel, *widened, rep)
    flat = table.reshape(tuple(nest.extents) + (-1, table.shape[-1]))
    if not (flat == flat[..., :1, :]).all():
        point = next(p for p in itertools.product(*[range(e) for e in nest.extents])
                     if not (flat[p] == flat[p][:1]).all())
        raise LayoutConflictError(
            f"{nest.describe()}: fragment {access.buffer.name} is read serially through {access}, so each parallel "
            f"iteration must hold the whole serial range in one thread, but the layout spreads it over threads "
            f"(iteration {list(point)}: threads {sorted(set(int(t) for t in flat[point].reshape(-1)))}); layout "
            f"{wloop!r}")
    zero = {placeholder(k): tirx.const(0, "int32") for k in range(n, len(wloop.input_shape))}
    thread = substitute(wloop.forward_thread, zero)
    out = Fragment.from_exprs(list(nest.extents), thread, None, wloop.replicate_size)
    return out.bind_thread_range(*wloop.thread_range) if wloop.thread_range is not None else out
