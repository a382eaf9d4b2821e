"""``epilogue.minimum_bytes``: the bytes of the distinct 128-byte segments a store's region covers, against the
definition (every element's segment collected in a set), for strides of every sign and size."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from tilelayout.passes.inference.epilogue import minimum_bytes


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_minimum_bytes_equals_the_segments_counted_one_by_one(data):
    shape = data.draw(st.lists(st.sampled_from([1, 2, 3, 8, 17, 32]), min_size=1, max_size=3))
    strides = data.draw(st.lists(st.sampled_from([0, 1, -1, 2, 33, 128, -256, 4096, 1 << 20]),
                                 min_size=len(shape), max_size=len(shape)))
    base = data.draw(st.sampled_from([0, 5, 1 << 21]))
    elem_bytes = data.draw(st.sampled_from([1, 2, 4, 8]))
    repeat = data.draw(st.sampled_from([None, 1, 3]))
    access = SimpleNamespace(base=base, strides=strides, elem_bytes=elem_bytes)
    statement = SimpleNamespace(frag=SimpleNamespace(input_shape=shape), repeat=repeat)
    segments = {(base + sum(c * d for c, d in zip(point, strides))) * elem_bytes // 128
                for point in itertools.product(*[range(n) for n in shape])}
    assert minimum_bytes(statement, access) == len(segments) * 128 * (repeat or 1)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_rows_counted_in_closed_form_equal_the_enumeration(data):
    """The closed form for contiguous rows a whole number of segments apart (``_row_segments``), on the shapes it
    takes (unit dims included, rows that do and do not share a segment): the same count as enumerating them."""
    from tilelayout.passes.inference.epilogue import _row_segments
    elem_bytes = data.draw(st.sampled_from([1, 2, 4, 8]))
    cols = data.draw(st.sampled_from([1, 8, 31, 32, 64, 128, 200]))
    rows = data.draw(st.sampled_from([1, 2, 7, 64]))
    stride = data.draw(st.sampled_from([16, 32, 64, 128, 256, 1024, 48, -128]))
    shape, strides = [rows, cols], [stride, 1]
    if data.draw(st.booleans()):
        shape, strides = [1] + shape, [data.draw(st.sampled_from([0, 7, 4096]))] + strides
    base = data.draw(st.sampled_from([0, 3, 16, 100, 1 << 20]))
    access = SimpleNamespace(base=base, strides=strides, elem_bytes=elem_bytes)
    statement = SimpleNamespace(frag=SimpleNamespace(input_shape=shape), repeat=None)
    segments = {(base + sum(c * d for c, d in zip(point, strides))) * elem_bytes // 128
                for point in itertools.product(*[range(n) for n in shape])}
    closed = _row_segments(shape, access)
    assert closed is None or closed == len(segments)
    assert minimum_bytes(statement, access) == len(segments) * 128
