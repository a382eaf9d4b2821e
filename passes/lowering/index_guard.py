"""Keep buffer indices away from apache-tvm 0.27's iter-map rewriting where it would change their value.

Buffer flattening (in TVM's GPU pipeline and in the CPU check) simplifies every flattened index with
``iter_map_simplify``, which rewrites some modular forms wrongly: ``(3 - j) % 4`` over ``j < 128`` loses its
offset, so ``(127 - j) // 4 * 4 + (3 - j) % 4`` becomes ``124 - j`` (``127 - j`` is right). Partitioned code
produces such forms for reversed, offset and diagonal fragment accesses. Flattening also hands the
enclosing ``if`` conditions to ``iter_map_simplify`` as its predicate, which can turn a right rewrite
wrong: with ``x = s * 32 + tx`` under the partition guard ``562 <= x < 760``, the register index
``((x - 562) // 33 * 33 + (x + 32) % 33 + 562) // 32`` (which is ``s``) becomes ``s - 1`` (fuzz seed 1985),
though without the predicate it is rewritten correctly. Every index holding a floor division or modulo is
checked here the way flattening will treat it -- rewritten with TVM's own ``iter_map_simplify`` over the
loop and thread ranges in scope, with and without the enclosing conditions as predicate, then compared with
the original by exact enumeration wherever the conditions hold -- and an index whose value would change is
hidden behind a ``Let`` (which the rewriting does not look through). Indices TVM handles correctly are left
alone, so vectorisation still sees them; inside a vector loop a hidden index that moves one element per lane
keeps the lane outside its ``Let`` (``_hide``), so it stays a ramp.
"""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Range, TensorLoad

from tilelayout.errors import TileLayoutError
from tilelayout.evaluate import evaluate
from tilelayout.layout import substitute

from ..ir_utils import int_value, mutate, walk

__all__ = ["protect_indices"]

#: joint domains larger than this are not enumerated; their rewritten indices are protected conservatively
ENUMERATION_LIMIT = 1 << 21


def _has_div_mod(expr) -> bool:
    hits: list = []
    walk(expr, [((tirx.FloorDiv, tirx.FloorMod), lambda n: hits.append(1))])
    return bool(hits)


def _free(expr) -> list:
    found: list = []
    walk(expr, [(tvm.ir.Var, lambda v: found.append(v) if not any(v.same_as(w) for w in found) else None)])
    return found


def _flat(indices: list, shape: list):
    out = tirx.const(0, "int32")
    for idx, ext in zip(indices, shape):
        out = out * ext + idx
    return out


def _grid(names: list, ranges: dict) -> tuple | None:
    """(environment, shape): every variable of ``names`` over its range, as broadcastable axes of one grid;
    None when the grid has more than ``ENUMERATION_LIMIT`` points."""
    size = 1
    for v in names:
        size *= ranges[v][1]
    if size > ENUMERATION_LIMIT:
        return None
    env, shape = {}, [ranges[v][1] for v in names]
    for axis, v in enumerate(names):
        view = [1] * len(names)
        view[axis] = ranges[v][1]
        env[v] = (np.arange(ranges[v][1], dtype=np.int64) + ranges[v][0]).reshape(view)
    return env, shape


def _changed_by_flattening(indices: list, shape: list, ranges: dict, conditions: tuple = ()) -> bool:
    """Would ``iter_map_simplify`` of the flattened index, with or without ``conditions`` (the enclosing
    ``if`` conditions) as its predicate, compute a different value somewhere in ``ranges`` where the
    conditions hold?"""
    flat = _flat(indices, shape)
    variables = [v for v in _free(flat) if v in ranges]
    if len(variables) != len(_free(flat)):
        return False                      # a value flattening has no range for: it does not rewrite it
    dom = {v: Range.from_min_extent(*ranges[v]) for v in variables}
    predicate = tirx.all(*conditions) if conditions else None
    rewrites = []
    for pred in ([None, predicate] if predicate is not None else [None]):
        try:
            if pred is None:
                out = tvm.sym.iter_map_simplify([flat], dom, simplify_trivial_iterators=False)
            else:
                out = tvm.sym.iter_map_simplify([flat], dom, predicate=pred, simplify_trivial_iterators=False)
        except Exception:  # TVM refuses: flattening keeps the original too
            continue
        if len(out) == 1 and not tvm_ffi.structural_equal(out[0], flat):
            rewrites.append(out[0])
    if not rewrites:
        return False
    # enumerate over the index's variables and the conditions' (when every one of them has a range)
    names = list(variables)
    for v in (_free(predicate) if predicate is not None else []):
        if not any(v.same_as(w) for w in names):
            names.append(v)
    if any(v not in ranges for v in names):
        names, predicate = list(variables), None      # a condition on a value without a range: compare everywhere
    grid = _grid(names, ranges)
    if grid is None:
        return True
    env, shape_all = grid
    try:
        want = np.broadcast_to(evaluate(flat, env), shape_all)
        where = np.broadcast_to(evaluate(predicate, env), shape_all).astype(bool) if predicate is not None \
            else np.ones(shape_all, dtype=bool)
        return any(not np.array_equal(want[where], np.broadcast_to(evaluate(out, env), shape_all)[where])
                   for out in rewrites)
    except TileLayoutError:
        return True


def _lane_part(idx, lane, ranges: dict):
    """``idx - idx[lane := 0]`` when that is ``lane`` or 0 at every point of ``ranges`` (checked by exact
    enumeration), else None: the part of an index inside a vector that can stay outside the ``Let``."""
    names = _free(idx)
    if lane is None or not any(v.same_as(lane) for v in names) or any(v not in ranges for v in names):
        return None
    grid = _grid(names, ranges)
    if grid is None:
        return None
    env, shape = grid
    base = substitute(idx, {lane: tirx.const(0, "int32")})
    try:
        step = np.broadcast_to(evaluate(idx, env) - evaluate(base, env), shape)
    except TileLayoutError:
        return None
    lanes = np.broadcast_to(env[lane], shape)
    if np.array_equal(step, lanes):
        return base, lane
    if not step.any():
        return base, None
    return None


def _hide(indices: list, lane=None, ranges: dict | None = None) -> list:
    """Each index holding a floor division or modulo behind a ``Let``. Inside a vector loop (``lane``), an index
    that moves with the lane one element at a time, or not at all, keeps the lane outside: ``Let(base) + lane``
    is a ramp to TVM's vectoriser, where a hidden lane made it build 8-lane int32 index vectors that its CUDA
    generator prints as ``make_longlong4`` with eight arguments (fuzz seed 3003 kernel 21)."""
    out = []
    for k, idx in enumerate(indices):
        if _has_div_mod(idx):
            v = tirx.Var(f"idx{k}", str(idx.ty) if hasattr(idx, "ty") else "int32")
            split = _lane_part(idx, lane, ranges or {})
            if split is None:
                idx = tirx.Let(v, idx, v)
            else:
                base, moving = split
                idx = tirx.Let(v, base, v) if moving is None else tirx.Let(v, base, v) + moving
        out.append(idx)
    return out


def protect_indices(body, tx=None, threads: int = 1):
    """``body`` with every buffer index that flattening would rewrite wrongly hidden behind a ``Let``."""
    ranges: dict = {}
    if tx is not None:
        ranges[tx] = (0, threads)

    conditions: list = []
    lanes: list = []              # enclosing vectorised loop variables, innermost last

    def fix(buf, indices):
        indices = list(indices)
        if not any(_has_div_mod(i) for i in indices):
            return None
        shape = [int_value(s) for s in buf.shape]
        if any(s is None for s in shape) or not _changed_by_flattening(indices, shape, ranges, tuple(conditions)):
            return None
        return _hide(indices, lanes[-1] if lanes else None, ranges)

    handlers: list = []

    def under(cond, stmt):
        """``stmt`` protected with ``cond`` among the enclosing conditions (as flattening records them)."""
        if stmt is None:
            return None
        conditions.append(cond)
        try:
            return mutate(stmt, handlers)
        finally:
            conditions.pop()

    def on_if(node, mutator):
        cond = mutate(node.condition, handlers)
        then = under(node.condition, node.then_case)
        other = under(tirx.Not(node.condition), node.else_case)
        return tirx.IfThenElse(cond, then, other)

    def on_for(loop, mutator):
        lo, ext = int_value(loop.min), int_value(loop.extent)
        if lo is not None and ext is not None and ext > 0:
            ranges[loop.loop_var] = (lo, ext)
        vector = loop.kind == tirx.ForKind.VECTORIZED
        if vector:
            lanes.append(loop.loop_var)
        try:
            return mutator.default_mutate(loop)
        finally:
            ranges.pop(loop.loop_var, None)
            if vector:
                lanes.pop()

    def on_store(s, mutator):
        s = mutator.default_mutate(s)
        new = fix(s.buffer, s.indices)
        return s if new is None else tirx.BufferStore(s.buffer, s.value, new)

    def on_load(e, mutator):
        e = mutator.default_mutate(e)
        if not tirx.is_buffer_var(e.source):
            return e
        new = fix(e.source, e.indices)
        return e if new is None else tirx.BufferLoad(e.source, new)

    handlers += [(tirx.For, on_for), (tirx.IfThenElse, on_if), (tirx.BufferStore, on_store), (TensorLoad, on_load)]
    return mutate(body, handlers)
