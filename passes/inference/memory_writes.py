"""Stores to global or shared memory that several iterations of one parallel nest make to one element.

A GPU runs a nest's iterations in many threads at once, so two threads storing to one element race: a plain
store keeps one of the values, a read-modify-write (``O[i] = O[i] + A[i, j]``) loses updates. The threads of
the CPU check run one after another and cannot see it, so the decision is made here, once, on the op graph:

- ``memory_update(nest)``: the nest's one *accumulation* (every iteration that reaches an element reads it and
  stores it back, at one index tuple), which lowers correctly when all iterations of an element run in one
  thread, in iteration order (``grouped_update_layout`` plans such a loop layout); None when no element is
  stored by two iterations. Anything else that stores one element from several iterations (different values,
  reads of other elements of the buffer, two stores to it) is refused with ``WriteRaceError``.
- ``memory_race(nest, loop)``: by enumeration, the first element that two threads of ``loop`` would store
  (the check every loop decision passes, whatever proposed the layout).

Atomics are not stores here (``tilelayout.lang.atomic_add`` is the race-free way to combine across threads).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import tvm_ffi
from tvm import tirx
from tvm.ir import Range, TensorLoad

from tilelayout.errors import EvaluationError, WriteRaceError
from tilelayout.evaluate import evaluate, grid_env
from tilelayout.expr import mentions
from tilelayout.fragment import Fragment
from tilelayout.layout import placeholder, rep_placeholder, substitute

from ..ir_utils import walk
from .loop_nest import LoopNest
from .ops import ParallelOp, _stmt_text, _text

__all__ = ["MemoryUpdate", "memory_update", "grouped_update_layout", "memory_race", "WRITE_CHECK_LIMIT"]

#: nests with more points than this are not judged by enumeration (their stores are left as written)
WRITE_CHECK_LIMIT = 1 << 20

_FIX = ("accumulate in a register fragment instead (`acc[i] = acc[i] + A[i, j]` with acc in scope "
        "\"local.fragment\", or Tx.sum(acc, F, axes=[1])) and store acc once, or combine across threads with "
        "tilelayout.lang.atomic_add(O[...], value)")


@dataclass(frozen=True)
class MemoryUpdate:
    """A store every iteration of which reads the element it stores (``O[i, j // 4] = f(O[i, j // 4], ...)``),
    where several iterations reach one element. ``used`` numbers the elements (an expression of the loop
    placeholders over ``used_extent`` values), ``extra`` the iterations of one element in iteration order
    (over ``extra_extent``): together they are the loop's iteration space."""

    buffer: str
    statement: str
    used: object
    used_extent: int
    extra: object
    extra_extent: int
    elements: np.ndarray = field(compare=False, repr=False)   # element number at every loop point (flat)
    stored: np.ndarray = field(compare=False, repr=False)     # the points where the store runs (flat mask)


@dataclass(frozen=True)
class _Store:
    store: object               # the BufferStore
    conditions: tuple           # enclosing ``if`` conditions inside the nest (an else branch negated)


def memory_update(nest: LoopNest) -> MemoryUpdate | None:
    """The nest's accumulation into global/shared memory, None when no element is stored by two iterations;
    ``WriteRaceError`` for every other store of one element from several iterations. Kept on the nest."""
    hit = nest.__dict__.get("_memory_update", _UNSET)
    if hit is _UNSET:
        hit = _memory_update(nest) if isinstance(nest.op, ParallelOp) else None
        nest.__dict__["_memory_update"] = hit
    return hit


_UNSET = object()


def _memory_update(nest: LoopNest) -> MemoryUpdate | None:
    if nest.size > WRITE_CHECK_LIMIT or not all(isinstance(e, int) for e in nest.extents):
        return None
    stores = _memory_stores(nest.op.body)
    by_buffer: dict = {}
    for s in stores:
        by_buffer.setdefault(s.store.buffer, []).append(s)
    found = None
    for buf in sorted(by_buffer, key=lambda b: str(b.name)):
        group = by_buffer[buf]
        shared_by = _iterations_per_element(nest, group)
        if shared_by is None:
            continue
        update = _as_update(nest, buf, group, shared_by)
        if found is not None:
            raise WriteRaceError(f"{nest.describe()}: it updates both {found.buffer} and {update.buffer} from several "
                                 f"iterations per element; one nest keeps one such update in one thread per element; "
                                 f"split the nest into one loop per buffer")
        found = update
    return found


def _memory_stores(body) -> list:
    """Every non-atomic store to global or shared memory under ``body``, with its enclosing conditions."""
    out: list = []

    def visit(s, conds: tuple) -> None:
        if isinstance(s, tirx.SeqStmt):
            for c in s.seq:
                visit(c, conds)
        elif isinstance(s, tirx.IfThenElse):
            visit(s.then_case, conds + (s.condition,))
            if s.else_case is not None:
                visit(s.else_case, conds + (tirx.Not(s.condition),))
        elif isinstance(s, tirx.BufferStore):
            scope = str(s.buffer.scope()) or "global"
            if scope == "global" or scope.startswith("shared"):
                out.append(_Store(s, conds))
        elif isinstance(s, tirx.Stmt):
            for name in ("body", "then_case", "else_case"):
                child = getattr(s, name, None)
                if isinstance(child, tirx.Stmt):
                    visit(child, conds)

    visit(body, ())
    return out


def _fixed(nest: LoopNest, expr):
    """``expr`` with every variable that is not a parallel loop variable of ``nest`` at 0 (block indices, outer
    and inner serial loops at their first value): the stores of one block and step collide or not."""
    others = {}

    def on_var(v):
        if not any(v.same_as(w) for w in nest.loop_vars) and v not in others:
            others[v] = tirx.const(0, str(v.ty)) if str(v.ty).startswith(("int", "uint")) else v
    walk(expr, [(tirx.Var, on_var)])
    return substitute(expr, others) if others else expr


def _element_ids(nest: LoopNest, indices) -> np.ndarray | None:
    """An integer naming the element stored at every loop point (distinct elements, distinct numbers), None
    when an index cannot be evaluated (it reads memory)."""
    env = grid_env(nest.loop_vars, nest.extents)
    flat = np.zeros(tuple(nest.extents), dtype=np.int64)
    for idx in indices:
        try:
            val = np.broadcast_to(evaluate(_fixed(nest, idx), env), tuple(nest.extents))
        except (EvaluationError, TypeError, ValueError):
            return None
        low = int(val.min())
        flat = flat * (int(val.max()) - low + 1) + (val - low)
    return flat


def _mask(nest: LoopNest, conds: tuple) -> np.ndarray:
    """Loop points where the store runs; a condition that cannot be evaluated (it reads memory) counts as true."""
    env = grid_env(nest.loop_vars, nest.extents)
    out = np.ones(tuple(nest.extents), dtype=bool)
    for c in conds:
        try:
            out &= np.broadcast_to(evaluate(_fixed(nest, c), env), tuple(nest.extents)).astype(bool)
        except (EvaluationError, TypeError, ValueError):
            continue
    return out


def _iterations_per_element(nest: LoopNest, group: list) -> tuple | None:
    """(element id per point, mask of points storing) when some element is stored by two loop points of the
    stores ``group`` (one buffer); None when every element is stored at most once, or when the indices read
    memory (nothing can be told: left as written)."""
    ids, masks = [], []
    for s in group:
        e = _element_ids(nest, list(s.store.indices))
        if e is None:
            return None
        ids.append(e.reshape(-1))
        masks.append(_mask(nest, s.conditions).reshape(-1))
    for e, m in zip(ids, masks):
        hit = e[m]
        if hit.size != np.unique(hit).size:
            return e, m
    if len(group) > 1:
        everything = np.concatenate([e[m] for e, m in zip(ids, masks)])
        points = np.concatenate([np.nonzero(m)[0] for m in masks])
        order = np.lexsort((points, everything))
        same = (everything[order][1:] == everything[order][:-1]) & (points[order][1:] != points[order][:-1])
        if same.any():
            return ids[0], masks[0]
    return None


def _as_update(nest: LoopNest, buf, group: list, shared_by: tuple) -> MemoryUpdate:
    """The accumulation ``group`` makes, or ``WriteRaceError`` naming why it is not one."""
    name = str(buf.name)
    first = group[0].store
    text = _statement(first)
    where = f"{nest.describe()}: the store {text} to {_scope_word(buf)} buffer {name}"
    if len(group) > 1:
        raise WriteRaceError(f"{where} and {len(group) - 1} other store(s) to {name} reach one element from several "
                             f"iterations, which run in different threads on a GPU (a data race); {_FIX}")
    indices = list(first.indices)
    if not _reads_element(first.value, buf, indices):
        raise WriteRaceError(f"{where} is made by several iterations with different values (a write race: which "
                             f"value lands depends on thread timing); store from one iteration per element (index "
                             f"{name} with every loop variable), or combine the values: {_FIX}")
    other = _other_reads(nest.op.body, buf, indices)
    if other is not None:
        raise WriteRaceError(f"{where} accumulates from several iterations per element while the nest also reads "
                             f"{name}[{', '.join(_text(i) for i in other)}], another element that other threads "
                             f"update; read and accumulate at one index tuple, or {_FIX}")
    split = _digit_split(nest, indices)
    if split is None:
        raise WriteRaceError(f"{where} accumulates from several iterations per element, and its index is not a "
                             f"sum of loop-variable digits (such as i, j // 4, j % 8), so the iterations of one "
                             f"element cannot be kept in one thread; {_FIX}")
    used, used_ext, extra, extra_ext = split
    return MemoryUpdate(name, text, used, used_ext, extra, extra_ext, shared_by[0], shared_by[1])


def _statement(store) -> str:
    """``O[i] = O[i] + A[i, j]`` (line 12): the store as written, for messages."""
    text = _stmt_text(store).strip()
    m = re.match(r"line (\d+): (.*)", text, re.S)
    return f"`{m.group(2)}` (line {m.group(1)})" if m else f"`{text}`"


def _scope_word(buf) -> str:
    scope = str(buf.scope()) or "global"
    return "shared" if scope.startswith("shared") else "global"


def _same_indices(a: list, b: list) -> bool:
    return len(a) == len(b) and all(tvm_ffi.structural_equal(x, y) for x, y in zip(a, b))


def _reads_element(value, buf, indices: list) -> bool:
    found: list = []
    walk(value, [(TensorLoad, lambda n: found.append(1) if n.source.same_as(buf) and _same_indices(
        list(n.indices), indices) else None)])
    return bool(found)


def _other_reads(body, buf, indices: list):
    """Indices of a load of ``buf`` in ``body`` at another index tuple, else None."""
    found: list = []
    walk(body, [(TensorLoad, lambda n: found.append(list(n.indices)) if n.source.same_as(buf) and not _same_indices(
        list(n.indices), indices) else None)])
    return found[0] if found else None


def _digit_split(nest: LoopNest, indices: list):
    """(used, used extent, extra, extra extent): the loop digits the store's indices use and those they do not,
    each flattened row-major (loop variables in order, most significant digit first), as expressions of the
    loop placeholders; None when an index is not a sum of digit pieces of the loop variables."""
    from tilelayout.fragment import _merged_pieces
    if nest.inner_vars and any(mentions(idx, nest.inner_vars) for idx in indices):
        return None          # the element moves with a serial loop inside the nest
    dom = {placeholder(k): Range(0, e) for k, e in enumerate(nest.extents)}
    vmap = {v: placeholder(k) for k, v in enumerate(nest.loop_vars)}
    taken = _merged_pieces([substitute(_fixed(nest, idx), vmap) for idx in indices], dom)
    if taken is None:
        return None
    used, used_ext = tirx.const(0, "int32"), 1
    extra, extra_ext = tirx.const(0, "int32"), 1
    for k, ext in enumerate(nest.extents):
        v = placeholder(k)
        segments = _segments(sorted(taken.get(v.name, [])), ext)
        if segments is None:
            return None
        for lower, e, is_used, top in reversed(segments):
            piece = tirx.floordiv(v, lower) if lower > 1 else v
            if not top:
                piece = tirx.floormod(piece, e)
            if is_used:
                used, used_ext = used * e + piece, used_ext * e
            else:
                extra, extra_ext = extra * e + piece, extra_ext * e
    return used, used_ext, extra, extra_ext


def _segments(pieces: list, ext: int) -> list | None:
    """[(lower, extent, used, is_top)] covering the digits of a variable over [0, ext), least significant first."""
    out, expected = [], 1
    for lower, e in pieces:
        if lower > expected:
            if lower % expected:
                return None
            out.append((expected, lower // expected, False, False))
        elif lower < expected:
            if (lower * e) > expected and (lower * e) % expected:
                return None
            if lower * e <= expected:
                continue          # a digit already used
            lower, e = expected, lower * e // expected
        out.append((lower, e, True, False))
        expected = lower * e
    if expected < ext:
        out.append((expected, -(-ext // expected), False, True))
    elif out:
        lower, e, used, _ = out[-1]
        out[-1] = (lower, e, used, True)
    return out


def grouped_update_layout(update: MemoryUpdate, extents: list, thread_range: tuple) -> Fragment:
    """The loop layout that runs every iteration of one element in one thread, in iteration order: element
    number u on thread ``u % threads``, at slot ``(u // threads) * extra_extent + extra`` (the iterations of one
    element are consecutive slots, so a thread runs them in order)."""
    lo, threads = thread_range
    thread = tirx.floormod(update.used, threads)
    slot = tirx.floordiv(update.used, threads) * update.extra_extent + update.extra
    layout = Fragment.from_exprs(list(extents), thread, [slot])
    return layout.bind_thread_range(lo, threads)


def memory_race(nest: LoopNest, loop: Fragment) -> str | None:
    """The first element of the nest's memory update (``memory_update``) that two threads of ``loop`` would store
    (replica 0 stores for a replicated loop), in words; None when there is none. Only an update can race: every
    other store from several iterations per element is refused before any layout is tried."""
    update = memory_update(nest)
    if update is None or not loop.is_static:
        return None
    env = grid_env(loop.forward_vars + [rep_placeholder()], list(nest.extents) + [1])
    try:
        thread = np.broadcast_to(evaluate(loop.forward_thread, env), tuple(nest.extents) + (1,)).reshape(-1)
    except (EvaluationError, TypeError, ValueError):
        return None
    points = np.nonzero(update.stored)[0]
    elem, thr = update.elements[points], thread[points]
    order = np.lexsort((thr, elem))
    elem, thr, points = elem[order], thr[order], points[order]
    clash = np.nonzero((elem[1:] == elem[:-1]) & (thr[1:] != thr[:-1]))[0]
    if not clash.size:
        return None
    k = int(clash[0])
    first, second = (tuple(int(c) for c in np.unravel_index(int(points[p]), tuple(nest.extents))) for p in (k, k + 1))
    lo = (loop.thread_range or (0, 0))[0]
    return (f"threads {int(thr[k]) + lo} and {int(thr[k + 1]) + lo} both update one element of {update.buffer} "
            f"(iterations {list(first)} and {list(second)}) in {update.statement}")
