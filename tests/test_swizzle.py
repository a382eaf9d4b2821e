"""Bank swizzles: TileLang's exact layouts, an independent numpy (CuTe Swizzle<B,4,3>) construction,
the TIRx documentation's worked example, the bank-conflict property, detection and merging."""
import numpy as np
import pytest
from tvm import tirx

import tilelayout as tl
from tilelayout import Layout, LayoutError
from tilelayout.swizzle import (SwizzleMode, choose_swizzle_mode, detect_swizzle_mode, element_bits,
                                make_bank_swizzled_layout, make_full_bank_swizzled_layout,
                                make_half_bank_swizzled_layout, make_linear_layout,
                                make_quarter_bank_swizzled_layout, make_swizzled_layout,
                                make_tcgen05mma_swizzled_layout, make_wgmma_swizzled_layout, merge_swizzle_layouts)

from conftest import check_inverse_roundtrip

MODES = [SwizzleMode.SWIZZLE_32B, SwizzleMode.SWIZZLE_64B, SwizzleMode.SWIZZLE_128B]
BUILDERS = {"full": make_full_bank_swizzled_layout, "half": make_half_bank_swizzled_layout,
            "quarter": make_quarter_bank_swizzled_layout, "wgmma": make_wgmma_swizzled_layout,
            "tcgen05": make_tcgen05mma_swizzled_layout}

# Recorded from TileLang 0.1.15 (tilelang.layout.make_*_swizzled_layout on shared buffers): the exact
# printed forward index and output shape.
TILELANG = [
    ('full', (8, 64), 'float16', [1, 1, 512],
     ['0', '0', '_i * 64 + (_j // 32 + _i // 4) % 2 * 32 + (_j % 32 // 16 + _i % 4 // 2) % 2 * 16 + (_j % 16 // 8 + _i % 2) % 2 * 8 + _j % 8']),
    ('full', (4, 64), 'float16', [1, 1, 256],
     ['0', '0', '_i * 64 + _j // 32 * 32 + (_j % 32 // 16 + _i // 2) % 2 * 16 + (_j % 16 // 8 + _i % 2) % 2 * 8 + _j % 8']),
    ('full', (16, 64), 'float16', [1, 2, 512],
     ['0', '_i // 8', '_i % 8 * 64 + (_j // 32 + _i % 8 // 4) % 2 * 32 + (_j % 32 // 16 + _i % 4 // 2) % 2 * 16 + (_j % 16 // 8 + _i % 2) % 2 * 8 + _j % 8']),
    ('full', (8, 128), 'float16', [2, 1, 512],
     ['_j // 64', '0', '_i * 64 + (_j % 64 // 32 + _i // 4) % 2 * 32 + (_j % 32 // 16 + _i % 4 // 2) % 2 * 16 + (_j % 16 // 8 + _i % 2) % 2 * 8 + _j % 8']),
    ('full', (3, 16, 64), 'float16', [3, 1, 2, 512],
     ['_i', '0', '_j // 8', '_j % 8 * 64 + (_k // 32 + _j % 8 // 4) % 2 * 32 + (_k % 32 // 16 + _j % 4 // 2) % 2 * 16 + (_k % 16 // 8 + _j % 2) % 2 * 8 + _k % 8']),
    ('full', (8, 32), 'float32', [1, 1, 256],
     ['0', '0', '_i * 32 + (_j // 16 + _i // 4) % 2 * 16 + (_j % 16 // 8 + _i % 4 // 2) % 2 * 8 + (_j % 8 // 4 + _i % 2) % 2 * 4 + _j % 4']),
    ('full', (8, 16), 'float64', [1, 1, 128],
     ['0', '0', '_i * 16 + (_j // 8 + _i // 4) % 2 * 8 + (_j % 8 // 4 + _i % 4 // 2) % 2 * 4 + (_j % 4 // 2 + _i % 2) % 2 * 2 + _j % 2']),
    ('full', (8, 128), 'int8', [1, 1, 1024],
     ['0', '0', '_i * 128 + (_j // 64 + _i // 4) % 2 * 64 + (_j % 64 // 32 + _i % 4 // 2) % 2 * 32 + (_j % 32 // 16 + _i % 2) % 2 * 16 + _j % 16']),
    ('full', (2, 8, 256), 'float4_e2m1fn', [2, 1, 1, 2048],
     ['_i', '0', '0', '_j * 256 + (_k // 128 + _j // 4) % 2 * 128 + (_k % 128 // 64 + _j % 4 // 2) % 2 * 64 + (_k % 64 // 32 + _j % 2) % 2 * 32 + _k % 32']),
    ('half', (8, 32), 'float16', [1, 1, 256],
     ['0', '0', '_i * 32 + (_j // 16 + _i // 4) % 2 * 16 + (_j % 16 // 8 + _i % 4 // 2) % 2 * 8 + _j % 8']),
    ('half', (4, 32), 'float16', [1, 1, 128],
     ['0', '0', '_i * 32 + _j // 16 * 16 + (_j % 16 // 8 + _i // 2) % 2 * 8 + _j % 8']),
    ('half', (8, 64), 'float16', [2, 1, 256],
     ['_j // 32', '0', '_i * 32 + (_j % 32 // 16 + _i // 4) % 2 * 16 + (_j % 16 // 8 + _i % 4 // 2) % 2 * 8 + _j % 8']),
    ('half', (16, 16), 'float32', [1, 2, 128],
     ['0', '_i // 8', '_i % 8 * 16 + (_j // 8 + _i % 8 // 4) % 2 * 8 + (_j % 8 // 4 + _i % 4 // 2) % 2 * 4 + _j % 4']),
    ('quarter', (8, 16), 'float16', [1, 1, 128],
     ['0', '0', '_i * 16 + (_j // 8 + _i // 4) % 2 * 8 + _j % 8']),
    ('quarter', (4, 32), 'float16', [2, 1, 64],
     ['_j // 16', '0', '_i * 16 + _j % 16']),
    ('quarter', (8, 64), 'float16', [4, 1, 128],
     ['_j // 16', '0', '_i * 16 + (_j % 16 // 8 + _i // 4) % 2 * 8 + _j % 8']),
    ('quarter', (24, 32), 'int8', [1, 3, 256],
     ['0', '_i // 8', '_i % 8 * 32 + (_j // 16 + _i % 8 // 4) % 2 * 16 + _j % 16']),
    ('wgmma', (64, 64), 'float16', [1, 8, 512],
     ['0', '_i // 8', '_i % 8 * 64 + (_j // 32 + _i % 8 // 4) % 2 * 32 + (_j % 32 // 16 + _i % 4 // 2) % 2 * 16 + (_j % 16 // 8 + _i % 2) % 2 * 8 + _j % 8']),
    ('wgmma', (64, 32), 'float16', [1, 8, 256],
     ['0', '_i // 8', '_i % 8 * 32 + (_j // 16 + _i % 8 // 4) % 2 * 16 + (_j % 16 // 8 + _i % 4 // 2) % 2 * 8 + _j % 8']),
    ('wgmma', (64, 128), 'float16', [2, 8, 512],
     ['_j // 64', '_i // 8', '_i % 8 * 64 + (_j % 64 // 32 + _i % 8 // 4) % 2 * 32 + (_j % 32 // 16 + _i % 4 // 2) % 2 * 16 + (_j % 16 // 8 + _i % 2) % 2 * 8 + _j % 8']),
    ('wgmma', (4, 64), 'float16', [256],
     ['_i * 64 + _j']),
    ('wgmma', (64, 8), 'float16', [512],
     ['_i * 8 + _j']),
    ('wgmma', (12, 64), 'float16', [768],
     ['_i * 64 + _j']),
    ('wgmma', (2, 64, 64), 'float16', [2, 1, 8, 512],
     ['_i', '0', '_j // 8', '_j % 8 * 64 + (_k // 32 + _j % 8 // 4) % 2 * 32 + (_k % 32 // 16 + _j % 4 // 2) % 2 * 16 + (_k % 16 // 8 + _j % 2) % 2 * 8 + _k % 8']),
    ('wgmma', (64, 16), 'float32', [1, 8, 128],
     ['0', '_i // 8', '_i % 8 * 16 + (_j // 8 + _i % 8 // 4) % 2 * 8 + (_j % 8 // 4 + _i % 4 // 2) % 2 * 4 + _j % 4']),
    ('tcgen05', (64, 64), 'float16', [1, 8, 512],
     ['0', '_i // 8', '_i % 8 * 64 + (_j // 32 + _i % 8 // 4) % 2 * 32 + (_j % 32 // 16 + _i % 4 // 2) % 2 * 16 + (_j % 16 // 8 + _i % 2) % 2 * 8 + _j % 8']),
    ('tcgen05', (128, 32), 'bfloat16', [1, 16, 256],
     ['0', '_i // 8', '_i % 8 * 32 + (_j // 16 + _i % 8 // 4) % 2 * 16 + (_j % 16 // 8 + _i % 4 // 2) % 2 * 8 + _j % 8']),
    ('tcgen05', (12, 64), 'float16', [768],
     ['_i * 64 + _j']),
]


def numpy_swizzle(shape, bits, mode):
    """Flat element offset of the swizzled tile, built on memory addresses with CuTe's Swizzle<B, 4, 3>.

    Atoms of 8 rows (4 if the tile has 4 rows) x G 16-byte chunks are laid out row-block first, then
    column-block; inside an atom byte-address bits [7, 7+B) are XORed into bits [4, 4+B). Addresses are
    kept in bits (byte bit k = bit k + 3) so sub-byte element types work too.
    """
    *lead, rows, cont = shape
    g = mode.atom_size
    row_bits = 128 * g
    atom_rows = min(rows, 8)
    i = np.arange(rows).reshape(-1, 1)
    j = np.arange(cont).reshape(1, -1)
    col_bit = j * bits
    tc, in_row = col_bit // row_bits, col_bit % row_bits
    ts, s = i // 8, i % 8
    addr = s * row_bits + in_row
    addr = addr ^ (((addr >> 10) & (g - 1)) << 7)
    flat_bits = (tc * (-(-rows // 8)) + ts) * (atom_rows * row_bits) + addr
    off = flat_bits // bits
    tile = rows * cont
    lead_off = np.arange(int(np.prod(lead)) if lead else 1).reshape([-1, 1, 1]) * tile
    return (lead_off + off[None]).reshape(list(lead) + [rows, cont])


def flat_offsets(layout):
    tab = layout.table()
    out = np.zeros(tab.shape[:-1], dtype=np.int64)
    for k, s in enumerate(layout.output_shape):
        out = out * s + tab[..., k]
    return out


# ------------------------------------------------------------------ SwizzleMode

def test_swizzle_mode_fields_match_tilelang():
    rows = [(m.value, m.byte_width, m.bits, m.atom_size, m.wgmma_layout_type, m.tcgen05_layout_type,
             m.smem_alignment) for m in SwizzleMode]
    assert rows == [(0, 1, 0, 1, 0, 0, 128), (1, 32, 1, 2, 3, 6, 256), (2, 64, 2, 4, 2, 4, 512),
                    (3, 128, 3, 8, 1, 2, 1024)]
    assert SwizzleMode.from_ordinal(3) is SwizzleMode.SWIZZLE_128B
    assert SwizzleMode.from_bytes(64) is SwizzleMode.SWIZZLE_64B
    with pytest.raises(LayoutError):
        SwizzleMode.from_ordinal(4)
    with pytest.raises(LayoutError):
        SwizzleMode.from_bytes(16)


# ------------------------------------------------------------------ TileLang's exact output

@pytest.mark.parametrize("kind, shape, dtype, out_shape, fwd", TILELANG,
                         ids=[f"{k}-{'x'.join(map(str, s))}-{d}" for k, s, d, _, _ in TILELANG])
def test_matches_tilelang_exactly(kind, shape, dtype, out_shape, fwd):
    lay = BUILDERS[kind](shape, dtype)
    assert [str(e) for e in lay.forward_index] == fwd
    assert lay.output_shape == out_shape


# ------------------------------------------------------------------ independent construction

CASES = [((8, 64), "float16"), ((16, 128), "float16"), ((4, 64), "float16"), ((24, 32), "float32"),
         ((8, 256), "int8"), ((16, 16), "float64"), ((2, 8, 64), "bfloat16"), ((3, 2, 16, 128), "float16"),
         ((8, 512), "float4_e2m1fn"), ((64, 64), "float8_e4m3fn")]


@pytest.mark.parametrize("shape, dtype", CASES)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_flat_and_structured_forms_match_numpy_construction(shape, dtype, mode):
    bits = element_bits(dtype)
    if shape[-1] * bits % (mode.byte_width * 8):
        pytest.skip("row is not a whole number of swizzle rows")
    ref = numpy_swizzle(shape, bits, mode)
    flat = make_swizzled_layout(shape, dtype, mode)
    structured = make_bank_swizzled_layout(shape, dtype, mode)
    assert flat.output_dim == len(shape) - 1                       # leading dims + one offset
    np.testing.assert_array_equal(flat_offsets(flat), ref)
    np.testing.assert_array_equal(flat_offsets(structured), ref)
    assert flat.is_injective() and sorted(flat_offsets(flat).ravel()) == list(range(ref.size))


def test_seed_000_worked_example():
    lay = make_swizzled_layout((8, 64), "float16", SwizzleMode.SWIZZLE_128B)
    i, j = np.meshgrid(np.arange(8), np.arange(64), indexing="ij")
    np.testing.assert_array_equal(lay.table()[..., 0], 64 * i + 8 * ((j // 8) ^ i) + j % 8)
    banks = [(lay.map(r, 0)[0] * 2 // 4) % 32 for r in range(8)]      # float16: 2 bytes, 4-byte banks
    assert banks == [0, 4, 8, 12, 16, 20, 24, 28]
    linear = make_swizzled_layout((8, 64), "float16", SwizzleMode.NONE)
    assert {(linear.map(r, 0)[0] * 2 // 4) % 32 for r in range(8)} == {0}
    assert lay.is_equal(Layout([8, 64], lambda i, j: 64 * i + 8 * tirx.bitwise_xor(j // 8, i) + j % 8))


@pytest.mark.parametrize("shape, dtype", [((8, 64), "float16"), ((32, 128), "float16"), ((16, 32), "float32"),
                                          ((8, 128), "int8")])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_bank_conflict_free_column_access(shape, dtype, mode):
    """Every 16-byte column chunk read by an aligned group of 8 rows hits 8 different 16-byte bank groups."""
    bits = element_bits(dtype)
    lay = make_swizzled_layout(shape, dtype, mode)
    group = (flat_offsets(lay) * bits // 8 // 16) % 8
    vec = 128 // bits
    rows, cont = shape
    for r0 in range(0, rows, 8):
        for c in range(0, cont, vec):
            assert len(set(group[r0:r0 + 8, c].tolist())) == 8, (r0, c)
    linear = make_linear_layout(shape)
    lin_group = (flat_offsets(linear) * bits // 8 // 16) % 8
    if cont * bits // 8 >= 128:                  # unswizzled rows of >= 128 B all start in one bank group
        assert len(set(lin_group[0:8, 0].tolist())) == 1


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_swizzles_invert_through_gf2(mode):
    lay = make_swizzled_layout((16, 64), "float16", mode)
    check_inverse_roundtrip(lay, lay.inverse())


def test_leading_dims_are_expanded():
    three = make_full_bank_swizzled_layout((3, 16, 64), "float16")
    assert three.is_equal(make_full_bank_swizzled_layout((16, 64), "float16").expand([3]))
    four = make_swizzled_layout((2, 3, 8, 64), "float16", SwizzleMode.SWIZZLE_64B)
    assert four.is_equal(make_swizzled_layout((8, 64), "float16", SwizzleMode.SWIZZLE_64B).expand([2, 3]))


def test_linear_layout():
    lay = make_linear_layout((4, 8, 16))
    assert [str(e) for e in lay.forward_index] == ["_i * 128 + _j * 16 + _k"] and lay.output_shape == [512]
    assert make_swizzled_layout((8, 64), "float16", SwizzleMode.NONE).is_equal(make_linear_layout((8, 64)))


# ------------------------------------------------------------------ choosing a mode, wgmma/tcgen05 rule

@pytest.mark.parametrize("shape, dtype, mode", [
    ((64, 64), "float16", SwizzleMode.SWIZZLE_128B), ((64, 32), "float16", SwizzleMode.SWIZZLE_64B),
    ((64, 16), "float16", SwizzleMode.SWIZZLE_32B), ((64, 8), "float16", SwizzleMode.NONE),
    ((64, 24), "float16", SwizzleMode.NONE), ((12, 64), "float16", SwizzleMode.NONE),
    ((4, 64), "float16", SwizzleMode.NONE), ((64, 96), "float16", SwizzleMode.SWIZZLE_64B),
    ((64, 32), "float32", SwizzleMode.SWIZZLE_128B), ((64, 64), "int8", SwizzleMode.SWIZZLE_64B),
])
def test_choose_swizzle_mode(shape, dtype, mode):
    assert choose_swizzle_mode(shape, dtype) is mode
    assert detect_swizzle_mode(make_swizzled_layout(shape, dtype), dtype) is mode


def test_wgmma_rejects_rows_of_partial_chunks():
    with pytest.raises(LayoutError, match=r"64, 12\].*16-byte"):
        make_wgmma_swizzled_layout((64, 12), "float16")


# ------------------------------------------------------------------ detection and merging

@pytest.mark.parametrize("mode", [SwizzleMode.NONE] + MODES, ids=lambda m: m.name)
def test_detect_recognises_both_forms(mode):
    shape, dtype = (32, 64), "float16"
    assert detect_swizzle_mode(make_swizzled_layout(shape, dtype, mode), dtype) is mode
    assert detect_swizzle_mode(make_bank_swizzled_layout(shape, dtype, mode), dtype) is mode


def test_detect_is_semantic_not_structural():
    hand = Layout([8, 64], lambda i, j: 64 * i + 8 * tirx.bitwise_xor(j // 8, i) + j % 8)
    assert detect_swizzle_mode(hand, "float16") is SwizzleMode.SWIZZLE_128B
    assert detect_swizzle_mode(hand, "float32") is None              # same offsets mean another swizzle for fp32
    assert detect_swizzle_mode(Layout([8, 64], lambda i, j: j * 8 + i), "float16") is None
    assert detect_swizzle_mode(tl.Fragment([8, 64], lambda i, j: i), "float16") is None
    assert detect_swizzle_mode(Layout([64], lambda i: i), "float16") is None


def test_merge_picks_the_smaller_granularity():
    shape, dtype = (32, 64), "float16"
    full = make_full_bank_swizzled_layout(shape, dtype)
    half = make_swizzled_layout(shape, dtype, SwizzleMode.SWIZZLE_64B)
    quarter = make_quarter_bank_swizzled_layout(shape, dtype)
    assert merge_swizzle_layouts(full, half, dtype) is half
    assert merge_swizzle_layouts(half, full, dtype) is half
    assert merge_swizzle_layouts(quarter, full, dtype) is quarter
    assert merge_swizzle_layouts(full, full, dtype) is full
    assert merge_swizzle_layouts(full, make_linear_layout(shape), dtype) is None
    with pytest.raises(LayoutError, match="different shapes"):
        merge_swizzle_layouts(full, make_full_bank_swizzled_layout((16, 64), dtype), dtype)


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("build, match", [
    (lambda: make_full_bank_swizzled_layout((12, 64), "float16"), "4 rows or a multiple of 8, got 12"),
    (lambda: make_full_bank_swizzled_layout((16, 32), "float16"), "multiple of 64 elements"),
    (lambda: make_half_bank_swizzled_layout((8, 16), "float16"), "multiple of 32 elements"),
    (lambda: make_swizzled_layout((64,), "float16", SwizzleMode.SWIZZLE_32B), "at least two dimensions"),
    (lambda: make_swizzled_layout((8, 64), "notatype", SwizzleMode.SWIZZLE_32B), "unknown dtype"),
    (lambda: make_swizzled_layout((8, 64), "float24", SwizzleMode.SWIZZLE_32B), "dividing 128 bits"),
    (lambda: make_swizzled_layout((8, 64), "float16x3", SwizzleMode.SWIZZLE_32B), "dividing 128 bits"),
    (lambda: make_swizzled_layout((8, 64), "float16", "SWIZZLE_16B"), "swizzle mode must be"),
    (lambda: make_swizzled_layout((8, tirx.Var("n", "int32")), "float16", SwizzleMode.SWIZZLE_32B), "constant"),
    (lambda: make_linear_layout(()), "at least one dimension"),
])
def test_bad_swizzle_input(build, match):
    with pytest.raises(LayoutError, match=match):
        build()


@pytest.mark.parametrize("shape, dtype", CASES)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("flat", [False, True], ids=["structured", "flat"])
def test_closed_form_output_shape_equals_enumeration(shape, dtype, mode, flat):
    """The swizzle constructors state their output extents instead of evaluating the XOR arithmetic: the
    stated extents equal the ones found by enumerating the same expressions over the whole tile."""
    bits = element_bits(dtype)
    if shape[-1] * bits % (mode.byte_width * 8):
        pytest.skip("row is not a whole number of swizzle rows")
    lay = make_bank_swizzled_layout(shape, dtype, mode, flat=flat)
    fresh = Layout.from_exprs(list(lay.input_shape), list(lay.forward_index))
    assert "_output_shape" not in fresh.__dict__
    assert lay.output_shape == fresh.output_shape
    assert lay.output_shape == [int(v) + 1 for v in fresh.table().reshape(-1, fresh.output_dim).max(axis=0)]
