"""Decide, once per pipelined loop, whether its global -> shared tile copies become TMA loads (sm_90a).

A pipelined loop on a target with Hopper's arch-specific features (``sm_90a``) loads its tiles with the Tensor
Memory Accelerator (``cp.async.bulk.tensor``, completion on an mbarrier) when every one of its pipelined copies
can be one. Each copy must be a whole 2-D shared tile filled from a box of a global parameter (the copied region
has extent 1 in every global dimension but two, the last of which is the global's contiguous one), and the
shared tile's inferred layout must be exactly where TMA puts the box: the tile cut into panels of ``W`` columns
(``W * element bytes`` = the swizzle width, 32, 64 or 128 bytes), each panel ``rows x W`` elements stored
row-major one after another, every byte address XOR-swizzled as TMA's swizzle mode of that width does. That is
checked element by element against the layout's table (``_tma_table``), so a layout TMA cannot produce is never
loaded with TMA. The rest of the descriptor rules are the CUDA driver's (``cuTensorMapEncodeTiled``), as apache-tvm
0.27's CUDA tile-primitive backend (``copy_async/tma.py``) states them: box dimensions in [1, 256], an innermost
box of a 16-byte multiple no wider than the swizzle atom, global strides multiples of 16 bytes below 2^40, rank
at most 5.

The decision is recorded in the loop's ``tilelayout.pipeline`` annotation (``mode = "tma"`` and one entry per
TMA-loaded copy under ``"tma"``); copies that do not qualify stay ``cp.async`` in the same loop (the note says which
and why, ``show`` prints it); when none qualifies, the loop stays on ``cp.async``.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx

from tilelayout.expr import free_vars

from ..ir_utils import int_value
from .wgmma_desc import swizzle as swizzle_bytes

__all__ = ["plan_tma", "tma_table", "TMA_SWIZZLES", "TMA_DTYPES"]

#: swizzle width in bytes (0: none, a row-major tile) -> CUtensorMapSwizzle enum value
TMA_SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
#: element types a tensor map describes (the driver's CUtensorMapDataType)
TMA_DTYPES = ("int8", "uint8", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
              "bfloat16", "float8_e4m3fn", "float8_e5m2")


def tma_table(rows: int, cols: int, ebytes: int, width: int) -> np.ndarray | None:
    """Element offset (from the tile's base) at which TMA places element (r, c) of a ``rows x cols`` tile loaded
    as panels of ``width`` bytes with the ``width``-byte swizzle; None when the columns do not split into panels."""
    panel = width // ebytes
    if panel == 0 or cols % panel:
        return None
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    byte = (c // panel) * rows * width + (r * panel + c % panel) * ebytes
    return swizzle_bytes(byte, width) // ebytes


def _bits(dtype: str) -> int:
    import tvm
    return tvm.DataType(dtype).bits


def plan_tma(func, copies: list, guarded: bool, uniform: list, loop) -> tuple[list | None, str]:
    """(one TMA entry per copy that can be a TMA load, why the others cannot ("" when all can)); (None, why)
    when none can."""
    if guarded:
        return None, "a pipelined copy sits under an if (TMA issues are unconditional here)"
    from .loop_partition import buffer_layouts
    layouts = buffer_layouts(func)
    entries, refused = [], []
    for op in copies:
        if sum(1 for o in copies if o.dst.buffer is op.dst.buffer) > 1:
            entry, why = None, f"{op.dst.buffer.name} is filled by several copies"
        else:
            entry, why = _plan_copy(op, layouts, uniform, loop, func.params)
        if entry is None:
            refused.append(f"{op.describe()}: {why}")
        else:
            entries.append(entry)
    return (entries or None), "; ".join(refused)


def _plan_copy(op, layouts: dict, uniform: list, loop, params) -> tuple[dict | None, str]:
    dst, src = op.dst, op.src
    tile, glob = dst.buffer, src.buffer
    dtype = tile.dtype
    if not any(p.same_as(glob.var) for p in params):
        return None, f"{glob.name} is a view, not a parameter (the host encodes tensor maps of parameters)"
    if glob.dtype != dtype:
        return None, f"it converts {glob.dtype} to {dtype} (TMA copies bytes)"
    if dtype not in TMA_DTYPES:
        return None, f"TMA has no tensor-map type for {dtype}"
    if not dst.is_full or tile.rank != 2:
        return None, "it fills part of its shared tile, or a tile that is not 2-D"
    rows, cols = (int_value(s) for s in tile.shape)
    gshape = [int_value(s) for s in glob.shape]
    if any(s is None for s in gshape):
        return None, f"{glob.name} has a symbolic shape"
    if not 2 <= len(gshape) <= 5:
        return None, f"{glob.name} has rank {len(gshape)} (a tensor map has 1 to 5 dimensions)"
    ext = [int_value(e) for e in src.extents]
    big = [d for d, e in enumerate(ext) if e != 1]
    if len(big) != 2 or big[1] != len(gshape) - 1 or [ext[d] for d in big] != [rows, cols]:
        return None, (f"its region of {glob.name} is not a {rows}x{cols} box whose columns run along "
                      f"{glob.name}'s last (contiguous) dimension")
    allowed = list(uniform) + [loop.loop_var]
    for o in src.offsets:
        stray = [v for v in free_vars(o) if not any(v.same_as(u) for u in allowed)]
        if stray:
            return None, f"its offset {o} depends on {stray[0]}, which is not uniform over the block"
    ebytes = _bits(dtype) // 8
    strides, acc = [], ebytes
    for s in reversed(gshape[1:]):
        acc *= s
        strides.append(acc)          # byte strides of dims N-2 .. 0 (CUDA order: dimension 1 first)
    if any(s % 16 or s >= (1 << 40) for s in strides):
        return None, f"a row stride of {glob.name} ({strides}) is not a multiple of 16 bytes"
    layout = layouts.get(tile.name)
    if layout is None:
        return None, f"{tile.name} is row-major (no swizzle), which no TMA swizzle mode writes"
    table = layout._linear_table() if getattr(layout, "is_static", False) else None
    if table is None:
        return None, f"{tile.name}'s layout has no static table"
    table = np.asarray(table).reshape(rows, cols)
    for width in (128, 64, 32):
        want = tma_table(rows, cols, ebytes, width)
        if want is None or not np.array_equal(want, table):
            continue
        panel = width // ebytes
        if rows > 256 or panel > 256:
            return None, f"its box {panel}x{rows} exceeds TMA's 256 elements per dimension"
        box = [1] * len(gshape)
        box[big[0]], box[-1] = rows, panel
        return {"buffer": tile.name, "global": glob.name, "swizzle": width, "panel": panel, "panels": cols // panel,
                "rows": rows, "box": list(reversed(box)), "bytes": rows * cols * ebytes,
                "start": list(src.offsets)}, ""
    return None, (f"{tile.name}'s inferred layout is not a TMA swizzle (32B, 64B or 128B panels of "
                  f"{rows} rows)")
