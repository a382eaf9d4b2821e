"""catlass TLA layouts: nested Shape/Stride plus an OriginShape that marks the valid region.

A TLA layout maps a *logical* coordinate -- one integer per top-level mode, e.g. (row, col), even
when a mode is nested as in the zN format ``((16,7),(16,7))`` -- to a linear element offset.
Inside a nested mode the logical integer is split colexicographically (first sub-extent fastest),
so row 17 of ``(16,7)`` is the sub-coordinate (1, 1). ``shape`` describes memory (it may be padded
to whole fractals), ``origin_shape`` the elements that logically exist; tail tiles carry their
clipped origin so code above them never re-derives boundaries.

Ascend fractal formats (constants as in catlass): a C0 is 32 bytes of one row, a fractal is 16 C0s
(512 bytes). The first letter is the order inside a fractal, the second the order of fractals:
z/Z = row-major, n/N = column-major. zN is the common L1 format; L0C holds 16x16 fractals whatever
the dtype (accumulator tiles).

Size (about 560 lines): the whole catlass TLA algebra as free functions over one small class, like cute/.
"""
from __future__ import annotations

import operator
from enum import Enum
from typing import Any, Callable, Sequence, Tuple, Union

import numpy as np

from .errors import LayoutError

__all__ = [
    "TLAError", "TLARankError", "TLACoordinateError", "TLATagError", "TLADtypeError",
    "IntTuple", "Layout", "LayoutTag",
    "is_tuple", "rank", "get", "depth", "product", "flatten", "congruent",
    "shape", "stride", "origin_shape", "size", "cosize",
    "make_layout", "make_vector_layout", "make_layout_from_tag", "crd2offset", "get_tile_layout",
    "elements_per_c0", "to_cute", "from_cute", "to_layout",
    "C0_NUM_PER_FRACTAL", "BYTE_PER_C0", "BYTE_PER_FRACTAL",
]

IntTuple = Union[int, Tuple["IntTuple", ...]]

C0_NUM_PER_FRACTAL = 16   # rows (C0 blocks) per fractal
BYTE_PER_C0 = 32          # bytes in one C0 block (one fractal row)
BYTE_PER_FRACTAL = 512    # C0_NUM_PER_FRACTAL * BYTE_PER_C0
L0C_FRACTAL_SIDE = 16     # L0C fractals are 16 x 16 elements whatever the dtype


# ----------------------------------------------------------------------------------------- errors

class TLAError(LayoutError):
    """A TLA layout is malformed or an operation's precondition on it does not hold."""


class TLARankError(TLAError):
    """Ranks (or nesting profiles) of coordinate, shape, stride or origin do not match."""


class TLACoordinateError(TLAError):
    """A coordinate lies outside the layout's (padded) shape."""


class TLATagError(TLAError):
    """An unknown layout tag, or a tag used with arguments it does not accept."""


class TLADtypeError(TLAError):
    """A dtype that is unknown or whose size does not divide the 32-byte C0 block."""


# -------------------------------------------------------------------------------------- IntTuples

def is_tuple(x: Any) -> bool:
    return isinstance(x, tuple)


def _as_int(x: Any, what: str) -> int:
    if isinstance(x, (bool, np.bool_)):
        raise TLAError(f"{what}: expected an integer, got the bool {x!r}")
    try:
        return operator.index(x)
    except TypeError:
        raise TLAError(f"{what}: expected an integer, got {type(x).__name__} {x!r}") from None


def _int_tuple(x: Any, what: str) -> IntTuple:
    """Normalise lists / numpy ints into an IntTuple of Python ints (lists become tuples)."""
    if isinstance(x, (tuple, list)):
        return tuple(_int_tuple(e, what) for e in x)
    return _as_int(x, what)


def _fmt(x: IntTuple) -> str:
    return "(" + ",".join(_fmt(e) for e in x) + ")" if is_tuple(x) else str(x)


def rank(x: Any, *path: int) -> int:
    """Number of top-level modes of ``get(x, *path)``; an integer has rank 1."""
    if isinstance(x, Layout):
        return x.rank(*path)
    y = get(x, *path)
    return len(y) if is_tuple(y) else 1


def get(x: Any, *path: int) -> Any:
    """``get(x, i, j)`` is ``x[i][j]``; ``get(n, 0)`` of an integer is the integer (CuTe's rule)."""
    if isinstance(x, Layout):
        return x.get(*path)
    for i in path:
        if is_tuple(x):
            if not -len(x) <= i < len(x):
                raise TLARankError(f"index {i} out of range for {_fmt(x)} of rank {len(x)}")
            x = x[i]
        elif i == 0:
            pass
        else:
            raise TLARankError(f"index {i} out of range for the integer {x}")
    return x


def depth(x: Any, *path: int) -> int:
    """Nesting depth: 0 for an integer, 1 for a flat tuple, 1 + the deepest element otherwise."""
    if isinstance(x, Layout):
        return x.depth(*path)
    y = get(x, *path)
    if not is_tuple(y):
        return 0
    return 1 + max((depth(e) for e in y), default=0)


def product(x: IntTuple) -> int:
    if is_tuple(x):
        p = 1
        for e in x:
            p *= product(e)
        return p
    return x


def flatten(x: IntTuple) -> Tuple[int, ...]:
    return tuple(i for e in x for i in flatten(e)) if is_tuple(x) else (x,)


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Same nesting profile (CuTe's ``congruent``)."""
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))
    return not is_tuple(a) and not is_tuple(b)


def _modes(x: IntTuple) -> Tuple[IntTuple, ...]:
    return x if is_tuple(x) else (x,)


# ----------------------------------------------------------------------------------------- Layout

class Layout:
    """Shape, Stride and OriginShape of a catlass TLA layout; immutable, compared by value.

    ``origin_shape`` is a flat tuple with one valid extent per top-level mode; when omitted it is
    the product of each mode of ``shape`` (no padding).
    """

    __slots__ = ("_shape", "_stride", "_origin")

    def __init__(self, shape: IntTuple, stride: IntTuple, origin_shape: IntTuple | None = None):
        shp = _int_tuple(shape, "shape")
        std = _int_tuple(stride, "stride")
        if not congruent(shp, std):
            raise TLARankError(
                f"layout {_fmt(shp)}:{_fmt(std)}: shape and stride must have the same nesting")
        bad = [e for e in flatten(shp) if e < 1]
        if bad:
            raise TLAError(f"layout {_fmt(shp)}:{_fmt(std)}: shape extents must be >= 1, got {bad}")
        extents = tuple(product(m) for m in _modes(shp))
        if origin_shape is None:
            org = extents
        else:
            org = _int_tuple(origin_shape, "origin_shape")
            org = org if is_tuple(org) else (org,)
            if depth(org) > 1:
                raise TLARankError(
                    f"layout {_fmt(shp)}:{_fmt(std)}: origin_shape {_fmt(org)} must be flat")
            if len(org) != len(extents):
                raise TLARankError(
                    f"layout {_fmt(shp)}:{_fmt(std)}: origin_shape {_fmt(org)} has rank {len(org)},"
                    f" the layout has rank {len(extents)}")
            for d, (o, e) in enumerate(zip(org, extents)):
                if not 0 <= o <= e:
                    raise TLAError(
                        f"layout {_fmt(shp)}:{_fmt(std)}: origin_shape[{d}] = {o} is outside"
                        f" [0, {e}] (the mode's extent)")
        self._shape, self._stride, self._origin = shp, std, tuple(org)

    # accessors (catlass: shape<I...>(), stride<I...>(), originShape<I...>())
    def shape(self, *path: int) -> IntTuple:
        return get(self._shape, *path)

    def stride(self, *path: int) -> IntTuple:
        return get(self._stride, *path)

    def origin_shape(self, *path: int) -> IntTuple:
        if len(path) > 1:
            raise TLARankError(f"layout {self}: origin_shape is flat, it takes at most one index")
        return get(self._origin, *path)

    def rank(self, *path: int) -> int:
        return rank(self._shape, *path)

    def depth(self, *path: int) -> int:
        return depth(self._shape, *path)

    def get(self, *path: int) -> "Layout":
        """Sub-layout of one mode. Only top-level modes know their valid extent; deeper ones are
        taken as unpadded."""
        if not path:
            return self
        sub_shape, sub_stride = get(self._shape, *path), get(self._stride, *path)
        if len(path) == 1 and not is_tuple(sub_shape):
            return Layout(sub_shape, sub_stride, (get(self._origin, path[0]),))
        return Layout(sub_shape, sub_stride)

    def size(self) -> int:
        """Number of coordinates of the (padded) shape."""
        return product(self._shape)

    def cosize(self) -> int:
        """One past the largest offset of the padded shape (non-negative strides)."""
        return 1 + sum((s - 1) * max(d, 0) for s, d in zip(flatten(self._shape), flatten(self._stride)))

    def __call__(self, *coord):
        """``layout(r, c)`` or ``layout((r, c))``: the offset of a logical coordinate."""
        if len(coord) == 1 and (is_tuple(coord[0]) or self.rank() == 1):
            coord = coord[0]
        return crd2offset(coord, self._shape, self._stride)

    def offsets(self, padded: bool = False) -> np.ndarray:
        """Offsets of every logical coordinate as an int64 array shaped like the origin (or the
        padded extents); ``offsets()[r, c] == layout(r, c)``."""
        extents = tuple(product(m) for m in _modes(self._shape)) if padded else self._origin
        grids = np.indices(extents, dtype=np.int64) if extents else ()
        coord = tuple(grids) if is_tuple(self._shape) else grids[0]
        return np.asarray(crd2offset(coord, self._shape, self._stride), dtype=np.int64) \
            + np.zeros(extents, dtype=np.int64)

    def is_padded(self) -> bool:
        return self._origin != tuple(product(m) for m in _modes(self._shape))

    def __str__(self) -> str:
        return f"{_fmt(self._shape)}:{_fmt(self._stride)}"

    def __repr__(self) -> str:
        return f"tla.Layout({self}, origin_shape={_fmt(self._origin)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and (self._shape, self._stride, self._origin) == (
            other._shape, other._stride, other._origin)

    def __hash__(self) -> int:
        return hash((self._shape, self._stride, self._origin))


def shape(layout: Layout, *path: int) -> IntTuple:
    return layout.shape(*path)


def stride(layout: Layout, *path: int) -> IntTuple:
    return layout.stride(*path)


def origin_shape(layout: Layout, *path: int) -> IntTuple:
    return layout.origin_shape(*path)


def size(x: Any) -> int:
    return x.size() if isinstance(x, Layout) else product(x)


def cosize(layout: Layout) -> int:
    return layout.cosize()


def make_layout(shape: IntTuple, stride: IntTuple | None = None,
                origin_shape: IntTuple | None = None) -> Layout:
    """catlass ``MakeLayout``: ``make_layout(128)`` is the vector layout ``(128):(1)``."""
    if stride is None:
        if isinstance(shape, (tuple, list)):
            raise TLAError(f"make_layout({_fmt(_int_tuple(shape, 'shape'))}): a stride is required"
                           " (only an integer shape defaults to the unit-stride vector layout)")
        n = _as_int(shape, "shape")
        return Layout((n,), (1,), (n,) if origin_shape is None else origin_shape)
    return Layout(shape, stride, origin_shape)


def make_vector_layout(length: int) -> Layout:
    """catlass ``VectorLayout``: a contiguous one-dimensional layout."""
    return make_layout(length)


# -------------------------------------------------------------------------------------- crd2offset

def _is_concrete(c: Any) -> bool:
    return isinstance(c, (int, np.integer, np.ndarray))


def _check_range(c: Any, extent: int, where: Callable[[], str]) -> None:
    if not _is_concrete(c):
        return  # symbolic coordinates (tvm PrimExpr) are trusted
    arr = np.asarray(c)
    if arr.size and (arr.min() < 0 or arr.max() >= extent):
        bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
        raise TLACoordinateError(f"{where()}: coordinate {bad} is outside [0, {extent})")


def _offset(c: Any, s: IntTuple, d: IntTuple, where: Callable[[], str]) -> Any:
    if is_tuple(c):
        if len(c) == 1 and not is_tuple(s):
            return _offset(c[0], s, d, where)
        if not is_tuple(s) or len(c) != len(s):
            raise TLARankError(f"{where()}: coordinate of rank {len(c)} for a mode of rank {rank(s)}")
        return sum(_offset(ci, si, di, where) for ci, si, di in zip(c, s, d))
    _check_range(c, product(s), where)
    return _split(c, s, d)


def _split(c: Any, s: IntTuple, d: IntTuple) -> Any:
    """Offset of the in-range logical index ``c`` in mode ``s``: colexicographic decomposition,
    the first sub-extent fastest."""
    if not is_tuple(s):
        return c * d if not (isinstance(c, int) and c == 0) else 0
    total = 0
    for k, (si, di) in enumerate(zip(s, d)):
        if k == len(s) - 1:
            total = total + _split(c, si, di)
        else:
            n = product(si)
            total = total + _split(c % n, si, di)
            c = c // n
    return total


def crd2offset(coord: Any, shape: IntTuple, stride: IntTuple) -> Any:
    """Linear offset of a logical coordinate (catlass ``crd2offset``).

    ``coord`` holds one entry per top-level mode (ints, numpy int arrays that broadcast, or tvm
    PrimExprs); an integer entry addressing a nested mode is split colexicographically. In
    ``((4,2),(4,3)):((4,16),(1,32))`` the coordinate (1, 5) is (1,0)·(4,16) + (1,1)·(1,32) = 37.
    Concrete coordinates must lie inside the padded shape.
    """
    shp, std = _int_tuple(shape, "shape"), _int_tuple(stride, "stride")
    if not congruent(shp, std):
        raise TLARankError(f"crd2offset: shape {_fmt(shp)} and stride {_fmt(std)} differ in nesting")
    if isinstance(coord, list):
        coord = tuple(coord)
    if is_tuple(coord) and is_tuple(shp) and len(coord) != len(shp):
        raise TLARankError(
            f"crd2offset on {_fmt(shp)}:{_fmt(std)}: coordinate has rank {len(coord)},"
            f" the layout has rank {len(shp)}")
    return _offset(coord, shp, std, lambda: f"crd2offset on {_fmt(shp)}:{_fmt(std)}")


# ---------------------------------------------------------------------------------- get_tile_layout

def _flat_pair(x: Any, what: str, layout: Layout) -> Tuple[int, ...]:
    x = _int_tuple(x, what)
    x = x if is_tuple(x) else (x,)
    if depth(x) > 1:
        raise TLARankError(f"get_tile_layout on {layout!r}: {what} {_fmt(x)} must be flat")
    return x


def get_tile_layout(layout: Layout, tile_shape: Sequence[int], coord: Sequence[int]) -> Layout:
    """Layout of the tile of ``tile_shape`` elements whose first element is at logical ``coord``.

    The stride is kept (memory does not move), the tile shape is written in the parent's nested
    structure (a nested mode ``(inner, n)`` becomes ``(inner, ceil(t / inner))``), and the origin
    is clipped to what is left of the parent's valid region:
    ``origin[d] = min(tile[d], max(parent_origin[d] - coord[d], 0))``.
    As in catlass the result is a view at the tile's own origin: for nested (fractal) parents the
    tile is expected to start on a fractal boundary.
    """
    if not isinstance(layout, Layout):
        raise TLAError(f"get_tile_layout: expected a tla.Layout, got {type(layout).__name__}")
    tile = _flat_pair(tile_shape, "tile_shape", layout)
    crd = _flat_pair(coord, "coord", layout)
    if len(tile) != len(crd):
        raise TLARankError(f"get_tile_layout on {layout!r}: tile_shape {_fmt(tile)} and coord"
                           f" {_fmt(crd)} differ in rank")
    if len(tile) != layout.rank():
        raise TLARankError(f"get_tile_layout on {layout!r}: tile_shape {_fmt(tile)} has rank"
                           f" {len(tile)}, the layout has rank {layout.rank()}")
    if any(t < 1 for t in tile):
        raise TLAError(f"get_tile_layout on {layout!r}: tile extents must be >= 1, got {_fmt(tile)}")
    if any(c < 0 for c in crd):
        raise TLACoordinateError(f"get_tile_layout on {layout!r}: coord {_fmt(crd)} is negative")
    origin = tuple(min(t, max(o - c, 0)) for t, o, c in zip(tile, layout.origin_shape(), crd))
    modes = []
    for d, (t, m) in enumerate(zip(tile, _modes(layout.shape()))):
        if not is_tuple(m):
            modes.append(t)
        elif len(m) == 2 and not is_tuple(m[0]) and not is_tuple(m[1]):
            modes.append((m[0], -(-t // m[0])))
        else:
            raise TLAError(f"get_tile_layout on {layout!r}: mode {d} {_fmt(m)} is not an"
                           " (inner, outer) fractal pair; only those nested modes can be tiled")
    tile_shape_out = tuple(modes) if is_tuple(layout.shape()) else modes[0]
    return Layout(tile_shape_out, layout.stride(), origin)


# ------------------------------------------------------------------------------------- layout tags

class LayoutTag(str, Enum):
    """catlass layout tags accepted by :func:`make_layout_from_tag`."""
    RowMajor = "RowMajor"
    ColumnMajor = "ColumnMajor"
    zN = "zN"
    nZ = "nZ"
    zZ = "zZ"
    nN = "nN"
    L0C = "L0C"
    VectorLayout = "VectorLayout"

    def __str__(self) -> str:
        return self.value


def _norm_name(s: str) -> str:
    return s.replace("_", "").lower()


_TAG_BY_NAME = {_norm_name(t.value): t for t in LayoutTag}
_TAG_BY_NAME.update({"vector": LayoutTag.VectorLayout, "colmajor": LayoutTag.ColumnMajor})


def _tag(tag: Any) -> LayoutTag:
    if isinstance(tag, LayoutTag):
        return tag
    if isinstance(tag, str) and _norm_name(tag) in _TAG_BY_NAME:
        return _TAG_BY_NAME[_norm_name(tag)]
    names = ", ".join(t.value for t in LayoutTag)
    raise TLATagError(f"unknown layout tag {tag!r}; valid tags: {names}")


def _dtype_bits(dtype: Any) -> int:
    if isinstance(dtype, str) and dtype in ("bool", "bool8"):
        return 8
    try:
        if not isinstance(dtype, str):
            dtype = np.dtype(dtype).name if not hasattr(dtype, "bits") else str(dtype)
        import tvm
        dt = tvm.DataType(dtype)
        bits = int(dt.bits) * int(dt.lanes)
    except Exception:
        raise TLADtypeError(f"unknown dtype {dtype!r}") from None
    if bits <= 0:
        raise TLADtypeError(f"dtype {dtype!r} has no size")
    return bits


def elements_per_c0(dtype: Any) -> int:
    """Elements of ``dtype`` in one 32-byte C0 block (16 for float16, 8 for float32, 64 for int4)."""
    bits = _dtype_bits(dtype)
    if (BYTE_PER_C0 * 8) % bits:
        raise TLADtypeError(f"dtype {dtype!r} is {bits} bits wide, which does not divide the"
                            f" {BYTE_PER_C0}-byte C0 block of the fractal formats")
    return BYTE_PER_C0 * 8 // bits


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def make_layout_from_tag(tag: LayoutTag | str, rows: int, cols: int | None = None,
                         dtype: Any = None) -> Layout:
    """catlass ``MakeLayout<Element, Tag>(rows, cols)``: the layout of a rows x cols matrix.

    Fractal tags (zN, nZ, zZ, nN) need ``dtype`` (a C0 holds 32 bytes); RowMajor, ColumnMajor and
    L0C (16x16 fractals) do not. ``VectorLayout`` takes the length as ``cols`` with ``rows == 1``,
    or as ``rows`` alone. The origin is always (rows, cols); shapes are padded to whole fractals.
    """
    t = _tag(tag)
    if t is LayoutTag.VectorLayout:
        n = _as_int(rows if cols is None else cols, "VectorLayout length")
        if cols is not None and _as_int(rows, "rows") != 1:
            raise TLATagError(f"VectorLayout of {rows} x {cols}: a vector has rows == 1")
        if n < 1:
            raise TLATagError(f"VectorLayout length must be >= 1, got {n}")
        return make_vector_layout(n)
    if cols is None:
        raise TLATagError(f"{t.value} layout needs both rows and cols")
    r, c = _as_int(rows, "rows"), _as_int(cols, "cols")
    if r < 1 or c < 1:
        raise TLATagError(f"{t.value} layout of {r} x {c}: rows and cols must be >= 1")
    origin = (r, c)
    if t is LayoutTag.RowMajor:
        return Layout((r, c), (c, 1), origin)
    if t is LayoutTag.ColumnMajor:
        return Layout((r, c), (1, r), origin)
    f = C0_NUM_PER_FRACTAL
    if t is LayoutTag.L0C:
        s = L0C_FRACTAL_SIDE
        return Layout(((f, _ceil_div(r, f)), (s, _ceil_div(c, s))),
                      ((s, f * s), (1, _ceil_div(r, f) * f * s)), origin)
    if dtype is None:
        raise TLADtypeError(f"{t.value} layout needs a dtype: a C0 block holds {BYTE_PER_C0} bytes,"
                            " so the fractal width depends on the element size")
    c0 = elements_per_c0(dtype)
    frac = f * c0  # elements per fractal
    if t is LayoutTag.zN:   # 16 x c0 fractals, row-major inside, column-major between
        return Layout(((f, _ceil_div(r, f)), (c0, _ceil_div(c, c0))),
                      ((c0, frac), (1, _ceil_div(r, f) * f * c0)), origin)
    if t is LayoutTag.zZ:   # 16 x c0 fractals, row-major inside and between
        return Layout(((f, _ceil_div(r, f)), (c0, _ceil_div(c, c0))),
                      ((c0, _ceil_div(c, c0) * c0 * f), (1, frac)), origin)
    if t is LayoutTag.nZ:   # c0 x 16 fractals, column-major inside, row-major between
        return Layout(((c0, _ceil_div(r, c0)), (f, _ceil_div(c, f))),
                      ((1, _ceil_div(c, f) * f * c0), (c0, frac)), origin)
    # nN: c0 x 16 fractals, column-major inside and between
    return Layout(((c0, _ceil_div(r, c0)), (f, _ceil_div(c, f))),
                  ((1, frac), (c0, _ceil_div(r, c0) * c0 * f)), origin)


# ------------------------------------------------------------------------------------- conversions

def to_cute(layout: Layout):
    """The same shape:stride as a ``tilelayout.cute.Layout`` (the origin is dropped: CuTe has none).
    CuTe splits an integer coordinate of a nested mode the same colexicographic way, so both map
    every logical coordinate of the padded shape to the same offset."""
    from .cute import Layout as CuteLayout
    if not isinstance(layout, Layout):
        raise TLAError(f"to_cute: expected a tla.Layout, got {type(layout).__name__}")
    return CuteLayout(layout.shape(), layout.stride())


def from_cute(cute_layout: Any, origin_shape: IntTuple | None = None) -> Layout:
    """A TLA layout from a CuTe layout with integer shape and stride; ``origin_shape`` marks the
    valid region (default: all of it)."""
    shp, std = getattr(cute_layout, "shape", None), getattr(cute_layout, "stride", None)
    if callable(shp):
        shp, std = shp(), std()
    if shp is None or std is None:
        raise TLAError(f"from_cute: {cute_layout!r} is not a CuTe layout with a shape and a stride")
    try:
        shp, std = _int_tuple(shp, "shape"), _int_tuple(std, "stride")
    except TLAError as e:
        raise TLAError(f"from_cute: {cute_layout}: TLA needs integer shapes and strides ({e})") from None
    return Layout(shp, std, origin_shape)


def to_layout(layout: Layout):
    """The core ``tilelayout.Layout`` over the *valid* region: input shape = origin_shape,
    forward index = the offset of each logical coordinate."""
    from .layout import Layout as CoreLayout
    if not isinstance(layout, Layout):
        raise TLAError(f"to_layout: expected a tla.Layout, got {type(layout).__name__}")
    if any(o == 0 for o in layout.origin_shape()):
        raise TLAError(f"to_layout: {layout!r} has an empty valid region")
    shp, std = layout.shape(), layout.stride()
    if is_tuple(shp):
        fn = lambda *v: _offset(tuple(v), shp, std, lambda: f"to_layout of {layout!r}")
    else:
        fn = lambda v: _split(v, shp, std)
    return CoreLayout(list(layout.origin_shape()), fn)
