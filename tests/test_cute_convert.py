"""Converters tilelayout <-> CuTe: probe-then-prove, checked by exact enumeration of both sides."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import tirx

from tilelayout import cute
from tilelayout.cute import ComposedLayout, E, Layout, ScaledBasis, Swizzle
from tilelayout.cute.algebra import values
from tilelayout.fragment import Fragment
from tilelayout.layout import Layout as TL



def rand_layout(rng, kind=None, max_size=128, leaves=(1, 2, 2, 3, 4, 4, 6, 8)) -> Layout:
    """Random shape (rank 1-3, some nested modes); strides compact in a random order, or random."""
    while True:
        modes = [tuple(int(rng.choice(leaves)) for _ in range(int(rng.integers(1, 4)))) if rng.random() < 0.35
                 else int(rng.choice(leaves)) for _ in range(int(rng.integers(1, 4)))]
        shape = modes[0] if len(modes) == 1 and rng.random() < 0.5 else tuple(modes)
        if cute.size(shape) <= max_size:
            break
    flat = cute.flatten(shape)
    if (kind or rng.choice(["compact", "random"])) == "compact":
        strides, cur = [0] * len(flat), 1
        for k in rng.permutation(len(flat)):
            strides[k], cur = cur, cur * flat[k]
    else:
        strides = [int(rng.choice([0, 1, 2, 3, 4, 8, 16])) for _ in flat]
    it = iter(strides)

    def rebuild(s):
        return tuple(rebuild(x) for x in s) if isinstance(s, tuple) else next(it)
    return Layout(shape, rebuild(shape))


def flat_table(tl_layout) -> np.ndarray:
    """Row-major serialisation of a tilelayout layout's outputs at every input point."""
    tab = tl_layout.table()
    out = np.zeros(tab.shape[:-1], dtype=np.int64)
    for k, s in enumerate(tl_layout.output_shape):
        out = out * s + tab[..., k]
    return out


def cute_grid(layout: Layout, dims) -> np.ndarray:
    """A CuTe layout (one top mode per axis) evaluated on the natural grid of ``dims``."""
    modes = list(layout) if isinstance(layout.shape, tuple) else [layout]
    out = 0
    for d, (m, n) in enumerate(zip(modes, dims)):
        view = [1] * len(dims)
        view[d] = n
        out = out + values(m, np.arange(n)).reshape(view)
    return np.broadcast_to(out, tuple(dims))


# ------------------------------------------------------------------------------------------- from_tilelang

def test_row_major_and_transposed():
    rm = TL([16, 8], lambda i, j: i * 8 + j)
    assert str(Layout.from_tilelang(rm)) == "(16,8):(8,1)"
    tr = TL([16, 8], lambda i, j: [j, i])
    assert str(Layout.from_tilelang(tr)) == "(16,8):(1,16)"  # [j, i] serialised row-major: j * 16 + i
    assert str(Layout.from_tilelang_hierarchical(tr)) == "(16,8):(1@1,1@0)"


def test_split_axes_become_sub_modes():
    split = TL([16, 16], lambda i, j: i // 8 * 128 + i % 8 + j * 8)
    c = Layout.from_tilelang(split)
    assert str(c) == "((8,2),16):((1,128),8)"
    assert np.array_equal(cute_grid(c, [16, 16]), flat_table(split))
    one = TL([16], lambda i: i % 4 * 4 + i // 4)
    assert str(Layout.from_tilelang(one)) == "((4,4)):((4,1))"  # rank stays the number of inputs


def test_unconvertible_layouts_give_none():
    assert Layout.from_tilelang(TL([8], lambda i: i * i)) is None  # not strided
    assert Layout.from_tilelang(TL([6], lambda i: i % 4 * 10 + i // 4)) is None  # 4 does not divide 6
    assert Layout.from_tilelang(TL([8], lambda i: i + 3)) is None  # CuTe layouts map 0 to 0
    n = tirx.Var("n", "int32")
    assert Layout.from_tilelang(TL([n, 4], lambda i, j: i * 4 + j)) is None  # symbolic extent
    xor = TL([8, 8], lambda i, j: i * 8 + tirx.bitwise_xor(j, i))
    assert Layout.from_tilelang(xor) is None  # a swizzle: only ComposedLayout.from_tilelang recovers it
    assert Layout.from_tilelang_hierarchical(TL([8], lambda i: [i, i])) is None  # one stride on two axes
    assert Layout.from_tilelang("not a layout") is None  # never raises


def test_replicated_fragment_needs_packing():
    frag = Fragment([8, 8], lambda i, j, r: (i * 8 + j) % 32 + r * 32, replicate=2)
    assert Layout.from_tilelang(frag) is None  # the replica variable is not a probeable input
    packed = cute.pack_fragment(frag)
    assert packed.input_shape == [8, 8, 2] and packed.output_shape == [64, 2]
    c = Layout.from_tilelang(packed)
    assert str(c) == "((4,2),8,2):((16,1),2,64)"
    assert np.array_equal(cute_grid(c, [8, 8, 2]), flat_table(packed))
    inv = cute.right_inverse(c)
    assert cute.size(inv) == cute.size(c)  # the packing is a bijection onto [thread, slot]


def test_pack_fragment_matches_fragment_tables():
    frag = Fragment([16, 16], lambda i, j: i // 2 * 4 + j // 4 % 4)
    packed = cute.pack_fragment(frag)
    tab = packed.table()
    assert packed.input_shape == [16, 16, 1]
    assert np.array_equal(tab[..., 0], frag.thread_table())
    assert np.array_equal(tab[..., 0, 1], frag.table()[..., 0])
    frag2 = Fragment([4, 8], lambda i, j, r: j + r * 8, lambda i, j: [i], replicate=4)
    tab2 = cute.pack_fragment(frag2).table()
    assert np.array_equal(tab2[..., 0], frag2.thread_table())
    assert np.array_equal(tab2[..., 1], np.broadcast_to(frag2.table()[..., :1], (4, 8, 4)))


def test_random_cute_layouts_round_trip():
    rng = np.random.default_rng(21)
    for _ in range(250):
        c = rand_layout(rng, max_size=128)
        t = c.to_tilelang()
        assert np.array_equal(flat_table(t), cute_grid(c, t.input_shape))
        back = Layout.from_tilelang(t)
        assert back is not None, c
        assert np.array_equal(cute_grid(back, t.input_shape), flat_table(t))
        want = cute.coalesce(c, (1,) * len(c)) if isinstance(c.shape, tuple) else cute.coalesce(c)
        if isinstance(want.shape, tuple) and len(want) == 1 and not isinstance(want.shape[0], tuple):
            want = want[0]  # a rank-1 mode of one leaf comes back unwrapped
        assert str(back) == str(want), (c, back, want)


def test_random_hierarchical_round_trip():
    rng = np.random.default_rng(22)
    for _ in range(150):
        c = rand_layout(rng, max_size=128)
        axes = int(rng.integers(1, 4))
        strides = [ScaledBasis(d, int(rng.integers(axes))) if d else 0 for d in cute.flatten(c.stride)]
        it = iter(strides)

        def rebuild(s):
            return tuple(rebuild(x) for x in s) if isinstance(s, tuple) else next(it)
        h = Layout(c.shape, rebuild(c.stride))
        t = h.to_tilelang(num_outputs=axes)
        back = Layout.from_tilelang_hierarchical(t)
        assert back is not None, h
        assert back.to_tilelang(num_outputs=axes).is_equal(t), (h, back)


def test_random_tilelang_expressions_probe_then_prove():
    """Random index expressions: whatever converts must reproduce the table exactly; affine ones must convert."""
    rng = np.random.default_rng(23)
    converted = 0
    for _ in range(200):
        shape = [int(rng.choice([2, 4, 6, 8, 12, 16])) for _ in range(int(rng.integers(1, 4)))]
        terms = []
        for _k in range(len(shape)):
            a, b, m = (int(rng.choice([1, 2, 3, 4, 8])) for _ in range(3))
            terms.append((a, b, m, int(rng.integers(4))))

        def fn(*xs):
            out = 0
            for x, (a, b, m, kind) in zip(xs, terms):
                out = out + [x * a, x // b * a, x % m * a, (x // b % m) * a * 7][kind]
            return out
        tl_layout = TL(shape, fn)
        c = Layout.from_tilelang(tl_layout)
        if all(kind == 0 for *_, kind in terms):
            assert c is not None
        if c is not None:
            converted += 1
            assert np.array_equal(cute_grid(c, shape), flat_table(tl_layout))
    assert converted > 60, converted


# ------------------------------------------------------------------------------------------- swizzles

def test_bank_swizzles_are_recovered():
    sw128 = TL([64, 64], lambda i, j: i * 64 + tirx.bitwise_xor(j // 8, i % 8) * 8 + j % 8)
    c = ComposedLayout.from_tilelang(sw128)
    assert str(c) == "Sw<3,3,3> o 0 o (64,64):(64,1)"
    sw64 = TL([64, 32], lambda i, j: i * 32 + tirx.bitwise_xor(j // 8, i // 2 % 4) * 8 + j % 8)
    assert str(ComposedLayout.from_tilelang(sw64)) == "Sw<2,3,3> o 0 o (64,32):(32,1)"
    sw32 = TL([32, 16], lambda i, j: i * 16 + tirx.bitwise_xor(j // 8, i // 4 % 2) * 8 + j % 8)
    assert str(ComposedLayout.from_tilelang(sw32)) == "Sw<1,3,3> o 0 o (32,16):(16,1)"
    assert c.to_tilelang().is_equal(sw128)


def test_plain_layout_gets_identity_swizzle_and_offset():
    plain = TL([4, 8], lambda i, j: i * 8 + j + 5)
    c = ComposedLayout.from_tilelang(plain)
    assert str(c) == "Sw<0,0,0> o 5 o (4,8):(8,1)"
    assert ComposedLayout.from_tilelang(TL([8], lambda i: i * i)) is None


def test_random_swizzles_round_trip():
    rng = np.random.default_rng(24)
    for _ in range(60):
        a = rand_layout(rng, "compact", max_size=256, leaves=[2, 4, 8])
        b = int(rng.integers(1, 4))
        sw = Swizzle(b, int(rng.integers(0, 3)), int(rng.integers(b, 4)))
        t = ComposedLayout(sw, 0, a).to_tilelang()
        back = ComposedLayout.from_tilelang(t)
        assert back is not None, (sw, a)
        assert np.array_equal(flat_table(back.to_tilelang()), flat_table(t))


def test_identity_layout_to_tilelang():
    ident = cute.make_identity_layout((4, 8))
    t = ident.to_tilelang()
    assert t.input_shape == [4, 8]
    assert np.array_equal(t.table()[1, 2], [1, 2])
    assert ident((1, 2)) == (1, 2)
    assert ident(5) == (1, 1)
    assert Layout((4, 8), (E(1), E(0))).to_tilelang().is_equal(TL([4, 8], lambda i, j: [j, i]))


def test_to_tilelang_refuses_mixed_strides():
    with pytest.raises(cute.CuteError):
        Layout((4, 8), (1, E(1))).to_tilelang()
