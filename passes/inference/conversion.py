"""Layout conversions: what moving a fragment from one layout to another costs, and which way is cheapest.

A conversion ``dst = convert(src)`` gives every thread the elements ``dst``'s layout assigns it, taken from
wherever ``src``'s layout keeps them. Three ways, judged by exact enumeration of both layouts:

- ``noop``: every holder of an element in ``dst`` already holds it in ``src`` (a register move per slot);
- ``shuffle``: every element a thread needs is held by some thread of the same warp; one warp shuffle moves a
  32-bit register of every lane, and lanes of one instruction must all offer the same source slot, so the
  count is, per warp and destination slot, the number of distinct source slots read remotely;
- ``shared``: a round trip through a shared staging tile (one holder stores each element, every holder
  loads it; a barrier before the stores and one between), charged by the 128-byte wavefronts its bank
  conflicts cost; the staging tile's last dimension may be padded to break conflicts.

Costs are in bytes at the wavefront granularity (a shuffle or a conflict-free shared access of one warp moves
128 bytes), the unit the io-aware model charges global segments in: a conversion is never free unless it is a
no-op, so a conflict-free plan wins whenever one exists.

Size (over 800 lines): one job, the price of a conversion; the three ways read the same two enumerated (or
separable) cell tables, share their memo caches (``clear_caches``) and are compared in one chooser, most of the
module being the shared-memory wavefront count those tables feed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tilelayout.errors import LayoutConflictError, warn_user
from tilelayout.fragment import Fragment

from .cost_models.base import register_count32
from .separable_cells import SeparableCells, clear_caches as clear_separable, digit_holders, separable_cells

__all__ = ["ConversionCost", "ConversionWarning", "conversion_cost", "hand_staged_cost",
           "shared_cost", "CONFIG_KEY", "STRICT", "CONVERT", "MODES", "resolve_conflict_mode", "register_count32",
           "SHARED_STAGE_LIMIT"]

#: the key of a conversion's decision in its ``T.tile.copy`` config (prints as a keyword, survives parsing)
CONFIG_KEY = "tilelayout_conversion"
STRICT, CONVERT = "strict", "convert"
MODES = (CONVERT, STRICT)
ENV_VAR = "TILELAYOUT_CONFLICTS"
#: static shared memory one block may take on every CUDA GPU
SHARED_STAGE_LIMIT = 48 * 1024
_WAVEFRONT = 128
_BANKS, _BANK_BYTES = 32, 4


class ConversionWarning(UserWarning):
    """Inference staged a fragment through shared memory (a layout conflict, or an uncoalesced store)."""


def resolve_conflict_mode(mode: str | None = None) -> str:
    """Most specific wins: the argument, then ``layout_config(conflicts=...)``, then $TILELAYOUT_CONFLICTS,
    then ``"convert"``."""
    import os
    from .cost_models import _CONFIG
    for candidate in (mode, _CONFIG.get().get("conflicts"), os.environ.get(ENV_VAR) or None, CONVERT):
        if candidate is not None:
            break
    if candidate not in MODES:
        raise ValueError(f"unknown conflict mode {candidate!r}; valid: {', '.join(MODES)}")
    return candidate


@dataclass(frozen=True)
class ConversionCost:
    """How a conversion is done and what it costs (``mem``: bytes charged to the attempt)."""

    kind: str                      # "noop" | "shuffle" | "shared"
    mem: int
    shuffles: int = 0              # warp shuffle instructions, summed over warps
    stage_bytes: int = 0           # shared staging tile
    chunk_rows: int = 0            # rows staged per round (the whole tile when it fits the shared limit)
    chunks: int = 1
    pad: int = 0                   # elements of padding per staging row
    wavefronts: int = 0            # shared store + load wavefronts
    ideal_wavefronts: int = 0      # the same without bank conflicts
    barriers: int = 0
    vectors: tuple = (1, 1)        # shared store / load vector widths (elements)
    alternatives: dict = field(default_factory=dict, compare=False)   # kind -> mem of every applicable kind

    def describe(self) -> str:
        if self.kind == "noop":
            return "no-op (every thread already holds what it needs): 0 B"
        if self.kind == "shuffle":
            return f"warp shuffles: {self.shuffles} shuffles = {self.mem} B"
        rounds = f" in {self.chunks} rounds of {self.chunk_rows} rows" if self.chunks > 1 else ""
        return (f"shared memory round trip: {self.stage_bytes} B staging tile{rounds} (row pad {self.pad}), vectors "
                f"{self.vectors[0]}/{self.vectors[1]}, {self.wavefronts} wavefronts ({self.ideal_wavefronts} "
                f"without bank conflicts), "
                f"{self.barriers} barriers = {self.mem} B")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "mem": self.mem, "shuffles": self.shuffles, "stage_bytes": self.stage_bytes,
                "chunk_rows": self.chunk_rows,
                "pad": self.pad, "wavefronts": self.wavefronts, "barriers": self.barriers}


def _cells(frag: Fragment, threads: int):
    """(element, thread, flat slot, replicas) of every (element, replica) cell; threads counted from 0. The
    no-op test, the shuffle plan and both sides of a round trip all enumerate the same two fragments: memoised
    by mapping (read-only arrays)."""
    key = (frag.key, threads)
    hit = _CELLS.get(key)
    if hit is None:
        if len(_CELLS) > 256:
            _CELLS.clear()
        elem, thread, slot, reps = _enumerate_cells(frag)
        for a in (elem, thread, slot):
            a.setflags(write=False)
        hit = _CELLS[key] = (elem, thread, slot, reps)
    return hit


#: cells of a fragment by (key, threads)
_CELLS: dict = {}


def _cells_any_order(frag: Fragment, threads: int):
    """``_cells`` in whatever order is cheapest: from the separable grid when the fragment has one (no
    expression is evaluated), else enumerated. For the tests that only look cells up by element."""
    grid = separable_cells(frag)
    if grid is None:
        return _cells(frag, threads)
    return grid.elements(), grid.threads_of_cells(), grid.slots_of_cells(), grid.replicate


def _enumerate_cells(frag: Fragment):
    lo = (frag.thread_range or (0, 0))[0]
    thread = np.asarray(frag.thread_table(), dtype=np.int64) + lo                # (*shape, R)
    tab = np.asarray(frag.table(), dtype=np.int64)                               # (*shape, outputs)
    slot = np.zeros(tab.shape[:-1], dtype=np.int64)
    for k, ext in enumerate(frag.output_shape):
        slot = slot * int(ext) + tab[..., k]
    size = int(np.prod(frag.input_shape))
    reps = thread.shape[-1]
    elem = np.repeat(np.arange(size, dtype=np.int64), reps)
    slot = np.broadcast_to(slot.reshape(size, 1), (size, reps)).reshape(-1)
    return elem, thread.reshape(-1), slot, reps


def _check(src: Fragment, dst: Fragment, what: str) -> None:
    for lay in (src, dst):
        if not isinstance(lay, Fragment) or not lay.is_static:
            raise LayoutConflictError(f"{what}: conversions need static fragment layouts, got {lay!r}")
    if list(src.input_shape) != list(dst.input_shape):
        raise LayoutConflictError(f"{what}: cannot convert between shapes {src.input_shape} and {dst.input_shape}")


def _sampled_holders(src: Fragment, dst: Fragment):
    """(the elements of one cell per thread of ``dst``'s grid, those threads, every thread holding each
    element in ``src``) -- from ``src``'s own grid when it has one and no replicas, else from its thread
    expression at those points -- or None when ``dst`` has no grid. Enough to refute the no-op and shuffle
    tests for a fraction of their price (a conversion worth pricing usually moves every element); what it does
    not refute is tested on every cell."""
    grid = separable_cells(dst)
    if grid is None:
        return None
    key = (src.key, src.thread_range, dst.key, dst.thread_range)
    hit = _SAMPLES.get(key)
    if hit is None:
        if len(_SAMPLES) > 512:
            _SAMPLES.clear()
        hit = _SAMPLES[key] = _sample_holders(src, grid)
    return hit


def _sample_holders(src: Fragment, grid: SeparableCells, source_grid: bool = True) -> tuple:
    """``_sampled_holders`` computed; ``source_grid``: a one-replica source with a grid of its own is looked up
    in it instead of evaluating its thread expression (False: always evaluated; the tests compare both)."""
    from tilelayout.evaluate import evaluate
    from tilelayout.layout import rep_placeholder
    elem = (grid.row_t + grid.row_s[0]) * grid.cols + grid.col_t + grid.col_s[0]
    threads = np.arange(grid.t0, grid.t0 + grid.threads, dtype=np.int64)
    if source_grid:
        # a mixed-radix source answers "who holds element n" from n's digits, for the sampled elements only
        held = digit_holders(src, elem)
        if held is not None:
            return elem, threads, held[:, None]
    own = separable_cells(src) if source_grid and src.replicate_size == 1 else None
    if own is not None:
        # one holder per element: the source's own grid, scattered into an element -> thread table, answers it
        holder = np.empty(own.rows * own.cols, dtype=np.int64)
        holder[own.elements()] = own.threads_of_cells()
        return elem, threads, holder[elem][:, None]
    coords = np.unravel_index(elem, tuple(int(s) for s in src.input_shape))
    env = {v: c[:, None] for v, c in zip(src.forward_vars, coords)}
    env[rep_placeholder()] = np.arange(src.replicate_size, dtype=np.int64)[None, :]
    holders = np.broadcast_to(evaluate(src.forward_thread, env), (elem.size, src.replicate_size))
    lo = (src.thread_range or (0, 0))[0]
    return elem, threads, holders + lo


#: sampled holders by (source key and range, destination key and range): the no-op and shuffle tests share them
_SAMPLES: dict = {}


def is_noop(src: Fragment, dst: Fragment, threads: int) -> bool:
    """Every thread holding an element in ``dst`` holds it in ``src``."""
    sample = _sampled_holders(src, dst)
    if sample is not None and not (sample[2] == sample[1][:, None]).any(axis=1).all():
        return False
    se, st, _, reps = _cells_any_order(src, threads)
    de, dt, _, _ = _cells_any_order(dst, threads)
    if reps == 1:           # one holder per element: a lookup, not an (elements x threads) table
        holder = np.full(int(np.prod(src.input_shape)), -1, dtype=np.int64)
        holder[se] = st
        return bool((holder[de] == dt).all())
    width = int(max(st.max(), dt.max())) + 1
    have = np.zeros((int(np.prod(src.input_shape)), width), dtype=bool)
    have[se, st] = True
    return bool(have[de, dt].all())


def shuffle_plan(src: Fragment, dst: Fragment, threads: int, warp: int) -> dict | None:
    """{destination slot: sorted source slots} the shuffle lowering reads, or None when shuffles cannot do
    the conversion (an element crosses a warp, or the source is replicated: a lane must know which replica
    shares its warp). A slot every lane already holds locally maps to an empty list (register moves)."""
    if src.replicate_size != 1:
        return None
    sample = _sampled_holders(src, dst)
    if sample is not None and (sample[2][:, 0] // warp != sample[1] // warp).any():
        return None
    se, st, ss, _ = _cells_any_order(src, threads)
    de, dt, ds, _ = _cells_any_order(dst, threads)
    size = int(np.prod(src.input_shape))
    holder, slot = np.full(size, -1, dtype=np.int64), np.full(size, -1, dtype=np.int64)
    holder[se], slot[se] = st, ss
    if (holder[de] // warp != dt // warp).any():
        return None
    out = {}
    for s in np.unique(ds):
        at = ds == s
        local = holder[de[at]] == dt[at]
        out[int(s)] = [] if local.all() else sorted(int(r) for r in np.unique(slot[de[at]]))
    return out


def shuffle_count(src: Fragment, dst: Fragment, threads: int, warp: int, elem_bytes: int) -> int | None:
    """Warp shuffles the lowering issues (every warp runs each one), or None when shuffles cannot convert."""
    plan = shuffle_plan(src, dst, threads, warp)
    if plan is None:
        return None
    per_value = max(1, -(-elem_bytes // 4))
    return sum(len(r) for r in plan.values()) * (-(-threads // warp)) * per_value


def _wavefronts(lanes: np.ndarray, steps: np.ndarray, byte_addr: np.ndarray, access_bytes: int, warp: int) -> int:
    """Shared-memory wavefronts of one warp-wide access per (warp, step), each lane moving ``access_bytes``
    from ``byte_addr``: the hardware serves 128 bytes per phase (32 lanes of 4 bytes, 8 lanes of 16 bytes),
    and within a phase the distinct 4-byte words one bank holds take one wavefront each (a word read by
    several lanes is a broadcast)."""
    if byte_addr.size == 0:
        return 0
    return _seated_wavefronts(_seats(lanes, steps, access_bytes, warp), lanes, steps, byte_addr, access_bytes, warp)


def _per_phase(access_bytes: int, warp: int) -> int:
    """Lanes one 128-byte phase serves for accesses of ``access_bytes`` (32 of 4 bytes, 8 of 16 bytes)."""
    return max(1, min(warp, _WAVEFRONT // max(access_bytes, _BANK_BYTES)))


def _seats(lanes: np.ndarray, steps: np.ndarray, access_bytes: int, warp: int):
    """Where each access sits in a (phase, step) row of at most 128 bytes' worth of words: (seat, rows), or
    None when some lane has two accesses in one step (never for an injective fragment), a thread id is
    negative, or the rows would be mostly empty. Depends on who accesses when, not on the addresses."""
    if lanes.size == 0 or lanes.min() < 0:
        return None
    per_phase = _per_phase(access_bytes, warp)
    ids = np.arange(int(lanes.max()) + 1, dtype=np.int64)     # per thread id, then gathered: no per-cell division
    phase = ((ids // warp) * (warp // per_phase) + (ids % warp) // per_phase)[lanes]
    group = phase * (int(steps.max()) + 1) + steps
    seat = group * per_phase + ((ids % warp) % per_phase)[lanes]
    rows = int(group.max()) + 1
    if rows * per_phase > 4 * seat.size + 4096 or np.bincount(seat).max() > 1:
        return None
    return seat, rows


def _seated_wavefronts(seats, lanes, steps, byte_addr: np.ndarray, access_bytes: int, warp: int) -> int:
    """``_wavefronts`` given ``_seats``: the distinct words are found by sorting each short row rather than
    every (group, word) pair of the access (that whole-array count is the fallback without seats)."""
    if byte_addr.size == 0:
        return 0
    if seats is None:
        return _wavefronts_sorted(lanes, steps, byte_addr, access_bytes, warp)
    seat, rows = seats
    words_per = max(1, access_bytes // _BANK_BYTES)
    per_phase = _per_phase(access_bytes, warp)
    words = byte_addr // _BANK_BYTES
    # int32 rows sort faster; addresses of a shared tile are far below 2^31
    kind = np.int32 if int(words.max()) + words_per < 2 ** 31 else np.int64
    first = np.full(rows * per_phase, -1, dtype=kind)       # each seat's first word (a 1-D scatter is cheap)
    first[seat] = words
    return int(_row_wavefronts(first.reshape(rows, per_phase), words_per).sum())


def _one_row_wavefronts(starts: list, words_per: int) -> int:
    """``_row_wavefronts`` of one row given as a list of first words (-1: an empty seat), in plain Python: a
    row has at most 32 seats, fewer than the array calls' own overhead."""
    found = set(starts)
    found.discard(-1)
    if words_per > 1 and any(w % words_per for w in found):
        found = {w + k for w in found for k in range(words_per)}
    # else accesses of ``words_per`` aligned words (or single words): two starts name the same words or
    # disjoint ones, and every bank of an access's aligned group of banks holds as many as its first
    per_bank = [0] * _BANKS
    for w in found:
        per_bank[w % _BANKS] += 1
    return max(per_bank)


def _row_wavefronts(first: np.ndarray, words_per: int) -> np.ndarray:
    """Wavefronts of each row of seats, given each seat's first word (-1: an empty seat) and the words one
    access spans: per row, the most distinct words any one bank holds."""
    rows = first.shape[0]
    if rows == 1:           # one row of at most 32 seats (a class, a uniform side): counted without array calls
        return np.array([_one_row_wavefronts(first[0].tolist(), words_per)], dtype=np.int64)
    if words_per == 1:
        table = first
    else:
        table = first[:, :, None] + np.arange(words_per, dtype=first.dtype)
        table[first < 0] = -1
        table = table.reshape(rows, -1)
    table = np.sort(table, axis=1)
    new = np.empty(table.shape, dtype=bool)           # a word not seen earlier in its (sorted) row
    new[:, 0] = table[:, 0] >= 0
    new[:, 1:] = table[:, 1:] != table[:, :-1]
    # new words counted per (row, bank); every other entry goes to one extra bin past the end
    bins = np.where(new, np.arange(rows, dtype=np.int64)[:, None] * _BANKS + table % _BANKS, rows * _BANKS)
    per_bank = np.bincount(bins.reshape(-1), minlength=rows * _BANKS + 1)[:-1].reshape(rows, _BANKS)
    return per_bank.max(axis=1)


def _same_rows(table: np.ndarray) -> tuple:
    """(a row of each class, class of each row) of the equal rows of an int table: grouped by a fixed
    pseudo-random linear hash of each row, then checked entry by entry (a collision falls back to sorting
    the rows themselves)."""
    width = table.shape[1]
    weights = _HASH_WEIGHTS.get(width)
    if weights is None:
        weights = _HASH_WEIGHTS[width] = np.random.default_rng(width).integers(1, 1 << 31, size=width,
                                                                              dtype=np.int64)
    _, reps, cls = np.unique(table.astype(np.int64) @ weights, return_index=True, return_inverse=True)
    cls = cls.reshape(-1)
    if not (table[reps][cls] == table).all():
        _, reps, cls = np.unique(table, axis=0, return_index=True, return_inverse=True)
        cls = cls.reshape(-1)
    return reps, cls


#: hash weights of ``_same_rows`` by row width (fixed seeds: the same classes in every run)
_HASH_WEIGHTS: dict = {}


class _RowClasses:
    """The rows of seats of one side's access, grouped by shape: two rows are in one class when, seat by seat,
    the second's cells sit a fixed number of tile rows and columns past the first's. Its words are then the
    first's shifted by one amount for every tile stride (when the shift is whole words), and a uniform shift
    only renames the banks, so both rows cost the same wavefronts: each class is counted once per padding."""

    def __init__(self, seats, row: np.ndarray, col: np.ndarray, per_phase: int):
        seat, rows = seats
        tr = np.full(rows * per_phase, -1, dtype=np.int64)
        tc = np.zeros(rows * per_phase, dtype=np.int64)
        tr[seat], tc[seat] = row, col
        tr, tc = tr.reshape(rows, per_phase), tc.reshape(rows, per_phase)
        filled = tr >= 0
        lead = filled.argmax(axis=1)                            # each row's first filled seat
        at = np.arange(rows)
        r0, c0 = np.where(filled[at, lead], tr[at, lead], 0), tc[at, lead]
        shape = np.concatenate([filled, np.where(filled, tr - r0[:, None], 0),
                                np.where(filled, tc - c0[:, None], 0)], axis=1)
        if (shape == shape[0]).all():
            reps, cls = np.zeros(1, dtype=np.int64), np.zeros(rows, dtype=np.int64)
        else:
            reps, cls = _same_rows(shape)
        self.worth = reps.size * 2 <= rows
        self.rows, self.cols, self.filled = tr[reps], tc[reps], filled[reps]
        self.sizes = np.bincount(cls, minlength=reps.size)
        self.shift_rows, self.shift_cols = r0 - r0[reps][cls], c0 - c0[reps][cls]

    def wavefronts(self, stride: int, elem_bytes: int, words_per: int) -> int | None:
        """Every row's wavefronts at tile ``stride``, or None when some row's shift is not whole words."""
        if elem_bytes % _BANK_BYTES and ((self.shift_rows * stride + self.shift_cols) * elem_bytes
                                         % _BANK_BYTES).any():
            return None
        first = np.where(self.filled, (self.rows * stride + self.cols) * elem_bytes // _BANK_BYTES, -1)
        return int(_row_wavefronts(first, words_per) @ self.sizes)


def _wavefronts_sorted(lanes: np.ndarray, steps: np.ndarray, byte_addr: np.ndarray, access_bytes: int,
                       warp: int) -> int:
    """``_wavefronts`` over every distinct (group, word) pair at once (any input; the reference)."""
    if byte_addr.size == 0:
        return 0
    words_per = max(1, access_bytes // _BANK_BYTES)
    per_phase = _per_phase(access_bytes, warp)
    phase = (lanes // warp) * (warp // per_phase) + (lanes % warp) // per_phase
    words = ((byte_addr // _BANK_BYTES)[:, None] + np.arange(words_per)[None, :]).reshape(-1)
    group = np.repeat(phase * (int(steps.max()) + 1) + steps, words_per)
    span = int(words.max()) + 1
    uniq = np.unique(group * span + words)                          # distinct (group, word)
    g, w = uniq // span, uniq % span
    _, g = np.unique(g, return_inverse=True)
    per_bank = np.bincount(g * _BANKS + w % _BANKS, minlength=(int(g.max()) + 1) * _BANKS).reshape(-1, _BANKS)
    return int(per_bank.max(axis=1).sum())


def _ideal(lanes: np.ndarray, steps: np.ndarray, access_bytes: int, warp: int) -> int:
    """Wavefronts of the same accesses without any bank conflict: bytes per (warp, step) over 128."""
    if lanes.size == 0:
        return 0
    count = np.bincount((lanes // warp) * (int(steps.max()) + 1) + steps)
    count = count[count > 0]
    return int((-(-count * access_bytes // _WAVEFRONT)).sum())


def _vector(side: "_Side", stride: int, per: int, cols: int, slots_inner: int, elem_bytes: int) -> int:
    """Widest vector (elements, at most 16 bytes, dividing the innermost slot extent) such that every aligned
    group of that many slots of one thread holds consecutive, aligned staging addresses; the lowering's
    slot loop is vectorised by the same rule (contiguous and aligned along the slot). Only the stride of the
    tile changes between paddings, and the answer depends on it through two facts kept per side and width:
    which stride (if any) keeps a group that crosses a tile row contiguous, and the stride modulo the width."""
    width = max(1, 16 // elem_bytes)
    while width > 1:
        if slots_inner % width == 0 and side.size % width == 0 and side.slot_groups(width):
            only = side.contiguous_stride(width, cols, per)
            if only is not False and (only is None or only == stride) and side.aligned(width, cols, per, stride):
                return width
        width //= 2
    return 1


class _Side:
    """The (element, thread, slot) cells one side of a round trip moves (the source: replica 0 of each
    element; the destination: every replica), sorted by (thread, slot); fixed per fragment, shared
    by every padding tried. A cell's staging address is ``row * stride + col`` elements (``tile``), and only
    ``stride`` changes with the padding: everything else is kept per (tile width, rows per round).

    Built from enumerated cells, or from a fragment's ``SeparableCells`` (``separable``): then the cells are
    made only if a count needs them, and a tile staged in one round answers the vector and row-shape tests
    from the thread and slot parts of its rows and columns (the same answers, T + S numbers instead of T x S)."""

    def __init__(self, elem=None, thread=None, slot=None, separable: SeparableCells | None = None):
        self._elem, self._thread, self._slot = elem, thread, slot
        self.separable = separable
        self._groups: dict = {}
        self._firsts: dict = {}
        self._tiles: dict = {}
        self._vectors: dict = {}
        self._aligned: dict = {}
        self._seated: dict = {}
        self._uniform: dict = {}
        self._grid = False                      # False: not worked out yet

    def _cells(self) -> tuple:
        """(element, thread, slot) arrays, made from the grid the first time a count needs them."""
        if self._elem is None:
            grid = self.separable
            self._elem, self._thread, self._slot = grid.elements(), grid.threads_of_cells(), grid.slots_of_cells()
        return self._elem, self._thread, self._slot

    elem = property(lambda self: self._cells()[0])
    thread = property(lambda self: self._cells()[1])
    slot = property(lambda self: self._cells()[2])

    @property
    def size(self) -> int:
        grid = self.separable
        return grid.threads * grid.slots if grid is not None else int(self.thread.size)

    def whole(self, cols: int, per: int, width: int = 1):
        """The separable grid when the tile is ``cols`` wide and staged in one round of ``per`` rows (the only
        tile its parts describe) and every thread's slots split into ``width``-slot groups, else None."""
        grid = self.separable
        if grid is None or grid.cols != cols or grid.rows != per or grid.slots % width:
            return None
        return grid

    def grid(self) -> tuple | None:
        """(first thread, threads, slots) when the cells are every slot 0..S-1 of every thread t0..t0+T-1, i.e.
        in (thread, slot) order the rows of a T x S table (every unpadded injective fragment), else None."""
        if self._grid is False:
            self._grid = None
            if self.separable is not None:
                self._grid = (self.separable.t0, self.separable.threads, self.separable.slots)
                return self._grid
            n = self.thread.size
            if n:
                t0 = int(self.thread[0])
                threads = int(self.thread[-1]) - t0 + 1
                if threads > 0 and n % threads == 0:
                    slots = n // threads
                    at = np.arange(n, dtype=np.int64)
                    if (self.thread == t0 + at // slots).all() and (self.slot == at % slots).all():
                        self._grid = (t0, threads, slots)
        return self._grid

    def firsts(self, v: int) -> tuple:
        """(cells, thread, step) of the cells that start a ``v``-wide vector of their thread's slots: every
        ``v``-th cell, since ``_vector`` picks only widths whose groups are runs of one thread's slots."""
        hit = self._firsts.get(v)
        if hit is None:
            assert v == 1 or self.slot_groups(v)
            first = slice(None, None, v)
            hit = self._firsts[v] = (first, self.thread[first], self.slot[first] // v)
        return hit

    def tile(self, cols: int, per: int) -> tuple:
        """(row within its round, column, round) of each cell's element in a row-major tile ``cols`` wide
        staged ``per`` rows at a time."""
        key = (cols, per)
        hit = self._tiles.get(key)
        if hit is None:
            row, col = self.elem // cols, self.elem % cols
            hit = self._tiles[key] = (row % per, col, row // per)
        return hit

    def slot_groups(self, width: int) -> bool:
        """In (thread, slot) order, every run of ``width`` cells is one thread's aligned consecutive slots."""
        hit = self._groups.get(width)
        if hit is None and self.grid() is not None:
            hit = self._groups[width] = self.grid()[2] % width == 0     # table rows of S slots split evenly
        if hit is None:
            tt = self.thread.reshape(-1, width)
            ss = self.slot.reshape(-1, width)
            hit = self._groups[width] = bool((tt == tt[:, :1]).all() and (ss == ss[:, :1] + np.arange(width)).all()
                                             and (ss[:, 0] % width == 0).all())
        return hit

    def _grouped(self, width: int, cols: int, per: int) -> tuple:
        """(rows, columns) of the cells in (thread, slot) order, one ``width``-cell group per row; of one
        thread's slots only when the grid is separable (every thread's groups then differ by a shift of all
        their cells, which no test below sees)."""
        grid = self.whole(cols, per, width)
        if grid is not None:
            return grid.row_s.reshape(-1, width), grid.col_s.reshape(-1, width)
        row, col, _ = self.tile(cols, per)
        return row.reshape(-1, width), col.reshape(-1, width)

    def contiguous_stride(self, width: int, cols: int, per: int):
        """For which tile stride every ``width``-cell group (in (thread, slot) order) holds consecutive
        staging addresses: None for every stride, an int for that stride only, False for none. A group's
        k-th cell ``d_row`` rows and ``d_col`` columns past its first is at address offset
        ``d_row * stride + d_col``, which must be k."""
        key = (width, cols, per)
        if key not in self._vectors:
            rr, cc = self._grouped(width, cols, per)
            d_row, d_col = rr - rr[:, :1], cc - cc[:, :1] - np.arange(width)
            if not d_row.any():
                hit = False if d_col.any() else None
            else:
                crossing = d_row != 0
                need = -d_col[crossing]
                step = int(d_row[crossing][0])
                stride = int(need[0]) // step
                # off by a column within a row: no stride mends it
                hit = stride if (stride > 0 and not d_col[~crossing].any()
                                 and (d_row[crossing] * stride == need).all()) else False
            self._vectors[key] = hit
        return self._vectors[key]

    def aligned(self, width: int, cols: int, per: int, stride: int) -> bool:
        """Every ``width``-cell group starts at an address divisible by ``width``; the address
        ``row * stride + col`` modulo ``width`` depends on the stride only modulo ``width``."""
        key = (width, cols, per, stride % width)
        hit = self._aligned.get(key)
        if hit is None:
            m = stride % width
            grid = self.whole(cols, per, width)
            if grid is not None:
                # a group's start is a thread part plus a slot part, both 0 at thread 0 / slot 0: every sum of
                # the two is 0 modulo the width exactly when every part is
                hit = not ((grid.row_t * m + grid.col_t) % width).any() and \
                    not ((grid.row_s[::width] * m + grid.col_s[::width]) % width).any()
            else:
                rr, cc = self._grouped(width, cols, per)
                hit = not ((rr[:, 0] * m + cc[:, 0]) % width).any()
            self._aligned[key] = hit
        return hit


def _side(frag: Fragment, threads: int, stores: bool) -> _Side:
    key = (frag.key, threads, stores)
    hit = _SIDES.get(key)
    if hit is None and (not stores or frag.replicate_size == 1):
        grid = separable_cells(frag)            # a storing side of a replicated fragment is not a whole grid
        if grid is not None:
            if len(_SIDES) > 1024:
                _SIDES.clear()
            hit = _SIDES[key] = _Side(separable=grid)
    if hit is None:
        elem, thread, slot, reps = _cells(frag, threads)
        if stores:
            first = np.zeros(elem.shape, dtype=bool)
            first[::reps] = True                         # replica 0 of each element stores it once
            elem, thread, slot = elem[first], thread[first], slot[first]
        if len(_SIDES) > 1024:
            _SIDES.clear()
        order = _thread_slot_order(thread, slot)
        hit = _SIDES[key] = _Side(elem[order], thread[order], slot[order])
    return hit


#: round-trip sides by (fragment key, threads, storing side)
_SIDES: dict = {}


def _thread_slot_order(thread: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """The permutation sorting cells by (thread, slot): by one bucket pass when no (thread, slot) repeats
    (every injective fragment), else by a stable lexicographic sort."""
    if thread.size == 0 or thread.min() < 0 or slot.min() < 0:
        return np.lexsort((slot, thread))
    key = thread * (int(slot.max()) + 1) + slot
    if int(key.max()) + 1 > 4 * key.size + 4096:
        return np.lexsort((slot, thread))
    where = np.full(int(key.max()) + 1, -1, dtype=np.int64)
    where[key] = np.arange(key.size)
    order = where[where >= 0]
    if order.size != key.size:           # a repeated (thread, slot): ties need the stable sort's order
        return np.lexsort((slot, thread))
    return order


def _access(side: _Side, stride: int, per: int, cols: int, slots_inner: int, elem_bytes: int, warp: int,
            whole: bool = False):
    """(wavefronts, ideal wavefronts, vector width) of one side of the round trip through a tile ``stride``
    elements per row, ``per`` rows per round; each round issues the slot loop again with only the lanes whose
    element it stages. Who accesses in which step depends on the vector width and the round size, not on
    the padding: the accesses are seated once per (width, round size) of a side. ``whole``: the tile is staged
    in one round (then a side whose rows all have one shape is counted from one row, ``_uniform_wavefronts``)."""
    v = _vector(side, stride, per, cols, slots_inner, elem_bytes)
    if whole:
        count = _uniform_wavefronts(side, v, cols, per, stride, elem_bytes, warp)
        if count is not None:
            return count
    key = (v, per, cols, elem_bytes, warp)
    hit = side._seated.get(key)
    if hit is None:
        first, thread, steps = side.firsts(v)
        row, col, chunk = side.tile(cols, per)
        steps = chunk[first] * (int(steps.max()) + 1) + steps
        seats = _seats(thread, steps, v * elem_bytes, warp)
        row, col = row[first], col[first]
        classes = None if seats is None else _RowClasses(seats, row, col, _per_phase(v * elem_bytes, warp))
        hit = side._seated[key] = (thread, steps, seats, _ideal(thread, steps, v * elem_bytes, warp), row, col,
                                   classes)
    thread, steps, seats, ideal, row, col, classes = hit
    access_bytes = v * elem_bytes
    if classes is not None and classes.worth:
        count = classes.wavefronts(stride, elem_bytes, max(1, access_bytes // _BANK_BYTES))
        if count is not None:
            return count, ideal, v
    byte_addr = (row * stride + col) * elem_bytes
    return (_seated_wavefronts(seats, thread, steps, byte_addr, access_bytes, warp), ideal, v)


def _uniform_wavefronts(side: _Side, v: int, cols: int, rows: int, stride: int, elem_bytes: int, warp: int):
    """(wavefronts, ideal, v) of a side staged in one round when its accesses form full (phase, step) rows of
    one shape, else None (the caller seats every access). On a side that is a T x S (thread, slot) table
    with whole warps, the row of phase g and step k holds the accesses of threads g*P .. g*P+P-1 (P lanes per
    128-byte phase) at slot k*v; when every row's cells sit a fixed number of tile rows and columns from
    their row's first cell, the same for every row, and the rows lie whole words apart, each row is the first
    one with its banks renamed, so the side costs (rows) x (the first row's wavefronts). The shape test is
    made once per (side, width); only the word test and one row's count depend on the stride."""
    access_bytes = v * elem_bytes
    key = (v, cols, rows, elem_bytes, warp)
    if key not in side._uniform:
        side._uniform[key] = _uniform_rows(side, v, cols, rows, elem_bytes, warp)
    hit = side._uniform[key]
    if hit is None:
        return None
    row0, col0, shift, count, ideal = hit
    if elem_bytes % _BANK_BYTES and ((shift[0] * stride + shift[1]) * elem_bytes % _BANK_BYTES).any():
        return None
    first = [(r * stride + c) * elem_bytes // _BANK_BYTES for r, c in zip(row0, col0)]
    return _one_row_wavefronts(first, max(1, access_bytes // _BANK_BYTES)) * count, ideal, v


def _uniform_rows(side: _Side, v: int, cols: int, rows: int, elem_bytes: int, warp: int):
    """(first row's tile rows, its columns (lists), (row shift, column shift) of every row, rows, ideal
    wavefronts) for ``_uniform_wavefronts``, or None when the side is not a table of whole warps or its rows differ."""
    grid = side.grid()
    if grid is None:
        return None
    t0, threads, slots = grid
    per_phase = _per_phase(v * elem_bytes, warp)
    if t0 % warp or threads % warp or slots % v or warp % per_phase:
        return None
    shape = (threads // per_phase, per_phase, slots)
    ideal = (threads // warp) * (slots // v) * -(-warp * v * elem_bytes // _WAVEFRONT)
    part = side.whole(cols, rows)
    if part is not None:
        # the row of phase g and step k sits at (thread part of its lane) + (slot part of slot k * v): every
        # row has the first one's shape iff the thread parts of each phase differ from its first lane's alike
        by_row, by_col = part.row_t.reshape(shape[:2]), part.col_t.reshape(shape[:2])
        d_row, d_col = by_row - by_row[:, :1], by_col - by_col[:, :1]
        if not ((d_row == d_row[:1]).all() and (d_col == d_col[:1]).all()):
            return None
        shift = ((by_row[:, :1] - by_row[0, 0]) + (part.row_s[None, ::v] - part.row_s[0]),
                 (by_col[:, :1] - by_col[0, 0]) + (part.col_s[None, ::v] - part.col_s[0]))
        return ((by_row[0] + part.row_s[0]).tolist(), (by_col[0] + part.col_s[0]).tolist(), shift,
                shape[0] * (slots // v), ideal)
    row, col, _ = side.tile(cols, rows)                  # staged in one round: the tile's own rows
    tile_row, tile_col = row.reshape(shape)[:, :, ::v], col.reshape(shape)[:, :, ::v]
    d_row, d_col = tile_row - tile_row[:, :1, :], tile_col - tile_col[:, :1, :]
    if not ((d_row == d_row[:1, :, :1]).all() and (d_col == d_col[:1, :, :1]).all()):
        return None
    shift = (tile_row[:, 0, :] - tile_row[0, 0, 0], tile_col[:, 0, :] - tile_col[0, 0, 0])
    return tile_row[0, :, 0].tolist(), tile_col[0, :, 0].tolist(), shift, shape[0] * (slots // v), ideal


def chunk_rows(rows: int, stride: int, elem_bytes: int, limit: int = SHARED_STAGE_LIMIT) -> int:
    """Most rows (a divisor of ``rows``) whose staging tile fits ``limit``; 0 when not even one row fits."""
    for k in range(rows, 0, -1):
        if rows % k == 0 and k * stride * elem_bytes <= limit:
            return k
    return 0


def shared_cost(src: Fragment, dst: Fragment, threads: int, warp: int, elem_bytes: int, pad: int,
                limit: int = SHARED_STAGE_LIMIT) -> ConversionCost:
    """The shared-memory round trip with the staging tile's last dimension padded by ``pad`` elements, in rounds
    of rows whose tile fits ``limit`` bytes; computed once per (mappings, geometry): choosing the conversion,
    recording the chosen split and reporting the hand-staged alternative all ask for the same round trips."""
    key = (src.key, dst.key, threads, warp, elem_bytes, pad, limit)
    hit = _SHARED.get(key)
    if hit is None:
        if len(_SHARED) > 2048:
            _SHARED.clear()
        hit = _SHARED[key] = _shared_cost(src, dst, threads, warp, elem_bytes, pad, limit)
    return hit


#: shared round trips by (source key, destination key, threads, warp, element bytes, pad)
_SHARED: dict = {}


def _shared_cost(src: Fragment, dst: Fragment, threads: int, warp: int, elem_bytes: int, pad: int,
                 limit: int = SHARED_STAGE_LIMIT) -> ConversionCost:
    shape = [int(s) for s in src.input_shape]
    rows, cols = math.prod(shape[:-1]), shape[-1]
    stride = cols + pad
    per = chunk_rows(rows, stride, elem_bytes, limit) or rows
    stage = per * stride * elem_bytes
    put, get = _side(src, threads, True), _side(dst, threads, False)
    store = _access(put, stride, per, cols, int(src.output_shape[-1]), elem_bytes, warp, per == rows)
    load = _access(get, stride, per, cols, int(dst.output_shape[-1]), elem_bytes, warp, per == rows)
    chunks = rows // per
    return ConversionCost("shared", (store[0] + load[0]) * _WAVEFRONT, stage_bytes=stage, pad=pad,
                          chunk_rows=per, chunks=chunks, wavefronts=store[0] + load[0],
                          ideal_wavefronts=store[1] + load[1], barriers=2 * chunks, vectors=(store[2], load[2]))


def _pads(elem_bytes: int) -> list:
    word = max(1, _BANK_BYTES // elem_bytes)
    return [0, word, 2 * word, 4 * word, 8 * word]


def hand_staged_cost(src: Fragment, dst: Fragment, threads: int, warp: int, elem_bytes: int) -> ConversionCost:
    """What a kernel author restaging by hand pays: a row-major (unpadded) shared tile, store then load."""
    return shared_cost(src, dst, threads, warp, elem_bytes, 0)


_MEMO: dict = {}


def register_walk_error(lay: Fragment) -> str | None:
    """Why ``lay`` has no closed-form inverse (which walking its registers needs), or None; memoised by
    mapping, since conversion planning asks again for every split and every epilogue round."""
    from tilelayout.errors import LayoutError
    if isinstance(lay, Fragment) and lay.inverse_known_to_exist():
        return None             # its constructor proved it (a planned loop's layout, completed to a fragment)
    key = lay.key
    if key not in _WALK:
        if len(_WALK) > 2048:
            _WALK.clear()
        try:
            lay.inverse_with_info(allow_padding=True)
            _WALK[key] = None
        except LayoutError as err:
            _WALK[key] = str(err)
    return _WALK[key]


#: closed-form inverse refusals by fragment key (None: it has one)
_WALK: dict = {}


def clear_caches() -> None:
    """Forget memoised conversion costs (the next inference run is cold)."""
    _WALK.clear()
    _MEMO.clear()
    _CELLS.clear()
    _SHARED.clear()
    _SIDES.clear()
    _SAMPLES.clear()
    clear_separable()


def conversion_cost(src: Fragment, dst: Fragment, threads: int, warp: int, elem_bytes: int,
                    what: str = "conversion", allow_shuffle: bool = True,
                    stage_limit: int = SHARED_STAGE_LIMIT) -> ConversionCost:
    """The cheapest applicable way to convert ``src`` to ``dst`` (ties: no-op, shuffle, shared); a staging tile
    takes at most ``stage_limit`` bytes (what the kernel's own static shared buffers leave of the static limit)."""
    _check(src, dst, what)
    key = (src.key, dst.key, threads, warp, elem_bytes, allow_shuffle, stage_limit)
    hit = _MEMO.get(key)
    if hit is None:
        if len(_MEMO) > 512:
            _MEMO.clear()
        try:
            hit = _MEMO[key] = (_cheapest(src, dst, threads, warp, elem_bytes, allow_shuffle, stage_limit), None)
        except LayoutConflictError as err:
            hit = _MEMO[key] = (None, str(err))
    if hit[0] is None:
        raise LayoutConflictError(f"{what}: {hit[1]}")
    return hit[0]


def _cheapest(src, dst, threads, warp, elem_bytes, allow_shuffle, stage_limit=SHARED_STAGE_LIMIT) -> ConversionCost:
    if is_noop(src, dst, threads):
        return ConversionCost("noop", 0, alternatives={"noop": 0})
    options = []
    count = shuffle_count(src, dst, threads, warp, elem_bytes) if allow_shuffle else None
    if count is not None:
        options.append(ConversionCost("shuffle", count * _WAVEFRONT, shuffles=count))
    for pad in _pads(elem_bytes):
        shared = shared_cost(src, dst, threads, warp, elem_bytes, pad, max(0, stage_limit))
        if shared.stage_bytes <= stage_limit:
            options.append(shared)
    if not options:
        need = shared_cost(src, dst, threads, warp, elem_bytes, 0, max(0, stage_limit)).stage_bytes
        raise LayoutConflictError(f"no conversion applies (elements cross warps and the staging tile needs "
                                  f"{need} B of shared memory, over the {stage_limit}-byte limit)")
    order = {"shuffle": 0, "shared": 1}
    best = min(options, key=lambda c: (c.mem, order[c.kind], c.pad))
    alternatives = {}
    for c in options:
        alternatives.setdefault(c.kind, c.mem)
        alternatives[c.kind] = min(alternatives[c.kind], c.mem)
    return ConversionCost(**{**best.__dict__, "alternatives": alternatives})


def warn_shared(description: str) -> None:
    warn_user(f"layout conversion through shared memory: {description}", ConversionWarning)
