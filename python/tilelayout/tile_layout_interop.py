"""Conversion between TVM TIRx's ``TileLayout`` / ``ComposeLayout`` and tilelayout's Layout / Fragment.

TIRx describes a tile as ``S[extents : strides@axis] + R[extents : strides@axis] + offset`` over named
axes; tilelayout describes it as expressions over the logical coordinates. The conversion rules:

Thread axes (``Axis.is_thread()``) combine into one CTA thread index. Each thread axis counts one
*subscope* inside its *scope* (``Axis.get_scope()`` / ``get_subscope()``); its unit is the number of
threads in one subscope, so::

    thread = tx + laneid + tid_in_wg + 32 * (warpid + wid_in_wg) + 128 * wgid

An axis whose scope is a warp or warpgroup is bounded by it (``laneid < 32``, ``tid_in_wg < 128``,
``wid_in_wg < 4``); a layout exceeding the bound is rejected because the sum would alias threads.
Grid and cluster axes (``bx``, ``cbx``, ...) are not CTA threads and are rejected.

Memory axes (``m``, ``TLane``, ``TCol``, ``P``, ``F``, ``Bank``) become separate outputs of the forward
index, in the fixed order :data:`MEMORY_AXIS_ORDER` (unknown memory axes follow, sorted by name).
A TileLayout with thread axes (in its shard or its replica) becomes a :class:`Fragment` whose
forward index is the memory outputs (``[0]``, one slot, when there are none); otherwise a
:class:`Layout`.

``R[...]`` iterators on thread axes become the fragment's replication: the replica variable ``_rep``
enumerates the replica iterators row-major (the first iterator is the outermost digit). Replicas on
memory axes have no tilelayout counterpart; ``memory_replica`` chooses between an error (default),
keeping the base copy only (``"base"``) or a trailing input dimension enumerating them (``"input"``).

The offset on memory axes stays in the forward index. The lowest thread (the thread-axis offset,
lowered by negative thread strides) becomes the fragment's thread range ``(lowest, extent)`` with a
0-based forward thread; a layout whose lowest thread is 0 gives an unbound fragment.

``ComposeLayout`` becomes a non-affine Layout whose single output is TVM's swizzled address.

The reverse direction (:func:`to_tile_layout`) decomposes every output into digits of the inputs
(iter-map normalisation, with exact numeric probing as fallback for static shapes), gives every
digit to the one output it feeds, and proves the result by converting it back. Threads are written
as ``laneid``/``warpid`` when the fragment spans a positive multiple of 32 threads starting at a
multiple of 32 and every thread digit splits at the warp boundary, otherwise as ``tx``. A
single-output Layout that is not affine is tried as an XOR swizzle of an affine layout
(``ComposeLayout``). Anything else raises :class:`LayoutError` naming what cannot be represented.

Size (over 800 lines): both directions of one conversion and their digit solvers share helpers; split,
each half would import the other's internals.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import sym, tirx
from tvm.ir import Range
from tvm.tirx.layout import Axis, ComposeLayout, Iter, TileLayout

from .errors import EvaluationError, LayoutError
from .evaluate import evaluate_grid
from .ffi_array import as_list
from .fragment import Fragment
from .layout import (Layout, _exprs_equal, is_static, normalize_shape, placeholder, rep_placeholder, shape_size,
                     substitute)

__all__ = ["from_tile_layout", "to_tile_layout", "memory_axes", "is_default_tile_layout", "MEMORY_AXIS_ORDER",
           "thread_axis_unit"]

#: output order of memory axes in the forward index
MEMORY_AXIS_ORDER = ("TLane", "TCol", "P", "Bank", "F", "m")

_UNITS = {"thread": 1, "warp": 32, "warpgroup": 128}       # threads in one subscope
_CAPACITY = {"warp": 32, "warpgroup": 128, "cta": None}     # threads in one scope (None: unbounded)
_SCOPE_NAMES = {2: "cluster", 3: "cta", 4: "warpgroup", 5: "warp", 6: "thread"}
_AXES_ATTR = "_tirx_memory_axes"
UNITS_AXES = ("tx", "laneid", "warpid")  # the thread axes to_tile_layout writes


# --------------------------------------------------------------------------- small helpers

def _int(x):
    """Python int for IntImm / int, else the expression unchanged."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, tvm.ir.Expr) and type(x).__name__ == "IntImm":
        return int(x.value)
    return x


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _axis_name(axis) -> str:
    return str(axis.name)


def _is_thread_axis(axis) -> bool:
    try:
        return bool(axis.is_thread())
    except Exception:  # an axis auto-registered by Axis.get has no thread/memory attribute
        raise LayoutError(f"axis {_axis_name(axis)!r} is not a registered TIRx axis (neither thread nor memory)") from None


def thread_axis_unit(axis) -> tuple[int, int | None]:
    """(threads per unit step, exclusive bound of the axis value or None) of a CTA thread axis."""
    name = _axis_name(axis)
    scope, sub = axis.get_scope(), axis.get_subscope()
    scope_name = _SCOPE_NAMES.get(int(scope.kind)) if scope is not None else None
    sub_name = _SCOPE_NAMES.get(int(sub.kind)) if sub is not None else None
    if scope_name not in _CAPACITY or sub_name not in _UNITS:
        raise LayoutError(f"thread axis {name!r} is a grid/cluster coordinate (it counts {sub_name or '?'}s), not a "
                          f"thread of one CTA; a Fragment describes the threads of a single CTA")
    unit, cap = _UNITS[sub_name], _CAPACITY[scope_name]
    if cap is not None and cap <= unit:
        raise LayoutError(f"thread axis {name!r} has an empty range ({sub_name} within {scope_name})")
    return unit, (None if cap is None else cap // unit)


def _order_memory_axes(names) -> list:
    known = [a for a in MEMORY_AXIS_ORDER if a in names]
    return known + sorted(n for n in names if n not in MEMORY_AXIS_ORDER)


def _inline_lets(expr):
    """Replace ``Let`` nodes (TVM's swizzle apply emits them) by their bodies with the value substituted."""
    def on_let(node):
        return substitute(node.body, {node.var: node.value})
    return tvm_ffi.structural_map(expr, (tirx.Let, on_let), order="post")


def _describe(tile_layout) -> str:
    return str(tile_layout)


def _iters(layout, field: str) -> list:
    base = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
    return list(getattr(base, field))


def _offsets(layout) -> dict:
    base = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
    return {_axis_name(a): _int(v) for a, v in base.offset.items()}


def memory_axes(tile_layout) -> list:
    """Names of the memory axes of ``tile_layout`` in the output order used by :func:`from_tile_layout`."""
    names = set()
    for it in _iters(tile_layout, "shard") + _iters(tile_layout, "replica"):
        if not _is_thread_axis(it.axis):
            names.add(_axis_name(it.axis))
    for a in (tile_layout.tile_layout if isinstance(tile_layout, ComposeLayout) else tile_layout).offset.keys():
        if not _is_thread_axis(a):
            names.add(_axis_name(a))
    return _order_memory_axes(names)


# --------------------------------------------------------------------------- TileLayout -> Layout / Fragment

#: TVM computes a TileLayout's size and applies it in 32-bit integers; beyond this its answers wrap around
INT32_MAX = 2**31 - 1


def _check_index_range(tile_layout, desc: str) -> None:
    """Refuse layouts whose element count or largest offset does not fit in int32: TVM's size() and apply()
    would silently wrap (a 65536 x 65536 tile reports size 0)."""
    extents, span = 1, 0
    for it in _iters(tile_layout, "shard"):
        ext, stride = _int(it.extent), _int(it.stride)
        if not (_is_int(ext) and _is_int(stride)):
            return
        extents *= ext
        span += (ext - 1) * abs(stride)
    if extents > INT32_MAX or span > INT32_MAX:
        raise LayoutError(f"{desc} has {extents} elements (largest offset {span}); TVM's layout arithmetic is 32-bit "
                          f"and cannot index past {INT32_MAX}: split the buffer into tiles below 2^31 elements")

def from_tile_layout(tile_layout, shape=None, *, memory_replica: str = "error") -> Layout:
    """Convert a TIRx ``TileLayout`` / ``ComposeLayout`` to a Layout (memory only) or Fragment (thread axes).

    ``shape`` is the logical shape the layout is applied to (row-major flattening, as
    ``tile_layout.apply(*coords, shape=shape)``); None means the layout's own 1-D size.
    ``memory_replica``: what to do with ``R[...]`` iterators on memory axes: ``"error"``,
    ``"base"`` (keep replica 0) or ``"input"`` (a trailing input dimension enumerates them).
    """
    if not isinstance(tile_layout, (TileLayout, ComposeLayout)):
        raise LayoutError(f"from_tile_layout expects a tvm.tirx.layout.TileLayout or ComposeLayout, "
                          f"got {type(tile_layout).__name__}: {tile_layout!r}")
    if memory_replica not in ("error", "base", "input"):
        raise LayoutError(f"memory_replica must be 'error', 'base' or 'input', got {memory_replica!r}")
    desc = _describe(tile_layout)
    _check_index_range(tile_layout, desc)
    size = _int(_call_tvm(lambda: tile_layout.size(), desc, "size"))
    shape = [size] if shape is None else normalize_shape(shape, "tile layout")
    total = shape_size(shape)
    if _is_int(total) and _is_int(size) and total > size:
        raise LayoutError(f"shape {shape} has {total} elements but {desc} covers only {size}")
    variables = [placeholder(k) for k in range(len(shape))]
    applied = _call_tvm(lambda: tile_layout.apply(*variables, shape=list(shape)), desc, "apply")
    coords = {str(k): _inline_lets(v) for k, v in applied.items()}

    shard, replica = _iters(tile_layout, "shard"), _iters(tile_layout, "replica")
    axes = {}  # name -> Axis
    for it in shard + replica:
        axes.setdefault(_axis_name(it.axis), it.axis)
    base = tile_layout.tile_layout if isinstance(tile_layout, ComposeLayout) else tile_layout
    for a in base.offset.keys():
        axes.setdefault(_axis_name(a), a)
    thread_axes = sorted(n for n, a in axes.items() if _is_thread_axis(a))
    mem_names = _order_memory_axes([n for n in axes if n not in thread_axes])
    units = {n: thread_axis_unit(axes[n]) for n in thread_axes}
    _check_axis_bounds(tile_layout, units, desc)

    thread_rep = [it for it in replica if _axis_name(it.axis) in units]
    mem_rep = [it for it in replica if _axis_name(it.axis) not in units]
    if mem_rep and memory_replica == "error":
        names = ", ".join(sorted({_axis_name(it.axis) for it in mem_rep}))
        raise LayoutError(f"{desc} replicates along memory axis {names}: a tilelayout Layout has no replicas "
                          f"outside threads (pass memory_replica='base' to keep copy 0 or 'input' to enumerate "
                          f"the copies as a trailing input dimension)")
    if mem_rep and memory_replica == "input" and isinstance(tile_layout, ComposeLayout):
        raise LayoutError(f"{desc}: memory replicas of a swizzled layout cannot be enumerated as an input")

    zero = tirx.const(0, "int32")
    mem_exprs = {n: coords.get(n, zero) for n in mem_names}
    if mem_rep and memory_replica == "input":
        mem_var = placeholder(len(shape))
        for name, contrib in _replica_terms(mem_rep, mem_var).items():
            mem_exprs[name] = mem_exprs[name] + contrib
        shape = shape + [shape_size([_int(it.extent) for it in mem_rep])]

    if not units:
        layout = Layout.from_exprs(shape, [mem_exprs[n] for n in mem_names] or [zero])
        setattr(layout, _AXES_ATTR, tuple(mem_names or ["m"]))
        return layout

    thread = zero
    for n in thread_axes:
        thread = thread + units[n][0] * coords.get(n, zero)
    rep = rep_placeholder()
    for name, contrib in _replica_terms(thread_rep, rep).items():
        thread = thread + units[name][0] * contrib
    t_off = _lowest_thread(tile_layout, units, desc)
    n_rep = shape_size([_int(it.extent) for it in thread_rep]) if thread_rep else 1
    if not _is_int(n_rep):
        raise LayoutError(f"{desc} has a symbolic replica extent {n_rep}")
    index = [mem_exprs[n] for n in mem_names] or [zero]
    frag = Fragment.from_exprs(shape, thread - t_off, index, n_rep)
    if t_off:
        frag = frag.bind_thread_range(t_off, frag.thread_extent)
    setattr(frag, _AXES_ATTR, tuple(mem_names or ["m"]))
    return frag


def _call_tvm(fn, desc: str, what: str):
    try:
        return fn()
    except LayoutError:
        raise
    except Exception as err:  # TVM InternalError / TypeError from the FFI
        msg = str(err).strip().splitlines()
        raise LayoutError(f"TVM cannot {what} {desc}: {msg[-1] if msg else type(err).__name__}") from None


def _lowest_thread(tile_layout, units: dict, desc: str) -> int:
    """Lowest combined thread of the layout: the thread offset plus every negative stride at its far end."""
    low = 0
    for n, off in _offsets(tile_layout).items():
        if n in units:
            if not _is_int(off):
                raise LayoutError(f"{desc} has a symbolic offset {off} on thread axis {n!r}; a thread range needs ints")
            low += units[n][0] * off
    for it in _iters(tile_layout, "shard") + _iters(tile_layout, "replica"):
        name, ext, stride = _axis_name(it.axis), _int(it.extent), _int(it.stride)
        if name in units and _is_int(ext) and _is_int(stride) and stride < 0:
            low += units[name][0] * (ext - 1) * stride
    if low < 0:
        raise LayoutError(f"{desc} reaches thread {low}: threads must be non-negative")
    return low


def _replica_terms(iters: Sequence, var) -> dict:
    """Per-axis contribution of replica index ``var`` decomposed row-major over ``iters``."""
    out: dict = {}
    extents = [_int(it.extent) for it in iters]
    inner = 1
    for it, ext in reversed(list(zip(iters, extents))):
        digit = tirx.floormod(tirx.floordiv(var, inner), ext) if inner > 1 else tirx.floormod(var, ext)
        name = _axis_name(it.axis)
        term = digit * _int(it.stride)
        out[name] = out[name] + term if name in out else term
        inner *= ext
    return out


def _check_axis_bounds(tile_layout, units: dict, desc: str) -> None:
    """Bounded thread axes (laneid < 32, ...) must stay in range, else the combined index aliases."""
    offsets = _offsets(tile_layout)
    lo, hi = {}, {}
    for it in _iters(tile_layout, "shard") + _iters(tile_layout, "replica"):
        name = _axis_name(it.axis)
        ext, stride = _int(it.extent), _int(it.stride)
        if name not in units or not (_is_int(ext) and _is_int(stride)):
            continue
        span = (ext - 1) * stride
        lo[name] = lo.get(name, 0) + min(span, 0)
        hi[name] = hi.get(name, 0) + max(span, 0)
    for name, (_, bound) in units.items():
        off = offsets.get(name, 0)
        if bound is None or not _is_int(off):
            continue
        a, b = lo.get(name, 0) + off, hi.get(name, 0) + off
        if a < 0 or b >= bound:
            raise LayoutError(f"{desc} puts axis {name!r} in [{a}, {b}], outside [0, {bound}): the thread index "
                              f"would alias threads of the next {'warp' if bound == 32 else 'unit'}")


# --------------------------------------------------------------------------- Layout / Fragment -> TileLayout

class _Digit:
    """A digit ``(x // lower) % extent`` of input dimension ``dim`` and its stride in each output."""

    __slots__ = ("dim", "lower", "extent", "strides")

    def __init__(self, dim, lower, extent):
        self.dim, self.lower, self.extent, self.strides = dim, lower, extent, {}


def to_tile_layout(layout: Layout, axes: Sequence[str] | None = None):
    """Express ``layout`` as a TIRx ``TileLayout`` (or ``ComposeLayout`` for a recognised swizzle).

    ``axes`` names the memory axis of each forward-index output (e.g. ``["TLane", "TCol"]``); by
    default the axes recorded by :func:`from_tile_layout`, else ``m`` for a single output, else the
    outputs are linearised row-major into ``m``.
    """
    if not isinstance(layout, Layout):
        raise LayoutError(f"to_tile_layout expects a tilelayout Layout or Fragment, got {type(layout).__name__}")
    is_frag = isinstance(layout, Fragment)
    mem_axes, index = _memory_outputs(layout, axes)
    shape = layout.input_shape
    exprs = list(index)
    in_shape = list(shape)
    if is_frag:
        thread = layout.forward_thread
        if layout.replicate_size > 1:
            in_shape.append(layout.replicate_size)
            thread = substitute(thread, {rep_placeholder(): placeholder(len(shape))})
        exprs.append(thread)
    errors = []
    for method in (_digits_symbolic, _digits_numeric):
        try:
            found = method(exprs, in_shape)
        except (LayoutError, EvaluationError) as err:
            errors.append(str(err))
            continue
        if found is None:
            continue
        try:
            result = _assemble(found, mem_axes, len(shape), layout if is_frag else None, layout)
        except LayoutError as err:
            errors.append(str(err))
            continue
        if _converts_back(result, layout, mem_axes, index):
            return result
        errors.append("the digit decomposition did not reproduce the layout")
    if not is_frag and len(index) == 1 and mem_axes == ["m"] and layout.is_static:
        result = _find_swizzle(layout, index[0])
        if result is not None:
            return result
    why = errors[0] if errors else "an output is not affine in split digits of the inputs"
    what = "thread map or slot" if is_frag else "forward index"
    raise LayoutError(f"cannot represent {layout!r} as a TIRx TileLayout: its {what} is not a sum of "
                      f"(coordinate digit * stride) terms with one axis per digit ({why})")


def _memory_outputs(layout: Layout, axes) -> tuple[list, list]:
    index = layout.forward_index
    if axes is None:
        stash = getattr(layout, _AXES_ATTR, None)
        if stash is not None and len(stash) == len(index):
            axes = list(stash)
        elif len(index) == 1:
            axes = ["m"]
    if axes is None:  # several outputs, no names: row-major linearisation into m
        out_shape = layout.output_shape
        if not all(_is_int(s) for s in out_shape):
            raise LayoutError(f"cannot linearise the outputs of {layout!r}: symbolic output shape {out_shape}; "
                              f"pass axes=[...] naming one memory axis per output")
        flat = tirx.const(0, "int32")
        for e, s in zip(index, out_shape):
            flat = flat * s + e
        return ["m"], [flat]
    axes = [str(a) for a in axes]
    if len(axes) != len(index):
        raise LayoutError(f"axes {axes} name {len(axes)} outputs but {layout!r} has {len(index)}")
    if len(set(axes)) != len(axes):
        raise LayoutError(f"axes {axes} repeat an axis")
    for a in axes:
        if a not in MEMORY_AXIS_ORDER and not _is_registered_memory_axis(a):
            raise LayoutError(f"axis {a!r} is not a TIRx memory axis (known: {', '.join(MEMORY_AXIS_ORDER)})")
    return axes, list(index)


def _is_registered_memory_axis(name: str) -> bool:
    from tvm.tirx import layout as _tl
    if name not in getattr(_tl, "_AXIS_NAMES", ()):
        return False  # Axis.get would auto-register an axis with no memory/thread attribute
    try:
        return bool(Axis.get(name).is_memory())
    except Exception:
        return False


# ---- digit decomposition (symbolic: TVM iter maps) ----

def _digits_symbolic(exprs: list, shape: list):
    """Per output: [(dim, lower, extent, stride)] and base, from ``tvm.sym.normalize_to_iter_sum``."""
    variables = [placeholder(k) for k in range(len(shape))]
    index_of = {v.name: k for k, v in enumerate(variables)}
    dom = {v: Range(0, s) for v, s in zip(variables, shape)}
    pieces, bases = [], []
    for e in exprs:
        try:
            norm = sym.normalize_to_iter_sum(e, dom)
        except Exception:
            return None
        base = _int(norm.base)
        if not _is_int(base):
            return None
        out = []
        for split in norm.args:
            if not _split_pieces(split.source.source, _int(split.lower_factor), _int(split.extent),
                                 _int(split.scale), index_of, out):
                return None
        pieces.append(out)
        bases.append(base)
    return _refine(pieces, bases, shape)


def _split_pieces(source, lower, extent, scale, index_of, out) -> bool:
    """Digits [lower, lower*extent) of ``source`` (a Var or fused IterSumExpr) scaled by ``scale``."""
    if not _is_int(lower):
        return False
    if isinstance(source, sym.IterSumExpr):
        if not (_is_int(extent) and _is_int(scale)) or _int(source.base) != 0:
            return False
        lo, hi = lower, lower * extent
        for comp in source.args:
            c_scale, c_ext = _int(comp.scale), _int(comp.extent)
            if not (_is_int(c_scale) and _is_int(c_ext)) or c_scale <= 0:
                return False
            a, b = max(lo, c_scale), min(hi, c_scale * c_ext)
            if a >= b:
                continue
            if a % c_scale or b % a or a % lo:
                return False
            if not _split_pieces(comp.source.source, _int(comp.lower_factor) * (a // c_scale), b // a,
                                 scale * (a // lo), index_of, out):
                return False
        return True
    name = getattr(source, "name", None)
    if name not in index_of:
        return False
    out.append((index_of[name], lower, extent, scale))
    return True


# ---- digit decomposition (numeric: probing + exact check) ----

def _digits_numeric(exprs: list, shape: list):
    """The same decomposition found by probing each output along each input axis, proved on every point."""
    if not is_static(shape) or shape_size(shape) > (1 << 22):
        return None
    variables = [placeholder(k) for k in range(len(shape))]
    tab = evaluate_grid(exprs, variables, shape)
    pieces, bases = [], []
    for k in range(len(exprs)):
        found = _probe_table(tab[..., k], shape)
        if found is None:
            return None
        pieces.append(found[0])
        bases.append(found[1])
    return _refine(pieces, bases, shape)


def _probe_table(values: np.ndarray, shape: list):
    """Digits of one output table: base + sum over dims of mixed-radix digits, or None."""
    origin = (0,) * len(shape)
    base = int(values[origin])
    out, pred = [], np.full(values.shape, base, dtype=np.int64)
    for d, n in enumerate(shape):
        line = values[tuple(slice(None) if k == d else 0 for k in range(len(shape)))] - base
        digits = _probe_line(line)
        if digits is None:
            return None
        x = np.arange(n, dtype=np.int64)
        rebuilt = np.zeros(n, dtype=np.int64)
        for lower, ext, stride in digits:
            rebuilt += (x // lower) % ext * stride
            out.append((d, lower, ext, stride))
        if not np.array_equal(rebuilt, line):
            return None
        view = [1] * len(shape)
        view[d] = n
        pred = pred + line.reshape(view)
    if not np.array_equal(pred, values):
        return None
    return out, base


def _probe_line(f: np.ndarray):
    """Mixed-radix digits (lower, extent, stride) reproducing f(x) - f(0) along one axis."""
    n = len(f)
    digits, lower = [], 1
    while lower < n:
        stride = int(f[lower])
        t = 1
        while lower * (t + 1) <= n - 1 and int(f[lower * (t + 1)]) == (t + 1) * stride:
            t += 1
        ext = t + 1
        if lower * ext >= n:
            ext = -(-n // lower)
        elif n % (lower * ext):
            return None
        digits.append((lower, ext, stride))
        lower *= ext
    return digits


# ---- common refinement and assembly ----

def _refine(pieces: list, bases: list, shape: list):
    """Cut every input dim at every digit boundary any output uses; strides per output per digit."""
    cuts = [{1} for _ in shape]
    for out in pieces:
        for d, lower, ext, _ in out:
            cuts[d].add(lower)
            top = lower * ext
            if _is_int(top) and (not _is_int(shape[d]) or top < shape[d]):
                cuts[d].add(top)
    digits = []
    for d, n in enumerate(shape):
        chain = sorted(cuts[d])
        if _is_int(n):
            chain = [c for c in chain if c < n]
            if not chain:  # extent 1: no digit
                digits.append([])
                continue
        for a, b in zip(chain, chain[1:]):
            if b % a:
                raise LayoutError(f"digits of input {d} overlap (boundaries {chain}); not a mixed-radix split")
        if _is_int(n) and n % chain[-1] and chain[-1] > 1:
            raise LayoutError(f"input {d} of extent {n} is not a multiple of its digit boundary {chain[-1]}")
        dim_digits = []
        for a, b in zip(chain, chain[1:] + [None]):
            if b is None:
                ext = -(-n // a) if _is_int(n) else sym.Analyzer().simplify(tirx.floordiv(n, a))
            else:
                ext = b // a
            dim_digits.append(_Digit(d, a, ext))
        digits.append(dim_digits)
    for k, out in enumerate(pieces):
        for d, lower, ext, stride in out:
            top = lower * ext
            for dig in digits[d]:  # the chain cuts at lower and top, so a digit starting inside lies inside
                if dig.lower >= lower and (not _is_int(top) or dig.lower < top):
                    dig.strides[k] = dig.strides.get(k, 0) + stride * (dig.lower // lower)
    return digits, bases


def _thread_mode(layout: Fragment, thread_digits: list, t_base: int):
    """'lanewarp' when threads split cleanly at the warp boundary, else 'tx'."""
    rng = layout.thread_range
    lo = (rng[0] if rng is not None else 0) + t_base
    n = rng[1] if rng is not None else layout.thread_extent
    if not (_is_int(n) and n >= 32 and n % 32 == 0 and lo % 32 == 0):
        return "tx"
    lane_hi = 0
    for ext, stride in thread_digits:
        if not (_is_int(ext) and _is_int(stride)):
            return "tx"
        if stride < 0:
            return "tx"
        if stride % 32 == 0 or stride == 0:
            continue
        if stride * ext <= 32:
            lane_hi += (ext - 1) * stride
            continue
        if 32 % stride or ext % (32 // stride):
            return "tx"
        lane_hi += (32 // stride - 1) * stride
    return "lanewarp" if lane_hi < 32 else "tx"


def _thread_iters(ext, stride, mode) -> list:
    """Iters (outermost first) placing a thread digit of ``stride`` on tx or on laneid/warpid."""
    if mode == "tx":
        return [Iter(ext, stride, "tx")]
    if stride == 0:
        return [Iter(ext, 0, "laneid")]
    if stride % 32 == 0:
        return [Iter(ext, stride // 32, "warpid")]
    if stride * ext <= 32:
        return [Iter(ext, stride, "laneid")]
    inner = 32 // stride
    return [Iter(ext // inner, 1, "warpid"), Iter(inner, stride, "laneid")]


def _assemble(found, mem_axes: list, n_coords: int, frag: Fragment | None, owner: Layout):
    """Iters from digits: coordinate digits -> shard (outermost first), replica digits -> replica."""
    digits, bases = found
    is_frag = frag is not None
    t_out = len(mem_axes) if is_frag else None
    owners = []  # (digit, output or None)
    for dim_digits in digits:
        for dig in reversed(dim_digits):  # outermost digit first, as TileLayout flattens row-major
            used = [k for k, s in sorted(dig.strides.items()) if not _is_zero(s)]
            if len(used) > 1:
                names = [("thread" if k == t_out else mem_axes[k]) for k in used]
                raise LayoutError(f"digit [{dig.lower}, {dig.lower}*{dig.extent}) of input {dig.dim} feeds "
                                  f"{' and '.join(names)}; a TileLayout iterator has one axis")
            owners.append((dig, used[0] if used else None))
    t_base = bases[t_out] if is_frag else 0
    mode = None
    if is_frag:
        thread_digits = [(dig.extent, dig.strides[k]) for dig, k in owners if k == t_out]
        mode = _thread_mode(frag, thread_digits, t_base)
    shard, replica = [], []
    for dig, k in owners:
        target = replica if dig.dim >= n_coords else shard
        if k is None:
            axis = ("tx" if mode == "tx" else "laneid") if dig.dim >= n_coords else mem_axes[0]
            target.append(Iter(dig.extent, 0, axis))
        elif k == t_out:
            target.extend(_thread_iters(dig.extent, dig.strides[k], mode))
        else:
            target.append(Iter(dig.extent, dig.strides[k], mem_axes[k]))
    offset = {}
    for k, a in enumerate(mem_axes):
        if bases[k]:
            offset[a] = bases[k]
    if is_frag:
        t_off = t_base + (frag.thread_range[0] if frag.thread_range is not None else 0)
        if t_off:
            if mode == "tx":
                offset["tx"] = t_off
            else:
                if t_off % 32:
                    offset["laneid"] = t_off % 32
                if t_off // 32:
                    offset["warpid"] = t_off // 32
    thread_axis = "tx" if mode == "tx" else "laneid"
    if is_frag and not any(_is_thread_axis(it.axis) for it in shard + replica) and not offset.keys() & set(UNITS_AXES):
        shard.append(Iter(1, 1, thread_axis))  # a one-thread fragment still names a thread axis
    if not shard:
        shard = [Iter(1, 1, mem_axes[0])]
    try:
        return TileLayout.from_iters(shard, replica, offset)
    except Exception as err:
        msg = str(err).strip().splitlines()
        raise LayoutError(f"TVM rejects the TileLayout built for {owner!r}: {msg[-1] if msg else err}") from None


def _converts_back(result, layout: Layout, mem_axes: list, index: list) -> bool:
    try:
        back = from_tile_layout(result, layout.input_shape)
    except (LayoutError, EvaluationError):
        return False
    return _same_map(back, layout, mem_axes, index)


def _same_map(back: Layout, layout: Layout, mem_axes: list, index: list) -> bool:
    """Same outputs (in ``mem_axes`` order), same threads and replication; thread range min only."""
    got_axes = list(getattr(back, _AXES_ATTR, ("m",)))
    got = dict(zip(got_axes, back.forward_index))
    zero = tirx.const(0, "int32")
    want_exprs = list(index)
    got_exprs = [got.get(a, zero) for a in mem_axes]
    if any(a not in mem_axes for a in got_axes if not _is_const_zero(got[a])):
        return False
    shape = layout.input_shape
    variables = [placeholder(k) for k in range(len(shape))]
    if isinstance(layout, Fragment) != isinstance(back, Fragment):
        return False
    if isinstance(layout, Fragment):
        if back.replicate_size != layout.replicate_size:
            return False
        lo_back = back.thread_range[0] if back.thread_range is not None else 0
        lo = layout.thread_range[0] if layout.thread_range is not None else 0
        rep = rep_placeholder()
        want_exprs.append(layout.forward_thread + lo)
        got_exprs.append(back.forward_thread + lo_back)
        variables = variables + [rep]
        shape = shape + [layout.replicate_size]
    try:
        return _exprs_equal(got_exprs, want_exprs, variables, shape)
    except (LayoutError, EvaluationError):
        return False


def _is_const_zero(e) -> bool:
    return type(e).__name__ == "IntImm" and int(e.value) == 0


def _is_zero(s) -> bool:
    """A stride that is provably 0 (ints, IntImm, or an expression the analyzer folds to 0)."""
    if _is_int(s):
        return s == 0
    return _is_const_zero(sym.Analyzer().simplify(s))


# ---- swizzles ----

def _swizzle_np(m: np.ndarray, per_element: int, swizzle_len: int, atom_len: int, inner: bool) -> np.ndarray:
    """TVM's XOR swizzle of element address ``m`` (an involution, so it also unswizzles)."""
    low = m & ((1 << per_element) - 1)
    q = m >> per_element
    mask = (1 << swizzle_len) - 1
    q = q ^ ((q >> atom_len) & mask) if inner else q ^ ((q & mask) << atom_len)
    return (q << per_element) | low


def _find_swizzle(layout: Layout, expr):
    """Recognise ``ComposeLayout(M, B, S, affine)``: unswizzle the table and look for an affine map."""
    shape = layout.input_shape
    if shape_size(shape) > (1 << 20):
        return None
    try:
        values = evaluate_grid([expr], layout.forward_vars, shape)[..., 0]
    except EvaluationError:
        return None
    if values.min() < 0:
        return None
    bits = max(int(values.max()).bit_length(), 1)
    for inner in (True, False):
        for per_element in range(0, bits):
            for swizzle_len in range(1, bits - per_element + 1):
                for atom_len in range(swizzle_len, bits - per_element - swizzle_len + 1):
                    pre = _swizzle_np(values, per_element, swizzle_len, atom_len, inner)
                    found = _probe_table(pre, shape)
                    if found is None:
                        continue
                    digits = _refine([found[0]], [found[1]], shape)
                    try:
                        tile = _assemble(digits, ["m"], len(shape), None, layout)
                        comp = ComposeLayout(per_element, swizzle_len, atom_len, tile, inner)
                        back = from_tile_layout(comp, shape)
                    except (LayoutError, EvaluationError):
                        continue
                    except Exception:  # TVM rejects the parameters
                        continue
                    if _same_map(back, layout, ["m"], [expr]):
                        return comp
    return None


# --------------------------------------------------------------------------- defaults on buffers

#: (structural hash, static shape) -> [(layout, answer)]: the front end and the pin reader ask about every
#: buffer of every kernel, and the answer is a pure function of the layout's structure and the shape
_DEFAULT_MEMO: dict = {}
_DEFAULT_MEMO_LIMIT = 1 << 12


def clear_caches() -> None:
    """Forget the default-layout answers (benchmarks time cold runs)."""
    _DEFAULT_MEMO.clear()


def is_default_tile_layout(layout, shape) -> bool:
    """True for None and for the row-major identity TIRx gives every buffer (``TileLayout(S[shape])``).

    Robust to the spelling: any TileLayout with only ``m`` iterators, no replica and no offset whose
    map equals the row-major flat index over ``shape`` counts as the default.
    """
    if layout is None:
        return True
    if not isinstance(layout, TileLayout):
        return False
    shape = as_list(shape)
    sizes = tuple(_int(s) for s in shape)
    if not all(isinstance(s, int) for s in sizes):
        return _is_default(layout, shape)
    key = (tvm_ffi.structural_hash(layout), sizes)
    for seen, answer in _DEFAULT_MEMO.get(key, ()):
        if seen.same_as(layout) or tvm_ffi.structural_equal(seen, layout):
            return answer
    answer = _is_default(layout, shape)
    if len(_DEFAULT_MEMO) >= _DEFAULT_MEMO_LIMIT:
        _DEFAULT_MEMO.clear()
    _DEFAULT_MEMO.setdefault(key, []).append((layout, answer))
    return answer


def _is_default(layout, shape) -> bool:
    if _is_row_major_identity(layout, shape):       # decided in Python ints: TVM's size() wraps past 2^31
        return True
    try:
        if layout.is_trivial():
            return _int(layout.size()) == shape_size([_int(s) for s in shape]) if is_static(
                [_int(s) for s in shape]) else True
    except Exception:
        pass
    if list(layout.replica) or dict(layout.offset):
        return False
    if any(_axis_name(it.axis) != "m" for it in layout.shard):
        return False
    try:
        conv = from_tile_layout(layout, [_int(s) for s in shape])
    except (LayoutError, EvaluationError):
        return False
    flat = tirx.const(0, "int32")
    for v, s in zip(conv.forward_vars, conv.input_shape):
        flat = flat * s + v
    try:
        return _exprs_equal(conv.forward_index, [flat], conv.forward_vars, conv.input_shape)
    except (LayoutError, EvaluationError):
        return False


def _is_row_major_identity(layout, shape) -> bool:
    """``S[(e0, e1, ...):(s0, s1, ...)]`` on memory axis ``m`` with row-major strides over exactly the buffer's
    element count: the flat index maps to itself whatever the buffer's shape."""
    if as_list(layout.replica) or dict(layout.offset):
        return False
    iters = as_list(layout.shard)
    if any(_axis_name(it.axis) != "m" for it in iters):
        return False
    extents, strides = [_int(it.extent) for it in iters], [_int(it.stride) for it in iters]
    sizes = [_int(s) for s in shape]
    if not all(_is_int(v) for v in extents + strides + sizes):
        return False
    expected = 1
    for ext, stride in zip(reversed(extents), reversed(strides)):
        if ext != 1 and stride != expected:
            return False
        expected *= ext
    return expected == shape_size(sizes)

