"""CuTe objects: IntTuples, printing and parsing, coordinates, restrict, swizzles, symbolic leaves, errors."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import sym, tirx

from tilelayout import cute
from tilelayout.cute import ComposedLayout, CuteError, E, Layout, ScaledBasis, Swizzle
from tilelayout.cute.algebra import values
from tilelayout.errors import LayoutError
from tilelayout.expr import substitute


def rand_tree(rng, depth=0):
    if depth < 2 and rng.random() < 0.4:
        return tuple(rand_tree(rng, depth + 1) for _ in range(int(rng.integers(1, 4))))
    return int(rng.choice([1, 2, 3, 4, 8, 16]))


def test_str_is_cute_spelling():
    assert str(Layout(((2, 2), 3), ((24, 2), 8))) == "((2,2),3):((24,2),8)"
    assert str(Layout((4,), (1,))) == "(4):(1)"
    assert str(Layout(8)) == "8:1"
    assert str(Layout((2, 3))) == "(2,3):(1,2)"
    assert str(cute.make_identity_layout(((2, 3), 4))) == "((2,3),4):((1@0@0,1@0@1),1@1)"
    assert str(ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1)))) == "Sw<3,3,3> o 0 o (8,64):(64,1)"


def test_parse_round_trip_random():
    rng = np.random.default_rng(31)
    for _ in range(500):
        shape = rand_tree(rng)
        flat = [int(x) for x in rng.integers(-3, 40, size=len(cute.flatten(shape)))]
        if rng.random() < 0.2:
            flat = [ScaledBasis(x, int(rng.integers(3))) for x in flat]
        it = iter(flat)

        def rebuild(s):
            return tuple(rebuild(x) for x in s) if isinstance(s, tuple) else next(it)
        layout = Layout(shape, rebuild(shape))
        text = str(layout)
        assert cute.parse(text) == layout and str(cute.parse(text)) == text
        assert Layout.parse(text.replace(",", ", ")) == layout  # spaces are tolerated


def test_parse_composed_and_pycute_spelling():
    c = cute.parse("SW_2_3_3 o 4 o (8,32):(32,1)")
    assert c == ComposedLayout(Swizzle(2, 3, 3), 4, Layout((8, 32), (32, 1)))
    assert cute.parse(str(c)) == c


@pytest.mark.parametrize("text", ["(2,2):(1)", "(2,2)", "(2,2):(1,2", "2:1 junk", "(a):(1)", "2:1@", ""])
def test_parse_errors(text):
    with pytest.raises(CuteError):
        cute.parse(text)


def test_calls_int_natural_hierarchical():
    layout = Layout(((2, 2), 3), ((24, 2), 8))
    assert layout(5) == 32  # 5 -> (1, 1): (1 % 2) * 24 + (1 // 2 ... ) column-major through the modes
    assert layout((1, 2)) == 24 + 16  # hierarchical: an int inside the nested first mode
    assert layout(((1, 1), 2)) == 24 + 2 + 16  # natural
    assert layout(1, 2) == layout((1, 2))
    assert [layout(i) for i in range(cute.size(layout))] == list(values(layout, np.arange(12)))
    assert layout[0] == Layout((2, 2), (24, 2)) and layout[1] == Layout(3, 8)
    assert layout(None, 1) == Layout(((2, 2),), ((24, 2),))  # slicing keeps the None modes


def test_shape_queries():
    layout = Layout(((2, 2), 3), ((24, 2), 8))
    assert cute.rank(layout.shape) == cute.rank(layout) == len(layout) == 2 and cute.rank(Layout(8)) == 1
    assert cute.depth(layout.shape) == cute.depth(layout) == 2 and cute.depth(4) == 0
    assert cute.congruent(layout, Layout(((1, 1), 1))) and cute.compatible(Layout(12), layout)
    assert cute.size(layout) == 12 and cute.cosize(layout) == 24 + 2 + 16 + 1 == cute.coshape(layout)
    assert cute.coshape(cute.make_identity_layout((4, 8))) == (4, 8)
    assert cute.flatten(layout) == Layout((2, 2, 3), (24, 2, 8))
    assert cute.flatten(layout.shape) == (2, 2, 3)
    assert cute.congruent(((1, 2), 3), ((4, 5), 6)) and not cute.congruent((1, 2), ((1, 2), 3))
    assert cute.compatible(12, ((2, 2), 3)) and cute.compatible((4, 3), ((2, 2), 3))
    assert not cute.compatible(((2, 2), 3), (4, 3)) and not cute.compatible(6, (4, 3))
    assert str(cute.make_row_major_layout(((2, 2), 3))) == "((2,2),3):((6,3),1)"
    assert str(cute.make_column_major_layout((4, 8))) == "(4,8):(1,4)"
    assert str(cute.make_layout((4, 8), (8, 1))) == "(4,8):(8,1)"
    assert str(cute.make_layout([Layout(4, 1), Layout(8, 4)])) == "(4,8):(1,4)"


def test_with_shape_splits_a_cell_index():
    inv = Layout((4, 32), (32, 1))  # cell -> element address
    a = inv.with_shape((8, 16))
    assert np.array_equal(values(a, np.arange(128)), values(inv, np.arange(128)))
    assert str(a) == "((4,2),16):((32,1),2)"
    with pytest.raises(CuteError):
        inv.with_shape((8, 8))  # sizes differ


def test_restrict():
    off, sub = cute.restrict(Layout((8, 4), (1, 8)), [(2, 4), (1, 2)])
    assert off == 10 and str(sub) == "(4,2):(1,8)"
    off, sub = cute.restrict(Layout(((4, 2), 8), ((1, 64), 4)), [(4, 4), slice(0, 8)])
    assert off == 64 and str(sub) == "(4,8):(1,4)"
    off, sub = cute.restrict(Layout(((4, 2), 8), ((1, 64), 4)), [(2, 4), None])
    assert off == 2 and str(sub) == "((2,2),8):((1,62),4)"  # the window straddles the split: still strided
    with pytest.raises(CuteError, match="rank"):
        cute.restrict(Layout((8, 4), (1, 8)), [(0, 2)])
    with pytest.raises(CuteError, match="outside"):
        cute.restrict(Layout((8, 4), (1, 8)), [(6, 4), None])
    with pytest.raises(CuteError, match="not a strided layout"):
        cute.restrict(Layout(((4, 2),), ((1, 64),)), [(1, 4)])  # 1, 2, 3, 64
    off, sub = cute.restrict(Layout(((4, 2),), ((1, 64),)), [(1, 6)])  # 1, 2, 3, 64, 65, 66
    assert off == 1 and str(sub) == "((3,2)):((1,63))"


def test_restrict_random_windows_agree_with_enumeration():
    rng = np.random.default_rng(32)
    hits = 0
    for _ in range(300):
        layout = Layout((int(rng.choice([4, 8, 12])), (2, int(rng.choice([2, 4])))),
                        (int(rng.choice([1, 3])), (16, 100)))
        region = []
        for mode in layout:
            n = cute.size(mode)
            b = int(rng.integers(n))
            region.append((b, int(rng.integers(1, n - b + 1))))
        try:
            off, sub = cute.restrict(layout, region)
        except CuteError:
            continue
        hits += 1
        g = np.meshgrid(*[np.arange(e) for _, e in region], indexing="ij")
        got = off + values(sub[0], g[0].ravel()) + values(sub[1], g[1].ravel())
        want = values(layout[0], g[0].ravel() + region[0][0]) + values(layout[1], g[1].ravel() + region[1][0])
        assert np.array_equal(got, want)
    assert hits > 150


def test_right_inverse_bijectivity_check_documented():
    bij = Layout((4, 8), (8, 1))
    assert cute.size(cute.right_inverse(bij)) == cute.size(bij)
    holey = Layout((4, 8), (16, 1))  # image has gaps: only the first 8 cells invert
    assert cute.size(cute.right_inverse(holey)) == 8 != cute.size(holey)


def test_swizzle_semantics():
    sw = Swizzle(3, 3, 3)
    assert [sw(i * 64) for i in range(4)] == [0, 72, 144, 216]  # row i of a 64-wide tile: chunk i XOR
    assert sw(sw(12345)) == 12345
    e = sw(tirx.Var("a", "int32"))
    assert "^" in str(e) or "bitwise_xor" in str(e)
    assert Swizzle(2, 4, -3)(0b110000) == 0b110000 | 0b11 << 7  # negative shift: bits 4-5 into bits 7-8
    with pytest.raises(CuteError):
        Swizzle(3, 3, 2)


def test_errors_are_typed():
    with pytest.raises(CuteError) as info:
        cute.composition(Layout((3, 4), (1, 10)), Layout(2, 4))
    assert isinstance(info.value, ValueError) and isinstance(info.value, LayoutError)
    assert "divisibility" in str(info.value)
    with pytest.raises(CuteError, match="not injective"):
        cute.complement(Layout((2, 2), (1, 1)), 8)
    with pytest.raises(CuteError, match="divisibility"):
        cute.left_inverse(Layout((2, 2), (2, 3)))
    with pytest.raises(CuteError, match="congruent"):
        Layout((2, 3), (1,))
    with pytest.raises(CuteError):
        Layout(8)[1]
    with pytest.raises(CuteError, match="rank"):
        cute.logical_divide(Layout(8), (Layout(2), Layout(2)))
    with pytest.raises(CuteError):
        Layout((2, "x"))


def test_symbolic_leaves():
    n = tirx.Var("n", "int32")
    layout = Layout((4, n), (1, 4))
    assert str(cute.size(layout)) == "4 * n"
    assert str(cute.coalesce(layout)) == "4 * n:1"  # 4*1 == 4 is provable, so the modes merge
    assert str(cute.coalesce(Layout((4, n), (1, n)))) == "(4,n):(1,n)"  # 4 == n is not
    assert layout((3, 2)) == 11
    with pytest.raises(CuteError, match="symbolic extent"):
        cute.composition(layout, Layout(n, 1))
    assert str(cute.complement(layout, 64)) == "(n * 4 + 63) // (n * 4):4 * n"  # static strides: as C++
    with pytest.raises(CuteError, match="only for rank-1"):
        cute.complement(Layout((4, 8), (1, n)), 64)
    r = cute.right_inverse(Layout((4, 8), (1, n)))  # the symbolic-stride mode is skipped
    assert str(r) == "4:1"


def test_basis_arithmetic():
    assert str(E(1) * 4) == "4@1" and E(0, 1).to_tuple() == ((0, 1),)
    assert cute.make_identity_layout((2, 3))((1, 2)) == (1, 2)
    h = Layout((4, 8), (E(1) * 2, E(0)))
    assert h((3, 5)) == (5, 6)
    assert cute.coalesce(Layout((2, 4), (E(0), E(0) * 2))) == Layout(8, E(0))
    assert str(cute.composition(h, Layout(8, 2))) == "(2,4):(4@1,1@0)"
    assert str(cute.composition(h, Layout(8, 4))) == "8:1@0"


def test_restrict_symbolic_origin():
    """A symbolic window origin (a tile loop's j * step) is accepted when provably aligned; the answer must be the
    one for each concrete j."""
    j = tirx.Var("j", "int32")
    cases = [(Layout((128, 64), (64, 1)), [(64, 64), None]),
             (Layout(((8, 16), 64), ((64, 1024), 1)), [(16, 16), (0, 8)]),
             (Layout(((8, 16), 64), ((64, 1024), 1)), [(8, 3), (0, 8)]),
             (cute.make_identity_layout((128, 64)), [(32, 32), (8, 8)])]
    for layout, region in cases:
        step, extent = region[0]
        off, sub = cute.restrict(layout, [(j * step, extent)] + region[1:])
        for jv in range(cute.size(layout[0]) // max(step, extent)):
            want_off, want_sub = cute.restrict(layout, [(jv * step, extent)] + region[1:])
            assert str(want_sub) == str(sub)
            first = off[0] if isinstance(off, tuple) else off
            want = want_off[0] if isinstance(want_off, tuple) else want_off
            assert int(sym.Analyzer().simplify(substitute(first, {j: tirx.IntImm("int32", jv)}))) == want
    with pytest.raises(CuteError, match="not provably aligned"):
        cute.restrict(Layout((128, 64), (64, 1)), [(j * 48, 64), None])
    with pytest.raises(CuteError, match="not provably aligned"):
        cute.restrict(Layout(((4, 32), 64), ((1, 64), 1)), [(j * 8, 16), None])
