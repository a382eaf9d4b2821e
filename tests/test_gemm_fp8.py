"""fp8 (e4m3 / e5m2) gemms on tensor cores: mma.sync m16n8k32 on sm_89+, wgmma m64nNk32 on sm_90a.

The fp8 decoding of the CPU path is checked against ml_dtypes over every code; the lowered gemms run on the CPU
through the instruction emulation against numpy (ml_dtypes decodes the inputs, float64 products); a lowering
that packs fp8 codes into the wrong byte of a register is caught by the emulation; nvcc compiles the CUDA."""
from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kernels_mma as K  # noqa: E402
from conftest import SM80, SM89, SM90, SM90A, gemm_reports, needs_nvcc  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.passes.inference.gemm_plan import plan_gemms  # noqa: E402
from tilelayout.passes.lowering import lower_gemm, lower_wgmma  # noqa: E402
from tilelayout.passes.lowering.cpu_fp8 import cpu_fp8  # noqa: E402
from tilelayout.passes.lowering.mma_ptx import MmaInst, WgmmaInst, mma_instruction, wgmma_instruction  # noqa: E402
from tilelayout.passes.lowering.pipeline import check_numeric, compile_ptx, cuda_source, lower_func  # noqa: E402

E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"


def _report(func, target) -> str:
    (text,) = gemm_reports(lower_func(func, target))
    return text


def _ref(trans_b: bool):
    def ref(d):
        b = d["B"].astype(np.float64)          # ml_dtypes decodes the fp8 codes
        return {"C": d["A"].astype(np.float64) @ (b.T if trans_b else b)}
    return ref


# ------------------------------------------------------------------------------------ fp8 decoding on the CPU

def _decode_kernel(dtype: str):
    @T.prim_func
    def kernel(A: T.Buffer((256,), dtype), C: T.Buffer((256,), "float32"), D: T.Buffer((256,), "uint8")):
        S = T.alloc_buffer((256,), dtype)
        for i in range(256):
            S[i] = A[i]
        for i in range(256):
            C[i] = T.Cast("float32", S[i])
            D[i] = T.reinterpret("uint8", S[i])
    return kernel


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_cpu_fp8_decodes_every_code_like_ml_dtypes(dtype):
    """Every one of the 256 codes (zero, subnormals, infinities, NaN) decodes to ml_dtypes' value, and an
    allocated fp8 buffer keeps its bits (TVM's own LLVM conversion maps e4m3 code 0 to 2^-7)."""
    ex = tvm.compile(tvm.IRModule({"main": cpu_fp8(_decode_kernel(dtype))}), target="llvm")
    codes = np.arange(256, dtype=np.uint8)
    a = codes.view(getattr(ml_dtypes, dtype))
    ts = [tvm.runtime.tensor(a), tvm.runtime.tensor(np.zeros(256, "float32")), tvm.runtime.tensor(np.zeros(256, "uint8"))]
    ex["main"](*ts)
    np.testing.assert_array_equal(ts[1].numpy(), a.astype(np.float32))      # NaN == NaN here
    np.testing.assert_array_equal(ts[2].numpy(), codes)
    assert np.array_equal(np.signbit(ts[1].numpy()), np.signbit(a.astype(np.float32)))


# ------------------------------------------------------------------------------------ fp8 encoding on the CPU

def _encode_kernel(dtype: str, src: str, n: int):
    @T.prim_func
    def kernel(A: T.Buffer((n,), src), B: T.Buffer((n,), dtype), D: T.Buffer((n,), "uint8")):
        S = T.alloc_buffer((n,), dtype)
        for i in range(n):
            S[i] = T.Cast(dtype, A[i])
            B[i] = T.Cast(dtype, A[i])
        for i in range(n):
            D[i] = T.reinterpret("uint8", S[i])
    return kernel


def _nearest_codes(x: np.ndarray, dtype: str) -> np.ndarray:
    """The fp8 code CUDA's conversion gives each finite or infinite ``x`` (NaN excluded), found from the table
    of the format's values rather than from bits: the nearest value, ties to the even code, magnitudes past
    the largest finite value saturating to it, the sign kept."""
    largest = {E4M3: 0x7E, E5M2: 0x7B}[dtype]
    table = np.arange(largest + 1, dtype=np.uint8).view(getattr(ml_dtypes, dtype)).astype(np.float64)
    a = np.minimum(np.abs(x.astype(np.float64)), table[-1])
    hi = np.clip(np.searchsorted(table, a), 1, largest)
    lo = hi - 1
    d_lo, d_hi = a - table[lo], table[hi] - a
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def _encoding_inputs(dtype: str, src: str) -> np.ndarray:
    """Every value of the format, every midpoint between neighbours and one float32 step either side of each,
    values past the largest finite one, infinity, zero, float32 subnormals, random values over ten decades;
    both signs; in ``src``."""
    largest = {E4M3: 0x7E, E5M2: 0x7B}[dtype]
    table = np.arange(largest + 1, dtype=np.uint8).view(getattr(ml_dtypes, dtype)).astype(np.float64)
    edge = np.concatenate([table, (table[1:] + table[:-1]) / 2, table[-1] * np.array([1.01, 1.0625, 1.07, 10, 1e30]),
                           [np.inf, 0.0, 1e-40, 1e-30]]).astype(np.float32)
    rng = np.random.default_rng(0)
    x = np.concatenate([edge, np.nextafter(edge, np.float32(np.inf)), np.nextafter(edge, np.float32(-np.inf)),
                        (rng.standard_normal(4000) * 10.0 ** rng.uniform(-5, 5, 4000)).astype(np.float32)])
    x = np.concatenate([x, -x, [np.nan]])
    with np.errstate(over="ignore"):
        return x.astype(getattr(ml_dtypes, src) if src == "bfloat16" else src)


@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_cpu_fp8_encodes_like_cuda(dtype, src):
    """A conversion to fp8, stored into an allocated fp8 buffer (which TVM's LLVM backend cannot compile on its
    own) or a parameter, gives CUDA's code for every edge of the format: the nearest value, ties to even,
    saturation past the largest finite value (infinity too), NaN kept, signed zeros."""
    x = _encoding_inputs(dtype, src)
    ex = tvm.compile(tvm.IRModule({"main": cpu_fp8(_encode_kernel(dtype, src, x.size))}), target="llvm")
    ts = [tvm.runtime.tensor(x), tvm.runtime.tensor(np.zeros(x.size, getattr(ml_dtypes, dtype))),
          tvm.runtime.tensor(np.zeros(x.size, "uint8"))]
    ex["main"](*ts)
    stored, param = ts[2].numpy(), ts[1].numpy().view(np.uint8)
    finite = ~np.isnan(x.astype(np.float64))
    want = _nearest_codes(x[finite], dtype)
    np.testing.assert_array_equal(stored[finite], want)
    np.testing.assert_array_equal(param[finite], want)
    assert np.isnan(stored[~finite].view(getattr(ml_dtypes, dtype)).astype(np.float32)).all()


# ------------------------------------------------------------------------------------ instruction facts

def test_fp8_instructions_reuse_the_8bit_k32_fragments():
    """fp8 m16n8k32 owns its registers like int8's m16n8k32: one statement of the fragments, K = 32, 4 per register."""
    f8 = mma_instruction(E4M3, E5M2, "float32")
    s8 = mma_instruction("int8", "int8", "int32")
    assert (f8.k, f8.pack) == (32, 4)
    for lane in range(32):
        for r in range(4):
            for p in range(4):
                assert f8.a_element(lane, r, p) == s8.a_element(lane, r, p)
        for r in range(2):
            for p in range(4):
                assert f8.b_element(lane, r, p) == s8.b_element(lane, r, p)
    a = tl.make_gemm_fragment_a(16, 8, 32, 32, E4M3)
    for i in range(16):
        for k in range(32):
            lane, reg, part = f8.a_owner(i, k)
            assert a.thread_of(i, k) == lane and a.map(i, k)[0] == reg * 4 + part


def test_fp8_ptx_spellings():
    assert mma_instruction(E4M3, E4M3, "float32").ptx == "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
    assert mma_instruction(E5M2, E4M3, "float16").ptx == "mma.sync.aligned.m16n8k32.row.col.f16.e5m2.e4m3.f16"
    w = wgmma_instruction(64, E4M3, E5M2, "float32")
    assert w.ptx("ss") == "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2" and not w.transposable
    assert wgmma_instruction(64, "float16", "float16", "float32").transposable
    assert mma_instruction(E4M3, "float16", "float32") is None


# ------------------------------------------------------------------------------------ lowered gemms on the CPU

FP8_GEMMS = {
    # name: (target, A, B, accumulator, transpose_B, A scope, the instruction the report starts with)
    "sm89_e4m3_f32": (SM89, E4M3, E4M3, "float32", True, "shared", "mma.sync m16n8k32 e4m3xe4m3->f32"),
    "sm89_e5m2_f16": (SM89, E5M2, E5M2, "float16", True, "shared", "mma.sync m16n8k32 e5m2xe5m2->f16"),
    "sm89_mixed_Bkn": (SM89, E4M3, E5M2, "float32", False, "shared", "mma.sync m16n8k32 e4m3xe5m2->f32"),
    "sm89_regA": (SM89, E5M2, E4M3, "float32", True, "local.fragment", "mma.sync m16n8k32 e5m2xe4m3->f32"),
    "sm90_e4m3": (SM90, E4M3, E4M3, "float32", True, "shared", "mma.sync m16n8k32 e4m3xe4m3->f32"),
    "sm90a_ss_f16": (SM90A, E5M2, E4M3, "float16", True, "shared", "wgmma m64n64k32 e5m2xe4m3->f16"),
    "sm90a_rs": (SM90A, E4M3, E4M3, "float32", True, "local.fragment", "wgmma m64n64k32 e4m3xe4m3->f32"),
    "sm90a_Bkn": (SM90A, E4M3, E4M3, "float32", False, "shared", "mma.sync m16n8k32 e4m3xe4m3->f32"),
}


@pytest.mark.parametrize("name", sorted(FP8_GEMMS))
def test_fp8_gemm_lowers_to_tensor_cores_and_matches_numpy(name):
    target, a, b, acc, trans_b, scope, inst = FP8_GEMMS[name]
    func = K.gemm(64, 64, 64, a_dtype=a, b_dtype=b, acc=acc, trans_b=trans_b, a_scope=scope)
    assert _report(func, target).startswith(inst)
    tol = (2e-2, 2e-2) if acc == "float16" else (1e-5, 1e-5)
    res = check_numeric(func, _ref(trans_b), target=target, tolerance=tol)
    assert res.ok, res.message


def test_fp8_wgmma_needs_k_major_operands():
    """B stored [K, N]: wgmma has no transpose for 8-bit types, so sm_90 plans mma.sync (TileLang's rule) and a
    forced wgmma layout is realised by mma.sync with the reason in the report."""
    func = K.gemm(64, 64, 64, a_dtype=E4M3, b_dtype=E4M3, trans_b=False)
    from tilelayout.passes.inference.frontend import build_op_graph
    ops = build_op_graph(func).ops
    (plan,) = plan_gemms(ops, 128, tvm.target.Target(SM90)).values()
    assert plan.instruction == "mma_sync"
    func_t = K.gemm(64, 64, 64, a_dtype=E4M3, b_dtype=E4M3, trans_b=True)
    (plan_t,) = plan_gemms(build_op_graph(func_t).ops, 128, tvm.target.Target(SM90)).values()
    assert plan_t.instruction == "wgmma"


def test_fp8_before_sm89_is_refused():
    with pytest.raises(tl.TileLayoutError, match=r"float8_e4m3fn operands need sm_89 or newer"):
        tl.lower(K.gemm(64, 64, 64, a_dtype=E4M3, b_dtype=E4M3, trans_b=True), SM80)
    from tilelayout.passes.inference.frontend import build_op_graph
    op = next(o for o in build_op_graph(K.gemm(64, 64, 64, a_dtype=E4M3, b_dtype=E4M3)).ops if o.kind == "gemm")
    with pytest.raises(tl.TileLayoutError, match=r"needs sm_89 or newer"):
        lower_gemm.choose_instruction(op, tvm.target.Target(SM80))


def test_fp8_with_a_16bit_operand_is_refused():
    with pytest.raises(tl.TileLayoutError, match=r"no tensor-core instruction multiplies A \(float8_e4m3fn\) by B "
                                                 r"\(float16\)"):
        tl.lower(K.gemm(64, 64, 64, a_dtype=E4M3, b_dtype="float16"), SM89)


# ------------------------------------------------------------------------------------ wrong packing is caught

class _ByteSwappedA(MmaInst):
    """A lowering that puts each register's four fp8 codes in reverse byte order (same lane, so the ownership
    check still passes)."""

    def a_element(self, lane, reg, part):
        return MmaInst.a_element(self, lane, reg, self.pack - 1 - part)


class _ByteSwappedWgmmaA(WgmmaInst):
    def a_element(self, thread, reg, part):
        return WgmmaInst.a_element(self, thread, reg, self.pack - 1 - part)


def test_fp8_codes_in_the_wrong_bytes_give_a_wrong_cpu_result(monkeypatch):
    func = K.gemm(64, 64, 64, a_dtype=E4M3, b_dtype=E4M3, trans_b=True, a_scope="local.fragment")
    assert check_numeric(func, _ref(True), SM89, tolerance=(1e-5, 1e-5)).ok
    real = lower_gemm.choose_instruction

    def choose(op, target):
        inst = real(op, target)
        return _ByteSwappedA(inst.k, inst.a_dtype, inst.b_dtype, inst.acc_dtype)
    monkeypatch.setattr(lower_gemm, "choose_instruction", choose)
    assert "A: registers" in _report(func, SM89)
    result = check_numeric(func, _ref(True), SM89, tolerance=(1e-5, 1e-5))
    assert not result.ok and result.message.startswith("C:")


def test_fp8_wgmma_rs_codes_in_the_wrong_bytes_give_a_wrong_cpu_result(monkeypatch):
    func = K.gemm(64, 64, 64, a_dtype=E5M2, b_dtype=E5M2, trans_b=True, a_scope="local.fragment")
    real = lower_wgmma.wgmma_instruction

    def wrong(*args):
        inst = real(*args)
        return None if inst is None else _ByteSwappedWgmmaA(inst.n, inst.k, inst.a_dtype, inst.b_dtype, inst.acc_dtype)
    monkeypatch.setattr(lower_wgmma, "wgmma_instruction", wrong)
    assert "RS" in _report(func, SM90A)
    result = check_numeric(func, _ref(True), SM90A, tolerance=(1e-5, 1e-5))
    assert not result.ok and result.message.startswith("C:")


def test_fp8_wgmma_descriptor_of_the_wrong_swizzle_gives_a_wrong_cpu_result(monkeypatch):
    func = K.gemm(64, 64, 64, a_dtype=E4M3, b_dtype=E4M3, trans_b=True)
    real = lower_wgmma.encode_fields

    def wrong(layout):
        bits = real(layout)
        return bits ^ (1 << 62) if layout.mode == 2 else bits        # 64B (mode 2) -> 32B (mode 3)
    monkeypatch.setattr(lower_wgmma, "encode_fields", wrong)
    result = check_numeric(func, _ref(True), SM90A, tolerance=(1e-5, 1e-5))
    assert not result.ok and result.message.startswith("C:")


# ------------------------------------------------------------------------------------ CUDA

@needs_nvcc
@pytest.mark.parametrize("arch,a,b,acc,scope,want", [
    ("sm_89", E4M3, E4M3, "float32", "shared", "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"),
    ("sm_89", E5M2, E4M3, "float16", "local.fragment", "mma.sync.aligned.m16n8k32.row.col.f16.e5m2.e4m3.f16"),
    ("sm_90a", E4M3, E5M2, "float32", "shared", "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2"),
    ("sm_90a", E5M2, E5M2, "float16", "local.fragment", "wgmma.mma_async.sync.aligned.m64n64k32.f16.e5m2.e5m2"),
])
def test_fp8_gemm_compiles_with_nvcc(arch, a, b, acc, scope, want):
    target = {"kind": "cuda", "arch": arch}
    ptx = compile_ptx(cuda_source(K.gemm(64, 64, 64, a_dtype=a, b_dtype=b, acc=acc, trans_b=True, a_scope=scope),
                                  target), target).decode()
    assert want in ptx


@needs_nvcc
def test_gemm_fp8_case_compiles_for_its_targets():
    from cases import gemm_fp8
    for name, build in gemm_fp8.VARIANTS.items():
        arch = gemm_fp8.SPECS[name][0]
        ptx = compile_ptx(cuda_source(build()), {"kind": "cuda", "arch": arch}).decode()
        assert ("wgmma.mma_async" in ptx) == arch.endswith("a") and ("mma.sync" in ptx) != arch.endswith("a")
