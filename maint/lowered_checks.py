"""``run.py --anchor`` and ``run.py --numeric``: checks on the lowered code rather than the layouts.

--anchor lowers each variant that declares ``VECTOR_ANCHOR`` (io-aware unless --model says otherwise)
and compares the widest vector lanes per global buffer in TVM's device code with the anchor: the io
model's belief about vector width against what the vectorizer emits.
--numeric lowers every variant, runs it on CPU with threads serialised and compares with the case's
numpy ``REFERENCE`` (or the sequential semantics of the unlowered tile program).
"""
from __future__ import annotations

import time


def anchors(modules: dict, case_filter: str | None, model: str) -> tuple:
    """(lines, anchors compared, anchors matching)."""
    from maint.lanes import lowered_lanes
    lines, total, same = [], 0, 0
    for case, module in modules.items():
        for variant, expected in sorted((getattr(module, "VECTOR_ANCHOR", None) or {}).items()):
            if case_filter and case_filter not in f"{case}/{variant}":
                continue
            try:
                got = lowered_lanes(module.VARIANTS[variant](), cost_model=model)
            except Exception as err:  # noqa: BLE001 -- a lowering failure is a drift, reported
                got, failure = {}, f"{type(err).__name__}: {str(err).splitlines()[0]}"
            else:
                failure = None
            for buf, lanes in sorted(expected.items()):
                total += 1
                have = got.get(buf)
                ok = have == lanes
                same += ok
                verdict = "match" if ok else "DRIFT"
                extra = f" ({failure})" if failure else ""
                lines.append(f"{case}/{variant}/{model}/{buf}: anchor {lanes} lanes, emitted {have} -> {verdict}{extra}")
    return lines, total, same


def numeric(modules: dict, case_filter: str | None, models: list) -> tuple:
    """(lines, checks run, checks passing)."""
    from tilelayout.passes.lowering.pipeline import check_case
    lines, total, passed = [], 0, 0
    for case, module in modules.items():
        pending = getattr(module, "NUMERIC_PENDING", {}) or {}
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
                if variant in pending:
                    # declared not yet able to pass (the case says why); a pass means the mark must go
                    status = (f"PENDING ({pending[variant]}): {text}" if not ok else
                              "ok, but marked NUMERIC_PENDING: remove the mark")
                lines.append(f"{case}/{variant}/{model}: {status} ({detail}; {took:.2f} s)")
    return lines, total, passed
