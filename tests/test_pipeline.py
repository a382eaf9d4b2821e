"""The pipeline: lower -> IRModule for tvm.compile, CUDA source with real vector accesses and shuffles,
nvcc-clean PTX (representative subset; all cases: ``maint/gpu_check.py --offline``), and every pass
printable and re-parsable so each stage can be inspected and run alone."""
from __future__ import annotations

import importlib
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import tvm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tilelayout as tl  # noqa: E402
from conftest import case_variant_params, kernel_warnings  # noqa: E402
from tilelayout.passes.inference.layout_inference import LayoutInference  # noqa: E402
from tilelayout.passes.lowering.loop_partition import LoopPartition, LoweringError  # noqa: E402
from tilelayout.passes.lowering.loop_vectorize import LoopVectorize  # noqa: E402
from tilelayout.passes.lowering.lower_tile_ops import LowerTileOps  # noqa: E402
from tilelayout.passes.lowering.pipeline import compile_ptx, cuda_source, lower  # noqa: E402
from tilelayout.passes.lowering.serialize_threads import SequentialSemantics, SerializeThreads  # noqa: E402


def _case(name):
    return importlib.import_module(f"cases.{name}")


def test_lower_returns_a_module_tvm_compiles():
    mod = lower(_case("elementwise_copy").VARIANTS["fp16_128x128_t128"]())
    assert isinstance(mod, tvm.IRModule)
    (func,) = mod.functions.values()
    assert func.attrs["target"].attrs["arch"] == "sm_90a"
    ex = tvm.compile(mod)                                 # the bound target is enough
    assert "uint4" in ex.mod.imports[0].inspect_source("cuda")


def test_cuda_source_has_vector_accesses_and_shuffles():
    copy = cuda_source(_case("elementwise_copy").VARIANTS["fp32_64x256_t256"]())
    assert "*(float4*)(A_ptr" in copy and "*(float4*)(B_ptr" in copy
    with warnings.catch_warnings():      # its register peak (x and y never wholly live together) fits 255
        warnings.simplefilter("error", tl.TileLayoutResourceWarning)
        softmax = cuda_source(_case("reduce_broadcast").VARIANTS["128x256_t256"]())
    # unrolled (fragments stay in registers): 5 butterfly steps for each of the 32 rows a thread holds
    assert softmax.count("__shfl_xor_sync") == 5 * 32 and "__syncthreads()" in softmax


def test_cuda_source_needs_a_cuda_target():
    with pytest.raises(ValueError, match="CUDA target"):
        cuda_source(_case("elementwise_copy").VARIANTS["fp32_64x256_t256"](), target="llvm")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name,variant", [("elementwise_copy", "fp16_128x128_t128"),
                                          ("reduce_broadcast", "128x256_t256")])
def test_nvcc_compiles_the_cuda_source(name, variant):
    with kernel_warnings("TileLayoutResourceWarning"):
        ptx = compile_ptx(cuda_source(_case(name).VARIANTS[variant]())).decode()
    assert ".entry kernel_kernel" in ptx and ".target sm_90" in ptx


def test_every_stage_prints_and_reparses():
    mod = tvm.IRModule({"main": _case("reduce_broadcast").VARIANTS["64x128_t128"]()})
    for p in [LayoutInference(), LowerTileOps(), LoopPartition(), LoopVectorize()]:
        mod = p(mod)
        mod = tvm.IRModule({"main": tvm.script.from_source(mod["main"].script())})
    assert "T.vectorized(4" in mod["main"].script()
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    assert "__shfl_xor_sync" in ex.mod.imports[0].inspect_source("cuda")


def test_cpu_passes_are_passes_too():
    func = _case("shared_staging").VARIANTS["fp32_128x128_t128"]()
    ref = SequentialSemantics()(tvm.IRModule({"main": func}))["main"].script()
    assert "launch_thread" not in ref and "T.tile" not in ref
    with pytest.warns(tl.TileLayoutResourceWarning, match=r"static shared buffers .* 65536 bytes"):
        lowered = lower(func)
    cpu = SerializeThreads()(lowered)
    text = next(iter(cpu.functions.values())).script()
    assert "launch_thread" not in text and "frag_per_thread" in text


@pytest.mark.parametrize("name,variant", case_variant_params(LoweringError))
def test_every_case_variant_lowers_to_well_formed_cuda(name, variant):
    from tilelayout.passes.lowering.serialize_threads import sequential_semantics, serialize_threads
    original = _case(name).VARIANTS[variant]()
    with kernel_warnings():             # golden kernels warn by design; well-formedness is the subject
        mod = lower(original)
    (func,) = mod.functions.values()
    # serialised as the CPU build serialises it: after the GPU index rewrites and the cp.async / TMA emulation
    from tilelayout.passes.lowering.emulate_async_copy import emulate_async_copies
    from tilelayout.passes.lowering.emulate_tma import emulate_tma
    from tilelayout.passes.lowering.pipeline import device_index_rewrites
    copied = emulate_async_copies(device_index_rewrites(func))
    emulated = emulate_tma(copied)
    checked = [func, sequential_semantics(original)]
    if emulated.same_as(copied):
        # the TMA emulation declares its tensor views once for the whole kernel, which the verifier's scoping
        # rejects (LLVM builds it; tests/test_tma.py runs those kernels against numpy): verified without TMA only
        checked.append(serialize_threads(emulated))
    for f in checked:
        tvm.tirx.analysis.verify_well_formed(f, assert_mode=True)
    src = tvm.compile(mod).mod.imports[0].inspect_source("cuda")
    assert "__global__" in src and "local.fragment" not in src
