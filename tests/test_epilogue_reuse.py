"""An epilogue split's run built from the unsplit run (``epilogue_reuse``) gives what the full run gives: the
same layouts, loops, attempts, conversions, notes and annotated function, on every kernel that stages one."""
from __future__ import annotations

import importlib
import pathlib
import warnings

import pytest

from tilelayout.passes.inference import conversion_plan, layout_inference
from tilelayout.passes.inference.layout_inference import clear_caches, infer_layouts

ROOT = pathlib.Path(__file__).resolve().parent.parent
_SHORTCUT = layout_inference._Engine.run_after_epilogue_split
STAGED = ["gemm_pipelined", "gemm_fp8", "gemm_register_a", "gemm_chain", "gemm_tile", "conversion_two_consumers"]


def _variants():
    out = []
    for case in STAGED:
        mod = importlib.import_module(f"cases.{case}")
        out += [(case, v) for v in sorted(mod.VARIANTS)]
    return out


def _everything(result) -> dict:
    """Every output of one inference, as plain data."""
    return {
        "buffers": {k: v.to_dict() for k, v in result.buffers.items()},
        "loops": {k: v.to_dict() for k, v in result.loops.items()},
        "op_loops": {k: (v.layout.to_dict(), v.predicate, v.padding_guard, v.replica_guard, str(v.source))
                     for k, v in result.op_loops.items()},
        "attempts": [(a.to_dict(), a.note, [str(d) for d in a.details],
                      [{k: str(v) for k, v in c.items()} for c in a.conversions]) for a in result.attempts],
        "conversions": [{k: str(v) for k, v in c.items()} for c in result.conversions],
        "notes": list(result.notes),
        "func": result.func.script(),
    }


def _infer(func, reuse: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(conversion_plan, "REUSE_UNSPLIT_RUN", reuse)
    taken = []

    def spy(self, *args):
        state = _SHORTCUT(self, *args)
        taken.append(state is not None)
        return state

    monkeypatch.setattr(layout_inference._Engine, "run_after_epilogue_split", spy)
    clear_caches()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = infer_layouts(func, None, "io-aware")
    return _everything(result), taken


@pytest.mark.parametrize("case,variant", _variants())
def test_reused_run_equals_full_run(case, variant, monkeypatch):
    build = importlib.import_module(f"cases.{case}").VARIANTS[variant]
    full, taken_full = _infer(build(), False, monkeypatch)
    reused, taken = _infer(build(), True, monkeypatch)
    assert not taken_full
    assert reused == full


def test_reuse_is_taken_on_gemm_epilogues(monkeypatch):
    """The gemm kernels whose store is their last op take the shortcut (else the test above proves nothing)."""
    mod = importlib.import_module("cases.gemm_pipelined")
    for variant in ("sm80_s2_k128", "sm90a_s3_k96"):
        _, taken = _infer(mod.VARIANTS[variant](), True, monkeypatch)
        assert taken == [True]


def test_reuse_refuses_a_store_that_is_not_the_last_op(monkeypatch):
    """conversion_two_consumers stages stores followed by other ops: those splits run in full."""
    mod = importlib.import_module("cases.conversion_two_consumers")
    _, taken = _infer(mod.VARIANTS["rows_vs_columns_64x64_t128"](), True, monkeypatch)
    assert False in taken


def _graph_facts(graph) -> dict:
    """What inference reads of an op graph, as plain data (statements and variables by identity)."""
    from tilelayout.passes.inference.frontend import ParallelOp
    return {
        "threads": (graph.thread_extent, graph.thread_var.__chandle__() if graph.thread_var is not None else None),
        "blocks": {k: (v.__chandle__(), str(graph.block_extents[k])) for k, v in graph.block_vars.items()},
        "buffers": [(b.name, b.var.__chandle__(), b.scope, [str(x) for x in b.shape], b.dtype, b.bits,
                     b.pinned_layout is None) for b in graph.buffers],
        "ops": [(type(op).__name__, op.index, op.describe(), op.stmt.__chandle__(),
                 [l.var.__chandle__() if l.var is not None else None for l in op.serial_loops],
                 [str(c) for c in op.conditions], op.thread_range,
                 [str(a) for a in op.accesses] if isinstance(op, ParallelOp) else
                 [str(r) for r in op.regions()]) for op in graph.ops],
        "floating": [(b.name, str(a)) for b, a in graph.floating],
        "aliases": [[b.name for b in group] for group in graph.aliases],
        "registered": (list(graph.registered_before), graph.registered_at_end),
    }


@pytest.mark.parametrize("case,variant", _variants())
def test_split_graph_made_from_the_unsplit_one_equals_a_full_build(case, variant, monkeypatch):
    """``graph_after_split`` gives the op graph walking the split function gives (same buffers in the same
    order, ops on the same statements, same floating accesses and registers of the walk), wherever it answers;
    and it answers on every gemm epilogue (the store is the program's last op)."""
    from tilelayout.passes.inference import frontend
    made, real = [], frontend.graph_after_split

    def spy(prev, func, reader, replacement):
        graph = real(prev, func, reader, replacement)
        made.append(graph)
        if graph is not None:
            assert _graph_facts(graph) == _graph_facts(frontend.build_op_graph(func))
        return graph

    monkeypatch.setattr(conversion_plan, "graph_after_split", spy)
    _infer(importlib.import_module(f"cases.{case}").VARIANTS[variant](), True, monkeypatch)
    if case.startswith("gemm_"):
        assert all(g is not None for g in made)
    if case == "gemm_pipelined" and not variant.startswith(("rowsum", "staged_c")):
        assert made


def _store_then(after: str):
    """A 64x64 fragment stored to C, followed by ``after`` (TVMScript lines at the body's indentation)."""
    import tvm
    lines = [
        "# from tvm.script import tirx as T",
        "@T.prim_func",
        "def kernel(A: T.Buffer((64, 64), \"float32\"), C: T.Buffer((64, 64), \"float32\"), "
        "D: T.Buffer((64, 64), \"float32\")):",
        "    bx = T.launch_thread(\"blockIdx.x\", 1)",
        "    tx = T.launch_thread(\"threadIdx.x\", 128)",
        "    F = T.alloc_buffer((64, 64), \"float32\", scope=\"local.fragment\")",
        "    T.tile.copy(F[0:64, 0:64], A[0:64, 0:64])",
        "    T.tile.copy(C[0:64, 0:64], F[0:64, 0:64])",
    ] + [f"    {line}" for line in after]
    return tvm.script.from_source("\n".join(lines) + "\n")


@pytest.mark.parametrize("after,answers", [
    ([], True),
    (["G = T.alloc_buffer((64, 64), \"float32\", scope=\"local.fragment\")"], False),   # a buffer after the store
    (["T.tile.copy(D[0:64, 0:64], F[0:64, 0:64])"], False),                                   # the store is not last
])
def test_split_graph_is_made_only_when_nothing_follows_the_store(after, answers):
    """The store to C, split: made from the unsplit graph (and equal to a full build) when it ends the walk; not
    made when the walk records a buffer after it, or another op follows it."""
    from tilelayout.passes.inference import frontend
    from tilelayout.passes.inference.conversion_plan import Split, split_fragment
    func = _store_then(after)
    graph = frontend.build_op_graph(func)
    split = Split("F", 1, None, "stage F")
    rewritten, _, replaced = split_fragment(func, graph, split)
    made = frontend.graph_after_split(graph, rewritten, 1, replaced)
    assert (made is not None) == answers
    if made is not None:
        assert _graph_facts(made) == _graph_facts(frontend.build_op_graph(rewritten))
        assert [type(op).__name__ for op in made.ops] == ["CopyOp", "ConvertOp", "CopyOp"]
        assert made.ops[0] is graph.ops[0]


@pytest.mark.parametrize("case,variant", [cv for cv in _variants() if cv[0].startswith("gemm_")])
def test_split_engine_takes_the_unsplit_gemm_plans_planning_gives(case, variant, monkeypatch):
    """The split program's engine takes the unsplit program's gemm plans (``_try_splits``): planning the split
    program's gemms afresh gives the same plans, on every gemm kernel that stages its epilogue."""
    from tilelayout.passes.inference.gemm_plan import plan_gemms
    given = []
    real_init = layout_inference._Engine.__init__

    def spy(self, *args, gemm_plans=None, **kwargs):
        real_init(self, *args, gemm_plans=gemm_plans, **kwargs)
        if gemm_plans is not None:
            given.append(self)

    monkeypatch.setattr(layout_inference._Engine, "__init__", spy)
    _infer(importlib.import_module(f"cases.{case}").VARIANTS[variant](), True, monkeypatch)
    for engine in given:
        fresh = plan_gemms(engine.ops, engine.graph.thread_extent, engine.target, engine.graph.op_thread_range)
        assert fresh == engine.gemm_plans
    if case == "gemm_pipelined" and not variant.startswith(("rowsum", "staged_c")):
        assert given, "the pipelined gemms stage their epilogue through a reused graph"
