"""Load a kernel named on the command line: ``path/to/file.py:name`` or a file of printed TVMScript.

Accepted forms:

- ``file.py:name`` -- ``name`` in the module is a ``PrimFunc``, an ``IRModule`` holding one PrimFunc, or a
  zero-argument callable returning either (a builder, like the ``VARIANTS`` of a golden case);
- ``file.py`` -- the module defines exactly one top-level PrimFunc;
- ``file.tir`` (any other suffix, or a ``.py`` file that is printed TVMScript) -- the text ``func.script()`` or
  ``mod.script()`` printed, parsed back with ``tvm.script.from_source``; ``file.tir:name`` picks one function
  of a printed IRModule.

Every failure is a ``KernelLoadError`` naming the file and what was wrong with it.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any, Callable

from .errors import TileLayoutError

__all__ = ["KernelLoadError", "split_spec", "load_kernel", "load_callable", "describe_error"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


class KernelLoadError(TileLayoutError):
    """A kernel or reference named on the command line cannot be found, imported or parsed."""


def split_spec(spec: str) -> tuple[Path, str | None]:
    """``"dir/k.py:fn"`` -> ``(Path("dir/k.py"), "fn")``; the name part is optional (a drive letter is not one)."""
    path, sep, name = spec.rpartition(":")
    if sep and path and _NAME.match(name):
        return Path(path), name
    return Path(spec), None


def _import(path: Path):
    if not path.is_file():
        raise KernelLoadError(f"{path}: no such file")
    module_name = "_tilelayout_kernel_" + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise KernelLoadError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)          # so the kernel file can import its neighbours
    try:
        spec.loader.exec_module(module)
    except TileLayoutError:
        raise
    except (Exception, SystemExit) as err:  # noqa: BLE001 -- any failure importing user code is reported
        raise KernelLoadError(f"{path}: cannot import it: {describe_error(err)}") from None
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    return module


_LOCATION = re.compile(r"^\s*-->\s*(?P<file>.+?):(?P<line>\d+):(?P<col>\d+)\s*$")


def describe_error(err: BaseException, source: Path | None = None) -> str:
    """What went wrong in user code, in words a kernel author can act on.

    TVMScript's parse errors (``DiagnosticError``) carry the message first and the location last
    (``error: Undefined variable: x`` then `` --> file:11:5``); the message, the location and the source line
    with a caret are kept. ``SystemExit`` says the code exited (a library must not exit the command). Any
    other exception is its type and last line. ``source``: the file a location of ``<str>`` refers to."""
    if isinstance(err, SystemExit):
        return f"it called sys.exit({err.code!r}); a kernel file, builder or reference must return, not exit"
    lines = [line.rstrip() for line in str(err).splitlines() if line.strip()]
    where = next((k for k, line in enumerate(lines) if _LOCATION.match(line)), None)
    if where is None:
        return f"{type(err).__name__}: {lines[-1].strip() if lines else ''}".rstrip(": ")
    message = " ".join(line.strip() for line in lines[:where]) or type(err).__name__
    message = re.sub(r"^error:\s*", "", message)
    loc = _LOCATION.match(lines[where])
    file = loc["file"] if loc["file"] != "<str>" or source is None else str(source)
    out = [message, f"  --> {file}:{loc['line']}:{loc['col']}"]
    excerpt = lines[where + 1:]
    if not any("|" in line for line in excerpt):
        excerpt = _source_excerpt(Path(file), int(loc["line"]), int(loc["col"]))
    return "\n".join(out + excerpt)


def _source_excerpt(path: Path, line: int, col: int) -> list[str]:
    """`` 11 |     code`` and a caret under column ``col``; nothing when the file cannot be read."""
    try:
        text = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    if not 1 <= line <= len(text):
        return []
    gutter = f"{line:>4} | "
    return [gutter + text[line - 1], " " * (len(gutter) - 2) + "| " + " " * max(0, col - 1) + "^"]


def _attribute(module, path: Path, name: str) -> Any:
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise KernelLoadError(f"{path}: has no attribute {name!r}")
        obj = getattr(obj, part)
    return obj


def load_callable(spec: str) -> Callable:
    """The callable ``file.py:name`` names (a numpy reference for ``tilelayout check --reference``)."""
    path, name = split_spec(spec)
    if name is None:
        raise KernelLoadError(f"{spec}: give the function as FILE.py:NAME")
    obj = _attribute(_import(path), path, name)
    if not callable(obj):
        raise KernelLoadError(f"{spec}: {name} is a {type(obj).__name__}, not a function")
    return obj


def _one_primfunc(obj, where: str, name: str | None = None):
    import tvm
    from tvm import tirx
    if isinstance(obj, tirx.PrimFunc):
        return obj
    if isinstance(obj, tvm.IRModule):
        funcs = {str(gv.name_hint): f for gv, f in obj.functions.items() if isinstance(f, tirx.PrimFunc)}
        if name is not None:
            if name not in funcs:
                raise KernelLoadError(f"{where}: the module has no PrimFunc {name!r} (it has: "
                                      f"{', '.join(sorted(funcs)) or 'none'})")
            return funcs[name]
        if len(funcs) != 1:
            raise KernelLoadError(f"{where}: the module holds {len(funcs)} PrimFuncs ({', '.join(sorted(funcs))}); "
                                  f"name one as {where}:NAME")
        return next(iter(funcs.values()))
    raise KernelLoadError(f"{where}: expected a tvm.tirx.PrimFunc or an IRModule, got {type(obj).__name__}")


def _from_text(path: Path, name: str | None):
    import tvm
    try:
        text = path.read_text()
    except OSError as err:
        raise KernelLoadError(f"{path}: cannot read it: {err.strerror}") from None
    try:
        parsed = tvm.script.from_source(text)
    except Exception as err:  # noqa: BLE001 -- TVMScript parse errors are reported with their text and line
        raise KernelLoadError(f"{path}: not a Python kernel file and not printed TVMScript: "
                              f"{describe_error(err, path)}") from None
    return _one_primfunc(parsed, str(path), name)


def _looks_like_printed_script(path: Path) -> bool:
    try:
        head = path.read_text()[:4000]
    except OSError:
        return False
    return "@T.prim_func" in head and "import" not in head.replace("# from tvm.script import", "")


def load_kernel(spec: str):
    """The ``tvm.tirx.PrimFunc`` named by ``spec`` (see the module docstring for the accepted forms)."""
    path, name = split_spec(spec)
    if not path.is_file():
        raise KernelLoadError(f"{path}: no such file")
    if path.suffix != ".py" or _looks_like_printed_script(path):
        return _from_text(path, name)
    module = _import(path)
    if name is None:
        from tvm import tirx
        found = sorted(k for k, v in vars(module).items() if isinstance(v, tirx.PrimFunc) and not k.startswith("_"))
        if len(found) != 1:
            listing = f" ({', '.join(found)})" if found else ""
            raise KernelLoadError(f"{path}: defines {len(found)} top-level PrimFuncs{listing}; name the kernel as "
                                  f"{path}:NAME")
        name = found[0]
    obj = _attribute(module, path, name)
    if callable(obj) and not _is_ir(obj):
        try:
            obj = obj()
        except TileLayoutError:
            raise
        except TypeError as err:
            raise KernelLoadError(f"{spec}: {name} is neither a PrimFunc nor a zero-argument builder ({err})") from None
        except (Exception, SystemExit) as err:  # noqa: BLE001 -- a failing builder is a kernel error
            raise KernelLoadError(f"{spec}: calling {name}() failed: {describe_error(err)}") from None
    return _one_primfunc(obj, spec)


def _is_ir(obj) -> bool:
    import tvm
    from tvm import tirx
    return isinstance(obj, (tirx.PrimFunc, tvm.IRModule))
