"""Finding and importing golden cases (``cases/<name>.py``) and checking the case contract.

Shared by the runner and the tools beside it (lanes, gpu_check), so none of them imports the runner.
"""
from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["UsageError", "discover", "load_case", "share_source_parses"]


class UsageError(Exception):
    """Bad arguments or a broken case module: exit status 2."""


def discover(cases_dir: Path) -> list[str]:
    """Case names: the ``*.py`` files of ``cases_dir`` not starting with ``_``, sorted."""
    if not cases_dir.is_dir():
        raise UsageError(f"no case directory {cases_dir}")
    return sorted(p.stem for p in cases_dir.glob("*.py") if not p.name.startswith("_"))


_LOADED: dict[tuple[str, str], ModuleType] = {}


def load_case(cases_dir: Path, name: str) -> ModuleType:
    """Import ``cases_dir/name.py`` (once per process) and check it honours the case contract."""
    key = (str(cases_dir), name)
    if key in _LOADED:
        return _LOADED[key]
    if str(cases_dir.parent) not in sys.path:
        sys.path.insert(0, str(cases_dir.parent))   # so cases can import their package's helpers
    path = cases_dir / f"{name}.py"
    spec = importlib.util.spec_from_file_location(_module_name(name, path), path)
    module = importlib.util.module_from_spec(spec)
    # registered like any import: TVMScript's ``@T.prim_func`` walks the caller's stack with ``inspect``, whose
    # file -> module lookup rescans every loaded module for a frame whose file no registered module has
    # (a fifth of the golden suite's parse time before the case modules were registered)
    sys.modules[spec.name] = module
    try:
        _execute(spec, module, name, path)
        _validate(name, module)
    except UsageError:
        del sys.modules[spec.name]      # a broken case leaves nothing behind
        raise
    _LOADED[key] = module
    return module


def _execute(spec, module: ModuleType, name: str, path: Path) -> None:
    try:
        spec.loader.exec_module(module)
    except SystemExit as err:       # a case that exits while importing is broken, not "done"
        raise UsageError(f"case {name}: cannot import {path}: it called sys.exit({err.code!r})") from None
    except Exception as err:
        raise UsageError(f"case {name}: cannot import {path}: {type(err).__name__}: {err}") from None


def _module_name(name: str, path: Path) -> str:
    """``_golden_case_<name>``, numbered when a case of that name from another directory holds it already."""
    base = candidate = f"_golden_case_{name}"
    k = 1
    while candidate in sys.modules and Path(getattr(sys.modules[candidate], "__file__", "") or "") != path:
        k += 1
        candidate = f"{base}_{k}"
    return candidate


def _validate(name: str, module: ModuleType) -> None:
    variants = getattr(module, "VARIANTS", None)
    if not isinstance(variants, dict) or not variants:
        raise UsageError(f"case {name}: VARIANTS must be a non-empty dict of name -> zero-argument callable")
    bad = [v for v, fn in variants.items() if not isinstance(v, str) or "/" in v or not callable(fn)]
    if bad:
        raise UsageError(f"case {name}: VARIANTS entries {bad} need a name without '/' and a callable")
    if not (module.__doc__ or "").strip():
        raise UsageError(f"case {name}: the module docstring must say what the case pins")
    if hasattr(module, "check") and not callable(module.check):
        raise UsageError(f"case {name}: check must be callable as check(variant, model, result)")
    for table in ("VECTOR_ANCHOR", "CUTE_STATEMENTS", "REFERENCE", "TOLERANCE", "NUMERIC_PENDING"):
        unknown = sorted(set(getattr(module, table, {}) or {}) - set(variants))
        if unknown:
            raise UsageError(f"case {name}: {table} names unknown variants {unknown}")


@contextlib.contextmanager
def share_source_parses():
    """While open, TVMScript turns each distinct kernel source into its syntax tree once (per process);
    yields whether sharing is on.

    Most cases build every variant from one function (45 sources for 95 variants), and apache-tvm 0.27's
    parser converts that function's text to its own syntax tree on every ``@T.prim_func`` call, twice (once
    to parse, once more, eagerly, for a well-formedness error it may never report): a tenth of the golden
    suite's CPU time. The tree depends only on the text, and the parser does not change it
    (``tests/test_case_loader.py`` parses every variant with and without sharing and compares the printed
    kernels). Only the golden runner opens this; the library never touches TVM's parser. Without
    ``Source.as_ast`` (another TVM) nothing is changed. Worker processes forked inside inherit it."""
    try:
        from tvm.script.parser.core import diagnostics
    except ImportError:
        yield False
        return
    source_cls = getattr(diagnostics, "Source", None)
    parse = source_cls.__dict__.get("as_ast") if source_cls is not None else None
    if parse is None or getattr(parse, "_shared_by_source", False):
        yield parse is not None
        return
    trees: dict = {}

    def as_ast(self):
        text = self.source
        tree = trees.get(text)
        if tree is None:
            tree = trees[text] = parse(self)
        return tree

    as_ast._shared_by_source = True
    as_ast.__doc__ = parse.__doc__
    source_cls.as_ast = as_ast
    try:
        yield True
    finally:
        source_cls.as_ast = parse
