"""The shared-conversion cost counters agree with their direct definitions on arbitrary inputs.

``_wavefronts`` sorts each (phase, step) row's words instead of every (group, word) pair, ``_ideal`` counts
accesses per (warp, step) by bincount, and the (thread, slot) order comes from one bucket pass when no cell
repeats; each is checked here against the whole-array definition, repeats and gaps included.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from tilelayout.passes.inference import conversion as cv


def _accesses(data, unique: bool):
    threads = data.draw(st.sampled_from([1, 8, 32, 33, 64, 128, 256]))
    steps = data.draw(st.integers(1, 12))
    lanes = np.repeat(np.arange(threads), steps)
    step = np.tile(np.arange(steps), threads) * data.draw(st.sampled_from([1, 3]))
    keep = np.random.default_rng(data.draw(st.integers(0, 999))).random(lanes.size) < data.draw(
        st.sampled_from([1.0, 0.7, 0.2]))
    if not keep.any():
        keep[0] = True
    lanes, step = lanes[keep], step[keep]
    if not unique:                               # some lanes access twice in one step
        dup = np.arange(0, lanes.size, 3)
        lanes, step = np.concatenate([lanes, lanes[dup]]), np.concatenate([step, step[dup]])
    t_stride = data.draw(st.sampled_from([0, 4, 8, 16, 132, 516]))
    s_stride = data.draw(st.sampled_from([4, 16, 64, 128, 4096]))
    addr = lanes * t_stride + step * s_stride + data.draw(st.sampled_from([0, 4, 16]))
    if data.draw(st.booleans()):
        addr = np.random.default_rng(data.draw(st.integers(0, 999))).permutation(addr)
    return lanes.astype(np.int64), step.astype(np.int64), addr.astype(np.int64)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_row_sorted_wavefronts_equal_the_whole_array_count(data):
    lanes, steps, addr = _accesses(data, data.draw(st.booleans()))
    access = data.draw(st.sampled_from([1, 2, 4, 8, 16]))
    addr = addr // access * access
    warp = data.draw(st.sampled_from([32, 64]))
    assert cv._wavefronts(lanes, steps, addr, access, warp) == cv._wavefronts_sorted(lanes, steps, addr, access, warp)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_one_row_wavefronts_are_the_most_distinct_words_in_one_bank(data):
    """One row of seats (the uniform-side and row-class path) counts, per bank, the distinct words its accesses
    span, aligned starts or not, repeated and empty seats included."""
    words_per = data.draw(st.sampled_from([1, 2, 4]))
    seats = data.draw(st.sampled_from([8, 16, 32]))
    rng = np.random.default_rng(data.draw(st.integers(0, 10 ** 6)))
    first = rng.integers(0, data.draw(st.sampled_from([8, 64, 2048])), size=seats)
    if data.draw(st.booleans()):
        first -= first % words_per                      # vector accesses start on their own alignment
    first[rng.random(seats) < data.draw(st.sampled_from([0.0, 0.3, 1.0]))] = -1
    words = {int(w) + k for w in first if w >= 0 for k in range(words_per)}
    banks = [sum(1 for w in words if w % 32 == b) for b in range(32)]
    assert int(cv._row_wavefronts(first.reshape(1, -1), words_per)[0]) == max(banks)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_ideal_wavefronts_count_every_warp_step_group(data):
    lanes, steps, _ = _accesses(data, data.draw(st.booleans()))
    access, warp = data.draw(st.sampled_from([2, 4, 8, 16])), data.draw(st.sampled_from([32, 64]))
    _, count = np.unique((lanes // warp) * (int(steps.max()) + 1) + steps, return_counts=True)
    assert cv._ideal(lanes, steps, access, warp) == int((-(-count * access // 128)).sum())


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_bucket_order_is_the_lexicographic_order(data):
    lanes, steps, _ = _accesses(data, data.draw(st.booleans()))
    perm = np.random.default_rng(data.draw(st.integers(0, 999))).permutation(lanes.size)
    lanes, steps = lanes[perm], steps[perm]
    assert np.array_equal(cv._thread_slot_order(lanes, steps), np.lexsort((steps, lanes)))


def _golden_fragments():
    import json
    from pathlib import Path
    from tilelayout import Fragment, layout_from_dict
    out = {}
    for path in sorted((Path(__file__).resolve().parent.parent / "expected").glob("*.json")):
        for variant in json.loads(path.read_text()).values():
            for model in variant.values():
                for d in list(model.get("buffers", {}).values()) + list(model.get("loops", {}).values()):
                    if d.get("kind") == "Fragment":
                        lay = layout_from_dict(d)
                        if isinstance(lay, Fragment) and lay.is_static:
                            out.setdefault(repr(lay), lay)
    return list(out.values())


def test_noop_lookup_equals_the_holder_table_on_golden_fragment_pairs():
    frags = _golden_fragments()
    pairs = 0
    for a in frags:
        for b in frags:
            if list(a.input_shape) != list(b.input_shape) or a.thread_extent != b.thread_extent:
                continue
            threads = int(a.thread_extent)
            se, st, _, _ = cv._cells(a, threads)
            de, dt, _, _ = cv._cells(b, threads)
            have = np.zeros((int(np.prod(a.input_shape)), int(max(st.max(), dt.max())) + 1), dtype=bool)
            have[se, st] = True
            assert cv.is_noop(a, b, threads) == bool(have[de, dt].all()), (a, b)
            pairs += 1
    assert pairs > 50


def _round_trip_reference(src, dst, threads: int, warp: int, elem_bytes: int, pad: int) -> tuple:
    """(wavefronts, store vector, load vector) of a shared round trip, from the definitions cell by cell:
    replica 0 of each element stores it, every replica loads it, through a row-major tile padded by ``pad``
    and staged as many whole rows at a time as 48 KiB holds; a thread's aligned run of ``v`` consecutive
    slots is one access when its addresses are consecutive and aligned; within each (phase, step) every
    bank serves its distinct words one per wavefront."""
    shape = [int(s) for s in src.input_shape]
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    stride = cols + pad
    per = max([k for k in range(1, rows + 1) if rows % k == 0 and k * stride * elem_bytes <= 48 * 1024] or [rows])

    def cells(frag, every_replica):
        lo = (frag.thread_range or (0, 0))[0]
        threads_of = np.asarray(frag.thread_table()).reshape(rows * cols, -1) + lo
        tab = np.asarray(frag.table()).reshape(rows * cols, -1)
        out = []
        for e in range(rows * cols):
            slot = 0
            for k, ext in enumerate(frag.output_shape):
                slot = slot * int(ext) + int(tab[e, k])
            for t in (threads_of[e] if every_replica else threads_of[e][:1]):
                out.append((int(t), slot, e))
        return sorted(out)

    def side(frag, every_replica):
        got = cells(frag, every_replica)
        addr = {(t, s): (e // cols % per) * stride + e % cols for t, s, e in got}
        inner = int(frag.output_shape[-1])
        v = 16 // elem_bytes
        while v > 1:
            groups = [got[k:k + v] for k in range(0, len(got), v)]
            if inner % v == 0 and len(got) % v == 0 and all(
                    len({t for t, _, _ in g}) == 1 and [s for _, s, _ in g] == list(range(g[0][1], g[0][1] + v))
                    and g[0][1] % v == 0 and [addr[c[:2]] for c in g] == list(range(addr[g[0][:2]], addr[g[0][:2]] + v))
                    and addr[g[0][:2]] % v == 0 for g in groups):
                break
            v //= 2
        last_step = max(s for _, s, _ in got) // v + 1
        per_phase = max(1, min(warp, 128 // max(v * elem_bytes, 4)))
        words: dict = {}
        for t, s, e in got:
            if s % v:
                continue
            step = (e // cols // per) * last_step + s // v
            phase = (t // warp) * (warp // per_phase) + (t % warp) // per_phase
            first = addr[(t, s)] * elem_bytes // 4
            for w in range(first, first + max(1, v * elem_bytes // 4)):
                words.setdefault((phase, step), set()).add(w)
        total = 0
        for group in words.values():
            banks: dict = {}
            for w in group:
                banks[w % 32] = banks.get(w % 32, 0) + 1
            total += max(banks.values())
        return total, v

    (put, v_put), (get, v_get) = side(src, False), side(dst, True)
    return put + get, v_put, v_get


def _bound(frag, threads):
    return frag if frag.thread_range is not None else frag.bind_thread_range(0, threads)


def same_shaped_pairs(frags: list):
    """(a, b, threads, a bound, b bound) for every ordered pair of distinct fragments of one shape and thread
    extent, each bound to threads from 0 unless it has a range already."""
    for a in frags:
        for b in frags:
            if list(a.input_shape) != list(b.input_shape) or a.thread_extent != b.thread_extent or a is b:
                continue
            threads = int(a.thread_extent)
            yield a, b, threads, _bound(a, threads), _bound(b, threads)


def test_shared_round_trip_cost_equals_the_cell_by_cell_count_on_golden_fragment_pairs():
    """Every padding of every pair of same-shaped golden fragments (up to 2,048 elements each, so the
    reference stays quick): the cost's wavefronts and vector widths are those the definitions give."""
    pairs = 0
    for a, b, threads, src, dst in same_shaped_pairs([f for f in _golden_fragments()
                                                       if int(np.prod(f.input_shape)) <= 2048]):
        for elem_bytes in (2, 4):
            for pad in cv._pads(elem_bytes):
                cv.clear_caches()
                got = cv.shared_cost(src, dst, threads, 32, elem_bytes, pad)
                assert (got.wavefronts, *got.vectors) == _round_trip_reference(src, dst, threads, 32, elem_bytes,
                                                                                pad), (a, b, elem_bytes, pad)
        pairs += 1
    assert pairs > 20


def _bit_fragment(rows: int, cols: int, perm: list, thread_bits: int, replicate: int):
    """The element (i, j) at flat index e = i * cols + j: thread from the bits ``perm[:thread_bits]`` of e
    (then ``replicate`` copies, 2^thread_bits threads apart), slot from the other bits, in ``perm``'s order.
    Bit permutations cover the mma, transposed and vector layouts, rows crossed by one thread's run."""
    from tilelayout import Fragment

    def bits(e, chosen):
        out = 0
        for k, b in enumerate(chosen):
            out = out + e // (1 << b) % 2 * (1 << k)
        return out

    lo, hi = perm[:thread_bits], perm[thread_bits:]
    if replicate > 1:
        thread = lambda i, j, r: bits(i * cols + j, lo) + r * (1 << thread_bits)
    else:
        thread = lambda i, j: bits(i * cols + j, lo)
    return Fragment([rows, cols], thread, lambda i, j: bits(i * cols + j, hi), replicate=replicate)


def draw_bit_permuted_pair(data, make=None, rows_from=(1, 2, 4, 8, 16)) -> tuple:
    """(source, destination, threads): two bit-permuted fragments of one random tile over one thread count,
    each replicated or not, bound to threads from 0; ``make``: the fragment builder (``_bit_fragment``)."""
    make = make or _bit_fragment
    rows = data.draw(st.sampled_from(list(rows_from)))
    cols = data.draw(st.sampled_from([c for c in (4, 8, 16, 32, 64) if rows * c >= 32]))
    n = (rows * cols).bit_length() - 1
    threads = data.draw(st.sampled_from([t for t in (32, 64, 128) if t <= 2 * rows * cols]))

    def fragment():
        replicate = data.draw(st.sampled_from([r for r in (1, 2) if threads // r <= rows * cols]))
        perm = data.draw(st.permutations(range(n)))
        return make(rows, cols, list(perm), (threads // replicate).bit_length() - 1, replicate)

    return fragment().bind_thread_range(0, threads), fragment().bind_thread_range(0, threads), threads


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_shared_round_trip_cost_equals_the_cell_by_cell_count_on_bit_permuted_fragments(data):
    src, dst, threads = draw_bit_permuted_pair(data)
    elem_bytes = data.draw(st.sampled_from([1, 2, 4, 8]))
    pad = data.draw(st.sampled_from(cv._pads(elem_bytes)))
    cv.clear_caches()
    got = cv.shared_cost(src, dst, threads, 32, elem_bytes, pad)
    assert (got.wavefronts, *got.vectors) == _round_trip_reference(src, dst, threads, 32, elem_bytes, pad)


def test_row_classes_refuse_a_shift_of_part_of_a_word():
    """Two seat rows of the same shape (columns 1 and 64, then 2 and 65: one column further) cost 2 and 1
    wavefronts in 2-byte elements, since the half-word shift regroups the words: the class count must not
    stand for both. With 4-byte elements every shift is whole words and the class count is exact."""
    seats = (np.array([0, 1, 32, 33]), 2)           # lanes 0 and 1 of steps 0 and 1: 32 seats a row
    row, col = np.zeros(4, dtype=np.int64), np.array([1, 64, 2, 65])
    classes = cv._RowClasses(seats, row, col, per_phase=32)
    assert classes.worth and classes.sizes.tolist() == [2]
    assert classes.wavefronts(128, 2, 1) is None
    direct = lambda eb: cv._seated_wavefronts(seats, np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]),
                                              (row * 128 + col) * eb, eb, 32)
    assert direct(2) == 3
    assert classes.wavefronts(128, 4, 1) == direct(4) == 2


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_row_classes_group_exactly_the_equal_rows(data):
    """``_same_rows`` partitions rows as comparing them whole does, also when every hash collides."""
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    width = data.draw(st.integers(1, 12))
    base = rng.integers(-3, 3, size=(data.draw(st.integers(1, 6)), width))
    table = base[rng.integers(0, base.shape[0], size=data.draw(st.integers(1, 40)))]
    _, want = np.unique(table, axis=0, return_inverse=True)
    want = want.reshape(-1)
    for collide in (False, True):
        if collide:
            cv._HASH_WEIGHTS[width] = np.zeros(width, dtype=np.int64)
        try:
            reps, cls = cv._same_rows(table)
        finally:
            cv._HASH_WEIGHTS.pop(width, None)
        assert (table[reps][cls] == table).all()
        assert len(reps) == len(np.unique(want))
        assert all(len(set(want[cls == c])) == 1 for c in range(len(reps)))


def _both_ways(src, dst, threads: int, elem_bytes: int, pad: int) -> tuple:
    """(one-row count, seated count) of both sides of a one-round trip (``_access`` with and without the
    shortcut for sides whose (phase, step) rows all have one shape), and how many sides took the shortcut."""
    shape = [int(s) for s in src.input_shape]
    sides = [(cv._side(src, threads, True), int(src.output_shape[-1])),
             (cv._side(dst, threads, False), int(dst.output_shape[-1]))]
    return _sides_both_ways(sides, int(np.prod(shape[:-1])), shape[-1], elem_bytes, pad)


def _sides_both_ways(sides: list, rows: int, cols: int, elem_bytes: int, pad: int) -> tuple:
    out, taken = [], 0
    for side, inner in sides:
        fast = cv._access(side, cols + pad, rows, cols, inner, elem_bytes, 32, whole=True)
        slow = cv._access(side, cols + pad, rows, cols, inner, elem_bytes, 32, whole=False)
        taken += cv._uniform_wavefronts(side, fast[2], cols, rows, cols + pad, elem_bytes, 32) is not None
        out.append((fast, slow))
    return out, taken


def _table_side(elem: np.ndarray) -> "cv._Side":
    """A side whose thread t holds element ``elem[t, s]`` in slot s (threads from 0, in (thread, slot) order)."""
    threads, slots = elem.shape
    return cv._Side(elem.reshape(-1).astype(np.int64), np.repeat(np.arange(threads, dtype=np.int64), slots),
                    np.tile(np.arange(slots, dtype=np.int64), threads))


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_one_row_count_equals_the_seated_count_on_arbitrary_tables(data):
    """Counting one (phase, step) row and multiplying gives what seating every access gives, on (thread, slot)
    tables of every kind: bit permutations (every row one shape), bit permutations with each tile row
    rotated by its own amount (rows of several shapes), random permutations, repeated elements (a replicated
    load side), and rows shifted by part of a word (odd columns at 1- and 2-byte elements)."""
    threads = data.draw(st.sampled_from([32, 64, 128]))
    slots = data.draw(st.sampled_from([1, 2, 4, 8]))
    size = threads * slots
    cols = data.draw(st.sampled_from([c for c in (4, 8, 16, 32, 64, 128) if size % c == 0]))
    rng = np.random.default_rng(data.draw(st.integers(0, 10 ** 6)))
    kind = data.draw(st.sampled_from(["bits", "rotated", "random", "replicated", "odd shift"]))
    n = size.bit_length() - 1
    perm = rng.permutation(n)
    flat = np.arange(size)
    bits = sum(((flat >> k) & 1) << int(perm[k]) for k in range(n))        # element of cell (t * slots + s)
    if kind == "rotated":
        row, col = bits // cols, bits % cols
        bits = row * cols + (col + rng.integers(0, cols, size=size // cols)[row]) % cols
    elif kind == "random":
        bits = rng.permutation(size)
    elif kind == "replicated":
        half = bits.reshape(threads, slots)[: threads // 2]
        bits = np.concatenate([half, half]) if rng.random() < 0.5 else np.repeat(half, 2, axis=0)
    elif kind == "odd shift":       # each warp's rows moved on by 0-3 elements: shifts of part of a word
        bits = (bits + rng.integers(0, 4, size=(threads // 32, slots))[flat // slots // 32, flat % slots]) % size
    table = bits.reshape(threads, slots)
    elem_bytes = data.draw(st.sampled_from([1, 2, 4, 8]))
    pad = data.draw(st.sampled_from(cv._pads(elem_bytes)))
    sides, _ = _sides_both_ways([(_table_side(table), slots)], size // cols, cols, elem_bytes, pad)
    for fast, slow in sides:
        assert fast == slow, (kind, elem_bytes, pad)


def test_rows_of_one_shape_half_a_word_apart_are_seated():
    """Lane pairs reading columns (1, 64) of their rows in step 0 and (2, 65) in step 1: one shape, one
    column (half a 4-byte word at 2-byte elements) apart. Step 0 puts all 32 words in bank 0 (32 wavefronts),
    step 1 splits them over banks 0 and 1 (16): the shortcut must not count step 0's row twice."""
    lane = np.arange(32)[:, None]
    table = np.arange(2)[None, :] + lane % 2 * 63 + lane // 2 * 256 + 1
    sides, taken = _sides_both_ways([(_table_side(table), 2)], 32, 128, 2, 0)
    (fast, slow), = sides
    assert taken == 0 and fast == slow and fast[0] == 32 + 16


def test_mma_accumulator_round_trips_are_counted_from_one_row():
    """The conversion an io-aware epilogue prices (a wgmma / mma.sync accumulator to the row-major layout its
    store coalesces) takes the one-row count on both sides at every padding, and the count is the seated one."""
    from tilelayout import Fragment, make_mma_accumulator_fragment, make_wgmma_accumulator_fragment
    row_major = Fragment([64, 128], lambda i, j: i % 4 * 32 + j // 4, lambda i, j: i // 4 * 4 + j % 4)
    accumulators = [make_wgmma_accumulator_fragment(64, 128, 128), make_mma_accumulator_fragment(64, 128, 128)]
    for acc in accumulators:
        src, dst = acc.bind_thread_range(0, 128), row_major.bind_thread_range(0, 128)
        for pad in cv._pads(4):
            cv.clear_caches()
            sides, taken = _both_ways(src, dst, 128, 4, pad)
            assert taken == 2, (acc, pad)
            assert all(fast == slow for fast, slow in sides)
