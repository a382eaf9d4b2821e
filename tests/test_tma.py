"""TMA on sm_90a: the plan recorded on a pipelined loop (TMA when the shared tile's inferred layout is a TMA swizzle,
cp.async with the reason otherwise), the host-encoded tensor maps and the mbarrier schedule in the CUDA source
(compiled by nvcc for sm_90a), CPU numerics under the race check, and planted errors -- a wrong box, a wrong
expect_tx, a wait on the wrong parity, a read before the wait, a thread that skips its wait -- each caught."""
from __future__ import annotations

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

import kernels_pipeline as KP  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.passes.ir_utils import mapped, walk  # noqa: E402
from tilelayout.passes.lowering.pipeline import (build_cpu_lowered, check_numeric, compare_outputs,  # noqa: E402
                                                 compile_ptx, cuda_source, lower_func, random_inputs)
from tilelayout.passes.lowering.pipeline_plan import PIPELINE_KEY, plan_pipelines, read_plan  # noqa: E402
from tilelayout.passes.lowering.race_report import build_race_checked  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
SM90A = {"kind": "cuda", "arch": "sm_90a"}
TOL = (2e-2, 2e-2)


def _ref(d):
    return {"C": d["A"].astype(np.float64) @ d["B"].astype(np.float64)}


def _plans(func, target=SM90A) -> list:
    out = []
    planned = plan_pipelines(tl.infer_layouts(func).func, target)
    walk(planned.body, [(tirx.For, lambda f: out.append(read_plan(f)) if f.annotations is not None
                         and PIPELINE_KEY in f.annotations else None)])
    return out


def _op(node) -> str:
    c = node.value if isinstance(node, tirx.Evaluate) else node
    return str(c.op.name) if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op) else ""


def _run(lowered, seed: int = 0) -> tuple:
    """(problems, outputs) of the edited lowered gemm run on the CPU against numpy."""
    func = lowered
    inputs = random_inputs(func, seed)
    got = {n: v.copy() for n, v in inputs.items()}
    build_cpu_lowered(lowered)(*got.values())
    want = dict(inputs)
    want.update(_ref(inputs))
    return compare_outputs(got, want, False, TOL)[0], got


# ------------------------------------------------------------------------------------ the plan

def test_sm90a_pipelined_gemm_is_planned_as_tma_with_each_tiles_swizzle():
    (plan,) = _plans(KP.gemm(64, 128, 128, 32, 3, "sm_90a"))
    assert plan["mode"] == "tma"
    a, b = plan["tma"]
    # A_s [64, 32] f16 is inferred with the 64B swizzle: one box of 32 columns x 64 rows; B_s [32, 128] with the
    # 128B swizzle in two 64-column panels: two boxes of 64 x 32 per stage
    assert (a["buffer"], a["global"], int(a["swizzle"]), [int(x) for x in a["box"]], int(a["panels"])) == \
        ("A_s", "A", 64, [32, 64], 1)
    assert (b["buffer"], b["global"], int(b["swizzle"]), [int(x) for x in b["box"]], int(b["panels"])) == \
        ("B_s", "B", 128, [64, 32], 2)
    assert "A_s <- A by TMA (64B swizzle, box 32x64" in plan["note"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_targets_without_tma_keep_cp_async(arch):
    (plan,) = _plans(KP.gemm(64, 128, 128, 32, 3, arch), {"kind": "cuda", "arch": arch})
    assert plan["mode"] == "cp.async" and "tma" not in plan and "TMA" not in plan["note"]


def test_a_row_major_tile_keeps_cp_async_and_says_why():
    (plan,) = _plans(KP.rowsum(64, 256, 32, 2, "sm_90a"))
    assert plan["mode"] == "cp.async"
    assert "not TMA" in plan["note"] and "X_s is row-major" in plan["note"]


def test_show_reports_tma_per_copy():
    from tilelayout.report import show_lines
    lines = show_lines(tl.infer_layouts(KP.gemm(64, 128, 128, 32, 2, "sm_90a")))
    (line,) = [ln for ln in lines if ln.startswith("pipeline ")]
    assert line.startswith("pipeline loop ko (tma)")
    assert "A_s <- A by TMA (64B swizzle" in line and "B_s <- B by TMA (128B swizzle, box 64x32, 2 issue(s)" in line
    # the staged tiles are still counted once per stage
    assert any("shared" in ln for ln in lines if ln.startswith("resources:"))


def test_tma_table_is_tmas_swizzle():
    """The planner's model of where TMA puts a box, against the swizzle written out bit by bit (CUTLASS's
    Swizzle<B, 4, 3>: bits [4, 4 + B) of the byte offset XOR bits [7, 7 + B))."""
    from tilelayout.passes.lowering.tma_plan import tma_table
    for width, b in ((32, 1), (64, 2), (128, 3)):
        rows, cols = 16, 2 * width // 2
        got = tma_table(rows, cols, 2, width)
        panel = width // 2
        for r in range(rows):
            for c in range(cols):
                off = (c // panel) * rows * width + (r * panel + c % panel) * 2
                phys = off ^ (((off >> 7) & ((1 << b) - 1)) << 4)
                assert got[r, c] == phys // 2


# ------------------------------------------------------------------------------------ CUDA

def test_cuda_source_has_tensor_maps_mbarriers_and_bulk_tensor_loads():
    src = cuda_source(KP.gemm(64, 128, 128, 32, 3, "sm_90a"))
    head = src[src.index('extern "C" __global__'):]
    assert "const __grid_constant__ CUtensorMap A_s_tmap" in head and "CUtensorMap B_s_tmap" in head
    assert "mbarrier.init.shared.b64" in src and "fence.mbarrier_init.release.cluster" in src
    assert "mbarrier.arrive.expect_tx.shared.b64" in src and "mbarrier.try_wait.parity" in src
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in src
    assert "cp.async.cg" not in src and "cp.async.commit_group" not in src
    # one stage = A_s 64x32 + B_s 32x128 halves = 12288 bytes announced per phase
    assert "(uint)12288" in src
    loop = src[src.index("for (int ko = 0;"):]
    # in the loop: wait on this stage's barrier, then the block barrier, then the refill
    assert loop.index("mbarrier_wait") < loop.index("__syncthreads()") < loop.index("cp_async_bulk_tensor")


def test_host_encodes_each_tensor_map_from_the_global_shape():
    lowered = lower_func(KP.gemm(64, 128, 128, 32, 2, "sm_90a"))
    encodes = []
    walk(lowered.body, [(tvm.ir.Call, lambda c: encodes.append(c) if _op(c) == "tirx.tensormap_encode_tiled"
                         else None)])
    got = {str(c.args[1].args[0].name): ([int(x) for x in c.args[2:]], int(c.attrs.swizzle)) for c in encodes}
    # CUDA order (innermost first): dims, byte strides of the outer dims, box, element strides; A is [64, 128]
    # f16, B [128, 128] f16; swizzle enum 2 = 64B, 3 = 128B
    assert got == {"A": ([128, 64, 256, 32, 64, 1, 1], 2), "B": ([128, 128, 256, 64, 32, 1, 1], 3)}


@needs_nvcc
@pytest.mark.parametrize("stages", [2, 3])
def test_tma_kernels_compile_with_nvcc_for_sm90a(stages):
    ptx = compile_ptx(cuda_source(KP.gemm(64, 128, 128, 32, stages, "sm_90a")), SM90A).decode()
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.try_wait.parity" in ptx and "wgmma.mma_async" in ptx


# ------------------------------------------------------------------------------------ CPU numerics

@pytest.mark.parametrize("k,stages", [(128, 2), (96, 3), (128, 3), (32, 3)])
def test_tma_gemm_matches_numpy_under_the_race_check(k, stages):
    """Loop extents above, equal to and below the stage count; the race check runs (check_numeric's default)."""
    res = check_numeric(KP.gemm(64, 128, k, 32, stages, "sm_90a"), _ref, tolerance=TOL)
    assert res.ok, res.message


# ------------------------------------------------------------------------------------ planted errors

def _edit_calls(lowered, name: str, fn):
    """``lowered`` with every Evaluate of the call ``name`` replaced by ``fn(call)`` (a Stmt, or a Call)."""
    def on_eval(node):
        if _op(node) != name:
            return node
        out = fn(node.value)
        return tirx.Evaluate(out) if isinstance(out, tvm.ir.Call) else out
    return lowered.with_body(mapped(lowered.body, [(tirx.Evaluate, on_eval)]))


def _with_args(call, args):
    return tvm.ir.Call(call.op, args, attrs=call.attrs) if call.attrs is not None else tvm.ir.Call(call.op, args)


def _lowered(stages=2, k=128):
    return lower_func(KP.gemm(64, 128, k, 32, stages, "sm_90a"))


def test_the_unedited_lowering_passes_the_same_harness():
    problems, _ = _run(_lowered())
    assert not problems


def test_a_box_with_the_same_bytes_but_another_shape_gives_wrong_values():
    def swap(c):     # A's box 32 x 64 -> 64 x 32 (same 4096 bytes, so the phase still completes)
        if str(c.args[1].args[0].name) != "A":
            return c
        args = list(c.args)
        args[5], args[6] = args[6], args[5]       # [tmap, base, dims x2, stride, box x2, element strides x2]
        return _with_args(c, args)
    problems, _ = _run(_edit_calls(_lowered(), "tirx.tensormap_encode_tiled", swap))
    assert problems and problems[0].startswith("C:")


def test_a_box_with_fewer_bytes_never_completes_its_phase():
    def half(c):     # A's box 32 x 32: the phase waits for 12288 bytes and gets 10240
        if str(c.args[1].args[0].name) != "A":
            return c
        args = list(c.args)
        args[6] = tirx.const(32, "int32")
        return _with_args(c, args)
    with pytest.raises(Exception, match="would never return"):
        _run(_edit_calls(_lowered(), "tirx.tensormap_encode_tiled", half))


def test_a_wrong_expect_tx_never_completes_its_phase():
    def more(c):
        args = list(c.args)
        args[1] = tirx.const(12288 + 16, "uint32")
        return _with_args(c, args)
    with pytest.raises(Exception, match="would never return"):
        _run(_edit_calls(_lowered(), "tirx.ptx.mbarrier_arrive_expect_tx", more))


def _flip(c):
    """The other parity names the previous phase: the wait returns before the bytes land."""
    args = list(c.args)
    args[1] = tirx.floormod(args[1] + 1, 2)
    return _with_args(c, args)


def test_a_wait_on_the_wrong_parity_reads_poison_and_races():
    edited = _edit_calls(_lowered(2, 64), "tirx.cuda.mbarrier_wait", _flip)     # two iterations, no refill
    problems, got = _run(edited)
    assert problems and np.isnan(got["C"]).any()
    races = build_race_checked(edited).run(*random_inputs(edited).values())
    assert any("TMA load into" in (r.other_statement or "") + r.statement for r in races), races


def test_a_wait_on_the_wrong_parity_lets_a_refill_collide_with_a_load_in_flight():
    edited = _edit_calls(_lowered(2, 128), "tirx.cuda.mbarrier_wait", _flip)
    with pytest.raises(Exception, match="two TMA loads in flight into one element"):
        _run(edited)


def _loop_body_edit(lowered, fn):
    def on_for(f):
        if f.annotations is not None and PIPELINE_KEY in f.annotations:
            return tirx.For(f.loop_var, f.min, f.extent, f.kind, fn(list(f.body.seq)), f.thread_binding,
                            f.annotations, f.step)
        return f
    return lowered.with_body(mapped(lowered.body, [(tirx.For, on_for)]))


def test_a_read_before_the_wait_is_reported():
    """The wait moved behind the iteration's compute: the gemm reads the stage while its TMA load is in flight."""
    def late(seq):
        wait = [s for s in seq if _op(s) == "tirx.cuda.mbarrier_wait"]
        return tirx.SeqStmt([s for s in seq if _op(s) != "tirx.cuda.mbarrier_wait"] + wait)
    edited = _loop_body_edit(_lowered(), late)
    problems, _ = _run(edited)
    assert problems
    races = build_race_checked(edited).run(*random_inputs(edited).values())
    assert any("TMA load into" in (r.other_statement or "") + r.statement for r in races), races


def _pinned_rowsum():
    """The pipelined row sum with its f32 tile pinned to the 128B swizzle: TMA-loaded, read by a parallel loop
    with no barrier of its own."""
    f = KP.rowsum(64, 256, 32, 2, "sm_90a")
    return tl.annotate_layouts(f, {"X_s": tl.make_swizzled_layout([64, 32], "float32", tl.SwizzleMode.SWIZZLE_128B)})


def test_a_pinned_swizzle_is_loaded_by_tma_and_matches_numpy():
    f = _pinned_rowsum()
    (plan,) = _plans(f)
    assert plan["mode"] == "tma" and int(plan["tma"][0]["swizzle"]) == 128
    res = check_numeric(f, lambda d: {"R": d["X"].astype(np.float64).sum(axis=1)}, tolerance=(1e-4, 1e-4))
    assert res.ok, res.message


def test_a_thread_that_skips_its_wait_is_reported_without_a_barrier_after_the_wait():
    """Only thread 0 waits and no barrier follows: the other threads' reads are ordered after the landing by
    nothing (the values are right on the serialised CPU; the race check names the mbarrier ordering)."""
    lowered = lower_func(_pinned_rowsum())
    tx = []
    walk(lowered.body, [(tirx.AttrStmt, lambda n: tx.append(n.node.var) if n.attr_key == "thread_extent"
                         and str(n.node.thread_tag) == "threadIdx.x" else None)])

    def one_waiter_tx(seq):
        out, dropped = [], False
        for s in seq:
            if _op(s) == "tirx.cuda.mbarrier_wait":
                out.append(tirx.IfThenElse(tx[0] == 0, s, None))
            elif _op(s) == "tirx.tvm_storage_sync" and not dropped:
                dropped = True
            else:
                out.append(s)
        return tirx.SeqStmt(out)
    edited = _loop_body_edit(lowered, one_waiter_tx)
    races = build_race_checked(edited, tvm_barriers=False).run(*random_inputs(edited).values())
    kinds = {r.kind for r in races}
    assert any("before its mbarrier wait" in k for k in kinds), kinds


def test_explain_and_the_json_reports_carry_the_tma_plan():
    import json
    from tilelayout.report import explain_dict, explain_lines, show_dict
    result = tl.infer_layouts(KP.gemm(64, 128, 128, 32, 3, "sm_90a"))
    assert any(ln.strip().startswith("pipeline loop ko (tma):") for ln in explain_lines(result))
    shown = json.loads(json.dumps(show_dict(result)))
    entry = shown["pipelines"]["loop ko"]
    assert entry["mode"] == "tma" and entry["tma"][1]["start"] == ["ko * 32", "0"]
    assert json.loads(json.dumps(explain_dict(result)))["pipelines"]["loop ko"]["mode"] == "tma"
    # the staged tiles count once per stage in the resources, as with cp.async
    assert shown["resources"]["shared_stages"] == {"A_s": 3, "B_s": 3}


@pytest.mark.parametrize("builder,why", [
    ("conv_im2col", "weight_flat is a view, not a parameter"),
    ("block_sparse", "sits under an if"),
])
def test_copies_tma_cannot_take_keep_cp_async_with_the_reason(builder, why):
    import kernels_pipeline_indexing as KI
    (plan,) = _plans(getattr(KI, builder)(stages=2, arch="sm_90a"))
    assert plan["mode"] == "cp.async" and "not TMA" in plan["note"] and why in plan["note"], plan["note"]


def test_lowering_builds_the_recorded_plan_and_the_emulation_reads_the_instructions():
    """The plan is decided once: an edited plan (A_s said to be 32B-swizzled, in two 16-column panels) is what
    lowering builds (tensor map swizzle 1, boxes of 16 columns), and the emulation, which reads the encoded tensor
    map, lands A_s where the 64B-swizzled layout does not expect it: wrong values."""
    func = plan_pipelines(tl.infer_layouts(KP.gemm(64, 128, 128, 32, 2, "sm_90a")).func, SM90A)

    def edit(f):
        if f.annotations is not None and PIPELINE_KEY in f.annotations:
            notes = dict(f.annotations)
            plan = dict(notes[PIPELINE_KEY])
            a = dict(plan["tma"][0])
            a.update(swizzle=32, panel=16, panels=2, box=[16, 64])
            plan["tma"] = [a] + list(plan["tma"][1:])
            notes[PIPELINE_KEY] = plan
            return tirx.For(f.loop_var, f.min, f.extent, f.kind, f.body, f.thread_binding, notes, f.step)
        return f

    lowered = lower_func(func.with_body(mapped(func.body, [(tirx.For, edit)])), SM90A, infer=False)
    encodes = []
    walk(lowered.body, [(tvm.ir.Call, lambda c: encodes.append(c) if _op(c) == "tirx.tensormap_encode_tiled"
                         else None)])
    a = [c for c in encodes if str(c.args[1].args[0].name) == "A"][0]
    assert int(a.attrs.swizzle) == 1 and int(a.args[5]) == 16
    problems, _ = _run(lowered)
    assert problems


def test_a_refill_without_the_barrier_after_the_wait_is_reported():
    """Without the block barrier between the wait and the refill, thread 0's TMA load overwrites the stage other
    threads are still reading (write after read)."""
    def no_barrier(seq):
        return tirx.SeqStmt([s for s in seq if _op(s) != "tirx.tvm_storage_sync"])
    edited = _loop_body_edit(lower_func(_pinned_rowsum()), no_barrier)
    races = build_race_checked(edited, tvm_barriers=False).run(*random_inputs(edited).values())
    assert any("written after another thread read it" in r.kind and "TMA load into X_s, issued" in r.statement
               for r in races), races


def test_a_loop_mixes_tma_and_cp_async_when_only_some_tiles_take_tma():
    """Dequant gemm on sm_90a: the f16 A tile (64B swizzle) is a TMA load, the packed uint8 B tile (row-major)
    stays cp.async in the same loop; both emulations and the race check run together."""
    import importlib
    case = importlib.import_module("cases.dequant_gemm")
    from tilelayout.passes.lowering.pipeline import check_case
    variant = "sm90a_b128x128x32_s3_t128"
    (plan,) = _plans(case.VARIANTS[variant]())
    assert plan["mode"] == "tma" and [e["buffer"] for e in plan["tma"]] == ["A_shared"]
    assert "cp.async for the others, not TMA" in plan["note"] and "B_shared is row-major" in plan["note"]
    src = cuda_source(case.VARIANTS[variant]())
    assert "cp.async.bulk.tensor.2d" in src and "cp.async.cg.shared.global" in src
    loop = src[src.index("for (int ko = 0;"):]
    assert loop.index("wait_group") < loop.index("mbarrier_wait") < loop.index("__syncthreads()")
    res = check_case(case, variant)
    assert res.ok, res.message
    if shutil.which("nvcc") is not None:
        ptx = compile_ptx(src, SM90A).decode()
        assert "cp.async.bulk.tensor.2d" in ptx and "cp.async.cg.shared.global" in ptx


def test_tma_loop_drops_the_wgmmas_proxy_fence_and_its_barrier():
    """Tiles that arrive by TMA need no generic-to-async proxy fence before wgmma (one fence before the loop covers
    earlier generic writes): two block barriers per iteration (after the wait; after wgmma's wait_group) instead of
    three; with a cp.async tile in the loop the fence stays."""
    src = cuda_source(KP.gemm(64, 128, 128, 32, 3, "sm_90a"))
    loop = src[src.index("for (int ko = 0;"):]
    loop = loop[:loop.index("C_ptr")]                  # up to the epilogue
    assert loop.count("__syncthreads()") == 2 and "fence_proxy" not in loop
    head = src[:src.index("for (int ko = 0;")]
    assert head.rindex("fence_proxy") < head.rindex("__syncthreads()")
