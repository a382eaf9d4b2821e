"""Software pipelining (``num_stages`` loops): the decision recorded on the loop, multi-buffered tiles,
cp.async / commit / wait in the CUDA source (compiled by nvcc for sm_80 and sm_90a), CPU numerics at loop
extents below, equal to and above the stage count, a schedule broken on purpose caught by the CPU emulation,
and clear refusals."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import tirx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import kernel_warnings  # noqa: E402
import kernels_pipeline as KP  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.passes.ir_utils import mapped, walk  # noqa: E402
from tilelayout.passes.lowering.pipeline import (build_cpu_lowered, check_numeric, compare_outputs,  # noqa: E402
                                                 compile_ptx, cuda_source, lower_func, random_inputs)
from tilelayout.passes.lowering.pipeline_plan import PIPELINE_KEY, PIPELINE_REPORT_ATTR, plan_pipelines  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
GEMM_TOL = (2e-2, 2e-2)


def _gemm_ref(d):
    return {"C": d["A"].astype(np.float64) @ d["B"].astype(np.float64)}


def _rowsum_ref(d):
    return {"R": d["X"].astype(np.float64).sum(axis=1)}


def _loops(func, key):
    out = []
    walk(func.body, [(tirx.For, lambda f: out.append(f) if f.annotations is not None and key in f.annotations
                      else None)])
    return out


def _report(lowered) -> str:
    return list(dict(lowered.attrs[PIPELINE_REPORT_ATTR]).values())[0]


# ------------------------------------------------------------------------------------ the decision in the IR

def test_the_decision_is_recorded_on_the_loop_before_lowering():
    func = tl.infer_layouts(KP.gemm(64, 128, 128, 32, 3, "sm_80")).func
    (loop,) = _loops(plan_pipelines(func, {"kind": "cuda", "arch": "sm_80"}), PIPELINE_KEY)
    plan = dict(loop.annotations[PIPELINE_KEY])
    assert int(plan["stages"]) == 3 and str(plan["buffers"]) == "A_s,B_s" and str(plan["mode"]) == "cp.async"
    # it prints and survives the round trip through TVMScript, like every other decision
    again = tvm.script.from_source(plan_pipelines(func, {"kind": "cuda", "arch": "sm_80"}).script())
    assert str(dict(_loops(again, PIPELINE_KEY)[0].annotations[PIPELINE_KEY])["buffers"]) == "A_s,B_s"


def test_lowering_follows_the_recorded_decision():
    """software_pipeline reads the annotation: a decision edited between the passes is what gets built."""
    func = plan_pipelines(tl.infer_layouts(KP.gemm(64, 128, 128, 32, 3, "sm_80")).func, {"kind": "cuda", "arch": "sm_80"})

    def two_stages(f):
        if f.annotations is not None and PIPELINE_KEY in f.annotations:
            notes = dict(f.annotations)
            notes[PIPELINE_KEY] = dict(dict(notes[PIPELINE_KEY]), stages=2)
            return tirx.For(f.loop_var, f.min, f.extent, f.kind, f.body, f.thread_binding, notes, f.step)
        return f

    edited = func.with_body(mapped(func.body, [(tirx.For, two_stages)]))
    lowered = lower_func(edited, {"kind": "cuda", "arch": "sm_80"}, infer=False)
    assert "2 stages" in _report(lowered)
    assert "A_s = T.alloc_shared((4096,)" in lowered.script()


def test_tiles_get_a_stage_dimension_with_the_alignment_kept():
    lowered = lower_func(KP.gemm(64, 128, 128, 32, 3, "sm_80"))
    text = lowered.script()
    # 64x32 fp16 = 4 KiB per stage (already a multiple of 1024 B); B_s 32x128 = 8 KiB per stage
    assert 'A_s = T.alloc_shared((6144,), "float16", align=1024)' in text
    assert 'B_s = T.alloc_shared((12288,), "float16", align=1024)' in text
    # the consumer reads stage ko % 3 of each tile, at the same in-stage offsets as before
    assert {"ko % 3 * 2048", "ko % 3 * 4096"} <= set(re.findall(r"ko % 3 \* \d+", text))


def test_stage_stride_rounds_up_to_the_alignment():
    from tilelayout.passes.lowering.pipeline_plan import stage_stride
    assert stage_stride(2048, "float16", 1024) == 2048
    assert stage_stride(100, "float32", 1024) == 256      # 400 B -> 1024 B
    assert stage_stride(600, "float16", 1024) == 1024     # 1200 B -> 2048 B


# ------------------------------------------------------------------------------------ CUDA

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])      # sm_90a loads these tiles with TMA (test_tma.py)
@pytest.mark.parametrize("stages", [2, 3])
def test_cuda_source_issues_cp_async_with_commit_and_wait(arch, stages):
    with kernel_warnings("TargetFeatureWarning"):      # sm_90 without 'a' says what it gives up
        src = cuda_source(KP.gemm(64, 128, 128, 32, stages, arch))
    assert "cp.async.cg.shared.global [%0], [%1], 16;" in src
    assert "cp.async.commit_group;" in src
    assert f"cp.async.wait_group {stages - 2};" in src and "cp.async.wait_group 0;" in src
    body = src[src.index("for (int ko = 0;"):]
    # in the loop: wait, then the barrier, then the next issue
    assert body.index("wait_group") < body.index("__syncthreads()") < body.index("cp_async_cg")


@pytest.mark.parametrize("arch,barriers", [("sm_80", 2), ("sm_90", 2)])
def test_barriers_per_iteration(arch, barriers):
    """One barrier after the wait; mma.sync keeps the gemm's trailing one, wgmma also the one after its
    fence.proxy.async (generic-proxy writes must reach the async proxy); the gemm's leading barrier goes."""
    src = cuda_source(KP.gemm(64, 128, 128, 32, 3, arch))
    loop = src[src.index("for (int ko = 0;"):]
    loop = loop[:loop.index("wait_group_0();")]
    assert loop.count("__syncthreads()") == barriers


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("variant", ["gemm_s3", "rowsum_s2", "narrow_s2", "symbolic_s3"])
def test_pipelined_kernels_compile_with_nvcc(arch, variant):
    target = {"kind": "cuda", "arch": arch}
    func = {"gemm_s3": lambda: KP.gemm(64, 128, 128, 32, 3, arch), "rowsum_s2": lambda: KP.rowsum(64, 256, 32, 2, arch),
            "narrow_s2": lambda: KP.narrow_rows(2).with_attr("target", tvm.target.Target(target)),
            "symbolic_s3": lambda: KP.rowsum_symbolic(3).with_attr("target", tvm.target.Target(target))}[variant]()
    ptx = compile_ptx(cuda_source(func, target), target).decode()
    if arch == "sm_90a" and variant == "gemm_s3":     # swizzled tiles on sm_90a: TMA (test_tma.py)
        assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx
        return
    assert re.search(r"cp\.async\.c[ag]\.shared\.global", ptx) and "cp.async.commit_group" in ptx
    assert "cp.async.wait_group" in ptx


def test_copy_widths_follow_alignment():
    assert "16 B x1" in _report(lower_func(KP.rowsum(64, 256, 32, 2, "sm_80")))
    assert "8 B x1" in _report(lower_func(KP.narrow_rows(2, width=4)))
    assert "4 B x1" in _report(lower_func(KP.narrow_rows(2, width=2)))


# ------------------------------------------------------------------------------------ CPU numerics

@pytest.mark.parametrize("stages,k", [(3, 32), (3, 64), (3, 96), (3, 128), (2, 64), (4, 160)],
                         ids=["n1_s3", "n2_s3", "n3_s3", "n4_s3", "n2_s2", "n5_s4"])
def test_pipelined_gemm_matches_numpy(stages, k):
    res = check_numeric(KP.gemm(64, 128, k, 32, stages, "sm_80"), _gemm_ref, tolerance=GEMM_TOL)
    assert res.ok, res.message


@pytest.mark.parametrize("stages,n", [(2, 64), (3, 96), (3, 128), (4, 96)], ids=["n2_s2", "n3_s3", "n4_s3", "n3_s4"])
def test_pipelined_row_sum_matches_numpy(stages, n):
    res = check_numeric(KP.rowsum(64, n, 32, stages, "sm_90"), _rowsum_ref, tolerance=(1e-4, 1e-4))
    assert res.ok, res.message


@pytest.mark.parametrize("n", [1, 31, 32, 70, 96, 97, 200])
def test_symbolic_loop_extent_with_a_partial_last_tile(n):
    """ceildiv(n, 32) iterations (also fewer than the 3 stages): the bounds guard's predicated load becomes
    cp.async's src-size form, which zero-fills the columns past n."""
    func = KP.rowsum_symbolic(3)
    lowered = lower_func(func)
    assert "4 B x1" in _report(lowered) and 'T.Cast("uint32", T.if_then_else(' in lowered.script()
    X = np.random.default_rng(n).standard_normal((64, n)).astype("float32")
    R = np.full(64, np.nan, "float32")
    build_cpu_lowered(lowered)(X, R)
    np.testing.assert_allclose(R, X.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_predicated_copies_use_the_src_size_form():
    src = cuda_source(KP.rowsum_symbolic(2))
    assert "cp.async.ca.shared.global [%0], [%1], 4, %2;" in src


@pytest.mark.parametrize("width", [2, 4])
def test_narrow_cp_async_matches_numpy(width):
    res = check_numeric(KP.narrow_rows(3, width), lambda d: {"R": np.maximum(
        0, d["X"].astype(np.float32).reshape(128, 8, width).max(axis=1))})
    assert res.ok and res.exact, res.message


# ------------------------------------------------------------------------------------ a broken schedule fails

def _run_lowered(lowered, func, ref, tol):
    inputs = random_inputs(func)
    names = list(inputs)
    got = [inputs[n].copy() for n in names]
    build_cpu_lowered(lowered)(*got)
    want = {n: np.asarray(v).astype(inputs[n].dtype) for n, v in ref(inputs).items()}
    problems, _ = compare_outputs({n: g for n, g in zip(names, got) if n in want}, want, False, tol)
    return problems


def _edit_waits(lowered, fn):
    def on_call(c):
        if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op) and str(c.op.name) == \
                "tirx.ptx.cp_async_wait_group":
            return tvm.ir.Call(c.op, [tirx.const(fn(int(c.args[0].value)), "int32")] + list(c.args[1:]))
        return c
    return lowered.with_body(mapped(lowered.body, [(tvm.ir.Call, on_call)]))


@pytest.mark.parametrize("stages", [2, 3])
def test_a_too_large_wait_count_gives_wrong_cpu_values(stages):
    """wait_group s-1 instead of s-2 lets the stage about to be read still be in flight."""
    func = KP.gemm(64, 128, 128, 32, stages, "sm_80")
    lowered = lower_func(func)
    assert _run_lowered(lowered, func, _gemm_ref, GEMM_TOL) == []
    broken = _edit_waits(lowered, lambda n: n + 1 if n == stages - 2 else n)
    problems = _run_lowered(broken, func, _gemm_ref, GEMM_TOL)
    assert problems and "C:" in problems[0], problems


def test_a_missing_wait_gives_wrong_cpu_values():
    func = KP.rowsum(64, 128, 32, 3, "sm_80")
    lowered = lower_func(func)
    broken = _edit_waits(lowered, lambda n: 99)       # waits for nothing
    assert _run_lowered(broken, func, _rowsum_ref, (1e-4, 1e-4))


def test_a_missing_barrier_after_the_wait_gives_wrong_cpu_values():
    """The row sum's consumer has no barrier of its own: without the pipeline's, copies never become visible."""
    func = KP.rowsum(64, 128, 32, 2, "sm_80")
    lowered = lower_func(func)
    assert _run_lowered(lowered, func, _rowsum_ref, (1e-4, 1e-4)) == []
    (loop,) = _loops(lowered, PIPELINE_KEY)
    seq = list(loop.body.seq)
    assert "tvm_storage_sync" in str(seq[1])
    cut = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, tirx.SeqStmt(seq[:1] + seq[2:]),
                   loop.thread_binding, loop.annotations, loop.step)
    broken = lowered.with_body(mapped(lowered.body, [(tirx.For, lambda f: cut if f.same_as(loop) else f)]))
    problems = _run_lowered(broken, func, _rowsum_ref, (1e-4, 1e-4))
    assert problems and "R:" in problems[0], problems


# ------------------------------------------------------------------------------------ what is not pipelined

def test_one_stage_copies_by_cp_async_within_the_iteration():
    """num_stages=1 (TileLang's T.Pipelined(n, num_stages=1)): nothing overlaps across iterations, but the copies
    go by cp.async: barrier, copies, commit, wait_group 0, barrier, then the body; one buffer per tile."""
    func = KP.rowsum(64, 128, 32, 1, "sm_80")
    lowered = lower_func(func)
    (loop,) = _loops(lowered, PIPELINE_KEY)
    seq = [str(x) for x in loop.body.seq]
    assert "tvm_storage_sync" in seq[0] and ("cp_async" in seq[1] or "ptx.cp" in seq[1])
    k = next(i for i, x in enumerate(seq) if "wait_group" in x)
    assert "commit_group" in seq[k - 1] and "tvm_storage_sync" in seq[k + 1]
    assert "1 stage" in str(lowered.attrs[PIPELINE_REPORT_ATTR])
    res = check_numeric(func, _rowsum_ref, tolerance=(1e-4, 1e-4))
    assert res.ok, res.message
    gemm = KP.gemm(64, 128, 128, 32, 1, "sm_80")
    res = check_numeric(gemm, _gemm_ref, tolerance=GEMM_TOL)
    assert res.ok, res.message


def test_one_stage_without_its_wait_gives_wrong_cpu_values():
    func = KP.rowsum(64, 128, 32, 1, "sm_80")
    lowered = lower_func(func)
    assert _run_lowered(lowered, func, _rowsum_ref, (1e-4, 1e-4)) == []
    broken = _edit_waits(lowered, lambda n: 99)       # waits for nothing
    assert _run_lowered(broken, func, _rowsum_ref, (1e-4, 1e-4))


def test_pre_sm80_targets_lower_synchronously_and_say_so():
    func = KP.rowsum(64, 128, 32, 3, "sm_75")
    lowered = lower_func(func)
    assert "ptx.cp" not in lowered.script()
    assert "not pipelined" in _report(lowered) and "sm_75 has no cp.async" in _report(lowered)
    assert "cp.async" not in cuda_source(func)
    res = check_numeric(func, _rowsum_ref, tolerance=(1e-4, 1e-4))
    assert res.ok, res.message


@pytest.mark.parametrize("kind,needle", [
    ("used_after", "fill X_s[0:64, 0:32] = 0.0 (op #1) uses it outside the loop"),
    ("read_first", "reads it before its copy in the same iteration"),
    ("nested", "copies it only when ko < 3, but parallel i,j[64x32] (op #2) uses it outside that if"),
    ("no_copy", "nothing to pipeline"),
    ("other_writer", "stores to it inside the loop; only global -> shared copies may write a pipelined tile"),
    ("source_written", "buffer X: loop ko"),
])
def test_unsupported_loops_are_refused_by_name(kind, needle):
    with pytest.raises(tl.PipelineError, match=re.escape(needle)) as info:
        lower_func(KP.refused(kind))
    assert "loop ko" in str(info.value)
    assert isinstance(info.value, tl.TileLayoutError)


def test_stages_over_the_shared_memory_limit_are_refused():
    lower_func(KP.big_tiles(1))                     # 32 KiB: fits once
    with pytest.raises(tl.PipelineError, match=r"2 stages of A_s, B_s need 65536 bytes of shared memory"):
        lower_func(KP.big_tiles(2))


def test_a_non_constant_stage_count_is_refused():
    func = KP.rowsum(64, 128, 32, 2, "sm_80")

    def bad(f):
        if f.annotations is not None and "num_stages" in f.annotations:
            notes = dict(f.annotations)
            notes["num_stages"] = "three"
            return tirx.For(f.loop_var, f.min, f.extent, f.kind, f.body, f.thread_binding, notes, f.step)
        return f

    with pytest.raises(tl.PipelineError, match="num_stages must be a non-negative integer constant"):
        lower_func(func.with_body(mapped(func.body, [(tirx.For, bad)])))


def test_the_passes_run_alone_on_an_irmodule():
    """PlanPipelines after inference, SoftwarePipeline after vectorisation, each a tvm.transform pass."""
    from tilelayout.passes.lowering.loop_partition import partition_function
    from tilelayout.passes.lowering.loop_vectorize import vectorize_function
    from tilelayout.passes.lowering.lower_tile_ops import lower_tile_ops
    func = tl.infer_layouts(KP.rowsum(64, 128, 32, 2, "sm_80")).func
    planned = tl.passes.PlanPipelines()(tvm.IRModule({"main": func}))["main"]
    assert _loops(planned, PIPELINE_KEY)
    target = {"kind": "cuda", "arch": "sm_80"}
    vec = vectorize_function(partition_function(lower_tile_ops(planned, target)), target)
    out = tl.passes.SoftwarePipeline()(tvm.IRModule({"main": vec}))["main"]
    assert "cp.async, 2 stages of X_s" in _report(out)
