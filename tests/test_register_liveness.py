"""Register liveness (``register_liveness``): live sets by hand and by enumerating every run of small programs,
the peak instead of the sum, and what it changes (the m128 gemm epilogue staged under io-aware)."""
from __future__ import annotations

import importlib
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

import tilelayout as tl
from tilelayout.passes.inference.frontend import build_op_graph
from tilelayout.passes.inference.register_liveness import (liveness, op_effects, peak_of, program_points,
                                                           register_peak)

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# ------------------------------------------------------------------------------------------ small programs

@T.prim_func
def chain(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")):
    """S is dead once P is built, P once O is: never more than two of the three are live."""
    tx = T.launch_thread("threadIdx.x", 128)
    S = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    P = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    O = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(S[0:64, 0:64], A[0:64, 0:64])
    for i in T.parallel(64):
        for j in T.parallel(64):
            P[i, j] = T.exp(S[i, j])
    for i in T.parallel(64):
        for j in T.parallel(64):
            O[i, j] = P[i, j] * T.float32(2)
    Tx.copy(B[0:64, 0:64], O[0:64, 0:64])


@T.prim_func
def accumulate(A: T.Buffer((4, 64, 64), "float32"), B: T.Buffer((64, 64), "float32")):
    """acc lives across the loop; the tile T is overwritten whole at the top of every iteration."""
    tx = T.launch_thread("threadIdx.x", 128)
    acc = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    t = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.fill(acc[0:64, 0:64], T.float32(0))
    for k in T.serial(4):
        Tx.copy(t[0:64, 0:64], A[k, 0:64, 0:64])
        for i in T.parallel(64):
            for j in T.parallel(64):
                acc[i, j] = acc[i, j] + t[i, j]
    Tx.copy(B[0:64, 0:64], acc[0:64, 0:64])


@T.prim_func
def reread(A: T.Buffer((64, 64), "float32"), B: T.Buffer((3, 64, 64), "float32")):
    """X's last read in program order is the loop's second op, but the next iteration reads it again: X stays
    live at the loop's store and its first op too."""
    tx = T.launch_thread("threadIdx.x", 128)
    x = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    t = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    u = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(x[0:64, 0:64], A[0:64, 0:64])
    for k in T.serial(3):
        Tx.copy(t[0:64, 0:64], B[k, 0:64, 0:64])
        for i in T.parallel(64):
            for j in T.parallel(64):
                u[i, j] = t[i, j] + x[i, j]
        Tx.copy(B[k, 0:64, 0:64], u[0:64, 0:64])


@T.prim_func
def carried(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")):
    """x is read at the top of each iteration and rewritten at its end: carried across iterations. The
    half-row written by the first nest is a partial write: h stays live from there on (nothing kills it)."""
    tx = T.launch_thread("threadIdx.x", 128)
    x = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    y = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    h = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(x[0:64, 0:64], A[0:64, 0:64])
    Tx.fill(h[0:64, 0:64], T.float32(0))
    for k in T.serial(2):
        for i in T.parallel(64):
            for j in T.parallel(32):
                h[i, j] = x[i, j]
        for i in T.parallel(64):
            for j in T.parallel(64):
                y[i, j] = x[i, j] + h[i, j]
        for i in T.parallel(64):
            for j in T.parallel(64):
                x[i, j] = y[i, j] * T.float32(0.5)
    Tx.copy(B[0:64, 0:64], x[0:64, 0:64])


def _here(graph) -> list:
    return [sorted(lv.live_in | lv.live_out | lv.reads | lv.writes) for lv in liveness(graph)]


def test_live_sets_of_a_chain_by_hand():
    graph = build_op_graph(chain)
    lv = liveness(graph)
    assert [sorted(x.live_in) for x in lv] == [[], ["S"], ["P"], ["O"]]
    assert [sorted(x.live_out) for x in lv] == [["S"], ["P"], ["O"], []]
    assert [sorted(x.kills) for x in lv] == [["S"], ["P"], ["O"], []]
    assert _here(graph) == [["S"], ["P", "S"], ["O", "P"], ["O"]]


def test_live_sets_of_a_loop_by_hand():
    graph = build_op_graph(accumulate)
    assert [sorted(x.live_in) for x in liveness(graph)] == [[], ["acc"], ["acc", "t"], ["acc"]]
    assert [sorted(x.live_out) for x in liveness(graph)] == [["acc"], ["acc", "t"], ["acc"], []]
    graph = build_op_graph(reread)
    # ops: copy x, copy t (loop), u = t + x (loop), store u (loop)
    assert _here(graph) == [["x"], ["t", "x"], ["t", "u", "x"], ["u", "x"]]
    graph = build_op_graph(carried)
    # ops: copy x, fill h, h[:, :32] = x (partial: kills nothing), y = x + h, x = y / 2 (kills x), store x
    lv = liveness(graph)
    assert [sorted(x.kills) for x in lv] == [["x"], ["h"], [], ["y"], ["x"], []]
    assert _here(graph) == [["x"], ["h", "x"], ["h", "x"], ["h", "x", "y"], ["h", "x", "y"], ["x"]]


def test_a_conditional_write_kills_nothing():
    @T.prim_func
    def cond(A: T.Buffer((64, 64), "float32"), B: T.Buffer((2, 64, 64), "float32")):
        tx = T.launch_thread("threadIdx.x", 128)
        x = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
        Tx.copy(x[0:64, 0:64], A[0:64, 0:64])
        for k in T.serial(2):
            if k > 0:
                Tx.fill(x[0:64, 0:64], T.float32(1))
            Tx.copy(B[k, 0:64, 0:64], x[0:64, 0:64])
    graph = build_op_graph(cond)
    fill = graph.ops[1]
    assert fill.conditions and op_effects(fill)[2] == set()
    assert "x" in liveness(graph)[1].live_in          # the value before the fill reaches the store when k == 0


# ------------------------------------------------------------------------------------------ exact enumeration

def _trace(ops, depth: int = 0, cap: int = 3) -> list:
    """The op indices of one run, each serial loop run min(extent, cap) times (loops of the analysis iterate)."""
    out, i = [], 0
    while i < len(ops):
        op = ops[i]
        if len(op.serial_loops) <= depth:
            out.append(op.index)
            i += 1
            continue
        loop = op.serial_loops[depth]
        body = []
        while i < len(ops) and len(ops[i].serial_loops) > depth and ops[i].serial_loops[depth] is loop:
            body.append(ops[i])
            i += 1
        extent = loop.extent if isinstance(loop.extent, int) else cap
        for _ in range(max(2, min(extent, cap))):
            out += _trace(body, depth + 1, cap)
    return out


def _enumerated(graph) -> dict:
    """{op index: fragments live there} by definition on the run: a fragment is live at a step if some step at or
    after it reads it before anything overwrites it whole, and some step at or before it wrote or read it."""
    effects = {op.index: op_effects(op) for op in graph.ops}
    trace = _trace(list(graph.ops))
    names = {b.name for b in graph.buffers if b.is_fragment}
    here: dict = {i: set() for i in effects}
    for p, i in enumerate(trace):
        reads, writes, _ = effects[i]
        seen_before = {n for q in trace[:p] for n in effects[q][0] | effects[q][1]}
        for n in names:
            needed_before = needed_after = False
            for q in range(p, len(trace)):
                r, _, k = effects[trace[q]]
                if n in r:
                    needed_before = needed_before or True
                    needed_after = needed_after or q > p
                    break
                if n in k:
                    break
            if not needed_after:        # the value after step p: read at some later step before a kill
                for q in range(p + 1, len(trace)):
                    r, _, k = effects[trace[q]]
                    if n in r:
                        needed_after = True
                        break
                    if n in k:
                        break
            live_in = needed_before and (n in seen_before or n in reads)
            live_out = needed_after and (n in seen_before or n in reads | writes)
            if live_in or live_out or n in reads | writes:
                here[i].add(n)
    return {i: sorted(v) for i, v in here.items()}


@pytest.mark.parametrize("func", [chain, accumulate, reread, carried], ids=lambda f: str(f.attrs["global_symbol"])
                         if f.attrs is not None and "global_symbol" in f.attrs else "kernel")
def test_live_sets_equal_an_enumeration_of_every_run(func):
    graph = build_op_graph(func)
    assert dict(enumerate(_here(graph))) == _enumerated(graph)


@pytest.mark.parametrize("case, variant", [("flash_attention", "sm80_d64_b64x64_t128"),
                                           ("gemm_pipelined", "sm80_s3_k96"),
                                           ("gemm_chain", "sm80_m64n64k64d64_t128"),
                                           ("split_kv_combine", "mla_d512_s4_t128"),
                                           ("moe_topk", "e64_k8_b128_t256"),
                                           ("block_sparse_attention", "sm80_d64_b64x64_t128_causal")])
def test_live_sets_of_golden_kernels_equal_the_enumeration(case, variant):
    func = importlib.import_module(f"cases.{case}").VARIANTS[variant]()
    graph = build_op_graph(func)
    assert dict(enumerate(_here(graph))) == _enumerated(graph)


# ------------------------------------------------------------------------------------------ the peak

def _quiet(func, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tl.infer_layouts(func, **kw)


def test_the_peak_is_the_heaviest_point_not_the_sum():
    result = _quiet(chain)
    assert {n: int(np.prod(l.output_shape)) for n, l in result.buffers.items()} == {"S": 32, "P": 32, "O": 32}
    peak = register_peak(result.graph, result.buffers)
    # S dies as P is written element by element (and P as O is): two fragments of 32 never need 64
    assert peak.fragments == 32 and peak.op_index == 0 and peak.live == {"S": 32}
    assert peak_of(program_points(result.graph), {"S": 32, "P": 40, "O": 8})[0] == 40
    # without the element-wise overlap the point holding S and P would count both
    points = [p for p in program_points(result.graph) if p.op_index == 1]
    assert points[0].stream == (frozenset({"S"}), frozenset({"P"}))
    assert result.register_peak.fragments == 32
    assert result.register_peak.registers == 32 + result.register_peak.overhead
    assert result.func.attrs["tilelayout.register_peak"]["registers"] == result.register_peak.registers


def test_the_peak_decides_the_register_budget():
    """Three fragments of 32 registers, never more than one counted at once (plus the estimate of 12): a
    budget of 60 holds the plan though their sum (96) does not fit it; a budget of 20 does not (a note says
    so, naming the peak)."""
    with tl.layout_config(register_budget=60):
        fits = _quiet(chain)
    assert fits.register_peak.registers <= 60 < 3 * 32
    assert not any("budget" in n for n in fits.notes)
    with tl.layout_config(register_budget=20):
        over = _quiet(chain)
    assert any("registers per thread, over the budget of 20" in n for n in over.notes)


def _bandwidth_ratio(result, buffer: str) -> float:
    from tilelayout.report import bandwidth_rows
    (row,) = [r for r in bandwidth_rows(result) if r["buffer"] == buffer and r["access"] == "store"]
    return row["ratio"]


def test_the_m128_gemm_epilogue_is_staged_under_io_aware_within_the_budget():
    """The accumulator (128 registers) and its staged copy (128) are never wholly live together: the conversion
    stores one to shared memory before loading the other, in rounds. The store then moves the 128-byte
    segment minimum (ratio 1.00, it was 4.00), the peak stays under 255, and the lowered kernel computes the
    gemm (CPU run under the race check, numpy reference)."""
    from tilelayout.passes.lowering.pipeline import check_numeric
    build = importlib.import_module("cases.gemm_tile").VARIANTS["m128n128k32_t128"]
    plain = _quiet(build(), cost_model="register-count")
    staged = _quiet(build(), cost_model="io-aware")
    assert _bandwidth_ratio(plain, "C") == 4.0 and _bandwidth_ratio(staged, "C") == 1.0
    assert "C_frag_cv" in staged.buffers and staged.register_peak.registers <= 255
    (conv,) = staged.conversions
    # the staging tile shares the 48 KiB of static shared memory with A_s and B_s (8 KiB each): four rounds
    assert conv["cost"].chunks == 4 and conv["cost"].stage_bytes + 2 * 8192 <= 48 * 1024
    assert staged.register_peak.fragments == 128 + 128 // 4      # the larger side, plus one round of the other
    assert sum(int(l.output_shape[0]) for n, l in staged.buffers.items() if n.startswith("C_frag")) == 256
    with pytest.warns(tl.ConversionWarning, match="C_frag_cv <- C_frag: shared memory round trip"):
        outcome = check_numeric(build(), cost_model="io-aware")
    assert outcome.ok and not outcome.races, outcome.message


def test_show_and_explain_report_the_same_peak():
    from tilelayout.report import explain_dict, explain_lines, show_dict, show_lines
    result = _quiet(accumulate)
    peak = result.register_peak
    line = [l for l in show_lines(result) if "register peak" in l]
    assert len(line) == 1 and line[0].endswith(peak.line(255))
    assert [l.strip() for l in explain_lines(result) if l.strip().startswith("register peak")] == [peak.line(255)]
    assert show_dict(result)["resources"]["register_peak"] == explain_dict(result)["register_peak"] == peak.to_dict()
    assert peak.live == {"acc": 32, "t": 32} and "op #1" in peak.point   # the first point holding both


# ------------------------------------------------------------------------------------------ warp roles

def _two_roles(interleaved: bool):
    """Threads 0..127 exponentiate A, threads 128..255 add one to B: each range holds only its own 128-register
    fragment. ``interleaved`` loads both before either is used, so each is live across the other range's code."""
    @T.prim_func
    def roles(A: T.Buffer((128, 128), "float32"), B: T.Buffer((128, 128), "float32"),
              C: T.Buffer((128, 128), "float32"), D: T.Buffer((128, 128), "float32")):
        tx = T.launch_thread("threadIdx.x", 256)
        fa = T.alloc_buffer((128, 128), "float32", scope="local.fragment")
        fb = T.alloc_buffer((128, 128), "float32", scope="local.fragment")
        if interleaved:
            if tx < 128:
                Tx.copy(fa[0:128, 0:128], A[0:128, 0:128])
            if tx >= 128:
                Tx.copy(fb[0:128, 0:128], B[0:128, 0:128])
            if tx < 128:
                Tx.exp(fa[0:128, 0:128])
                Tx.copy(C[0:128, 0:128], fa[0:128, 0:128])
            if tx >= 128:
                Tx.add(fb[0:128, 0:128], fb[0:128, 0:128], T.float32(1))
                Tx.copy(D[0:128, 0:128], fb[0:128, 0:128])
        else:
            if tx < 128:
                Tx.copy(fa[0:128, 0:128], A[0:128, 0:128])
                Tx.exp(fa[0:128, 0:128])
                Tx.copy(C[0:128, 0:128], fa[0:128, 0:128])
            if tx >= 128:
                Tx.copy(fb[0:128, 0:128], B[0:128, 0:128])
                Tx.add(fb[0:128, 0:128], fb[0:128, 0:128], T.float32(1))
                Tx.copy(D[0:128, 0:128], fb[0:128, 0:128])
    return roles


@pytest.mark.parametrize("interleaved", [False, True])
def test_each_thread_range_reports_the_peak_of_its_own_fragments(interleaved):
    """Both ranges need 128 fragment registers (plus the estimate). The kernel's figure is the peak over every
    fragment: 128 when each range's ops sit in one branch, 256 when both fragments are live across each other's
    code (ptxas cannot tell that no thread holds both, so it allocates for both: the test below). The warning
    then says that each range alone would fit. Both kernels compute the right values (race-checked CPU run)."""
    from tilelayout.passes.lowering.pipeline import check_numeric
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = tl.infer_layouts(_two_roles(interleaved))
    peak = result.register_peak
    base = peak.overhead
    assert peak.roles == {"0..127": 128 + base, "128..255": 128 + base}
    assert peak.fragments == (256 if interleaved else 128)
    assert peak.to_dict()["roles"] == peak.roles and "threads 128..255" in peak.line(255)
    over = [str(w.message) for w in caught if issubclass(w.category, tl.TileLayoutResourceWarning)
            and "register peak" in str(w.message)]
    if interleaved:
        assert len(over) == 1 and f"at most {128 + base} (threads 0..127)" in over[0] and "one branch" in over[0]
    else:
        assert over == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = check_numeric(_two_roles(interleaved), lambda d: {"C": np.exp(d["A"]), "D": d["B"] + 1},
                                tolerance=(1e-5, 1e-5))
    assert outcome.ok, outcome.message


def test_a_kernel_without_thread_ranges_has_no_roles():
    assert _quiet(chain).register_peak.roles == {}
    assert _quiet(chain).register_peak.to_dict()["roles"] == {}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: ptxas figures need it")
def test_ptxas_allocates_the_kernel_figure_not_the_role_figure():
    """What the kernel figure rests on: for the interleaved kernel ptxas runs out of registers and uses a stack
    frame; with each range's ops in one branch it needs no stack."""
    import tvm
    from maint.bench_codegen import compile_stats
    from tilelayout.passes.lowering.pipeline import lower, lowered_cuda_source
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    frames = {}
    for interleaved in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            source = lowered_cuda_source(lower(_two_roles(interleaved), target), target)
        frames[interleaved] = compile_stats(source, "sm_80").stack_frame
    assert frames[False] == 0 and frames[True] > 0, frames
