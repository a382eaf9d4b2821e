"""Warp-shuffle lowering of a layout conversion whose elements all stay inside their warp.

For every destination slot ``s`` and every source slot ``r`` the plan lists for it, each lane offers its
source register ``r`` and reads lane ``holder(element it needs at s) % warp``; a lane keeps the value when its
element sits at source slot ``r``. A slot every lane holds locally is a register move. The shuffle itself is
outside any thread-dependent condition (every lane of the warp takes part), only the stores are guarded.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilelayout.layout import substitute

from .from_inference import shuffle_plan
from .cell_loops import ForCells as _cells
from .loop_partition import LoweringError

__all__ = ["lower_shuffle"]


def _cast(dtype, value):
    return value if str(value.ty) == dtype else tirx.Cast(dtype, value)


def _wide(dtype: str) -> str:
    bits = tvm.DataType(dtype).bits
    if bits >= 32 or dtype in ("float16", "bfloat16"):
        return dtype
    return "float32" if "float" in dtype else "int32"


def _all(conds: list, ana):
    out = None
    for c in conds:
        c = ana.simplify(c)
        if ana.can_prove(c):
            continue
        out = c if out is None else tirx.And(out, c)
    return out


def _flat_slot(cells, values: dict) -> list:
    """Constant slot indices (one per output dim) of flat slot ``s`` of ``cells``' layout."""
    out, s = [], values
    for ext in reversed(cells.slots):
        out.append(s % ext)
        s //= ext
    return list(reversed(out))


def lower_shuffle(conv):
    """The SeqStmt converting ``conv.src`` to ``conv.dst`` by warp shuffles (``conv``: a ``_Conversion``)."""
    plan = shuffle_plan(conv.src, conv.dst, conv.threads, conv.warp)
    if plan is None:
        raise LoweringError(f"{conv.what}: warp shuffles cannot do this conversion")
    tx = conv.tx
    if tx is None:
        raise LoweringError(f"{conv.what}: warp shuffles need a thread launch (threadIdx.x)")
    dst = _cells(conv.dst, tx, conv.threads, conv.what + " (destination)", "d")
    src = _cells(conv.src, tx, conv.threads, conv.what + " (source)", "s")
    wide = _wide(conv.dtype)
    tmp = tirx.decl_buffer([1], wide, name=f"{conv.dst_name}_shfl", scope="local")
    zero = [tirx.const(0, "int32")]
    warp = conv.warp
    stmts = [tirx.AllocBuffer(tmp)]
    for s in sorted(plan):
        dvals = dict(zip(dst.svars, [tirx.const(v, "int32") for v in _flat_slot(dst, s)]))
        coords = [dst.ana.simplify(substitute(c, dvals)) for c in dst.coords[:-1]]
        valid = _all([substitute(g, dvals) for g in dst.guards], dst.ana)
        store_at = coords
        if not plan[s]:
            move = tirx.BufferStore(conv.dst_var, tirx.BufferLoad(conv.src_var, coords), store_at)
            stmts.append(move if valid is None else tirx.IfThenElse(valid, move, None))
            continue
        holder = substitute(conv.src.forward_thread, dict(zip(conv.src.forward_vars, coords)))
        lo = (conv.src.thread_range or (0, 0))[0]
        lane = dst.ana.simplify(tirx.floormod(holder + lo, warp))
        if valid is not None:
            lane = tirx.if_then_else(valid, lane, tirx.floormod(tx, warp))
        needed = [dst.ana.simplify(e) for e in conv.src.forward(*coords)]
        flat_needed = tirx.const(0, "int32")
        for e, ext in zip(needed, conv.src.output_shape):
            flat_needed = flat_needed * int(ext) + e
        for r in plan[s]:
            svals = dict(zip(src.svars, [tirx.const(v, "int32") for v in _flat_slot(src, r)]))
            scoords = [src.ana.simplify(substitute(c, svals)) for c in src.coords[:-1]]
            offered = _cast(wide, tirx.BufferLoad(conv.src_var, scoords))
            svalid = _all([substitute(g, svals) for g in src.guards], src.ana)
            if svalid is not None:
                offered = tirx.if_then_else(svalid, offered, tirx.const(0, wide))
            shfl = tirx.call_intrin(wide, "tirx.tvm_warp_shuffle",
                                    tirx.call_intrin("uint32", "tirx.tvm_warp_activemask"), offered, lane, warp, warp)
            keep = flat_needed == r
            if valid is not None:
                keep = tirx.And(valid, keep)
            stmts.append(tirx.BufferStore(tmp, shfl, zero))
            stmts.append(tirx.IfThenElse(dst.ana.simplify(keep), tirx.BufferStore(
                conv.dst_var, _cast(conv.dtype, tirx.BufferLoad(tmp, zero)), store_at), None))
    return tirx.SeqStmt(stmts)
