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
