"""Per-thread loops over a fragment's cells: the serial slot loops, with their guards, that tile-op lowering
and layout-conversion lowering both emit around a per-cell statement.
"""
from __future__ import annotations

from tvm import tirx

from tilelayout.fragment import Fragment
from tilelayout.layout import substitute

from ..ir_utils import make_analyzer
from .loop_partition import per_thread_cells

__all__ = ["ForCells", "slot_loops", "guard"]


class ForCells:
    """Per-thread iteration over the cells of a fragment (see ``per_thread_cells``)."""

    def __init__(self, layout: Fragment, tx, threads: int, what: str, prefix: str):
        self.layout = layout
        self.svars, self.slots, self.coords, self.guards, bounds = per_thread_cells(layout, tx, threads, what, prefix)
        # cells also run in threads outside the layout's range (uniform control flow); bind the whole block
        if tx is not None:
            bounds = dict(bounds)
            bounds[tx] = (0, threads)
        self.ana = make_analyzer(bounds)


def slot_loops(cells: ForCells, body):
    """Serial loops over the slots around ``body``, with fresh loop variables (TIR defines a var once)."""
    fresh = [tirx.Var(v.name, "int32") for v in cells.svars]
    body = substitute(body, dict(zip(cells.svars, fresh)))
    for v, e in reversed(list(zip(fresh, cells.slots))):
        body = tirx.For(v, 0, e, tirx.ForKind.SERIAL, body)
    return body


def guard(stmt, conds: list, ana):
    """``stmt`` under the conditions in ``conds`` that ``ana`` cannot prove (none left: ``stmt`` itself)."""
    conds = [ana.simplify(c) for c in conds if not ana.can_prove(c)]
    if not conds:
        return stmt
    out = conds[0]
    for c in conds[1:]:
        out = tirx.And(out, c)
    return tirx.IfThenElse(out, stmt, None)
