"""``run.py --explain`` and the bandwidth lines of ``run.py --show``: why inference chose what it chose.

For each free-level component, every root tried is listed with the layouts it produced, its cost
(mem, regs), the per-statement io scores (vector width, issue, bandwidth, segments) and whether it
won or why it failed. The same data is ``result.attempts``.
"""
from __future__ import annotations

import numpy as np

from maint import snapshot


def _layout_line(name: str, layout) -> str:
    return f"{name}: {snapshot.describe(layout.to_dict())}"


def _statement_line(cost) -> str:
    scores = "; ".join(f"V={s.vector} issue={s.issue} bw={s.bandwidth} segments={s.segments}" for s in cost.scores)
    note = f" [{cost.note}]" if cost.note else ""
    return f"{cost.statement}: {cost.cost} bytes ({scores or 'no io score'}){note}"


def explain_result(result) -> list:
    """Human-readable account of every free-level attempt of one inference result."""
    lines = [f"cost model {result.cost_model}"]
    by_component: dict = {}
    for att in result.attempts:
        by_component.setdefault(att.component, []).append(att)
    if not by_component:
        lines.append("  no free-level search was needed (strict and common levels decided everything)")
    for comp, attempts in sorted(by_component.items()):
        if comp < 0:
            lines.append(f"  layout conflict: {len(attempts)} split(s) tried (each a conversion, see below)")
            for att in attempts:
                if att.error is not None:
                    lines.append(f"    {att.root_description}: REJECTED: {att.error.splitlines()[0]}")
                    continue
                verdict = "CHOSEN" if att.chosen else "not chosen"
                lines.append(f"    {att.root_description}: mem={att.mem} regs={att.regs} {verdict}")
                for conv in att.conversions:
                    lines.append(f"      conversion {conv['dst']} <- {conv['src']}: {conv['description']}")
            continue
        lines.append(f"  component {comp}: {len(attempts)} root(s) tried")
        for att in attempts:
            if att.error is not None:
                lines.append(f"    root {att.root_description}: REJECTED: {att.error}")
                continue
            verdict = "CHOSEN" if att.chosen else "not chosen"
            over = f" ({att.note})" if getattr(att, "note", None) else ""
            lines.append(f"    root {att.root_description}: mem={att.mem} regs={att.regs} {verdict}{over}")
            for name, layout in att.layouts.items():
                lines.append(f"      {_layout_line(name, layout)}")
            for desc, layout in att.loops.items():
                lines.append(f"      loop of {_layout_line(desc, layout)}")
            for cost in att.details:
                if hasattr(cost, "statement"):
                    lines.append(f"      statement {_statement_line(cost)}")
    for note in getattr(result, "notes", ()):
        lines.append(f"  {note.splitlines()[0]}")
    return lines


def bandwidth_lines(result, target=None) -> list:
    """Per fragment<->global statement of the chosen layouts: io-model bandwidth vs the physical minimum
    (distinct 128-byte segments of the region it touches, times 128); 1.00 is perfectly coalesced."""
    from tilelayout.passes.inference.cost_models.io_aware import component_statements, score_statement
    from tilelayout.passes.inference.cost_models.statement_score import SEGMENT_BYTES
    graph = getattr(result, "graph", None)
    if graph is None:
        return []
    loops = {i: d.layout for i, d in result.op_loops.items()}
    lines = []
    for st in component_statements(graph.ops, result.buffers, loops, graph):
        cost = score_statement(st, result.target)
        for k, acc in enumerate(st.accesses):
            minimum = _minimum_bytes(st, acc, SEGMENT_BYTES)
            if k < len(cost.scores) and minimum:
                bw = cost.scores[k].bandwidth
                lines.append(f"{st.description} {acc.name} ({'store' if acc.is_store else 'load'}): bandwidth {bw} B "
                             f"vs minimum {minimum} B = {bw / minimum:.2f}")
            else:
                lines.append(f"{st.description} {acc.name}: not scored ({cost.note or 'unscorable'})")
    return lines


def _minimum_bytes(st, acc, segment_bytes: int) -> int:
    shape = [int(s) for s in st.frag.input_shape]
    grids = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    addr = acc.base + sum(g * d for g, d in zip(grids, acc.strides))
    seg = np.unique(addr.reshape(-1) * acc.elem_bytes // segment_bytes)
    return int(seg.size) * segment_bytes * (st.repeat or 1)
