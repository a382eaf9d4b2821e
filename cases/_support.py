"""Invariants that case ``check`` functions assert, judged by exact enumeration.

A ``check`` sees the snapshot form of a result (``{"buffers": {name: dict}, "loops": {key: dict}}``,
dicts as ``to_dict`` writes them), so a check states behaviour without depending on how an
expression is spelled. Everything here rebuilds layouts with ``tilelayout.layout_from_dict`` and
compares numpy tables: ownership, coverage and validity are properties of the mapping.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Callable, Iterator

import numpy as np

_KEY = re.compile(r"^(?P<names>[^\[]+)\[(?P<extents>[^\]]+)\](?:#\d+)?$")


def loop_extents(key: str) -> list[int]:
    """Extents named by a loop key such as ``"i,j[128x128]#2"``."""
    m = _KEY.match(key)
    if not m:
        raise ValueError(f"not a loop key: {key!r}")
    return [int(e) for e in m.group("extents").split("x")]


def loops_with_extents(result: dict, extents: list[int]) -> list[str]:
    """Loop keys of ``result`` whose extents are ``extents``, in key order."""
    return sorted(k for k in result["loops"] if loop_extents(k) == list(extents))


def _layout(d: dict):
    """``layout_from_dict(d)``, rebuilt once per distinct dict: checks ask for the same layout's tables
    many times (a flash-attention check asks for five row statistics in every loop)."""
    from tilelayout import layout_from_dict
    key = json.dumps(d, sort_keys=True)
    hit = _LAYOUTS.get(key)
    if hit is None:
        if len(_LAYOUTS) > 256:
            _LAYOUTS.clear()
        hit = _LAYOUTS[key] = layout_from_dict(d)
    return hit


_LAYOUTS: dict = {}


def thread_table(d: dict) -> np.ndarray:
    """Threads holding each coordinate: shape (*input_shape, replicate), counted from the range minimum."""
    return np.array(_layout(d).thread_table(), dtype=np.int64)


def index_table(d: dict) -> np.ndarray:
    """Flattened register slot of each coordinate (and replica): shape (*input_shape, replicate)."""
    lay = _layout(d)
    table = np.asarray(lay.table(), dtype=np.int64)
    shape = [int(s) for s in d["input_shape"]]
    out = [int(s) for s in lay.output_shape]
    rep = int(d.get("replicate", 1))
    if table.shape == (*shape, len(out)):
        table = np.broadcast_to(table[..., None, :], (*shape, rep, len(out)))
    flat = np.zeros(table.shape[:-1], dtype=np.int64)
    for k, extent in enumerate(out):
        flat = flat * extent + table[..., k]
    return flat


def block_threads(d: dict) -> np.ndarray:
    """``thread_table`` counted from thread 0 of the block (the range minimum added): what two layouts bound
    to different thread ranges must be compared in."""
    rng = d.get("thread_range")
    return thread_table(d) + (int(rng[0]) if rng else 0)


def block_limit(d: dict) -> int:
    """One past the last block thread the layout may use."""
    rng = d.get("thread_range")
    return (int(rng[0]) + int(rng[1])) if rng else int(d["threads"])


def thread_count(d: dict) -> int:
    """Threads the layout may use: the bound thread range's extent, else its ``threads`` field."""
    rng = d.get("thread_range")
    return int(rng[1]) if rng else int(d["threads"])


def assert_replicate(name: str, d: dict, expected: int) -> None:
    assert d["replicate"] == expected, f"{name}: replicate must be {expected}, got {d['replicate']} ({d})"


def assert_covers(key: str, loop: dict) -> None:
    """The loop layout's domain is the loop's whole iteration space (no iteration silently dropped)."""
    assert loop["input_shape"] == loop_extents(key), (
        f"loop {key}: layout domain {loop['input_shape']} does not cover the loop's extents {loop_extents(key)}")


def assert_valid_fragment(name: str, d: dict) -> None:
    """Every point lands on a thread inside the range, and no two (point, replica) share a (thread, slot)."""
    threads = thread_table(d)
    limit = thread_count(d)
    assert threads.min() >= 0 and threads.max() < limit, (
        f"{name}: threads {threads.min()}..{threads.max()} fall outside [0, {limit})")
    slots = index_table(d)
    packed = slots.reshape(-1) * limit + threads.reshape(-1)
    assert not _has_repeat(packed), f"{name}: two elements share one (thread, slot) register"


def _has_repeat(values: np.ndarray) -> bool:
    """Whether some value occurs twice: counted in one pass when the values are small non-negative ints (a
    (thread, slot) numbering nearly always is), else by sorting."""
    if values.size and values.min() >= 0 and values.max() < 8 * values.size + 4096:
        return bool(np.bincount(values).max() > 1)
    return np.unique(values).size != values.size


def _holder_keys(d: dict, limit: int) -> np.ndarray:
    """Sorted ``element * limit + thread`` of every (element, holder) of a fragment, built once per dict:
    a check asks the same fragment about every loop."""
    key = (json.dumps(d, sort_keys=True), limit)
    hit = _HOLDERS.get(key)
    if hit is None:
        threads = block_threads(d)
        size = int(np.prod(threads.shape[:-1]))
        elem = np.repeat(np.arange(size, dtype=np.int64), threads.shape[-1])
        if len(_HOLDERS) > 256:
            _HOLDERS.clear()
        hit = _HOLDERS[key] = np.unique(elem * limit + threads.reshape(-1))
    return hit


_HOLDERS: dict = {}


def _member(sorted_keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``query`` entries found in ``sorted_keys`` (sorted; repeats allowed)."""
    if sorted_keys.size == 0:
        return np.zeros(query.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, query), sorted_keys.size - 1)
    return sorted_keys[pos] == query


def assert_owned(loop_key: str, loop: dict, frag_name: str, frag: dict,
                 index: Callable[..., tuple], write: bool = False) -> None:
    """Every thread running an iteration holds the fragment element it touches there.

    ``index`` maps the loop's coordinate grids to the fragment coordinates accessed. For a write,
    the iteration's threads must also reach every holder, so no replica keeps a stale value.
    (Judged by comparing each iteration's threads with its element's holders when both have few replicas,
    else on sorted ``element * threads + thread`` keys, never on an element-by-thread table, which for a
    128x128 tile over 256 threads is 4 MB to clear per question; a question answered yes before is not
    judged again.)
    """
    lshape = [int(s) for s in loop["input_shape"]]
    fshape = [int(s) for s in frag["input_shape"]]
    loop_threads = block_threads(loop)                                  # (*lshape, Rl)
    limit = max(block_limit(loop), block_limit(frag))
    coords = [np.asarray(c, dtype=np.int64) for c in index(*np.indices(lshape))]
    coords = [np.broadcast_to(c, lshape) for c in coords]
    for axis, (c, extent) in enumerate(zip(coords, fshape)):
        assert c.min() >= 0 and c.max() < extent, (
            f"loop {loop_key} reads {frag_name} out of bounds on axis {axis}: {c.min()}..{c.max()} vs {extent}")
    flat = np.ravel_multi_index(coords, fshape)                         # (*lshape)
    passed = (json.dumps(loop, sort_keys=True), json.dumps(frag, sort_keys=True), flat.shape,
              hashlib.blake2b(flat.tobytes(), digest_size=16).digest(), write)
    if passed in _OWNED:
        return
    if not _owned_by_lookup(loop_key, loop_threads, frag_name, frag, flat, coords, write):
        _owned_by_keys(loop_key, loop_threads, frag_name, frag, flat, coords, write, limit)
    if len(_OWNED) > 4096:
        _OWNED.clear()
    _OWNED.add(passed)


#: (loop, fragment, accessed elements, write) questions already answered yes: attention asks the same one for
#: five row statistics of one layout, in every loop, under both cost models
_OWNED: set = set()


def _owned_by_keys(loop_key: str, loop_threads: np.ndarray, frag_name: str, frag: dict, flat: np.ndarray,
                   coords: list, write: bool, limit: int) -> None:
    """``assert_owned`` on sorted ``element * threads + thread`` keys (any number of replicas)."""
    fshape = [int(s) for s in frag["input_shape"]]
    holders = _holder_keys(frag, limit)
    runs = flat[..., None] * limit + loop_threads                       # (*lshape, Rl)
    missing = ~_member(holders, runs)
    if missing.any():
        where = tuple(int(x) for x in np.argwhere(missing)[0])
        raise AssertionError(f"loop {loop_key}: iteration {where[:-1]} runs on thread "
                             f"{loop_threads[where]} which does not hold {frag_name}{tuple(int(c[where[:-1]]) for c in coords)}")
    if write:
        touched = np.zeros(int(np.prod(fshape)), dtype=bool)
        touched[flat.reshape(-1)] = True
        due = holders[touched[holders // limit]]                        # holders of every written element
        stale = due[~_member(np.sort(runs, axis=None), due)]
        assert not stale.size, (f"loop {loop_key} writes {frag_name} but leaves replicas on threads "
                                f"{np.unique(stale % limit)[:8].tolist()} stale")


def _owned_by_lookup(loop_key: str, loop_threads: np.ndarray, frag_name: str, frag: dict, flat: np.ndarray,
                     coords: list, write: bool) -> bool:
    """``assert_owned`` by comparing each iteration's threads with its element's few holders directly (no sorted
    keys), when both sides have few replicas and, for a write, no element is written by two iterations (then
    an element's writers are one iteration's threads). False: not applicable, judge by sorted keys."""
    held_by = block_threads(frag)
    rf, rl = held_by.shape[-1], loop_threads.shape[-1]
    if rf * rl > 16:
        return False
    if write and np.bincount(flat.reshape(-1)).max() > 1:
        return False
    held = held_by.reshape(-1, rf)[flat]                                # (*lshape, Rf)
    missing = ~(held[..., None, :] == loop_threads[..., :, None]).any(axis=-1)
    if missing.any():
        where = tuple(int(x) for x in np.argwhere(missing)[0])
        raise AssertionError(f"loop {loop_key}: iteration {where[:-1]} runs on thread "
                             f"{loop_threads[where]} which does not hold {frag_name}{tuple(int(c[where[:-1]]) for c in coords)}")
    if write:
        stale = ~(held[..., :, None] == loop_threads[..., None, :]).any(axis=-1)
        assert not stale.any(), (f"loop {loop_key} writes {frag_name} but leaves replicas on threads "
                                 f"{np.unique(held[stale])[:8].tolist()} stale")
    return True


def conversion_kind(src: dict, dst: dict, threads: int | None = None, warp: int = 32) -> str:
    """The least general way a conversion between two recorded fragment layouts can be done, by enumeration
    of both: ``noop`` when every holder in ``dst`` already holds the element in ``src``, ``shuffle`` when
    every needed element is held in the reader's warp (and ``src`` is not replicated), else ``shared``."""
    threads = max(threads or 0, block_limit(src), block_limit(dst))
    s, d = block_threads(src), block_threads(dst)                    # (*shape, R) each
    size = int(np.prod(s.shape[:-1]))
    s, d = s.reshape(size, -1), d.reshape(size, -1)
    holds = np.zeros((size, threads), dtype=bool)
    holds[np.arange(size)[:, None], s] = True
    if holds[np.arange(size)[:, None], d].all():
        return "noop"
    if s.shape[1] == 1 and (s // warp == d // warp).all():
        return "shuffle"
    return "shared"


def row_holders(d: dict) -> list[frozenset]:
    """For each index of the first axis, the set of (block) threads holding any element of that row."""
    threads = block_threads(d)
    if threads.size and threads.min() < 0:
        return [frozenset(int(t) for t in r) for r in threads.reshape(threads.shape[0], -1)]
    return [frozenset(np.nonzero(r)[0].tolist()) for r in _row_threads(d, 0)]


def _row_threads(d: dict, width: int) -> np.ndarray:
    """(rows, threads) membership: does block thread t hold any element of row i (at least ``width`` columns)."""
    threads = block_threads(d)
    rows = threads.reshape(threads.shape[0], -1)
    holds = np.zeros((rows.shape[0], max(width, int(rows.max(initial=-1)) + 1)), dtype=bool)
    holds[np.arange(rows.shape[0])[:, None], rows] = True
    return holds


def assert_same_rows(name_a: str, a: dict, name_b: str, b: dict) -> None:
    """Row i of ``a`` and row i of ``b`` live in exactly the same threads (attention's S, P, O and row
    vectors: a row statistic is usable wherever its row is, and nowhere else is it needed)."""
    if min(int(block_threads(x).min(initial=0)) for x in (a, b)) < 0:
        ra, rb = row_holders(a), row_holders(b)
        assert ra == rb, f"{name_a} and {name_b} do not live in the same threads row by row"
        return
    width = max(int(block_threads(x).max(initial=-1)) + 1 for x in (a, b))
    ra, rb = _row_threads(a, width), _row_threads(b, width)
    assert len(ra) == len(rb), f"{name_a} has {len(ra)} rows, {name_b} has {len(rb)}"
    for i in np.nonzero((ra != rb).any(axis=1))[0][:1]:
        x, y = np.nonzero(ra[i])[0].tolist(), np.nonzero(rb[i])[0].tolist()
        raise AssertionError(f"row {i}: {name_a} lives in threads {x[:8]} but {name_b} in {y[:8]}")


def row_statistic_loops(result: dict, tile: str, stats: tuple[str, ...]) -> Iterator[tuple[str, dict, bool]]:
    """The checks every kernel of per-row statistics over a tile shares (top-k's row maximum, a quantizer's
    row scale): each statistic lives in exactly the threads of its row of ``tile``, and every loop covers its
    extents. Yields ``(key, loop, per_row)``, ``per_row`` for the loops over the rows alone (those that read or
    write the statistics), for the case to check what each loop owns."""
    buffers = result["buffers"]
    for stat in stats:
        assert_same_rows(tile, buffers[tile], stat, buffers[stat])
    rows = list(buffers[tile]["input_shape"])[:1]
    for key, loop in result["loops"].items():
        assert_covers(key, loop)
        yield key, loop, loop_extents(key) == rows
