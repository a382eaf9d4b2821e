"""Lower the layout conversions inference inserted (``T.tile.copy`` with a ``tilelayout_conversion`` config).

``LowerTileOps`` calls this for every conversion call it meets (the conversion is a tile op of the graph, so
it is lowered in the same pass as the others and op numbering stays that of inference).

Inference decided how each conversion is done and wrote it into the config; this pass only reads it and
re-checks, by enumeration of the annotated layouts, that the way chosen is correct for them (a stale or
edited annotation is refused, never miscompiled):

- ``noop``: every thread copies the destination cells it holds from its own source registers;
- ``shuffle``: per destination slot and source slot, every lane of a warp offers that source register and
  reads the lane that holds the element it needs (``tvm_warp_shuffle``); the lanes whose element sits at
  another source slot keep their value;
- ``shared``: a barrier (the stage's memory may still be read by an earlier use), replica 0 of each element
  stores it into a shared staging tile (last dimension padded as planned), a barrier, every holder of the
  destination loads its cells.

Fragment accesses stay logical (``F[i, j]``); loop partition turns them into register slots.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx

from tilelayout.annotate import _plain
from tilelayout.fragment import Fragment

from ..hardware import warp_size
from .from_inference import CONFIG_KEY, SHARED_STAGE_LIMIT, is_noop, shuffle_count
from .cell_loops import ForCells as _cells, guard as _guard, slot_loops as _slot_loops
from .loop_marks import SLOT_LOOP_KEY
from .loop_partition import LoweringError
from .shuffle_conversion import lower_shuffle

__all__ = ["lower_conversion_call", "is_conversion"]


def is_conversion(node) -> bool:
    """Is this tile call a conversion inference inserted?"""
    return node.config is not None and CONFIG_KEY in node.config


def lower_conversion_call(node, layouts: dict, tx, threads: int, target):
    """The per-thread code of one conversion call (``layouts``: the annotated buffer layouts)."""
    return _Conversion(node, layouts, tx, threads, warp_size(target)).lower()


class _Conversion:
    def __init__(self, node, layouts: dict, tx, threads: int, warp: int):
        self.plan = _plain(node.config[CONFIG_KEY])
        self.dst_var, self.src_var = node.args[0].source, node.args[1].source
        self.dst_name, self.src_name = str(self.dst_var.name), str(self.src_var.name)
        self.what = f"conversion {self.dst_name} <- {self.src_name}"
        self.src, self.dst = self._layout(layouts, self.src_name), self._layout(layouts, self.dst_name)
        for region, var in ((node.args[0], self.dst_var), (node.args[1], self.src_var)):
            full = all(int(r.min) == 0 and int(r.extent) == int(s) for r, s in zip(region.region, var.shape))
            if not full:
                raise LoweringError(f"{self.what}: a conversion must cover the whole fragment, got {region}")
        self.tx, self.threads, self.warp = tx, threads, warp
        self.dtype = str(self.src_var.dtype)
        self.elem_bytes = max(1, tirx_bits(self.dtype) // 8)

    def _layout(self, layouts, name) -> Fragment:
        lay = layouts.get(name)
        if not isinstance(lay, Fragment):
            raise LoweringError(f"{getattr(self, 'what', name)}: fragment {name} has no fragment layout annotation; "
                                f"run layout inference first")
        return lay

    def lower(self):
        kind = self.plan.get("kind")
        if kind == "noop":
            return self.noop()
        if kind == "shared":
            return self.shared(int(self.plan.get("pad", 0)))
        if kind == "shuffle":
            return self.shuffle()
        raise LoweringError(f"{self.what}: unknown conversion kind {kind!r} in its annotation")

    # -------------------------------------------------------------- the three ways
    def noop(self):
        if not is_noop(self.src, self.dst, self.threads):
            raise LoweringError(f"{self.what}: annotated as a no-op, but some thread needs an element its source "
                                f"layout does not give it ({self.src!r} -> {self.dst!r})")
        cells = _cells(self.dst, self.tx, self.threads, self.what, "c")
        move = tirx.BufferStore(self.dst_var, tirx.BufferLoad(self.src_var, cells.coords[:-1]), cells.coords[:-1])
        return _slot_loops(cells, _guard(move, cells.guards, cells.ana))

    def shared(self, pad: int):
        shape = [int(s) for s in self.src.input_shape]
        cols = shape[-1]
        stride = cols + pad
        rows = int(np.prod(shape[:-1]))
        per = int(self.plan.get("chunk_rows") or rows)
        if per < 1 or rows % per or per * stride * self.elem_bytes > SHARED_STAGE_LIMIT:
            raise LoweringError(f"{self.what}: a staging round of {per} rows of {stride} elements does not divide the "
                                f"{rows} rows or exceeds the {SHARED_STAGE_LIMIT}-byte shared limit")
        stage = tirx.decl_buffer([per * stride], self.dtype, name=f"{self.dst_name}_stage", scope="shared")
        chunks = rows // per
        c = tirx.Var("round", "int32")

        def row_of(coords):
            row = tirx.const(0, "int32")
            for x, e in zip(coords[:-1], shape[:-1]):
                row = row * e + x
            return row

        def address(coords):
            row = row_of(coords)
            return (row - c * per if chunks > 1 else row) * stride + coords[-1]

        def in_round(coords):
            return [tirx.floordiv(row_of(coords), per) == c] if chunks > 1 else []

        put = _cells(self.src, self.tx, self.threads, self.what + " (store)", "p")
        store = tirx.BufferStore(stage, tirx.BufferLoad(self.src_var, put.coords[:-1]), [address(put.coords[:-1])])
        guards = list(put.guards) + ([put.coords[-1] == 0] if self.src.replicate_size > 1 else [])
        guards += in_round(put.coords)
        get = _cells(self.dst, self.tx, self.threads, self.what + " (load)", "g")
        load = tirx.BufferStore(self.dst_var, tirx.BufferLoad(stage, [address(get.coords[:-1])]), get.coords[:-1])
        sync = tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))
        # the first barrier keeps the stores from overwriting shared memory still being read (the previous
        # round, an enclosing loop's previous iteration, or a buffer the stage's storage is merged with)
        key = f"conversion {self.dst_name} <- {self.src_name}"
        body = tirx.SeqStmt([sync, _vectorizable(_slot_loops(put, _guard(store, guards, put.ana)), key), sync,
                             _vectorizable(_slot_loops(get, _guard(load, list(get.guards) + in_round(get.coords),
                                                                   get.ana)), key)])
        if chunks > 1:
            body = tirx.For(c, 0, chunks, tirx.ForKind.SERIAL, body)
        return tirx.SeqStmt([tirx.AllocBuffer(stage), body])

    def shuffle(self):
        if shuffle_count(self.src, self.dst, self.threads, self.warp, self.elem_bytes) is None:
            raise LoweringError(f"{self.what}: annotated as warp shuffles, but some element must cross a warp "
                                f"({self.src!r} -> {self.dst!r})")
        return lower_shuffle(self)


def tirx_bits(dtype: str) -> int:
    import tvm
    return int(tvm.DataType(dtype).bits)


def _vectorizable(loops, key: str):
    """Mark the innermost slot loop for ``LoopVectorize`` (it vectorises the staging accesses when they are
    contiguous and aligned along the slot, the rule ``conversion.shared_cost`` charges)."""
    if not isinstance(loops, tirx.For):
        return loops
    if isinstance(loops.body, tirx.For):
        return tirx.For(loops.loop_var, loops.min, loops.extent, loops.kind, _vectorizable(loops.body, key),
                        None, loops.annotations, loops.step)
    notes = {str(k): v for k, v in loops.annotations.items()}
    notes[SLOT_LOOP_KEY] = key
    return tirx.For(loops.loop_var, loops.min, loops.extent, loops.kind, loops.body, None, notes, loops.step)
