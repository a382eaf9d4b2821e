"""Tensor-core fragments: atoms, accumulators and ldmatrix operands against independent numpy tables,
TileLang 0.1.15's exact output, bijectivity, and errors."""
import numpy as np
import pytest

from tilelayout import Fragment, LayoutError
from tilelayout.gemm_layouts import (compute_warp_partition, make_gemm_fragment_8x4, make_gemm_fragment_8x8,
                                     make_gemm_fragment_8x8_transposed, make_gemm_fragment_8x16,
                                     make_gemm_fragment_a, make_gemm_fragment_b, make_gemm_fragment_c,
                                     make_mma_accumulator_fragment, make_wgmma_accumulator_fragment,
                                     make_wgmma_fragment_a)

from conftest import check_fragment_inverse_roundtrip


def ptx_c_atom(r, c):
    """PTX mma.m16n8 accumulator table: c0..c3 of lane l at rows l//4 (+8), columns 2*(l%4) (+1)."""
    return (r % 8) * 4 + (c % 8) // 2, (r // 8) * 2 + c % 2


def frag_fn_recipe(i, j):
    """recipes section 4b: 128x128 mma C fragment, 4 warps as 2x2 (warp numbered N-block fastest)."""
    iw, jw = i % 64, j % 64
    warp = (i // 64) * 2 + (j // 64)
    lane = (iw % 8) * 4 + (jw % 8) // 2
    local = ((iw // 16) * 8 + (jw // 8)) * 4 + ((iw % 16) // 8) * 2 + (jw % 2)
    return warp * 32 + lane, local


def tables(frag):
    return frag.thread_table(), frag.table()[..., 0]


# ------------------------------------------------------------------ atoms

def test_atoms():
    i, j = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    thr, idx = tables(make_gemm_fragment_8x8())
    np.testing.assert_array_equal(thr[..., 0], i * 4 + j // 2)
    np.testing.assert_array_equal(idx, j % 2)
    thr, idx = tables(make_gemm_fragment_8x8_transposed())
    np.testing.assert_array_equal(thr[..., 0], j * 4 + i // 2)
    np.testing.assert_array_equal(idx, i % 2)
    i4, j4 = np.meshgrid(np.arange(8), np.arange(4), indexing="ij")
    np.testing.assert_array_equal(make_gemm_fragment_8x4().thread_table()[..., 0], i4 * 4 + j4)
    i16, j16 = np.meshgrid(np.arange(8), np.arange(16), indexing="ij")
    thr, idx = tables(make_gemm_fragment_8x16())
    np.testing.assert_array_equal(thr[..., 0], i16 * 4 + j16 // 4)
    np.testing.assert_array_equal(idx, j16 % 4)
    for atom in (make_gemm_fragment_8x4(), make_gemm_fragment_8x8(), make_gemm_fragment_8x16(),
                 make_gemm_fragment_8x8_transposed()):
        assert atom.thread_extent == 32 and atom.is_bijective()


def test_tilelang_atom_printing():
    assert repr(make_gemm_fragment_8x8()) == ("Fragment([8, 8] -> [2], replicate: 1, thread: 32, forward_thread: "
                                              "_i * 4 + _j // 2, forward_index: [_j % 2])")
    assert str(make_gemm_fragment_8x8_transposed().forward_thread) == "_j * 4 + _i // 2"


# ------------------------------------------------------------------ warp partition (TileLang's C++ rule)

@pytest.mark.parametrize("m, n, warps, policy, expected", [
    (128, 128, 4, "square", (2, 2)), (128, 128, 8, "square", (2, 4)), (256, 128, 8, "square", (2, 4)),
    (64, 64, 2, "square", (1, 2)), (48, 32, 4, "square", (1, 4)), (64, 16, 8, "square", (4, 2)),
    (32, 8, 2, "square", (2, 1)), (128, 128, 8, "fullrow", (8, 1)), (128, 128, 8, "fullcol", (1, 8)),
    (16, 256, 8, "fullrow", (1, 8)), (256, 8, 8, "fullcol", (8, 1)),
])
def test_warp_partition(m, n, warps, policy, expected):
    assert compute_warp_partition(m, n, warps, policy) == expected


def test_warp_partition_errors():
    with pytest.raises(LayoutError, match="no valid warp partition for an 16x8 accumulator over 4 warps"):
        compute_warp_partition(16, 8, 4)
    with pytest.raises(LayoutError, match="unknown warp policy"):
        compute_warp_partition(64, 64, 4, "diagonal")


# ------------------------------------------------------------------ accumulator

def test_accumulator_128x128_is_the_m16n8_layout():
    frag = make_mma_accumulator_fragment(128, 128, 128)
    thr, idx = tables(frag)
    i, j = np.meshgrid(np.arange(128), np.arange(128), indexing="ij")
    lane, local = ptx_c_atom(i % 16, j % 8)
    warp = (j // 64) * 2 + i // 64                                   # TileLang numbers M-blocks fastest
    np.testing.assert_array_equal(thr[..., 0], warp * 32 + lane)
    atom = ((i % 64) // 16) * 8 + (j % 64) // 8                      # row-major atoms inside a warp
    np.testing.assert_array_equal(idx, atom * 4 + local)
    # the recipe's frag_fn is the same placement with the 2x2 warp grid numbered N-block fastest
    r_thr, r_idx = frag_fn_recipe(i, j)
    swap = {0: 0, 1: 2, 2: 1, 3: 3}
    np.testing.assert_array_equal(np.vectorize(swap.get)(r_thr // 32) * 32 + r_thr % 32, thr[..., 0])
    np.testing.assert_array_equal(r_idx, idx)
    assert frag.thread_extent == 128 and frag.output_shape == [128] and frag.is_bijective()


# Recorded from TileLang 0.1.15: T.gemm accumulator on sm_80 ((m, n, threads, dtype, policy) -> thread, index).
TILELANG_C = [
    ((128, 128, 128, "float32", "square"), "_j // 64 * 64 + _i // 64 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i % 64 // 16 * 32 + _j % 64 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((128, 128, 256, "float32", "square"), "_j // 32 * 64 + _i // 64 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i % 64 // 16 * 16 + _j % 32 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((64, 128, 128, "float32", "square"), "_j // 64 * 64 + _i // 32 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i % 32 // 16 * 32 + _j % 64 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((32, 32, 32, "float32", "square"), "_i % 8 * 4 + _j % 8 // 2",
     "_i // 16 * 16 + _j // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((16, 8, 32, "float32", "square"), "_i % 8 * 4 + _j // 2", "_i // 8 * 2 + _j % 2"),
    ((256, 128, 256, "float32", "square"), "_j // 32 * 64 + _i // 128 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i % 128 // 16 * 16 + _j % 32 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((128, 128, 128, "float16", "square"), "_j // 64 * 64 + _i // 64 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i % 64 // 16 * 32 + _j % 64 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((64, 64, 128, "float64", "square"), "_j // 32 * 64 + _i // 32 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i % 32 // 8 * 8 + _j % 32 // 8 * 2 + _j % 2"),
    ((128, 128, 256, "float32", "fullrow"), "_i // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_j // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((128, 128, 256, "float32", "fullcol"), "_j // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i // 16 * 8 + _j % 16 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
]


@pytest.mark.parametrize("args, thread, index", TILELANG_C, ids=[str(a) for a, _, _ in TILELANG_C])
def test_accumulator_matches_tilelang(args, thread, index):
    m, n, threads, dtype, policy = args
    frag = make_mma_accumulator_fragment(m, n, threads, dtype, warp_policy=policy)
    assert str(frag.forward_thread) == thread and [str(e) for e in frag.forward_index] == [index]


@pytest.mark.parametrize("m, n, threads, dtype", [(128, 128, 128, "float32"), (64, 256, 256, "float32"),
                                                  (96, 64, 64, "float16"), (32, 16, 64, "int32"),
                                                  (64, 32, 128, "float64")])
def test_accumulators_are_bijective_and_invert(m, n, threads, dtype):
    frag = make_mma_accumulator_fragment(m, n, threads, dtype)
    assert frag.thread_extent == threads and frag.is_bijective()
    assert frag.output_shape == [m * n // threads]
    check_fragment_inverse_roundtrip(frag)


def test_accumulator_errors():
    with pytest.raises(LayoutError, match="no valid warp partition"):
        make_mma_accumulator_fragment(100, 128, 128)
    with pytest.raises(LayoutError, match="multiple of the warp size"):
        make_mma_accumulator_fragment(128, 128, 100)
    with pytest.raises(LayoutError, match="sm_80 or newer"):
        make_mma_accumulator_fragment(128, 128, 128, arch="sm_70")
    with pytest.raises(LayoutError, match="arch must look like"):
        make_mma_accumulator_fragment(128, 128, 128, arch="ampere")
    with pytest.raises(LayoutError, match="positive int"):
        make_mma_accumulator_fragment(0, 128, 128)


# ------------------------------------------------------------------ TileLang's C++ composition

def test_gemm_fragment_c_composition():
    frag = make_gemm_fragment_c(128, 128, 64, 64)
    thr, idx = tables(frag)
    i, j = np.meshgrid(np.arange(128), np.arange(128), indexing="ij")
    lane, local = ptx_c_atom(i % 16, j % 8)
    warp = (i // 16) % 2 + 2 * ((j // 8) % 2)                     # warps interleave atom by atom
    np.testing.assert_array_equal(thr[..., 0], warp * 32 + lane)
    atom = (i // 32) + 4 * (j // 16)                               # then the warp's atoms, M first
    np.testing.assert_array_equal(idx, atom * 4 + local)
    assert frag.is_bijective()
    assert make_gemm_fragment_c(16, 8, 16, 8).is_equal(make_mma_accumulator_fragment(16, 8, 32))
    with pytest.raises(LayoutError, match="whole"):
        make_gemm_fragment_c(128, 128, 48, 64)


# ------------------------------------------------------------------ operands

def ptx_a_atom(r, c, kp):
    """PTX mma A fragment (16 x 8kp): lane = 4*(r%8) + (c % 4kp)//kp; register order a0.. by (c-half, r-half)."""
    return (r % 8) * 4 + (c % (4 * kp)) // kp, (c // (4 * kp)) * 2 * kp + (r // 8) * kp + c % kp


def ptx_b_atom(k, c, kp):
    """PTX mma B fragment (8kp x 8): lane = 4*(c%8) + (k % 4kp)//kp; registers by k-half."""
    return (c % 8) * 4 + (k % (4 * kp)) // kp, (k // (4 * kp)) * kp + k % kp


@pytest.mark.parametrize("dtype, kp", [("float16", 2), ("bfloat16", 2), ("int8", 4), ("float32", 1)])
def test_operand_a_and_b_against_ptx_tables(dtype, kp):
    m, n, k, threads = 64, 64, 16 * kp, 128                       # 2 x 2 warps, 32 x 32 per warp
    k_atom = 8 * kp
    a = make_gemm_fragment_a(m, n, k, threads, dtype)
    i, j = np.meshgrid(np.arange(m), np.arange(k), indexing="ij")
    lane, local = ptx_a_atom(i % 16, j % k_atom, kp)
    thr = a.thread_table()
    assert a.replicate_size == 2 and thr.shape == (m, k, 2)
    for rep in range(2):                                            # replica = the N-warp that also reads A
        np.testing.assert_array_equal(thr[..., rep], (rep * 2 + i // 32) * 32 + lane)
    regs = 4 * kp
    np.testing.assert_array_equal(a.table()[..., 0], (j // k_atom) * (2 * regs) + ((i % 32) // 16) * regs + local)
    assert a.is_bijective()
    check_fragment_inverse_roundtrip(a)

    b = make_gemm_fragment_b(m, n, k, threads, dtype)
    kk, c = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
    lane, local = ptx_b_atom(kk % k_atom, c % 8, kp)
    thr = b.thread_table()
    for rep in range(2):                                            # replica = the M-warp that also reads B
        np.testing.assert_array_equal(thr[..., rep], ((c // 32) * 2 + rep) * 32 + lane)
    regs = 2 * kp
    np.testing.assert_array_equal(b.table()[..., 0], (kk // k_atom) * (4 * regs) + ((c % 32) // 8) * regs + local)
    assert b.is_bijective()


TILELANG_AB = [
    (("a", 128, 128, 32, 128, "float16", False), 2, "_rep * 64 + _i // 64 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_j // 16 * 32 + _i % 64 // 16 * 8 + _j % 16 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    (("b", 128, 128, 32, 128, "float16", False), 2, "_j // 64 * 64 + _rep * 32 + _j % 8 * 4 + _i % 8 // 2",
     "_i // 16 * 32 + _j % 64 // 8 * 4 + _i % 16 // 8 * 2 + _i % 2"),
    (("a", 128, 128, 32, 128, "float16", True), 2, "_rep * 64 + _j // 64 * 32 + _j % 8 * 4 + _i % 8 // 2",
     "_i // 16 * 32 + _j % 64 // 16 * 8 + _i % 16 // 8 * 4 + _j % 16 // 8 * 2 + _i % 2"),
    (("b", 128, 128, 32, 128, "float16", True), 2, "_i // 64 * 64 + _rep * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_j // 16 * 32 + _i % 64 // 8 * 4 + _j % 16 // 8 * 2 + _j % 2"),
    (("a", 64, 64, 64, 128, "int8", False), 2, "_rep * 64 + _i // 32 * 32 + _i % 8 * 4 + _j % 16 // 4",
     "_j // 32 * 32 + _i % 32 // 16 * 16 + _j % 32 // 16 * 8 + _i % 16 // 8 * 4 + _j % 4"),
    (("b", 64, 64, 64, 128, "int8", False), 2, "_j // 32 * 64 + _rep * 32 + _j % 8 * 4 + _i % 16 // 4",
     "_i // 32 * 32 + _j % 32 // 8 * 8 + _i % 32 // 16 * 4 + _i % 4"),
    (("a", 64, 64, 16, 128, "float32", False), 2, "_rep * 64 + _i // 32 * 32 + _i % 8 * 4 + _j % 4",
     "_j // 8 * 8 + _i % 32 // 16 * 4 + _j % 8 // 4 * 2 + _i % 16 // 8"),
    (("b", 64, 64, 16, 128, "float32", False), 2, "_j // 32 * 64 + _rep * 32 + _j % 8 * 4 + _i % 4",
     "_i // 8 * 8 + _j % 32 // 8 * 2 + _i % 8 // 4"),
]


@pytest.mark.parametrize("args, rep, thread, index", TILELANG_AB, ids=[str(a) for a, *_ in TILELANG_AB])
def test_operands_match_tilelang(args, rep, thread, index):
    which, m, n, k, threads, dtype, transposed = args
    build = make_gemm_fragment_a if which == "a" else make_gemm_fragment_b
    frag = build(m, n, k, threads, dtype, transposed=transposed)
    assert frag.replicate_size == rep
    assert str(frag.forward_thread) == thread and [str(e) for e in frag.forward_index] == [index]


def test_single_warp_operands_are_unreplicated():
    a = make_gemm_fragment_a(16, 8, 16, 32)
    assert isinstance(a, Fragment) and a.replicate_size == 1 and a.is_bijective()
    b = make_gemm_fragment_b(16, 8, 16, 32)
    assert b.replicate_size == 1 and b.output_shape == [4]


def test_operand_errors():
    with pytest.raises(LayoutError, match="K=24 is not a multiple of the mma K step 16"):
        make_gemm_fragment_a(64, 64, 24, 128)
    with pytest.raises(LayoutError, match="8-, 16- or 32-bit"):
        make_gemm_fragment_b(64, 64, 16, 128, "float64")
    with pytest.raises(LayoutError, match="no valid warp partition"):
        make_gemm_fragment_a(40, 64, 16, 128)


def _partitions(threads: int) -> list:
    warps = threads // 32
    return [(wm, warps // wm) for wm in range(1, warps + 1) if warps % wm == 0]


def _gemm_fragments():
    """Every instruction fragment a gemm plan can give a register buffer, over a grid of plan shapes (the
    constructors refuse partitions the instruction cannot tile)."""
    for threads in (32, 64, 128, 256):
        for wm, wn in _partitions(threads):
            for m in (16, 32, 64, 128, 256):
                for n in (8, 16, 32, 64, 128, 256):
                    for dtype in ("float32", "float16", "int32", "float64"):
                        yield f"mma acc {m}x{n} {dtype} t{threads} {wm}x{wn}", \
                            lambda: make_mma_accumulator_fragment(m, n, threads, dtype, warp_partition=(wm, wn))
                    for dtype, k in (("float16", 32), ("int8", 64), ("float32", 16), ("float8_e4m3fn", 64)):
                        yield f"mma A {m}x{n}x{k} {dtype} t{threads} {wm}x{wn}", \
                            lambda: make_gemm_fragment_a(m, n, k, threads, dtype, warp_partition=(wm, wn))
                    if threads >= 128 and wm % 4 == 0:
                        yield f"wgmma acc {m}x{n} t{threads} {wm}x{wn}", \
                            lambda: make_wgmma_accumulator_fragment(m, n, threads, warp_partition=(wm, wn))
                        yield f"wgmma A {m}x32 t{threads} {wm}x{wn}", \
                            lambda: make_wgmma_fragment_a(m, 32, threads, "float16", warp_partition=(wm, wn))


def test_every_plan_fragment_has_a_closed_form_inverse():
    """Inference does not ask a gemm's own register layouts for their inverse (``check_cells_invertible``):
    this is why it need not. Every fragment the constructors build over the grid inverts, checked point by
    point."""
    built = 0
    for name, make in _gemm_fragments():
        try:
            frag = make()
        except LayoutError:
            continue
        built += 1
        try:
            frag.inverse_with_info(allow_padding=True)
        except LayoutError as err:
            raise AssertionError(f"{name}: {err}") from None
        check_fragment_inverse_roundtrip(frag)
    assert built > 1500
