"""Readable accounts of an inference result: every layout, the free-level attempts, io bandwidth, resources.

Shared by the ``tilelayout`` command (``show``, ``explain``) and the golden runner (``--show``,
``--explain``), so both say the same thing in the same words. Every function returns plain lines or
JSON-ready dicts; nothing here prints.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["TIE_BREAK", "FIGURES", "AttemptGroup", "attempt_groups", "describe_layout", "explain_lines", "explain_dict",
           "bandwidth_rows", "bandwidth_lines", "show_lines", "show_dict", "target_label", "swizzles", "gemm_plans",
           "pipeline_plans"]

#: how the free level picks among successful attempts (the rule ``layout_inference`` implements)
TIE_BREAK = ("the cheapest attempt wins: lowest mem first, then fewest register slots; on a tie the earliest root "
             "in program order wins")
#: what the figures of an attempt mean (``explain`` prints it under the tie-break)
FIGURES = ("slots: the cost model's register figure (register-count: the most elements per thread live at one "
           "program point, whatever their width; io-aware: every fragment's elements summed); regs: 32-bit "
           "registers per thread of every fragment laid out so far, summed, narrow elements packed; the plan's "
           "register peak below is the figure `tilelayout show`, the resource warnings and the register budget use")


def describe_layout(layout) -> str:
    """One line per layout (a ``Layout``/``Fragment`` or its ``to_dict`` form), as ``show`` prints it."""
    d = layout if isinstance(layout, dict) else layout.to_dict()
    head = f"{d['kind']} {d['input_shape']} -> {d.get('output_shape')}"
    index = ", ".join(d["forward_index"])
    if d["kind"] != "Fragment":
        return f"{head} | index: {index}"
    return (f"{head} | threads={d.get('threads')} rep={d.get('replicate')} range={d.get('thread_range')} "
            f"| thread: {d.get('forward_thread')} | index: {index}")


# --------------------------------------------------------------------------- free-level attempts

@dataclass
class AttemptGroup:
    """Attempts of one component with the same outcome (same layouts and cost, or the same failure)."""

    component: int
    roots: list                      # root descriptions, in the order they were tried
    mem: int | None
    regs: int | None
    chosen: bool
    error: str | None
    layouts: dict = field(default_factory=dict)
    loops: dict = field(default_factory=dict)
    details: tuple = ()
    note: str | None = None                          # e.g. over the register budget
    conversions: list = field(default_factory=list)  # layout conversions the attempt inserted
    registers: int | None = None                     # 32-bit registers per thread (as ``show`` counts them)

    @property
    def count(self) -> int:
        return len(self.roots)

    def to_dict(self) -> dict:
        """JSON-ready form (``tilelayout explain --json``)."""
        out = {"component": self.component, "roots": list(self.roots), "count": self.count, "mem": self.mem,
               "regs": self.regs, "registers": self.registers, "chosen": self.chosen, "error": self.error,
               "layouts": {k: v.to_dict() for k, v in self.layouts.items()},
               "loops": {k: v.to_dict() for k, v in self.loops.items()}}
        out["statements"] = [_statement_dict(c) for c in self.details if hasattr(c, "statement")]
        out["note"] = self.note
        out["conversions"] = [_conversion_dict(c) for c in self.conversions]
        return out


def _conversion_dict(conv: dict) -> dict:
    cost = conv.get("cost")
    return {"src": conv.get("src"), "dst": conv.get("dst"), "op": conv.get("op"), "kind": conv.get("kind"),
            "cost": cost.to_dict() if cost is not None else None,
            "hand_staged_mem": conv["hand_staged"].mem if "hand_staged" in conv else None}


def _outcome_key(att) -> tuple:
    if att.error is not None:
        return ("error", att.error)
    layouts = tuple((k, v.key) for k, v in sorted(att.layouts.items()))
    loops = tuple((k, v.key) for k, v in sorted(att.loops.items()))
    return ("ok", att.mem, att.regs, layouts, loops)


def attempt_groups(result) -> list[AttemptGroup]:
    """``result.attempts`` with identical outcomes collapsed, per component, in first-tried order.

    The group holding the chosen attempt is marked chosen; its first root is the one that won."""
    groups: list[AttemptGroup] = []
    index: dict = {}
    for att in result.attempts:
        key = (att.component, _outcome_key(att))
        group = index.get(key)
        if group is None:
            group = AttemptGroup(att.component, [], att.mem, att.regs, False, att.error, dict(att.layouts),
                                 dict(att.loops), tuple(att.details), getattr(att, "note", None),
                                 list(getattr(att, "conversions", ())), getattr(att, "registers", None))
            index[key] = group
            groups.append(group)
        group.roots.append(att.root_description)
        group.chosen = group.chosen or att.chosen
    return groups


def _statement_line(cost) -> str:
    scores = "; ".join(f"V={s.vector} issue={s.issue} bw={s.bandwidth} segments={s.segments}" for s in cost.scores)
    note = f" [{cost.note}]" if cost.note else ""
    return f"{cost.statement}: {cost.cost} bytes ({scores or 'no io score'}){note}"


def _statement_dict(cost) -> dict:
    return {"statement": cost.statement, "cost": cost.cost, "note": cost.note,
            "scores": [{"vector": s.vector, "issue": s.issue, "bandwidth": s.bandwidth, "segments": s.segments}
                       for s in cost.scores]}


def _head(group: AttemptGroup) -> list[str]:
    """The verdict line of a group, and for collapsed groups one line per root (in the order tried)."""
    if group.error is not None:
        verdict = f"REJECTED: {group.error}"
    else:
        regs = f" regs={group.registers}" if group.registers is not None else ""
        verdict = f"mem={group.mem} slots={group.regs}{regs} {'CHOSEN' if group.chosen else 'not chosen'}"
    if group.count == 1:
        return [f"    root {group.roots[0]}: {verdict}"]
    tie = " (the first root listed won)" if group.chosen else ""
    return [f"    {group.count} identical attempts: {verdict}{tie}"] + [f"      root {r}" for r in group.roots]


def explain_lines(result, layouts: bool = True) -> list[str]:
    """Every free-level component: each distinct outcome with its roots, cost (mem, regs) and verdict.

    ``layouts``: also list the layouts and per-statement io scores of each successful outcome."""
    lines = [f"cost model {result.cost_model}; {TIE_BREAK}", f"  ({FIGURES})"]
    groups = attempt_groups(result)
    if not groups:
        lines.append("  no free-level search was needed (strict and common levels decided everything)")
    by_component: dict = {}
    for g in groups:
        by_component.setdefault(g.component, []).append(g)
    for comp, comp_groups in sorted(by_component.items()):
        tried = sum(g.count for g in comp_groups)
        if comp < 0:        # conflict resolution: each "root" is a split of a fragment with a conversion
            lines.append(f"  layout conflict: {tried} split(s) tried, each inserting a layout conversion")
        else:
            lines.append(f"  component {comp}: {tried} root(s) tried, {len(comp_groups)} distinct outcome(s)")
        for g in comp_groups:
            lines += _head(g)
            if g.error is None:
                for conv in g.conversions:
                    cost = conv.get("cost")
                    lines.append(f"      conversion {conv.get('op')}: "
                                 f"{cost.describe() if cost is not None else conv.get('kind')}")
            if g.error is not None or not layouts:
                continue
            for name, layout in g.layouts.items():
                lines.append(f"      {name}: {describe_layout(layout)}")
            for desc, layout in g.loops.items():
                lines.append(f"      loop of {desc}: {describe_layout(layout)}")
            for cost in g.details:
                if hasattr(cost, "statement"):
                    lines.append(f"      statement {_statement_line(cost)}")
    # how each pipelined loop loads its tiles (TMA or cp.async per copy, and why not TMA)
    lines += [f"  pipeline {p['loop']} ({p['mode']}): {p['note']}" for p in pipeline_plans(result)[0]]
    for note in getattr(result, "notes", ()):     # conflicts met and the conversions that resolved them
        lines.append(f"  {note}")
    # the gemm plans fixed the accumulators before any search: say which instruction each gemm got
    lines += [f"  gemm plan: {row['op']}: {row['summary']}" for row in gemm_plans(result)]
    peak = _register_peak(result)
    if peak is not None:
        from tilelayout.passes.inference.resources import MAX_REGISTERS_PER_THREAD
        lines.append(f"  {peak.line(MAX_REGISTERS_PER_THREAD)}")
    return lines


def _register_peak(result):
    """The plan's register peak: inference records it; a result read back from annotations recomputes it."""
    from tilelayout.passes.inference.resources import result_peak
    return getattr(result, "register_peak", None) or result_peak(result)


def explain_dict(result) -> dict:
    """JSON-ready form of ``explain_lines``."""
    return {"cost_model": result.cost_model, "tie_break": TIE_BREAK, "gemms": gemm_plans(result),
            "attempts": [g.to_dict() for g in attempt_groups(result)],
            "notes": list(getattr(result, "notes", ())),
            "pipelines": {p["loop"]: p for p in pipeline_plans(result)[0]},
            "register_peak": (lambda p: p.to_dict() if p is not None else None)(_register_peak(result)),
            "conversions": [_conversion_dict(c) for c in getattr(result, "conversions", ())]}


# --------------------------------------------------------------------------- io bandwidth

def bandwidth_rows(result) -> list[dict]:
    """Per fragment<->global access of the chosen layouts: the io model's bandwidth and the physical minimum
    (distinct 128-byte segments of the region touched, times 128 bytes); ratio 1.0 is perfectly coalesced."""
    from tilelayout.passes.inference.cost_models.io_aware import component_statements, score_statement
    from tilelayout.passes.hardware import SEGMENT_BYTES
    graph = getattr(result, "graph", None)
    if graph is None:
        return []
    loops = {i: d.layout for i, d in result.op_loops.items()}
    rows = []
    for st in component_statements(graph.ops, result.buffers, loops, graph):
        cost = score_statement(st, result.target)
        for k, acc in enumerate(st.accesses):
            row = {"statement": st.description, "buffer": acc.name, "access": "store" if acc.is_store else "load"}
            minimum = _minimum_bytes(st, acc, SEGMENT_BYTES)
            if k < len(cost.scores) and minimum:
                bw = cost.scores[k].bandwidth
                row.update(bandwidth=bw, minimum=minimum, ratio=round(bw / minimum, 4))
            else:
                row.update(note=cost.note or "unscorable")
            rows.append(row)
    return rows


def bandwidth_lines(result) -> list[str]:
    """``bandwidth_rows`` as text, one line per access."""
    out = []
    for r in bandwidth_rows(result):
        if "bandwidth" in r:
            out.append(f"{r['statement']} {r['buffer']} ({r['access']}): bandwidth {r['bandwidth']} B vs minimum "
                       f"{r['minimum']} B = {r['bandwidth'] / r['minimum']:.2f}")
        else:
            out.append(f"{r['statement']} {r['buffer']}: not scored ({r['note']})")
    return out


def _minimum_bytes(st, acc, segment_bytes: int) -> int:
    shape = [int(s) for s in st.frag.input_shape]
    grids = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    addr = acc.base + sum(g * d for g, d in zip(grids, acc.strides))
    seg = np.unique(np.asarray(addr).reshape(-1) * acc.elem_bytes // segment_bytes)
    return int(seg.size) * segment_bytes * (st.repeat or 1)


# --------------------------------------------------------------------------- everything at once

def target_label(target) -> str:
    """A short name of a TVM target: ``cuda sm_90``, ``llvm``."""
    if target is None:
        return "default"
    arch = target.attrs.get("arch") if hasattr(target, "attrs") else None
    kind = target.kind.name if hasattr(target, "kind") else str(target)
    return f"{kind} {arch}" if arch else kind


def swizzles(result) -> dict:
    """{shared buffer name: the bank swizzle its layout is (``SWIZZLE_128B``, ``NONE`` for row-major) or
    ``"other"``}: what inference chose, named."""
    from tilelayout.fragment import Fragment
    from tilelayout.swizzle import detect_swizzle_mode
    graph = getattr(result, "graph", None)
    out = {}
    for info in (graph.buffers if graph is not None else []):
        layout = result.buffers.get(info.name)
        if not info.is_shared or layout is None or isinstance(layout, Fragment):
            continue
        mode = detect_swizzle_mode(layout, info.dtype) if layout.input_dim >= 2 else None
        out[info.name] = mode.name if mode is not None else "other"
    return dict(sorted(out.items()))


def gemm_plans(result) -> list[dict]:
    """Every gemm's plan (instruction, instruction shape, warp partition, policy), in program order."""
    graph = getattr(result, "graph", None)
    rows = []
    for index, plan in sorted(getattr(result, "gemm_plans", {}).items()):
        op = graph.ops[index] if graph is not None and index < len(graph.ops) else None
        rows.append({"op": op.describe() if op is not None else f"op #{index}", "plan": plan.to_dict(),
                     "summary": plan.describe()})
    return rows


def pipeline_plans(result) -> tuple[list[dict], str | None]:
    """The software-pipelining decision of every ``num_stages`` loop (``pipeline_plan``, the pass that makes it
    for lowering), in program order, and why planning refused the kernel (None when it did not)."""
    from tilelayout.errors import TileLayoutError
    from tilelayout.passes.ir_utils import walk
    from tilelayout.passes.lowering.pipeline_plan import PIPELINE_KEY, plan_pipelines, read_plan
    from tvm import tirx
    func = getattr(result, "func", None)
    if func is None:
        return [], None
    try:
        planned = plan_pipelines(func, result.target)
    except TileLayoutError as err:
        return [], str(err)
    plans: list = []
    walk(planned.body, [(tirx.For, lambda f: plans.append(_plain_plan(read_plan(f)))
                         if f.annotations is not None and PIPELINE_KEY in f.annotations else None)])
    return plans, None


def _plain_plan(plan: dict) -> dict:
    """A pipeline plan with its TMA entries in JSON-ready form (region starts as text, numbers as ints)."""
    if "tma" in plan:
        plan = dict(plan, tma=[{k: ([str(x) for x in v] if k == "start" else [int(x) for x in v] if k == "box"
                                    else int(v) if k in ("swizzle", "panel", "panels", "rows", "bytes") else str(v))
                                for k, v in e.items()} for e in plan["tma"]])
    return plan


def _staged_buffers(plans: list[dict]) -> dict:
    """{shared buffer: stages} of the plans that multi-buffer (cp.async and TMA modes; synchronous keeps one
    copy)."""
    return {b: p["stages"] for p in plans if p["mode"] in ("cp.async", "tma") for b in p["buffers"]}


def show_lines(result) -> list[str]:
    """Every buffer and loop layout (with the swizzle of shared tiles), the gemm and pipeline plans, io
    bandwidth per global access, and the resource totals (multi-buffered tiles counted once per stage)."""
    from tilelayout.passes.inference.resources import resource_usage
    lines = [f"cost model {result.cost_model}, target {target_label(result.target)}"]
    swz = swizzles(result)
    for name, lay in sorted(result.buffers.items()):
        tag = f" (swizzle {swz[name]})" if name in swz else ""
        lines.append(f"buffer {name}{tag}: {describe_layout(lay)}")
    lines += [f"loop {key}: {describe_layout(lay)}" for key, lay in sorted(result.loops.items())]
    lines += [f"gemm plan: {row['op']}: {row['summary']}" for row in gemm_plans(result)]
    plans, refused = pipeline_plans(result)
    lines += [f"pipeline {p['loop']} ({p['mode']}): {p['note']}" for p in plans]
    if refused is not None:
        lines.append(f"pipeline: refused: {refused}")
    lines += [f"io: {line}" for line in bandwidth_lines(result)]
    lines += [f"resources: {line}" for line in resource_usage(result, _staged_buffers(plans)).lines()]
    return lines


def show_dict(result) -> dict:
    """JSON-ready form of ``show_lines`` (layouts in ``to_dict`` form)."""
    from tilelayout.passes.inference.resources import resource_usage
    plans, refused = pipeline_plans(result)
    return {"cost_model": result.cost_model, "target": target_label(result.target),
            "buffers": {n: l.to_dict() for n, l in sorted(result.buffers.items())},
            "swizzles": swizzles(result), "gemms": gemm_plans(result),
            "pipelines": {p["loop"]: p for p in plans}, "pipeline_error": refused,
            "loops": {k: l.to_dict() for k, l in sorted(result.loops.items())},
            "io": bandwidth_rows(result), "resources": resource_usage(result, _staged_buffers(plans)).to_dict()}


# --------------------------------------------------------------------------- safe global memory

def safe_memory_dict(result) -> dict:
    """The guards lowering inserts for global accesses it cannot prove in bounds (``bounds_guards``): whether
    safe memory is on, and each guard (buffer, access, dims, index, statement); ``note`` when tile-op lowering
    refused the kernel (inference alone does not know the guards)."""
    from tilelayout.errors import TileLayoutError
    from tilelayout.passes.lowering.pipeline import safe_memory_guards
    from tilelayout.passes.safe_memory import safe_memory_enabled
    if not safe_memory_enabled(result.func):
        return {"enabled": False, "guards": []}
    try:
        guards = safe_memory_guards(result.func, result.target)
    except TileLayoutError as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return {"enabled": True, "guards": [], "note": f"not known: lowering refused the kernel ({first})"}
    return {"enabled": True, "guards": guards}


def safe_memory_lines(result) -> list[str]:
    """``safe_memory_dict`` as text, one line per guard."""
    info = safe_memory_dict(result)
    if not info["enabled"]:
        return ["safe memory: off (function attribute tilelayout.safe_memory = False): no global access is guarded"]
    if "note" in info:
        return [f"safe memory: {info['note']}"]
    if not info["guards"]:
        return ["safe memory: every global access is provably in bounds (no guard)"]
    out = []
    for g in info["guards"]:
        dims = g["dims"]
        where = f"dimension {dims[0]}" if len(dims) == 1 else f"dimensions {', '.join(str(d) for d in dims)}"
        out.append(f"safe memory: {g['access']} {g['index']} guarded in {where} (statement `{g['statement']}`)")
    return out
