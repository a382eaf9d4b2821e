"""Finding and importing golden cases (``cases/<name>.py``) and checking the case contract.

Shared by the runner and the tools beside it (lanes, gpu_check), so none of them imports the runner.
"""
from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["UsageError", "discover", "light_caller_stacks", "load_case", "share_expression_code", "share_source_parses"]


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
    kernels). The text itself is found once per function definition too: the parser cuts it out of the file
    with ``inspect.getblock``, which tokenizes from the definition on (0.2 s of a one-process golden run), and a
    definition's lines do not change while the run reads its files (the same code object, the same lines).
    Only the golden runner opens this; the library never touches TVM's parser. Without ``Source.as_ast`` (another
    TVM) nothing is changed, and without a module-level ``getsourcelines`` the text is found as before. Worker
    processes forked inside inherit it."""
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
    find_lines = getattr(diagnostics, "getsourcelines", None)
    found: dict = {}

    def getsourcelines(obj):
        code = getattr(inspect.unwrap(obj), "__code__", None)
        if code is None:
            return find_lines(obj)
        hit = found.get(code)
        if hit is None:
            hit = found[code] = find_lines(obj)
        return list(hit[0]), hit[1]

    source_cls.as_ast = as_ast
    if find_lines is not None:
        diagnostics.getsourcelines = getsourcelines
    try:
        yield True
    finally:
        source_cls.as_ast = parse
        if find_lines is not None:
            diagnostics.getsourcelines = find_lines


#: frames of the caller's stack that apache-tvm 0.27's ``@T.prim_func`` reads a source line of: its own frame, the
#: decorated function's definer and the definer's caller (``is_defined_in_class`` looks at the third)
_FRAMES_WITH_SOURCE = 3


@contextlib.contextmanager
def light_caller_stacks():
    """While open, ``@T.prim_func`` takes its caller's stack without reading a source line for frames it never
    reads one of; yields whether that is on.

    apache-tvm 0.27's decorator starts with ``inspect.stack()``: every frame up the stack with its source line,
    which ``inspect`` finds by mapping the frame's file to a module and reading the file (about 2 ms per kernel
    in a golden run, a tenth of a worker's parse time). The decorator reads the line of the third frame only
    (``is_defined_in_class``) and the frame objects of the others (closure variables named in string
    annotations). Here the first three frames come from ``inspect`` as before, the others carry their frame,
    file, line and function without the source line. Only the golden runner opens this, like
    ``share_source_parses``; another TVM (no module-level ``inspect`` in the entry module) is left as it is."""
    try:
        from tvm.tirx.script.parser import entry
    except ImportError:
        yield False
        return
    current = getattr(entry, "inspect", None)
    if isinstance(current, _LightInspect):
        yield True
        return
    if current is not inspect:
        yield False
        return
    entry.inspect = _LightInspect()
    try:
        yield True
    finally:
        entry.inspect = current


class _LightInspect:
    """The ``inspect`` module as TVMScript's entry module sees it while ``light_caller_stacks`` is open."""

    def __getattr__(self, name: str):
        return getattr(inspect, name)

    @staticmethod
    def stack(context: int = 1) -> list:
        """``inspect.stack(context)`` of the caller, source lines only for its first frames."""
        frame = sys._getframe(1)
        out = []
        while frame is not None:
            if len(out) < _FRAMES_WITH_SOURCE:
                info = inspect.getframeinfo(frame, context)
                out.append(_frame_info(frame, info.filename, info.lineno, info.function, info.code_context,
                                       info.index, getattr(info, "positions", None)))
            else:
                code = frame.f_code
                out.append(_frame_info(frame, code.co_filename, frame.f_lineno, code.co_name, None, None, None))
            frame = frame.f_back
        return out


def _frame_info(frame, filename, lineno, function, code_context, index, positions):
    if sys.version_info >= (3, 11):
        return inspect.FrameInfo(frame, filename, lineno, function, code_context, index, positions=positions)
    return inspect.FrameInfo(frame, filename, lineno, function, code_context, index)


#: fields of a syntax node that only say where it was written (the compiled expression does not depend on them)
_POSITIONS = frozenset({"lineno", "col_offset", "end_lineno", "end_col_offset"})


@contextlib.contextmanager
def share_expression_code():
    """While open, TVMScript compiles each distinct shape of expression it evaluates once (per process); yields
    whether sharing is on.

    apache-tvm 0.27's parser evaluates every expression of a kernel by rebuilding it as a Python syntax tree
    (the literal operands replaced by named intermediate values), compiling that tree and evaluating it: 15,000
    expressions in a golden run, four tenths of its parse time, and the same few hundred shapes again and
    again (``__tmp_0 + __tmp_1``). The code depends only on the tree's shape -- node kinds, names, literal
    values and their types -- and not on where it was written (errors are reported at the node's span, not
    the code's), so the code is looked up by that shape; a tree holding anything else is compiled as before.
    Only the golden runner opens this, like ``share_source_parses``; another TVM (no module-level
    ``_eval_expr`` taking (node, globals)) is left as it is. ``tests/test_case_loader.py`` parses every
    variant with and without it and compares the printed kernels."""
    try:
        from tvm.script.parser.core import doc, evaluator
    except ImportError:
        yield False
        return
    current = getattr(evaluator, "_eval_expr", None)
    if current is None or getattr(current, "_shared_by_shape", False):
        yield current is not None
        return
    codes: dict = {}

    def eval_expr(node, dict_globals):
        try:
            key = _shape_key(node, doc.AST)
        except _Unkeyed:
            return current(node, dict_globals)
        code = codes.get(key)
        if code is None:
            tree = doc.from_doc(node)
            if isinstance(tree, ast.expr):
                tree = ast.Expression(body=tree)
            if not isinstance(tree, ast.Expression):
                return current(node, dict_globals)      # let TVM report what it does not expect
            code = codes[key] = compile(ast.fix_missing_locations(tree), filename="<ast>", mode="eval")
        return eval(code, {} if dict_globals is None else dict_globals)  # noqa: S307 -- TVM's own evaluation

    eval_expr._shared_by_shape = True
    evaluator._eval_expr = eval_expr
    try:
        yield True
    finally:
        evaluator._eval_expr = current


class _Unkeyed(Exception):
    """A syntax tree holding a value ``_shape_key`` does not name exactly."""


def _shape_key(node, ast_type) -> tuple:
    """What a TVMScript syntax tree compiles to: kinds, fields and literal values with their types (1, 1.0 and
    True compare equal in Python but compile to different constants), positions left out."""
    if isinstance(node, ast_type):
        return (type(node),) + tuple(_shape_key(getattr(node, f, None), ast_type) for f in type(node)._FIELDS
                                     if f not in _POSITIONS)
    if isinstance(node, (list, tuple)):
        return (type(node),) + tuple(_shape_key(n, ast_type) for n in node)
    if node is None or type(node) in (str, int, bool, bytes):
        return (type(node), node)
    if type(node) is float and node == node:        # NaN never equals itself: left to TVM
        return (float, node, repr(node))             # -0.0 == 0.0, but they are different constants
    raise _Unkeyed
