"""CuTe Layout: a shape and a congruent stride; a coordinate maps to the inner product with the stride.

Shapes are column-major by default (the first mode varies fastest), the opposite of TileLang's row-major
intuition. ``str(layout)`` is CuTe's exact spelling ``((2,2),3):((24,2),8)``.
"""
from __future__ import annotations

from . import int_tuple as it
from .int_tuple import (CuteError, ScaledBasis, crd2idx, fmt, has_none, inner_product, is_int, is_tuple, norm,
                        prefix_product, product, slice_, suffix_product)
from .int_tuple import flatten as _flatten

__all__ = ["Layout", "LayoutBase", "is_layout", "make_layout", "size", "cosize", "coshape", "rank", "depth",
           "flatten", "congruent", "compatible", "make_column_major_layout", "make_row_major_layout",
           "make_identity_layout", "slice_and_offset"]


class LayoutBase:
    """Common base of Layout and ComposedLayout (pycute's ``is_layout`` test)."""


def is_layout(x) -> bool:
    return isinstance(x, LayoutBase)


def _check_shape(shape, what: str) -> None:
    for s in _flatten(shape):
        if isinstance(s, ScaledBasis):
            raise CuteError(f"{what}: a shape leaf cannot be a ScaledBasis ({s})")
        if is_int(s) and s < 0:
            raise CuteError(f"{what}: shape leaves must be non-negative, got {s}")


class Layout(LayoutBase):
    """``shape:stride``; calling it with an index or a coordinate gives the codomain value.

    The methods that need the algebra, the parser or the TileLang converters are defined by those modules,
    which import this one (this module imports none of them): ``with_shape`` (``algebra``), ``parse``
    (``parse``), ``from_tilelang``, ``from_tilelang_hierarchical`` and ``to_tilelang`` (``convert``). The
    package imports all three, so every ``Layout`` has them."""

    __slots__ = ("shape", "stride")

    def __init__(self, shape, stride=None):
        shape = norm(shape, "Layout shape")
        _check_shape(shape, "Layout")
        stride = compact_strides(shape, prefix_product) if stride is None else norm(stride, "Layout stride")
        if not congruent(shape, stride):
            raise CuteError(f"Layout: stride {fmt(stride)} is not congruent to shape {fmt(shape)}")
        self.shape = shape
        self.stride = stride

    def __eq__(self, other):
        if not isinstance(other, Layout):
            return NotImplemented
        return str(self) == str(other)

    def __hash__(self):
        return hash(str(self))

    def __len__(self):
        return it.rank(self.shape)

    def __call__(self, *args):
        """Index or coordinate -> value; a coordinate holding ``None`` slices out a sublayout instead."""
        crd = args[0] if len(args) == 1 else args
        if has_none(crd):
            return Layout(slice_(crd, self.shape), slice_(crd, self.stride))
        return crd2idx(crd, self.shape, self.stride)

    def __getitem__(self, i):
        if is_tuple(self.shape):
            return Layout(self.shape[i], self.stride[i])
        if i not in (0, -1):
            raise CuteError(f"mode {i} of the rank-1 layout {self}")
        return self

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def size(self):
        return product(self.shape)

    def cosize(self):
        return cosize(self)

    def __str__(self):
        return f"{fmt(self.shape)}:{fmt(self.stride)}"

    def __repr__(self):
        return f"Layout({self.shape!r}, {self.stride!r})"



def compact_strides(shape, products):
    """Compact strides (``products`` is prefix_product or suffix_product), 0 on size-1 modes as C++ CuTe's
    compact layouts have them (``make_layout((1, 4))`` is ``(1,4):(0,1)``; pycute gives ``(1,1)``)."""
    return _zero_ones(shape, products(shape))


def _zero_ones(shape, stride):
    if is_tuple(shape):
        return tuple(_zero_ones(s, d) for s, d in zip(shape, stride))
    return 0 if is_int(shape) and shape == 1 else stride


def _shape(x):
    return x.shape if is_layout(x) else x


def rank(x) -> int:
    """Number of top-level modes of a layout or an IntTuple (1 for an int)."""
    return it.rank(_shape(x))


def depth(x) -> int:
    """Nesting depth of a layout's shape or of an IntTuple (0 for an int)."""
    return it.depth(_shape(x))


def congruent(a, b) -> bool:
    """Same profile (tree structure) of two shapes, or of two layouts' shapes."""
    return it.congruent(_shape(a), _shape(b))


def compatible(a, b) -> bool:
    """Every coordinate of ``a`` (a shape or a layout's shape) is a coordinate of ``b``."""
    return it.compatible(_shape(a), _shape(b))


def flatten(x):
    """Leaves of an IntTuple as a flat tuple (pycute); a Layout with its shape and stride flattened (CuTe)."""
    if isinstance(x, Layout):
        return x if not is_tuple(x.shape) else Layout(_flatten(x.shape), _flatten(x.stride))
    return _flatten(x)


def make_layout(*args, stride=None):
    """``make_layout(shape, stride=None)`` (column-major default) or ``make_layout(L0, L1, ...)``/``([L0, ...])``:
    one mode per given layout."""
    layouts = args
    if len(args) == 1 and isinstance(args[0], list) and all(is_layout(x) for x in args[0]):
        layouts = tuple(args[0])
    if layouts and all(isinstance(x, Layout) for x in layouts):
        if stride is not None:
            raise CuteError("make_layout: a stride cannot be given with layouts")
        return Layout(tuple(x.shape for x in layouts), tuple(x.stride for x in layouts))
    if len(args) == 2 and stride is None:
        return Layout(args[0], args[1])
    if len(args) != 1:
        raise CuteError(f"make_layout: expected (shape, stride=None) or layouts, got {args!r}")
    return Layout(args[0], stride)


def size(x):
    """Size of the domain: product of the shape."""
    return x.size() if is_layout(x) else product(x)


def cosize(layout):
    """Size of the codomain (one past the largest value, ints) -- ``size(coshape(layout))``."""
    if not isinstance(layout, Layout):
        return layout.cosize()
    return product(coshape(layout))


def coshape(layout):
    """One past the largest value along each codomain axis (an int for integer strides), from the strides'
    absolute values as C++ CuTe does: a negative stride spans as much codomain as a positive one."""
    m1 = tuple(s - 1 for s in _flatten(layout.shape))
    top = inner_product(m1, tuple(_abs(d) for d in _flatten(layout.stride)))
    return _plus_one(top.to_tuple() if isinstance(top, ScaledBasis) else top)


def _abs(d):
    if isinstance(d, ScaledBasis):
        return ScaledBasis(_abs(d.value), d.mode)
    if is_int(d):
        return abs(d)
    from tvm import sym, tirx
    az = sym.Analyzer()
    if az.can_prove(d >= 0):
        return d
    if az.can_prove(d <= 0):
        return az.simplify(-d)
    return tirx.abs(d)


def _plus_one(t):
    return tuple(_plus_one(x) for x in t) if is_tuple(t) else t + 1


def make_column_major_layout(shape) -> Layout:
    """Compact layout with the first mode fastest."""
    return Layout(shape)


def make_row_major_layout(shape) -> Layout:
    """Compact layout with the last mode fastest (also inside nested modes)."""
    shape = norm(shape)
    return Layout(shape, compact_strides(shape, suffix_product))


def _basis_like(shape, prefix=()):
    if is_tuple(shape):
        return tuple(_basis_like(s, prefix + (i,)) for i, s in enumerate(shape))
    return ScaledBasis(1, prefix) if prefix else 1


def make_identity_layout(shape) -> Layout:
    """Coordinate -> the same coordinate: stride ``1@i`` on mode ``i`` (``1@i@j`` nested; plain 1 for an int)."""
    shape = norm(shape)
    return Layout(shape, _basis_like(shape))


def slice_and_offset(crd, layout: Layout):
    """(sublayout of the ``None`` modes of ``crd``, value of the fixed modes)."""
    fixed = crd2idx(_zero_none(crd), layout.shape, layout.stride)
    return Layout(slice_(crd, layout.shape), slice_(crd, layout.stride)), fixed


def _zero_none(c):
    return tuple(_zero_none(x) for x in c) if is_tuple(c) else (0 if c is None else c)

