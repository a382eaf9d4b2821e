"""Gemms lowered to tcgen05.mma on sm_100a: numerics against numpy through the TIR-level CPU emulation (with the
race check), CUDA that nvcc compiles for sm_100a, planted descriptor errors caught, and the forms still refused."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kernels_mma as K  # noqa: E402
from conftest import gemm_reports, needs_nvcc  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.passes.lowering import lower_tcgen05  # noqa: E402
from tilelayout.passes.lowering.pipeline import check_numeric, compile_ptx, cuda_source, lower_func  # noqa: E402

SM100A = {"kind": "cuda", "arch": "sm_100a"}


CASES = {
    "f16_m128n64k32": dict(m=128, n=64, k=32),
    "f16_Bt": dict(m=128, n=64, k=32, trans_b=True),
    "f16_At": dict(m=128, n=64, k=32, trans_a=True),
    "bf16_2blocks": dict(m=256, n=64, k=32, a_dtype="bfloat16", b_dtype="bfloat16"),
    "f16_2warpgroups": dict(m=128, n=128, k=32, threads=256),
    "tf32": dict(m=128, n=32, k=16, a_dtype="float32", b_dtype="float32", trans_b=True),
    "e4m3": dict(m=128, n=32, k=64, a_dtype="float8_e4m3fn", b_dtype="float8_e4m3fn", trans_b=True),
    "alpha_bias": dict(m=128, n=64, k=32, alpha=0.5, beta=2.0, bias=True),
    "k_loop": dict(m=128, n=64, k=64, bk=32),
    "m64": dict(m=64, n=64, k=32),
    "m64_three_blocks": dict(m=192, n=64, k=32),
    "m64_2warpgroups_bf16": dict(m=64, n=128, k=32, threads=256, a_dtype="bfloat16", b_dtype="bfloat16"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_tcgen05_gemm_matches_numpy(name):
    cfg = CASES[name]
    report = gemm_reports(lower_func(K.gemm(**cfg), SM100A))[0]
    assert report.startswith(f"tcgen05.mma m{64 if cfg['m'] % 128 else 128}n") and "Tensor Memory" in report
    assert ("16x256b" if cfg["m"] % 128 else "32x32b") in report
    res = check_numeric(K.gemm(**cfg), K.gemm_reference(**cfg), SM100A, tolerance=(2e-2, 2e-2))
    assert res.ok, res.message


def test_a_wrong_shared_memory_descriptor_fails_the_check(monkeypatch):
    """The SBO of every shared-memory descriptor off by one 16-byte unit: the emulation reads other elements."""
    real = lower_tcgen05.smem_descriptor
    monkeypatch.setattr(lower_tcgen05, "smem_descriptor", lambda start, layout: real(start, layout) + (1 << 32))
    cfg = CASES["f16_m128n64k32"]
    res = check_numeric(K.gemm(**cfg), K.gemm_reference(**cfg), SM100A, tolerance=(2e-2, 2e-2))
    assert not res.ok


def test_a_wrong_instruction_descriptor_fails_the_check(monkeypatch):
    """The instruction descriptor's N halved: half of the accumulator columns are never computed."""
    real = lower_tcgen05.instr_descriptor
    monkeypatch.setattr(lower_tcgen05, "instr_descriptor",
                        lambda a, b, d, m, n, *rest: real(a, b, d, m, n // 2, *rest))
    cfg = CASES["f16_m128n64k32"]
    res = check_numeric(K.gemm(**cfg), K.gemm_reference(**cfg), SM100A, tolerance=(2e-2, 2e-2))
    assert not res.ok


def test_a_wrong_descriptor_version_is_refused_by_the_emulation(monkeypatch):
    """A wgmma-style descriptor (no version bit 46) fails the run instead of computing anything."""
    real = lower_tcgen05.smem_descriptor
    monkeypatch.setattr(lower_tcgen05, "smem_descriptor", lambda start, layout: real(start, layout) & ~(1 << 46))
    cfg = CASES["f16_m128n64k32"]
    with pytest.raises(Exception, match="version field is not 1"):
        check_numeric(K.gemm(**cfg), K.gemm_reference(**cfg), SM100A, tolerance=(2e-2, 2e-2))


def test_the_lowered_sequence():
    src = cuda_source(K.gemm(128, 64, 32), SM100A)
    order = ["tcgen05.alloc", "tcgen05.relinquish_alloc_permit", "mbarrier.init", "tcgen05.mma",
             "tcgen05.commit", "mbarrier_wait", "tcgen05.ld", "tcgen05.wait::ld", "tcgen05.dealloc"]
    body = src[src.index("__global__"):]
    calls = [body.index(f"tvm_builtin_{'cuda' if w == 'mbarrier_wait' else 'ptx'}_"
                        f"{w.replace('.', '_').replace('::', '__') if w != 'mbarrier_wait' else w}")
             for w in order if w != "tcgen05.wait::ld"]
    assert calls == sorted(calls)
    assert "mma_sync" not in src and "wgmma" not in src


@needs_nvcc
@pytest.mark.parametrize("name", ["f16_m128n64k32", "f16_2warpgroups", "e4m3", "k_loop", "m64_three_blocks"])
def test_tcgen05_gemm_compiles_with_nvcc_for_sm100a(name):
    ptx = compile_ptx(cuda_source(K.gemm(**CASES[name]), SM100A), SM100A).decode()
    for inst in ("tcgen05.alloc.cta_group::1", "tcgen05.mma.cta_group::1", "tcgen05.commit.cta_group::1",
                 "mbarrier.try_wait.parity", "tcgen05.ld.sync.aligned.", "tcgen05.wait::ld",
                 "tcgen05.dealloc.cta_group::1", "mbarrier.inval"):
        assert inst in ptx, inst
    assert "mma.sync" not in ptx and "wgmma" not in ptx


def test_pipelined_tcgen05_gemm_is_refused():
    with pytest.raises(tl.Tcgen05LoweringError, match=r"software-pipelines loop .* not lowered yet"):
        lower_func(K.gemm(128, 64, 64, bk=32, stages=2), SM100A)


def test_a_fragment_bias_is_refused_not_run_on_mma_sync():
    with pytest.raises(tl.Tcgen05LoweringError, match=r"register-fragment bias \(D_f\)"):
        lower_func(K.gemm(128, 64, 32, bias="fragment", beta=1.0), SM100A)


def _without_statements(lowered, text: str):
    """``lowered`` with every evaluated statement whose script contains ``text`` removed, and how many were."""
    from tvm import tirx
    from tilelayout.passes.ir_utils import mapped
    dropped = []

    def drop(s):
        if isinstance(s, tirx.SeqStmt):
            keep = [x for x in s.seq if not (isinstance(x, tirx.Evaluate) and text in str(x))]
            dropped.append(len(s.seq) - len(keep))
            return tirx.SeqStmt(keep) if len(keep) > 1 else keep[0]
        return s
    return lowered.with_body(mapped(lowered.body, [(tirx.SeqStmt, drop)])), sum(dropped)


def test_the_race_check_sees_the_mma_read_its_operands():
    """Without the barriers between the operand copies and the mma, the issuing thread reads A and B while other
    threads write them: the race check names them (it records the tiles the descriptors name)."""
    from tilelayout.passes.lowering.pipeline import random_inputs
    from tilelayout.passes.lowering.race_report import build_race_checked
    lowered = lower_func(K.gemm(128, 64, 32), SM100A)
    broken, dropped = _without_statements(lowered, "tvm_storage_sync")
    assert dropped >= 3
    with pytest.raises(tl.RaceError, match="A_s|B_s"):
        build_race_checked(broken, tvm_barriers=False)(*random_inputs(broken, 0).values())
    # the kernel as lowered is race-free
    build_race_checked(lowered, tvm_barriers=False)(*random_inputs(lowered, 0).values())


def test_a_wait_without_its_commit_fails_instead_of_hanging():
    """The commit removed from the lowered kernel: on a GPU the mbarrier wait would spin forever; the emulation
    fails the run naming it."""
    from tilelayout.passes.lowering.pipeline import build_cpu_lowered, random_inputs
    lowered = lower_func(K.gemm(128, 64, 32), SM100A)
    broken, removed = _without_statements(lowered, '"commit"')
    assert removed == 1
    with pytest.raises(Exception, match="never completes"):
        build_cpu_lowered(broken)(*random_inputs(broken, 0).values())


def test_tcgen05_gemm_matches_numpy_under_the_io_aware_cost_model():
    cfg = CASES["m64_three_blocks"]
    res = check_numeric(K.gemm(**cfg), K.gemm_reference(**cfg), SM100A, cost_model="io-aware", tolerance=(2e-2, 2e-2))
    assert res.ok, res.message


@pytest.mark.parametrize("shape,name", [("16x256b", "m64"), ("32x32b", "f16_m128n64k32")])
def test_a_wrong_tmem_register_map_in_the_lowering_fails_the_check(monkeypatch, shape, name):
    """The lowering's reading of which (lane, column) a tcgen05.ld register holds, with registers 0 and 1 swapped
    (same thread, so the fragment check passes): the emulation's own map puts other values there."""
    from tilelayout import tmem
    real = tmem.ld_cell

    def swapped(s, thread, reg):
        if s == shape and reg in (0, 1):
            reg = 1 - reg
        return real(s, thread, reg)
    monkeypatch.setattr(tmem, "ld_cell", swapped)
    cfg = CASES[name]
    res = check_numeric(K.gemm(**cfg), K.gemm_reference(**cfg), SM100A, tolerance=(2e-2, 2e-2))
    assert not res.ok


def test_a_tcgen05_plan_lowered_for_hopper_is_refused():
    """A function annotated for sm_100a, lowered for sm_90a without re-inferring: no tcgen05 there."""
    annotated = tl.infer_layouts(K.gemm(128, 64, 32), target=SM100A).func
    with pytest.raises(tl.Tcgen05LoweringError, match=r"has no tcgen05"):
        lower_func(annotated, {"kind": "cuda", "arch": "sm_90a"}, infer=False)
