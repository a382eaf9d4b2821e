"""Layouts on TIR buffers and loops: attach them to a PrimFunc, read them back, find the user's pins.

Encoding (chosen because it prints in ``func.script()`` and survives ``tvm.script.from_source``):

- buffers: the function attribute ``"tilelayout.layouts"`` = ``{buffer name: layout.to_dict()}``
  (strings, ints and lists only; TVM objects with free placeholder variables would not re-parse);
- loops: annotations on the outermost ``For`` of a parallel nest: ``"tilelayout.loop_layout"``
  (the same dict), ``"tilelayout.loop_predicate"`` (a string, only when given) and
  ``"tilelayout.padding_guard"`` (``True``, only when needed).

Loops are named by their loop key (docs/annotations.md): loop variable names joined by commas, extents joined by ``x``
(``"i,j[128x128]"``); a key seen again in program order gets ``#2``, ``#3``. The nests are found
exactly as the front end finds them (every ``T.parallel`` loop met in program order roots a nest
of its directly nested parallel loops; nests inside a nest body are not separate nests), so the keys
agree with ``passes/inference/frontend.py``.

User pins are buffers whose TIRx layout is not the default ``TileLayout(S[shape])`` (converted by
:func:`tilelayout.tile_layout_interop.from_tile_layout`) plus layouts attached with :func:`annotate_layouts`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tvm
import tvm_ffi
from .ffi_array import as_list
from .ir_walk import mutate_typed, walk_typed
from tvm import tirx

from .errors import LayoutConflictError, LayoutError, TileLayoutError
from .layout import Layout
from .serialize import layout_from_dict
from .tile_layout_interop import from_tile_layout, is_default_tile_layout

__all__ = [
    "LAYOUTS_ATTR", "LOOP_LAYOUT_KEY", "LOOP_PREDICATE_KEY", "PADDING_GUARD_KEY", "TILE_LOOPS_ATTR",
    "encode_tile_loop", "read_tile_loops", "REDUCTIONS_ATTR", "encode_reduction", "read_reductions",
    "encode_layout", "decode_layout", "annotate_layouts", "annotate_loop", "annotate_loops",
    "read_layout_annotations",
    "get_pinned_layouts", "loop_nest", "loop_key", "parallel_nests", "function_buffers",
]

LAYOUTS_ATTR = "tilelayout.layouts"
LOOP_LAYOUT_KEY = "tilelayout.loop_layout"
LOOP_PREDICATE_KEY = "tilelayout.loop_predicate"
PADDING_GUARD_KEY = "tilelayout.padding_guard"
REPLICA_GUARD_KEY = "tilelayout.replica_guard"
#: function attribute: {tile op number: its element loop's layout and guards}. Copy/fill/elementwise tile ops
#: have no loop in the IR until lowering creates one, so their loop decisions travel here (numbered by the
#: op's position in the front end's op graph, with the op's description to catch a stale annotation)
TILE_LOOPS_ATTR = "tilelayout.tile_loops"
#: function attribute: {tile op number: its reduction decision} for reductions of a fragment: the layout of the
#: partial results (``reduced``: the source's layout with the reduced axes turned into replicas) and which
#: layout's holders combine them (``combine``: ``"destination"``, or ``"reduced"`` when the destination is
#: memory or keeps the results in a subset of the holders, which then take theirs after the combination)
REDUCTIONS_ATTR = "tilelayout.reductions"


# --------------------------------------------------------------------------- value encoding

def _plain(obj: Any) -> Any:
    """FFI Map / Array / String / IntImm (as TVM hands attributes back) -> plain Python values."""
    kind = type(obj)
    if kind is str or kind is int or kind is bool or obj is None:
        return obj                      # exact Python types first: a layout's own dict is all of them
    if kind is list:
        return [_plain(v) for v in obj]
    if kind is dict:
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, Sequence):
        return [_plain(v) for v in obj]
    if isinstance(obj, tvm.ir.Expr) and type(obj).__name__ == "IntImm":
        return bool(obj.value) if str(obj.ty) == "bool" else int(obj.value)
    if isinstance(obj, tvm.ir.Expr):
        return str(obj)
    raise LayoutError(f"unexpected {type(obj).__name__} in a layout annotation: {obj!r}")


def encode_layout(layout: Layout) -> dict:
    """The annotation form of a Layout / Fragment: ``layout.to_dict()`` (strings, ints, lists)."""
    if not isinstance(layout, Layout):
        raise LayoutError(f"expected a tilelayout Layout or Fragment, got {type(layout).__name__}: {layout!r}")
    return _plain(layout.to_dict())


def decode_layout(obj: Any) -> Layout:
    """Rebuild a Layout / Fragment from its annotation form (plain dict or TVM Map)."""
    data = _plain(obj)
    if not isinstance(data, dict):
        raise LayoutError(f"a layout annotation must be a dict, got {type(data).__name__}: {data!r}")
    try:
        return layout_from_dict(data)
    except TileLayoutError:
        raise
    except (KeyError, TypeError, ValueError) as err:
        raise LayoutError(f"malformed layout annotation {data!r}: {type(err).__name__} {err}") from None


# --------------------------------------------------------------------------- buffers of a function

def function_buffers(func) -> list:
    """Every buffer of ``func`` in order: parameters, then allocations / declarations in program order."""
    out: list = []

    def add(buf):
        if buf is not None and tirx.is_buffer_var(buf) and not any(buf.same_as(b) for b in out):
            out.append(buf)

    for p in as_list(func.params):
        add(p)

    def on_alloc(node):
        add(node.buffer)

    def on_block(blk):
        for b in blk.alloc_buffers:
            add(b)

    handlers = [((tirx.AllocBuffer, tirx.DeclBuffer), on_alloc)]
    try:
        from tvm import s_tir
        handlers.append((s_tir.SBlock, on_block))
    except (ImportError, AttributeError):  # pragma: no cover - s_tir is part of apache-tvm 0.27
        pass
    walk_typed(func.body, handlers, order="pre")
    return out


def _buffer_name(key) -> str:
    if isinstance(key, str):
        return str(key)
    if isinstance(key, tvm.ir.Var) and tirx.is_buffer_var(key):
        return str(key.name)
    raise LayoutError(f"layouts are keyed by buffer or buffer name, got {type(key).__name__}: {key!r}")


def _static(shape) -> list | None:
    out = []
    for s in as_list(shape):
        if isinstance(s, int):
            out.append(s)
        elif type(s).__name__ == "IntImm":
            out.append(int(s.value))
        else:
            return None
    return out


# --------------------------------------------------------------------------- writing

def annotate_layouts(func, layouts: Mapping) -> "tirx.PrimFunc":
    """Attach ``{buffer or buffer name: Layout | Fragment | TileLayout}`` to ``func`` (merged with earlier ones).

    The layouts go into the function attribute ``"tilelayout.layouts"`` keyed by buffer name, so they
    print and re-parse. A TIRx TileLayout / ComposeLayout value is converted with ``from_tile_layout``.
    One call naming a buffer twice (by object and by name) with different layouts is a LayoutConflictError;
    a later call replaces an earlier call's layout of the same buffer (an explicit re-pin).
    """
    if not isinstance(func, tirx.PrimFunc):
        raise LayoutError(f"annotate_layouts expects a tirx.PrimFunc, got {type(func).__name__}")
    by_name: dict = {}
    for buf in function_buffers(func):
        by_name.setdefault(str(buf.name), buf)
    merged = {k: v for k, v in _existing_layouts(func).items()}
    given: dict = {}
    for key in sorted(layouts, key=_buffer_name):
        name = _buffer_name(key)
        value = layouts[key]
        if name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise LayoutError(f"cannot annotate buffer {name!r}: {func_name(func)} has no such buffer (buffers: {known})")
        buf = by_name[name]
        if not isinstance(value, Layout):
            try:
                value = from_tile_layout(value, [s for s in buf.shape])
            except LayoutError as err:
                raise LayoutError(f"buffer {name!r}: {err}") from None
        _check_shape(value, buf.shape, f"buffer {name!r}")
        if name in given and not given[name].is_equal(value):
            raise LayoutConflictError(f"buffer {name!r} is pinned twice with different layouts in one call (by the "
                                      f"buffer and by its name): {given[name]!r} and {value!r}")
        given[name] = value
        merged[name] = encode_layout(value)
    return func.with_attr(LAYOUTS_ATTR, {k: merged[k] for k in sorted(merged)})


def func_name(func) -> str:
    attrs = func.attrs
    name = attrs["global_symbol"] if attrs is not None and "global_symbol" in attrs else None
    return f"function {str(name)!r}" if name is not None else "the function"


def _existing_layouts(func) -> dict:
    attrs = func.attrs
    if attrs is None or LAYOUTS_ATTR not in attrs:
        return {}
    raw = _plain(attrs[LAYOUTS_ATTR])
    if not isinstance(raw, dict):
        raise LayoutError(f"attribute {LAYOUTS_ATTR!r} of {func_name(func)} must map buffer names to layouts, got {raw!r}")
    return raw


def _check_shape(layout: Layout, shape, what: str) -> None:
    want, got = _static(shape), _static(layout.input_shape)
    if want is None or got is None:
        if len(layout.input_shape) != len(shape):
            raise LayoutError(f"{what} has rank {len(shape)} but the layout {layout!r} has rank {layout.input_dim}")
        return
    if want != got:
        raise LayoutError(f"{what} has shape {want} but the layout {layout!r} covers {got}")


def loop_nest(for_stmt) -> list:
    """``for_stmt`` and the parallel loops directly nested in it (the nest a loop layout describes)."""
    nest = [for_stmt]
    while isinstance(nest[-1].body, tirx.For) and int(nest[-1].body.kind) == int(tirx.ForKind.PARALLEL):
        nest.append(nest[-1].body)
    return nest


def annotate_loop(for_stmt, layout: Layout, predicate=None, padding_guard: bool = False,
                  replica_guard: bool = False):
    """A copy of ``for_stmt`` (the outermost loop of a parallel nest) carrying its loop layout.

    ``predicate`` (str or PrimExpr, e.g. ``"_rep == 0"``) is stored as a string when given;
    ``padding_guard`` is stored only when True.
    """
    if not isinstance(for_stmt, tirx.For):
        raise LayoutError(f"annotate_loop expects a tirx.For, got {type(for_stmt).__name__}")
    if not isinstance(layout, Layout):
        raise LayoutError(f"annotate_loop expects a tilelayout Layout or Fragment, got {type(layout).__name__}")
    nest = loop_nest(for_stmt)
    key = loop_key(nest)
    if layout.input_dim > len(nest):
        raise LayoutError(f"loop {key} nests {len(nest)} parallel loops but the layout {layout!r} has "
                          f"{layout.input_dim} inputs")
    _check_shape(layout, [l.extent for l in nest[: layout.input_dim]], f"loop {key}")
    if isinstance(padding_guard, bool) or type(padding_guard).__name__ == "bool_":
        padding_guard = bool(padding_guard)
    else:
        raise LayoutError(f"padding_guard must be a bool, got {padding_guard!r}")
    ann = {str(k): v for k, v in for_stmt.annotations.items()}
    for k in (LOOP_PREDICATE_KEY, PADDING_GUARD_KEY, REPLICA_GUARD_KEY):
        ann.pop(k, None)
    ann[LOOP_LAYOUT_KEY] = encode_layout(layout)
    if predicate is not None:
        if not isinstance(predicate, (str, tvm.ir.Expr)):
            raise LayoutError(f"loop predicate must be a str or PrimExpr, got {type(predicate).__name__}")
        ann[LOOP_PREDICATE_KEY] = str(predicate)
    if padding_guard:
        ann[PADDING_GUARD_KEY] = True
    if replica_guard:
        ann[REPLICA_GUARD_KEY] = True  # stores to shared/global are done by replica 0 only
    return tirx.For(for_stmt.loop_var, for_stmt.min, for_stmt.extent, for_stmt.kind, for_stmt.body,
                    for_stmt.thread_binding, ann, for_stmt.step)


def annotate_loops(func, loops: Mapping) -> "tirx.PrimFunc":
    """Annotate parallel nests by key: ``{"i,j[128x128]": layout | (layout, predicate, padding_guard)}``."""
    if not isinstance(func, tirx.PrimFunc):
        raise LayoutError(f"annotate_loops expects a tirx.PrimFunc, got {type(func).__name__}")
    roots = dict(parallel_nests(func))
    todo = []
    for key in sorted(loops):
        if key not in roots:
            known = ", ".join(roots) or "none"
            raise LayoutError(f"{func_name(func)} has no parallel nest {key!r} (nests: {known})")
        spec = loops[key]
        spec = tuple(spec) if isinstance(spec, (tuple, list)) else (spec,)
        todo.append((roots[key], spec))

    def on_for(loop, mutator):
        new = mutator.default_mutate(loop)
        for root, spec in todo:
            if loop.same_as(root):
                return annotate_loop(new, *spec)
        return new

    return func.with_body(mutate_typed(func.body, [(tirx.For, on_for)]))


# --------------------------------------------------------------------------- reading

def _extent_text(e) -> str:
    if type(e).__name__ == "IntImm":
        return str(int(e.value))
    return str(e)


def loop_key(nest: Sequence) -> str:
    """``"i,j[128x128]"`` for a nest of loops (without the ``#n`` of repeated keys)."""
    return (",".join(str(l.loop_var.name) for l in nest) + "["
            + "x".join(_extent_text(l.extent) for l in nest) + "]")


def parallel_nests(func) -> list:
    """[(key, root For)] of every parallel nest in program order; repeated keys get ``#2``, ``#3``.

    A non-parallel loop that carries a loop layout annotation also counts as a root.
    """
    found: list = []
    counts: dict = {}

    def on_for(loop, visitor):
        parallel = int(loop.kind) == int(tirx.ForKind.PARALLEL)
        if parallel or LOOP_LAYOUT_KEY in loop.annotations:
            key = loop_key(loop_nest(loop))
            counts[key] = counts.get(key, 0) + 1
            found.append((key if counts[key] == 1 else f"{key}#{counts[key]}", loop))
            if parallel:
                return  # like the front end: the nest body holds no further nests
        visitor.default_visit(loop)

    tvm_ffi.structural_visit(func.body, [(tirx.For, on_for)])
    return found


def read_layout_annotations(func) -> tuple[dict, dict]:
    """({buffer name: layout}, {loop key: (layout, predicate str | None, padding_guard)}) from ``func``."""
    if not isinstance(func, tirx.PrimFunc):
        raise LayoutError(f"read_layout_annotations expects a tirx.PrimFunc, got {type(func).__name__}")
    buffers = {}
    for name, data in sorted(_existing_layouts(func).items()):
        try:
            buffers[name] = decode_layout(data)
        except LayoutError as err:
            raise LayoutError(f"buffer {name!r} in {func_name(func)}: {err}") from None
    loops = {}
    for key, loop in parallel_nests(func):
        ann = loop.annotations
        if LOOP_LAYOUT_KEY not in ann:
            continue
        try:
            layout = decode_layout(ann[LOOP_LAYOUT_KEY])
        except LayoutError as err:
            raise LayoutError(f"loop {key} in {func_name(func)}: {err}") from None
        pred = ann[LOOP_PREDICATE_KEY] if LOOP_PREDICATE_KEY in ann else None
        guard = _plain(ann[PADDING_GUARD_KEY]) if PADDING_GUARD_KEY in ann else False
        loops[key] = (layout, None if pred is None else str(_plain(pred)), bool(guard))
    return buffers, loops


def encode_tile_loop(op_text: str, layout: Layout, predicate=None, padding_guard: bool = False,
                     replica_guard: bool = False) -> dict:
    """The annotation form of a tile op's element-loop decision (see ``TILE_LOOPS_ATTR``)."""
    entry = {"op": str(op_text), "layout": encode_layout(layout)}
    if predicate is not None:
        entry["predicate"] = str(predicate)
    if padding_guard:
        entry["padding_guard"] = True
    if replica_guard:
        entry["replica_guard"] = True
    return entry


def _op_decisions(func, attr: str, what: str, layout_key: str, well_formed=lambda entry: True) -> list:
    """[(op number, entry, decoded ``entry[layout_key]``)] of the op-numbered attribute ``attr`` of ``func``, in op
    order; an entry without an op text and a layout, or not ``well_formed``, raises LayoutError naming it."""
    attrs = func.attrs
    if attrs is None or attr not in attrs:
        return []
    raw = _plain(attrs[attr])
    if not isinstance(raw, dict):
        raise LayoutError(f"attribute {attr!r} of {func_name(func)} must map op numbers to {what}, got {raw!r}")
    out = []
    for key in sorted(raw, key=lambda k: int(k) if str(k).isdigit() else -1):
        entry = raw[key]
        if not str(key).isdigit() or not isinstance(entry, dict) or layout_key not in entry or "op" not in entry \
                or not well_formed(entry):
            raise LayoutError(f"attribute {attr!r} of {func_name(func)}: malformed entry {key!r}: {entry!r}")
        try:
            layout = decode_layout(entry[layout_key])
        except LayoutError as err:
            raise LayoutError(f"tile op {key} ({entry['op']}) in {func_name(func)}: {err}") from None
        out.append((int(key), entry, layout))
    return out


def read_tile_loops(func) -> dict:
    """{op number: (op text, layout, predicate str | None, padding_guard, replica_guard)} from ``func``."""
    return {key: (str(entry["op"]), layout, entry.get("predicate"), bool(entry.get("padding_guard", False)),
                  bool(entry.get("replica_guard", False)))
            for key, entry, layout in _op_decisions(func, TILE_LOOPS_ATTR, "loop decisions", "layout")}


def encode_reduction(op_text: str, reduced: Layout, combine: str) -> dict:
    """The annotation form of a reduction decision (see ``REDUCTIONS_ATTR``)."""
    if combine not in ("destination", "reduced"):
        raise ValueError(f"combine must be 'destination' or 'reduced', got {combine!r}")
    return {"op": str(op_text), "reduced": encode_layout(reduced), "combine": combine}


def read_reductions(func) -> dict:
    """{op number: (op text, reduced layout, combine)} from ``func`` (see ``REDUCTIONS_ATTR``)."""
    decisions = _op_decisions(func, REDUCTIONS_ATTR, "reduction decisions", "reduced",
                              lambda entry: entry.get("combine") in ("destination", "reduced"))
    return {key: (str(entry["op"]), reduced, str(entry["combine"])) for key, entry, reduced in decisions}


def get_pinned_layouts(func, tirx_layouts: list | None = None) -> dict:
    """{buffer name: Layout | Fragment} the user fixed: non-default TIRx buffer layouts and annotations.

    A buffer pinned both ways must agree (else LayoutConflictError); a TIRx layout that has no
    tilelayout counterpart raises LayoutError naming the buffer. ``tirx_layouts``: the (buffer, TIRx
    layout) pairs of the buffers whose layout is not the default, when the caller has found them already
    (inference's front end reads every buffer once); else every buffer of ``func`` is read here.
    """
    if not isinstance(func, tirx.PrimFunc):
        raise LayoutError(f"get_pinned_layouts expects a tirx.PrimFunc, got {type(func).__name__}")
    pins: dict = {}
    found = tirx_layouts if tirx_layouts is not None else [(b, b.layout) for b in function_buffers(func)]
    for buf, layout in found:
        name = str(buf.name)
        shape = as_list(buf.shape)
        try:
            if tirx_layouts is None and is_default_tile_layout(layout, shape):
                continue
            converted = from_tile_layout(layout, shape)
        except LayoutError as err:
            raise LayoutError(f"buffer {name!r} ({buf.scope() or 'global'}, shape {_static(shape) or shape}) has "
                              f"a layout tilelayout cannot use: {err}") from None
        _merge_pin(pins, name, converted, "its TIRx layout")
    annotated, _ = read_layout_annotations(func)
    for name, layout in annotated.items():
        _merge_pin(pins, name, layout, f"attribute {LAYOUTS_ATTR!r}")
    return pins


def _merge_pin(pins: dict, name: str, layout: Layout, source: str) -> None:
    old = pins.get(name)
    if old is not None and not old.is_equal(layout):
        raise LayoutConflictError(f"buffer {name!r} is pinned twice with different layouts: {old!r} and, from "
                                  f"{source}, {layout!r}")
    pins[name] = layout
