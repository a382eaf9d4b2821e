"""catlass TLA layouts: the seed's worked examples, exact enumeration against independent formulas."""
import itertools
import random

import numpy as np
import pytest

from tilelayout import tla
from tilelayout.errors import LayoutError

ZN_TOY = tla.Layout(((4, 2), (4, 3)), ((4, 16), (1, 32)), (8, 12))


# ------------------------------------------------------------------ independent references

def direct_offsets(shape, stride, extents=None):
    """Offsets of every logical coordinate, from numpy's Fortran-order unravel (no tla code)."""
    modes_shape = shape if isinstance(shape, tuple) else (shape,)
    modes_stride = stride if isinstance(stride, tuple) else (stride,)
    if extents is None:
        extents = tuple(int(np.prod(tla.flatten(m))) for m in modes_shape)
    out = np.zeros(extents, dtype=np.int64)
    for d, (m, s) in enumerate(zip(modes_shape, modes_stride)):
        idx = np.arange(extents[d])
        subs = np.unravel_index(idx, tla.flatten(m), order="F")
        off = sum(sc * st for sc, st in zip(subs, tla.flatten(s)))
        view = [1] * len(extents)
        view[d] = extents[d]
        out = out + np.asarray(off, dtype=np.int64).reshape(view)
    return out


def fractal_memory_offsets(tag, rows, cols, c0):
    """Where each element of a rows x cols matrix lands, by building the fractal buffer with numpy.

    Pads the matrix to whole fractals, cuts it into blocks and lays the blocks out in the tag's
    orders (first letter: inside a fractal, second: between fractals; z = row-major, n = column-major).
    Returns offsets[r, c] = position of element (r, c) in the buffer.
    """
    if tag in ("zN", "zZ", "L0C"):
        br, bc = 16, (16 if tag == "L0C" else c0)
    else:  # nZ, nN: fractals are c0 rows x 16 cols
        br, bc = c0, 16
    mr, mc = -(-rows // br), -(-cols // bc)
    ids = np.arange(mr * br * mc * bc).reshape(mr * br, mc * bc)  # element id = r * C + c
    blocks = ids.reshape(mr, br, mc, bc)                            # [fr, r, fc, c]
    inner = {"z": (1, 3), "n": (3, 1)}["n" if tag in ("nZ", "nN") else "z"]
    outer = {"Z": (0, 2), "N": (2, 0)}["N" if tag in ("zN", "nN", "L0C") else "Z"]
    buf = blocks.transpose(outer + inner).ravel()                    # buffer[pos] = element id
    pos = np.empty_like(buf)
    pos[buf] = np.arange(buf.size)
    return pos.reshape(mr * br, mc * bc)[:rows, :cols]


def random_nested_layout(rng, max_rank=3, max_depth=3, max_size=2048):
    """A random congruent (shape, stride) pair with at most ``max_size`` coordinates."""
    while True:
        shp, std = _random_nested(rng, max_rank, max_depth)
        if tla.product(shp) <= max_size:
            return shp, std


def _random_nested(rng, max_rank, max_depth):
    def mode(depth_left):
        if depth_left == 0 or rng.random() < 0.4:
            return rng.randint(1, 5), rng.randint(0, 40)
        subs = [mode(depth_left - 1) for _ in range(rng.randint(1, 3))]
        return tuple(s for s, _ in subs), tuple(d for _, d in subs)
    modes = [mode(max_depth - 1) for _ in range(rng.randint(1, max_rank))]
    return tuple(s for s, _ in modes), tuple(d for _, d in modes)


# --------------------------------------------------------------------------- seed examples

def test_int_tuple_queries():
    x = (2, (3, (4, 5)))
    assert tla.rank(7) == 1 and tla.depth(7) == 0
    assert tla.rank(x) == 2 and tla.rank(x, 1) == 2 and tla.rank(x, 1, 1) == 2
    assert tla.depth(x) == 3 and tla.depth(x, 1) == 2 and tla.depth(x, 0) == 0
    assert tla.get(x, 1, 1, 0) == 4 and tla.get(7, 0) == 7 and tla.get(x) == x
    assert tla.product(x) == 120 and tla.flatten(x) == (2, 3, 4, 5)
    with pytest.raises(tla.TLARankError):
        tla.get(x, 2)
    with pytest.raises(tla.TLARankError):
        tla.get(7, 1)


def test_seed_make_layout_examples():
    w2xh4 = tla.make_layout((2, 4), (12, 1))
    assert str(w2xh4) == "(2,4):(12,1)" and w2xh4.origin_shape() == (2, 4)
    w32xh48 = tla.make_layout(((16, 2), (16, 3)), ((16, 256), (1, 512)))
    assert str(w32xh48) == "((16,2),(16,3)):((16,256),(1,512))"
    assert w32xh48.origin_shape() == (32, 48)          # product per mode
    assert w32xh48 == tla.make_layout(((16, 2), (16, 3)), ((16, 256), (1, 512)), (32, 48))
    assert tla.make_layout((2, 4), (12, 1), (2, 4)) == w2xh4
    vec = tla.make_layout(128)
    assert str(vec) == "(128):(1)" and vec.origin_shape() == (128,)
    assert repr(w2xh4) == "tla.Layout((2,4):(12,1), origin_shape=(2,4))"


def test_seed_row_and_column_major_tables():
    rm = tla.make_layout((2, 3), (3, 1))
    cm = tla.make_layout((2, 3), (1, 2))
    assert [rm(r, c) for r in range(2) for c in range(3)] == [0, 1, 2, 3, 4, 5]
    assert [cm(r, c) for c in range(3) for r in range(2)] == [0, 1, 2, 3, 4, 5]


def test_seed_crd2offset_37():
    assert tla.crd2offset((1, 5), ((4, 2), (4, 3)), ((4, 16), (1, 32))) == 37
    assert ZN_TOY((1, 5)) == 37 and ZN_TOY(1, 5) == 37
    # row 1 -> (1,0) of (4,2); col 5 -> (1,1) of (4,3): first sub-extent fastest
    assert 1 * 4 + 0 * 16 + 1 * 1 + 1 * 32 == 37


def test_seed_get_tile_layout_tail():
    a0 = tla.get_tile_layout(ZN_TOY, (4, 4), (6, 10))
    assert a0.stride() == ZN_TOY.stride()
    assert a0.origin_shape() == (2, 2)
    assert a0.shape() == ((4, 1), (4, 1))


def test_seed_zn_100x100_and_structured_tile():
    z = tla.make_layout_from_tag("zN", 100, 100, "float16")
    assert z.shape() == ((16, 7), (16, 7)) and z.origin_shape() == (100, 100)
    assert z.stride() == ((16, 256), (1, 112 * 16))
    t = tla.get_tile_layout(z, (32, 48), (0, 0))
    assert t.shape() == ((16, 2), (16, 3)) and t.origin_shape() == (32, 48) and t.stride() == z.stride()


def test_accessors_methods_and_free_functions():
    L = ZN_TOY
    assert tla.shape(L) == L.shape() == ((4, 2), (4, 3))
    assert tla.stride(L, 1) == L.stride(1) == (1, 32) and tla.stride(L, 1, 1) == 32
    assert tla.origin_shape(L) == (8, 12) and tla.origin_shape(L, 1) == 12
    assert tla.rank(L) == L.rank() == 2 and tla.rank(L, 0) == 2 and tla.rank(L, 0, 1) == 1
    assert tla.depth(L) == 2 and tla.depth(L, 1) == 1 and tla.depth(L, 1, 0) == 0
    assert tla.size(L) == 96 and tla.cosize(L) == 96
    sub = tla.get(L, 1)
    assert str(sub) == "(4,3):(1,32)" and sub.origin_shape() == (4, 3)
    flat = tla.Layout((5, 7), (7, 1), (3, 7))
    assert tla.get(flat, 0).origin_shape() == (3,) and str(tla.get(flat, 0)) == "5:7"
    assert tla.get(L, 1, 1) == tla.Layout(3, 32)
    with pytest.raises(tla.TLARankError):
        L.origin_shape(0, 0)


def test_hash_and_equality_include_origin():
    a = tla.Layout((4, 4), (4, 1))
    b = tla.Layout((4, 4), (4, 1), (3, 4))
    assert a != b and len({a, b, tla.Layout([4, 4], [4, 1])}) == 2


# --------------------------------------------------------------------- crd2offset, brute force

def test_crd2offset_brute_force_random_nested():
    rng = random.Random(1234)
    checked = 0
    for _ in range(300):
        shp, std = random_nested_layout(rng)
        L = tla.Layout(shp, std)
        want = direct_offsets(shp, std)
        assert np.array_equal(L.offsets(), want), str(L)
        # scalar path agrees too on a sample of points
        for coord in itertools.islice(np.ndindex(*want.shape), 0, None, 7):
            assert tla.crd2offset(coord, shp, std) == want[coord]
        checked += want.size
    assert checked > 10_000


def test_crd2offset_matches_pycute():
    pycute = pytest.importorskip("pycute")
    rng = random.Random(99)
    for _ in range(200):
        shp, std = random_nested_layout(rng, max_depth=2)
        ref = pycute.Layout(shp, std)
        L = tla.Layout(shp, std)
        table = L.offsets()
        for coord in np.ndindex(*table.shape):
            assert ref(coord if len(coord) > 1 else coord[0]) == table[coord]


def test_crd2offset_symbolic_matches_enumeration():
    from tilelayout.evaluate import evaluate_grid
    from tvm import tirx
    z = tla.make_layout_from_tag("nZ", 40, 50, "float32")
    r, c = tirx.Var("r", "int32"), tirx.Var("c", "int32")
    expr = tla.crd2offset((r, c), z.shape(), z.stride())
    got = evaluate_grid([expr], [r, c], z.origin_shape())[..., 0]
    assert np.array_equal(got, z.offsets())


def test_numpy_coordinates_broadcast():
    rows, cols = np.arange(8)[:, None], np.arange(12)[None, :]
    assert np.array_equal(tla.crd2offset((rows, cols), ZN_TOY.shape(), ZN_TOY.stride()),
                          direct_offsets(ZN_TOY.shape(), ZN_TOY.stride()))


# ------------------------------------------------------------------ fractal formats vs numpy

@pytest.mark.parametrize("tag", ["zN", "nZ", "zZ", "nN", "L0C"])
@pytest.mark.parametrize("dtype,c0", [("float16", 16), ("float32", 8), ("int8", 32), ("int4", 64)])
@pytest.mark.parametrize("rows,cols", [(16, 32), (100, 100), (33, 70), (1, 1), (64, 128)])
def test_fractal_formats_elementwise(tag, dtype, c0, rows, cols):
    L = tla.make_layout_from_tag(tag, rows, cols, dtype)
    assert L.origin_shape() == (rows, cols)
    want = fractal_memory_offsets(tag, rows, cols, c0)
    assert np.array_equal(L.offsets(), want)
    # the padded buffer is exactly filled: a bijection onto [0, cosize)
    full = L.offsets(padded=True)
    assert full.size == L.cosize() and np.array_equal(np.sort(full.ravel()), np.arange(full.size))


def test_fractal_shapes_follow_dtype():
    assert tla.make_layout_from_tag("zN", 16, 16, "float32").shape() == ((16, 1), (8, 2))
    assert tla.make_layout_from_tag("nZ", 16, 16, "float32").shape() == ((8, 2), (16, 1))
    assert tla.make_layout_from_tag(tla.LayoutTag.L0C, 20, 20, "float16").shape() == ((16, 2), (16, 2))
    assert tla.make_layout_from_tag("zn", 16, 16, np.float16) == tla.make_layout_from_tag("zN", 16, 16, "float16")
    assert tla.elements_per_c0("bfloat16") == 16 and tla.elements_per_c0("float8_e4m3fn") == 32


def test_plain_tags():
    rm = tla.make_layout_from_tag("RowMajor", 3, 5)
    cm = tla.make_layout_from_tag(tla.LayoutTag.ColumnMajor, 3, 5, "float16")
    assert np.array_equal(rm.offsets(), np.arange(15).reshape(3, 5))
    assert np.array_equal(cm.offsets(), np.arange(15).reshape(5, 3).T)
    vec = tla.make_layout_from_tag("VectorLayout", 1, 40)
    assert vec == tla.make_layout(40) == tla.make_layout_from_tag("VectorLayout", 40)
    assert vec(17) == 17


# ----------------------------------------------------------------------------------- tail tiles

@pytest.mark.parametrize("tag,dtype,rows,cols,tile", [
    ("zN", "float16", 100, 100, (32, 48)),
    ("nZ", "float32", 70, 45, (16, 32)),
    ("L0C", None, 50, 90, (32, 32)),
    ("RowMajor", None, 37, 23, (8, 16)),
])
def test_tail_tiles_cover_the_valid_region(tag, dtype, rows, cols, tile):
    parent = tla.make_layout_from_tag(tag, rows, cols, dtype)
    full = parent.offsets()
    covered = np.zeros((rows, cols), dtype=np.int64)
    for r0 in range(0, rows, tile[0]):
        for c0 in range(0, cols, tile[1]):
            t = tla.get_tile_layout(parent, tile, (r0, c0))
            assert t.origin_shape() == (min(tile[0], rows - r0), min(tile[1], cols - c0))
            assert t.stride() == parent.stride()
            tr, tc = t.origin_shape()
            base = parent(r0, c0)
            # the tile view addresses the same memory as the parent, relative to its first element
            assert np.array_equal(t.offsets() + base, full[r0:r0 + tr, c0:c0 + tc])
            covered[r0:r0 + tr, c0:c0 + tc] += 1
    assert (covered == 1).all()


def test_tile_origin_clipping_formula():
    z = tla.make_layout_from_tag("zN", 100, 100, "float16")
    for coord in [(0, 0), (96, 96), (99, 0), (100, 100), (150, 3)]:
        t = tla.get_tile_layout(z, (16, 16), coord)
        assert t.origin_shape() == tuple(min(16, max(100 - c, 0)) for c in coord)
    odd = tla.get_tile_layout(z, (20, 33), (0, 0))
    assert odd.shape() == ((16, 2), (16, 3)) and odd.origin_shape() == (20, 33)
    flat3 = tla.Layout((4, 6, 8), (48, 8, 1), (4, 5, 8))
    t3 = tla.get_tile_layout(flat3, (2, 4, 8), (2, 4, 0))
    assert t3.shape() == (2, 4, 8) and t3.origin_shape() == (2, 1, 8)


# ---------------------------------------------------------------------------------- conversions

def _cute():
    try:
        from tilelayout import cute
    except ImportError:
        pytest.skip("tilelayout.cute not available yet")
    return cute


def test_round_trip_tla_cute_tla():
    cute = _cute()
    rng = random.Random(7)
    layouts = [ZN_TOY, tla.make_layout_from_tag("zN", 100, 100, "float16"),
               tla.make_layout_from_tag("nN", 30, 50, "int8"), tla.make_layout(9),
               tla.Layout(6, 2)]
    layouts += [tla.Layout(*random_nested_layout(rng, max_depth=2)) for _ in range(50)]
    for L in layouts:
        c = tla.to_cute(L)
        assert isinstance(c, cute.Layout) and str(c) == str(L)
        assert tla.from_cute(c, L.origin_shape()) == L
        assert tla.from_cute(c) == tla.Layout(L.shape(), L.stride())
        table = L.offsets(padded=True)
        for coord in itertools.islice(np.ndindex(*table.shape), 0, None, 3):
            arg = coord if len(coord) > 1 else coord[0]
            assert c(arg) == table[coord]


def test_from_cute_accepts_pycute():
    pycute = pytest.importorskip("pycute")
    L = tla.from_cute(pycute.Layout(((4, 2), (4, 3)), ((4, 16), (1, 32))), (8, 12))
    assert L == ZN_TOY
    with pytest.raises(tla.TLAError, match="not a CuTe layout"):
        tla.from_cute(object())


def _core():
    from tilelayout import layout as core
    return core


@pytest.mark.parametrize("L", [
    ZN_TOY,
    tla.make_layout_from_tag("zN", 40, 40, "float16"),
    tla.get_tile_layout(tla.make_layout_from_tag("zN", 100, 100, "float16"), (32, 48), (96, 64)),
    tla.make_layout_from_tag("nZ", 20, 24, "float32"),
    tla.make_layout(7),
    tla.Layout(6, 3),
], ids=str)
def test_to_layout_keeps_valid_region(L):
    core = _core()
    lay = tla.to_layout(L)
    assert isinstance(lay, core.Layout)
    assert list(lay.input_shape) == list(L.origin_shape())
    assert np.array_equal(lay.table()[..., 0], L.offsets())


def test_to_layout_empty_tail_is_an_error():
    empty = tla.get_tile_layout(ZN_TOY, (4, 4), (8, 0))
    assert empty.origin_shape() == (0, 4)
    with pytest.raises(tla.TLAError, match="empty valid region"):
        tla.to_layout(empty)


# -------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("call,exc,msg", [
    (lambda: tla.Layout((4, 4), (1,)), tla.TLARankError, "same nesting"),
    (lambda: tla.Layout(((4, 2), 4), ((4, 16), (1, 32))), tla.TLARankError, "same nesting"),
    (lambda: tla.Layout((4, 4), (4, 1), (4,)), tla.TLARankError, "rank 1"),
    (lambda: tla.Layout((4, 4), (4, 1), ((2, 2), 4)), tla.TLARankError, "flat"),
    (lambda: tla.Layout((4, 4), (4, 1), (5, 4)), tla.TLAError, r"origin_shape\[0\] = 5"),
    (lambda: tla.Layout((0, 4), (4, 1)), tla.TLAError, ">= 1"),
    (lambda: tla.Layout((4.5, 4), (4, 1)), tla.TLAError, "expected an integer"),
    (lambda: tla.make_layout((4, 4)), tla.TLAError, "stride is required"),
    (lambda: tla.crd2offset((1, 2, 3), ((4, 2), (4, 3)), ((4, 16), (1, 32))), tla.TLARankError, "rank 3"),
    (lambda: tla.crd2offset((8, 0), ((4, 2), (4, 3)), ((4, 16), (1, 32))), tla.TLACoordinateError, r"8 is outside \[0, 8\)"),
    (lambda: tla.crd2offset((0, -1), (4, 4), (4, 1)), tla.TLACoordinateError, "-1"),
    (lambda: ZN_TOY(0, 12), tla.TLACoordinateError, "outside"),
    (lambda: tla.crd2offset((1, 2), (4, 4), ((4, 1), 1)), tla.TLARankError, "nesting"),
    (lambda: tla.crd2offset(((1, 2), 0), (4, 4), (4, 1)), tla.TLARankError, "rank 2"),
    (lambda: tla.get_tile_layout(ZN_TOY, (4, 4, 4), (0, 0, 0)), tla.TLARankError, "rank 3"),
    (lambda: tla.get_tile_layout(ZN_TOY, (4, 4), (0,)), tla.TLARankError, "differ in rank"),
    (lambda: tla.get_tile_layout(ZN_TOY, ((2, 2), 4), (0, 0)), tla.TLARankError, "flat"),
    (lambda: tla.get_tile_layout(ZN_TOY, (4, 4), (-1, 0)), tla.TLACoordinateError, "negative"),
    (lambda: tla.get_tile_layout(tla.Layout(((2, 2, 2), 4), ((1, 2, 4), 8)), (4, 4), (0, 0)), tla.TLAError, "fractal pair"),
    (lambda: tla.make_layout_from_tag("zX", 16, 16, "float16"), tla.TLATagError, "unknown layout tag .zX."),
    (lambda: tla.make_layout_from_tag("Swizzle", 16, 16, "float16"), tla.TLATagError, "valid tags: RowMajor"),
    (lambda: tla.make_layout_from_tag("zN", 16, 16), tla.TLADtypeError, "needs a dtype"),
    (lambda: tla.make_layout_from_tag("zN", 16, 16, "floaty"), tla.TLADtypeError, "unknown dtype"),
    (lambda: tla.make_layout_from_tag("nZ", 16, 16, "float16x3"), tla.TLADtypeError, "does not divide"),
    (lambda: tla.make_layout_from_tag("zN", 0, 16, "float16"), tla.TLATagError, ">= 1"),
    (lambda: tla.make_layout_from_tag("RowMajor", 16), tla.TLATagError, "both rows and cols"),
    (lambda: tla.make_layout_from_tag("VectorLayout", 2, 16), tla.TLATagError, "rows == 1"),
])
def test_errors(call, exc, msg):
    with pytest.raises(exc, match=msg) as info:
        call()
    assert isinstance(info.value, LayoutError) and isinstance(info.value, ValueError)


def test_error_names_the_layout():
    with pytest.raises(tla.TLACoordinateError, match=r"\(\(4,2\),\(4,3\)\):\(\(4,16\),\(1,32\)\)"):
        ZN_TOY(9, 0)
    with pytest.raises(tla.TLARankError, match=r"origin_shape=\(8,12\)"):
        tla.get_tile_layout(ZN_TOY, (4,), (0,))
