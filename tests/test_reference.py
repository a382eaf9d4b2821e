"""The numpy interpreter of unlowered TIRx programs (``tilelayout.reference``), the judge of numeric checks:
each op's meaning against numpy written here, refusals of what it does not model, and the NaN rules of the
comparison (``compare_outputs`` / ``check_numeric``)."""
from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from maint.fuzz import parse  # noqa: E402
from tilelayout.reference import ReferenceOutOfBounds, UnsupportedByReference, run_reference  # noqa: E402
from tilelayout.passes.lowering.pipeline import (check_numeric, compare_outputs, random_inputs,  # noqa: E402
                                                 reference_outputs, sequential_outputs)


def kernel(params: str, body: str, threads: int = 64, blocks: int = 1, allocs: str = ""):
    lines = ["@T.prim_func", f"def main({params}):", f'    bx = T.launch_thread("blockIdx.x", {blocks})',
             f'    tx = T.launch_thread("threadIdx.x", {threads})']
    lines += ["    " + a.strip() for a in allocs.strip().splitlines() if a.strip()]
    lines += ["    " + l for l in body.strip("\n").splitlines()]
    return parse("\n".join(lines) + "\n")


def run(func, seed: int = 0):
    inputs = random_inputs(func, seed)
    res = run_reference(func, inputs)
    return inputs, res.outputs, res.exact


F = 'scope="local.fragment"'


# ------------------------------------------------------------------------------------------- tile ops

def test_copy_matches_regions_without_unit_dims_and_converts_dtype():
    func = kernel('A: T.Buffer((3, 40), "float32"), O: T.Buffer((32, 1), "float16")',
                  f'''
Tx.copy(f[0:32], A[1:2, 5:37])
Tx.copy(O[0:32, 0:1], f[0:32])''', allocs=f'f = T.alloc_buffer((32,), "float32", {F})')
    inp, out, exact = run(func)
    assert exact
    np.testing.assert_array_equal(out["O"][:, 0], inp["A"][1, 5:37].astype(np.float16))
    np.testing.assert_array_equal(out["A"], inp["A"])          # inputs are left alone


def test_fill_and_float8_copy_round_through_ml_dtypes():
    func = kernel('A: T.Buffer((16,), "float32"), O: T.Buffer((16,), "float8_e4m3fn"), P: T.Buffer((4,), "float32")',
                  f'''
Tx.copy(f[0:16], A[0:16])
Tx.copy(O[0:16], f[0:16])
Tx.fill(P[1:3], T.float32(2.5))''', allocs=f'f = T.alloc_buffer((16,), "float8_e4m3fn", {F})')
    inp, out, _ = run(func)
    assert out["O"].dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(out["O"], inp["A"].astype(ml_dtypes.float8_e4m3fn))
    np.testing.assert_array_equal(out["P"], np.r_[inp["P"][0], 2.5, 2.5, inp["P"][3]].astype(np.float32))


def test_reductions_over_axes_with_and_without_accumulation():
    func = kernel('A: T.Buffer((8, 16), "float32"), S: T.Buffer((8,), "float32"), M: T.Buffer((16,), "float32"), '
                  'N: T.Buffer((1,), "float32")', f'''
Tx.copy(a[0:8, 0:16], A[0:8, 0:16])
Tx.sum(s[0:8], a[0:8, 0:16], axes=[1])
Tx.copy(m[0:16], A[0:1, 0:16])
Tx.max(m[0:16], a[0:8, 0:16], axes=[0], accum=True)
Tx.min(n[0:1], a[0:8, 0:16], axes=[0, 1])
Tx.copy(S[0:8], s[0:8])
Tx.copy(M[0:16], m[0:16])
Tx.copy(N[0:1], n[0:1])''', allocs=f'''
a = T.alloc_buffer((8, 16), "float32", {F})
s = T.alloc_buffer((8,), "float32", {F})
m = T.alloc_buffer((16,), "float32", {F})
n = T.alloc_buffer((1,), "float32", {F})''')
    inp, out, exact = run(func)
    a = inp["A"].astype(np.float64)
    assert not exact                                   # a float sum is defined up to rounding
    np.testing.assert_allclose(out["S"], a.sum(1), rtol=1e-6)
    np.testing.assert_array_equal(out["M"], np.maximum(inp["A"][0], inp["A"].max(0)))
    np.testing.assert_array_equal(out["N"], [inp["A"].min()])


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_with_transposes_alpha_and_accumulation(ta, tb):
    sa = "(12, 8)" if ta else "(8, 12)"
    sb = "(16, 12)" if tb else "(12, 16)"
    ra = "0:12, 0:8" if ta else "0:8, 0:12"
    rb = "0:16, 0:12" if tb else "0:12, 0:16"
    func = kernel(f'A: T.Buffer({sa}, "float16"), B: T.Buffer({sb}, "float16"), C: T.Buffer((8, 16), "float32")', f'''
Tx.copy(c[0:8, 0:16], C[0:8, 0:16])
T.tile.gemm(c[0:8, 0:16], A[{ra}], B[{rb}], c[0:8, 0:16], {ta}, {tb}, T.float32(2.0), T.float32(1.0))
T.tile.gemm(d[0:8, 0:16], A[{ra}], B[{rb}], d[0:8, 0:16], {ta}, {tb}, T.float32(1.0), T.float32(0.0))
for i in T.parallel(8):
    for j in T.parallel(16):
        C[i, j] = c[i, j] - d[i, j]''', allocs=f'''
c = T.alloc_buffer((8, 16), "float32", {F})
d = T.alloc_buffer((8, 16), "float32", {F})''')
    inp, out, exact = run(func)
    a = inp["A"].astype(np.float64).T if ta else inp["A"].astype(np.float64)
    b = inp["B"].astype(np.float64).T if tb else inp["B"].astype(np.float64)
    assert not exact
    np.testing.assert_allclose(out["C"], (2 * a @ b + inp["C"]) - a @ b, rtol=1e-5, atol=1e-5)


def test_elementwise_tile_ops():
    func = kernel('A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32"), O: T.Buffer((3, 32), "float32")',
                  f'''
Tx.copy(a[0:32], A[0:32])
Tx.add(b[0:32], a[0:32], T.float32(2.0))
Tx.fma(b[0:32], b[0:32], B[0:32], a[0:32])
Tx.copy(O[0, 0:32], b[0:32])
Tx.exp(a[0:32])
Tx.copy(O[1, 0:32], a[0:32])
Tx.maximum(a[0:32], b[0:32], B[0:32])
Tx.copy(O[2, 0:32], a[0:32])''', allocs=f'''
a = T.alloc_buffer((32,), "float32", {F})
b = T.alloc_buffer((32,), "float32", {F})''')
    inp, out, exact = run(func)
    x, y = inp["A"], inp["B"]
    fma = (x + np.float32(2)) * y + x
    assert not exact                                   # exp is defined up to rounding
    np.testing.assert_array_equal(out["O"][0], fma)
    np.testing.assert_allclose(out["O"][1], np.exp(x.astype(np.float64)), rtol=1e-6)
    np.testing.assert_array_equal(out["O"][2], np.maximum(fma, y))


# ------------------------------------------------------------------------------------------- parallel nests

def test_float16_rounds_after_every_operation():
    func = kernel('A: T.Buffer((64,), "float16"), O: T.Buffer((64,), "float16")', '''
for i in T.parallel(64):
    O[i] = A[i] * T.float16(3.3) + T.float16(0.1)''')
    inp, out, exact = run(func)
    a = inp["A"]
    assert not exact          # float arithmetic is compared with a tolerance (compilers may contract or fold)
    np.testing.assert_array_equal(out["O"], (a * np.float16(3.3)) + np.float16(0.1))
    wide = (a.astype(np.float32) * np.float32(np.float16(3.3)) + np.float32(np.float16(0.1))).astype(np.float16)
    assert (wide != out["O"]).any()                    # one rounding at the end would differ


def test_guards_if_then_else_and_serial_inner_loops():
    func = kernel('A: T.Buffer((12, 5), "float32"), O: T.Buffer((12,), "float32"), P: T.Buffer((12,), "float32")',
                  '''
for i in T.parallel(12):
    O[i] = T.float32(0)
    for k in T.serial(5):
        O[i] = O[i] * T.float32(2) + A[i, k]
    if i % 3 == 1:
        P[i] = T.if_then_else(i < 6, A[i, 0], A[11 - i, 4])''')
    inp, out, _ = run(func)
    a = inp["A"]
    want = np.zeros(12, np.float32)
    for k in range(5):
        want = want * np.float32(2) + a[:, k]
    np.testing.assert_array_equal(out["O"], want)
    p = inp["P"].copy()
    for i in range(1, 12, 3):
        p[i] = a[i, 0] if i < 6 else a[11 - i, 4]
    np.testing.assert_array_equal(out["P"], p)


def test_values_read_before_written_are_nan():
    func = kernel('O: T.Buffer((8,), "float32")', '''
for i in T.parallel(4):
    f[i] = T.float32(1)
Tx.copy(O[0:8], f[0:8])''', allocs=f'f = T.alloc_buffer((8,), "float32", {F})')
    _, out, _ = run(func)
    assert (out["O"][:4] == 1).all() and np.isnan(out["O"][4:]).all()


# ------------------------------------------------------------------------------------------- threads and blocks

def test_tile_ops_under_a_thread_condition_run_once_when_some_thread_reaches_them():
    func = kernel('A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), O: T.Buffer((64,), "float32"), '
                  'P: T.Buffer((128,), "float32")', f'''
if tx < 64:
    Tx.copy(f[0:64], A[0:64])
    Tx.copy(O[0:64], f[0:64])
else:
    Tx.copy(f[0:64], B[0:64])
if tx >= 200:
    Tx.fill(O[0:64], T.float32(9))
if tx % 2 == 0:
    P[tx] = T.float32(1)''', threads=128, allocs=f'f = T.alloc_buffer((64,), "float32", {F})')
    inp, out, _ = run(func)
    np.testing.assert_array_equal(out["O"], inp["A"])          # no thread reaches the fill
    p = inp["P"].copy()
    p[::2] = 1
    np.testing.assert_array_equal(out["P"], p)                 # a plain store runs once per thread


def test_blocks_run_one_after_another_with_fresh_fragments():
    func = kernel('A: T.Buffer((2, 16), "float32"), O: T.Buffer((2, 16), "float32")', f'''
Tx.copy(f[0:16], A[bx, 0:16])
for i in T.parallel(16):
    f[i] = f[i] * T.float32(bx + 1)
Tx.copy(O[bx, 0:16], f[0:16])''', blocks=2, allocs=f'f = T.alloc_buffer((16,), "float32", {F})')
    inp, out, _ = run(func)
    np.testing.assert_array_equal(out["O"], inp["A"] * np.array([[1], [2]], np.float32))


# ------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("body,error,match", [
    ("for i in T.parallel(8):\n    O[0] = A[i]", UnsupportedByReference, "race"),
    ("for i in T.parallel(8):\n    O[i] = A[i + 1]", ReferenceOutOfBounds, "index 8 of dimension 0 is outside buffer A"),
    ("Tx.copy(O[0:8], A[100000:100008])", ReferenceOutOfBounds, "region 100000:100008 of dimension 0"),
    ("for i in T.parallel(8):\n    O[i] = A[tx % 8]", UnsupportedByReference, "parallel loop that reads threadIdx"),
    ("for i in T.parallel(8):\n    O[i] = T.atan(A[i])", UnsupportedByReference, "the call tirx.atan"),
])
def test_constructs_it_cannot_model_are_refused_by_name(body, error, match):
    # without safe memory an index outside a parameter is an error (with it, the read gives the pad)
    func = kernel('A: T.Buffer((8,), "float32"), O: T.Buffer((8,), "float32")', body) \
        .with_attr("tilelayout.safe_memory", False)
    with pytest.raises(error, match=match):
        run(func)


# ------------------------------------------------------------------------------------------- agreement

def test_agrees_with_the_compiled_sequential_semantics():
    func = kernel('A: T.Buffer((16, 24), "float16"), O: T.Buffer((24, 16), "float32"), S: T.Buffer((16,), "float16")',
                  f'''
Tx.copy(f[0:16, 0:24], A[0:16, 0:24])
Tx.max(s[0:16], f[0:16, 0:24], axes=[1])
for i in T.parallel(16):
    for j in T.parallel(24):
        O[j, i] = T.Cast("float32", T.max(f[i, j] - s[i], T.float16(-0.5)) * T.float16(1.7))
Tx.copy(S[0:16], s[0:16])''', allocs=f'''
f = T.alloc_buffer((16, 24), "float16", {F})
s = T.alloc_buffer((16,), "float16", {F})''')
    ours, theirs = reference_outputs(func, seed=4), sequential_outputs(func, seed=4)
    # float arithmetic is flagged inexact (a compiler may contract or fold it), but here the two agree bit for bit
    problems, _ = compare_outputs(ours, theirs, exact=True)
    assert problems == []


# ------------------------------------------------------------------------------------------- NaN rules

@pytest.mark.parametrize("exact", [True, False])
def test_nan_never_matches_a_number_and_matches_nan_in_the_same_place(exact):
    nan = np.float32("nan")
    want = {"X": np.array([1.0, nan, 3.0, np.inf], np.float32)}
    assert compare_outputs({"X": want["X"].copy()}, want, exact)[0] == []
    for got in ([nan, nan, 3.0, np.inf], [1.0, 2.0, 3.0, np.inf], [1.0, nan, 3.0, -np.inf], [1.0, nan, 3, nan]):
        problems, _ = compare_outputs({"X": np.array(got, np.float32)}, want, exact, None if exact else (0.5, 0.5))
        assert len(problems) == 1 and "1 of 4 elements differ" in problems[0], (got, problems)


def test_check_numeric_in_tolerance_mode_fails_a_nan_reference():
    func = kernel('A: T.Buffer((8, 16), "float32"), S: T.Buffer((8,), "float32")', f'''
Tx.copy(a[0:8, 0:16], A[0:8, 0:16])
Tx.sum(s[0:8], a[0:8, 0:16], axes=[1])
Tx.copy(S[0:8], s[0:8])''', threads=32, allocs=f'''
a = T.alloc_buffer((8, 16), "float32", {F})
s = T.alloc_buffer((8,), "float32", {F})''')
    good = check_numeric(func)
    assert good.ok and not good.exact
    bad = check_numeric(func, reference=lambda d: {"S": np.full(8, np.nan, np.float32)})
    assert not bad.ok and "S: 8 of 8 elements differ" in bad.message


def test_grouped_accumulation_means_the_updates_in_iteration_order():
    # TileLang's #1374: several parallel iterations update one element; the lowering keeps each group in one
    # thread, and the interpreter gives the same meaning (it used to see 0 + last value when all values agreed)
    func = kernel('A: T.Buffer((8, 12), "float32"), O: T.Buffer((8, 3), "float32")', '''
for i in T.parallel(8):
    for j in T.parallel(3):
        O[i, j] = T.float32(0)
for i in T.parallel(8):
    for j in T.parallel(12):
        O[i, j // 4] = O[i, j // 4] + A[i, j]''')
    inp, out, _ = run(func)
    np.testing.assert_allclose(out["O"], inp["A"].reshape(8, 3, 4).sum(axis=2), rtol=1e-6)


# ------------------------------------------------------------------------------------------- dynamic shapes

def _dynamic_tiles():
    import importlib
    return importlib.import_module("cases.dynamic_tiles")


@pytest.mark.parametrize("m", [128, 100, 37, 1])
def test_symbolic_extents_bind_from_the_arrays_and_the_partial_tile_reads_zero_writes_nothing(m):
    """Rows past ``m`` in the last tile read 0 and their stores are dropped: row sums of an (m, 128) matrix are
    exactly numpy's, whatever ``m``; the grid (``ceildiv(m, 64)`` blocks) is evaluated from the bound ``m``."""
    func = _dynamic_tiles().VARIANTS["row_sums_64x128_t128"]()
    inputs = random_inputs(func, 0, {"m": m})
    assert inputs["A"].shape == (m, 128) and inputs["S"].shape == (m,)
    out = run_reference(func, inputs).outputs
    np.testing.assert_allclose(out["S"], inputs["A"].astype(np.float64).sum(axis=1), rtol=1e-5)
    # a 2-D grid over two symbolic extents, through shared memory
    func = _dynamic_tiles().VARIANTS["staged_2d_32x32_t64"]()
    inputs = random_inputs(func, 1, {"m": m, "n": 45})
    out = run_reference(func, inputs).outputs
    np.testing.assert_array_equal(out["B"], (inputs["A"] + np.float16(1)).astype(np.float16))


def test_symbolic_extents_must_be_given_and_must_agree():
    func = _dynamic_tiles().VARIANTS["gemm_m_64x64x32_t128"]()
    from tilelayout.errors import ConfigError
    with pytest.raises(ConfigError, match="symbolic extent m"):
        random_inputs(func)
    inputs = random_inputs(func, 0, {"m": 100})
    inputs["C"] = np.zeros((99, 64), np.float32)
    with pytest.raises(UnsupportedByReference, match="m = 99"):
        run_reference(func, inputs)


def test_static_buffers_refuse_regions_past_their_end_without_safe_memory():
    func = kernel('A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")',
                  "Tx.copy(f[0:64], A[bx * 32:bx * 32 + 64])\nTx.copy(B[0:64], f[0:64])",
                  blocks=2, allocs=f"f = T.alloc_buffer((64,), \"float32\", {F})")
    with pytest.raises(ReferenceOutOfBounds, match="outside buffer A"):
        run(func.with_attr("tilelayout.safe_memory", False))
    inp, out, _ = run(func)                # safe memory (the default): past the end reads the pad, 0
    np.testing.assert_array_equal(out["B"], np.concatenate([inp["A"][32:], np.zeros(32, np.float32)]))
    inp, out, _ = run(func.with_attr("tilelayout.safe_memory_pad", {"A": -1.5}))
    np.testing.assert_array_equal(out["B"], np.concatenate([inp["A"][32:], np.full(32, -1.5, np.float32)]))


# ------------------------------------------------------------------------------------------- atomics

def test_atomics_apply_every_lanes_update_where_a_plain_store_would_race():
    """A histogram: 64 iterations add 1 to 4 bins; a shared row max per block with atomicMax; atomics over
    blocks accumulate. Written in both spellings the front end accepts."""
    func = kernel('A: T.Buffer((64,), "int32"), H: T.Buffer((4,), "int32"), M: T.Buffer((4,), "int32"), '
                  'S: T.Buffer((4,), "float32"), X: T.Buffer((64,), "float32")', '''
for i in T.parallel(64):
    T.evaluate(T.call_extern("int32", "atomicAdd", T.address_of(H[(A[i] % 4 + 4) % 4]), 1))
for i in T.parallel(64):
    T.evaluate(T.call_extern("int32", "atomicMax", T.address_of(M[i % 4]), A[i]))
for i in T.parallel(64):
    T.evaluate(T.cuda.atomic_add(T.address_of(S[i // 16]), X[i]))''', blocks=2)
    inp, out, exact = run(func)
    a = inp["A"]
    np.testing.assert_array_equal(out["H"], inp["H"] + 2 * np.bincount(np.mod(a, 4), minlength=4))
    np.testing.assert_array_equal(out["M"], np.maximum(inp["M"], a.reshape(16, 4).max(axis=0)))
    np.testing.assert_allclose(out["S"], inp["S"] + 2 * inp["X"].reshape(4, 16).sum(axis=1), rtol=1e-5)
    assert not exact        # float atomics add in an order the hardware chooses


# ------------------------------------------------------------------------------------------- thread dimensions

def test_several_thread_dimensions_use_the_linear_thread_id_x_fastest():
    """threads=(32, 4): each thread writes its own (ty, tx); a row max over the block; both against numpy."""
    sys.path.insert(0, str(ROOT / "tests"))
    import kernels_coverage as K
    func = K.row_softmax_2d_block(64, 128, 32, 4)
    inputs = random_inputs(func)
    out = run_reference(func, inputs).outputs
    np.testing.assert_array_equal(out["C"], np.add.outer(np.arange(4) * 1000, np.arange(32)))
    a = inputs["A"]
    np.testing.assert_array_equal(out["B"], a - a.max(axis=1, keepdims=True))


# ------------------------------------------------------------------------------------------- bitwise integers

def _c_int(value: int, bits: int, signed: bool) -> int:
    """``value`` wrapped to a ``bits``-wide two's-complement integer (the expected values below are Python
    ints, whose shifts and masks act on an unbounded two's complement, then wrapped the way C stores them)."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if signed and value >> (bits - 1) else value


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_shifts_and_masks_follow_c_on_every_value_and_amount(dtype):
    """Every 8-bit value (a spread of 32-bit ones) by every legal amount: ``>>`` shifts the sign in for signed
    types and zeros for unsigned, ``<<`` wraps, ``&``/``|``/``^``/``~`` act on the stored bits (the unpacking
    of int4 weights packed in int8 bytes reads ``(b >> 4) & 15``)."""
    bits, signed = 8 * np.dtype(dtype).itemsize, np.dtype(dtype).kind == "i"
    values = np.arange(-128, 128) if dtype == "int8" else np.arange(256) if dtype == "uint8" else \
        np.array([0, 1, -1, 7, -8, 123456789, -123456789, 2 ** 31 - 1, -2 ** 31, 0x55AA55AA - 2 ** 31])
    amounts = np.arange(bits)
    n = values.size * amounts.size
    func = kernel(f'A: T.Buffer(({n},), "{dtype}"), S: T.Buffer(({n},), "{dtype}"), '
                  f'O: T.Buffer((6, {n}), "{dtype}")',
                  f'''
for i in T.parallel({n}):
    O[0, i] = T.shift_right(A[i], S[i])
    O[1, i] = T.shift_left(A[i], S[i])
    O[2, i] = T.bitwise_and(A[i], T.{dtype}(13))
    O[3, i] = T.bitwise_or(A[i], S[i])
    O[4, i] = T.bitwise_xor(A[i], T.{dtype}(6))
    O[5, i] = T.bitwise_not(A[i])''')
    a = np.repeat(values, amounts.size)
    s = np.tile(amounts, values.size)
    np_dtype = np.dtype(dtype)
    res = run_reference(func, {"A": a.astype(np_dtype), "S": s.astype(np_dtype), "O": np.zeros((6, n), np_dtype)})
    out = res.outputs["O"]
    for k, (x, y) in enumerate(zip(a.tolist(), s.tolist())):
        x = _c_int(x, bits, signed)
        want = [x >> y, x << y, x & 13, x | y, x ^ 6, ~x]
        got = [int(v) for v in out[:, k]]
        assert got == [_c_int(w, bits, signed) for w in want], (dtype, x, y, got)


@pytest.mark.parametrize("amount", ["T.int8(8)", "T.int8(-1)"])
def test_a_shift_by_the_width_or_a_negative_amount_is_refused(amount):
    func = kernel('A: T.Buffer((8,), "int8"), O: T.Buffer((8,), "int8")',
                  f'for i in T.parallel(8):\n    O[i] = T.shift_right(A[i], {amount})')
    with pytest.raises(UnsupportedByReference, match="shift by"):
        run(func)


def test_bitwise_operators_on_bools_combine_truth_values_and_the_rest_are_refused():
    """``&``, ``|``, ``^`` of bools are logical; ``~`` and shifts of a bool promote it to int in C, which the
    interpreter does not model (TVM builds no bitwise node on floats at all)."""
    func = kernel('A: T.Buffer((8,), "int32"), O: T.Buffer((8,), "int32")',
                  'for i in T.parallel(8):\n    O[i] = T.Select(T.bitwise_xor(A[i] > 0, A[i] % 2 == 0), 1, 0)')
    inp, out, _ = run(func)
    np.testing.assert_array_equal(out["O"], ((inp["A"] > 0) ^ (inp["A"] % 2 == 0)).astype(np.int32))
    func = kernel('A: T.Buffer((8,), "int32"), O: T.Buffer((8,), "int32")',
                  'for i in T.parallel(8):\n    O[i] = T.Select(T.bitwise_not(A[i] > 0), 1, 0)')
    with pytest.raises(UnsupportedByReference, match="integers only"):
        run(func)


def test_nibble_unpacking_agrees_with_the_compiled_sequential_semantics():
    """int4 weights packed two per signed byte, unpacked as TileLang's dequantisation examples do."""
    func = kernel('B: T.Buffer((16, 8), "int8"), O: T.Buffer((16, 16), "float16")',
                  f'''
Tx.copy(b[0:16, 0:8], B[0:16, 0:8])
for i in T.parallel(16):
    for j in T.parallel(16):
        O[i, j] = T.Cast("float16", T.bitwise_and(T.shift_right(b[i, j // 2], T.Cast("int8", j % 2 * 4)), T.int8(15)))''',
                  allocs=f'b = T.alloc_buffer((16, 8), "int8", {F})')
    ours, theirs = reference_outputs(func, seed=3), sequential_outputs(func, seed=3)
    assert compare_outputs(ours, theirs, exact=True)[0] == []
    packed = ours["B"].astype(np.int64) & 0xFF
    np.testing.assert_array_equal(ours["O"][:, 0::2], packed % 16)
    np.testing.assert_array_equal(ours["O"][:, 1::2], packed // 16)
