"""The golden cases ported from TileLang's examples as written (gemv with a reducer, grouped gemm with offsets
read from memory) compile with nvcc for sm_80 and sm_90a, whatever target the variant names; and the numeric
checks' fixed inputs (``tilelayout.numeric_inputs``) reach the kernel."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tilelayout as tl  # noqa: E402
from cases import gemv, grouped_gemm  # noqa: E402
from tilelayout.passes.lowering.pipeline import FIXED_INPUTS_ATTR, compile_ptx, cuda_source, random_inputs  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
VARIANTS = [(m, v) for m in (gemv, grouped_gemm) for v in m.VARIANTS]


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("module, variant", VARIANTS, ids=[f"{m.__name__.split('.')[-1]}/{v}" for m, v in VARIANTS])
def test_compiles_with_nvcc(module, variant, arch):
    target = {"kind": "cuda", "arch": arch}
    func = module.VARIANTS[variant]().with_attr("target", tvm.target.Target(target))
    ptx = compile_ptx(cuda_source(func, target), target).decode()
    assert ".entry" in ptx
    if module is gemv:
        assert "shfl.sync.bfly" in ptx, "finalize_reducer combines partials with butterfly shuffles"


def test_fixed_inputs_replace_random_ones():
    func = grouped_gemm.VARIANTS["sm80_groups64_40_100_s2"]()
    d = random_inputs(func, 3)
    assert d["batch_sizes"].tolist() == [64, 40, 100] and d["batch_offsets"].tolist() == [0, 64, 104]
    assert d["batch_padded_offsets"].tolist() == [0, 64, 128] and d["batch_sizes"].dtype == np.int32
    with pytest.raises(tl.ConfigError, match="batch_sizes has 3 elements, 2 values given"):
        random_inputs(func.with_attr(FIXED_INPUTS_ATTR, {"batch_sizes": [1, 2]}))
    with pytest.raises(tl.ConfigError, match="no buffer parameter named nope"):
        random_inputs(func.with_attr(FIXED_INPUTS_ATTR, {"nope": [1]}))
