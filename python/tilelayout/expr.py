"""Index expressions: the placeholder variables layouts are written over, shapes, substitution and the
small questions every module asks of an expression (does it mention a variable, the row-major number).

Expressions are written over process-wide placeholder variables ``_i, _j, _k, ...`` (and ``_rep`` for
replicas) so that two layouts built independently compare structurally.
"""
from __future__ import annotations

import functools
import inspect
import re
import types
from typing import Iterable, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import sym, tirx
from tvm.ir import PrimType, Range

from .errors import LayoutError, TileLayoutError
from .ffi_array import as_list
from .ir_walk import map_typed, walk_typed

_NAMES = "ijklmnopqrstuvwxyzabcdefgh"
_PLACEHOLDERS = [tirx.Var("_" + c, "int32") for c in _NAMES]
_REP = tirx.Var("_rep", "int32")
_BY_NAME = {v.name: v for v in _PLACEHOLDERS + [_REP]}

#: domains up to this many points are enumerated exactly (output shape, equality, inverse of non-affine maps)
ENUMERATION_LIMIT = 1 << 20
#: injectivity falls back to enumeration up to this many points (TileLang's bound)
INJECTIVE_ENUMERATION_LIMIT = 1 << 18


def placeholder(k: int) -> tirx.Var:
    """The k-th input placeholder (``_i`` for 0)."""
    if not 0 <= k < len(_PLACEHOLDERS):
        raise LayoutError(f"layouts support at most {len(_PLACEHOLDERS)} input dimensions, got index {k}")
    return _PLACEHOLDERS[k]


def rep_placeholder() -> tirx.Var:
    """The replica placeholder ``_rep`` of fragments."""
    return _REP


def substitute(expr, vmap: dict):
    """Replace variables in ``expr`` (Vars hash by identity)."""
    if not vmap or isinstance(expr, int):
        return expr
    return map_typed(expr, [(tvm.ir.Var, lambda v: vmap.get(v, v))])


def _signature(fn) -> inspect.Signature:
    """``inspect.signature(fn)``, computed once per code object for plain functions: layout constructors pass a
    fresh lambda on every call, and building a Signature costs more than the rest of the arity check."""
    code = getattr(fn, "__code__", None)
    if code is None or not isinstance(fn, types.FunctionType) or hasattr(fn, "__wrapped__") or \
            hasattr(fn, "__signature__"):
        return inspect.signature(fn)        # a decorated function's signature is not its code's
    key = (code, len(fn.__defaults__ or ()), tuple(sorted(fn.__kwdefaults__ or ())))
    hit = _SIGNATURES.get(key)
    if hit is None:
        if len(_SIGNATURES) > 1024:
            _SIGNATURES.clear()
        hit = _SIGNATURES[key] = inspect.signature(fn)
    return hit


#: signatures of plain functions by (code object, number of defaults, keyword-only defaults)
_SIGNATURES: dict = {}


def expr_text(e) -> str:
    """``str(e)`` (TVM's script printer) for index expressions, printed here for the common nodes: int32
    constants, variables, + - * // % (TVM prints those as Python would, parenthesising an operand of lower
    precedence, and a right operand of equal precedence). Anything else, an operation the sugar would fold
    when read back (two constants, an operand 0 or 1), a variable name TVM's printer would change, or two
    different variables of one name (which it renames apart), is handed to TVM's printer whole. Annotating a kernel prints
    every layout, and the script printer costs tens of microseconds per expression; tests compare the two
    printers on random and golden expressions."""
    try:
        return _text(e, {})[0]
    except _Unprintable:
        return str(e)


class _Unprintable(Exception):
    """A node ``expr_text`` leaves to TVM's printer."""


#: binary nodes printed here: operator and precedence (higher binds tighter)
_BINARY_TEXT = {tirx.Add: (" + ", 1), tirx.Sub: (" - ", 1), tirx.Mul: (" * ", 2), tirx.FloorDiv: (" // ", 2),
                tirx.FloorMod: (" % ", 2)}
_ATOM = 9
#: variable names TVM's printer prints as they are (it sanitises others and renames its module aliases T, I, R)
_PLAIN_NAME = re.compile(r"[a-z_][A-Za-z0-9_]*")


def _text(e, names: dict) -> tuple:
    """(text, precedence) of ``e``; ``names``: the variable printed under each name so far."""
    kind = type(e)
    op = _BINARY_TEXT.get(kind)
    if op is not None:
        left, right = e.a, e.b          # each attribute read is an FFI call: once per operand
        a_const, b_const = type(left) is tirx.IntImm, type(right) is tirx.IntImm
        if (a_const and b_const) or (a_const and left.value in (0, 1)) or (b_const and right.value in (0, 1)):
            # TVM prints ``T.Add(0, _i)`` where the sugar would be folded on reading (two literals, + 0, * 1...)
            raise _Unprintable
        symbol, prec = op
        a, pa = _text(left, names)
        b, pb = _text(right, names)
        if pa < prec:
            a = f"({a})"
        if pb <= prec:
            b = f"({b})"
        return a + symbol + b, prec
    if kind is tirx.Var:
        name = e.name
        if not _PLAIN_NAME.fullmatch(name):
            raise _Unprintable          # TVM renames these: ``a.b`` -> ``a_b``, ``T`` -> ``T_1`` (its module alias)
        seen = names.setdefault(name, e)
        if seen is not e and not seen.same_as(e):
            raise _Unprintable
        return name, _ATOM
    if kind is tirx.IntImm and _is_int32(e.ty):
        return str(e.value), _ATOM
    raise _Unprintable


#: TVM keeps one PrimType object per dtype it has made: identity is the cheap test, the dtype the sure one
_INT32_TYPE = PrimType("int32")


def _is_int32(ty) -> bool:
    return ty.same_as(_INT32_TYPE) or ty.dtype == "int32"


def call_user_fn(fn, args, what: str, role: str):
    """Call a user's forward function, turning an arity mismatch into a LayoutError (shape/rank mismatch)."""
    try:
        _signature(fn).bind(*args)
    except TypeError as err:
        names = ", ".join(getattr(a, "name", str(a)) for a in args)
        raise LayoutError(f"{what}: {role} must take {len(args)} arguments ({names}) but does not: {err}") from None
    except ValueError:  # no introspectable signature (builtin): let the call speak for itself
        pass
    try:
        return fn(*args)
    except TileLayoutError:
        raise
    except Exception as err:  # TVM rejects the expression the function builds (``i // 0``, a float operand...)
        first = str(err).splitlines()[0][:200] if str(err) else ""
        raise LayoutError(f"{what}: {role} failed: {type(err).__name__}: {first}") from None


def _as_expr(value):
    if isinstance(value, (bool, np.bool_)):
        raise LayoutError(f"a layout expression must be an integer expression, got boolean {value!r}")
    if isinstance(value, (int, np.integer)):
        return tirx.const(int(value), "int32")
    if isinstance(value, tvm.ir.Expr):
        if "int" not in str(value.ty):
            raise LayoutError(f"a layout expression must have an integer type, got {value.ty}: {value}")
        return value
    raise LayoutError(f"a layout expression must be an int or a PrimExpr, got {type(value).__name__}: {value!r}")


def normalize_shape(shape, what: str = "layout") -> list:
    """Validate a shape: positive ints (kept as int) or symbolic integer PrimExprs."""
    if isinstance(shape, (int, np.integer)):
        shape = [shape]
    out = []
    for s in shape:
        if isinstance(s, tvm.ir.Expr) and type(s).__name__ == "IntImm":
            s = int(s.value)
        if isinstance(s, (bool, np.bool_, float)) or not isinstance(s, (int, np.integer, tvm.ir.Expr)):
            raise LayoutError(f"{what} extent must be a positive integer or an integer PrimExpr, got {s!r}")
        if isinstance(s, (int, np.integer)):
            if s < 1:
                raise LayoutError(f"{what} extent must be positive, got {s}")
            s = int(s)
        out.append(s)
    return out


def shape_vars(shape: Sequence) -> set:
    """Free variables of symbolic extents: expressions of a symbolic layout may use them (``_i * n + _j``)."""
    found: list = []
    for s in shape:
        if isinstance(s, tvm.ir.Expr):
            found.extend(free_vars(s))
    return set(found)


def is_static(shape: Sequence) -> bool:
    return all(isinstance(s, int) for s in shape)


def shape_size(shape: Sequence):
    out = 1
    for s in shape:
        out = out * s
    return out


def make_analyzer(variables: Sequence, shape: Sequence) -> sym.Analyzer:
    """Analyzer with each variable bound to [0, extent) and every symbolic extent's variable known >= 1."""
    ana = sym.Analyzer()
    for var in sorted(shape_vars(shape), key=lambda v: v.name):
        ana.update(var, sym.ConstIntBound(1, sym.ConstIntBound.POS_INF), override=True)
    for v, s in zip(variables, shape):
        ana.bind(v, Range(0, s))
    return ana


def simplifier(variables: Sequence, shape: Sequence) -> sym.Analyzer:
    """``make_analyzer`` for simplifying only (callers must not bind or constrain it further): one shared
    analyzer per static (variables, shape), since building one costs more than most simplifications."""
    if all(isinstance(s, int) for s in shape):
        return _shared_analyzer(tuple(variables), tuple(shape))
    return make_analyzer(variables, shape)


@functools.lru_cache(maxsize=256)
def _shared_analyzer(variables: tuple, shape: tuple) -> sym.Analyzer:
    return make_analyzer(list(variables), list(shape))


def simplify(exprs: Sequence, variables: Sequence, shape: Sequence) -> list:
    ana = simplifier(variables, shape)
    return [ana.simplify(e) for e in exprs]


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def free_vars(expr) -> list:
    """The variables an expression uses, by one FFI call (a Python structural walk costs ~40x more); variables a
    Let inside ``expr`` binds are not reported."""
    if isinstance(expr, (int, float, np.integer)) or not isinstance(expr, tvm.ir.Expr):
        return []
    return as_list(tirx.analysis.undefined_vars(expr, []))


def mentions(expr, variables) -> bool:
    """Whether ``expr`` (any IR node) refers to one of ``variables`` (a Var or an iterable of Vars)."""
    if isinstance(expr, (int, float)):
        return False
    targets = [variables] if isinstance(variables, tvm.ir.Var) else list(variables)
    if not targets:
        return False
    if isinstance(expr, tvm.ir.Expr):
        # the targets are bound outside the expression (well-formed IR never rebinds them inside it)
        return any(v.same_as(w) for v in free_vars(expr) for w in targets)
    hits: list = []

    def visit(v):
        if any(v.same_as(w) for w in targets):
            hits.append(1)
            return tvm_ffi.VisitInterrupt(None)
        return None

    walk_typed(expr, [(tvm.ir.Var, visit)])
    return bool(hits)


class ExprKey:
    """Expressions compared structurally (the same tree over the same variables) and hashed by TVM's structural
    hash: a memo key for a layout's expressions without printing them (printing costs ~5x the hash)."""

    __slots__ = ("exprs", "_hash")

    def __init__(self, exprs):
        self.exprs = tuple(exprs)
        self._hash = hash(tuple(tvm_ffi.structural_hash(e) for e in self.exprs))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, ExprKey) or self._hash != other._hash or len(self.exprs) != len(other.exprs):
            return False
        return all(a.same_as(b) or tvm_ffi.structural_equal(a, b) for a, b in zip(self.exprs, other.exprs))

    def __repr__(self) -> str:
        return f"ExprKey({', '.join(str(e) for e in self.exprs)})"


def row_major_offset(coords: Sequence, shape: Sequence):
    """The row-major element number of ``coords`` in ``shape`` as an int32 expression."""
    out = tirx.const(0, "int32")
    for c, s in zip(coords, shape):
        out = out * s + c
    return out


def row_major_strides(shape: Iterable) -> tuple:
    """Element strides of a row-major array of ``shape`` (the last axis has stride 1)."""
    out, step = [], 1
    for ext in reversed([int(s) for s in shape]):
        out.append(step)
        step *= ext
    return tuple(reversed(out))
