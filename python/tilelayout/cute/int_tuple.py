"""IntTuples: ints (or symbolic PrimExprs) nested in tuples, and ScaledBasis strides for multi-output codomains.

An IntTuple is a leaf or a tuple of IntTuples. Leaves of shapes are positive ints or integer PrimExprs;
leaves of strides may also be ``ScaledBasis`` values (``v@m``: ``v`` along codomain axis ``m``), which is
how CuTe writes a layout whose result is a coordinate rather than one integer.
"""
from __future__ import annotations

from functools import reduce
from typing import Union

import numpy as np
import tvm
from tvm import tirx
from tvm import sym

try:  # the core package's base error, when present
    from ..errors import LayoutError as _Base
except ImportError:  # pragma: no cover - only while the core package is being written
    _Base = ValueError

__all__ = ["CuteError", "ScaledBasis", "E", "is_int", "is_tuple", "is_static", "flatten", "flatten_to_tuple",
           "product", "inner_product", "prefix_product", "suffix_product", "shape_div", "idx2crd", "crd2idx",
           "depth", "rank", "congruent", "compatible", "fmt", "ceil_div"]


class CuteError(_Base):
    """A CuTe algebra operation was called outside its precondition (never returned silently)."""


def is_int(x) -> bool:
    """A static integer leaf (Python or numpy int; bools are not integers here)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_tuple(x) -> bool:
    return isinstance(x, tuple)


def _is_expr(x) -> bool:
    return isinstance(x, tvm.ir.Expr) and not isinstance(x, tirx.IntImm)


def norm(t, what: str = "IntTuple"):
    """Canonical form: lists -> tuples, numpy ints and IntImm -> int; rejects anything else."""
    if isinstance(t, (tuple, list)):
        return tuple(norm(x, what) for x in t)
    if is_int(t):
        return int(t)
    if isinstance(t, tirx.IntImm):
        return int(t.value)
    if isinstance(t, ScaledBasis) or _is_expr(t):
        return t
    raise CuteError(f"{what}: leaf {t!r} ({type(t).__name__}) is not an int, a PrimExpr or a ScaledBasis")


def is_static(t) -> bool:
    """Every leaf is a constant (ints, or ScaledBasis with constant value)."""
    if is_tuple(t):
        return all(is_static(x) for x in t)
    if isinstance(t, ScaledBasis):
        return is_int(t.value)
    return is_int(t)


def static(x, op: str) -> int:
    """``x`` as a Python int, or a CuteError naming ``op`` when it is symbolic."""
    if is_int(x):
        return int(x)
    if isinstance(x, tirx.IntImm):
        return int(x.value)
    raise CuteError(f"{op}: needs constant extents and strides, got {x!r}")


def known_eq(a, b) -> bool:
    """True only when a == b provably (ints compared, PrimExprs proved by TVM's analyzer)."""
    if is_int(a) and is_int(b):
        return a == b
    if isinstance(a, ScaledBasis) or isinstance(b, ScaledBasis):
        return isinstance(a, ScaledBasis) and isinstance(b, ScaledBasis) and a == b
    if is_tuple(a) or is_tuple(b):
        return is_tuple(a) and is_tuple(b) and len(a) == len(b) and all(map(known_eq, a, b))
    return bool(sym.Analyzer().can_prove_equal(a, b))


class ScaledBasis:
    """``value`` along codomain axis ``mode`` (an int, or a tuple of ints for nested codomains); CuTe's ``v@m``."""

    __slots__ = ("value", "mode")

    def __init__(self, value, mode):
        if is_int(mode):
            mode = (int(mode),)
        mode = tuple(mode)
        if not mode or not all(is_int(m) and m >= 0 for m in mode):
            raise CuteError(f"ScaledBasis: mode must be a non-negative int or a tuple of them, got {mode!r}")
        self.value = int(value) if is_int(value) else value
        self.mode = tuple(int(m) for m in mode)

    def __mul__(self, k):
        if isinstance(k, ScaledBasis) or is_tuple(k):
            raise CuteError(f"ScaledBasis: cannot multiply {self} by {k}")
        return ScaledBasis(self.value * k, self.mode)

    __rmul__ = __mul__

    def __add__(self, other):
        return add(self, other)

    __radd__ = __add__

    def __eq__(self, other):
        return isinstance(other, ScaledBasis) and self.mode == other.mode and known_eq(self.value, other.value)

    def __hash__(self):
        return hash((str(self.value), self.mode))

    def to_tuple(self):
        """The codomain coordinate this basis value stands for (zeros elsewhere)."""
        out = self.value
        for m in reversed(self.mode):
            out = tuple([0] * m + [out])
        return out

    def __str__(self):
        return f"{self.value}" + "".join(f"@{m}" for m in self.mode)

    def __repr__(self):
        mode = self.mode[0] if len(self.mode) == 1 else self.mode
        return f"ScaledBasis({self.value!r}, {mode!r})"


def E(*mode) -> ScaledBasis:
    """Unit basis vector of codomain axis ``mode`` (``E(1)`` is ``1@1``; ``E(0, 1)`` is ``1@0@1``)."""
    if len(mode) == 1 and is_tuple(mode[0]):
        mode = mode[0]
    return ScaledBasis(1, mode)


def _is_zero(x) -> bool:
    return is_int(x) and x == 0


def add(a, b):
    """Codomain addition: ints add, basis values become coordinates that add component-wise."""
    if _is_zero(a):
        return b
    if _is_zero(b):
        return a
    if isinstance(a, ScaledBasis) and isinstance(b, ScaledBasis) and a.mode == b.mode:
        return ScaledBasis(a.value + b.value, a.mode)
    if isinstance(a, ScaledBasis):
        a = a.to_tuple()
    if isinstance(b, ScaledBasis):
        b = b.to_tuple()
    if is_tuple(a) and is_tuple(b):
        n = max(len(a), len(b))
        a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
        return tuple(add(x, y) for x, y in zip(a, b))
    if is_tuple(a) or is_tuple(b):
        raise CuteError(f"cannot add the integer {a if not is_tuple(a) else b} to the coordinate "
                        f"{fmt(a if is_tuple(a) else b)}: mixed integer and basis strides")
    return a + b


def flatten(t) -> tuple:
    """All leaves of ``t`` as a flat tuple (an int gives a 1-tuple, as in pycute)."""
    if is_tuple(t):
        return tuple(x for a in t for x in flatten(a))
    return (t,)


flatten_to_tuple = flatten


def product(t):
    """Product of all leaves (1 for the empty tuple)."""
    if is_tuple(t):
        return reduce(lambda acc, x: acc * product(x), t, 1)
    return t


def inner_product(a, b):
    """Sum of leaf-wise products of two congruent IntTuples."""
    if is_tuple(a):
        if not is_tuple(b) or len(a) != len(b):
            raise CuteError(f"inner_product: {fmt(a)} and {fmt(b)} are not congruent")
        return reduce(add, (inner_product(x, y) for x, y in zip(a, b)), 0)
    if is_tuple(b):
        raise CuteError(f"inner_product: {fmt(a)} and {fmt(b)} are not congruent")
    return b * a if isinstance(b, ScaledBasis) else a * b


def ceil_div(a, b):
    """Ceiling division; for PrimExprs TVM's simplified ``(a + b - 1) // b``."""
    if is_int(a) and is_int(b):
        return -(-a // b)
    return sym.Analyzer().simplify(tirx.floordiv(a + b - 1, b))


def shape_div(a, b):
    """``a`` divided by ``b`` leaf by leaf from the left (inclusive prefix ceil-div), congruent to ``a``."""
    if is_tuple(a):
        if is_tuple(b):
            return tuple(shape_div(x, y) for x, y in zip(a, b))
        out = []
        for x in a:
            out.append(shape_div(x, b))
            b = shape_div(b, product(x))
        return tuple(out)
    if is_tuple(b):
        return shape_div(a, product(b))
    if a % b != 0 and b % a != 0:
        raise CuteError(f"shape_div: neither of {a} and {b} divides the other")
    return ceil_div(a, b)


def prefix_product(a, init=1):
    """Exclusive prefix product, congruent to ``a``: the column-major (compact) strides of shape ``a``."""
    if is_tuple(a):
        out = []
        for x in a:
            out.append(prefix_product(x, init))
            init = init * product(x)
        return tuple(out)
    return init


def suffix_product(a, init=1):
    """Exclusive suffix product, congruent to ``a``: the row-major (compact) strides of shape ``a``."""
    if is_tuple(a):
        out = []
        for x in reversed(a):
            out.append(suffix_product(x, init))
            init = init * product(x)
        return tuple(reversed(out))
    return init


def _modes_of(crd: tuple, shape, stride, who: str):
    """The (coordinate, shape, stride) modes of a tuple coordinate, which must have ``shape``'s modes."""
    if not is_tuple(shape) or len(crd) != len(shape):
        raise CuteError(f"{who}: coordinate {fmt(crd)} does not match shape {fmt(shape)}")
    return zip(crd, shape, stride)


def idx2crd(idx, shape, stride=None):
    """Natural coordinate of index ``idx`` in ``shape`` (column-major unless ``stride`` is given)."""
    if stride is None:
        stride = prefix_product(shape)
    if is_tuple(idx):
        return tuple(idx2crd(i, s, d) for i, s, d in _modes_of(idx, shape, stride, "idx2crd"))
    if is_tuple(shape):
        return tuple(idx2crd(idx, s, d) for s, d in zip(shape, stride))
    return (idx // stride) % shape


def crd2idx(crd, shape, stride=None):
    """Value of coordinate ``crd`` (int, hierarchical or natural) under ``shape:stride``."""
    if stride is None:
        stride = prefix_product(shape)
    if is_tuple(crd):
        return reduce(add, (crd2idx(c, s, d) for c, s, d in _modes_of(crd, shape, stride, "crd2idx")), 0)
    if crd is None:
        crd = 0
    if is_tuple(shape):
        if not shape:
            return 0
        out = 0
        for s, d in zip(shape[:-1], stride[:-1]):  # every mode but the last wraps; the last absorbs the rest
            n = product(s)
            out = add(out, crd2idx(crd % n, s, d))
            crd = crd // n
        return add(out, crd2idx(crd, shape[-1], stride[-1]))
    return stride * crd if isinstance(stride, ScaledBasis) else crd * stride


def rank(t) -> int:
    """Number of top-level modes (1 for a leaf)."""
    return len(t) if is_tuple(t) else 1


def depth(t) -> int:
    """Nesting depth (0 for a leaf)."""
    if is_tuple(t):
        return 1 + max((depth(x) for x in t), default=0)
    return 0


def congruent(a, b) -> bool:
    """Same tree structure (profile), leaves ignored."""
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))
    return not is_tuple(a) and not is_tuple(b)


def compatible(a, b) -> bool:
    """Every coordinate of shape ``a`` is also a coordinate of shape ``b`` (sizes agree, ``b`` may be finer)."""
    if is_tuple(a):
        return is_tuple(b) and len(a) == len(b) and all(compatible(x, y) for x, y in zip(a, b))
    return known_eq(a, product(b))


def slice_(crd, t):
    """The leaves of ``t`` paired with ``None`` in ``crd`` (CuTe's slice; used by ``layout(None, 0)``)."""
    if is_tuple(crd):
        if not is_tuple(t) or len(crd) != len(t):
            raise CuteError(f"slice: coordinate {crd!r} does not match {fmt(t)}")
        return tuple(x for c, s in zip(crd, t) for x in slice_(c, s))
    return (t,) if crd is None else ()


def has_none(a) -> bool:
    return any(has_none(x) for x in a) if is_tuple(a) else a is None


def fmt(t) -> str:
    """CuTe's spelling of an IntTuple: ``((2,2),3)``, ``(4)`` for a 1-tuple, ``1@0`` for a basis."""
    if is_tuple(t):
        return "(" + ",".join(fmt(x) for x in t) + ")"
    return str(t)


IntTuple = Union[int, tuple]
