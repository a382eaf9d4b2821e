"""The ``tilelayout`` command: inspect, picture, lower and check any kernel from the shell.

    tilelayout show    KERNEL   every buffer and loop layout, io bandwidth per global access, resources, and
                                the safe-memory guards of global accesses not provably in bounds
    tilelayout explain KERNEL   the free-level attempts (identical ones collapsed), the tie-break rule, and
                                the safe-memory guards
    tilelayout plot    KERNEL   pictures of every fragment, shared tile (and, with --loops, loop layout)
    tilelayout cuda    KERNEL   the CUDA source of the lowered kernel
    tilelayout lower   KERNEL   the lowered TIR
    tilelayout check   KERNEL   lower, run on the CPU, compare with the program's semantics (or --reference)

KERNEL is ``path/to/file.py:name`` (a PrimFunc or a zero-argument builder), ``file.py`` with one PrimFunc,
or a file of printed TVMScript (``func.script()`` / ``mod.script()`` output). Exit status: 0 success, 1 a
check found a mismatch, 2 a usage error or a kernel tilelayout cannot handle (the message says why).
Progress goes to stderr for every step that takes longer than a second; results go to stdout.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path

from .errors import TileLayoutError, TileLayoutResourceWarning

__all__ = ["main", "main_entry", "build_parser", "parse_target", "Progress"]

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2
_SM = re.compile(r"^sm_\d+[a-z]?$")


class UsageError(Exception):
    """A bad command-line argument: exit status 2."""


def parse_target(text: str | None):
    """``--target`` value -> what ``tl.infer_layouts`` accepts: ``sm_80`` (CUDA of that arch), a JSON dict,
    or any string TVM accepts (``cuda``, ``nvidia/nvidia-h100``); None keeps the default (CUDA sm_90a)."""
    if text is None:
        return None
    text = text.strip()
    if _SM.match(text):
        return {"kind": "cuda", "arch": text}
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise UsageError(f"--target: not valid JSON ({err})") from None
        if not isinstance(value, dict):
            raise UsageError("--target: a JSON target must be an object such as {\"kind\": \"cuda\", \"arch\": \"sm_80\"}")
        return value
    return text


# --------------------------------------------------------------------------- progress

class Progress:
    """Prints ``tilelayout: <step>...`` to stderr once a step has run for ``delay`` seconds, and its time
    when it ends; quick steps stay silent."""

    def __init__(self, stream=None, delay: float = 1.0, enabled: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.enabled = enabled

    @contextmanager
    def step(self, what: str):
        shown = threading.Event()
        lock = threading.Lock()

        def announce():
            with lock:
                if not done:
                    self.stream.write(f"tilelayout: {what}...\n")
                    self.stream.flush()
                    shown.set()

        done = False
        timer = threading.Timer(self.delay, announce) if self.enabled else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        start = time.perf_counter()
        try:
            yield
        finally:
            with lock:
                done = True
            if timer is not None:
                timer.cancel()
            if shown.is_set():
                self.stream.write(f"tilelayout: {what} took {time.perf_counter() - start:.1f} s\n")
                self.stream.flush()


# --------------------------------------------------------------------------- the subcommands

def _load(args, progress: Progress):
    from .kernel_file import load_kernel
    with progress.step(f"loading {args.kernel}"):
        return load_kernel(args.kernel)


def _infer(args, func, progress: Progress):
    from .passes import infer_layouts
    with progress.step("inferring layouts"):
        return infer_layouts(func, parse_target(args.target), args.cost_model)


def cmd_show(args, out, progress) -> int:
    from . import report
    result = _infer(args, _load(args, progress), progress)
    with progress.step("scoring io"):
        payload = report.show_dict(result) if args.json else report.show_lines(result)
    with progress.step("lowering to find the safe-memory guards"):
        if args.json:
            _emit_json(out, {**payload, "safe_memory": report.safe_memory_dict(result)}, args)
        else:
            print("\n".join(payload + report.safe_memory_lines(result)), file=out)
    return EXIT_OK


def cmd_explain(args, out, progress) -> int:
    from . import report
    result = _infer(args, _load(args, progress), progress)
    with progress.step("lowering to find the safe-memory guards"):
        if args.json:
            _emit_json(out, {**report.explain_dict(result), "safe_memory": report.safe_memory_dict(result)}, args)
        else:
            lines = report.explain_lines(result, layouts=not args.brief) + report.safe_memory_lines(result)
            print("\n".join(lines), file=out)
    return EXIT_OK


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "layout"


def cmd_plot(args, out, progress) -> int:
    from .fragment import Fragment
    from .plot import plot_layout
    func = _load(args, progress)
    result = _infer(args, func, progress)
    infos = {b.name: b for b in result.graph.buffers} if result.graph is not None else {}
    chosen = sorted(result.buffers)
    if args.buffer:
        unknown = sorted(set(args.buffer) - set(chosen))
        if unknown:
            raise UsageError(f"no inferred layout for {', '.join(unknown)} (buffers with layouts: {', '.join(chosen)})")
        chosen = [b for b in chosen if b in args.buffer]
    items = []
    for name in chosen:
        layout = result.buffers[name]
        info = infos.get(name)
        if not isinstance(layout, Fragment) and (info is None or not info.is_shared):
            continue                                 # global buffers: no layout of ours worth drawing
        items.append((f"buffer_{name}", layout, info.dtype if info is not None else None))
    if args.loops:
        items += [(f"loop_{key}", layout, None) for key, layout in sorted(result.loops.items())]
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, layout, dtype in items:
        path = outdir / f"{_safe_name(stem)}.{args.format}"
        with progress.step(f"drawing {stem}"):
            paths = plot_layout(layout, path, dtype=dtype or "float16", max_rows=args.max_rows,
                                max_cols=args.max_cols, detail=True if args.detail else None)
        written += [{"layout": stem, "path": str(p)} for p in paths]
    if args.json:
        _emit_json(out, {"images": written}, args)
    else:
        for w in written:
            print(f"{w['layout']}: {w['path']}", file=out)
        if not written:
            print("no fragment or shared layouts to draw", file=out)
    return EXIT_OK


def cmd_cuda(args, out, progress) -> int:
    from .passes import cuda_source
    func = _load(args, progress)
    with progress.step("lowering and generating CUDA"):
        source = cuda_source(func, parse_target(args.target), args.cost_model)
    if args.json:
        _emit_json(out, {"cuda": source}, args)
    else:
        out.write(source if source.endswith("\n") else source + "\n")
    return EXIT_OK


def cmd_lower(args, out, progress) -> int:
    from .passes import lower
    func = _load(args, progress)
    with progress.step("lowering"):
        mod = lower(func, parse_target(args.target), args.cost_model)
    text = mod.script()
    if args.json:
        _emit_json(out, {"tir": text}, args)
    else:
        out.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def _tolerance(text: str | None):
    if text is None:
        return None
    try:
        rtol, atol = (float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--tolerance needs RTOL,ATOL (two numbers), got {text!r}") from None
    return rtol, atol


def cmd_check(args, out, progress) -> int:
    from .passes import check_numeric
    func = _load(args, progress)
    reference = None
    if args.reference:
        from .kernel_file import load_callable
        reference = _guarded_reference(load_callable(args.reference), args.reference)
    with progress.step("lowering, building for the CPU and running"):
        res = check_numeric(func, reference, parse_target(args.target), args.cost_model, args.seed,
                            _tolerance(args.tolerance), race_check=not args.no_race_check)
    against = f"numpy reference {args.reference}" if reference else "the numpy interpreter of the program"
    if args.json:
        _emit_json(out, {"ok": res.ok, "message": res.message, "against": against, "exact": res.exact,
                         "max_error": res.max_error, "times": res.times,
                         "races": [r.describe() for r in res.races]}, args)
    else:
        verdict = "ok" if res.ok else "FAILED"
        print(f"{verdict}: {res.message} against {against} (seed {args.seed})", file=out)
        for name, err in sorted(res.max_error.items()):
            print(f"  {name}: max abs error {err:.3g}", file=out)
        for race in res.races[1:4]:
            print(f"  also: {race.describe()}", file=out)
    return EXIT_OK if res.ok else EXIT_CHECK_FAILED


def _guarded_reference(fn, spec: str):
    """``fn`` whose exceptions and ``sys.exit`` become a ``ReferenceFunctionError`` naming ``spec``: a failing
    reference is the user's error (exit status 2), neither a mismatch nor a crash of tilelayout."""
    from .errors import ReferenceFunctionError
    from .kernel_file import describe_error

    def reference(inputs):
        try:
            return fn(inputs)
        except TileLayoutError:
            raise
        except (Exception, SystemExit) as err:  # noqa: BLE001 -- user code: reported with its message
            raise ReferenceFunctionError(f"--reference {spec} failed: {describe_error(err)}") from None

    reference.__qualname__ = getattr(fn, "__qualname__", spec)
    return reference


def _emit_json(out, payload: dict, args) -> None:
    payload = dict(payload)
    payload.setdefault("kernel", args.kernel)
    payload["warnings"] = list(getattr(args, "_warnings", []))
    json.dump(payload, out, indent=2, sort_keys=True, default=str)
    out.write("\n")


# --------------------------------------------------------------------------- parser and entry point

COMMANDS = {"show": (cmd_show, "every buffer and loop layout, io bandwidth per global access, resource totals"),
            "explain": (cmd_explain, "the free-level attempts: root, mem, regs, chosen or why rejected"),
            "plot": (cmd_plot, "pictures of every fragment and shared layout (matplotlib)"),
            "cuda": (cmd_cuda, "CUDA source of the lowered kernel"),
            "lower": (cmd_lower, "the lowered TIR (an IRModule ready for tvm.compile)"),
            "check": (cmd_check, "lower, run on the CPU and compare with the program's semantics or a reference")}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tilelayout", description="Inspect, picture, lower and check the layouts "
                                                                 "of any TIRx kernel.",
                                 epilog="KERNEL: path/to/file.py:name (a PrimFunc or zero-argument builder), "
                                        "file.py with one PrimFunc, or a file of printed TVMScript. "
                                        "Exit status: 0 ok, 1 check failed, 2 usage or kernel error.")
    from . import __version__
    ap.add_argument("--version", action="version", version=f"tilelayout {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("kernel", metavar="KERNEL", help="path/to/file.py:name or a printed TVMScript file")
        p.add_argument("--target", metavar="T", help="sm_80, a TVM target string (nvidia/nvidia-h100) or JSON "
                                                       "dict; default CUDA sm_90a")
        p.add_argument("--cost-model", metavar="NAME", help="register-count (default) or io-aware, or any "
                                                             "registered model")
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        p.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
        if name == "explain":
            p.add_argument("--brief", action="store_true", help="costs and verdicts only, no layouts")
        if name == "plot":
            p.add_argument("--out", default="tilelayout-plots", metavar="DIR", help="directory for the images "
                                                                                    "(default tilelayout-plots)")
            p.add_argument("--format", default="png", choices=("png", "svg", "pdf"), help="image format")
            p.add_argument("--buffer", action="append", metavar="NAME", help="only this buffer (repeatable)")
            p.add_argument("--loops", action="store_true", help="also draw every parallel loop's layout")
            p.add_argument("--detail", action="store_true", help="label every cell, paging large grids (default: "
                           "grids over 2048 cells are drawn as one overview page of labelled tiles)")
            p.add_argument("--max-rows", type=int, default=64, help="rows per page with --detail")
            p.add_argument("--max-cols", type=int, default=64, help="columns per page with --detail")
        if name == "check":
            p.add_argument("--reference", metavar="FILE.py:FN", help="numpy reference: FN(inputs: dict of "
                           "name -> array) returns {name: expected final array} for the buffers it writes")
            p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
            p.add_argument("--tolerance", metavar="RTOL,ATOL", help="compare within tolerance instead of the "
                                                                    "default (exact unless float reductions)")
            p.add_argument("--no-race-check", action="store_true", help="run the kernel without the race check "
                           "(docs/race-check.md): values only")
    return ap


def main(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    """Run the command; returns the exit status (0 ok, 1 check failed, 2 usage or kernel error)."""
    stdout = stdout if stdout is not None else sys.stdout
    stderr = stderr if stderr is not None else sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as err:
        return EXIT_OK if err.code in (0, None) else EXIT_USAGE
    if args.command is None:
        parser.print_help(stderr)
        return EXIT_USAGE
    progress = Progress(stderr, enabled=not args.quiet)
    handler = COMMANDS[args.command][0]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TileLayoutResourceWarning)
            args._warnings = _WarningList(caught)
            status = handler(args, stdout, progress)
        for w in _resource_warnings(caught):
            print(f"warning: {w}", file=stderr)
        for w in caught:                         # any other warning goes out as Python would print it
            if not issubclass(w.category, TileLayoutResourceWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return status
    except (UsageError, TileLayoutError, ValueError) as err:
        print(f"error: {_clean(err)}", file=stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=stderr)
        return EXIT_USAGE
    except SystemExit as err:            # user code run by the command exited: never a silent 0 or a "mismatch"
        print(f"error: code run by `tilelayout {args.command}` called sys.exit({err.code!r}); kernel files, "
              f"builders and references must return, not exit", file=stderr)
        return EXIT_USAGE
    except Exception:  # noqa: BLE001 -- a bug in tilelayout: say so, with the traceback to report
        print("internal error in tilelayout (please report it with this traceback):", file=stderr)
        traceback.print_exc(file=stderr)
        return EXIT_USAGE


class _WarningList:
    """The resource warnings recorded so far, read when JSON output is written."""

    def __init__(self, caught: list):
        self._caught = caught

    def __iter__(self):
        return iter(_resource_warnings(self._caught))


def _resource_warnings(caught) -> list[str]:
    seen, out = set(), []
    for w in caught:
        if issubclass(w.category, TileLayoutResourceWarning):
            text = str(w.message)
            if text not in seen:
                seen.add(text)
                out.append(text)
    return out


def _clean(err: BaseException) -> str:
    text = str(err).strip()
    return text if text else type(err).__name__


def main_entry() -> None:
    """Console-script entry point: ``sys.exit(main())``."""
    sys.exit(main())


if __name__ == "__main__":
    main_entry()
