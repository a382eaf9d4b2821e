"""Fragment -> shared-memory copies as ``stmatrix`` (sm_90 and later).

``stmatrix.sync.aligned.m8n8.x{1,2,4}.shared.b16`` stores up to four 8x8 tiles of 16-bit elements from a
warp's registers in one instruction: lane ``4 r + q`` holds, in register ``m``, elements ``(r, 2q)`` and
``(r, 2q + 1)`` of tile ``m`` (low half first), and lane ``8 m + r`` supplies the shared address of tile
``m``'s row ``r`` (16 contiguous, 16-byte-aligned bytes). A gemm accumulator (mma.sync or wgmma) has exactly
this shape, so an epilogue that stages the result in shared memory (``Tx.copy(C_s, acc)``, fp16 / bf16)
stores four tiles per instruction where the element loop stores one pair of elements.

The decision is taken here, from the layouts inference recorded, by exact enumeration: every 8x8 tile of the
copied region must lie in one warp in the lane pattern above, at one register pair (slots) that is the same
in every lane; every warp must hold the same sequence of slot pairs (the code is one program for all warps);
every row segment must be 16 contiguous, aligned bytes under the shared tile's layout; and the copy must have
no guard (predicate, padding, replicas). Anything else keeps the element loop (``None``).

The stores are fenced by a barrier on both sides: TVM's barrier insertion sees a PTX call's address operand
as a read, so it would neither order the stores after earlier readers of the same bytes (a merged shared
buffer) nor the later readers after the stores.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import tirx

from tilelayout.fragment import Fragment

from ..hardware import sm_version
from ..ir_utils import int_value
from .lower_gemm import pack_elements, physical_offsets, ptx_call
from .loop_partition import invert
from .mma_ptx import dtype_bits
from .tile_values import _cast

__all__ = ["stmatrix_copy", "STMATRIX_MIN_SM"]

#: the first architecture with stmatrix
STMATRIX_MIN_SM = 90
_WARP = 32


@dataclass(frozen=True)
class _Tile:
    """One 8x8 tile of the copied region (region coordinates of its first element) and the two slots its
    lanes keep its even and odd columns in."""

    row: int
    col: int
    slots: tuple


def stmatrix_copy(op, layout: Fragment, dst_layout, tx, threads: int, target, guards: tuple):
    """``op`` (a fragment -> shared ``CopyOp``) as barrier-fenced stmatrix instructions, or None where it does
    not fit (see the module docstring)."""
    plan = _plan(op, layout, dst_layout, threads, target, guards)
    if plan is None:
        return None
    order, warps = plan
    inv, _ = invert(layout, f"fragment {op.src.buffer.name}")
    src, dst = op.src, op.dst
    dst_dtype = str(dst.buffer.dtype)
    lane = tirx.floormod(tx, _WARP)
    warp_base = tirx.floordiv(tx, _WARP) * _WARP
    shape = [int(s) for s in layout.output_shape]

    def slot_coords(slot, thread):
        """Logical source coordinates of ``slot`` (an int or a lane-dependent expression) in ``thread``."""
        digits = [slot] if len(shape) == 1 else _digits(slot, shape)
        return inv.forward(*digits, thread)[:2]

    def value(slot):
        r, c = slot_coords(slot, tx)
        return _cast(dst_dtype, tirx.BufferLoad(src.buffer.var, [r, c]))

    stmts = [_barrier()]
    pos = 0
    while pos < len(order):
        count = 4 if len(order) - pos >= 4 else (2 if len(order) - pos >= 2 else 1)
        group = order[pos:pos + count]
        regs = [pack_elements([value(a), value(b)], dst_dtype) for a, b in group]
        matrix = tirx.floordiv(lane, 8) if count > 1 else tirx.const(0, "int32")
        first = _choose(matrix, [a for a, _ in group])          # the slot of each tile's even columns
        r, c = slot_coords(first, warp_base + 4 * tirx.floormod(lane, 8))
        row = r - int(src.offsets[0]) + int(dst.offsets[0])
        col = c - int(src.offsets[1]) + int(dst.offsets[1])
        ptr = tirx.address_of(tirx.BufferLoad(dst.buffer.var, [row, col]))
        stmts.append(ptx_call(f"stmatrix.sync.aligned.m8n8.x{count}.shared.b16", ptr, *regs))
        pos += count
    stmts.append(_barrier())
    return tirx.SeqStmt(stmts), f"stmatrix: {len(stmts) - 2} instructions per thread over {warps} warps"


def _plan(op, layout: Fragment, dst_layout, threads: int, target, guards: tuple):
    """(slot pairs in instruction order, warp count) when the copy fits stmatrix, else None."""
    src, dst = op.src, op.dst
    if getattr(op, "is_async", False) or any(g is not None and g is not False for g in guards):
        return None
    if target is None or sm_version(target) < STMATRIX_MIN_SM:
        return None
    if not (src.buffer.is_fragment and dst.buffer.is_shared) or dtype_bits(str(dst.buffer.dtype)) != 16:
        return None
    if len(src.buffer.shape) != 2 or len(dst.buffer.shape) != 2 or layout.replicate_size != 1:
        return None
    ext = [int_value(e) for e in src.extents]
    offs = [int_value(o) for o in list(src.offsets) + list(dst.offsets)]
    if None in ext + offs or ext != [int_value(e) for e in dst.extents] or ext[0] % 8 or ext[1] % 8:
        return None
    lo, width = layout.thread_range or (0, threads)
    if lo != 0 or width != threads or threads % _WARP:
        return None
    threads_of = layout.thread_table()[..., 0] + lo
    slots = physical_offsets(_BufferShape(src.buffer.shape), layout)     # the flat register slot of each element
    s0, s1, d0, d1 = offs
    threads_of = threads_of[s0:s0 + ext[0], s1:s1 + ext[1]]
    slots = slots[s0:s0 + ext[0], s1:s1 + ext[1]]
    lanes = 4 * np.arange(8)[:, None] + np.arange(8)[None, :] // 2
    per_warp: dict = {}
    for bi in range(0, ext[0], 8):
        for bj in range(0, ext[1], 8):
            t = threads_of[bi:bi + 8, bj:bj + 8]
            s = slots[bi:bi + 8, bj:bj + 8]
            warp = int(t[0, 0]) // _WARP
            even, odd = s[:, 0::2], s[:, 1::2]
            if (t != warp * _WARP + lanes).any() or (even != even[0, 0]).any() or (odd != odd[0, 0]).any():
                return None
            per_warp.setdefault(warp, []).append(_Tile(bi, bj, (int(even[0, 0]), int(odd[0, 0]))))
    if sorted(per_warp) != list(range(threads // _WARP)):
        return None
    orders = {w: sorted(t.slots for t in tiles) for w, tiles in per_warp.items()}
    order = orders[0]
    if any(o != order for o in orders.values()):
        return None
    phys = physical_offsets(_BufferShape(dst.buffer.shape), dst_layout)
    for tiles in per_warp.values():
        for tile in tiles:
            rows = d0 + tile.row + np.arange(8)
            cols = d1 + tile.col + np.arange(8)
            seg = phys[rows[:, None], cols[None, :]]
            if (seg[:, 0] % 8).any() or (seg != seg[:, :1] + np.arange(8)[None, :]).any():
                return None
    return order, threads // _WARP


class _BufferShape:
    """The one attribute ``physical_offsets`` reads of a buffer (a layout's flat outputs need no more)."""

    def __init__(self, shape):
        self.shape = [int(s) for s in shape]


def _digits(slot, shape: list) -> list:
    """The ``output_shape`` digits of a flat slot (an int or an expression)."""
    out = []
    for s in reversed(shape):
        out.append(tirx.floormod(slot, s) if not isinstance(slot, int) else slot % s)
        slot = tirx.floordiv(slot, s) if not isinstance(slot, int) else slot // s
    return list(reversed(out))


def _choose(index, values: list):
    """``values[index]`` for a lane-dependent ``index``: affine in it when the values are evenly spaced (the
    accumulators' usual case, which keeps the address arithmetic simple), else a select chain."""
    step = values[1] - values[0] if len(values) > 1 else 0
    if all(v == values[0] + k * step for k, v in enumerate(values)):
        return values[0] + index * step if step else tirx.const(values[0], "int32")
    out = tirx.const(values[-1], "int32")
    for k in range(len(values) - 2, -1, -1):
        out = tirx.Select(index == k, tirx.const(values[k], "int32"), out)
    return out


def _barrier():
    return tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))

