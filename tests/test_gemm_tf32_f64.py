"""tf32 (f32 operands: mma.sync m16n8k8 .tf32, wgmma m64nNk8 .tf32 K-major) and f64 (mma.sync m8n8k4 .f64) gemms:
lowered to tensor cores, run on the CPU through the instruction emulation against numpy, compiled with nvcc.

tf32 precision: the lowering passes the raw f32 bits (no cvt.rna.tf32.f32, as TileLang); the tensor core reads
the sign, exponent and top 10 mantissa bits (truncation), and the emulation and the numpy interpreter model that:
the CPU result equals a reference that truncates the inputs and differs from the full-f32 product."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tvm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kernels_mma as K  # noqa: E402
from conftest import SM80, SM90, SM90A, gemm_reports, needs_nvcc  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.passes.lowering import lower_gemm  # noqa: E402
from tilelayout.passes.lowering.mma_ptx import MmaInst, mma_instruction  # noqa: E402
from tilelayout.passes.lowering.pipeline import check_numeric, compile_ptx, cuda_source, lower_func  # noqa: E402



def _report(func, target) -> str:
    (text,) = gemm_reports(lower_func(func, target))
    return text


def _tf32(x: np.ndarray) -> np.ndarray:
    """numpy's own statement of the tensor core's reading of an f32 register: low 13 mantissa bits dropped."""
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def _ref(trans_b: bool, tf32: bool):
    def ref(d):
        a, b = d["A"], d["B"]
        if tf32:
            a, b = _tf32(a), _tf32(b)
        a, b = a.astype(np.float64), b.astype(np.float64)
        return {"C": a @ (b.T if trans_b else b)}
    return ref


TF32 = {
    "sm80_shared": (SM80, False, "shared", "mma.sync m16n8k8 tf32xtf32->f32"),
    "sm80_regA": (SM80, True, "local.fragment", "mma.sync m16n8k8 tf32xtf32->f32"),
    "sm90a_ss": (SM90A, True, "shared", "wgmma m64n64k8 tf32xtf32->f32"),
    "sm90a_rs": (SM90A, True, "local.fragment", "wgmma m64n64k8 tf32xtf32->f32"),
    "sm90a_Bkn": (SM90A, False, "shared", "mma.sync m16n8k8 tf32xtf32->f32"),
}


@pytest.mark.parametrize("name", sorted(TF32))
def test_tf32_gemm_reads_truncated_operands(name):
    target, trans_b, scope, inst = TF32[name]
    func = K.gemm(64, 64, 32, a_dtype="float32", b_dtype="float32", trans_b=trans_b, a_scope=scope)
    assert _report(func, target).startswith(inst)
    res = check_numeric(func, _ref(trans_b, tf32=True), target=target, tolerance=(1e-5, 1e-5))
    assert res.ok, res.message
    full = check_numeric(func, _ref(trans_b, tf32=False), target=target, tolerance=(1e-5, 1e-5))
    assert not full.ok and full.max_error["C"] > 1e-3          # the truncation is visible, not rounded away


def test_the_numpy_interpreter_models_tf32_too():
    func = K.gemm(64, 64, 32, a_dtype="float32", b_dtype="float32")
    res = check_numeric(func, None, target=SM80, tolerance=(1e-5, 1e-5))    # judged by tilelayout.reference
    assert res.ok, res.message


def test_tf32_wgmma_needs_k_major_operands():
    """B stored [K, N]: sm_90 plans mma.sync for tf32, as TileLang does (wgmma has no tf32 transpose)."""
    rep = _report(K.gemm(64, 64, 32, a_dtype="float32", b_dtype="float32"), SM90)
    assert rep.startswith("mma.sync m16n8k8") and "2x2 warps" in rep


F64 = {
    "sm80": (SM80, False, 64, 64, 32, 128, "mma.sync m8n8k4 f64xf64->f64 x128 per warp (2x2 warps"),
    "sm80_Bt": (SM80, True, 64, 64, 32, 128, "mma.sync m8n8k4 f64xf64->f64"),
    "sm90a_t64": (SM90A, False, 32, 32, 16, 64, "mma.sync m8n8k4 f64xf64->f64"),
}


@pytest.mark.parametrize("name", sorted(F64))
def test_f64_gemm_uses_m8n8k4_and_matches_numpy(name):
    target, trans_b, m, n, k, threads, inst = F64[name]
    func = K.gemm(m, n, k, threads=threads, a_dtype="float64", b_dtype="float64", acc="float64", trans_b=trans_b)
    assert _report(func, target).startswith(inst)
    res = check_numeric(func, _ref(trans_b, tf32=False), target=target, tolerance=(1e-12, 1e-12))
    assert res.ok, res.message


def test_f64_fragments_are_the_m8n8k4_tables():
    """PTX's .f64 m8n8k4 fragments: A row lane // 4, k lane % 4; B k lane % 4, column lane // 4; C row lane // 4,
    columns 2 * (lane % 4) + {0, 1}; one register each for A and B, two for C."""
    f64 = mma_instruction("float64", "float64", "float64")
    assert (f64.m, f64.n, f64.k, f64.a_regs, f64.b_regs, f64.c_elems, f64.reg_dtype) == (8, 8, 4, 1, 1, 2, "float64")
    for lane in range(32):
        assert f64.a_element(lane, 0, 0) == (lane // 4, lane % 4)
        assert f64.b_element(lane, 0, 0) == (lane % 4, lane // 4)
        assert [f64.c_element(lane, e) for e in range(2)] == [(lane // 4, 2 * (lane % 4)), (lane // 4, 2 * (lane % 4) + 1)]
    acc = tl.make_mma_accumulator_fragment(16, 8, 32, "float64")       # two m8n8 blocks in one warp
    for i in range(16):
        for j in range(8):
            lane, e = f64.c_owner(i % 8, j)
            assert acc.thread_of(i, j) == lane and acc.map(i, j)[0] == 2 * (i // 8) + e


class _SwappedC64(MmaInst):
    def c_element(self, lane, e):
        row, col = MmaInst.c_element(self, lane, e)
        return row, col - col % 2 + (1 - col % 2)


def test_f64_accumulator_in_the_wrong_registers_gives_a_wrong_cpu_result(monkeypatch):
    func = K.gemm(64, 64, 32, a_dtype="float64", b_dtype="float64", acc="float64")
    real = lower_gemm.choose_instruction

    def choose(op, target):
        inst = real(op, target)
        return _SwappedC64(inst.k, inst.a_dtype, inst.b_dtype, inst.acc_dtype, inst.m, inst.n)
    monkeypatch.setattr(lower_gemm, "choose_instruction", choose)
    result = check_numeric(func, _ref(False, tf32=False), SM80, tolerance=(1e-12, 1e-12))
    assert not result.ok and result.message.startswith("C:")


def test_f64_register_a_is_refused_with_advice():
    with pytest.raises(tl.TileLayoutError, match=r"gemm .*operand A \(A_s\) is a register fragment, but float64 gemms "
                                                 r"\(mma.sync m8n8k4\) read A from shared memory here; stage A_s"):
        tl.lower(K.gemm(64, 64, 32, a_dtype="float64", b_dtype="float64", acc="float64", a_scope="local.fragment"),
                 SM80)


@needs_nvcc
@pytest.mark.parametrize("arch,dtype,scope,want", [
    ("sm_80", "float32", "shared", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
    ("sm_90a", "float32", "shared", "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32"),
    ("sm_90a", "float32", "local.fragment", "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32"),
    ("sm_80", "float64", "shared", "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64"),
    ("sm_90a", "float64", "shared", "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64"),
])
def test_tf32_and_f64_gemms_compile_with_nvcc(arch, dtype, scope, want):
    target = {"kind": "cuda", "arch": arch}
    func = K.gemm(64, 64, 32, a_dtype=dtype, b_dtype=dtype, acc=dtype, trans_b=True, a_scope=scope)
    assert want in compile_ptx(cuda_source(func, target), target).decode()
