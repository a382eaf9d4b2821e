"""Tensor-core lowering of Tx.gemm: PTX fragment facts, the CPU emulation of ldmatrix / mma.sync, numerics of
lowered gemms against numpy, CUDA that nvcc compiles, and clear errors for what no instruction fits.

The emulation must catch a wrong layout: a permuted accumulator or register-A layout (with lowering's own
check switched off) gives a wrong CPU result."""
from __future__ import annotations

import sys
import warnings
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
from tilelayout import Fragment  # noqa: E402
from tilelayout.annotate import annotate_layouts  # noqa: E402
from tilelayout.passes.inference.layout_inference import infer_layouts  # noqa: E402
from tilelayout.passes.lowering import lower_gemm  # noqa: E402
from tilelayout.passes.lowering.loop_partition import LoweringError  # noqa: E402
from tilelayout.passes.lowering.mma_ptx import MmaInst, WgmmaInst, mma_instruction  # noqa: E402
from tilelayout.passes.lowering.pipeline import build_cpu, check_numeric, compile_ptx, cuda_source, lower_func  # noqa: E402
from tilelayout.passes.lowering.serialize_threads import serialize_threads  # noqa: E402



# ------------------------------------------------------------------------------------ PTX fragment facts

INSTS = [MmaInst(16, "float16", "float16", "float32"), MmaInst(16, "float16", "float16", "float16"),
         MmaInst(32, "int8", "int8", "int32")]


@pytest.mark.parametrize("inst", INSTS, ids=lambda i: i.name)
def test_mma_fragments_are_bijections(inst):
    for operand, rows, cols in (("a", 16, inst.k), ("b", inst.k, 8)):       # A is 16 x k, B is k x 8
        element, owner = getattr(inst, f"{operand}_element"), getattr(inst, f"{operand}_owner")
        seen = set()
        for lane in range(32):
            for r in range(getattr(inst, f"{operand}_regs")):
                for p in range(inst.pack):
                    cell = element(lane, r, p)
                    assert owner(*cell) == (lane, r, p), operand
                    seen.add(cell)
        assert seen == {(i, j) for i in range(rows) for j in range(cols)}, operand
    cells = {inst.c_element(lane, e) for lane in range(32) for e in range(4)}
    assert cells == {(i, j) for i in range(16) for j in range(8)}
    for lane in range(32):
        for e in range(4):
            assert inst.c_owner(*inst.c_element(lane, e)) == (lane, e)


def test_mma_fragments_match_ptx_table_entries():
    """Entries read off the PTX ISA figures for mma.m16n8k16 (.f16) and m16n8k32 (.s8), lane 5 (group 1, thread 1)."""
    f16 = MmaInst(16, "float16", "float16", "float32")
    assert [f16.a_element(5, r, p) for r in range(4) for p in range(2)] == [
        (1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]
    assert [f16.b_element(5, r, p) for r in range(2) for p in range(2)] == [(2, 1), (3, 1), (10, 1), (11, 1)]
    assert [f16.c_element(5, e) for e in range(4)] == [(1, 2), (1, 3), (9, 2), (9, 3)]
    s8 = MmaInst(32, "int8", "int8", "int32")
    assert [s8.a_element(5, r, p) for r in range(4) for p in range(4)] == (
        [(1, c) for c in range(4, 8)] + [(9, c) for c in range(4, 8)] + [(1, c) for c in range(20, 24)]
        + [(9, c) for c in range(20, 24)])
    assert [s8.b_element(5, r, p) for r in range(2) for p in range(4)] == [(k, 1) for k in (4, 5, 6, 7, 20, 21, 22, 23)]


def test_ptx_fragments_agree_with_the_inference_layouts():
    """Two independent statements of the same hardware facts: the inference-side builders and mma_ptx."""
    inst = MmaInst(16, "float16", "float16", "float32")
    acc = tl.make_mma_accumulator_fragment(16, 8, 32)
    a = tl.make_gemm_fragment_a(16, 8, 16, 32)
    for i in range(16):
        for j in range(8):
            assert acc.thread_of(i, j) == inst.c_owner(i, j)[0]
        for k in range(16):
            assert a.thread_of(i, k) == inst.a_owner(i, k)[0]
    w = WgmmaInst(64, 16, "float16", "float16", "float32")
    wacc = tl.make_wgmma_accumulator_fragment(64, 64, 128)
    for i in range(64):
        for j in range(64):
            t, e = w.c_owner(i, j)
            assert wacc.thread_of(i, j) == t and w.c_element(t, e) == (i, j)


# ------------------------------------------------------------------------------------ emulation

def test_emulated_ldmatrix_and_mma_match_numpy():
    f = serialize_threads(K.one_warp_mma)
    ex = tvm.compile(tvm.IRModule({"main": f}), target="llvm")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 16)).astype("float16")
    b = rng.standard_normal((16, 8)).astype("float16")
    ts = [tvm.runtime.tensor(x) for x in (a, b, np.zeros((16, 8), "float32"))]
    ex["main"](*ts)
    np.testing.assert_allclose(ts[2].numpy(), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-5)


@needs_nvcc
def test_hand_written_mma_kernel_compiles_to_ptx():
    src = tvm.compile(tvm.IRModule({"main": K.one_warp_mma}), target=tvm.target.Target(SM80)).mod.imports[0] \
        .inspect_source("cuda")
    ptx = compile_ptx(src, SM80).decode()
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx and "ldmatrix.sync.aligned" in ptx


# ------------------------------------------------------------------------------------ lowered gemms

GEMMS = {
    "f16_f32": dict(m=64, n=64, k=64),
    "f16_f32_At": dict(m=64, n=64, k=64, trans_a=True),
    "f16_f32_Bt": dict(m=64, n=64, k=64, trans_b=True),
    "bf16_f32": dict(m=64, n=64, k=32, a_dtype="bfloat16", b_dtype="bfloat16"),
    "f16_f16": dict(m=64, n=64, k=32, acc="float16"),
    "s8_s32": dict(m=64, n=64, k=64, a_dtype="int8", b_dtype="int8", acc="int32"),
    "s8_s32_Bt": dict(m=64, n=64, k=64, a_dtype="int8", b_dtype="int8", acc="int32", trans_b=True),
    "k_loop": dict(m=64, n=128, k=128, bk=32),
    "k_loop_pipelined": dict(m=64, n=128, k=128, bk=32, stages=2),   # num_stages: cp.async, two stages
    "t256": dict(m=128, n=128, k=32, threads=256),
    "alpha_beta_bias": dict(m=64, n=64, k=32, alpha=0.5, beta=2.0, bias=True),
}


@pytest.mark.parametrize("target", [SM80, SM90, SM90A], ids=["sm_80", "sm_90", "sm_90a"])
@pytest.mark.parametrize("name", sorted(GEMMS))
def test_lowered_gemm_matches_numpy(name, target):
    cfg = GEMMS[name]
    func = K.gemm(**cfg)
    lowered = lower_func(func, target)
    report = gemm_reports(lowered)
    assert len(report) == 1 and ("mma.sync" in report[0] or "wgmma" in report[0]), report
    exact = cfg.get("acc") == "int32"
    res = check_numeric(func, K.gemm_reference(**cfg), target=target, tolerance=None if exact else (2e-2, 2e-2))
    assert res.ok, res.message


def test_ldmatrix_is_used_for_swizzled_shared_operands_and_lanes_otherwise():
    assert "A: ldmatrix, B: ldmatrix" in gemm_reports(lower_func(K.gemm(64, 64, 64), SM80))[0]
    # int8 stored MN-contiguous: ldmatrix cannot transpose bytes, so per-lane packing
    assert "A: ldmatrix, B: lanes" in gemm_reports(
        lower_func(K.gemm(64, 64, 64, a_dtype="int8", b_dtype="int8", acc="int32"), SM80))[0]


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", ["f16_f32", "f16_f32_At", "s8_s32", "f16_f16", "bf16_f32", "t256"])
def test_lowered_gemm_compiles_with_nvcc(name, arch):
    target = {"kind": "cuda", "arch": arch}
    src = cuda_source(K.gemm(**GEMMS[name]), target)
    ptx = compile_ptx(src, target).decode()
    wgmma = arch == "sm_90a" and not name.startswith("s8")
    assert ("wgmma.mma_async.sync.aligned" in ptx) == wgmma and ("mma.sync.aligned" in ptx) == (not wgmma)


def test_instruction_per_target():
    """sm_80: mma.sync; sm_90: the wgmma layout realised by mma.sync (wgmma needs sm_90a); sm_90a: wgmma SS,
    or RS with A in registers; int8 has no wgmma form here."""
    def report(func, target):
        return gemm_reports(lower_func(func, target))[0]
    assert report(K.gemm(64, 64, 64), SM80).startswith("mma.sync m16n8k16")
    text = report(K.gemm(64, 64, 64), SM90)
    assert text.startswith("mma.sync m16n8k16") and "wgmma needs sm_90a" in text
    assert report(K.gemm(64, 64, 64), SM90A).startswith("wgmma m64n64k16") and "SS" in report(K.gemm(64, 64, 64), SM90A)
    assert "RS (A in registers)" in report(K.gemm(64, 64, 32, a_scope="local.fragment"), SM90A)
    assert report(K.gemm(64, 64, 64, a_dtype="int8", b_dtype="int8", acc="int32"), SM90A).startswith("mma.sync m16n8k32")


@pytest.mark.parametrize("cfg", [dict(m=64, n=64, k=32), dict(m=128, n=64, k=64, threads=256),
                                 dict(m=64, n=128, k=64, threads=256)], ids=["t128", "t256_2xN", "t256_Nx2"])
def test_wgmma_register_a_matches_numpy(cfg):
    func = K.gemm(a_scope="local.fragment", **cfg)
    assert "RS" in gemm_reports(lower_func(func, SM90A))[0]
    res = check_numeric(func, K.gemm_reference(), SM90A, tolerance=(2e-2, 2e-2))
    assert res.ok, res.message


def test_wrong_wgmma_descriptor_swizzle_gives_wrong_cpu_result(monkeypatch):
    """The emulation decodes the descriptor bits: encoding a 64B swizzle for a 128B-swizzled tile is caught."""
    from tilelayout.passes.lowering import lower_wgmma
    func = K.gemm(64, 64, 64)
    real = lower_wgmma.encode_fields

    def wrong(layout):
        bits = real(layout)
        return bits ^ (3 << 62) if layout.mode == 1 else bits       # mode 1 (128B) -> mode 2 (64B)
    monkeypatch.setattr(lower_wgmma, "encode_fields", wrong)
    result = check_numeric(func, K.gemm_reference(), SM90A, tolerance=(2e-2, 2e-2))
    assert not result.ok and result.message.startswith("C:")


def test_every_gemm_case_lowers_to_tensor_cores():
    from cases import gemm_tile
    for build in gemm_tile.VARIANTS.values():
        for target in (SM80, SM90):
            src = cuda_source(build(), target)
            assert "mma.sync.aligned" in src or "wgmma.mma_async" in src


# ------------------------------------------------------------------------------------ wrong layouts are caught

def _permuted_accumulator(m, n):
    """The 2x2-warp mma.sync accumulator with the rows of every 8x8 atom rotated by one: a valid layout,
    but not where mma.sync writes."""
    wm, wn = m // 2, n // 2

    def thread(i, j):
        return (j // wn) * 64 + (i // wm) * 32 + ((i + 1) % 8) * 4 + (j % 8) // 2

    def index(i, j):
        return ((i // 16) % (wm // 16)) * (wn // 8 * 4) + ((j // 8) % (wn // 8)) * 4 + (i % 16) // 8 * 2 + j % 2
    return Fragment([m, n], thread, index)


def test_permuted_accumulator_is_refused_by_lowering():
    func = K.gemm(64, 64, 32)
    res = infer_layouts(func, SM80)
    bad = annotate_layouts(res.func, {"acc_f": _permuted_accumulator(64, 64)})
    with pytest.raises(LoweringError, match=r"buffer acc_f: gemm .* is not an accumulator layout of mma.sync"):
        build_cpu(bad, SM80, infer=False)


class _SwappedC(MmaInst):
    """A lowering that believes each lane's two accumulator columns come in the other order."""

    def c_element(self, lane, e):
        row, col = MmaInst.c_element(self, lane, e)
        return row, col - col % 2 + (1 - col % 2)


class _SwappedA(MmaInst):
    """A lowering that packs A's two k-halves into each other's registers."""

    def a_element(self, lane, reg, part):
        return MmaInst.a_element(self, lane, (reg + 2) % 4, part)


def _misbelieving(monkeypatch, cls):
    real = lower_gemm.choose_instruction

    def choose(op, target):
        inst = real(op, target)
        return cls(inst.k, inst.a_dtype, inst.b_dtype, inst.acc_dtype)
    monkeypatch.setattr(lower_gemm, "choose_instruction", choose)    # c_owner (the ownership check) stays true


def test_accumulator_in_the_wrong_registers_gives_wrong_cpu_result(monkeypatch):
    """The emulation reads the instruction from the call and applies PTX's fragments: a lowering that writes the
    accumulator through a permuted fragment computes wrong numbers on the CPU."""
    func = K.gemm(64, 64, 32)
    assert check_numeric(func, K.gemm_reference(), SM80, tolerance=(2e-2, 2e-2)).ok
    _misbelieving(monkeypatch, _SwappedC)
    result = check_numeric(func, K.gemm_reference(), SM80, tolerance=(2e-2, 2e-2))
    assert not result.ok and result.message.startswith("C:")


def _register_a_kernel():
    return K.gemm(64, 64, 32, a_scope="local.fragment")


def _register_a_layout(perm: bool) -> Fragment:
    a = tl.make_gemm_fragment_a(64, 64, 32, 128)
    if not perm:
        return a

    def thread(i, k, rep):      # the lanes of every quad rotated: a valid layout, not what mma.sync reads
        t = (rep * 64) + (i // 32) * 32 + (i % 8) * 4 + (k % 8) // 2
        return t - t % 4 + (t + 1) % 4
    return Fragment([64, 32], thread, lambda i, k: a.forward(i, k)[0], replicate=2)


def _pinned_register_a(perm: bool):
    return annotate_layouts(_register_a_kernel(), {"A_s": _register_a_layout(perm)})


def test_register_a_with_the_instruction_layout_matches_numpy():
    func = _pinned_register_a(False)
    res = check_numeric(func, K.gemm_reference(), SM80, tolerance=(2e-2, 2e-2))
    assert res.ok, res.message


def test_permuted_register_a_is_refused():
    func = _register_a_kernel()
    res = infer_layouts(func, SM80)
    bad = annotate_layouts(res.func, {"A_s": _register_a_layout(True)})
    with pytest.raises(LoweringError, match=r"buffer A_s: gemm .*operand A is in registers but its layout cannot feed"):
        build_cpu(bad, SM80, infer=False)


def test_register_a_packed_into_the_wrong_registers_gives_wrong_cpu_result(monkeypatch):
    func = _pinned_register_a(False)
    _misbelieving(monkeypatch, _SwappedA)
    monkeypatch.setattr(lower_gemm, "check_register_operand", lambda *a, **k: None)
    result = check_numeric(func, K.gemm_reference(), SM80, tolerance=(2e-2, 2e-2))
    assert not result.ok and result.message.startswith("C:")


# ------------------------------------------------------------------------------------ bad input

def test_b_in_registers_is_refused_with_advice():
    with pytest.raises(tl.TileLayoutError, match=r"gemm .*operand B \(B_f\) is a register fragment.*stage B_f in a "
                                                 r"shared buffer"):
        build_cpu(K.gemm_b_in_registers(), SM80)


def test_unsupported_dtype_pair_is_refused_with_the_supported_list():
    """Inference refuses a pair no instruction takes; lowering's own check (an IR annotated by other means) lists
    the signatures it lowers."""
    with pytest.raises(tl.TileLayoutError, match=r"no tensor-core instruction multiplies A \(float16\) by B "
                                                 r"\(bfloat16\)"):
        build_cpu(K.gemm(64, 64, 32, b_dtype="bfloat16"), SM80)
    with pytest.raises(tl.TileLayoutError, match=r"cannot accumulate into float16"):
        build_cpu(K.gemm(64, 64, 32, a_dtype="bfloat16", b_dtype="bfloat16", acc="float16"), SM80)
    op = next(o for o in _ops(K.gemm(64, 64, 32, b_dtype="bfloat16")) if o.kind == "gemm")
    with pytest.raises(LoweringError, match=r"no tensor-core instruction multiplies float16 x bfloat16 .*supported: "
                                            r"float16 x float16 -> float32.*float64 x float64 -> float64"):
        lower_gemm.choose_instruction(op, tvm.target.Target(SM80))


def test_k_not_a_multiple_of_the_instruction_is_refused():
    with pytest.raises(tl.TileLayoutError, match=r"K=8 is not a multiple of the instruction's K step 16"):
        build_cpu(K.gemm(64, 64, 8), SM80)


def test_lowering_picks_the_instruction_and_gates_the_arch():
    func = K.gemm(64, 64, 32)
    res = infer_layouts(func, SM80)
    inst = lower_gemm.choose_instruction(next(o for o in _ops(res.func) if o.kind == "gemm"), tvm.target.Target(SM80))
    assert inst.k == 16
    with pytest.raises(tl.TileLayoutError, match=r"needs sm_80 or newer"):
        lower_gemm.choose_instruction(next(o for o in _ops(res.func) if o.kind == "gemm"),
                                      tvm.target.Target({"kind": "cuda", "arch": "sm_75"}))


def _ops(func):
    from tilelayout.passes.inference.frontend import build_op_graph
    return build_op_graph(func).ops


def test_pre_ampere_target_is_refused():
    with pytest.raises(tl.TileLayoutError, match=r"need sm_80 or newer"):
        tl.lower(K.gemm(64, 64, 32), {"kind": "cuda", "arch": "sm_75"})


def test_scalar_fallback_is_opt_in_and_reported():
    func = K.gemm(64, 64, 32, a_dtype="float32", b_dtype="float32").with_attr(lower_gemm.GEMM_FALLBACK_ATTR, "scalar")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lowered = lower_func(func, SM80)
    assert any("scalar per-thread k-loop" in str(w.message) for w in caught)
    assert "scalar" in gemm_reports(lowered)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert check_numeric(func, K.gemm_reference(), SM80, tolerance=(1e-4, 1e-4)).ok


def test_unknown_fallback_value_is_refused():
    func = K.gemm(64, 64, 32).with_attr(lower_gemm.GEMM_FALLBACK_ATTR, "fast")
    with pytest.raises(LoweringError, match=r"the only fallback is \"scalar\""):
        lower_func(func, SM80)


def test_mma_instruction_table():
    assert mma_instruction("float16", "float16", "float32").ptx == "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    assert mma_instruction("int8", "int8", "int32").ptx == "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
    assert mma_instruction("float32", "float32", "float32").ptx == "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
    assert mma_instruction("float64", "float64", "float64").ptx == "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64"
    assert mma_instruction("float16", "bfloat16", "float32") is None


# ------------------------------------------------------------------------------------ attention

def test_flash_attention_on_sm90a_uses_wgmma_ss_and_rs_and_matches_numpy():
    """Q K^T from shared (SS), P V with P in registers (RS), through the wgmma emulation."""
    from cases import flash_attention as fa
    variant = "sm90_d64_b64x64_t128"
    func = fa.VARIANTS[variant]()
    reports = gemm_reports(lower_func(func, SM90A))
    assert reports[0].startswith("wgmma") and "SS" in reports[0]
    assert reports[1].startswith("wgmma") and "RS (A in registers)" in reports[1]
    res = check_numeric(func, fa.REFERENCE[variant], SM90A, tolerance=fa.TOLERANCE[variant])
    assert res.ok, res.message


@needs_nvcc
def test_flash_attention_compiles_with_wgmma_for_sm90a():
    from cases import flash_attention as fa
    ptx = compile_ptx(cuda_source(fa.VARIANTS["sm90_d64_b64x64_t128"](), SM90A), SM90A).decode()
    assert ptx.count("wgmma.mma_async.sync.aligned") == 8
