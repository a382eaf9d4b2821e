"""``run.py --anchor`` and ``run.py --numeric``: checks on the lowered code rather than the layouts.

--anchor lowers each variant that declares ``VECTOR_ANCHOR`` (io-aware unless --model says otherwise)
and compares the widest vector lanes per global buffer in TVM's device code with the anchor: the io
model's belief about vector width against what the vectorizer emits.
--numeric lowers every variant, runs it on CPU with threads serialised and compares with the case's
numpy ``REFERENCE`` (or the sequential semantics of the unlowered tile program).
"""
from __future__ import annotations

import time


COST_MODEL_NAMES = ("register-count", "io-aware")


def anchor_table(module, variant: str, model: str) -> dict:
    """{global buffer: lanes} a case pins for ``variant`` under ``model``. VECTOR_ANCHOR entries are either
    per model (``{"io-aware": {...}, "register-count": {...}}``) or one table for the io-aware model."""
    entry = (getattr(module, "VECTOR_ANCHOR", None) or {}).get(variant) or {}
    if any(k in entry for k in COST_MODEL_NAMES):
        return dict(entry.get(model) or {})
    return dict(entry) if model == "io-aware" else {}


def scored_lanes(func, model: str) -> dict:
    """{global buffer: vector width the io-aware statement scorer assumes} for the layouts ``model`` chose."""
    from tilelayout.passes.inference.cost_models.io_aware import component_statements, score_statement
    from tilelayout.passes.inference.layout_inference import infer_layouts
    result = infer_layouts(func, cost_model=model)
    loops = {i: d.layout for i, d in result.op_loops.items()}
    out: dict = {}
    for st in component_statements(result.graph.ops, result.buffers, loops, result.graph):
        cost = score_statement(st, result.target)
        for acc, score in zip(st.accesses, cost.scores):
            out.setdefault(acc.name, set()).add(score.vector)
    return {name: min(widths) for name, widths in out.items()}


def anchors(modules: dict, case_filter: str | None, models) -> tuple:
    """(lines, anchors compared, anchors matching): per model, the emitted vector lanes of every anchored
    global buffer against the case's table, and the width the io-aware scorer assumed against the emitted
    one (the model must score what the vectorizer emits)."""
    from maint.lanes import lowered_lanes
    models = [models] if isinstance(models, str) else list(models)
    lines, total, same = [], 0, 0
    for case, module in modules.items():
        for variant in sorted(getattr(module, "VECTOR_ANCHOR", None) or {}):
            if case_filter and case_filter not in f"{case}/{variant}":
                continue
            for model in models:
                expected = anchor_table(module, variant, model)
                if not expected:
                    continue
                try:
                    got = lowered_lanes(module.VARIANTS[variant](), cost_model=model)
                    scored = scored_lanes(module.VARIANTS[variant](), model)
                except Exception as err:  # noqa: BLE001 -- a lowering failure is a drift, reported
                    got, scored, failure = {}, {}, f"{type(err).__name__}: {str(err).splitlines()[0]}"
                else:
                    failure = None
                for buf, lanes in sorted(expected.items()):
                    total += 1
                    have, model_width = got.get(buf), scored.get(buf)
                    ok = have == lanes and (model_width is None or model_width == have)
                    same += ok
                    verdict = "match" if ok else "DRIFT"
                    extra = f" ({failure})" if failure else ""
                    scored_text = "" if model_width is None else f", scored {model_width}"
                    lines.append(f"{case}/{variant}/{model}/{buf}: anchor {lanes} lanes, emitted {have}{scored_text} "
                                 f"-> {verdict}{extra}")
    return lines, total, same


def numeric(modules: dict, case_filter: str | None, models: list) -> tuple:
    """(lines, checks run, checks passing)."""
    from tilelayout.passes.lowering.pipeline import check_case
    lines, total, passed = [], 0, 0
    for case, module in modules.items():
        for variant in module.VARIANTS:
            if case_filter and case_filter not in f"{case}/{variant}":
                continue
            for model in models:
                total += 1
                start = time.perf_counter()
                try:
                    res = check_case(module, variant, cost_model=model)
                    ok, text = bool(res.ok), res.message
                    err = max(res.max_error.values(), default=0.0)
                    detail = f"max error {err:.3g}, lower+build {res.times.get('lower_build_s', 0) * 1e3:.0f} ms, " \
                             f"warm run {res.times.get('warm_run_s', 0) * 1e3:.2f} ms"
                except Exception as exc:  # noqa: BLE001 -- report, keep going
                    ok, text, detail = False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}", ""
                passed += ok
                took = time.perf_counter() - start
                status = "ok" if ok else f"FAIL: {text}"
                lines.append(f"{case}/{variant}/{model}: {status} ({detail}; {took:.2f} s)")
    return lines, total, passed
