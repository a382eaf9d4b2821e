"""The ownership check golden-case ``check`` functions rely on (``cases/_support.assert_owned``) judges
exactly what its definition says: compared with a brute-force reference over random loop/fragment pairs,
and shown to fail on a missing holder and on a stale replica."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tilelayout import Fragment
from cases import _support


def _reference(loop: Fragment, frag: Fragment, index, write: bool) -> str | None:
    """'missing', 'stale' or None, by looping over every iteration and (block) thread."""
    lt = np.asarray(loop.thread_table(), dtype=np.int64) + (loop.thread_range or (0, 0))[0]
    ft = np.asarray(frag.thread_table(), dtype=np.int64) + (frag.thread_range or (0, 0))[0]
    holders = {}
    for pos in np.ndindex(*ft.shape[:-1]):
        holders[pos] = set(int(t) for t in ft[pos])
    runs = {}
    for pos in np.ndindex(*lt.shape[:-1]):
        elem = tuple(int(c) for c in index(*[np.int64(p) for p in pos]))
        for t in lt[pos]:
            if int(t) not in holders[elem]:
                return "missing"
            runs.setdefault(elem, set()).add(int(t))
    if write and any(holders[e] - ts for e, ts in runs.items()):
        return "stale"
    return None


def _verdict(loop, frag, index, write) -> str | None:
    _support._OWNED.clear()             # judge every question afresh (a yes is remembered otherwise)
    try:
        _support.assert_owned("i,j[8x8]", loop.to_dict(), "f", frag.to_dict(), index, write=write)
    except AssertionError as err:
        return "stale" if "stale" in str(err) else "missing"
    return None


def _fragment(draw, shape, threads: int) -> Fragment:
    """A random thread map (replicated or not); the slot is the element's row-major number."""
    rep = draw(st.sampled_from([1, 2]))
    a, b = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 3, 8]))
    per = threads // rep
    if len(shape) == 1:
        thread = (lambda i, r: (i * a + r * per) % threads) if rep > 1 else (lambda i: i * a % threads)
        return Fragment(shape, thread, lambda i: i, replicate=rep)
    if rep > 1:
        return Fragment(shape, lambda i, j, r: (i * a + j * b + r * per) % threads, lambda i, j: i * 8 + j,
                        replicate=rep)
    return Fragment(shape, lambda i, j: (i * a + j * b) % threads, lambda i, j: i * 8 + j)


@pytest.mark.parametrize("lookup", [True, False], ids=["holder-lookup", "sorted-keys"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_ownership_check_equals_the_brute_force_definition(lookup, data):
    """Both ways of judging (the direct holder lookup, and sorted keys where it does not apply) agree with the
    definition."""
    with pytest.MonkeyPatch.context() as patch:
        if not lookup:                  # every question goes to sorted keys
            patch.setattr(_support, "_owned_by_lookup", lambda *args: False)
        _check_one(data)


def _check_one(data):
    threads = 16
    loop = _fragment(data.draw, (8, 8), threads)
    rows = data.draw(st.booleans())
    frag = _fragment(data.draw, (8,) if rows else (8, 8), threads)
    index = (lambda i, j: (i,)) if rows else (lambda i, j: (i, j))
    write = data.draw(st.booleans())
    # layouts bound to thread ranges that start elsewhere are compared in block threads
    loop = loop.bind_thread_range(data.draw(st.sampled_from([0, 0, 8, 16])), threads)
    frag = frag.bind_thread_range(data.draw(st.sampled_from([0, 0, 8, 16])), threads)
    assert _verdict(loop, frag, index, write) == _reference(loop, frag, index, write)


def test_ownership_is_judged_in_block_threads_across_thread_ranges():
    """Fuzz seed 1998 kernel 4: a loop bound to threads [50, 128) as ``_rep * 12 + 2`` (block threads 52, 64,
    ..., 112) reads element 4 of a fragment bound to [0, 128) as ``_rep * 12 + _i`` (4, 16, ..., 112): owned.
    Counted from each range's own start, the check once compared thread 2 with 4, 16, ... and failed; the
    same maps with the loop bound at 0 really are not owned."""
    frag = Fragment([12], lambda i, r: r * 12 + i, lambda i: 0, replicate=10).bind_thread_range(0, 128)
    loop = Fragment([1], lambda i, r: r * 12 + 2, lambda i: 0, replicate=6)
    assert _verdict(loop.bind_thread_range(50, 78), frag, lambda i: (i + 4,), False) is None
    assert _verdict(loop.bind_thread_range(0, 128), frag, lambda i: (i + 4,), False) == "missing"


def test_repeat_detection_equals_unique():
    rng = np.random.default_rng(7)
    for size in (1, 5, 100, 3000):
        for spread in (2, size, 50 * size + 10**6):
            values = rng.integers(0, spread, size)
            assert _support._has_repeat(values) == (np.unique(values).size != values.size)
    assert _support._has_repeat(np.array([-3, 5, -3])) and not _support._has_repeat(np.array([-3, 5]))


def test_ownership_check_fails_on_a_missing_holder_and_on_a_stale_replica():
    loop = Fragment((8, 8), lambda i, j: i)                              # row i runs on thread i
    assert _verdict(loop, Fragment((8,), lambda i: i), lambda i, j: (i,), True) is None
    assert _verdict(loop, Fragment((8,), lambda i: (i + 1) % 8), lambda i, j: (i,), False) == "missing"
    replicated = Fragment((8,), lambda i, r: i + 8 * r, replicate=2)     # a second holder the loop never runs on
    with pytest.raises(AssertionError, match="stale"):
        _support.assert_owned("i,j[8x8]", Fragment((8, 8), lambda i, j: i + 8 * (j % 2) * 0).to_dict(), "f",
                              replicated.to_dict(), lambda i, j: (i,), write=True)
    # one writer per element (the holder-lookup way): column j runs on thread j, its replica on thread j + 8
    pairs = Fragment((8, 8), lambda i, j, r: j + 8 * r, lambda i, j: i, replicate=2)
    by_column = Fragment((8, 8), lambda i, j: j)
    assert _verdict(by_column, pairs, lambda i, j: (i, j), False) is None
    with pytest.raises(AssertionError, match=r"replicas on threads \[8, 9, 10, 11, 12, 13, 14, 15\] stale"):
        _support.assert_owned("i,j[8x8]", by_column.to_dict(), "f", pairs.to_dict(), lambda i, j: (i, j), write=True)


def test_a_remembered_yes_is_only_for_the_same_question():
    """The memo of answered questions keys on both layouts, the elements accessed and the access kind: the
    same loop over a fragment that lost a holder, or a write where a read passed, is judged again."""
    _support._OWNED.clear()
    loop = Fragment((8, 8), lambda i, j: j)
    pairs = Fragment((8, 8), lambda i, j, r: j + 8 * r, lambda i, j: i, replicate=2)
    _support.assert_owned("i,j[8x8]", loop.to_dict(), "f", pairs.to_dict(), lambda i, j: (i, j))
    with pytest.raises(AssertionError, match="stale"):
        _support.assert_owned("i,j[8x8]", loop.to_dict(), "f", pairs.to_dict(), lambda i, j: (i, j), write=True)
    moved = Fragment((8, 8), lambda i, j: (j + 1) % 8, lambda i, j: i)
    with pytest.raises(AssertionError, match="does not hold"):
        _support.assert_owned("i,j[8x8]", loop.to_dict(), "f", moved.to_dict(), lambda i, j: (i, j))
    with pytest.raises(AssertionError, match="does not hold"):
        _support.assert_owned("i,j[8x8]", loop.to_dict(), "f", pairs.to_dict(), lambda i, j: (i, (j + 1) % 8))
