"""Targets (``passes/hardware.py``): the default is Hopper with its arch-specific instructions (sm_90a); a plain
sm_90 lowers the same layouts without them and says so once; a CUDA target without an arch is refused on a
machine without a GPU instead of silently becoming sm_50."""
from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import pytest

import tilelayout as tl
from tilelayout.passes import hardware
from tilelayout.passes.lowering.pipeline import check_numeric, cuda_source, lower_func

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _gemm():
    return importlib.import_module("cases.gemm_tile").VARIANTS["m64n64k64_t128"]()


def test_the_default_target_is_sm_90a():
    assert str(hardware.normalize_target(None).attrs["arch"]) == "sm_90a"
    (func,) = tl.lower(_gemm()).functions.values()
    assert str(func.attrs["target"].attrs["arch"]) == "sm_90a"


@pytest.mark.parametrize("spelling", ["cuda", {"kind": "cuda"}, {"kind": "cuda", "max_num_threads": 512}])
def test_a_cuda_target_without_an_arch_needs_a_gpu(monkeypatch, spelling):
    monkeypatch.setattr(hardware, "_gpu_present", lambda: False)
    with pytest.raises(tl.ConfigError, match="names no CUDA arch"):
        hardware.normalize_target(spelling)
    monkeypatch.setattr(hardware, "_gpu_present", lambda: True)    # TVM takes the arch from the GPU
    assert hardware.normalize_target(spelling).kind.name == "cuda"


@pytest.mark.parametrize("spelling", ["nvidia/nvidia-h100", {"kind": "cuda", "arch": "sm_80"}, "llvm"])
def test_targets_that_name_their_arch_need_no_gpu(monkeypatch, spelling):
    monkeypatch.setattr(hardware, "_gpu_present", lambda: False)
    hardware.normalize_target(spelling)


def test_plain_sm_90_warns_once_naming_what_it_gives_up(monkeypatch):
    monkeypatch.setattr(hardware, "_WARNED_TARGETS", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            lower_func(_gemm(), {"kind": "cuda", "arch": "sm_90"})
        lower_func(_gemm(), {"kind": "cuda", "arch": "sm_90a"})
        lower_func(_gemm(), {"kind": "cuda", "arch": "sm_80"})
    found = [w for w in caught if issubclass(w.category, tl.TargetFeatureWarning)]
    assert len(found) == 1, [str(w.message) for w in caught]
    text = str(found[0].message)
    assert all(word in text for word in ("wgmma", "TMA", "setmaxnreg", "sm_90a"))


def test_sm_90_and_sm_90a_infer_the_same_layouts_and_differ_in_the_instruction():
    sm90 = tl.infer_layouts(_gemm(), target={"kind": "cuda", "arch": "sm_90"})
    sm90a = tl.infer_layouts(_gemm(), target={"kind": "cuda", "arch": "sm_90a"})
    assert {k: v.to_dict() for k, v in sm90.buffers.items()} == {k: v.to_dict() for k, v in sm90a.buffers.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tl.TargetFeatureWarning)
        plain = cuda_source(_gemm(), {"kind": "cuda", "arch": "sm_90"})
    assert "wgmma" in cuda_source(_gemm(), {"kind": "cuda", "arch": "sm_90a"}) and "wgmma" not in plain
    assert "mma.sync" in plain


def test_the_default_target_gemm_matches_numpy():
    """The default now lowers gemms to wgmma (emulated on the CPU): checked against numpy's product."""
    import numpy as np

    def reference(ins):
        return {"C": (ins["A"].astype(np.float64) @ ins["B"].astype(np.float64) * 2).astype(np.float32)}
    res = check_numeric(_gemm(), reference, tolerance=(1e-3, 1e-3))
    assert res.ok, res.message
