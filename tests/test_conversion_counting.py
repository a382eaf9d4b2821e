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
