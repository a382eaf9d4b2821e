"""Score one fragment<->global statement with the CuTe algebra (TileLang's symbolic io-aware scorer).

The fragment is packed as ``(coords..., rep) -> [thread, slot]`` (cell = thread * slots + slot),
converted to a CuTe layout, right-inverted (cell -> logical point) and composed with the global
address layout, so ``A(cell)`` is the element address a (thread, slot) cell touches. Vector width is
read off the coalesced slot and thread modes; bandwidth counts the distinct 128-byte segments each
warp touches per vector step. ``maint/oracle.py`` computes the same four numbers by plain enumeration.
"""
from __future__ import annotations

import math
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
    cells = threads * int(math.prod(frag.output_shape)) + slot[..., None]
    return cells.reshape(-1)


def symbolic_flat_layout(frag):
    """The CuTe layout ``flat_packed_table`` would fit, derived without enumerating: the packed map over the
    flattened domain is normalised by TVM's iter-map rewriting (an exact rewrite of the expression over the
    domain) into splits ``(n // lower) % extent * scale`` of the flat index; splits that tile the domain are
    the modes, merged where a stride continues the previous mode (as the table fit merges linear runs).
    None when the rewrite leaves anything unexplained (then the caller enumerates)."""
    from tilelayout.cute.convert import _assemble
    merged = symbolic_flat_modes(frag)
    return None if merged is None else _assemble([merged], int)


def _offset_under_division(expr) -> bool:
    """Whether a floordiv / floormod in ``expr`` divides a sum with a constant term (``(_j + 1) % 32``).
    apache-tvm 0.27's iter-map normalisation drops such offsets (``(n + 1) % 32`` comes back as ``n % 32``, a
    rotation read as the identity), so the rewrite is not taken for them (the caller enumerates)."""
    from tvm import tirx
    from tilelayout.ir_walk import walk_typed
    found = []

    def on_division(node):
        terms = [node.a]                 # the sum under the division, through products and nested sums
        while terms:
            x = terms.pop()
            if type(x) in (tirx.Add, tirx.Sub):
                if any(type(o) is tirx.IntImm and int(o.value) != 0 for o in (x.a, x.b)):
                    found.append(node)
                    return
                terms += [x.a, x.b]
            elif type(x) is tirx.Mul:
                terms += [x.a, x.b]

    walk_typed(expr, [((tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod), on_division)])
    return bool(found)


def symbolic_flat_modes(frag) -> list | None:
    """``symbolic_flat_layout`` as its flat (extent, stride) mode list ([(1, 0)] for a constant map); None
    when the rewrite leaves anything unexplained, the domain has a single cell, or an expression divides an
    offset sum (``_offset_under_division``)."""
    from tvm import sym, tirx
    from tvm.ir import Range
    from tilelayout.layout import rep_placeholder, substitute
    if any(_offset_under_division(e) for e in [frag.forward_thread, *frag.forward_index]):
        return None
    try:
        shape = [int(s) for s in frag.input_shape]
        outs = [int(s) for s in frag.output_shape]
    except (TypeError, ValueError):
        return None
    reps = int(frag.replicate_size)
    total = int(math.prod(shape)) * reps
    n = tirx.Var("n", "int32")
    coords, stride = [], reps
    for ext in reversed(shape):
        coords.append(tirx.floormod(tirx.floordiv(n, stride), ext))
        stride *= ext
    vmap = dict(zip(frag.forward_vars, reversed(coords)))
    vmap[rep_placeholder()] = tirx.floormod(n, reps)
    slot = tirx.const(0, "int32")
    for e, ext in zip(frag.forward_index, outs):
        slot = slot * ext + substitute(e, vmap)
    cell = substitute(frag.forward_thread, vmap) * int(math.prod(outs)) + slot
    try:
        norm = sym.normalize_to_iter_sum(cell, {n: Range(0, total)})
    except Exception:  # noqa: BLE001 - no rewrite: enumerate instead
        return None
    if type(norm.base).__name__ != "IntImm" or int(norm.base.value) != 0:
        return None
    splits = []
    for split in norm.args:
        if not (isinstance(split.source.source, tirx.Var) and split.source.source.same_as(n)):
            return None
        if any(type(x).__name__ != "IntImm" for x in (split.lower_factor, split.extent, split.scale)):
            return None
        splits.append((int(split.lower_factor), int(split.extent), int(split.scale)))
    modes, covered = [], 1
    for lower, ext, scale in sorted(splits):
        if lower < covered or lower % covered:
            return None                              # overlapping digits: not a strided layout
        if lower > covered:
            modes.append((lower // covered, 0))      # digits the map ignores
        modes.append((ext, scale))
        covered = lower * ext
    if covered < total:
        if total % covered:
            return None
        modes.append((total // covered, 0))
    elif covered > total:
        return None
    merged = []
    for ext, scale in modes:
        if ext == 1:
            continue
        if merged and scale == merged[-1][0] * merged[-1][1]:
            merged[-1] = (merged[-1][0] * ext, merged[-1][1])
        else:
            merged.append((ext, scale))
    return (merged or [(1, 0)]) if total > 1 else None


#: cell -> point inverses by fragment key (a key identifies the mapping, so entries never go stale)
_INVERSES: dict = {}


#: io-aware statement costs by content (filled and read by ``io_aware.score_statement``)
STATEMENT_COSTS: dict = {}


def clear_caches() -> None:
    _INVERSES.clear()
    _ADDRESSES.clear()
    STATEMENT_COSTS.clear()


def packed_inverse(frag, cells: int):
    """The right inverse (cell -> point) of the packed fragment, or Unconvertible(reason); computed once per
    fragment mapping, since every statement and attempt over the same fragment needs the same one."""
    from tilelayout import cute
    hit = _INVERSES.get(frag.key)
    if hit is not None:
        return hit
    from tilelayout.cute.algebra import _from_lists, coalesce_modes, right_inverse_modes
    digits = frag.cell_digits()
    if digits is not None and int(math.prod(e for e, _ in digits)) == cells:
        # the constructor recorded the inverse itself (cell -> n as digits): coalesced, it is the mode list the
        # rewrite below finds and inverts (tests compare the two on every constructor's fragments)
        modes = coalesce_modes(list(digits))
        out = _from_lists([e for e, _ in modes], [d for _, d in modes])
        _INVERSES[frag.key] = out
        return out
    modes = symbolic_flat_modes(frag)
    if modes is None:
        flat = cute.layout_from_table(flat_packed_table(frag))
        if flat is not None:
            modes = [(int(e), int(d)) for e, d in zip(cute.flatten(flat.shape), cute.flatten(flat.stride))]
    if modes is None:
        out = Unconvertible("packed fragment is not a strided CuTe layout")
    else:
        inv = right_inverse_modes(modes)
        if int(math.prod([e for e, _ in inv])) != cells:
            out = Unconvertible("packed fragment is not injective (right inverse is partial)")
        else:
            out = _from_lists([e for e, _ in inv], [d for _, d in inv])
    if len(_INVERSES) > 4096:
        _INVERSES.clear()
        _ADDRESSES.clear()
    _INVERSES[frag.key] = out
    return out


def prepare_cute(frag, accesses) -> CuteStatement | Unconvertible:
    """Pack, convert, invert and compose; Unconvertible(reason) whenever any step is not exact."""
    if not frag.is_static or not all(isinstance(s, int) for s in frag.output_shape):
        return Unconvertible("symbolic extents")
    points = int(math.prod(frag.input_shape))
    R, T = frag.replicate_size, int(frag.thread_extent)
    S = int(math.prod(frag.output_shape))
    if points * R != T * S:
        return Unconvertible(f"points x replication {points}x{R} != threads x slots {T}x{S}")
    inv = packed_inverse(frag, T * S)
    if isinstance(inv, Unconvertible):
        return inv
    out = CuteStatement(T, S, points, R, inv)
    for acc in accesses:
        key = (frag.key, tuple(int(d) for d in acc.strides))
        hit = _ADDRESSES.get(key)
        if hit is None:
            if len(_ADDRESSES) > 4096:
                _ADDRESSES.clear()
            hit = _ADDRESSES[key] = _address_modes(frag, inv, acc.strides, S, T)
        if isinstance(hit, Unconvertible):
            return hit
        out.addresses.append(hit)
    return out


#: (fragment key, strides) -> (slot modes, thread modes, cell -> address layout): a fragment read and written
#: through the same strides (a copy in and a copy out) composes once
_ADDRESSES: dict = {}


def _address_modes(frag, inv, strides, S: int, T: int):
    """(slot modes, thread modes, cell -> address layout) of one access, or Unconvertible(reason). The
    composition runs on plain (extent, stride) lists (``cute.compose_modes``); the Layout-object path
    (``address_layout``) is only taken to word a failure, so the reason reads the same either way."""
    from tilelayout import cute
    from tilelayout.cute.algebra import coalesce_modes, compose_modes
    shape = (frag.replicate_size,) + tuple(int(s) for s in reversed(frag.input_shape))
    gmodes = list(zip(shape, (0,) + tuple(int(d) for d in reversed(strides))))
    inv_modes = [(int(e), int(d)) for e, d in zip(cute.flatten(inv.shape), cute.flatten(inv.stride))]
    try:
        addr = compose_modes(gmodes, inv_modes)
        if int(math.prod([e for e, _ in addr])) != S * T:
            raise cute.CuteError("size mismatch")
        slot = coalesce_modes(compose_modes(addr, [(S, 1)]))
        thread = coalesce_modes(compose_modes(addr, [(T, S)]))
    except cute.CuteError:
        try:
            full = address_layout(frag, inv, strides, S, T)
            split = cute.with_shape(full, (S, T))
            return _flat_modes(split[0]), _flat_modes(split[1]), full
        except cute.CuteError as err:
            return Unconvertible(f"address composition failed: {err}")
    return slot, thread, addr


def address_layout(frag, inv, strides, S: int, T: int):
    """The cell -> element address CuTe Layout: the global layout composed with the packed inverse."""
    from tilelayout import cute
    shape = (frag.replicate_size,) + tuple(int(s) for s in reversed(frag.input_shape))
    glayout = cute.Layout(shape, (0,) + tuple(int(d) for d in reversed(strides)))
    return cute.composition(glayout, inv)


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
    prep = prepare_cute(frag, accesses)
    if isinstance(prep, Unconvertible):
        return prep
    T, S = prep.threads, prep.slots
    V = vector_width(S, prep.addresses, accesses, vector_bits, max_lanes)
    steps = S // V
    step_slots = np.arange(steps, dtype=np.int64) * V
    thread_ids = np.arange(T, dtype=np.int64)
    replica = None
    out = []
    for (slot_modes, thread_modes, addr), acc in zip(prep.addresses, accesses):
        issue = steps * repeat * T * (vector_bits // 8)
        # the cell -> address layout split as (slots, threads) is a sum of a slot part and a thread part
        by_thread = mode_values(thread_modes, thread_ids)
        by_step = mode_values(slot_modes, step_slots) + acc.base
        if acc.is_store and prep.replicate > 1:
            if replica is None:
                replica = _replica_parts(prep.inverse, T, S, step_slots, prep.replicate)
            segments = count_segments_split(by_thread, by_step, V, acc.elem_bytes, replica, warp_size, segment_bytes)
        else:
            segments = count_segments_split(by_thread, by_step, V, acc.elem_bytes, None, warp_size, segment_bytes)
        out.append(StatementScore(V, issue, repeat * segments * segment_bytes, segments))
    return out


def mode_values(modes: list, idx: np.ndarray) -> np.ndarray:
    """A flat (extent, stride) mode list evaluated at ``idx`` (colexicographic digits, as CuTe reads them)."""
    out = np.zeros(len(idx), dtype=np.int64)
    pre = 1
    for k, (ext, stride) in enumerate(modes):
        if stride:
            digit = idx // pre if k == len(modes) - 1 else (idx // pre) % ext
            out += digit * stride
        pre *= ext
    return out


def _replica_parts(inverse, T: int, S: int, step_slots: np.ndarray, replicate: int):
    """The replica of each vector's first cell (the inverse's point n has replica n % R): as a pair
    (thread part, step part) with replica = (a[t] + b[s]) % R when the inverse splits into a slot and a
    thread layout, else the (threads, steps) table itself."""
    from tilelayout.cute import CuteError, flatten
    from tilelayout.cute.algebra import coalesce_modes, compose_modes, values
    modes = [(int(e), int(d)) for e, d in zip(flatten(inverse.shape), flatten(inverse.stride))]
    try:
        by_slot = coalesce_modes(compose_modes(modes, [(S, 1)]))
        by_thread = coalesce_modes(compose_modes(modes, [(T, S)]))
        return (mode_values(by_thread, np.arange(T, dtype=np.int64)) % replicate,
                mode_values(by_slot, step_slots) % replicate, replicate)
    except CuteError:
        cells = np.arange(T, dtype=np.int64)[:, None] * S + step_slots[None, :]
        return values(inverse, cells.reshape(-1)).reshape(T, len(step_slots)) % replicate


def count_segments_split(by_thread: np.ndarray, by_step: np.ndarray, vector: int, elem_bytes: int, replica,
                         warp_size: int, segment_bytes: int) -> int:
    """``count_segments`` of ``first[t, s] = by_thread[t] + by_step[s]``, only replica-0 lanes active when
    ``replica`` is given (see ``_replica_parts``), counting each kind of step once: shifting a step's
    addresses by whole segments shifts every lane's segments alike, so steps with the same ``by_step``
    residue modulo the segment and the same active lanes touch equally many segments."""
    seg_elems = max(1, segment_bytes // elem_bytes)
    key = by_step % seg_elems
    if isinstance(replica, tuple):                   # active lanes of step s depend on b[s] only
        key = key * replica[2] + replica[1]
    elif replica is not None:                        # a full table: the step's whole active column
        cols = np.ascontiguousarray(np.concatenate([key[:, None], replica.T], axis=1))
        key = np.unique(cols.view(np.dtype((np.void, cols.dtype.itemsize * cols.shape[1]))).ravel(),
                        return_inverse=True)[1].reshape(-1)
    first_of, counts = _kinds(key)
    first = by_thread[:, None] + by_step[None, first_of]
    if replica is None:
        active = np.ones_like(first, dtype=bool)
    elif isinstance(replica, tuple):
        active = (replica[0][:, None] + replica[1][None, first_of]) % replica[2] == 0
    else:
        active = replica[:, first_of] == 0
    per_step = segments_per_step(first, vector, elem_bytes, active, warp_size, segment_bytes)
    return int((per_step * counts).sum())


def _kinds(key: np.ndarray) -> tuple:
    """(index of each distinct key's first step, how many steps have it), in any order (the caller sums a
    product over kinds). Up to about a hundred steps (most statements) a dictionary pass is cheaper than
    ``np.unique``'s call overhead and sort."""
    if key.size > 96:
        _, first_of, counts = np.unique(key, return_index=True, return_counts=True)
        return first_of, counts
    where: dict = {}
    tally: list = []
    for i, k in enumerate(key.tolist()):
        slot = where.get(k)
        if slot is None:
            where[k] = len(tally)
            tally.append([i, 1])
        else:
            tally[slot][1] += 1
    return (np.array([t[0] for t in tally], dtype=np.int64), np.array([t[1] for t in tally], dtype=np.int64))


def count_segments(first: np.ndarray, vector: int, elem_bytes: int, active: np.ndarray, warp_size: int,
                   segment_bytes: int) -> int:
    """Distinct segments per (step, warp), summed: ``first`` is (threads, steps) element addresses."""
    return int(segments_per_step(first, vector, elem_bytes, active, warp_size, segment_bytes).sum())


def segments_per_step(first: np.ndarray, vector: int, elem_bytes: int, active: np.ndarray, warp_size: int,
                      segment_bytes: int) -> np.ndarray:
    """Per step (column of ``first``), the distinct segments of the active lanes, summed over warps."""
    seg_elems = max(1, segment_bytes // elem_bytes)
    T, steps = first.shape
    if T == 0 or steps == 0 or not active.any():
        return np.zeros(steps, dtype=np.int64)
    lo, hi = first // seg_elems, (first + vector - 1) // seg_elems
    span = int((hi - lo).max(initial=0))
    none = int(lo.min()) - 1                     # below every real segment: marks inactive cells
    segs = np.stack([np.where(active & (lo + extra <= hi), lo + extra, none) for extra in range(span + 1)], axis=1)
    warps = -(-T // warp_size)
    if warps * warp_size != T:
        pad = np.full((warps * warp_size - T,) + segs.shape[1:], none, dtype=segs.dtype)
        segs = np.concatenate([segs, pad])
    # each (warp, step) group: its lanes' segments along one axis; sorted, a new value starts a distinct segment
    group = np.sort(segs.reshape(warps, warp_size * (span + 1), steps), axis=1)
    distinct = (group[:, 1:, :] != group[:, :-1, :]).sum(axis=1) + 1
    return distinct.sum(axis=0) - (group[:, 0, :] == none).sum(axis=0)
