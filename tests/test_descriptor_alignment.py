"""Every shared buffer a wgmma descriptor reads is declared with the alignment the descriptor assumes.

Our descriptors (like CuTe's make_gmma_desc) leave the base-offset field 0: a tile with a W-byte swizzle must start
on an 8W-byte boundary (1024 bytes for 128B). TVM merges dynamic shared tiles into one buffer it declares
``__align__(64)``; the CUDA build (passes/lowering/shared_alignment.py) declares it as aligned as its tiles. Checked
on the generated CUDA of every tensor-core case for sm_90a (the only target with descriptors; there are no TMA
boxes: the copies are cp.async), by maint/cuda_alignment.py.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import tvm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint import cuda_alignment  # noqa: E402


def _source(func, arch: str, plain_tvm: bool = False) -> str:
    from tilelayout.passes.lowering.pipeline import _device_source, lower, lowered_cuda_source
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = lower(func, target)
        if plain_tvm:           # TVM's own pipeline, without the alignment declaration
            return _device_source(tvm.compile(mod, target=target))
        return lowered_cuda_source(mod, target)


def test_every_descriptor_buffer_is_declared_aligned():
    from maint.tc_cases import tensor_core_case_variants
    from tilelayout.errors import TileLayoutError
    checked, problems = 0, []
    for label, func, arch in tensor_core_case_variants(("sm_90a",)):
        try:
            source = _source(func, arch)
        except TileLayoutError:
            continue
        found = cuda_alignment.descriptors(source)
        checked += len(found)
        problems += [f"{label}: {p}" for p in cuda_alignment.problems(source)]
        if "wgmma.mma_async" in source:
            assert found, f"{label}: wgmma without a descriptor the check can read"
    assert checked > 0
    assert not problems, "\n".join(problems)


def test_tvms_own_declaration_is_too_weak_for_the_descriptors():
    """Without the declaration TVM's merged buffer is 64-byte aligned: the check reports it (flash attention,
    whose Q, K and V tiles TVM merges)."""
    sys.path.insert(0, str(ROOT))
    from cases import flash_attention
    func = flash_attention._flash("sm_90a", 64, 64, 64, 128, False)
    plain = cuda_alignment.problems(_source(func, "sm_90a", plain_tvm=True))
    assert plain and all("__align__(64)" in p for p in plain), plain
    source = _source(func, "sm_90a")
    assert "extern __shared__ __align__(1024) uchar buf_dyn_shmem" in source
    assert cuda_alignment.problems(source) == []


@pytest.mark.parametrize("width, required", [(1, 1024), (2, 512), (3, 256)])
def test_the_check_reads_the_swizzle_of_each_descriptor(width, required):
    fields = (width << 62) | (64 << 32) | (1 << 16)
    text = ("extern __shared__ __align__(256) uchar buf_dyn_shmem_ptr[];\n"
            "f((((((uint64_t)tvm_builtin_cuda_cvta_generic_to_shared("
            "(&(((half*)buf_dyn_shmem_ptr)[((ks * 16) + 4096)]))))"
            f" & (uint64_t)262143ULL) >> (uint64_t)4ULL) | (uint64_t){fields}ULL));")
    assert cuda_alignment.descriptors(text) == [("buf_dyn_shmem_ptr", "half", 8192, required)]
    assert bool(cuda_alignment.problems(text)) == (required > 256)
