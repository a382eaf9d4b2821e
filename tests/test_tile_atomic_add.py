"""``lang.atomic_add(dst_region, src_tile)``: one tile op (attention backward's dQ accumulation) that becomes a
parallel nest over the tile, one atomic per element; on sm_90 float32 global targets four consecutive elements
go in one ``red.global.add.v4.f32``. CPU runs (atomics as updates, threads in turn) against numpy; CUDA compiled
with nvcc for sm_80 and sm_90a; shape mismatches refused by name."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kernels_select_atomic as KS  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.passes.lowering.pipeline import build_cpu, compile_ptx, cuda_source, lower_func  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def _dq_reference(dO, scale, dQ0):
    batch = dO.shape[0]
    out = dQ0.astype(np.float64).copy()
    for b in range(batch):
        for blk in range(scale.shape[0]):
            out[b] += dO[b].astype(np.float64) * scale[blk]
    return out


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_dq_accumulation_matches_numpy(arch):
    func = KS.dq_accumulate(arch=arch)
    rng = np.random.default_rng(0)
    dO = rng.standard_normal((2, 128, 2, 64)).astype(np.float32)
    scale = np.array([0.5, -1.25], np.float32)
    dQ = rng.standard_normal((2, 128, 2, 64)).astype(np.float32)
    want = _dq_reference(dO, scale, dQ)
    build_cpu(func)(dO, scale, dQ)
    np.testing.assert_allclose(dQ, want, rtol=1e-5, atol=1e-5)


def test_sm90_float32_atomics_are_vector_reductions():
    text = lower_func(KS.dq_accumulate(arch="sm_90a")).script()
    assert text.count("T.ptx.red(") == 1 and '"v4", "f32"' in text and "atomicAdd" not in text.split("T.ptx.red")[1]
    src = cuda_source(KS.dq_accumulate(arch="sm_90a"))
    assert "red.global.add.v4.f32" in src


def test_before_sm90_the_atomics_stay_scalar():
    text = lower_func(KS.dq_accumulate(arch="sm_80")).script()
    assert "T.ptx.red" not in text and 'T.call_extern("float32", "atomicAdd"' in text
    assert "red.global.add.v" not in cuda_source(KS.dq_accumulate(arch="sm_80"))


def test_half_precision_atomics_stay_scalar_on_sm90():
    text = lower_func(KS.dq_accumulate(dtype="float16", arch="sm_90a")).script()
    assert "T.ptx.red" not in text and "atomicAdd" in text


def test_atomic_tile_into_shared_memory_matches_numpy():
    func = KS.atomic_into_shared()
    X = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    Y = np.full((4, 64), np.nan, np.float32)
    build_cpu(func)(X, Y)
    np.testing.assert_allclose(Y, 2 * X.astype(np.float64), rtol=1e-6, atol=1e-6)


def test_mismatched_shapes_are_refused():
    with pytest.raises(Exception, match=r"atomic_add: destination Y extents \[64, 32\] and value f "
                                                   r"extents \[64, 64\] differ"):
        KS.atomic_shape_mismatch()


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_atomic_tiles_compile_with_nvcc(arch, dtype):
    target = {"kind": "cuda", "arch": arch}
    ptx = compile_ptx(cuda_source(KS.dq_accumulate(dtype=dtype, arch=arch), target), target).decode()
    if arch == "sm_90a" and dtype == "float32":
        assert "red.global.add.v4.f32" in ptx
    else:
        assert re.search(r"\b(atom|red)(\.global)?\.add", ptx)
