"""TileLang's CuTe layout-algebra tests (testing/python/layout/test_tilelang_cute.py), ported to tl.cute.

Expected values are TileLang's, which it pins against the CUTLASS 4.x headers. Ported: the algebra (coalesce,
composition with integer and basis strides, right_inverse, filter, cosize/coshape, complement, logical_divide,
logical/tiled/blocked products, restrict, the makers). Not ported: its IntTuple object API (from_python /
to_python), ComposedLayout.recast and the swizzle detector on TileLang's own layout makers and buffers, which
have tilelayout counterparts tested in test_cute_convert.py; and the CUDA-only TMA copy.
"""
from __future__ import annotations

import pytest
from tvm import sym, tirx

from tilelayout import cute
from tilelayout.cute import CuteError, E, Layout
from tilelayout.expr import substitute


def same_struct(actual, shape, stride):
    assert str(actual) == str(cute.make_layout(shape, stride=stride)), (str(actual), shape, stride)


def same_fn(result, ref):
    assert cute.size(result) == cute.size(ref)
    for i in range(cute.size(ref)):
        assert result(i) == ref(i), i


def proves(e) -> bool:
    return bool(sym.Analyzer().can_prove(e))


@pytest.mark.parametrize("shape,stride", [
    ((1,), (0,)), ((1,), (1,)), ((2, 4), (1, 2)), ((2, 4, 6), (1, 2, 8)), ((2, 4, 6), (1, 6, 2)),
    ((2, 1, 6), (1, 7, 2)), ((2, 1, 6), (4, 7, 8)), ((2, 4), (4, 1)), ((2, 4, 6), (24, 6, 1)), ((2, 1, 3), (2, 4, 4)),
    ((2, (4, 6)), None), (((2, 2), (2, 2)), ((1, 4), (8, 32))),
])
def test_coalesce_preserves_function(shape, stride):
    layout = cute.make_layout(shape, stride=stride)
    same_fn(cute.coalesce(layout), layout)


def test_coalesce_structural_results():
    same_struct(cute.coalesce(cute.make_layout((2, 2, 2, 2, 2), stride=(1, 2, 4, 8, 16))), 32, 1)
    same_struct(cute.coalesce(cute.make_layout((8, 8), stride=(64, 1))), (8, 8), (64, 1))
    same_struct(cute.coalesce(cute.make_layout((1, 1), stride=(5, 7))), 1, 0)
    same_struct(cute.coalesce(cute.make_layout(((2, 2), (2, 2)), stride=((1, 4), (8, 32)))), (2, 4, 2), (1, 4, 32))


@pytest.mark.parametrize("shape,stride", [
    ((1,), (0,)), ((1, 1), (0, 0)), ((3, 7), (0, 0)), ((1,), (1,)), ((4,), (0,)), ((4,), (1,)), ((4,), (2,)),
    ((2, 4), (0, 2)), ((8, 4), (1, 8)), ((8, 4), (4, 1)), ((2, 4, 6), (1, 2, 8)), ((2, 4, 6), (4, 1, 8)),
    ((4, 2), (1, 16)), ((64, 8), (1, 64)),
])
def test_right_inverse(shape, stride):
    layout = cute.make_layout(shape, stride=stride)
    inv = cute.right_inverse(layout)
    for i in range(cute.size(inv)):
        assert layout(inv(i)) == i


@pytest.mark.parametrize("ashape,astride,bshape,bstride", [
    ((1,), (0,), (1,), (0,)), ((1,), (1,), (1,), (1,)), ((4,), (1,), (4,), (1,)), ((4,), (2,), (4,), (1,)),
    ((4,), (0,), (4,), (1,)), ((4,), (1,), (2,), (2,)), ((4,), (2,), (2,), (2,)), ((12,), (1,), (4, 3), (3, 1)),
    ((12,), (1,), (2, 3), (2, 4)), ((12,), (2,), (4, 3), (1, 4)), ((4, 3), (1, 4), (12,), (1,)),
    ((4, 3), (1, 4), (6,), (2,)), ((4, 3), (3, 1), (12,), (1,)), ((4, 3), (3, 1), (6, 2), (2, 1)),
    ((4, 8), (8, 1), (8, 4), (1, 8)), ((2, 3, 4), (1, 2, 6), (6, 4), (1, 6)), ((64, 8), (8, 1), (8, 64), (1, 8)),
    ((8, 8), (8, 1), (2, 4), (1, 4)), ((4, 8, 2), (1, 4, 32), (8,), (2,)), ((2, 2), (1, 2), (4,), (1,)),
    ((4, 4), (1, 4), (8,), (1,)), ((3, 4), (1, 3), (6,), (1,)), ((4, 1), (1, 0), (4,), (1,)),
    ((8, 1), (1, 0), (8,), (1,)), ((8, 8), (8, 1), ((2, 2, 2), (2, 2, 2)), ((1, 16, 4), (8, 2, 32))),
    (((4, 2),), ((1, 16),), (4, 2), (2, 1)), ((4, 8, 2), (2, 8, 1), (2, 2, 2), (1, 8, 2)),
    ((4, 6, 8), (1, 4, 7), (6,), (1,)), ((4, 6, 8, 10), (2, 3, 5, 7), (6,), (12,)),
    (((2, 2, 2), (2, 2, 2)), ((1, 16, 4), (8, 2, 32)), (8,), (4,)),
    ((8, 8), None, ((2, 2, 2), (2, 2, 2)), ((1, 16, 4), (8, 2, 32))), ((4, 8, 2), (2, 8, 1), (4, 2, 2), (2, 8, 1)),
])
def test_composition_matches_bruteforce(ashape, astride, bshape, bstride):
    a = cute.make_layout(ashape, stride=astride)
    b = cute.make_layout(bshape, stride=bstride)
    r = cute.composition(a, b)
    assert cute.size(r) == cute.size(b)
    for i in range(cute.size(b)):
        assert r(i) == a(b(i))


def test_composition_structural_results():
    same_struct(cute.composition(cute.make_layout((4,), stride=(1,)), cute.make_layout((4,), stride=(2,))), (4,), (2,))
    r = cute.composition(cute.make_layout((4, 3), stride=(3, 1)), cute.make_layout((12,), stride=(1,)))
    assert cute.flatten(r.shape) == (4, 3) and cute.flatten(r.stride) == (3, 1)


def test_composition_scaled_basis_routing():
    same_struct(cute.composition(cute.make_layout((8, 4), stride=(10, 100)),
                                 cute.make_layout((4, 8), stride=(E(1), E(0)))), (4, 8), (100, 10))
    same_struct(cute.composition(cute.make_layout((16, 16), stride=(1, 16)), cute.make_identity_layout((4, 4))),
                (4, 4), (1, 16))


def test_composition_scaled_basis_dynamic_strides():
    s_m, s_n = tirx.Var("s_m", "int32"), tirx.Var("s_n", "int32")
    r = cute.composition(cute.make_layout((16, 16), stride=(s_m, s_n)), cute.make_identity_layout((4, 4)))
    assert r.shape == (4, 4)
    assert r.stride[0].same_as(s_m) and r.stride[1].same_as(s_n)


def test_right_inverse_composition_smem_to_gmem():
    smem = cute.make_layout((8, 64), stride=(64, 1))
    gmem = cute.make_layout((8, 64), stride=(1024, 1))
    composite = cute.composition(gmem, cute.right_inverse(smem))
    for c in range(8 * 64):
        assert composite(smem(c)) == gmem(c)


def test_tma_box_validity_via_composite():
    gmem = cute.make_layout((8, 64), stride=(256, 1))
    ok = cute.coalesce(cute.composition(gmem, cute.right_inverse(cute.make_layout((8, 64), stride=(64, 1)))))
    bad = cute.coalesce(cute.composition(gmem, cute.right_inverse(cute.make_layout((8, 64), stride=(1, 8)))))
    assert cute.flatten(ok.stride)[0] == 1 and cute.flatten(bad.stride)[0] != 1


def test_filter():
    same_struct(cute.filter(cute.make_layout((4, 1, 2), stride=(1, 0, 8))), (4, 2), (1, 8))
    same_struct(cute.filter(cute.make_layout((1, 1), stride=(5, 7))), 1, 0)
    s = tirx.Var("s", "int32")
    assert str(cute.filter(cute.make_layout((4, 1, 8), stride=(s, 0, 1)))) == "(4,8):(s,1)"


def test_cosize_and_coshape():
    assert cute.cosize(cute.make_layout((4, 2), stride=(1, 8))) == 12
    assert cute.cosize(cute.make_layout((8, 8), stride=(8, 1))) == 64
    assert cute.cosize(cute.make_layout((64, 8), stride=(8, 1))) == 512
    basis = cute.make_layout((128, 32), stride=(E(0), E(1)))
    assert cute.coshape(basis) == (128, 32) and cute.cosize(basis) == 128 * 32
    f = cute.make_layout(((16, 4), 32), stride=((E(0), 32 * E(0)), E(1)))
    assert cute.coshape(f) == (112, 32)
    assert cute.coshape(cute.make_layout((4, 2), stride=(1, 8))) == 12


def test_cosize_dynamic_is_symbolic():
    s = tirx.Var("s", "int32")
    got = cute.cosize(cute.make_layout((4, 8), stride=(s, 1)))
    for sv in (5, -5):
        assert int(sym.Analyzer().simplify(substitute(got, {s: tirx.IntImm("int32", sv)}))) == 3 * 5 + 8


def test_complement():
    same_fn(cute.complement(cute.make_layout(2, stride=1), 16), cute.make_layout(8, stride=2))
    same_fn(cute.complement(cute.make_layout(4, stride=1), 24), cute.make_layout(6, stride=4))
    same_struct(cute.complement(cute.make_layout(2, stride=1), 16), 8, 2)
    same_struct(cute.complement(cute.make_layout(4, stride=1), 24), 6, 4)


def test_complement_rank1_dynamic():
    s = tirx.Var("s", "int32")
    comp = cute.complement(cute.make_layout(4, stride=s), 1024)
    assert comp.shape[0].same_as(s) and comp.stride[0] == 1
    assert proves(comp.stride[1] == 4 * s)


def test_complement_rank_gt1_dynamic_rejected():
    s = tirx.Var("s", "int32")
    with pytest.raises(CuteError, match="rank-1"):
        cute.complement(cute.make_layout((4, 8), stride=(s, 1)), 1024)


def test_logical_divide():
    same_fn(cute.logical_divide(cute.make_layout(8, stride=1), cute.make_layout(2, stride=1)),
            cute.make_layout((2, 4), stride=(1, 2)))
    same_struct(cute.logical_divide(cute.make_layout(8, stride=1), cute.make_layout(2, stride=1)), (2, 4), (1, 2))
    same_struct(cute.logical_divide(cute.make_layout(8, stride=1), cute.make_layout(8, stride=1)), (8, 1), (1, 0))
    same_struct(cute.logical_divide(cute.make_layout(128, stride=4), cute.make_layout(8, stride=1)), (8, 16), (4, 32))


def test_logical_divide_dynamic_layout_stride():
    s = tirx.Var("s", "int32")
    r = cute.logical_divide(cute.make_layout(8, stride=s), cute.make_layout(2, stride=1))
    assert proves(r(1) == s) and proves(r(2) == 2 * s) and proves(r(0) == 0)


def test_compatible():
    n = tirx.Var("n", "int32")
    assert cute.compatible((2, 3), ((1, 2), 3))
    assert not cute.compatible(((1, 2), 3), (2, 3))
    assert not cute.compatible((2, 3), (6,))
    assert cute.compatible((n + n, 4), ((n, 2), (2, 2)))


@pytest.mark.parametrize("block,tiler", [
    (Layout(1, 0), Layout(1, 0)), (Layout(1, 1), Layout(1, 0)), (Layout(1, 0), Layout(1, 1)), (Layout(1, 1), Layout(1, 1)),
    (Layout(3, 1), Layout(4, 0)), (Layout(3, 0), Layout(4, 1)), (Layout(3, 0), Layout(4, 0)), (Layout(3, 2), Layout(4, 1)),
    (Layout((3, 1)), Layout((2, 4))), (Layout((2, 4)), Layout(3)), (Layout((8, (2, 2))), Layout(4, 2)),
    (Layout((2, 2)), Layout((3, 3), (3, 1))), (Layout(3, 32), Layout(32)), (Layout(3, 2), Layout(4)),
    (Layout(3, 32), Layout(128)), (Layout(3, 32), Layout((8, 8))), (Layout(3, 32), Layout((8, 8), (8, 1))),
    (Layout(((4, 2),), ((1, 16),)), Layout((4, 4))), (Layout(((4, 2),), ((1, 16),)), Layout((4, 2), (2, 1))),
    (Layout(((2, 2), (2, 2)), ((1, 4), (8, 32))), Layout((2, 2), (1, 2))),
    (Layout(((2, 2), (2, 2)), ((1, 4), (8, 32))), Layout((2, 2), (2, 1))), (Layout(((4, 6),), ((1, 6),)), Layout(3)),
])
def test_logical_product_core_cases(block, tiler):
    result = cute.logical_product(block, tiler)
    assert cute.rank(result) == 2 and result[0] == block
    assert cute.compatible(tiler.shape, result[1].shape)


def test_logical_product_tmem_tiling():
    atom, outer = cute.make_layout((128, 16)), cute.make_layout((2, 4))
    result = cute.logical_product(atom, outer)
    same_struct(result, ((128, 16), (2, 4)), ((1, 128), (2048, 4096)))
    tiled = cute.tiled_product(atom, outer)
    same_struct(tiled, ((128, 16), 2, 4), ((1, 128), 2048, 4096))
    for m in range(2):
        for n in range(4):
            assert tiled(((0, 0), m, n)) == result(((0, 0), (m, n)))


def test_logical_product_nested_strided_layout_exactly():
    result = cute.logical_product(cute.make_layout(((4, 2),), stride=((1, 16),)), cute.make_layout((4, 2), stride=(2, 1)))
    same_struct(result, (((4, 2),), ((2, 2), 2)), (((1, 16),), ((8, 32), 4)))


def test_tiled_product_unpacks_complement_split_modes():
    block, tiler = cute.make_layout(3, stride=32), cute.make_layout(128)
    logical = cute.logical_product(block, tiler)
    same_struct(logical, (3, (32, 4)), (32, (1, 96)))
    tiled = cute.tiled_product(block, tiler)
    same_struct(tiled, (3, 32, 4), (32, 1, 96))
    for x in range(3):
        for y0 in range(32):
            for y1 in range(4):
                assert tiled((x, y0, y1)) == logical((x, (y0, y1)))
    wrapped = cute.Layout.parse("(128):(1)")
    tiled_wrapped = cute.tiled_product(block, wrapped)
    assert tiled_wrapped == cute.logical_product(block, wrapped)
    assert str(tiled_wrapped) == "(3,((32,4))):(32,((1,96)))"


def test_blocked_product_zips_block_and_tiler_modes():
    block, tiler = cute.make_layout((2, 5), stride=(5, 1)), cute.make_layout((3, 4))
    result = cute.blocked_product(block, tiler)
    same_struct(result, ((2, 3), (5, 4)), ((5, 10), (1, 30)))
    logical = cute.logical_product(block, tiler)
    for i in range(6):
        for j in range(20):
            assert result((i, j)) == logical(((i % 2, j % 5), (i // 2, j // 5)))


def test_blocked_product_pads_rank_mismatch():
    result = cute.blocked_product(cute.make_layout((128, 16)), cute.make_layout((1, 1, 2, 4)))
    assert cute.rank(result) == 4
    assert result((0, 0, 1, 0)) == 2048 and result((0, 0, 0, 1)) == 4096
    assert result((127, 15, 1, 3)) == 127 + 15 * 128 + 2048 + 3 * 4096
    same_struct(result, ((128, 1), (16, 1), (1, 2), (1, 4)), ((1, 0), (128, 0), (0, 2048), (0, 4096)))


def test_restrict_slices_basis_coordinate_layout():
    from tvm.ir import Range
    restride = cute.make_layout((128, 16384), stride=(E(0), E(1)))
    frag = cute.composition(restride, cute.make_layout(((16, 4), 32), stride=((1, 32), 128)))
    assert frag((16, 0)) == (32, 0)
    offset, tile = cute.restrict(frag, [Range.from_min_extent(0, 64), Range.from_min_extent(8, 24)])
    assert offset == (0, 8) and tile((0, 3)) == (0, 3)
    for i in range(0, 64, 7):
        for j in range(0, 24, 5):
            assert frag((i, 8 + j)) == tuple(b + s for b, s in zip(offset, tile((i, j))))


def test_makers():
    assert cute.make_layout((4, 8)) == cute.make_column_major_layout((4, 8))
    same_struct(cute.make_layout((4, 8)), (4, 8), (1, 4))
    assert cute.make_layout((4, 4), stride=(E(0), E(1))) == cute.make_identity_layout((4, 4))
    assert cute.make_column_major_layout((2, (2, 2))) == cute.make_layout((2, (2, 2)), stride=(1, (2, 4)))
    assert cute.make_row_major_layout((2, (2, 2))) == cute.make_layout((2, (2, 2)), stride=(4, (2, 1)))
    ident = cute.make_identity_layout((2, (2, 2)))
    assert [ident(c) for c in range(8)] == [(c % 2, (c // 2 % 2, c // 4)) for c in range(8)]
    cat = cute.make_layout([cute.make_layout(64, stride=1), cute.make_layout(4, stride=64)])
    assert cat.shape == (64, 4) and cat.stride == (1, 64)
