"""``tilelayout show`` / ``explain`` on pipelined gemms and mixed-width fragments: what the report says is
checked against the lowered kernel (its shared allocations, its pipeline report) and against counts made here."""
from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from tvm import tirx

import tilelayout as tl
from tilelayout import cli
from tilelayout.kernel_file import load_kernel
from tilelayout.passes import lower

DATA = Path(__file__).resolve().parent / "data" / "cli"
PIPELINED = DATA / "pipelined_kernels.py"


def invoke(*args):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([str(a) for a in args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _lowered(spec: str, arch: str = "sm_80"):
    mod = lower(load_kernel(spec), {"kind": "cuda", "arch": arch})
    return next(iter(mod.functions.values()))


def test_show_counts_every_stage_of_a_pipelined_tile_as_lowering_allocates_it():
    spec = f"{PIPELINED}:one_k_loop"
    code, out, _ = invoke("show", spec, "--target", "sm_80", "--json")
    assert code == 0
    res = json.loads(out)["resources"]
    import tvm
    allocated = {}

    def visit(node):
        buf = node.buffer
        if buf.scope().startswith("shared"):
            allocated[str(buf.name)] = math.prod(int(s) for s in buf.shape) * tvm.DataType(buf.dtype).bits // 8

    from tilelayout.passes.ir_utils import walk
    walk(_lowered(spec).body, [(tirx.AllocBuffer, visit)])
    assert allocated == {"A_s": 2 * 128 * 64 * 2, "B_s": 2 * 64 * 128 * 2}          # 64 KiB in all
    assert res["shared_buffers"] == allocated and res["shared_bytes"] == 65536
    assert res["shared_stages"] == {"A_s": 2, "B_s": 2}
    code, text, _ = invoke("show", spec, "--target", "sm_80")
    assert "shared memory per block: 65536 B" in text and "A_s 32768 B (2 stages)" in text


def test_two_pipelined_loops_of_one_name_keep_separate_reports():
    spec = f"{PIPELINED}:two_k_loops"
    report = dict(_lowered(spec).attrs["tilelayout.pipelines"])
    assert sorted(report) == ["loop k#1", "loop k#2"]
    assert "2 stages of A_s, B_s" in report["loop k#1"] and "3 stages of D_s, E_s" in report["loop k#2"]
    code, out, _ = invoke("show", spec, "--target", "sm_80", "--json")
    data = json.loads(out)
    assert code == 0 and sorted(data["pipelines"]) == ["loop k#1", "loop k#2"]
    assert data["pipelines"]["loop k#2"]["stages"] == 3 and data["pipelines"]["loop k#2"]["buffers"] == ["D_s", "E_s"]
    assert data["resources"]["shared_bytes"] == 2 * (2 * 4096) + 3 * (2 * 4096)


def test_the_pipelined_schedule_of_two_same_named_loops_still_computes_the_gemms():
    code, out, err = invoke("check", f"{PIPELINED}:two_k_loops", "--target", "sm_80", "--reference",
                            f"{PIPELINED}:reference_two_k_loops", "--quiet")
    assert code == 0, (out, err)


def test_show_names_the_gemm_plan_and_the_swizzle_of_each_shared_tile():
    code, text, _ = invoke("show", f"{PIPELINED}:one_k_loop", "--target", "sm_80")
    assert code == 0
    # 64 float16 = 128 bytes per row: the 128-byte bank swizzle; the gemm on 4 warps of sm_80: mma.sync, 2x2
    assert "buffer A_s (swizzle SWIZZLE_128B):" in text and "buffer B_s (swizzle SWIZZLE_128B):" in text
    assert "gemm plan: gemm acc[0:128, 0:128] <- A_s[0:128, 0:64] @ B_s[0:64, 0:128]" in text
    assert "mma_sync m16n8k16, 2x2 warps (square, default)" in text
    code, out, _ = invoke("show", f"{PIPELINED}:two_k_loops", "--target", "sm_80", "--json")
    data = json.loads(out)
    assert data["swizzles"] == {"A_s": "SWIZZLE_64B", "B_s": "SWIZZLE_128B", "D_s": "SWIZZLE_64B",
                                "E_s": "SWIZZLE_128B"}      # 32 float16 rows are 64 bytes
    plans = [g["plan"] for g in data["gemms"]]
    assert [(p["instruction"], p["warp_m"] * p["warp_n"]) for p in plans] == [("mma_sync", 4)] * 2


def _registers_32bit(result) -> int:
    """32-bit registers per thread, counted from each fragment's thread table and element width."""
    total = 0
    for name, frag in result.buffers.items():
        if not isinstance(frag, tl.Fragment):
            continue
        held = int(np.bincount(np.asarray(frag.thread_table()).reshape(-1)).max())
        bits = result.graph.buffer(name).bits
        total += math.ceil(held * bits / 32)
    return total


def test_explain_and_show_give_one_register_figure():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from cases import flash_attention
    func = flash_attention.VARIANTS["sm80_d64_b64x64_t128"]()
    result = tl.infer_layouts(func)
    from tilelayout.report import explain_dict, explain_lines, show_dict
    shown = show_dict(result)["resources"]["registers"]
    assert shown == _registers_32bit(result)
    chosen = [g for g in explain_dict(result)["attempts"] if g["chosen"]]
    assert chosen and chosen[-1]["registers"] == shown
    assert any(f"slots={chosen[-1]['regs']} regs={shown} CHOSEN" in line for line in explain_lines(result))
    # the model's slots are the register peak counted in elements: a float16 element counts like a float32
    # one, so at every point they are at least the 32-bit registers, and so is their peak
    from tilelayout.passes.inference.register_liveness import peak_of, program_points, slot_weights
    assert chosen[-1]["regs"] == peak_of(program_points(result.graph), slot_weights(result.buffers))[0]
    peak = result.register_peak
    assert chosen[-1]["regs"] >= peak.fragments and peak.fragments < shown
    # the register peak is one figure: show and explain give the same
    assert show_dict(result)["resources"]["register_peak"] == explain_dict(result)["register_peak"] == peak.to_dict()
