"""Write inference results into the PrimFunc (and read them back): passes talk only through the IR."""
from __future__ import annotations

from tilelayout.ir_walk import mutate_typed
from tvm import tirx

from tilelayout.annotate import (REDUCTIONS_ATTR, TILE_LOOPS_ATTR, annotate_layouts, annotate_loop, encode_reduction,
                                 encode_tile_loop, read_layout_annotations)
from tilelayout.errors import LayoutError

from .ops import ReduceOp
from .reduce_layouts import reduction_decision

__all__ = ["annotate_result", "get_layouts", "REGISTER_PEAK_ATTR"]

#: function attribute: the plan's register peak, ``{"registers": int, "fragments": int, "op": int, "point": str,
#: "live": {fragment: registers}}`` (``register_liveness``); read by reports, never by lowering
REGISTER_PEAK_ATTR = "tilelayout.register_peak"


def annotate_result(func, result):
    """``func`` with a layout map for every inferred buffer; on the outermost loop of every parallel nest its
    loop layout, predicate and guard flags; for tile ops (which have no loop yet), the same decision in the
    function attribute ``TILE_LOOPS_ATTR``, so lowering reads every loop decision instead of making it; and
    the reduction decision of every reduction of a fragment (``REDUCTIONS_ATTR``); and the plan of every gemm
    (``gemm_plan.GEMM_PLANS_ATTR``)."""
    roots, tile_loops = {}, {}
    for index, decision in sorted(result.op_loops.items()):
        op = result.graph.ops[index]
        root = getattr(op, "root", None)
        if root is not None:
            roots[index] = (root, decision)
        else:
            tile_loops[str(index)] = encode_tile_loop(op.describe(), decision.layout, decision.predicate,
                                                      decision.padding_guard, decision.replica_guard)

    def on_for(loop, mutator):
        new = mutator.default_mutate(loop)
        for root, decision in roots.values():
            if loop.same_as(root):
                return annotate_loop(new, decision.layout, decision.predicate, decision.padding_guard,
                                     replica_guard=decision.replica_guard)
        return new

    # a function without user loops keeps its body: rebuilding a PrimFunc costs ~25 us in TVM's constructor
    annotated = func.with_body(mutate_typed(func.body, [(tirx.For, on_for)])) if roots else func
    out = annotate_layouts(annotated, dict(result.buffers))
    out = out.with_attr(TILE_LOOPS_ATTR, tile_loops) if tile_loops else out
    reductions = _reductions(result)
    out = out.with_attr(REDUCTIONS_ATTR, reductions) if reductions else out
    plans = getattr(result, "gemm_plans", None) or {}
    if plans:
        from .gemm_plan import annotate_gemm_plans, gemm_ordinals
        indices = sorted(plans)
        ordinals = gemm_ordinals(func, [result.graph.ops[i] for i in indices])
        out = annotate_gemm_plans(out, {k: plans[i] for k, i in zip(ordinals, indices)})
    peak = getattr(result, "register_peak", None)
    if peak is not None:
        out = out.with_attr(REGISTER_PEAK_ATTR, {"registers": peak.registers, "fragments": peak.fragments,
                                                 "op": -1 if peak.op_index is None else peak.op_index,
                                                 "point": peak.point, "live": dict(peak.live)})
    return out


def _reductions(result) -> dict:
    """{op number: encoded reduction decision} for every reduction of a whole fragment with a layout."""
    graph = getattr(result, "graph", None)
    out = {}
    for op in graph.ops if graph is not None else []:
        if not isinstance(op, ReduceOp) or not op.src.buffer.is_fragment or not op.src.is_full:
            continue
        src = result.buffers.get(op.src.buffer.name)
        dst = result.buffers.get(op.dst.buffer.name) if op.dst.buffer.is_fragment else None
        if src is None or (op.dst.buffer.is_fragment and dst is None):
            continue
        try:
            reduced, combine = reduction_decision(src, op.axes, dst, graph.thread_extent)
        except LayoutError:
            continue        # lowering refuses the reduction: no decision recorded
        out[str(op.index)] = encode_reduction(op.describe(), reduced, combine)
    return out


def get_layouts(func):
    """Read an annotated function back into an InferenceResult (no inference is run)."""
    from .result import InferenceResult
    buffers, loops = read_layout_annotations(func)
    from .conversion_plan import read_conversions
    return InferenceResult(buffers=buffers, loops={k: v[0] for k, v in loops.items()}, attempts=[], func=func,
                           loop_info=dict(loops), conversions=read_conversions(func))
