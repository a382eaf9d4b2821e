"""IR utilities shared by every pass: exception-safe traversals, integer constants, memory scopes and the
thread launch of a kernel. Traversals here re-raise a callback's Python exception unchanged (the FFI would
turn it into a RuntimeError and lose its type)."""
from __future__ import annotations

from typing import Any, Callable

import tvm
import tvm_ffi
from tvm import sym, tirx
from tvm.ir import Range

from tilelayout.errors import LoweringError
from tilelayout.ir_walk import map_typed, mutate_typed, walk_typed

def _guarded(entries: list, failure: list, arity: int) -> list:
    """Wrap callbacks so a Python exception survives the FFI (re-raised by the caller)."""
    def wrap(fn: Callable) -> Callable:
        def run1(node):
            if failure:
                return node
            try:
                return fn(node)
            except Exception as exc:  # re-raised after the traversal
                failure.append(exc)
                return node

        def run2(node, mutator):
            if failure:
                return node
            try:
                return fn(node, mutator)
            except Exception as exc:  # re-raised after the traversal
                failure.append(exc)
                return node
        return run1 if arity == 1 else run2
    return [(t, wrap(fn)) for t, fn in entries]


def _rewrite(traversal: Callable, node, entries: list, arity: int):
    """``traversal(node, entries)`` with the callbacks guarded: the first exception one raised is raised here."""
    failure: list = []
    out = traversal(node, _guarded(entries, failure, arity))
    if failure:
        raise failure[0]
    return out


def mutate(node, entries: list):
    """``tvm_ffi.structural_mutate`` (top-down, callbacks own the descent) that lets exceptions through."""
    return _rewrite(mutate_typed, node, entries, 2)


def mapped(node, entries: list):
    """``tvm_ffi.structural_map`` (bottom-up rewrite) that lets exceptions through."""
    return _rewrite(map_typed, node, entries, 1)


def walk(node, entries: list, order: str = "pre") -> None:
    """``tvm_ffi.structural_walk`` that lets a callback's exception through (the walk stops at the first)."""
    failure: list = []

    def wrap(fn):
        def run(n):
            try:
                fn(n)
            except Exception as exc:
                failure.append(exc)
                return tvm_ffi.VisitInterrupt(None)
            return None
        return run

    walk_typed(node, [(t, wrap(fn)) for t, fn in entries], order=order)
    if failure:
        raise failure[0]


def prim_func_pass(name: str, rewrite: Callable[[tirx.PrimFunc], tirx.PrimFunc]) -> tvm.transform.Pass:
    """The TVM pass ``name`` that replaces every PrimFunc of a module by ``rewrite(func)``: the shape of each of
    our passes, whose factory only names it and binds its arguments into ``rewrite``."""
    return tirx.transform.prim_func_pass(lambda func, _mod, _ctx: rewrite(func), opt_level=0, name=name)


def module_func(func, error: type):
    """The PrimFunc a one-function IRModule holds (``error`` when it holds another number), else ``func``."""
    if isinstance(func, tvm.IRModule):
        funcs = [f for _, f in sorted(func.functions.items(), key=lambda kv: str(kv[0]))
                 if isinstance(f, tirx.PrimFunc)]
        if len(funcs) != 1:
            raise error(f"expected an IRModule with one PrimFunc, got {len(funcs)}")
        return funcs[0]
    return func


def int_value(e) -> int | None:
    """A Python int for an integer constant, None otherwise."""
    if isinstance(e, bool):
        return None
    if isinstance(e, int):
        return e
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    return None


def constant_numel(buf) -> int | None:
    """How many elements ``buf`` holds, None when an extent is not a constant."""
    size = 1
    for s in buf.shape:
        v = int_value(s)
        if v is None:
            return None
        size *= v
    return size


def is_memory_scope(scope: str) -> bool:
    """Global or shared memory: side effects other threads can see."""
    return scope in ("", "global") or scope.startswith("shared")


def func_label(func) -> str:
    """How messages name a kernel."""
    attrs = func.attrs
    if attrs is not None and "global_symbol" in attrs:
        return f"kernel {str(attrs['global_symbol'])!r}"
    return "the kernel"


def thread_launch(func) -> tuple[Any, int]:
    """(threadIdx.x var, extent) of ``func``; (None, 1) when it launches no threads."""
    found: dict = {}

    def on_attr(n):
        if n.attr_key == "thread_extent" and isinstance(n.node, tirx.IterVar):
            tag = str(n.node.thread_tag)
            if tag.startswith("threadIdx."):
                ext = int_value(n.value)
                if ext is None:
                    raise LoweringError(f"{func_label(func)}: {tag} extent {n.value} must be a constant to lower layouts")
                found.setdefault(tag, (n.node.var, ext))

    walk(func.body, [(tirx.AttrStmt, on_attr)])
    for tag in ("threadIdx.y", "threadIdx.z"):
        if tag in found and found[tag][1] != 1:
            raise LoweringError(f"{func_label(func)}: {tag} = {found[tag][1]}; lowering models a 1-D thread block "
                                f"(fold the thread dimensions into threadIdx.x)")
    return found.get("threadIdx.x", (None, 1))


def make_analyzer(bounds: dict) -> sym.Analyzer:
    """An analyzer with each variable bound to its ``(min, extent)``."""
    ana = sym.Analyzer()
    for v, (lo, ext) in bounds.items():
        ana.bind(v, Range.from_min_extent(lo, ext))
    return ana


def under_guard(stmt, guard, ana: sym.Analyzer):
    """``stmt`` run only where ``guard`` holds (None: always): None when it provably never does, unwrapped when it
    provably always does."""
    if guard is None:
        return stmt
    g = ana.simplify(guard)
    if isinstance(g, tirx.IntImm) and int(g.value) == 0:
        return None
    if isinstance(g, tirx.IntImm) and int(g.value) == 1:
        return stmt
    return tirx.IfThenElse(g, stmt, None)


def conj(conds: list):
    """The conjunction of ``conds`` (None when empty)."""
    out = None
    for c in conds:
        out = c if out is None else tirx.And(out, c)
    return out
