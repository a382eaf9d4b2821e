"""Gemms on Blackwell (sm_100a): planned as tcgen05.mma with the accumulator in Tensor Memory, recorded in the IR,
reported; lowering refuses the plans it does not emit and never runs them on mma.sync."""
import numpy as np
import pytest
import tvm

import tilelayout as tl
from tilelayout import tmem
from tilelayout.passes.inference.gemm_plan import GemmPlan, GemmPlanError, plan_gemm, read_gemm_plans

from test_gemm_plan import _gemm, _op

SM100A = {"kind": "cuda", "arch": "sm_100a"}
E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"


def _plan(func, target=SM100A):
    result = tl.infer_layouts(func, target=target)
    (plan,) = result.gemm_plans.values()
    return result, plan


@pytest.mark.parametrize("m, n, k, threads, dtype, tb, want", [
    (128, 128, 64, 128, "float16", False, ("m128n128k16", "kind::f16", "32x32b", 128)),
    (128, 64, 32, 128, "bfloat16", True, ("m128n64k16", "kind::f16", "32x32b", 64)),
    (64, 64, 32, 128, "float16", False, ("m64n64k16", "kind::f16", "16x256b", 64)),
    (128, 32, 16, 128, "float32", True, ("m128n32k8", "kind::tf32", "32x32b", 32)),
    (128, 64, 64, 128, E4M3, True, ("m128n64k32", "kind::f8f6f4", "32x32b", 64)),
    (256, 128, 32, 256, "float16", False, ("m128n128k16", "kind::f16", "32x32b", 256)),
    (192, 48, 16, 128, "float16", False, ("m64n48k16", "kind::f16", "16x256b", 128)),
])
def test_sm100a_plans_tcgen05_with_the_accumulator_in_tmem(m, n, k, threads, dtype, tb, want):
    shape, kind, ld, columns = want
    result, plan = _plan(_gemm(m, n, k, threads, dtype=dtype, tb=tb))
    assert plan.instruction == "tcgen05" and not plan.a_in_registers
    assert f"m{plan.instr_m}n{plan.instr_n}k{plan.instr_k}" == shape
    assert plan.ld_shape == ld and plan.tmem_columns == columns
    assert kind in plan.describe() and "Tensor Memory" in plan.describe()
    # the accumulator fragment inference gave is the registers tcgen05.ld fills, built from the plan
    want_frag = tmem.tmem_ld_fragment(ld, plan.instr_m, n, threads // 128, m // plan.instr_m)
    got = result.buffers["C_frag"]
    assert np.array_equal(got.thread_table(), want_frag.bind_thread_range(0, threads).thread_table())
    assert np.array_equal(got.table(), want_frag.table())


def test_both_fp8_formats_plan_f8f6f4():
    _, plan = _plan(_gemm(128, 64, 64, 128, dtype=E4M3, tb=True))
    assert plan.a_dtype == E4M3
    func = _gemm(128, 64, 64, 128, dtype=E5M2, tb=True)
    _, plan = _plan(func)
    assert "kind::f8f6f4" in plan.describe()


def test_plan_is_recorded_once_and_survives_print_and_parse():
    result, plan = _plan(_gemm(128, 64, 32, 128))
    again = tvm.script.from_source(result.func.script())
    assert read_gemm_plans(again) == {0: plan}
    assert GemmPlan.from_dict(plan.to_dict()) == plan
    assert plan.to_dict()["ld_shape"] == "32x32b" and plan.to_dict()["tmem_columns"] == 64


def test_show_reports_the_tcgen05_plan():
    from tilelayout import report
    result, _ = _plan(_gemm(128, 64, 32, 128))
    lines = [ln for ln in report.show_lines(result) if ln.startswith("gemm plan")]
    assert lines and "tcgen05.mma m128n64k16 kind::f16" in lines[0] and "tcgen05.ld 32x32b" in lines[0]


def test_other_targets_keep_their_instructions():
    assert _plan(_gemm(128, 64, 32, 128), {"kind": "cuda", "arch": "sm_100"})[1].instruction == "mma_sync"
    assert _plan(_gemm(128, 64, 32, 128), {"kind": "cuda", "arch": "sm_90a"})[1].instruction == "wgmma"
    # float64 has no tcgen05 form: mma.sync m8n8k4, as on Hopper
    assert _plan(_gemm(64, 64, 16, 128, dtype="float64", acc="float64"))[1].instruction == "mma_sync"


@pytest.mark.parametrize("make, pattern", [
    (lambda: _gemm(128, 64, 32, 128, a_scope="local.fragment"), r"operand A \(A_s\) is a register fragment.*TS"),
    (lambda: _gemm(128, 64, 32, 128, dtype="int8", acc="int32", tb=True), r"kind::i8"),
    (lambda: _gemm(128, 64, 32, 128, acc="float16"), r"only float32 accumulators"),
    (lambda: _gemm(128, 64, 32, 64), r"not whole warpgroups"),
    (lambda: _gemm(32, 64, 32, 128), r"M=32 is not a multiple of 64"),
    (lambda: _gemm(128, 24, 32, 128), r"N=24 does not split"),
    (lambda: _gemm(128, 64, 24, 128), r"K=24 is not a multiple of the instruction's K step 16"),
    (lambda: _gemm(256, 512, 16, 128), r"needs 1024 TMEM columns"),
])
def test_gemms_tcgen05_cannot_run_are_refused_not_run_on_mma_sync(make, pattern):
    with pytest.raises(GemmPlanError, match=pattern) as err:
        tl.infer_layouts(make(), target=SM100A)
    assert "gemm C_frag[" in str(err.value) and "never falls back to mma.sync" in str(err.value)


def test_forcing_another_instruction_on_sm100a_is_refused():
    with pytest.raises(GemmPlanError, match="runs as tcgen05.mma, not mma_sync"):
        plan_gemm(_op(_gemm(128, 64, 32, 128)), 128, SM100A, instruction="mma_sync")


def test_a_tcgen05_plan_lowers_to_tcgen05_never_to_mma_sync():
    func = _gemm(64, 64, 32, 128)
    src = tl.cuda_source(func, SM100A)
    assert "tcgen05.mma.cta_group::1.kind::f16" in src and "mma.sync" not in src and "wgmma" not in src
    # the same kernel still lowers for Hopper
    assert "wgmma" in tl.cuda_source(func, {"kind": "cuda", "arch": "sm_90a"})


def test_explain_reports_the_tcgen05_plan():
    from tilelayout import report
    result, _ = _plan(_gemm(64, 64, 32, 128))
    lines = [ln for ln in report.explain_lines(result) if "gemm plan" in ln]
    assert lines and "tcgen05.mma m64n64k16" in lines[0] and "16x256b" in lines[0]
    assert report.explain_dict(result)["gemms"][0]["plan"]["instruction"] == "tcgen05"


def _gemm_row_softmax_epilogue(m, n, k):
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx

    @T.prim_func
    def kernel(A: T.Buffer((m, k), "float16"), B: T.Buffer((k, n), "float16"), C: T.Buffer((m, n), "float16")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        A_s = T.alloc_buffer((m, k), "float16", scope="shared")
        B_s = T.alloc_buffer((k, n), "float16", scope="shared")
        S = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        mx = T.alloc_buffer((m,), "float32", scope="local.fragment")
        P = T.alloc_buffer((m, n), "float16", scope="local.fragment")
        Tx.copy(A_s[0:m, 0:k], A[0:m, 0:k])
        Tx.copy(B_s[0:k, 0:n], B[0:k, 0:n])
        Tx.gemm(S[0:m, 0:n], A_s[0:m, 0:k], B_s[0:k, 0:n], S[0:m, 0:n], False, False, 1.0, 0.0)
        Tx.max(mx[0:m], S[0:m, 0:n], axes=[1])
        for i in T.parallel(m):
            for j in T.parallel(n):
                P[i, j] = T.cast(T.exp(S[i, j] - mx[i]), "float16")
        Tx.copy(C[0:m, 0:n], P[0:m, 0:n])
    return kernel


@pytest.mark.parametrize("m, quad", [(128, 1), (64, 4)])
def test_tmem_fragment_takes_part_in_inference_like_any_other(m, quad):
    """The accumulator read out of TMEM feeds a row reduction and an elementwise epilogue: the row maximum lives
    with its row (one thread for 32x32b, a quad of lanes for 16x256b, as wgmma's) and P takes S's layout."""
    result = tl.infer_layouts(_gemm_row_softmax_epilogue(m, 64, 32), target=SM100A)
    (plan,) = result.gemm_plans.values()
    assert plan.instruction == "tcgen05"
    s, mx, p = (result.buffers[name] for name in ("S", "mx", "P"))
    assert p.is_equal(s)
    assert mx.replicate_size == quad
    for i in range(m):
        holders = {s.thread_of(i, j) for j in range(64)}
        assert {mx.thread_of(i, rep=r) for r in range(quad)} == holders
