"""Volta (sm_70) operand layouts: TileLang 0.1.15's exact tables (tests/data/volta_swizzle_tilelang.json, recorded
in a peer venv by enumerating TileLang's own Layout), an independent bitwise numpy construction on more shapes,
bijectivity, vector contiguity, and the refusals."""
import json
import pathlib

import numpy as np
import pytest
from tvm import tirx

import tilelayout as tl
from tilelayout import LayoutError
from tilelayout.swizzle import make_volta_swizzled_layout

from conftest import apply_exprs, check_inverse_roundtrip, grid

DATA = json.loads((pathlib.Path(__file__).parent / "data" / "volta_swizzle_tilelang.json").read_text())
CASES = DATA["cases"]


def _case_id(c) -> str:
    return f"{'x'.join(map(str, c['shape']))}-{c['dtype']}-{'A' if c['is_a'] else 'B'}-k{'in' if c['k_inner'] else 'out'}"


def _ours(c):
    return make_volta_swizzled_layout(c["shape"], c["dtype"], is_a=c["is_a"], k_inner=c["k_inner"])


def _offsets(layout) -> np.ndarray:
    """Enumerate a static layout with the numpy evaluator: array of shape (*input_shape, n_out)."""
    outs = apply_exprs(layout.forward_index, layout.forward_vars, grid(layout.input_shape))
    return np.stack(outs, axis=-1)


def _reference(rows: int, cont: int, is_a: bool, k_inner: bool) -> np.ndarray:
    """Independent (bitwise) construction of the flat offset over a (rows, cont) tile."""
    i, j = np.meshgrid(np.arange(rows), np.arange(cont), indexing="ij")
    if k_inner and rows % 32 == 0 and cont % 32 == 0:          # crosswise: 4-element K vectors
        vec, lane = j >> 2, j & 3
        slot = ((i >> 4) << 4) | ((i & 3) << 2) | ((((i >> 4) ^ (i >> 3) ^ (vec >> 2)) & 1) << 1) \
            | (((i >> 2) ^ (vec >> 1)) & 1)
        return vec * 4 * rows + slot * 4 + lane
    if rows % 4 == 0 and cont % 64 == 0:                        # congruous: 8-element vectors, 64-wide tiles
        v, lane = j >> 3, j & 7
        tile, r = v >> 3, v & 7
        row, half = (r >> 1, r & 1) if is_a else (r & 3, r >> 2)
        return ((i >> 2) * 4 + row) * cont + (tile * 8 + half * 4 + ((i & 3) ^ row)) * 8 + lane
    return i * (cont + 8 if cont % 16 == 0 else cont) + j      # padded (or plain) row-major


# ------------------------------------------------------------------------------------------- TileLang goldens

def test_recorded_data_covers_the_brief():
    assert len(CASES) >= 6
    f16 = {(tuple(c["shape"]), c["is_a"], c["k_inner"]) for c in CASES if c["dtype"] == "float16"}
    for shape in [(32, 32), (64, 32), (32, 64)]:
        for is_a in (True, False):
            for k_inner in (True, False):
                assert (shape, is_a, k_inner) in f16


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_matches_tilelang_table(case):
    ours = _ours(case)
    assert ours.input_shape == case["input_shape"]
    assert ours.output_shape == case["output_shape"]
    want = np.asarray(case["table"], dtype=np.int64).reshape(*case["input_shape"], len(case["forward_index"]))
    np.testing.assert_array_equal(_offsets(ours), want)
    np.testing.assert_array_equal(ours.table(), want)


@pytest.mark.parametrize("case", DATA["symbolic"], ids=lambda c: _case_id(c))
def test_symbolic_leading_dim_matches_tilelang(case):
    n = tirx.Var("n", "int32")
    ours = make_volta_swizzled_layout([n, *case["shape"][1:]], case["dtype"], case["is_a"], case["k_inner"])
    assert [str(s) for s in ours.input_shape] == ["n", *map(str, case["shape"][1:])]
    assert ours.output_shape[1:] == case["output_shape"][1:]
    assert ours.forward_index[0].same_as(ours.forward_vars[0])
    # the tile part must equal TileLang's own table for the same flags with a static leading dim
    static = next(c for c in CASES if c["shape"] == [2, *case["shape"][1:]] and c["is_a"] == case["is_a"]
                  and c["k_inner"] == case["k_inner"])
    got = np.stack(apply_exprs(ours.forward_index, ours.forward_vars, grid([2, *case["shape"][1:]])), axis=-1)
    np.testing.assert_array_equal(got.reshape(-1), static["table"])


@pytest.mark.parametrize("case", DATA["errors"], ids=lambda c: "x".join(map(str, c["shape"])))
def test_refuses_where_tilelang_refuses(case):
    n = tirx.Var("n", "int32")
    shape = [n if s == "n" else s for s in case["shape"]]
    with pytest.raises(LayoutError, match="make_volta_swizzled_layout.*(two dimensions|constant last two)"):
        make_volta_swizzled_layout(shape, case["dtype"])


# ---------------------------------------------------------------------------------------- properties

SHAPES = [(rows, cont) for rows in (4, 8, 12, 16, 32, 64, 96, 128) for cont in (16, 24, 32, 48, 64, 96, 128, 192, 256)]


@pytest.mark.parametrize("is_a,k_inner", [(True, True), (True, False), (False, True), (False, False)])
def test_matches_bitwise_reference_on_many_shapes(is_a, k_inner):
    for rows, cont in SHAPES:
        got = _offsets(make_volta_swizzled_layout((rows, cont), "float16", is_a, k_inner))[..., 0]
        np.testing.assert_array_equal(got, _reference(rows, cont, is_a, k_inner), err_msg=f"{rows}x{cont}")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_bijective_onto_its_output(case):
    ours = _ours(case)
    tab = _offsets(ours).reshape(-1, ours.output_dim)
    assert len(np.unique(tab, axis=0)) == len(tab)                          # injective
    assert np.all(tab >= 0) and np.all(tab < np.asarray(ours.output_shape))  # inside the output
    rows, cont = case["shape"][-2:]
    flat = tab[:, -1].reshape(-1, rows * cont)
    if int(ours.output_shape[-1]) == rows * cont:                             # swizzles: a permutation per tile
        for per_tile in flat:
            np.testing.assert_array_equal(np.sort(per_tile), np.arange(rows * cont))
    else:                                                                     # padding: rows at a fixed pitch
        pitch = cont + 8 if cont % 16 == 0 else cont
        assert int(ours.output_shape[-1]) == (rows - 1) * pitch + cont


@pytest.mark.parametrize("shape,is_a,k_inner", [((32, 32), True, True), ((32, 64), True, False),
                                                ((32, 64), False, False), ((16, 128), False, True)])
def test_swizzles_invert(shape, is_a, k_inner):
    layout = make_volta_swizzled_layout(shape, "float16", is_a, k_inner)
    check_inverse_roundtrip(layout, layout.inverse())


@pytest.mark.parametrize("is_a", [True, False])
def test_vectors_stay_contiguous_and_aligned(is_a):
    """Crosswise keeps 4-element (64-bit) K vectors whole, congruous 8-element (128-bit) vectors: what Volta's
    operand loads rely on."""
    for (rows, cont), k_inner, width in [((64, 64), True, 4), ((32, 128), False, 8)]:
        off = _offsets(make_volta_swizzled_layout((rows, cont), "float16", is_a, k_inner))[..., 0]
        vec = off.reshape(rows, cont // width, width)
        assert np.all(vec[..., 0] % width == 0)
        np.testing.assert_array_equal(vec - vec[..., :1], np.broadcast_to(np.arange(width), vec.shape))


def test_dtype_does_not_change_the_layout():
    base = make_volta_swizzled_layout((32, 64), "float16", True, True)
    for dtype in ("float32", "int8", "bfloat16", "float64", 16):
        assert make_volta_swizzled_layout((32, 64), dtype, True, True).is_equal(base)


def test_leading_dims_pass_through():
    layout = make_volta_swizzled_layout((3, 2, 32, 64), "float16", False, False)
    assert layout.input_shape == [3, 2, 32, 64] and layout.output_shape == [3, 2, 2048]
    tab = _offsets(layout)
    np.testing.assert_array_equal(tab[..., 2], np.broadcast_to(_reference(32, 64, False, False), (3, 2, 32, 64)))
    np.testing.assert_array_equal(tab[..., 0], np.broadcast_to(np.arange(3)[:, None, None, None], (3, 2, 32, 64)))


def test_exported():
    assert tl.make_volta_swizzled_layout is make_volta_swizzled_layout
    assert "make_volta_swizzled_layout" in tl.__all__


@pytest.mark.parametrize("args,match", [
    (((32,), "float16"), "at least two dimensions"),
    (((tirx.Var("m", "int32"), 32), "float16"), "constant last two"),
    (((32, 0), "float16"), "positive"),
    (((32, 32), "notatype"), "unknown dtype"),
    (((32, 32), 0), "positive bit count"),
    (((32, 32), "float16", "yes"), "is_a must be a bool"),
    (((32, 32), "float16", True, 2), "k_inner must be a bool"),
])
def test_bad_input(args, match):
    with pytest.raises(LayoutError, match=match):
        make_volta_swizzled_layout(*args)
