"""Numpy oracle for the io-aware statement score: plain enumeration, no CuTe.

The io-aware model (passes/cost_models/statement_score.py) derives a statement's vector width, issue
bytes and 128-byte segment count from the CuTe algebra. This module computes the same four numbers
the slow, obvious way, so the two can be compared on any fragment:

1. tabulate ``(coords..., rep) -> (thread, slot)`` from the fragment's own tables and check that it is
   a bijection onto ``threads x slots`` cells (``bincount`` of ``thread * slots + slot``);
2. invert it into a ``(thread, slot) -> element address`` table (row-major in ``global_shape``, or the
   given ``strides``, plus ``base``);
3. vector width ``V``: the widest power of two <= min(slots, lane bytes / element bytes) dividing
   ``slots`` such that every thread's slots, cut into blocks of ``V``, address ``V`` consecutive
   elements starting at a multiple of ``V``;
4. ``issue = steps * threads * lane bytes`` with ``steps = slots / V`` (idle lanes still issue);
5. segments: per vector step and warp, the distinct ``segment_bytes`` segments touched by the active
   lanes' byte spans ``[addr * eb, (addr + V) * eb - 1]`` (stores: only lanes whose replica is 0),
   summed; ``bandwidth = segments * segment_bytes``.

    python maint/oracle.py          score TileLang's golden fragments as 4-byte loads and stores
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilelayout.expr import row_major_strides

__all__ = ["OracleScore", "Unenumerable", "CellTable", "cell_table", "row_major_strides",
           "address_table", "score_statement_oracle"]


@dataclass(frozen=True)
class OracleScore:
    vector: int
    issue: int
    bandwidth: int
    segments: int

    @property
    def cost(self) -> int:
        return max(self.issue, self.bandwidth)


@dataclass(frozen=True)
class Unenumerable:
    """The statement has no (thread, slot) -> address table to score (the reason says why)."""

    reason: str


@dataclass(frozen=True)
class CellTable:
    """Inverse of a bijective fragment: for each cell ``thread * slots + slot``, its point and replica."""

    threads: int
    slots: int
    shape: tuple
    replicate: int
    point: np.ndarray      # (threads, slots) flat row-major point index
    rep: np.ndarray        # (threads, slots) replica


def cell_table(frag) -> CellTable | Unenumerable:
    """Enumerate the fragment's (point, replica) -> (thread, slot) map and invert it exactly."""
    try:
        threads = np.asarray(frag.thread_table(), dtype=np.int64)
        slot_parts = np.asarray(frag.table(), dtype=np.int64)
    except Exception as err:  # symbolic or too large to tabulate
        return Unenumerable(f"cannot tabulate the fragment: {err}")
    shape = tuple(int(s) for s in threads.shape[:-1])
    R = threads.shape[-1]
    P = int(np.prod(shape, dtype=np.int64))
    threads = threads.reshape(P, R)
    slot_parts = slot_parts.reshape(P, -1)
    if threads.min(initial=0) < 0 or slot_parts.min(initial=0) < 0:
        return Unenumerable("negative thread or slot")
    extents = [int(slot_parts[:, k].max()) + 1 for k in range(slot_parts.shape[1])]
    slot = np.zeros(P, dtype=np.int64)
    for k, ext in enumerate(extents):
        slot = slot * ext + slot_parts[:, k]
    T, S = int(threads.max()) + 1, int(np.prod(extents, dtype=np.int64))
    if P * R != T * S:
        return Unenumerable(f"points x replication {P}x{R} != threads x slots {T}x{S}")
    cells = threads * S + slot[:, None]                       # (P, R)
    counts = np.bincount(cells.reshape(-1), minlength=T * S)
    if (counts != 1).any():
        bad = int(np.argmax(counts != 1))
        return Unenumerable(f"not bijective: cell (thread {bad // S}, slot {bad % S}) holds {int(counts[bad])} "
                            f"elements")
    point = np.empty(T * S, dtype=np.int64)
    rep = np.empty(T * S, dtype=np.int64)
    point[cells.reshape(-1)] = np.repeat(np.arange(P, dtype=np.int64), R)
    rep[cells.reshape(-1)] = np.tile(np.arange(R, dtype=np.int64), P)
    return CellTable(T, S, shape, R, point.reshape(T, S), rep.reshape(T, S))


def address_table(cells: CellTable, strides, base: int = 0) -> np.ndarray:
    """(threads, slots) element addresses: ``base + sum(coord[d] * strides[d])`` of each cell's point."""
    if len(strides) != len(cells.shape):
        raise ValueError(f"{len(strides)} strides for a rank-{len(cells.shape)} fragment")
    coords = np.unravel_index(cells.point, cells.shape)
    addr = np.full(cells.point.shape, int(base), dtype=np.int64)
    for c, st in zip(coords, strides):
        addr += c.astype(np.int64) * int(st)
    return addr


def _vector(addr: np.ndarray, limit: int) -> int:
    T, S = addr.shape
    V = 1
    while V * 2 <= limit:
        V *= 2
    while V > 1:
        if S % V == 0:
            blocks = addr.reshape(T, S // V, V)
            contiguous = (blocks - blocks[..., :1] == np.arange(V, dtype=np.int64)).all()
            aligned = (blocks[..., 0] % V == 0).all()
            if contiguous and aligned:
                return V
        V //= 2
    return 1


def _segments(first: np.ndarray, active: np.ndarray, V: int, elem_bytes: int, warp_size: int,
              segment_bytes: int) -> int:
    """Sum over (step, warp) of the distinct segments the active lanes' byte spans touch."""
    T, steps = first.shape
    lo = first * elem_bytes // segment_bytes
    hi = (first * elem_bytes + V * elem_bytes - 1) // segment_bytes
    warps = -(-T // warp_size)
    group = np.arange(steps, dtype=np.int64)[None, :] * warps + (np.arange(T, dtype=np.int64) // warp_size)[:, None]
    group, lo, hi = (np.broadcast_to(x, (T, steps))[active] for x in (group, lo, hi))
    if lo.size == 0:
        return 0
    count = hi - lo + 1
    offset = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    seg = np.repeat(lo, count) + offset
    seg = seg - seg.min()
    key = np.repeat(group, count) * (int(seg.max()) + 1) + seg
    return int(np.unique(key).size)


def score_statement_oracle(frag, global_shape, elem_bytes: int, is_store: bool, vector_bits: int = 128,
                           warp_size: int = 32, segment_bytes: int = 128, strides=None,
                           base: int = 0) -> OracleScore | Unenumerable:
    """Score one fragment <-> global statement by enumeration (see the module docstring)."""
    cells = cell_table(frag)
    if isinstance(cells, Unenumerable):
        return cells
    if strides is None:
        if global_shape is None or len(global_shape) != len(cells.shape):
            raise ValueError(f"global shape {global_shape} does not match the fragment's rank {len(cells.shape)}")
        strides = row_major_strides(global_shape)
    addr = address_table(cells, strides, base)
    lane_bytes = vector_bits // 8
    V = _vector(addr, min(cells.slots, max(1, lane_bytes // elem_bytes)))
    steps = cells.slots // V
    first = addr[:, ::V]
    if is_store and cells.replicate > 1:
        active = cells.rep[:, ::V] == 0
    else:
        active = np.ones(first.shape, dtype=bool)
    segments = _segments(first, active, V, elem_bytes, warp_size, segment_bytes)
    return OracleScore(V, steps * cells.threads * lane_bytes, segments * segment_bytes, segments)


def _main() -> int:
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from maint.peer.compare import load_peer_output
    from tilelayout import layout_from_dict
    peer = load_peer_output()
    for model, results in peer.items():
        for name, got in sorted(results.items()):
            for section in ("buffers", "loops"):
                for key, d in sorted(got.get(section, {}).items()):
                    if d.get("kind") != "Fragment":
                        continue
                    frag = layout_from_dict(d)
                    for store in (False, True):
                        score = score_statement_oracle(frag, frag.input_shape, 4, store)
                        print(f"{model:15} {name}/{key} {'store' if store else 'load '}: {score}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
