"""``run.py --anchor`` and ``run.py --numeric``: checks on the lowered code rather than the layouts.

--anchor lowers each variant that declares ``VECTOR_ANCHOR`` (io-aware unless --model says otherwise)
and compares the widest vector lanes per global buffer in TVM's device code with the anchor: the io
model's belief about vector width against what the vectorizer emits.
--numeric lowers every variant, runs it on CPU with threads serialised and compares with the case's
numpy ``REFERENCE`` (or the numpy interpreter of the unlowered program, ``tilelayout.reference``), and
cross-checks the interpreter against the TVM-compiled sequential semantics and the ``REFERENCE``.
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
                except (Exception, SystemExit) as err:  # noqa: BLE001 -- a lowering failure is a drift, reported
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


def numeric(modules: dict, case_filter: str | None, models: list, race_check: bool = True) -> tuple:
    """(lines, checks run, checks passing). Per variant: the numpy interpreter (``tilelayout.reference``) is
    cross-checked against the TVM-compiled sequential semantics and against the case's hand-written numpy
    ``REFERENCE`` when it has one; then, per model, the lowered kernel is compared with the case's
    ``REFERENCE`` (or the interpreter when it has none), under the race check unless ``race_check`` is False."""
    lines, total, passed = [], 0, 0
    for case, module in modules.items():
        for variant in module.VARIANTS:
            if case_filter and case_filter not in f"{case}/{variant}":
                continue
            lines_v, total_v, passed_v = numeric_variant(module, case, variant, models, race_check)
            lines.extend(lines_v)
            total += total_v
            passed += passed_v
    return lines, total, passed


def numeric_variant(module, case: str, variant: str, models: list, race_check: bool = True) -> tuple:
    """``numeric`` for one variant of one case (lines, checks run, checks passing)."""
    pending = getattr(module, "NUMERIC_PENDING", {}) or {}
    lines, total, passed = [], 0, 0
    # a dynamic-shape variant runs at each of its EXTENTS (sizes that are and are not tile multiples)
    for extents in getattr(module, "EXTENTS", {}).get(variant) or [None]:
        label = variant if extents is None else \
            f"{variant}[{','.join(f'{k}={v}' for k, v in sorted(extents.items()))}]"
        lines_v, total_v, passed_v = _numeric_variant(module, case, variant, label, extents, models, pending,
                                                        race_check)
        lines.extend(lines_v)
        total += total_v
        passed += passed_v
    return lines, total, passed


def _numeric_variant(module, case: str, variant: str, label: str, extents, models: list, pending: dict,
                     race_check: bool = True) -> tuple:
    """(lines, checks run, checks passing) of one variant at one set of extents."""
    from tilelayout.passes.lowering.pipeline import check_numeric, compare_outputs, reference_outputs, \
        sequential_outputs
    lines, total, passed = [], 0, 0
    try:
        func = module.VARIANTS[variant]()
        oracle = reference_outputs(func, extents=extents)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 -- report, keep going
        return [f"{case}/{label}: FAIL: the numpy interpreter: {_short(exc)}"], 1 + len(models), 0
    hand = getattr(module, "REFERENCE", {}).get(variant)
    tolerance = getattr(module, "TOLERANCE", {}).get(variant)
    crosses = [("sequential semantics", lambda: sequential_outputs(func, extents=extents))]
    if hand is not None:
        crosses.append(("numpy REFERENCE", lambda: reference_outputs(func, hand, extents=extents)))
    for what, other in crosses:
        total += 1
        try:
            want = other()
            exact = tolerance is None and oracle.exact and want.exact
            problems, _ = compare_outputs(oracle, want, exact, tolerance)
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            problems = [_short(exc)]
        passed += not problems
        status = "ok" if not problems else f"FAIL: {'; '.join(problems)}"
        lines.append(f"{case}/{label}: interpreter vs {what}: {status}")
    expected = reference_outputs(func, hand, extents=extents) if hand is not None else oracle
    for model in models:
        total += 1
        start = time.perf_counter()
        try:
            res = check_numeric(func, cost_model=model, expected=expected, tolerance=tolerance, extents=extents,
                                race_check=race_check)
            ok, text = bool(res.ok), res.message
            err = max(res.max_error.values(), default=0.0)
            detail = f"max error {err:.3g}, lower+build {res.times.get('lower_build_s', 0) * 1e3:.0f} ms, " \
                     f"warm run {res.times.get('warm_run_s', 0) * 1e3:.2f} ms"
        except (Exception, SystemExit) as exc:  # noqa: BLE001 -- report, keep going
            ok, text, detail = False, _short(exc), ""
        passed += ok
        took = time.perf_counter() - start
        status = "ok" if ok else f"FAIL: {text}"
        against = "REFERENCE" if hand is not None else "interpreter"
        if variant in pending:
            # declared not yet able to pass (the case says why); a pass means the mark must go
            status = (f"PENDING ({pending[variant]}): {text}" if not ok else
                      "ok, but marked NUMERIC_PENDING: remove the mark")
        lines.append(f"{case}/{label}/{model}: lowered vs {against}: {status} ({detail}; {took:.2f} s)")
    return lines, total, passed


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
