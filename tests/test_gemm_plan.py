"""The gemm plan: one decision per gemm (instruction, shape, warp partition), recorded in the IR, from which
the accumulator and register-A fragments are built; TileLang 0.1.15's partitions and layouts as facts."""
import numpy as np
import pytest
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

import tilelayout as tl
from conftest import parse_main
from tilelayout import gemm_layouts as gl
from tilelayout.exprparse import parse_expr
from tilelayout.expr import _BY_NAME
from tilelayout.passes.inference.frontend import GemmOp, build_op_graph
from tilelayout.passes.inference.gemm_plan import (GEMM_PLANS_ATTR, GemmPlan, GemmPlanError, gemm_plan_of,
                                                   plan_gemm, read_gemm_plans)

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90"}


def _gemm(m, n, k, threads, a_scope="shared", b_scope="shared", dtype="float16", acc="float32", policy=None,
          ta=False, tb=False):
    ash = (k, m) if ta else (m, k)
    bsh = (n, k) if tb else (k, n)
    kw = {} if policy is None else {"warp_policy": policy}

    @T.prim_func
    def kernel(A: T.Buffer(ash, dtype), B: T.Buffer(bsh, dtype), C: T.Buffer((m, n), acc)):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        A_s = T.alloc_buffer(ash, dtype, scope=a_scope)
        B_s = T.alloc_buffer(bsh, dtype, scope=b_scope)
        C_frag = T.alloc_buffer((m, n), acc, scope="local.fragment")
        Tx.copy(A_s[0:ash[0], 0:ash[1]], A[0:ash[0], 0:ash[1]])
        Tx.copy(B_s[0:bsh[0], 0:bsh[1]], B[0:bsh[0], 0:bsh[1]])
        Tx.gemm(C_frag[0:m, 0:n], A_s[0:ash[0], 0:ash[1]], B_s[0:bsh[0], 0:bsh[1]], C_frag[0:m, 0:n], ta, tb,
                1.0, 0.0, **kw)
        Tx.copy(C[0:m, 0:n], C_frag[0:m, 0:n])
    return kernel


def _op(func) -> GemmOp:
    (op,) = [o for o in build_op_graph(func).ops if isinstance(o, GemmOp)]
    return op


def _frag(shape, thread, index, rep=1):
    return tl.Fragment.from_exprs(list(shape), parse_expr(thread, _BY_NAME), [parse_expr(index, _BY_NAME)], rep)


def _same(a, b):
    return np.array_equal(a.thread_table(), b.thread_table()) and np.array_equal(a.table(), b.table())


# TileLang 0.1.15 on sm_90 (wgmma), T.gemm fp16 -> fp32, maint-free facts from its layout inference:
# (m, n, threads, policy) -> (Wm, Wn) and the accumulator (thread, slot)
TILELANG_WGMMA = [
    ((128, 128, 256, "square"), (4, 2), "_j // 64 * 128 + _i % 64 // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i // 64 * 32 + _j % 64 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((128, 128, 256, "full_row"), (8, 1), "_i // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_j // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((256, 128, 256, "full_row"), (8, 1), "_i // 128 * 128 + _i % 64 // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i % 128 // 64 * 64 + _j // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((64, 256, 256, "full_row"), (4, 2), "_j // 128 * 128 + _i // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_j % 128 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((128, 64, 256, "full_col"), (4, 2), "_j // 32 * 128 + _i % 64 // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i // 64 * 16 + _j % 32 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    ((128, 128, 128, "square"), (4, 1), "_i % 64 // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_i // 64 * 64 + _j // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
]


@pytest.mark.parametrize("shape, partition, thread, index", TILELANG_WGMMA, ids=lambda v: str(v)[:24])
def test_wgmma_partition_and_accumulator_are_tilelangs(shape, partition, thread, index):
    m, n, threads, policy = shape
    plan = plan_gemm(_op(_gemm(m, n, 32, threads, policy=policy)), threads, SM90)
    assert plan.instruction == "wgmma" and plan.warp_partition == partition
    assert (plan.instr_m, plan.instr_n, plan.instr_k) == (64, n // partition[1], 16)
    assert _same(plan.accumulator_fragment(), _frag((m, n), thread, index))
    result = tl.infer_layouts(_gemm(m, n, 32, threads, policy=policy), target=SM90)
    assert _same(result.buffers["C_frag"], _frag((m, n), thread, index))


# TileLang 0.1.15 register A (T.gemm with A in a fragment, square policy): (arch, m, n, k, threads) ->
# A's (thread, slot, replicate)
TILELANG_RS = [
    ("sm_90", 128, 128, 32, 128, "_i % 64 // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_j // 16 * 16 + _i // 64 * 8 + _j % 16 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2", 1),
    ("sm_90", 256, 128, 32, 256, "_rep * 128 + _i % 64 // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_j // 16 * 32 + _i // 64 * 8 + _j % 16 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2", 2),
    ("sm_80", 128, 128, 32, 256, "_rep * 64 + _i // 64 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_j // 16 * 32 + _i % 64 // 16 * 8 + _j % 16 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2", 4),
    ("sm_80", 64, 64, 64, 128, "_rep * 64 + _i // 32 * 32 + _i % 8 * 4 + _j % 8 // 2",
     "_j // 16 * 16 + _i % 32 // 16 * 8 + _j % 16 // 8 * 4 + _i % 16 // 8 * 2 + _j % 2", 2),
]


@pytest.mark.parametrize("arch, m, n, k, threads, thread, index, rep", TILELANG_RS)
def test_register_a_fragment_is_tilelangs(arch, m, n, k, threads, thread, index, rep):
    func = _gemm(m, n, k, threads, a_scope="local.fragment")
    plan = plan_gemm(_op(func), threads, {"kind": "cuda", "arch": arch})
    assert plan.a_in_registers and plan.instruction == ("wgmma" if arch == "sm_90" else "mma_sync")
    want = _frag((m, k), thread, index, rep)
    assert _same(plan.a_fragment(), want)
    result = tl.infer_layouts(func, target={"kind": "cuda", "arch": arch})
    assert _same(result.buffers["A_s"], want)
    assert result.buffers["A_s"].is_injective()


def test_plan_is_recorded_and_survives_print_and_parse():
    func = _gemm(64, 64, 32, 128, policy="full_row")
    result = tl.infer_layouts(func, target=SM80)
    (plan,) = result.gemm_plans.values()
    assert plan.policy == "full_row" and plan.policy_source == "user" and plan.warp_partition == (4, 1)
    text = result.func.script()
    assert GEMM_PLANS_ATTR in text and 'warp_policy="full_row"' in text
    again = tvm.script.from_source(text)
    assert read_gemm_plans(again) == {0: plan}
    assert gemm_plan_of(again, _op(again)) == plan
    assert GemmPlan.from_dict(plan.to_dict()) == plan
    # the accumulator the inference gave is the plan's
    assert result.buffers["C_frag"].is_equal(plan.accumulator_fragment().bind_thread_range(0, 128))


def test_plan_reader_refuses_a_missing_or_stale_plan():
    func = _gemm(64, 64, 32, 128)
    with pytest.raises(tl.TileLayoutError, match="no gemm plan recorded"):
        gemm_plan_of(func, _op(func))
    annotated = tl.infer_layouts(func, target=SM80).func
    other = _gemm(64, 64, 64, 128).with_attr(GEMM_PLANS_ATTR, annotated.attrs[GEMM_PLANS_ATTR])
    with pytest.raises(tl.TileLayoutError, match="does not match the op"):
        gemm_plan_of(other, _op(other))


@pytest.mark.parametrize("policy, partition", [("square", (2, 2)), ("full_row", (4, 1)), ("FullCol", (1, 4)),
                                               ("GemmWarpPolicy.FullRow", (4, 1))])
def test_policy_keyword_sets_the_partition(policy, partition):
    func = _gemm(128, 128, 32, 128, policy=policy)
    plan = tl.infer_layouts(func, target=SM80).gemm_plans
    assert [p.warp_partition for p in plan.values()] == [partition]
    assert tl.infer_layouts(func, target=SM80).buffers["C_frag"].is_equal(
        gl.make_mma_accumulator_fragment(128, 128, 128, warp_policy=policy.split(".")[-1]).bind_thread_range(0, 128))


@pytest.mark.parametrize("make, pattern", [
    (lambda: _gemm(64, 64, 32, 128, b_scope="local.fragment"),
     r"operand B \(B_s\) is a register fragment.*stage B_s in a shared buffer"),
    (lambda: _gemm(64, 64, 24, 128), r"K=24 is not a multiple of the instruction's K step 16.*operand A \(A_s\)"),
    (lambda: _gemm(8, 64, 32, 128), r"the 8x64 accumulator C_frag cannot be split over 4 warps"),
    (lambda: _gemm(64, 64, 32, 128, acc="float16", dtype="bfloat16"), r"cannot accumulate into float16"),
    (lambda: _gemm(64, 64, 32, 128, dtype="int16", acc="int32"), r"no tensor-core instruction multiplies A \(int16\)"),
    (lambda: _gemm(64, 64, 32, 128, a_scope="global"), r"operand A \(A_s\) is in global"),
    (lambda: _gemm(64, 64, 32, 128, policy="diagonal"), r"unknown warp_policy 'diagonal'"),
])
def test_bad_gemms_are_refused_naming_gemm_operand_and_fix(make, pattern):
    with pytest.raises(GemmPlanError, match=pattern) as err:
        tl.infer_layouts(make(), target=SM80)
    assert "gemm C_frag[" in str(err.value)
    assert isinstance(err.value, tl.TileLayoutError)


def test_sm90_falls_back_to_mma_sync_where_wgmma_cannot_run():
    # 96 threads are no warpgroup; a transposed register A has no wgmma RS form
    plan = plan_gemm(_op(_gemm(96, 64, 32, 96)), 96, SM90)
    assert plan.instruction == "mma_sync"
    plan = plan_gemm(_op(_gemm(64, 64, 32, 128, a_scope="local.fragment", ta=True)), 128, SM90)
    assert plan.instruction == "mma_sync" and plan.transpose_a
    assert plan.a_fragment().input_shape == [32, 64]


def test_register_a_with_a_pinned_layout_that_cannot_feed_the_instruction_is_refused():
    func = _gemm(64, 64, 32, 128, a_scope="local.fragment")
    rows = tl.Fragment([64, 32], lambda i, j: i * 2 + j // 16, lambda i, j: j % 16)      # whole half-rows
    pinned = tl.annotate_layouts(func, {"A_s": rows})
    with pytest.raises(tl.LayoutConflictError,
                       match=r"operand A A_s must have the mma_sync m16n8k16, 2x2 warps .* register layout.*stage A in "
                             r"shared memory") as err:
        tl.infer_layouts(pinned, target=SM80)
    assert "gemm C_frag[" in str(err.value)


def test_accumulator_fed_directly_as_a_operand_is_refused_with_the_fix():
    chained = parse_main('A: T.Buffer((64, 32), "float32"), B: T.Buffer((32, 64), "float32"), '
                         'C: T.Buffer((64, 64), "float32"), D: T.Buffer((64, 64), "float32")',
                         threads=128, name="chained", body='''
    A_s = T.alloc_buffer((64, 32), "float32", scope="shared")
    B_s = T.alloc_buffer((32, 64), "float32", scope="shared")
    C_s = T.alloc_buffer((64, 64), "float32", scope="shared")
    S = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    O = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(A_s[0:64, 0:32], A[0:64, 0:32])
    Tx.copy(B_s[0:32, 0:64], B[0:32, 0:64])
    Tx.copy(C_s[0:64, 0:64], C[0:64, 0:64])
    Tx.gemm(S[0:64, 0:64], A_s[0:64, 0:32], B_s[0:32, 0:64], S[0:64, 0:64], False, False, 1.0, 0.0)
    Tx.gemm(O[0:64, 0:64], S[0:64, 0:64], C_s[0:64, 0:64], O[0:64, 0:64], False, False, 1.0, 0.0)
    Tx.copy(D[0:64, 0:64], O[0:64, 0:64])
''')

    with pytest.raises(tl.LayoutConflictError, match=r"operand A S must have the .*copy it into a fresh fragment"):
        tl.infer_layouts(chained, target=SM80)
