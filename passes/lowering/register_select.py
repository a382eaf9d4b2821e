"""Read a register array at a runtime index through a select over its few candidate slots.

``unroll_registers`` makes every index that a loop of the kernel reaches a constant; two kinds of index stay
runtime values and would move the whole array to local memory (a stack frame, no spill bytes reported):

- an index that depends on the thread: a fully replicated fragment read at row ``i`` of a loop whose rows are
  spread over the warps (``r[(tx >> 5) + 4 * k]`` once the loop over ``k`` is unrolled);
- an index that is the variable of a loop that must stay rolled: a per-thread mask ``m[k]`` read by the loop
  that holds the whole attention step.

Each such read ``r[a + b]`` (``a``: constants and unrolled loop variables, which are constants per copy of the
body; ``b``: the rest) becomes ``b == lo ? r[a + lo] : b == lo + 1 ? r[a + lo + 1] : ... r[a + hi]`` when ``b``
takes at most ``MAX_SELECT_WAYS`` values; failing that, a read of an array of at most ``MAX_SELECT_WAYS``
elements selects over the whole array. Every candidate slot is a constant once the body is unrolled, so the
array stays in registers; a read outside the candidates cannot happen (``b``'s bounds, the array's extent),
so the value read is unchanged. Stores keep their index: a store at a runtime index still costs a stack frame.
"""
from __future__ import annotations

import numpy as np
from tvm import sym
from tvm import tirx
from tvm.ir import Range, TensorLoad

from tilelayout.errors import TileLayoutError
from tilelayout.evaluate import evaluate, grid_env
from tilelayout.expr import substitute

from ..ir_utils import constant_numel, int_value, mapped, walk

__all__ = ["select_register_reads", "MAX_SELECT_WAYS"]

#: the most candidate slots one read may select among (each costs a compare and a select per read)
MAX_SELECT_WAYS = 16

_CONSTANT_KINDS = (tirx.ForKind.UNROLLED, tirx.ForKind.VECTORIZED)


def _is_register(buf) -> bool:
    return str(buf.scope()).startswith("local") and str(buf.scope()) != "local.var"


def select_register_reads(func):
    """``func`` with every register read at a runtime index turned into a select over constant slots."""
    fixed, ranges, binds, extents = set(), {}, {}, {}

    def on_for(f):
        if f.kind in _CONSTANT_KINDS:
            fixed.add(f.loop_var)
        lo, ext = int_value(f.min), int_value(f.extent)
        if lo is not None:
            ranges[f.loop_var] = Range.from_min_extent(lo, ext if ext is not None else f.extent)
        if lo == 0 and ext is not None:
            extents[f.loop_var] = ext

    def on_attr(n):
        if n.attr_key == "thread_extent" and isinstance(n.node, tirx.IterVar):
            ranges[n.node.var] = Range.from_min_extent(0, n.value)
            if int_value(n.value) is not None:
                extents[n.node.var] = int_value(n.value)
    walk(func.body, [(tirx.For, on_for), (tirx.AttrStmt, on_attr),
                     (tirx.Bind, lambda b: binds.__setitem__(b.var, b.value))])
    ana = sym.Analyzer()
    for v, r in ranges.items():
        ana.bind(v, r)

    def on_load(e):
        if not tirx.is_buffer_var(e.source) or not _is_register(e.source) or len(e.indices) != 1:
            return e
        index = e.indices[0]
        if int_value(index) is not None or not str(index.ty).startswith(("int", "uint")) or "x" in str(index.ty):
            return e
        slots = _candidates(_expand(index, binds), fixed, ana, constant_numel(e.source), extents)
        if slots is None:
            return e
        return _select_chain(e.source, slots)
    return func.with_body(mapped(func.body, [(TensorLoad, on_load)]))


def _expand(index, binds: dict):
    """``index`` with ``Bind`` variables replaced by their values (those are in scope wherever it is) and its
    ``Let`` expressions inlined."""
    index = mapped(index, [(tirx.Let, lambda e: substitute(e.body, {e.var: e.value}))])
    for _ in range(8):
        used = []
        walk(index, [(tirx.Var, lambda v: used.append(v) if v in binds else None)])
        if not used:
            break
        index = substitute(index, {v: binds[v] for v in used})
    return index


def _values(b, extents: dict) -> list | None:
    """Every value ``b`` takes, by exact enumeration over its variables' ranges (all from 0, constant extents,
    at most 65,536 points); None when it cannot be enumerated. Exact where interval bounds are not: a warp
    index written ``(tx % 128 // 32 + (tx // 32 - tx % 128 // 32) % 4) // 4`` is 0 for 128 threads."""
    names: list = []
    walk(b, [(tirx.Var, lambda v: names.append(v) if not any(v.same_as(x) for x in names) else None)])
    if any(v not in extents for v in names) or np.prod([extents[v] for v in names]) > 65536:
        return None
    try:
        env = grid_env(names, [extents[v] for v in names])
        return sorted(int(x) for x in np.unique(evaluate(b, env)))
    except TileLayoutError:
        return None


def _candidates(index, fixed: set, ana, size: int | None, extents: dict) -> list | None:
    """[(condition, slot)]: the last slot is taken when no condition holds; None when too many."""
    variable, loads = [], []
    walk(index, [(tirx.Var, lambda v: variable.append(v) if v not in fixed else None),
                 (TensorLoad, loads.append)])
    if not variable:
        return None                       # constant per unrolled copy: already a register
    if loads:                             # an index read from memory: only the whole array can be selected over
        return _whole(index, size)
    a = ana.simplify(substitute(index, {v: tirx.const(0, str(v.ty)) for v in variable}))
    if not _affine(a):
        # a division or modulo of an unrolled loop variable in the constant part: a later simplification in the
        # build rewrote ``(7 - j) % 8 + 8`` (the slot of a reversed read) to ``8 - j % -8``, a different slot;
        # such reads keep their index (and the array its local memory) rather than risk a wrong value
        return None
    b = ana.simplify(index - a)
    rest = []
    walk(b, [(tirx.Var, lambda v: rest.append(v) if v in fixed else None)])
    if not rest:
        values = _values(b, extents)
        if values is None:
            bound = ana.const_int_bound(b)
            lo, hi = int(bound.min_value), int(bound.max_value)
            values = list(range(lo, hi + 1)) if 0 <= hi - lo < MAX_SELECT_WAYS else None
        if values is not None and len(values) <= MAX_SELECT_WAYS:
            return [(tirx.EQ(b, tirx.const(v, str(b.ty))), ana.simplify(a + v)) for v in values]
    return _whole(index, size)


def _affine(expr) -> bool:
    """Whether ``expr`` has no division or modulo (sums and products of variables and constants)."""
    found: list = []
    walk(expr, [(t, found.append) for t in (tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod)])
    return not found


def _whole(index, size: int | None) -> list | None:
    """Every slot of an array of at most ``MAX_SELECT_WAYS`` elements, else None."""
    if size is not None and size <= MAX_SELECT_WAYS:
        return [(tirx.EQ(index, tirx.const(v, str(index.ty))), tirx.const(v, str(index.ty))) for v in range(size)]
    return None


def _select_chain(buf, slots: list):
    """The read of the last slot, under selects for the others (one slot: a plain read at a constant)."""
    out = tirx.BufferLoad(buf, [slots[-1][1]])
    for cond, slot in reversed(slots[:-1]):
        out = tirx.Select(cond, tirx.BufferLoad(buf, [slot]), out)
    return out
