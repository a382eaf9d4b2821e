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
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tilelayout.errors import LayoutConflictError, warn_user
from tilelayout.fragment import Fragment

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


def register_count32(layouts: dict, bits_of) -> int:
    """32-bit registers per thread the fragments of ``layouts`` take (``bits_of(name)``: element width)."""
    total = 0
    for name in sorted(layouts):
        lay = layouts[name]
        if isinstance(lay, Fragment) and all(isinstance(s, int) for s in lay.output_shape):
            total += math.ceil(int(np.prod(lay.output_shape)) * bits_of(name) / 32)
    return total


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


def is_noop(src: Fragment, dst: Fragment, threads: int) -> bool:
    """Every thread holding an element in ``dst`` holds it in ``src``."""
    se, st, _, reps = _cells(src, threads)
    de, dt, _, _ = _cells(dst, threads)
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
    se, st, ss, _ = _cells(src, threads)
    de, dt, ds, _ = _cells(dst, threads)
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


def _seats(lanes: np.ndarray, steps: np.ndarray, access_bytes: int, warp: int):
    """Where each access sits in a (phase, step) row of at most 128 bytes' worth of words: (seat, rows), or
    None when some lane has two accesses in one step (never for an injective fragment), a thread id is
    negative, or the rows would be mostly empty. Depends on who accesses when, not on the addresses."""
    if lanes.size == 0 or lanes.min() < 0:
        return None
    per_phase = max(1, min(warp, _WAVEFRONT // max(access_bytes, _BANK_BYTES)))
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
    per_phase = max(1, min(warp, _WAVEFRONT // max(access_bytes, _BANK_BYTES)))
    words = byte_addr // _BANK_BYTES
    # int32 rows sort faster; addresses of a shared tile are far below 2^31
    kind = np.int32 if int(words.max()) + words_per < 2 ** 31 else np.int64
    table = np.full((rows * per_phase, words_per), -1, dtype=kind)
    table[seat] = words[:, None] + np.arange(words_per)[None, :]
    table = np.sort(table.reshape(rows, per_phase * words_per), axis=1)
    new = np.empty(table.shape, dtype=bool)           # a word not seen earlier in its (sorted) row
    new[:, 0] = table[:, 0] >= 0
    new[:, 1:] = table[:, 1:] != table[:, :-1]
    # new words counted per (row, bank); every other entry goes to one extra bin past the end
    bins = np.where(new, np.arange(rows, dtype=np.int64)[:, None] * _BANKS + table % _BANKS, rows * _BANKS)
    per_bank = np.bincount(bins.reshape(-1), minlength=rows * _BANKS + 1)[:-1].reshape(rows, _BANKS)
    return int(per_bank.max(axis=1).sum())


def _wavefronts_sorted(lanes: np.ndarray, steps: np.ndarray, byte_addr: np.ndarray, access_bytes: int,
                       warp: int) -> int:
    """``_wavefronts`` over every distinct (group, word) pair at once (any input; the reference)."""
    if byte_addr.size == 0:
        return 0
    words_per = max(1, access_bytes // _BANK_BYTES)
    per_phase = max(1, min(warp, _WAVEFRONT // max(access_bytes, _BANK_BYTES)))
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


def _vector(side: "_Side", addr, slots_inner: int, elem_bytes: int) -> int:
    """Widest vector (elements, at most 16 bytes, dividing the innermost slot extent) such that every aligned
    group of that many slots of one thread holds consecutive, aligned staging addresses; the lowering's
    slot loop is vectorised by the same rule (contiguous and aligned along the slot). The thread and slot
    half of the test does not depend on the staging tile, so each side answers it once per width."""
    width = max(1, 16 // elem_bytes)
    if width == 1:
        return 1
    e = addr[side.order] // elem_bytes
    while width > 1:
        if slots_inner % width == 0 and side.thread.size % width == 0 and side.slot_groups(width):
            ee = e.reshape(-1, width)
            if (ee == ee[:, :1] + np.arange(width)).all() and (ee[:, 0] % width == 0).all():
                return width
        width //= 2
    return 1


@dataclass
class _Side:
    """The (element, thread, slot) cells one side of a round trip moves (the source: replica 0 of each
    element; the destination: every replica), with their (thread, slot) order; fixed per fragment, shared
    by every padding tried."""

    elem: np.ndarray
    thread: np.ndarray
    slot: np.ndarray
    order: np.ndarray
    _groups: dict = field(default_factory=dict)
    _firsts: dict = field(default_factory=dict)
    _rows: dict = field(default_factory=dict)
    _seated: dict = field(default_factory=dict)

    def firsts(self, v: int) -> tuple:
        """(mask, thread, step) of the cells that start a ``v``-wide vector of their thread's slots."""
        hit = self._firsts.get(v)
        if hit is None:
            mask = self.slot % v == 0
            hit = self._firsts[v] = (mask, self.thread[mask], self.slot[mask] // v)
        return hit

    def row_col(self, cols: int) -> tuple:
        """(row, column) of each cell's element in a row-major tile ``cols`` wide."""
        hit = self._rows.get(cols)
        if hit is None:
            hit = self._rows[cols] = (self.elem // cols, self.elem % cols)
        return hit

    def slot_groups(self, width: int) -> bool:
        """In (thread, slot) order, every run of ``width`` cells is one thread's aligned consecutive slots."""
        hit = self._groups.get(width)
        if hit is None:
            tt = self.thread[self.order].reshape(-1, width)
            ss = self.slot[self.order].reshape(-1, width)
            hit = self._groups[width] = bool((tt == tt[:, :1]).all() and (ss == ss[:, :1] + np.arange(width)).all()
                                             and (ss[:, 0] % width == 0).all())
        return hit


def _side(frag: Fragment, threads: int, stores: bool) -> _Side:
    key = (frag.key, threads, stores)
    hit = _SIDES.get(key)
    if hit is None:
        elem, thread, slot, reps = _cells(frag, threads)
        if stores:
            first = np.zeros(elem.shape, dtype=bool)
            first[::reps] = True                         # replica 0 of each element stores it once
            elem, thread, slot = elem[first], thread[first], slot[first]
        if len(_SIDES) > 1024:
            _SIDES.clear()
        hit = _SIDES[key] = _Side(elem, thread, slot, _thread_slot_order(thread, slot))
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


def _access(side: _Side, addr, row, per: int, slots_inner: int, elem_bytes: int, warp: int):
    """(wavefronts, ideal wavefronts, vector width) of one side of the round trip (``row``: each cell's tile
    row); each round of ``per`` rows issues the slot loop again with only the lanes whose element it stages.
    Who accesses in which step depends on the vector width and the round size, not on the padding: the
    accesses are seated once per (width, round size) of a side."""
    v = _vector(side, addr, slots_inner, elem_bytes)
    first, thread, steps = side.firsts(v)
    key = (v, per, elem_bytes, warp)
    hit = side._seated.get(key)
    if hit is None:
        chunk = row // per
        steps = chunk[first] * (int(steps.max()) + 1) + steps
        hit = side._seated[key] = (steps, _seats(thread, steps, v * elem_bytes, warp),
                                   _ideal(thread, steps, v * elem_bytes, warp))
    steps, seats, ideal = hit
    return (_seated_wavefronts(seats, thread, steps, addr[first], v * elem_bytes, warp), ideal, v)


def chunk_rows(rows: int, stride: int, elem_bytes: int, limit: int = SHARED_STAGE_LIMIT) -> int:
    """Most rows (a divisor of ``rows``) whose staging tile fits ``limit``; 0 when not even one row fits."""
    for k in range(rows, 0, -1):
        if rows % k == 0 and k * stride * elem_bytes <= limit:
            return k
    return 0


def shared_cost(src: Fragment, dst: Fragment, threads: int, warp: int, elem_bytes: int, pad: int) -> ConversionCost:
    """The shared-memory round trip with the staging tile's last dimension padded by ``pad`` elements;
    computed once per (mappings, geometry): choosing the conversion, recording the chosen split and reporting
    the hand-staged alternative all ask for the same round trips."""
    key = (src.key, dst.key, threads, warp, elem_bytes, pad)
    hit = _SHARED.get(key)
    if hit is None:
        if len(_SHARED) > 2048:
            _SHARED.clear()
        hit = _SHARED[key] = _shared_cost(src, dst, threads, warp, elem_bytes, pad)
    return hit


#: shared round trips by (source key, destination key, threads, warp, element bytes, pad)
_SHARED: dict = {}


def _shared_cost(src: Fragment, dst: Fragment, threads: int, warp: int, elem_bytes: int, pad: int) -> ConversionCost:
    shape = [int(s) for s in src.input_shape]
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    stride = cols + pad
    per = chunk_rows(rows, stride, elem_bytes) or rows
    stage = per * stride * elem_bytes
    put, get = _side(src, threads, True), _side(dst, threads, False)

    def addr(side):
        row, col = side.row_col(cols)
        return ((row % per) * stride + col) * elem_bytes, row

    store = _access(put, *addr(put), per, int(src.output_shape[-1]), elem_bytes, warp)
    load = _access(get, *addr(get), per, int(dst.output_shape[-1]), elem_bytes, warp)
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


def conversion_cost(src: Fragment, dst: Fragment, threads: int, warp: int, elem_bytes: int,
                    what: str = "conversion", allow_shuffle: bool = True) -> ConversionCost:
    """The cheapest applicable way to convert ``src`` to ``dst`` (ties: no-op, shuffle, shared)."""
    _check(src, dst, what)
    key = (src.key, dst.key, threads, warp, elem_bytes, allow_shuffle)
    hit = _MEMO.get(key)
    if hit is None:
        if len(_MEMO) > 512:
            _MEMO.clear()
        try:
            hit = _MEMO[key] = (_cheapest(src, dst, threads, warp, elem_bytes, allow_shuffle), None)
        except LayoutConflictError as err:
            hit = _MEMO[key] = (None, str(err))
    if hit[0] is None:
        raise LayoutConflictError(f"{what}: {hit[1]}")
    return hit[0]


def _cheapest(src, dst, threads, warp, elem_bytes, allow_shuffle) -> ConversionCost:
    if is_noop(src, dst, threads):
        return ConversionCost("noop", 0, alternatives={"noop": 0})
    options = []
    count = shuffle_count(src, dst, threads, warp, elem_bytes) if allow_shuffle else None
    if count is not None:
        options.append(ConversionCost("shuffle", count * _WAVEFRONT, shuffles=count))
    for pad in _pads(elem_bytes):
        shared = shared_cost(src, dst, threads, warp, elem_bytes, pad)
        if shared.stage_bytes <= SHARED_STAGE_LIMIT:
            options.append(shared)
    if not options:
        raise LayoutConflictError(f"no conversion applies (elements cross warps and the staging tile needs "
                                  f"{shared_cost(src, dst, threads, warp, elem_bytes, 0).stage_bytes} B of shared "
                                  f"memory, over the {SHARED_STAGE_LIMIT}-byte limit)")
    order = {"shuffle": 0, "shared": 1}
    best = min(options, key=lambda c: (c.mem, order[c.kind], c.pad))
    alternatives = {}
    for c in options:
        alternatives.setdefault(c.kind, c.mem)
        alternatives[c.kind] = min(alternatives[c.kind], c.mem)
    return ConversionCost(**{**best.__dict__, "alternatives": alternatives})


def warn_shared(description: str) -> None:
    warn_user(f"layout conversion through shared memory: {description}", ConversionWarning)
