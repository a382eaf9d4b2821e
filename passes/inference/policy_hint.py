"""Say which warp policy conflicts when a chained gemm's user policy makes inference fail.

Why: in attention-like chains (a gemm's accumulator cast into the register A operand of the next, row
vectors reduced from one accumulator scaling another) every row must live in the same threads of every gemm,
which only partitions with all warps on M give. A user's ``warp_policy="square"`` (or ``"full_col"``) that
splits warps over N makes some fragment unreachable, and the conflict the inference engine reports names a
loop and two layouts, not the cause. This module finds the gemms whose user policy puts more than one warp on
N inside a chain, re-runs inference with ``full_row`` for them and, only when that succeeds, turns the
conflict into a ``WarpPolicyConflictError`` naming the gemm, its policy and the fix.
"""
from __future__ import annotations

import functools

from tilelayout.errors import LayoutConflictError, TileLayoutError, WarpPolicyConflictError

from ..hardware import normalize_target
from .frontend import build_op_graph
from .gemm_plan import chains, plan_gemms, policy_of

__all__ = ["warp_policy_hint"]


def _suspects(graph, target) -> tuple[list, dict]:
    """(chained gemms whose user policy splits N, their plans) under the kernel as written."""
    plans = plan_gemms(graph.ops, graph.thread_extent, target, graph.op_thread_range)
    out = []
    for chain in chains(graph.ops):
        if len(chain) < 2:
            continue
        for g in chain:
            if policy_of(g) in ("square", "full_col") and plans[g.index].warp_n > 1:
                out.append(g)
    return out, plans


def warp_policy_hint(func, target, cost_model, conflicts, err: LayoutConflictError, engine_cls, errors,
                     make_result) -> WarpPolicyConflictError | None:
    """A ``WarpPolicyConflictError`` explaining ``err`` when ``full_row`` on the chained gemms with an N-splitting
    user policy makes the kernel infer; None when that is not the cause."""
    from .conversion_plan import infer_with_conversions
    try:
        target = normalize_target(target if target is not None else _func_target(func))
        graph = build_op_graph(func)
        suspects, plans = _suspects(graph, target)
        if not suspects:
            return None
        override = {g.index: "full_row" for g in suspects}
        fixed = plan_gemms(graph.ops, graph.thread_extent, target, graph.op_thread_range, override)
        if any(fixed[g.index].warp_n != 1 for g in suspects):
            return None
        engine = functools.partial(engine_cls, policy_override=override)
        infer_with_conversions(func, target, cost_model, conflicts, engine, errors, make_result)
    except TileLayoutError:
        return None
    parts = []
    for g in suspects:
        p = plans[g.index]
        parts.append(f"{g.describe()} has warp_policy=\"{policy_of(g)}\", which splits its {p.m}x{p.n} accumulator "
                     f"over {p.warp_m}x{p.warp_n} warps ({p.warp_n} along N)")
    return WarpPolicyConflictError(
        f"{'; '.join(parts)}. {'It is' if len(suspects) == 1 else 'They are'} chained with another gemm (through a "
        f"register operand or row vectors, as in attention), so each row must stay in one warp's threads in every "
        f"gemm of the chain. Use warp_policy=\"full_row\" on {'it' if len(suspects) == 1 else 'them'} (or drop "
        f"the keyword: chained gemms default to full_row); layout inference succeeds that way. The conflict it "
        f"hit: {err}")


def _func_target(func):
    attrs = func.attrs
    return attrs["target"] if attrs is not None and "target" in attrs else None
