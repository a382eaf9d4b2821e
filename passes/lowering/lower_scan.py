"""Lowering of a lang.cumsum row split over ``L`` lanes of a warp (the layouts ``scan_split`` describes).

Each thread runs row ``tx // L``; its lane ``q = tx % L`` holds positions ``q*c .. q*c + c - 1`` (``c = n / L``).
In scan order lane ``s`` (``q`` forward, ``L - 1 - q`` reversed) covers scan steps ``s*c .. s*c + c - 1``:

1. chunk scan: the lang.cumsum statement for those steps, unrolled; the first step takes the source alone;
2. the chunk totals are scanned over the lanes (Hillis-Steele: log2(L) rounds, each an indexed warp shuffle
   from the lane ``d`` scan steps earlier, which all lanes execute), then one more shuffle from the lane
   one scan step earlier gives the exclusive prefix;
3. lanes after the first add that prefix to their chunk.

Nothing is taken on trust: the loop and fragment layouts must be exactly the split ones, every thread of
the launch takes part, and a layout that only looks split is refused rather than lowered any other way.
"""
from __future__ import annotations

from tvm import tirx

from tilelayout.errors import LoweringError
from tilelayout.layout import substitute

from ..hardware import warp_size
from .from_inference import (CumsumScan, is_split_fragment, is_split_loop, match_cumsum, split_lanes)
from ..ir_utils import int_value

__all__ = ["split_scan_of", "lower_split_scan"]


def split_scan_of(loops: list, layout, frag_layouts: dict) -> tuple[CumsumScan, int] | None:
    """(scan, lanes) when the nest is a lang.cumsum scan whose loop and fragment layouts are the split ones."""
    if layout.replicate_size < 2 or layout.thread_range is None or layout.input_dim != len(loops):
        return None
    scan = match_cumsum([l.loop_var for l in loops], loops[-1].body)
    if scan is None:
        return None
    frag = next((lay for b, lay in frag_layouts.items() if b.same_as(scan.dst)), None)
    if frag is None:
        return None
    lanes, rng = layout.replicate_size, tuple(layout.thread_range)
    extents = [int_value(l.extent) for l in loops]
    shape = [int_value(s) for s in scan.dst.shape]
    if any(e is None for e in extents + shape):
        return None
    if not is_split_loop(layout, extents, lanes, rng):
        return None
    if not is_split_fragment(frag, shape, scan.dim, lanes, rng):
        return None
    return scan, lanes


def _partner(lane, d: int, reverse: bool):
    """The warp lane holding the value ``d`` scan steps earlier (forward scans run up the lanes)."""
    return lane + d if reverse else lane - d


def lower_split_scan(loops: list, scan: CumsumScan, lanes: int, tx, threads: int, key: str):
    """The per-thread statements of the split scan of nest ``key`` (``loops``: its parallel loops)."""
    extents = [int_value(l.extent) for l in loops]
    warp = warp_size()
    if tx is None:
        raise LoweringError(f"loop {key}: a lane-split scan needs a thread launch (threadIdx.x)")
    if split_lanes(scan, extents, threads, warp, (0, threads), threads) != lanes:
        raise LoweringError(f"loop {key}: its layouts split each row over {lanes} lanes, but the launch of {threads} "
                            f"threads cannot run that split scan (every lane of whole warps must take part)")
    chunk, dtype = scan.n // lanes, str(scan.dst.dtype)
    k = scan.loop.loop_var
    row = tirx.floordiv(tx, lanes)
    q = tirx.floormod(tx, lanes)
    s = (lanes - 1 - q) if scan.reverse else q          # the lane's place in scan order
    vmap = {}
    rest = row
    for loop, ext in zip(reversed(loops), reversed(extents)):
        vmap[loop.loop_var] = tirx.floormod(rest, ext) if ext > 1 else tirx.const(0, "int32")
        rest = tirx.floordiv(rest, ext)

    def at(step):
        m = dict(vmap)
        m[k] = step
        return m

    def dst_at(step) -> list:
        return [substitute(i, at(step)) for i in scan.store.indices]

    # the chunk's first step takes the source alone; each later one adds the element one step before (the
    # store's own index at the previous step: lang.cumsum's clamped read index is not needed inside a chunk)
    first = tirx.BufferStore(scan.dst, substitute(scan.cur, at(s * chunk)), dst_at(s * chunk))
    kk = tirx.Var("kk", "int32")
    step = s * chunk + kk
    value = substitute(scan.cur, at(step)) + tirx.BufferLoad(scan.dst, dst_at(step - 1))
    rest = tirx.For(kk, 1, chunk - 1, tirx.ForKind.UNROLLED, tirx.BufferStore(scan.dst, value, dst_at(step)))
    phase1 = tirx.SeqStmt([first, rest]) if chunk > 1 else first

    acc = tirx.decl_buffer([1], dtype, name=f"{scan.dst.name}_scan", scope="local")
    got = tirx.decl_buffer([1], dtype, name=f"{scan.dst.name}_shfl", scope="local")
    z = [tirx.const(0, "int32")]
    last = [substitute(i, at(s * chunk + chunk - 1)) for i in scan.store.indices]
    lane = tirx.floormod(tx, warp)
    stmts = [tirx.AllocBuffer(acc), tirx.AllocBuffer(got), phase1,
             tirx.BufferStore(acc, tirx.BufferLoad(scan.dst, last), z)]

    def shuffle(d: int):
        src = tirx.if_then_else(s >= d, _partner(lane, d, scan.reverse), lane)
        call = tirx.call_intrin(dtype, "tirx.tvm_warp_shuffle", tirx.call_intrin("uint32", "tirx.tvm_warp_activemask"),
                                tirx.BufferLoad(acc, z), src, warp, warp)
        return tirx.BufferStore(got, call, z)

    d = 1
    while d < lanes:                                      # inclusive scan of the chunk totals over the lanes
        stmts.append(shuffle(d))
        stmts.append(tirx.IfThenElse(s >= d, tirx.BufferStore(
            acc, tirx.BufferLoad(acc, z) + tirx.BufferLoad(got, z), z), None))
        d *= 2
    stmts.append(shuffle(1))                              # exclusive prefix: the previous lane's inclusive one
    kk2 = tirx.Var("kk", "int32")
    m2 = at(s * chunk + kk2)
    idx2 = [substitute(i, m2) for i in scan.store.indices]
    add = tirx.BufferStore(scan.dst, tirx.BufferLoad(scan.dst, idx2) + tirx.BufferLoad(got, z), idx2)
    stmts.append(tirx.IfThenElse(s > 0, tirx.For(kk2, 0, chunk, tirx.ForKind.UNROLLED, add), None))
    return tirx.SeqStmt(stmts)
