"""Shared -> global tile copies as TMA stores (sm_90a).

An epilogue that stages its result in shared memory (``Tx.copy(C_s, acc)`` then ``Tx.copy(C[...], C_s)``) stores
the tile with one ``cp.async.bulk.tensor`` from one thread where the element loop has every thread issue 16-byte
global stores: TileLang's Hopper gemm does the same. The decision is taken here, from the recorded layouts, for
a copy of a whole 2-D shared tile into a box of a global parameter:

- the box: the copied region has extent 1 in every global dimension but two, the last of which is the global's
  contiguous one, and equals the tile's ``rows x cols``; the offsets are the same for every thread of the block;
  the global has a constant shape and 16-byte multiple row strides (``cuTensorMapEncodeTiled``'s rules, as for
  the loads, ``tma_plan``);
- where TMA reads the box: a tile with no layout is row-major, which TMA reads with no swizzle as one box of
  ``cols`` columns (at most 256, a 16-byte multiple); a tile with an inferred TMA swizzle layout (checked element
  by element against ``tma_table``) is read as panels of the swizzle's width;
- the copy has no guard, and runs on the whole block (a barrier orders it).

Schedule: ``fence.proxy.async.shared::cta`` by every thread (their generic-proxy writes of the tile become
visible to the async proxy), a block barrier, then thread 0 issues one store per panel, commits the bulk group
and waits until the stores have read the tile (``cp.async.bulk.wait_group.read 0``); a second barrier keeps any
later write of the tile's bytes behind that wait. Elements of the box outside the global are not written (TMA
clips them), which is what the bounds guards of the element loop would do. The host encodes the tensor map as
for a load (``tma._tensor_map``).
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import tirx

from tilelayout.expr import free_vars

from ..ir_utils import int_value
from .lower_gemm import ptx_call
from .tma_plan import TMA_DTYPES, tma_table

__all__ = ["tma_store_copy", "TMA_STORE"]

#: the PTX of one TMA store from this CTA's shared memory (the rank is filled in)
TMA_STORE = "cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group"


def tma_store_copy(op, loop_layout, src_layout, tx, threads: int, params: list, guards: tuple):
    """(statement, host statements, report text) storing ``op`` (a shared -> global ``CopyOp``) by TMA, or None
    where it does not fit (module docstring)."""
    predicate, padding, replicas = guards
    if tx is None or predicate is not None or padding or replicas:
        return None
    span = getattr(loop_layout, "thread_range", None)
    if span is not None and tuple(span) != (0, threads):
        return None
    entry = _plan(op, src_layout, params, tx)
    if entry is None:
        return None
    from .tma import _tensor_map
    glob = next(p for p in params if p.same_as(op.dst.buffer.var))
    label = op.describe()
    tmap, host = _tensor_map(entry, glob, label)
    tile = op.src.buffer.var
    rank = len(entry["box"])
    stores = []
    for p in range(entry["panels"]):
        coords = list(reversed(entry["start"]))
        coords[0] = coords[0] + p * entry["panel"]
        coords = [c if str(c.ty) == "int32" else tirx.Cast("int32", c) for c in coords]
        # panel p starts at element (0, p * panel): physical offset p * rows * panel under either read pattern
        first = tirx.address_of(tirx.BufferLoad(tile, [tirx.const(0, "int32"), tirx.const(p * entry["panel"], "int32")]))
        stores.append(ptx_call(TMA_STORE.format(rank=rank), tirx.address_of(tmap), *coords, first))
    issue = tirx.IfThenElse(tx == 0, tirx.SeqStmt(stores + [ptx_call("cp.async.bulk.commit_group"),
                                                            ptx_call("cp.async.bulk.wait_group.read", 0)]), None)
    sync = tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))
    stmt = tirx.SeqStmt([ptx_call("fence.proxy.async.shared::cta"), sync, issue,
                         tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))])
    swz = f"{entry['swizzle']}B swizzle" if entry["swizzle"] else "no swizzle"
    text = (f"TMA store of {op.src.buffer.name} into {glob.name}: {entry['panels']} x cp.async.bulk.tensor.{rank}d "
            f"of {entry['rows']}x{entry['panel']} ({swz}) by thread 0, after fence.proxy.async and a barrier")
    return stmt, host, text


def _plan(op, layout, params: list, tx) -> dict | None:
    src, dst = op.src, op.dst
    tile, glob = src.buffer, dst.buffer
    dtype = str(tile.dtype)
    if not tile.is_shared or not any(p.same_as(glob.var) for p in params):
        return None
    if str(glob.dtype) != dtype or dtype not in TMA_DTYPES or not src.is_full or tile.rank != 2:
        return None
    rows, cols = (int_value(s) for s in tile.shape)
    gshape = [int_value(s) for s in glob.shape]
    if rows is None or cols is None or any(s is None for s in gshape) or not 2 <= len(gshape) <= 5:
        return None
    ext = [int_value(e) for e in dst.extents]
    big = [d for d, e in enumerate(ext) if e != 1]
    if len(big) != 2 or big[1] != len(gshape) - 1 or [ext[d] for d in big] != [rows, cols]:
        return None
    if any(any(v.same_as(tx) for v in free_vars(o)) for o in dst.offsets):
        return None
    ebytes = tvm.DataType(dtype).bits // 8
    acc = ebytes
    for s in reversed(gshape[1:]):
        acc *= s
        if acc % 16 or acc >= (1 << 40):
            return None
    width, panel = _read_pattern(layout, rows, cols, ebytes)
    if panel is None or rows > 256 or panel > 256:
        return None
    box = [1] * len(gshape)
    box[big[0]], box[-1] = rows, panel
    return {"buffer": tile.name, "global": glob.name, "swizzle": width, "panel": panel, "panels": cols // panel,
            "rows": rows, "box": list(reversed(box)), "start": list(dst.offsets)}


def _read_pattern(layout, rows: int, cols: int, ebytes: int) -> tuple:
    """(swizzle width in bytes, 0 for none; panel columns) under which TMA reads the tile as its layout stores
    it, or (0, None)."""
    if layout is None:      # row-major: one box, no swizzle
        ok = cols * ebytes % 16 == 0
        return 0, (cols if ok else None)
    table = layout._linear_table() if getattr(layout, "is_static", False) else None
    if table is None:
        return 0, None
    table = np.asarray(table).reshape(rows, cols)
    for width in (128, 64, 32):
        want = tma_table(rows, cols, ebytes, width)
        if want is not None and np.array_equal(want, table):
            return width, width // ebytes
    return 0, None
