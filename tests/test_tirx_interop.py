"""TIRx TileLayout / ComposeLayout <-> tilelayout Layout / Fragment (the TIRx documentation's examples, round trips).

Ground truth is TVM's own ``TileLayout.apply`` evaluated point by point (plus an independent
enumeration of the replica iterators); our side is evaluated with ``thread_of`` / ``map``.
"""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import tirx
from tvm.tirx.layout import (Axis, ComposeLayout, Iter, R, S, TCol, TileLayout, TLane, laneid, m, tcgen05_atom_layout,
                             tid_in_wg, tmem_datapath_layout, tx, warpid, wg_local_layout, wgid, wid_in_wg)

import tilelayout as tl
from tilelayout.evaluate import grid_env
from tilelayout.fragment import Fragment
from tilelayout.layout import Layout, placeholder, rep_placeholder
from tilelayout.tile_layout_interop import (_digits_numeric, _digits_symbolic, _inline_lets, from_tile_layout, is_default_tile_layout, memory_axes,
                             to_tile_layout)

UNITS = {"laneid": 1, "tx": 1, "tid_in_wg": 1, "warpid": 32, "wid_in_wg": 32, "wgid": 128}
SEED = TileLayout(S[(8, 2, 4, 2):(4 @ laneid, 1 @ warpid, 1 @ laneid, 1)] + R[2:4 @ warpid] + 5 @ warpid)
SWIZZLE_128B = ComposeLayout(per_element=3, swizzle_len=3, atom_len=3, tile_layout=TileLayout(S[(8, 64):(64 @ m, 1 @ m)]))
MMA_C = TileLayout(S[(2, 4, 2, 8, 2, 8, 4, 2):(2 @ warpid, 32 @ m, 2 @ m, 4 @ laneid, 1 @ warpid, 4 @ m, 1 @ laneid, 1 @ m)])
TMEM_ACC = TileLayout(S[(2, 128, 112):(112 @ TCol, 1 @ TLane, 1 @ TCol)])
SCALE_ATOM = TileLayout(S[(32, 16):(1 @ TLane, 1 @ TCol)] + R[4:32 @ TLane])


# --------------------------------------------------------------------------- reference enumeration

def _base(tile):
    return tile.tile_layout if isinstance(tile, ComposeLayout) else tile


def _int(v):
    """A concrete apply result; the swizzle of ComposeLayout comes back as Let nodes over constants."""
    if type(v).__name__ == "IntImm":
        return int(v.value)
    return int(tl.evaluate(_inline_lets(v), {}))


def _keys(thread, mem):
    """One int64 per copy: (thread, mem...) packed 20 bits each, copies sorted (replica order is free)."""
    key = thread.astype(np.int64)
    for k in range(mem.shape[-1]):
        key = (key << 20) + mem[..., k][..., None]
    return np.sort(key, axis=-1)


def _tvm_keys(tile, shape):
    """TVM's symbolic apply evaluated on the whole domain; replicas enumerated from ``tile.replica``."""
    variables = [tirx.Var(f"x{k}", "int32") for k in range(len(shape))]
    applied = {str(a): _inline_lets(e) for a, e in tile.apply(*variables, shape=list(shape)).items()}
    env = grid_env(variables, shape)
    base = {a: np.broadcast_to(tl.evaluate(e, env), tuple(shape)) for a, e in applied.items()}
    reps = list(_base(tile).replica)
    mem = memory_axes(tile)
    threads, mems = [], []
    for digits in itertools.product(*[range(int(it.extent)) for it in reps]):
        coords = dict(base)
        for it, d in zip(reps, digits):
            name = str(it.axis.name)
            coords[name] = coords.get(name, 0) + d * int(it.stride)
        threads.append(sum(UNITS[a] * v for a, v in coords.items() if a in UNITS) + np.zeros(tuple(shape), np.int64))
        mems.append(np.stack([np.broadcast_to(coords.get(a, 0), tuple(shape)) for a in mem] or
                             [np.zeros(tuple(shape), np.int64)], axis=-1))
    thread = np.stack(threads, axis=-1)
    return _keys(thread, mems[0])  # memory coordinates of a thread replica do not move


def _our_keys(layout):
    mem = layout.table()
    if isinstance(layout, Fragment):
        lo = layout.thread_range[0] if layout.thread_range is not None else 0
        return _keys(layout.thread_table() + lo, mem)
    return _keys(np.zeros(mem.shape[:-1] + (1,), np.int64), mem)


def _spot_points(shape, n=12, seed=0):
    rng = np.random.default_rng(seed)
    return [tuple(int(rng.integers(s)) for s in shape) for _ in range(n)]


def assert_matches_tvm(tile, layout, shape):
    """Ours equals TVM on every point (symbolic apply + numpy), and concrete apply agrees at spot points."""
    assert np.array_equal(_our_keys(layout), _tvm_keys(tile, shape)), tile
    mem = memory_axes(tile)
    for p in _spot_points(shape):
        got = {str(a): _int(v) for a, v in tile.apply(*p, shape=list(shape)).items()}
        assert [got.get(a, 0) for a in mem] == layout.map(*p)[: len(mem)] or not mem
        if isinstance(layout, Fragment):
            lo = layout.thread_range[0] if layout.thread_range is not None else 0
            assert sum(UNITS[a] * v for a, v in got.items() if a in UNITS) == layout.thread_of(*p) + lo


def assert_same_tile(a, b, shape):
    """Two TIRx layouts place every element (all replicas) at the same threads and memory coordinates."""
    assert memory_axes(a) == memory_axes(b)
    assert np.array_equal(_tvm_keys(a, shape), _tvm_keys(b, shape)), (a, b)


# --------------------------------------------------------------------------- the TIRx documentation's examples

def test_seed_fragment_at_1_3():
    assert {k: int(v) for k, v in SEED.apply(1, 3, shape=[8, 16]).items()} == {"laneid": 5, "warpid": 5, "m": 1}
    f = from_tile_layout(SEED, [8, 16])
    assert isinstance(f, Fragment) and f.replicate_size == 2
    lo = f.thread_range[0]
    assert lo == 5 * 32
    assert f.thread_of(1, 3) + lo == 5 * 32 + 5        # laneid 5 in warp 5
    assert f.thread_of(1, 3, rep=1) + lo == 9 * 32 + 5  # the replica sits at warp 9
    assert f.map(1, 3) == [1]                           # m = 1


def test_seed_fragment_closed_form():
    f = from_tile_layout(SEED, [8, 16])
    i, j = np.meshgrid(np.arange(8), np.arange(16), indexing="ij")
    lane = 4 * i + (j // 2) % 4
    warp = j // 8 + 5
    th = f.thread_table() + f.thread_range[0]
    assert np.array_equal(th[..., 0], warp * 32 + lane)
    assert np.array_equal(th[..., 1], (warp + 4) * 32 + lane)
    assert np.array_equal(f.table()[..., 0], j % 2)
    assert sorted(set((th // 32).ravel().tolist())) == [5, 6, 9, 10]
    assert_matches_tvm(SEED, f, [8, 16])


def test_seed_fragment_round_trip_is_exact():
    f = from_tile_layout(SEED, [8, 16])
    assert str(to_tile_layout(f)) == str(SEED)
    assert str(to_tile_layout(from_tile_layout(SEED))) == str(SEED)


def test_swizzle_128b_column_zero():
    lay = from_tile_layout(SWIZZLE_128B, [8, 64])
    assert type(lay) is Layout
    assert [lay.map(i, 0)[0] for i in range(8)] == [72 * i for i in range(8)]
    banks = [(lay.map(i, 0)[0] // 2) % 32 for i in range(8)]
    assert banks == [0, 4, 8, 12, 16, 20, 24, 28]
    i, j = np.meshgrid(np.arange(8), np.arange(64), indexing="ij")
    assert np.array_equal(lay.table()[..., 0], 64 * i + 8 * ((j // 8) ^ i) + j % 8)
    assert_matches_tvm(SWIZZLE_128B, lay, [8, 64])


def test_swizzle_recovered_as_compose_layout():
    back = to_tile_layout(from_tile_layout(SWIZZLE_128B, [8, 64]))
    assert isinstance(back, ComposeLayout)
    assert (back.per_element, back.swizzle_len, back.atom_len) == (3, 3, 3)
    assert_same_tile(back, SWIZZLE_128B, [8, 64])


@pytest.mark.parametrize("params,shape", [((3, 2, 3, True), (16, 32)), ((3, 3, 3, False), (8, 64)),
                                          ((2, 1, 4, True), (4, 64))])
def test_other_swizzles_round_trip(params, shape):
    pe, bl, at, inner = params
    comp = ComposeLayout(pe, bl, at, TileLayout(S[shape]), swizzle_inner=inner)
    lay = from_tile_layout(comp, list(shape))
    assert_matches_tvm(comp, lay, list(shape))
    back = to_tile_layout(lay)
    assert isinstance(back, ComposeLayout)
    assert from_tile_layout(back, list(shape)).is_equal(lay)


def test_tmem_accumulator():
    lay = from_tile_layout(TMEM_ACC, [2, 128, 112])
    assert type(lay) is Layout and lay.output_shape == [128, 224]
    a, l, c = np.meshgrid(np.arange(2), np.arange(128), np.arange(112), indexing="ij")
    assert np.array_equal(lay.table()[..., 0], l)            # TLane = l
    assert np.array_equal(lay.table()[..., 1], 112 * a + c)  # TCol = 112a + c
    assert_matches_tvm(TMEM_ACC, lay, [2, 128, 112])
    assert str(to_tile_layout(lay)) == str(TMEM_ACC)
    assert str(to_tile_layout(lay.__class__.from_exprs(lay.input_shape, lay.forward_index), axes=["TLane", "TCol"])) \
        == str(TMEM_ACC)


def test_tmem_scale_factor_replicas():
    with pytest.raises(tl.LayoutError, match="memory axis TLane"):
        from_tile_layout(SCALE_ATOM, [32, 16])
    base = from_tile_layout(SCALE_ATOM, [32, 16], memory_replica="base")
    r, s = np.meshgrid(np.arange(32), np.arange(16), indexing="ij")
    assert np.array_equal(base.table()[..., 0], r) and np.array_equal(base.table()[..., 1], s)
    full = from_tile_layout(SCALE_ATOM, [32, 16], memory_replica="input")
    assert full.input_shape == [32, 16, 4]
    tab = full.table()
    for q in range(4):  # TLane = r + 32 q, TCol = s: lanes 0-31, 32-63, 64-95, 96-127
        assert np.array_equal(tab[:, :, q, 0], r + 32 * q) and np.array_equal(tab[:, :, q, 1], s)
    with pytest.raises(tl.LayoutError, match="memory_replica"):
        from_tile_layout(SCALE_ATOM, [32, 16], memory_replica="keep")


# --------------------------------------------------------------------------- TileLayout -> ours -> TileLayout

ROUND_TRIP_TILES = [
    (SEED, [8, 16]),
    (SEED, None),
    (MMA_C, [128, 128]),
    (TMEM_ACC, [2, 128, 112]),
    (TileLayout(S[(32, 4):(1 @ laneid, 1)]), [32, 4]),
    (TileLayout(S[(128, 8):(1 @ tx, 1)] + 3), [128, 8]),
    (TileLayout(S[(2, 128, 4):(1 @ wgid, 1 @ tid_in_wg, 1)]), [256, 4]),
    (TileLayout(S[(4, 32, 2):(1 @ wid_in_wg, 1 @ laneid, 1)] + 1 @ wgid), [128, 2]),
    (TileLayout(S[(8, 16)] + R[32:1 @ laneid]), [8, 16]),
    (TileLayout(S[(16, 8):(2 @ laneid, 1)] + R[2:1 @ laneid] + 2 @ warpid), [16, 8]),
    (TileLayout(S[(4, 8):(0, 1)]), [4, 8]),
    (TileLayout(S[(48, 10):(1 @ tx, 1)]), [48, 10]),
    (TileLayout(S[(3, 40):(40, 1)] + 7), [3, 40]),
    (wg_local_layout(64), [128, 64]),
    (tcgen05_atom_layout("32x32b", (128, 64), "float32"), [128, 64]),
    (tcgen05_atom_layout("16x64b", (64, 64), "float16"), [64, 64]),
    (tcgen05_atom_layout("16x256b", (64, 64), "float32"), [64, 64]),
    (tmem_datapath_layout("D", 128, 256), [128, 256]),
    (tmem_datapath_layout("F", 64, 256), [64, 256]),
]


@pytest.mark.parametrize("tile,shape", ROUND_TRIP_TILES, ids=lambda x: str(x)[:60])
def test_tile_layout_round_trip(tile, shape):
    ours = from_tile_layout(tile, shape)
    dom = shape if shape is not None else [int(tile.size())]
    assert_matches_tvm(tile, ours, dom)
    back = to_tile_layout(ours)
    assert isinstance(back, TileLayout)
    assert_same_tile(back, tile, dom)
    assert from_tile_layout(back, shape).is_equal(ours)


def test_thread_axis_combination_rules():
    f = from_tile_layout(TileLayout(S[(2, 4, 32):(1 @ wgid, 1 @ wid_in_wg, 1 @ laneid)]), [256])
    assert np.array_equal(f.thread_table()[:, 0], np.arange(256))  # 128 wgid + 32 wid_in_wg + laneid
    f = from_tile_layout(TileLayout(S[(4, 32):(1 @ warpid, 1 @ laneid)]), [128])
    assert np.array_equal(f.thread_table()[:, 0], np.arange(128))
    f = from_tile_layout(TileLayout(S[(2, 128):(1 @ wgid, 1 @ tid_in_wg)]), [256])
    assert np.array_equal(f.thread_table()[:, 0], np.arange(256))


def test_thread_only_layout_has_one_slot():
    f = from_tile_layout(TileLayout(S[32:1 @ laneid]), [32])
    assert isinstance(f, Fragment) and f.output_shape == [1]
    assert str(to_tile_layout(f)) == str(TileLayout(S[32:1 @ laneid]))


def test_shape_with_fewer_elements_than_layout():
    f = from_tile_layout(SEED, [4, 16])
    assert_matches_tvm(SEED, f, [4, 16])


def test_symbolic_shape():
    n = tirx.Var("n", "int32")
    lay = from_tile_layout(TileLayout(S[(n, 4):(4, 1)]), [n, 4])
    assert str(lay.forward_index[0]) == "_i * 4 + _j"
    back = to_tile_layout(lay)
    assert [int(it.stride) for it in back.shard] == [4, 1]


# --------------------------------------------------------------------------- ours -> TileLayout -> ours

def _frag_cases():
    i8 = Fragment([128, 128], lambda i, j: i % 8 * 16 + j // 8)
    acc = Fragment([64, 32], lambda i, j: (i // 16) * 32 + (i % 8) * 4 + (j % 8) // 2,
                   lambda i, j: [(j // 8) * 4 + ((i % 16) // 8) * 2 + j % 2])
    return [
        i8,
        acc,
        acc.replicate(2),
        acc.bind_thread_range(64, 128),
        Fragment([16, 16], lambda i, j: i, replicate=1),
        Fragment([48, 10], lambda i, j: i),                     # 48 threads: tx
        Fragment([96, 4], lambda i, j: i),                      # 3 warps
        Fragment([8, 8], lambda i, j, r: r * 8 + i, replicate=4),
        tl.fully_replicated([4, 8], 64),
        Fragment([32, 8], lambda i, j: j * 32 + i).bind_thread_range(128, 256),
        Fragment([8], lambda i: 7 - i),                         # negative thread stride
        Fragment([64, 2], lambda i, j: 63 - i).bind_thread_range(64, 64),
        Fragment([8, 4], lambda i, j: i, lambda i, j: [3 - j]),  # negative slot stride
        Fragment([1], lambda i: 0),                             # one thread
    ]


@pytest.mark.parametrize("frag", _frag_cases(), ids=repr)
def test_fragment_round_trip(frag):
    tile = to_tile_layout(frag)
    back = from_tile_layout(tile, frag.input_shape)
    assert back.is_equal(frag)
    lo = frag.thread_range[0] if frag.thread_range is not None else 0
    assert (back.thread_range[0] if back.thread_range is not None else 0) == lo
    assert_matches_tvm(tile, frag, frag.input_shape)


def test_thread_axes_choice():
    lanes = to_tile_layout(Fragment([128, 4], lambda i, j: i))
    assert {str(it.axis.name) for it in lanes.shard} == {"warpid", "laneid", "m"}
    small = to_tile_layout(Fragment([16, 4], lambda i, j: i))
    assert {str(it.axis.name) for it in small.shard} == {"tx", "m"}
    odd = to_tile_layout(Fragment([48, 4], lambda i, j: i))
    assert {str(it.axis.name) for it in odd.shard} == {"tx", "m"}


def test_negative_strides_and_offsets():
    lay = Layout([8], lambda i: 7 - i)
    t = to_tile_layout(lay)
    assert [int(it.stride) for it in t.shard] == [-1] and {str(a.name): int(v) for a, v in t.offset.items()} == {"m": 7}
    assert from_tile_layout(t, [8]).is_equal(lay)
    with pytest.raises(tl.LayoutError, match="threads must be non-negative"):
        from_tile_layout(TileLayout(S[8:-1 @ tx]))


def test_multi_output_layout_linearised_or_named():
    lay = Layout([8, 16], lambda i, j: [j, i])
    t = to_tile_layout(lay)
    assert from_tile_layout(t, [8, 16]).is_equal(Layout([8, 16], lambda i, j: j * 8 + i))
    t2 = to_tile_layout(lay, axes=["TLane", "TCol"])
    assert memory_axes(t2) == ["TLane", "TCol"]
    assert from_tile_layout(t2, [8, 16]).is_equal(lay)


@st.composite
def affine_fragments(draw):
    ndim = draw(st.integers(1, 3))
    shape = [2 ** draw(st.integers(0, 4)) for _ in range(ndim)]
    digits = []  # (dim, lower, extent)
    for d, n in enumerate(shape):
        lower = 1
        while lower < n:
            ext = 2 ** draw(st.integers(1, (n // lower).bit_length() - 1))
            digits.append((d, lower, ext))
            lower *= ext
    rep = 2 ** draw(st.integers(0, 2))
    owner = [draw(st.booleans()) for _ in digits]  # True: thread
    thread_digits = [dg for dg, o in zip(digits, owner) if o] + ([("rep", 1, rep)] if rep > 1 else [])
    slot_digits = [dg for dg, o in zip(digits, owner) if not o]
    thread_digits = draw(st.permutations(thread_digits))
    slot_digits = draw(st.permutations(slot_digits))
    variables = [placeholder(k) for k in range(ndim)]

    def value(dg):
        d, lower, ext = dg
        v = rep_placeholder() if d == "rep" else variables[d]
        return tirx.floormod(tirx.floordiv(v, lower), ext)

    def combine(dgs):
        out, scale = tirx.const(0, "int32"), 1
        for dg in dgs:
            out = out + value(dg) * scale
            scale *= dg[2]
        return out

    frag = Fragment.from_exprs(shape, combine(thread_digits), [combine(slot_digits)], rep)
    if draw(st.booleans()):
        frag = frag.bind_thread_range(32 * draw(st.integers(0, 3)), frag.thread_extent)
    return frag


@settings(max_examples=40, deadline=None)
@given(affine_fragments())
def test_random_fragment_round_trip(frag):
    back = from_tile_layout(to_tile_layout(frag), frag.input_shape)
    assert back.is_equal(frag)
    assert np.array_equal(back.thread_table() + (back.thread_range or (0,))[0],
                          frag.thread_table() + (frag.thread_range or (0,))[0])


def test_numeric_and_symbolic_digits_agree():
    i, j = placeholder(0), placeholder(1)
    exprs = [(i * 16 + j) // 8 * 3 + j % 2, i % 4 * 5]
    sym_digits, sym_bases = _digits_symbolic(exprs, [8, 16])
    num_digits, num_bases = _digits_numeric(exprs, [8, 16])
    as_tuples = lambda ds: [[(dg.dim, dg.lower, dg.extent, sorted((k, v) for k, v in dg.strides.items() if v)) for dg in d]
                          for d in ds]
    assert as_tuples(sym_digits) == as_tuples(num_digits) and sym_bases == num_bases


# --------------------------------------------------------------------------- errors

def test_errors_from_tile_layout():
    with pytest.raises(tl.LayoutError, match="TileLayout or ComposeLayout"):
        from_tile_layout(Layout([4], lambda i: i))
    with pytest.raises(tl.LayoutError, match="laneid"):
        from_tile_layout(TileLayout(S[64:1 @ laneid]))
    with pytest.raises(tl.LayoutError, match="bx"):
        from_tile_layout(TileLayout(S[(2, 32):(1 @ Axis.bx, 1 @ laneid)]))
    with pytest.raises(tl.LayoutError, match="covers only"):
        from_tile_layout(SEED, [16, 16])
    with pytest.raises(tl.LayoutError, match="not a registered"):
        from_tile_layout(TileLayout.from_iters([Iter(4, 1, "my_custom_axis")], [], {}))


def test_errors_to_tile_layout():
    with pytest.raises(tl.LayoutError, match="cannot represent"):
        to_tile_layout(Fragment([8, 8], lambda i, j: (i * j) % 8, lambda i, j: [i]))
    with pytest.raises(tl.LayoutError, match="cannot represent"):
        to_tile_layout(Layout([8, 8], lambda i, j: i * j))
    with pytest.raises(tl.LayoutError, match="feeds"):
        to_tile_layout(Fragment([32], lambda i: i, lambda i: [i]))
    with pytest.raises(tl.LayoutError, match="not a TIRx memory axis"):
        to_tile_layout(Layout([8], lambda i: i), axes=["laneid"])
    with pytest.raises(tl.LayoutError, match="name 2 outputs"):
        to_tile_layout(Layout([8], lambda i: i), axes=["TLane", "TCol"])
    with pytest.raises(tl.LayoutError, match="Layout or Fragment"):
        to_tile_layout(SEED)


def test_default_detection():
    assert is_default_tile_layout(None, [8, 16])
    assert is_default_tile_layout(TileLayout(S[(8, 16)]), [8, 16])
    assert is_default_tile_layout(TileLayout(S[(8, 16):(16, 1)]), [8, 16])
    assert is_default_tile_layout(TileLayout(S[128]), [8, 16])
    assert is_default_tile_layout(TileLayout(S[(2, 4, 16):(64, 16, 1)]), [8, 16])
    assert not is_default_tile_layout(TileLayout(S[(8, 16):(1, 8)]), [8, 16])
    assert not is_default_tile_layout(TileLayout(S[(8, 16)] + 3), [8, 16])
    assert not is_default_tile_layout(TileLayout(S[(8, 16):(16 @ laneid, 1)]), [8, 16])
    assert not is_default_tile_layout(SWIZZLE_128B, [8, 64])
    assert not is_default_tile_layout(TileLayout(S[64]), [8, 16])
