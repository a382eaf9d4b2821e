"""Fragment -> shared copies as stmatrix on sm_90 and later (passes/lowering/lower_stmatrix.py): the staged fp16
epilogue of a gemm, checked on the CPU against numpy through an emulation that reads only the instruction, with
the race check on; mutations of the lowering (swapped register halves, a missing barrier) must be caught."""
import re
import subprocess

import numpy as np
import pytest
from tvm import tirx

from cases.gemm_pipelined import _gemm_staged
from tilelayout.passes.lowering import lower_stmatrix
from tilelayout.passes.lowering.pipeline import check_numeric, lower, lowered_cuda_source

from conftest import KERNEL_WARNINGS, kernel_warnings, needs_nvcc

#: an sm_90 target (no 'a') warns once that it gives up wgmma and TMA: expected here
EXPECTED = KERNEL_WARNINGS + ("TargetFeatureWarning",)

STMATRIX = re.compile(r"tvm_builtin_ptx_stmatrix_sync_aligned_m8n8_(x\d)_shared_b16\(")


def _reference(d):
    return {"C": d["A"].astype(np.float64) @ d["B"].astype(np.float64)}


def _instructions(func, model="register-count") -> list:
    """The stmatrix shapes the lowered CUDA issues, in order (the helper's definition not counted)."""
    target = func.attrs["target"]
    src = lowered_cuda_source(lower(func, target, cost_model=model), target)
    body = src[src.index("__global__"):]
    return STMATRIX.findall(body)


@pytest.mark.parametrize("m,n,arch,shapes", [
    (64, 8, "sm_90a", ["x2"]),                       # two tiles per warp
    (64, 24, "sm_90a", ["x4", "x2"]),                # six: one x4, then an x2
    (128, 128, "sm_90a", ["x4"] * 16),               # the case variant's size (wgmma accumulator)
    (64, 32, "sm_90", ["x4"] * 2),                   # mma.sync realising the wgmma layout
])
def test_staged_epilogue_stores_by_stmatrix_and_matches_numpy(m, n, arch, shapes):
    func = _gemm_staged(m, n, 64, 32, 2, arch)
    with kernel_warnings(*EXPECTED):
        assert _instructions(func) == shapes
        for model in ("register-count", "io-aware"):
            res = check_numeric(func, reference=_reference, cost_model=model)
            assert res.ok, (model, res.message)
            assert res.races == []


def test_sm80_keeps_the_element_loop():
    """stmatrix is an sm_90 instruction: on sm_80 the copy stays 32-bit shared stores."""
    with kernel_warnings():
        assert _instructions(_gemm_staged(64, 32, 64, 32, 2, "sm_80")) == []


def test_float32_staging_keeps_the_element_loop():
    """stmatrix stores 16-bit elements only: an fp32 C_s is stored element by element."""
    import tvm
    from kernels_mma import gemm
    kernel = gemm(64, 32, 32, c_staged=True)          # acc -> fp32 C_s -> C
    func = kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))
    with kernel_warnings():
        assert _instructions(func) == []
        assert check_numeric(func, reference=_reference, cost_model="register-count").ok


def test_swapped_register_halves_are_caught(monkeypatch):
    """The emulation decodes the registers itself: a lowering that packs the odd column first is wrong there."""
    packed = lower_stmatrix.pack_elements
    monkeypatch.setattr(lower_stmatrix, "pack_elements", lambda values, dtype: packed(values[::-1], dtype))
    with kernel_warnings():
        res = check_numeric(_gemm_staged(64, 32, 64, 32, 2, "sm_90a"), reference=_reference,
                            cost_model="register-count")
    assert not res.ok and "C:" in res.message


def test_a_missing_barrier_after_the_stores_is_a_race(monkeypatch):
    """The stores are recorded per addressing lane: C_s read by other threads with no barrier after them races
    (read by the element loop: a TMA store of C_s has barriers of its own)."""
    from tilelayout.passes.lowering import tma_store
    monkeypatch.setattr(tma_store, "tma_store_copy", lambda *args: None)
    planned = lower_stmatrix.stmatrix_copy

    def without_trailing_barrier(*args):
        out = planned(*args)
        return None if out is None else (tirx.SeqStmt(list(out[0].seq)[:-1]), out[1])
    monkeypatch.setattr(lower_stmatrix, "stmatrix_copy", without_trailing_barrier)
    with kernel_warnings():
        res = check_numeric(_gemm_staged(64, 32, 64, 32, 2, "sm_90a"), reference=_reference,
                            cost_model="register-count")
    assert not res.ok and res.races
    assert res.races[0].buffer == "C_s" and "stmatrix" in res.message


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_90"])
def test_the_cuda_compiles(arch, tmp_path):
    func = _gemm_staged(64, 32, 64, 32, 2, arch)
    with kernel_warnings(*EXPECTED):
        src = lowered_cuda_source(lower(func, func.attrs["target"]), func.attrs["target"])
    path = tmp_path / "k.cu"
    path.write_text(src)
    proc = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-w", "-std=c++17", str(path), "-o",
                           str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
