"""``run.py --cute``: score every golden fragment as a load and as a store with the CuTe scorer
(``maint/cute_model.py``, the code the io-aware model runs) and with the independent numpy oracle
(``maint/oracle.py``), and require identical (vector, issue, bandwidth, segments)."""
from __future__ import annotations

import re

from maint import snapshot


def _source_buffer(graph, name: str):
    """The program buffer behind a snapshot buffer: itself, or for a layout conversion's version of a fragment
    (``F_cv``, ``F_cv2``: ``conversion_plan._fresh_name``), which the unconverted program does not hold, the
    fragment it converts (same dtype and shape)."""
    base = name
    while True:
        try:
            return graph.buffer(base)
        except KeyError:
            stripped = re.sub(r"_cv\d*$", "", base)
            if stripped == base:
                raise
            base = stripped


def parity(modules: dict, expected_dir, case_filter: str | None, models: list) -> tuple:
    """(report lines, statements compared, statements matching, statements both sides refused,
    CuTe-convertible statements). Two refusals are not a match: they are counted apart."""
    from tilelayout import Fragment, layout_from_dict
    from tilelayout.passes.inference.frontend import build_op_graph
    from maint.cute_model import CuteScore, score_fragment
    from maint.oracle import OracleScore, score_statement_oracle
    lines, total, same, refused, converted = [], 0, 0, 0, 0
    for case, module in modules.items():
        snaps = snapshot.load(expected_dir / f"{case}.json") or {}
        enclosing = getattr(module, "CUTE_STATEMENTS", {})
        for variant, per_model in sorted(snaps.items()):
            if case_filter and case_filter not in f"{case}/{variant}":
                continue
            graph = build_op_graph(module.VARIANTS[variant]())
            for model in models:
                for name, d in sorted(per_model.get(model, {}).get("buffers", {}).items()):
                    frag = layout_from_dict(d)
                    if not isinstance(frag, Fragment):
                        continue
                    elem_bytes = max(1, _source_buffer(graph, name).bits // 8)
                    shape = enclosing.get(variant, {}).get(name, frag.input_shape)
                    for is_store in (False, True):
                        total += 1
                        cute = score_fragment(frag, list(shape), elem_bytes, is_store)
                        oracle = score_statement_oracle(frag, list(shape), elem_bytes, is_store)
                        a = cute.numbers if isinstance(cute, CuteScore) else None
                        b = (oracle.vector, oracle.issue, oracle.bandwidth, oracle.segments) \
                            if isinstance(oracle, OracleScore) else None
                        converted += a is not None
                        label = f"{case}/{variant}/{model}/{name}/{'store' if is_store else 'load'}"
                        if a is None and b is None:
                            refused += 1
                            lines.append(f"{label}: refused by both (cute: {cute}; oracle: {oracle})")
                        elif a == b:
                            same += 1
                        else:
                            lines.append(f"{label}: cute {a or cute} != oracle {b or oracle}")
    return lines, total, same, refused, converted
