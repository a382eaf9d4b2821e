"""Score one fragment<->global statement with the CuTe algebra (TileLang's symbolic io-aware scorer).

The fragment is packed as ``(coords..., rep) -> [thread, slot]`` (cell = thread * slots + slot),
converted to a CuTe layout, right-inverted (cell -> logical point) and composed with the global
address layout, so ``A(cell)`` is the element address a (thread, slot) cell touches. Vector width is
read off the coalesced slot and thread modes; bandwidth counts the distinct 128-byte segments each
warp touches per vector step. ``maint/oracle.py`` computes the same four numbers by plain enumeration.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...hardware import SEGMENT_BYTES


@dataclass(frozen=True)
class GlobalAccess:
    """Element address ``base + sum(coord[d] * strides[d])`` of one access, over the statement's domain."""

    name: str
    strides: tuple
    base: int
    elem_bytes: int
    is_store: bool


@dataclass(frozen=True)
class StatementScore:
    vector: int
    issue: int
    bandwidth: int
    segments: int

    @property
    def cost(self) -> int:
        return max(self.issue, self.bandwidth)


@dataclass(frozen=True)
class Unconvertible:
    reason: str


@dataclass
class CuteStatement:
    """Everything needed to score: threads x slots cells, the cell -> point map, addresses."""

    threads: int
    slots: int
    points: int
    replicate: int
    inverse: object                    # cute Layout: cell -> n = row-major(coords) * R + rep
    addresses: list = field(default_factory=list)   # per access: (slot modes, thread modes, address layout)


def _flat_modes(layout) -> list:
    from tilelayout.cute import coalesce, flatten
    lay = coalesce(layout)
    shapes, strides = flatten(lay.shape), flatten(lay.stride)
    if not isinstance(shapes, tuple):
        shapes, strides = (shapes,), (strides,)
    return [(int(s), int(d)) for s, d in zip(shapes, strides)]


def flat_packed_table(frag) -> np.ndarray:
    """The packed fragment over its flattened domain, n = row-major(coords) * R + rep (rep fastest) ->
    cell = thread * slots + slot, from the fragment's exact (cached) tables. Flattening first lets
    layouts whose modes straddle coordinate boundaries (thread ``(_i * 640 + _j // 4) % 256`` on 2x2560)
    convert, which per-axis probing cannot."""
    threads = np.asarray(frag.thread_table(), dtype=np.int64)          # (*shape, R)
    slots = np.asarray(frag.table(), dtype=np.int64)                   # (*shape, outputs)
    slot = np.zeros(slots.shape[:-1], dtype=np.int64)
    for k, ext in enumerate(frag.output_shape):
        slot = slot * int(ext) + slots[..., k]
    cells = threads * int(np.prod(frag.output_shape)) + slot[..., None]
    return cells.reshape(-1)


def prepare_cute(frag, accesses) -> CuteStatement | Unconvertible:
    """Pack, convert, invert and compose; Unconvertible(reason) whenever any step is not exact."""
    from tilelayout import cute
    if not frag.is_static or not all(isinstance(s, int) for s in frag.output_shape):
        return Unconvertible("symbolic extents")
    points = int(np.prod(frag.input_shape))
    R, T = frag.replicate_size, int(frag.thread_extent)
    S = int(np.prod(frag.output_shape))
    if points * R != T * S:
        return Unconvertible(f"points x replication {points}x{R} != threads x slots {T}x{S}")
    flat = cute.layout_from_table(flat_packed_table(frag))
    if flat is None:
        return Unconvertible("packed fragment is not a strided CuTe layout")
    try:
        inv = cute.right_inverse(flat)
    except cute.CuteError as err:
        return Unconvertible(f"right_inverse failed: {err}")
    if cute.size(inv) != T * S:
        return Unconvertible("packed fragment is not injective (right inverse is partial)")
    out = CuteStatement(T, S, points, R, inv)
    shape = (R,) + tuple(int(s) for s in reversed(frag.input_shape))
    for acc in accesses:
        glayout = cute.Layout(shape, (0,) + tuple(int(d) for d in reversed(acc.strides)))
        try:
            addr = cute.composition(glayout, inv)
            split = cute.with_shape(addr, (S, T))
            slot_modes, thread_modes = _flat_modes(split[0]), _flat_modes(split[1])
        except cute.CuteError as err:
            return Unconvertible(f"address composition failed: {err}")
        out.addresses.append((slot_modes, thread_modes, addr))
    return out


def vector_width(slots: int, modes: list, accesses, vector_bits: int, max_lanes: int | None = None) -> int:
    """Widest power of two <= min(slots, lane bytes / element bytes, ``max_lanes``) that every access keeps
    contiguous (innermost slot mode stride 1) and aligned (every other stride and the base divisible).
    ``max_lanes`` is the statement's cap from ``hardware.vector_lanes_limit`` (its widest element, register
    side included), so the width scored is the width the vectorizer emits."""
    lane_bytes = vector_bits // 8
    limit = min([slots] + [max(1, lane_bytes // a.elem_bytes) for a in accesses] +
                ([max_lanes] if max_lanes is not None else []))
    for cand in (32, 16, 8, 4, 2):
        if cand > limit or slots % cand:
            continue
        ok = True
        for (slot_modes, thread_modes, _), acc in zip(modes, accesses):
            inner = next(((s, d) for s, d in slot_modes if s > 1), (1, 1))
            if inner[1] != 1 or inner[0] % cand or acc.base % cand:
                ok = False
            rest = [d for s, d in slot_modes if s > 1][1:] + [d for s, d in thread_modes if s > 1]
            if any(d % cand for d in rest if d != 0):
                ok = False
        if ok:
            return cand
    return 1


def score_cute(frag, accesses, repeat: int = 1, vector_bits: int = 128, warp_size: int = 32,
               segment_bytes: int = SEGMENT_BYTES, max_lanes: int | None = None):
    """[StatementScore per access] or Unconvertible(reason)."""
    from tilelayout.cute.algebra import values
    prep = prepare_cute(frag, accesses)
    if isinstance(prep, Unconvertible):
        return prep
    T, S = prep.threads, prep.slots
    V = vector_width(S, prep.addresses, accesses, vector_bits, max_lanes)
    steps = S // V
    cells = (np.arange(T, dtype=np.int64)[:, None] * S + np.arange(steps, dtype=np.int64)[None, :] * V)
    replica = values(prep.inverse, cells.reshape(-1)).reshape(T, steps) % prep.replicate
    out = []
    for (slot_modes, thread_modes, addr), acc in zip(prep.addresses, accesses):
        issue = steps * repeat * T * (vector_bits // 8)
        first = values(addr, cells.reshape(-1)).reshape(T, steps) + acc.base
        active = (replica == 0) if (acc.is_store and prep.replicate > 1) else np.ones_like(first, dtype=bool)
        segments = count_segments(first, V, acc.elem_bytes, active, warp_size, segment_bytes)
        out.append(StatementScore(V, issue, repeat * segments * segment_bytes, segments))
    return out


def count_segments(first: np.ndarray, vector: int, elem_bytes: int, active: np.ndarray, warp_size: int,
                   segment_bytes: int) -> int:
    """Distinct segments per (step, warp), summed: ``first`` is (threads, steps) element addresses."""
    seg_elems = max(1, segment_bytes // elem_bytes)
    T, steps = first.shape
    warp = (np.arange(T)[:, None] // warp_size) * np.ones((1, steps), dtype=np.int64)
    step = np.ones((T, 1), dtype=np.int64) * np.arange(steps)[None, :]
    lo, hi = first // seg_elems, (first + vector - 1) // seg_elems
    keys = []
    span = int((hi - lo).max(initial=0))
    for extra in range(span + 1):
        seg = lo + extra
        keep = active & (seg <= hi)
        keys.append(np.stack([step[keep], warp[keep], seg[keep]], axis=1))
    allk = np.concatenate(keys) if keys else np.zeros((0, 3), dtype=np.int64)
    if allk.size == 0:
        return 0
    # one int64 key per (step, warp, segment): np.unique(axis=0) sorts rows lexicographically and is ~50x slower
    seg = allk[:, 2] - allk[:, 2].min()
    warps = int(allk[:, 1].max()) + 1
    flat = (allk[:, 0] * warps + allk[:, 1]) * (int(seg.max()) + 1) + seg
    return int(np.unique(flat).size)
