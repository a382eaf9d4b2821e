"""Automatic layout conversion: costs against hand enumeration, the split in the IR and the attempts, the
strict switch, the register budget, lowering that reads (and re-checks) the decision, CPU numerics."""
from __future__ import annotations

import importlib
import warnings

import re

import numpy as np
import pytest
from conftest import gemm_body, kernel_warnings, parse_main
import tvm

import tilelayout as tl
from tilelayout import annotate_layouts
from tilelayout.errors import LayoutConflictError, LoweringError
from tilelayout.passes.inference.conversion import (CONFIG_KEY, conversion_cost, is_noop, shared_cost,
                                                    shuffle_count)
from tilelayout.passes.lowering.pipeline import check_numeric, random_inputs

from tests import kernels_inference as K

symmetric = importlib.import_module("cases.conversion_symmetric")
transposed = importlib.import_module("cases.conversion_transposed")
two = importlib.import_module("cases.conversion_two_consumers")

ROWS = tl.Fragment([64, 64], lambda i, j: i * 2 + j // 32, lambda i, j: j % 32)


def _quiet_infer(func, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tl.ConversionWarning)
        return tl.infer_layouts(func, **kw)


# ------------------------------------------------------------------------------------------ costs

def test_identical_and_slot_permuted_layouts_convert_for_free():
    permuted = tl.Fragment([64, 64], lambda i, j: i * 2 + j // 32, lambda i, j: 31 - j % 32)
    for dst in (ROWS, permuted):
        cost = conversion_cost(ROWS.bind_thread_range(0, 128), dst.bind_thread_range(0, 128), 128, 32, 4)
        assert cost.kind == "noop" and cost.mem == 0


def test_a_subset_of_holders_is_a_noop_but_a_superset_is_not():
    everyone = tl.fully_replicated([8, 8], 32).bind_thread_range(0, 32)
    spread = tl.Fragment([8, 8], lambda i, j: (i * 8 + j) % 32).bind_thread_range(0, 32)
    assert is_noop(everyone, spread, 32) and not is_noop(spread, everyone, 32)


def _shuffles_by_hand(src, dst, threads, warp):
    """Per destination slot, the distinct source slots read when some lane's element is held by another lane;
    every warp issues each (the lowering's count), by plain loops over the tables."""
    st, dt = src.thread_table(), dst.thread_table()
    ss, ds = np.asarray(src.table())[..., 0], np.asarray(dst.table())[..., 0]
    per_slot = {}
    for idx in np.ndindex(*src.input_shape):
        for r in range(dt.shape[-1]):
            holder, reader = int(st[idx][0]), int(dt[idx][r])
            assert holder // warp == reader // warp
            entry = per_slot.setdefault(int(ds[idx]), [set(), False])
            entry[0].add(int(ss[idx]))
            entry[1] |= holder != reader
    return sum(len(s) for s, remote in per_slot.values() if remote) * (threads // warp)


def test_shuffle_count_matches_a_hand_count_for_a_lane_permutation():
    lanes = tl.Fragment([64, 64], lambda i, j: i // 16 * 32 + j // 32 * 16 + i % 16, lambda i, j: j % 32)
    src, dst = ROWS.bind_thread_range(0, 128), lanes.bind_thread_range(0, 128)
    expected = _shuffles_by_hand(src, dst, 128, 32)
    assert shuffle_count(src, dst, 128, 32, 4) == expected > 0
    cost = conversion_cost(src, dst, 128, 32, 4)
    assert cost.kind == "shuffle" and cost.shuffles == expected and cost.mem == expected * 128


def test_elements_crossing_warps_cannot_shuffle():
    cols = tl.Fragment([64, 64], lambda i, j: j * 2 + i // 32, lambda i, j: i % 32)
    assert shuffle_count(ROWS.bind_thread_range(0, 128), cols.bind_thread_range(0, 128), 128, 32, 4) is None
    assert conversion_cost(ROWS.bind_thread_range(0, 128), cols.bind_thread_range(0, 128), 128, 32, 4).kind == "shared"


def test_shared_wavefronts_of_rows_and_columns():
    """Hand counts on a 32x32 fp32 tile over one warp. ``row``: lane j holds column j, slot i = row i: each slot
    is one row, 32 consecutive words: 1 wavefront per slot. ``col``: lane i holds row i, slots j: four
    consecutive, aligned slots make a 16-byte vector; a phase of 8 lanes then hits rows 32 words apart, all
    in the same 4 banks: 8 wavefronts per phase, 4 phases per vector step, 8 steps. One word of padding per
    row breaks the alignment (scalar accesses) and the conflicts: lane i, slot j hits bank (i + j) % 32."""
    row = tl.Fragment([32, 32], lambda i, j: j, lambda i, j: i).bind_thread_range(0, 32)
    col = tl.Fragment([32, 32], lambda i, j: i, lambda i, j: j).bind_thread_range(0, 32)
    plain = shared_cost(row, row, 32, 32, 4, 0)
    assert (plain.wavefronts, plain.vectors) == (2 * 32, (1, 1))
    packed = shared_cost(col, col, 32, 32, 4, 0)
    assert (packed.wavefronts, packed.vectors, packed.ideal_wavefronts) == (2 * 8 * 4 * 8, (4, 4), 2 * 8 * 4)
    padded = shared_cost(col, col, 32, 32, 4, 1)
    assert (padded.wavefronts, padded.vectors) == (2 * 32, (1, 1))
    assert conversion_cost(row, col, 32, 32, 4, allow_shuffle=False).pad == 1


# ------------------------------------------------------------------------------------------ the split

def test_symmetric_gemm_conflicts_in_strict_mode_and_converts_by_default():
    func = symmetric.VARIANTS["gemm_acc_m64n64k64_t128"]()
    with pytest.raises(LayoutConflictError, match="buffer acc"):
        tl.infer_layouts(func, conflicts="strict")
    with pytest.warns(tl.ConversionWarning, match="acc_cv <- acc"):
        result = tl.infer_layouts(func)
    (conv,) = result.conversions
    assert (conv["src"], conv["dst"], conv["kind"]) == ("acc", "acc_cv", "shared")
    assert conv["cost"].mem < conv["hand_staged"].mem
    assert any(a.chosen and a.component == -1 and a.conversions for a in result.attempts)
    assert any("layout conflict: buffer acc" in n for n in result.notes)


def test_the_conversion_is_a_statement_in_the_ir_that_survives_print_and_parse():
    result = _quiet_infer(symmetric.VARIANTS["gemm_acc_m64n64k64_t128"]())
    text = result.func.script()
    line = next(l for l in text.splitlines() if CONFIG_KEY in l)
    assert "T.tile.copy(acc_cv[0:64, 0:64], acc[0:64, 0:64]" in line and '"kind": "shared"' in line
    parsed = tvm.script.from_source(text)
    assert parsed.script() == text
    back = tl.get_layouts(parsed)
    assert set(back.buffers) >= {"acc", "acc_cv"}
    assert [(c["src"], c["dst"], c["kind"]) for c in back.conversions] == [("acc", "acc_cv", "shared")]


def test_config_and_environment_select_strict_mode(monkeypatch):
    func = symmetric.VARIANTS["gemm_acc_m64n64k64_t128"]()
    with tl.layout_config(conflicts="strict"):
        with pytest.raises(LayoutConflictError):
            tl.infer_layouts(func)
    monkeypatch.setenv("TILELAYOUT_CONFLICTS", "strict")
    with pytest.raises(LayoutConflictError):
        tl.infer_layouts(func)
    assert _quiet_infer(func, conflicts="convert").conversions       # the argument wins
    with pytest.raises(ValueError, match="convert, strict"):
        tl.infer_layouts(func, conflicts="maybe")


def test_full_replication_over_the_register_budget_is_converted_not_chosen():
    func = symmetric.VARIANTS["register_tile_64x64_t128"]()
    with pytest.warns(tl.TileLayoutResourceWarning, match=r"4[01]\d\d 32-bit registers"):  # both say it
        strict = tl.infer_layouts(func, conflicts="strict")      # the behaviour without conversions
    assert strict.buffers["F"].replicate_size == 128 and int(np.prod(strict.buffers["F"].output_shape)) == 4096
    result = _quiet_infer(func)
    assert {n: int(np.prod(l.output_shape)) for n, l in result.buffers.items() if isinstance(l, tl.Fragment)} == \
        {"F": 32, "F_cv": 32}
    assert any(re.search(r"needs 4[01]\d\d registers per thread, over the budget of 255", n) for n in result.notes)


def test_a_conflict_free_plan_wins_without_conversion():
    result = tl.infer_layouts(K.accumulate_rows(128))
    assert any(a.error for a in result.attempts) and not result.conversions
    assert not any(name.endswith("_cv") for name in result.buffers)


def test_pinned_pair_converts_and_computes():
    cols = tl.Fragment([64, 64], lambda i, j: j * 2 + i // 32, lambda i, j: i % 32)
    func = annotate_layouts(K.pinned_pair(128), {"x": ROWS, "y": cols})
    result = _quiet_infer(func)
    assert [c["kind"] for c in result.conversions] == ["shared"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tl.ConversionWarning)
        res = check_numeric(func, lambda d: {"B": d["A"] + 1})
    assert res.ok, res.message


def test_noop_conversion_lowers_to_register_moves_and_computes():
    """A conversion annotated by hand between slot-permuted layouts (same threads) is a no-op."""
    from tilelayout.passes.inference.conversion_plan import Split, split_fragment
    from tilelayout.passes.inference.frontend import build_op_graph
    func = K.pinned_pair(128)
    graph = build_op_graph(func)
    loop = next(op for op in graph.ops if op.kind == "parallel")
    split, name, _ = split_fragment(func, graph, Split("x", loop.index, None, "test"))
    permuted = tl.Fragment([64, 64], lambda i, j: i * 2 + j // 32, lambda i, j: 31 - j % 32)
    pinned = annotate_layouts(split, {"x": ROWS, name: permuted, "y": ROWS})
    result = tl.infer_layouts(pinned)
    assert [c["kind"] for c in result.conversions] == ["noop"]
    assert '"kind": "noop"' in result.func.script()
    res = check_numeric(pinned, lambda d: {"B": d["A"] + 1})
    assert res.ok, res.message


# ------------------------------------------------------------------------------------------ lowering

def _retag(func, kind):
    from tilelayout.passes.lowering.loop_partition import mutate
    from tvm.tirx.tile_primitive import TilePrimitiveCall

    def on_call(node, mutator):
        if node.config is not None and CONFIG_KEY in node.config:
            plan = {str(k): v for k, v in node.config[CONFIG_KEY].items()}
            plan["kind"] = kind
            return TilePrimitiveCall(*list(node.args), op=node.op, config={CONFIG_KEY: plan})
        return node
    return func.with_body(mutate(func.body, [(TilePrimitiveCall, on_call)]))


@pytest.mark.parametrize("kind,message", [("noop", "annotated as a no-op"), ("shuffle", "cross a warp"),
                                          ("magic", "unknown conversion kind")])
def test_lowering_refuses_a_decision_the_layouts_do_not_support(kind, message):
    result = _quiet_infer(symmetric.VARIANTS["register_tile_64x64_t128"]())
    with pytest.raises(LoweringError, match=message):
        tl.lower(_retag(result.func, kind), infer=False)


def test_shared_conversion_emits_a_staging_tile_and_barriers_in_cuda():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tl.ConversionWarning)
        src = tl.cuda_source(symmetric.VARIANTS["register_tile_64x64_t128"]())
    assert any("__shared__" in l and "F_cv_stage" in l for l in src.splitlines()) and src.count("__syncthreads()") >= 2


def test_shuffle_conversion_emits_warp_shuffles_in_cuda_and_computes():
    func = two.VARIANTS["lane_permutation_64x64_t128"]()
    src = tl.cuda_source(func)
    assert "__shfl_sync" in src and "__shared__" not in src
    res = check_numeric(func, two.REFERENCE["lane_permutation_64x64_t128"])
    assert res.ok, res.message


def test_a_wrong_shuffle_lane_is_caught_numerically():
    """The CPU emulation really moves data between lanes: reading the neighbouring lane breaks the result."""
    from tilelayout.passes.lowering.loop_partition import mapped
    from tilelayout.passes.lowering.pipeline import _cpu_compile, device_index_rewrites, lower_func
    from tilelayout.passes.lowering.serialize_threads import serialize_threads
    from tvm import tirx
    func = two.VARIANTS["lane_permutation_64x64_t128"]()
    lowered = lower_func(func)

    def shift(c):
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) == "tirx.tvm_warp_shuffle":
            args = list(c.args)
            args[2] = tirx.floormod(args[2] + 1, 32)
            return tirx.call_intrin("float32", "tirx.tvm_warp_shuffle", *args)
        return c
    broken = lowered.with_body(mapped(lowered.body, [(tvm.ir.Call, shift)]))
    kernel = _cpu_compile(serialize_threads(device_index_rewrites(broken)), "main")
    inputs = random_inputs(func)
    arrays = [inputs[n].copy() for n in inputs]
    kernel(*arrays)
    right = [np.allclose(arrays[1], inputs["A"] * 2), np.allclose(arrays[2], inputs["A"] + 1)]
    assert sorted(right) == [False, True], "exactly the consumer of the converted version must go wrong"


def test_transposed_read_computes_on_cpu_under_both_models():
    func = transposed.VARIANTS["fp32_64x64_t128"]()
    for model in ("register-count", "io-aware"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tl.ConversionWarning)
            res = check_numeric(func, transposed.REFERENCE["fp32_64x64_t128"], cost_model=model)
        assert res.ok, f"{model}: {res.message}"


# ------------------------------------------------------------------------------------------ layout pairs

def _layouts():
    from tilelayout.passes.inference.loop_plan import plan_loop_layout
    return {
        "rows_v4": plan_loop_layout([64, 64], 128, 4, True),
        "rows_v1": plan_loop_layout([64, 64], 128, 1, True),
        "cols": tl.Fragment([64, 64], lambda i, j: j * 2 + i // 32, lambda i, j: i % 32),
        "mma": tl.make_mma_accumulator_fragment(64, 64, 128, "float32"),
        "lanes": tl.Fragment([64, 64], lambda i, j: i // 16 * 32 + j // 32 * 16 + i % 16, lambda i, j: j % 32),
        "halves": tl.Fragment([64, 64], lambda i, j: i * 2 + j // 32, lambda i, j: j % 32),
    }


@pytest.mark.parametrize("src,dst,kind", [
    ("rows_v4", "cols", "shared"), ("mma", "rows_v4", "shared"), ("cols", "mma", "shared"),
    ("halves", "lanes", "shuffle"), ("lanes", "halves", "shuffle"), ("rows_v1", "halves", "shared"),
])
def test_every_conversion_kind_between_layout_pairs_computes(src, dst, kind):
    """x pinned to one layout, y = x + 1 pinned to another: the split converts x between exactly those two,
    and the lowered kernel must agree with numpy."""
    layouts = _layouts()
    func = annotate_layouts(K.pinned_pair(128), {"x": layouts[src], "y": layouts[dst]})
    result = _quiet_infer(func)
    assert [c["kind"] for c in result.conversions] == [kind]
    conv = result.conversions[0]
    assert result.buffers[conv["dst"]].thread_table().shape[:-1] == (64, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tl.ConversionWarning)
        res = check_numeric(func, lambda d: {"B": d["A"] + 1})
    assert res.ok, res.message


def test_a_tile_larger_than_shared_memory_is_staged_in_rounds():
    """128x128 fp32 (64 KiB) cannot be staged at once in 48 KiB: it goes in rounds of rows, each with its own
    barriers; the cost counts every round's wavefronts and the lowered kernel computes."""
    from kernels_inference import chain
    kernel = chain(128, 128, 256)            # x -> y = x * 2 -> B, x and y pinned apart below
    rows = tl.Fragment([128, 128], lambda i, j: i * 2 + j // 64, lambda i, j: j % 64)
    cols = tl.Fragment([128, 128], lambda i, j: j * 2 + i // 64, lambda i, j: i % 64)
    func = annotate_layouts(kernel, {"x": rows, "y": cols})
    result = _quiet_infer(func)
    (conv,) = result.conversions
    cost = conv["cost"]
    assert cost.kind == "shared" and cost.chunks >= 2 and cost.stage_bytes <= 48 * 1024
    assert cost.chunk_rows * cost.chunks == 128 and cost.barriers == 2 * cost.chunks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tl.ConversionWarning)
        assert tl.cuda_source(func).count("__syncthreads()") >= 2
        res = check_numeric(func, lambda d: {"B": d["A"] * 2})
    assert res.ok, res.message


def test_no_split_under_a_thread_dependent_condition():
    """A conversion inside ``if tx < 64`` would put barriers in divergent code: the conflict is reported."""
    kernel = parse_main('A: T.Buffer((64, 64), "float16"), B: T.Buffer((64, 64), "float16"), '
                        'C: T.Buffer((64, 64), "float32")', threads=128, name="kernel", body=gemm_body(64, 64, 64) + '''
    if tx < 128:
        for i in T.parallel(64):
            for j in T.parallel(64):
                C[i, j] = acc[i, j] + acc[j, i]
''')

    with pytest.raises(tl.LayoutError, match="acc"):
        tl.infer_layouts(kernel)


def test_a_conversion_writes_its_new_version_for_the_uninitialized_read_check():
    """The `_cv` version a conversion creates is written by the conversion: strict mode must not call its
    readers uninitialized (found by the fuzzer when the reader was a copy to global memory)."""
    import importlib
    import tilelayout as tl
    from tilelayout.passes.inference.ops import ConvertOp
    from tilelayout.passes.inference.uninitialized import uninitialized_reads
    seen = 0
    for name in ("conversion_symmetric", "conversion_transposed", "conversion_two_consumers"):
        for build in importlib.import_module(f"cases.{name}").VARIANTS.values():
            for model in ("register-count", "io-aware"):
                with tl.layout_config(strict=True), kernel_warnings("ConversionWarning") as staged:
                    result = tl.infer_layouts(build(), cost_model=model)
                # a conversion through shared memory says so; one through shuffles or none says nothing
                assert len(staged) == sum(c["kind"] == "shared" for c in result.conversions)
                if result.conversions:
                    from tilelayout.passes.inference.frontend import build_op_graph
                    graph = build_op_graph(result.func)
                    assert any(isinstance(op, ConvertOp) for op in graph.ops)
                    assert uninitialized_reads(graph) == []
                    seen += 1
    assert seen > 0


def test_a_conversion_does_not_invert_a_gemm_accumulator_again(monkeypatch):
    """The io-aware epilogue converts a wgmma accumulator before its store: lowering walks both sides' registers,
    so both need a closed-form inverse, but the existence checks (``register_walk_error``,
    ``check_cells_invertible``) invert neither: the accumulator's constructor and the loop planner (which lays
    out the new version) proved it exists (``tests/test_known_facts.py`` checks those facts by enumeration).
    The inverses themselves exist, as lowering will need them."""
    import sys
    from tilelayout.fragment import Fragment
    pipelined = importlib.import_module("cases.gemm_pipelined")
    inverted = []
    real = Fragment.inverse_with_info

    def spy(self, *args, **kwargs):
        if sys._getframe(1).f_code.co_name in ("register_walk_error", "check_cells_invertible"):
            inverted.append(self.key)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Fragment, "inverse_with_info", spy)
    result = _quiet_infer(pipelined.VARIANTS["sm90a_s2_k128"](), cost_model="io-aware")
    (conv,) = result.conversions
    assert (conv["src"], conv["dst"]) == ("acc_f", "acc_f_cv")
    assert result.buffers["acc_f"].key not in inverted and result.buffers["acc_f_cv"].key not in inverted
    monkeypatch.undo()
    for name in ("acc_f", "acc_f_cv"):
        assert result.buffers[name].inverse_with_info(allow_padding=True)[1]
