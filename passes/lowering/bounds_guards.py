"""Out-of-bounds guards for global buffers with symbolic extents (dynamic shapes with static tiles).

A kernel over ``A: (m, 64)`` with ``m = T.int32()`` and a grid of ``ceildiv(m, 64)`` tiles reads and writes
past the end of ``A`` in the last, partial tile. After partitioning every access has its final per-thread
index; for each access to a global buffer this pass asks the analyzer (thread range, block range, every
enclosing loop's range) whether the index provably stays inside the buffer. Where it cannot prove it:

- a store is predicated (``if idx < extent: A[idx] = v``);
- a load becomes ``if_then_else(idx < extent, A[idx], 0)``: the fill value is 0 (TileLang's safe-memory
  legalisation uses the same), which is what out-of-range elements contribute to the partial tile's math.

Accesses proven in bounds (every static shape, and the dimensions of a symbolic buffer the tile cannot
exceed) stay unguarded, so kernels without symbolic extents are unchanged. Atomics on a global element are
guarded like stores.
"""
from __future__ import annotations

from typing import Any

from tvm import sym, tirx
from tvm.ir import Range, TensorLoad

from tilelayout.lang import atomic_of

from ..ir_utils import int_value, mutate

__all__ = ["guard_out_of_bounds"]


def _symbolic(buf) -> bool:
    return any(int_value(s) is None for s in buf.shape)


def _is_global(buf) -> bool:
    return str(buf.scope()) in ("", "global")


class _Guards:
    def __init__(self):
        self.ana = sym.Analyzer()

    def bind(self, var, lo, ext) -> None:
        try:
            self.ana.bind(var, Range.from_min_extent(lo, ext))
        except Exception:  # noqa: BLE001 - a variable bound twice keeps its first range
            pass

    def condition(self, buf, indices) -> Any:
        """The in-bounds condition of ``buf[indices]`` the analyzer cannot prove, or None."""
        parts = []
        for idx, ext in zip(indices, buf.shape):
            if not self.ana.can_prove(idx >= 0):
                parts.append(idx >= 0)
            if not self.ana.can_prove(idx < ext):
                parts.append(idx < ext)
        if not parts:
            return None
        out = parts[0]
        for p in parts[1:]:
            out = tirx.And(out, p)
        return out


def guard_out_of_bounds(func):
    """``func`` with every possibly out-of-bounds access to a symbolic-extent global buffer guarded."""
    g = _Guards()

    def on_attr(node, mutator):
        if node.attr_key == "thread_extent" and isinstance(node.node, tirx.IterVar):
            g.bind(node.node.var, 0, node.value)
        return mutator.default_mutate(node)

    def on_for(loop, mutator):
        g.bind(loop.loop_var, loop.min, loop.extent)
        return mutator.default_mutate(loop)

    def on_load(e, mutator):
        e = mutator.default_mutate(e)
        if not tirx.is_buffer_var(e.source) or not _is_global(e.source) or not _symbolic(e.source):
            return e
        cond = g.condition(e.source, list(e.indices))
        if cond is None:
            return e
        return tirx.if_then_else(cond, e, tirx.const(0, str(e.source.dtype)))

    def on_store(s, mutator):
        s = mutator.default_mutate(s)
        if not _is_global(s.buffer) or not _symbolic(s.buffer):
            return s
        cond = g.condition(s.buffer, list(s.indices))
        return s if cond is None else tirx.IfThenElse(cond, s, None)

    def on_eval(e, mutator):
        at = atomic_of(e.value)
        if at is None or not _is_global(at.target.source) or not _symbolic(at.target.source):
            return mutator.default_mutate(e)
        cond = g.condition(at.target.source, list(at.target.indices))
        return e if cond is None else tirx.IfThenElse(cond, e, None)

    body = mutate(func.body, [(tirx.AttrStmt, on_attr), (tirx.For, on_for), (TensorLoad, on_load),
                              (tirx.BufferStore, on_store), (tirx.Evaluate, on_eval)])
    return func.with_body(body)

