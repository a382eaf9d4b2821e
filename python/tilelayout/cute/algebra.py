"""The CuTe layout algebra, one free function per operation (pycute's names and results).

Every operation whose precondition fails raises ``CuteError`` with the reason; none returns a silently
wrong layout (pycute asserts or floors in several of these places: we check).
"""
from __future__ import annotations

import functools

import numpy as np
import tvm
from tvm import sym, tirx

from .int_tuple import CuteError, ScaledBasis, ceil_div, crd2idx, flatten, fmt, is_int, is_tuple, static
from .core import (_by_mode, _from_lists, coalesce, compose_layouts, complement, filter, left_inverse,
                   right_inverse)
from .layout import Layout, cosize, make_layout, size
from .swizzle import ComposedLayout

__all__ = ["coalesce", "filter", "composition", "complement", "right_inverse", "left_inverse", "logical_divide",
           "zipped_divide", "tiled_divide", "logical_product", "zipped_product", "tiled_product", "blocked_product",
           "raked_product", "with_shape", "restrict", "append"]


# Functional composition A o B: (A o B)(c) = A(B(c)); B may be a tuple of layouts (by mode), an int, or None.
def composition(a, b):
    if isinstance(a, ComposedLayout):
        return ComposedLayout(a.swizzle, a.offset, composition(a.layout, b))
    if b is None:
        return a
    if is_int(b):
        return compose_layouts(a, Layout(b, 1))
    if is_tuple(b):
        return _by_mode(composition, a, b, "composition")
    if not isinstance(b, Layout):
        raise CuteError(f"composition: right operand must be a Layout, an int, a tuple or None, got {b!r}")
    return compose_layouts(a, b)


# The same composition for flat integer layouts held as (extent, stride) lists, without Layout objects: the
# mode list of flatten(composition(Layout(a), Layout(b))) (a scorer's inner loop composes thousands of these).
# Raises CuteError exactly where composition() does; the message is composition()'s own only via that path.
def coalesce_modes(modes: list) -> list:
    out = []
    for s, d in modes:
        if s == 1:
            continue
        if out and out[-1][0] * out[-1][1] == d:
            out[-1] = (out[-1][0] * s, out[-1][1])
        else:
            out.append((s, d))
    return out or [(1, 0)]


def compose_modes(a: list, b: list) -> list:
    flat = coalesce_modes(a)
    out = []
    for s, d in b:
        out += _compose_one(flat, s, d)
    return out


def right_inverse_modes(modes: list) -> list:
    """right_inverse of a flat integer layout held as (extent, stride) modes, as a coalesced mode list."""
    flat = coalesce_modes(modes)
    rstrides, acc = [], 1
    for s, _ in flat:
        rstrides.append(acc)
        acc *= s
    res, cur, used = [], 1, set()
    while True:
        hit = next((i for i, (s, d) in enumerate(flat) if i not in used and d == cur), None)
        if hit is None:
            break
        used.add(hit)
        res.append((flat[hit][0], rstrides[hit]))
        cur = flat[hit][0] * flat[hit][1]
    return coalesce_modes(res) if res else [(1, 0)]


def _compose_one(flat: list, s: int, d: int) -> list:
    if d == 0:
        return [(s, 0)]
    sign = 1 if d > 0 else -1
    res = []
    rest_s, rest_d = s, abs(d)
    for cs, cd in flat[:-1]:
        if rest_s != 1:
            if cs % rest_d and rest_d % cs:
                raise CuteError("composition: stride divisibility fails")
            new = min(max(1, cs // rest_d), rest_s)
            if new != 1:
                if rest_s % new:
                    raise CuteError("composition: shape divisibility fails")
                res.append((new, sign * rest_d * cd))
            rest_s //= new
        rest_d = ceil_div(rest_d, cs)
    if rest_s != 1 or not res:
        res.append((rest_s, sign * rest_d * flat[-1][1]))
    return res


def _tiler_op(op):
    """``op(a, b)`` for a Layout ``b``, extended to every tiler: None leaves ``a``, an int is ``Layout(b)``, a tuple
    applies by mode."""
    @functools.wraps(op)
    def apply(a: Layout, b) -> Layout:
        if b is None:
            return a
        if is_int(b):
            b = Layout(b)
        if is_tuple(b):
            return _by_mode(apply, a, b, op.__name__)
        return op(a, b)
    return apply


# Split A into (tile B, rest): A o (B, complement(B, size(A))); tuples of tilers apply by mode.
@_tiler_op
def logical_divide(a: Layout, b: Layout) -> Layout:
    return composition(a, make_layout(b, complement(b, coalesce(a).shape)))


# Repeat A over B: (A, complement(A, size(A)*cosize(B)) o B); tuples of layouts apply by mode.
@_tiler_op
def logical_product(a: Layout, b: Layout) -> Layout:
    return make_layout(a, composition(complement(a, size(a) * cosize(b)), b))


# Apply a by-mode divide/product and gather the tile modes first and the rest modes second.
def _hier_unzip(splitter, a: Layout, b) -> Layout:
    if b is None:
        return make_layout(Layout(1, 0), a)
    if is_tuple(b):
        if len(a) < len(b):
            raise CuteError(f"{splitter.__name__}: {a} has fewer modes than the tiler {b!r}")
        split = [_hier_unzip(splitter, a[i], b[i]) for i in range(len(b))]
        return make_layout(make_layout([x[0] for x in split]),
                           make_layout([x[1] for x in split] + [a[i] for i in range(len(b), len(a))]))
    return splitter(a, b)


# logical_divide with modes gathered ((tile...), (rest...)).
def zipped_divide(a: Layout, b) -> Layout:
    return _hier_unzip(logical_divide, a, b)


# zipped_divide with the rest modes spread out: (tile, rest0, rest1, ...).
def tiled_divide(a: Layout, b) -> Layout:
    return _spread_rest(zipped_divide(a, b))


def _spread_rest(r: Layout) -> Layout:
    """(tile, (rest0, rest1, ...)) -> (tile, rest0, rest1, ...); a rank-1 rest mode stays as it is (a 1-tuple
    included), as C++'s ``result(_, repeat<rank<1>(result)>(_))`` leaves it."""
    return r if len(r[1]) == 1 else make_layout([r[0]] + list(r[1]))


# logical_product with modes gathered ((block...), (repeat...)).
def zipped_product(a: Layout, b) -> Layout:
    return _hier_unzip(logical_product, a, b)


# zipped_product with the repeat modes spread out: (block, rep0, rep1, ...).
def tiled_product(a: Layout, b) -> Layout:
    return _spread_rest(zipped_product(a, b))


# Pad a layout with 1:0 modes up to rank n.
def append(layout: Layout, n: int) -> Layout:
    if len(layout) >= n:
        return layout
    return make_layout(list(layout) + [Layout(1, 0)] * (n - len(layout)))


def _zip_product(a: Layout, b: Layout, block_first: bool) -> Layout:
    n = max(len(a), len(b))
    p = logical_product(append(a, n), append(b, n))
    x, y = (p[0], p[1]) if block_first else (p[1], p[0])
    if n == 1:
        return Layout(((x.shape, y.shape),), ((x.stride, y.stride),))
    return make_layout([make_layout(x[i], y[i]) for i in range(n)])


# Mode i of the result is (A_i, B_i) (CUTLASS 4.x keeps both, no coalescing): A is a contiguous block repeated
# in B's order.
def blocked_product(a: Layout, b: Layout) -> Layout:
    return _zip_product(a, b, block_first=True)


# Mode i of the result is (B_i, A_i): A's elements interleaved ("raked") across B's repeats.
def raked_product(a: Layout, b: Layout) -> Layout:
    return _zip_product(a, b, block_first=False)


# The same map read through a new (column-major) shape of the same size: layout o make_layout(shape).
def with_shape(layout: Layout, shape) -> Layout:
    target = Layout(shape)
    if is_int(size(layout)) and is_int(size(target)) and size(layout) != size(target):
        raise CuteError(f"with_shape: {layout} has size {size(layout)}, shape {fmt(target.shape)} has {size(target)}")
    return composition(layout, target)


def _with_shape_method(self: Layout, *shape) -> Layout:
    """``layout.with_shape(s)`` (or ``with_shape(*s)``): the free function as a method of Layout."""
    return with_shape(self, shape[0] if len(shape) == 1 else shape)


Layout.with_shape = _with_shape_method       # see Layout's docstring: layout.py does not import the algebra


# ----------------------------------------------------------------------------- probing helpers (also used by convert)

def values(layout: Layout, idx: np.ndarray) -> np.ndarray:
    """Layout at integer indices ``idx`` (exactly, numpy): shape (n,) for integer strides, (n, k) for basis strides."""
    shapes = [static(s, "evaluate") for s in flatten(layout.shape)]
    strides = flatten(layout.stride)
    basis = any(isinstance(d, ScaledBasis) for d in strides)
    cols = 1 + max((d.mode[0] for d in strides if isinstance(d, ScaledBasis)), default=0)
    out = np.zeros((len(idx), cols) if basis else len(idx), dtype=np.int64)
    pre = 1
    for k, (s, d) in enumerate(zip(shapes, strides)):
        crd = idx // pre if k == len(shapes) - 1 else (idx // pre) % s
        pre *= s
        if isinstance(d, ScaledBasis):
            if len(d.mode) != 1:
                raise CuteError(f"cannot evaluate nested basis stride {d} of {layout}")
            out[:, d.mode[0]] += crd * static(d.value, "evaluate")
        elif basis:
            if static(d, "evaluate") != 0:
                raise CuteError(f"{layout} mixes integer and basis strides")
        else:
            out += crd * static(d, "evaluate")
    return out


def fit_1d(vals: np.ndarray):
    """Greedy (extent, stride) modes reproducing ``vals`` along multiples of each mode's base, or None.

    ``vals`` is (n,) or (n, k) with ``vals[0] == 0``; strides come back as ints or length-k vectors. The caller
    proves the whole function; this only proposes, taking at each base the largest divisor extent on which the
    values stay linear.
    """
    n = len(vals)
    modes, base = [], 1
    while base < n:
        m = n // base
        step = vals[base]
        j = np.arange(m)
        line = vals[base * j]
        ok = (line == (j[:, None] * step if vals.ndim == 2 else j * step))
        ok = ok.all(axis=1) if vals.ndim == 2 else ok
        kb = m if ok.all() else int(np.argmin(ok))
        e = max(x for x in range(1, kb + 1) if m % x == 0)
        if e == 1:
            return None
        modes.append((e, step))
        base *= e
    return modes


def eval_modes(modes, n: int, tail: tuple = ()) -> np.ndarray:
    """Values of fitted modes at 0..n-1 (the inverse of ``fit_1d``); ``tail`` is (k,) for vector values."""
    idx = np.arange(n, dtype=np.int64)
    out = np.zeros((n,) + tuple(tail), dtype=np.int64)
    pre = 1
    for e, st in modes:
        crd = (idx // pre) % e
        out += crd[:, None] * st if out.ndim == 2 else crd * st
        pre *= e
    return out


def _window(entry, extent: int, i: int, layout: Layout):
    """(begin, extent) of one region entry: None, an int, (begin, extent), a slice or a tvm Range."""
    if entry is None:
        return 0, extent
    if isinstance(entry, slice):
        if entry.step not in (None, 1):
            raise CuteError(f"restrict {layout}: mode {i} slice step must be 1, got {entry.step}")
        b = 0 if entry.start is None else _origin(entry.start)
        stop = extent if entry.stop is None else entry.stop
        return b, static(sym.Analyzer().simplify(stop - b) if not is_int(b) else stop - b, "restrict")
    if is_int(entry):
        return int(entry), 1
    if hasattr(entry, "min") and hasattr(entry, "extent"):
        return _origin(entry.min), static(entry.extent, "restrict")
    if isinstance(entry, (tuple, list)) and len(entry) == 2:
        return _origin(entry[0]), static(entry[1], "restrict")
    raise CuteError(f"restrict {layout}: mode {i} region {entry!r} is not None, an int, (begin, extent) or a slice")


def _origin(b):
    """A window's begin: an int, or an integer PrimExpr (a symbolic origin such as ``j * 64``)."""
    if is_int(b) or isinstance(b, tirx.IntImm):
        return static(b, "restrict")
    if isinstance(b, tvm.ir.Expr):
        return b
    raise CuteError(f"restrict: window origin {b!r} is not an int or a PrimExpr")


def _aligned_window(mode: Layout, b, e: int, n: int, i: int, layout: Layout) -> None:
    """A symbolic origin ``b`` is allowed when b + c (c < e) provably changes only digits that do not carry:
    b a multiple of a prefix product P >= e of the mode's extents, or b a multiple of e where e is P_m * t
    for a prefix product P_m and t dividing the next extent (or that extent is the last, which absorbs).
    Then mode(b + c) == mode(b) + mode(c) for every c in the window."""
    az = sym.Analyzer()
    extents = [static(s, "restrict") for s in flatten(mode.shape)]

    def multiple(k: int) -> bool:
        return bool(az.can_prove(tirx.floormod(b, k) == 0))

    ok, pre = False, 1
    for m, s in enumerate(extents):
        if e % pre == 0 and ((e // pre) <= s and s % (e // pre) == 0 or m == len(extents) - 1) and multiple(e):
            ok = True
        pre *= s
        if pre >= e and multiple(pre):
            ok = True
        if ok or pre >= e and e % pre:
            break
    if not ok:
        raise CuteError(f"restrict {layout}: mode {i} symbolic origin {b} is not provably aligned to the window of "
                        f"{e} (a multiple of {e} or of a prefix product of {fmt(mode.shape)} covering it), so the "
                        f"window's shape depends on its value")
    if az.can_prove(b < 0) or az.can_prove(b + e > n):
        raise CuteError(f"restrict {layout}: mode {i} window [{b}, {b} + {e}) is outside [0, {n})")


def _add_any(acc, v):
    """Offsets added: scalars (ints or PrimExprs), or codomain coordinates (tuples) component-wise."""
    if isinstance(v, ScaledBasis):
        v = v.to_tuple()
    if isinstance(v, np.ndarray) or isinstance(v, np.integer):
        return _add_offset(acc, v)
    if not is_tuple(v):
        return acc + v if not is_tuple(acc) else _add_any(acc, (v,))
    acc = (acc,) if not is_tuple(acc) else acc
    k = max(len(acc), len(v))
    return tuple(x + y for x, y in zip(acc + (0,) * (k - len(acc)), v + (0,) * (k - len(v))))


# (offset, sublayout) with layout(begin + c) == offset + sublayout(c) on a box region, one entry per top mode.
# A begin may be symbolic (``j * 64``) when it is provably aligned to the window (see _aligned_window).
def restrict(layout: Layout, region):
    region = list(region) if isinstance(region, (list, tuple)) else [region]
    if len(region) != len(layout):
        raise CuteError(f"restrict {layout}: region has {len(region)} entries, the layout has rank {len(layout)}")
    offset, subs = 0, []
    for i, (mode, entry) in enumerate(zip(layout, region)):
        n = static(size(mode), "restrict")
        b, e = _window(entry, n, i, layout)
        if not is_int(b):
            _aligned_window(mode, b, e, n, i, layout)
            sym_offset, b = crd2idx(b, mode.shape, mode.stride), 0
        elif b < 0 or e < 1 or b + e > n:
            raise CuteError(f"restrict {layout}: mode {i} window [{b}, {b + e}) is outside [0, {n})")
        else:
            sym_offset = None
        vals = values(mode, np.arange(b, b + e, dtype=np.int64))
        g = vals - vals[0]
        modes = fit_1d(g)
        if modes is None or not np.array_equal(eval_modes(modes, e, g.shape[1:]), g):
            raise CuteError(f"restrict {layout}: mode {i} window [{b}, {b + e}) of {mode} is not a strided layout")
        strides = [_as_stride(st) for _, st in modes]
        subs.append(_from_lists([x for x, _ in modes], strides) if modes else Layout(1, 0))
        offset = _add_offset(offset, vals[0]) if sym_offset is None else _add_any(offset, _simplify(sym_offset))
    sub = subs[0] if not is_tuple(layout.shape) else make_layout(subs)
    return offset, sub


def _simplify(v):
    if is_tuple(v):
        return tuple(_simplify(x) for x in v)
    if isinstance(v, ScaledBasis):
        return ScaledBasis(_simplify(v.value), v.mode)
    return v if is_int(v) else sym.Analyzer().simplify(v)


def _as_stride(st):
    if np.ndim(st) == 0:
        return int(st)
    nz = [k for k, v in enumerate(st) if v != 0]
    if not nz:
        return 0
    if len(nz) > 1:
        raise CuteError(f"a stride moving along several codomain axes at once ({list(map(int, st))}) "
                        f"is not a single ScaledBasis")
    return ScaledBasis(int(st[nz[0]]), nz[0])


def _add_offset(acc, v):
    if np.ndim(v) == 0:
        return acc + int(v)
    v = tuple(int(x) for x in v)
    if acc == 0:
        return v
    n = max(len(acc), len(v))
    return tuple(x + y for x, y in zip(acc + (0,) * (n - len(acc)), v + (0,) * (n - len(v))))

