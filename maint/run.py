#!/usr/bin/env python3
"""Golden regression runner: infer every case's layouts and compare them with ``expected/``.

    python maint/run.py                    check every case under every registered cost model
    python maint/run.py --case broadcast   only cases (or case/variant) containing the substring
    python maint/run.py --show             also print each inferred layout
    python maint/run.py --record           rewrite expected/ from current behaviour (checks still enforced)
    python maint/run.py --model io-aware   one cost model only
    python maint/run.py -j 2               variants in parallel processes
    python maint/run.py --review [--base REF] [--html PATH] [--out DIR] [--force]   report snapshots that differ
                                           from git REF (never replaces a file it did not write unless --force)

Exit status: 0 everything matches, 1 a mismatch / failed check / failed inference, 2 usage or
internal error. A recording never blesses a violated ``check``: such pairs keep their old entry.
"""
from __future__ import annotations

import argparse
import gc
import multiprocessing
import sys
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from maint import snapshot  # noqa: E402

# the runner reports conversions through --explain; their shared-memory warning would repeat on every case run
warnings.filterwarnings("ignore", message="layout conversion through shared memory")

#: every cost model a snapshot may hold, in the order they are run and printed
COST_MODELS = ("register-count", "io-aware")


from maint.case_loader import (_LOADED, UsageError, discover, light_caller_stacks, load_case,  # noqa: E402,F401
                               share_expression_code, share_source_parses)  # (the runner's case API)


# --------------------------------------------------------------------------- running one variant

@dataclass
class Outcome:
    """What one case variant produced under each model."""
    case: str
    variant: str
    snapshots: dict = field(default_factory=dict)       # model -> snapshot dict
    errors: dict = field(default_factory=dict)          # model -> inference error text
    check_failures: dict = field(default_factory=dict)  # model -> check failure text
    bandwidth: dict = field(default_factory=dict)       # model -> --show lines on chosen io statements
    warnings: dict = field(default_factory=dict)        # model -> resource warning messages
    seconds: float = 0.0


def _error_text(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"SystemExit({err.code!r}): the case called sys.exit / exit()"
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def run_variant(cases_dir: str, case: str, variant: str, models: tuple, show: bool = False) -> Outcome:
    """Infer ``case/variant`` under each model and run its ``check``; never raises for case failures."""
    import tilelayout as tl
    module = load_case(Path(cases_dir), case)
    out = Outcome(case, variant)
    start = time.perf_counter()
    func = None
    for model in models:
        try:
            func = func if func is not None else module.VARIANTS[variant]()   # IR is immutable: share it
            with warnings.catch_warnings(record=True) as caught:   # resource warnings: listed by --show
                warnings.simplefilter("always", tl.TileLayoutResourceWarning)
                result = tl.infer_layouts(func, target=None, cost_model=model)
            out.warnings[model] = [str(w.message) for w in caught
                                   if issubclass(w.category, tl.TileLayoutResourceWarning)]
            snap = snapshot.result_to_snapshot(result)
        except (Exception, SystemExit) as err:  # noqa: BLE001 -- a failing case is reported, not fatal
            out.errors[model] = _error_text(err)
            continue
        out.snapshots[model] = snap
        if show:
            from maint.explain import bandwidth_lines
            out.bandwidth[model] = bandwidth_lines(result)
        check = getattr(module, "check", None)
        if check is not None:
            try:
                check(variant, model, snap)
            except (Exception, SystemExit) as err:  # noqa: BLE001 -- assertion, crash or exit in the check alike
                out.check_failures[model] = _error_text(err)
    out.seconds = time.perf_counter() - start
    return out


def _run_task(args: tuple) -> Outcome:
    try:
        return run_variant(*args)
    except UsageError:
        raise
    except Exception:  # noqa: BLE001 -- carry the traceback text across the process boundary
        raise RuntimeError(traceback.format_exc()) from None


def run_all(tasks: list[tuple], jobs: int, progress) -> list[Outcome]:
    """Run tasks serially or in ``jobs`` processes; results in task order."""
    results: dict[int, Outcome] = {}
    if jobs <= 1 or len(tasks) <= 1:
        for k, task in enumerate(tasks):
            progress(k, len(tasks), f"{task[1]}/{task[2]}")
            results[k] = _run_task(task)
    else:
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            futures = {pool.submit(_run_task, task): k for k, task in enumerate(tasks)}
            for done, future in enumerate(as_completed(futures)):
                k = futures[future]
                results[k] = future.result()
                progress(done + 1, len(tasks), f"{tasks[k][1]}/{tasks[k][2]}")
    progress(len(tasks), len(tasks), None)
    return [results[k] for k in range(len(tasks))]


# --------------------------------------------------------------------------- models and progress

def available_models() -> list[str]:
    """Registered cost models, in ``COST_MODELS`` order (register-count alone if the registry is silent)."""
    try:
        from tilelayout.passes.inference import cost_models
        names = set(cost_models.available_cost_models())
    except (ImportError, AttributeError):
        return ["register-count"]
    return [m for m in COST_MODELS if m in names]


class Progress:
    """``[k/N] case/variant`` on a terminal's stderr, nothing elsewhere."""

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.enabled = hasattr(stream, "isatty") and stream.isatty()

    def __call__(self, done: int, total: int, label: str | None) -> None:
        if not self.enabled:
            return
        line = f"[{done}/{total}] {label}" if label else ""
        self.stream.write("\r\033[K" + line)
        self.stream.flush()


# --------------------------------------------------------------------------- comparing and recording

@dataclass
class Report:
    lines: list = field(default_factory=list)
    pairs: int = 0
    matching: int = 0
    failures: int = 0        # problems beyond pair mismatches (stale variants)
    changed_files: list = field(default_factory=list)


def _entry_verdicts(expected: dict | None, got: dict, prefix: str) -> list[str]:
    """Field diffs of one model's snapshot, each changed layout followed by its mapping verdict."""
    lines = []
    old_entries = {(s, n): l for s, n, l in snapshot.layout_entries(expected)}
    new_entries = {(s, n): l for s, n, l in snapshot.layout_entries(got)}
    for key in sorted(set(old_entries) | set(new_entries)):
        old, new = old_entries.get(key, snapshot.ABSENT), new_entries.get(key, snapshot.ABSENT)
        base = f"{prefix}/{key[0]}/{key[1]}"
        if old is snapshot.ABSENT or new is snapshot.ABSENT:
            lines.append(str(snapshot.FieldDiff(base, old, new)))
            continue
        fields = snapshot.diff(old, new, base)
        if fields:
            lines += [str(f) for f in fields]
            lines.append(f"{base}: {snapshot.compare_mapping(old, new)}")
    other = snapshot.diff({k: v for k, v in (expected or {}).items() if k not in snapshot.SECTIONS},
                          {k: v for k, v in got.items() if k not in snapshot.SECTIONS}, prefix)
    return lines + [str(f) for f in other]


def _inferred_pairs(case: str, outcomes: list[Outcome], models: list[str], report: Report, note: str):
    """Every (outcome, model, line prefix) run pair, counted in ``report``; a pair whose inference failed is
    reported (``note`` before the reason) and skipped, in check and record mode alike."""
    for out in outcomes:
        for model in models:
            report.pairs += 1
            prefix = f"{case}/{out.variant}/{model}"
            if model in out.errors:
                report.lines.append(f"{prefix}: {note}inference failed: {out.errors[model]}")
                continue
            yield out, model, prefix


def compare(case: str, module: ModuleType, outcomes: list[Outcome], expected: dict,
            models: list[str], report: Report) -> None:
    """Check mode: every run pair against its snapshot entry."""
    for out, model, prefix in _inferred_pairs(case, outcomes, models, report, ""):
        ok = True
        if model in out.check_failures:
            report.lines.append(f"{prefix}: check failed: {out.check_failures[model]}")
            ok = False
        want = expected.get(out.variant, {}).get(model)
        if want is None:
            report.lines.append(f"{prefix}: no snapshot in expected/{case}.json (run --record)")
            ok = False
        else:
            lines = _entry_verdicts(want, out.snapshots[model], prefix)
            report.lines += lines
            ok = ok and not lines
        report.matching += ok
    for stale in sorted(set(expected) - set(module.VARIANTS)):
        report.lines.append(f"{case}/{stale}: in expected/{case}.json but not in VARIANTS (run --record)")
        report.failures += 1


def record(case: str, module: ModuleType, outcomes: list[Outcome], expected: dict,
           models: list[str], path: Path, report: Report) -> None:
    """Record mode: rewrite the pairs whose inference and check passed; keep the rest as they were."""
    new = {v: dict(m) for v, m in expected.items() if v in module.VARIANTS}
    for out, model, prefix in _inferred_pairs(case, outcomes, models, report, "not recorded, "):
        if model in out.check_failures:
            report.lines.append(f"{prefix}: not recorded, check failed: {out.check_failures[model]}")
            continue
        report.matching += 1
        old = expected.get(out.variant, {}).get(model)
        got = out.snapshots[model]
        if old is None:
            report.lines.append(f"{prefix}: recorded (new)")
        else:
            report.lines += [f"recorded {line}" for line in _entry_verdicts(old, got, prefix)]
        new.setdefault(out.variant, {})[model] = got
    for stale in sorted(set(expected) - set(module.VARIANTS)):
        report.lines.append(f"{case}/{stale}: removed (no longer in VARIANTS)")
    if (new or path.exists()) and snapshot.save(path, new):
        report.changed_files.append(path)


def show(outcomes: list[Outcome], models: list[str]) -> list[str]:
    lines = []
    for out in outcomes:
        for model in models:
            for section, name, layout in snapshot.layout_entries(out.snapshots.get(model)):
                lines.append(f"{out.case}/{out.variant}/{model}/{section}/{name}: {snapshot.describe(layout)}")
            for line in out.bandwidth.get(model, []):
                lines.append(f"{out.case}/{out.variant}/{model}/io: {line}")
            for line in out.warnings.get(model, []):
                lines.append(f"{out.case}/{out.variant}/{model}/resource warning: {line}")
    return lines


# --------------------------------------------------------------------------- command line

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="maint/run.py", description=__doc__.split("\n")[0])
    ap.add_argument("--case", metavar="SUBSTR", help="only cases whose name (or case/variant) contains SUBSTR")
    ap.add_argument("--show", action="store_true", help="print every inferred layout")
    ap.add_argument("--record", action="store_true", help="rewrite expected/ (checks still enforced)")
    ap.add_argument("--model", metavar="NAME", help=f"one cost model: {', '.join(COST_MODELS)}")
    ap.add_argument("-j", "--jobs", type=int, default=1, metavar="N", help="parallel processes")
    ap.add_argument("--review", action="store_true", help="report snapshots that differ from --base")
    ap.add_argument("--base", default="HEAD", metavar="REF", help="git revision --review compares with")
    ap.add_argument("--html", metavar="PATH", help="with --review: also write an HTML report")
    ap.add_argument("--out", metavar="DIR", help="with --review: report directory (default review/)")
    ap.add_argument("--force", action="store_true",
                    help="with --review: replace REVIEW.md / --html / pictures even if --review did not write them")
    ap.add_argument("--cute", action="store_true",
                    help="score every golden fragment (load and store) with the CuTe model and the numpy oracle")
    ap.add_argument("--anchor", action="store_true",
                    help="lower each variant (both models unless --model) and compare vector lanes with VECTOR_ANCHOR "
                         "and with the width the io-aware scorer assumed")
    ap.add_argument("--numeric", action="store_true",
                    help="lower every variant, run it on CPU and compare with its numpy reference")
    ap.add_argument("--no-race-check", action="store_true",
                    help="with --numeric: run the kernels without the race check (docs/race-check.md)")
    ap.add_argument("--explain", metavar="CASE[/VARIANT]",
                    help="print every free-level attempt (layouts, cost, statements, verdict) of matching variants")
    ap.add_argument("--cases-dir", type=Path, default=ROOT / "cases", help=argparse.SUPPRESS)
    ap.add_argument("--expected-dir", type=Path, default=ROOT / "expected", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("-j needs a positive number of processes")
    if args.record and args.review:
        raise UsageError("--record and --review do not combine: record first, then review")
    if (args.html or args.out or args.force) and not args.review:
        raise UsageError("--html, --out and --force only apply to --review")
    return args


def select_models(requested: str | None) -> list[str]:
    available = available_models()
    if requested is None:
        return available
    if requested not in COST_MODELS:
        raise UsageError(f"unknown cost model {requested!r}; valid: {', '.join(COST_MODELS)}")
    if requested not in available:
        raise UsageError(f"cost model {requested!r} is not registered yet (available: {', '.join(available)})")
    return [requested]


def main(argv: list[str] | None = None, stdout=None) -> int:
    stdout = stdout or sys.stdout
    try:
        args = parse_args(argv)
    except SystemExit as err:       # argparse: --help exits 0, bad arguments 2
        return 2 if err.code not in (0, None) else 0
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        if args.review:
            from maint import review
            _settle_imports()
            return review.main(ROOT, args.expected_dir, args.base, args.html, args.out, stdout, force=args.force)
        with share_source_parses(), light_caller_stacks(), share_expression_code():
            return _check_or_record(args, stdout)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _check_or_record(args: argparse.Namespace, stdout) -> int:
    try:
        import tilelayout as tl
    except ImportError as err:
        raise UsageError(f"cannot import tilelayout: {err}") from None
    if not hasattr(tl, "infer_layouts"):
        raise UsageError("tilelayout.infer_layouts is missing from the installed package (pip install -e .)")
    models = select_models(args.model)
    cases_dir, expected_dir = args.cases_dir.resolve(), args.expected_dir.resolve()
    modules = {name: load_case(cases_dir, name) for name in discover(cases_dir)}
    _settle_imports()
    if args.explain:
        return _explain(args.explain, modules, models, stdout)
    if args.anchor:
        from maint.lowered_checks import anchors
        lines, total, same = anchors(modules, args.case, [args.model] if args.model else list(COST_MODELS))
        print("\n".join(lines + [f"{same}/{total} vector anchors match"]), file=stdout)
        return 0 if same == total else 1
    if args.numeric:
        from maint.lowered_checks import numeric
        lines, total, passed = numeric(modules, args.case, models, race_check=not args.no_race_check)
        print("\n".join(lines + [f"{passed}/{total} numeric checks pass"]), file=stdout)
        return 0 if passed == total else 1
    if args.cute:
        from maint.cute_parity import parity
        lines, total, same, refused, converted = parity(modules, expected_dir, args.case, models)
        if lines:
            print("\n".join(lines), file=stdout)
        rate = 100.0 * converted / total if total else 100.0
        print(f"{same}/{total} statements match, {refused} refused by both sides, {total - same - refused} "
              f"disagree; CuTe conversion hit rate {converted}/{total} ({rate:.0f}%)", file=stdout)
        return 0 if same + refused == total else 1
    tasks = [(str(cases_dir), case, variant, tuple(models), args.show)
             for case, module in modules.items() for variant in module.VARIANTS
             if args.case is None or args.case in f"{case}/{variant}"]
    if not tasks:
        raise UsageError(f"no case variant matches {args.case!r}")
    start = time.perf_counter()
    try:
        outcomes = run_all(tasks, args.jobs, Progress())
    except RuntimeError as err:
        print(f"internal error while running cases:\n{err}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - start
    by_case: dict[str, list[Outcome]] = {}
    for out in outcomes:
        by_case.setdefault(out.case, []).append(out)
    report = Report()
    for case, outs in by_case.items():
        path = expected_dir / f"{case}.json"
        try:
            expected = snapshot.load(path)
        except ValueError as err:
            raise UsageError(str(err)) from None
        if args.record:
            record(case, modules[case], outs, expected, models, path, report)
        else:
            compare(case, modules[case], outs, expected, models, report)
    if args.show:
        print("\n".join(show(outcomes, models)), file=stdout)
    if report.lines:
        print("\n".join(report.lines), file=stdout)
    skipped = [m for m in COST_MODELS if m not in models]
    note = f" ({', '.join(skipped)} not run)" if skipped else ""
    verb = "recorded" if args.record else "match"
    print(f"{report.matching}/{report.pairs} variant-model pairs {verb}{note} in {elapsed:.1f} s", file=stdout)
    if args.record:
        for path in report.changed_files:
            print(f"wrote {path.relative_to(expected_dir.parent) if expected_dir.parent in path.parents else path}",
                  file=stdout)
    return 0 if report.matching == report.pairs and not report.failures else 1


def _explain(pattern: str, modules: dict, models: list, stdout) -> int:
    import tilelayout as tl
    from maint.explain import explain_result
    hits = [(c, v) for c, m in modules.items() for v in m.VARIANTS if pattern in f"{c}/{v}"]
    if not hits:
        raise UsageError(f"no case variant matches {pattern!r}")
    for case, variant in hits:
        func = modules[case].VARIANTS[variant]()
        for model in models:
            print(f"== {case}/{variant}/{model}", file=stdout)
            try:
                result = tl.infer_layouts(func, cost_model=model)
            except Exception as err:  # noqa: BLE001 -- explain the failure instead of crashing
                print(f"  inference failed: {_error_text(err)}", file=stdout)
                continue
            print("\n".join(explain_result(result)), file=stdout)
    return 0


#: set when run as a command: the collector is paused from the start until the imports are done
_COLLECTOR_PAUSED_FOR_IMPORTS = False


def _settle_imports() -> None:
    """Resume the garbage collector paused for the imports, with what they built frozen.

    Importing TVM and the cases builds about 140,000 long-lived objects the collector tracks; collecting during that
    cost 0.11 s of a golden run that every worker waits for, and every full collection afterwards scanned
    them all again (0.41 s of collection in a one-process run, 0.14 s this way; measured with
    ``gc.callbacks``). Frozen objects are never scanned again, and forked workers inherit that. Only the
    command does this: a caller of ``main`` in its own process keeps its collector as it was."""
    global _COLLECTOR_PAUSED_FOR_IMPORTS
    if _COLLECTOR_PAUSED_FOR_IMPORTS:
        _COLLECTOR_PAUSED_FOR_IMPORTS = False
        gc.freeze()
        gc.enable()


def _exit_now(code: int) -> None:
    """Leave without the interpreter's teardown: freeing TVM's registries and every module's objects took
    0.2-0.3 s after a check run, a tenth of the whole run. Nothing is left to do by then: the worker pool is
    joined, every file written is closed, and the two streams are flushed here."""
    import os
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    gc.disable()
    _COLLECTOR_PAUSED_FOR_IMPORTS = True
    _exit_now(main())
