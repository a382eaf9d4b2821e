"""Could two float expressions become the same expression once TVM has simplified their indices?

TVM's simplifier applies float identities (``x - x -> 0``, ``(x + y) - y -> x``, ``x == x -> true``) when the
two operands are the same expression, and it decides sameness *after* it has simplified what is inside
them: ``A[i] - A[(i + 32) % 32]`` becomes ``A[i] - A[i]`` in a loop over 32 and then ``0``. A pass that wants
to keep IEEE semantics must therefore ask, before anything simplifies, whether two operands *may* coincide:

- integer subexpressions (indices, casts of loop variables) may coincide unless the analyzer proves them
  different for every value of their variables (``i + 1`` and ``i`` never do);
- float subexpressions must have the same shape: same operator, same buffer, same constant, children that
  may coincide pairwise (the only float rewrites left are the identities being guarded against);
- a variable bound once to a value (``v = a + 3.0``) stands for that value, since the simplifier substitutes
  pure bindings.

The answer errs towards "may": a false "may" only costs a guarded form of an operation the simplifier would
have left alone.
"""
from __future__ import annotations

import tvm_ffi
from tvm import sym, tirx
from tvm.ir import Call, TensorLoad
from tvm.ir.expr import Expr

from tilelayout.expr import substitute

from .ir_utils import walk

__all__ = ["Coincidence", "is_float"]

#: how many bound variables one comparison follows before it gives up and answers "may"
_MAX_RESOLVE = 32


def is_float(e) -> bool:
    """True for a float scalar or vector expression (float16/32/64, bfloat16, fp8 kinds)."""
    return str(e.ty).startswith(("float", "bfloat"))


def _is_int(e) -> bool:
    return str(e.ty).startswith(("int", "uint"))


_BINARY = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max,
           tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.And, tirx.Or)


class Coincidence:
    """``may(a, b)`` for the expressions of one function (its ``Bind`` / ``LetStmt`` values are followed)."""

    def __init__(self, func: tirx.PrimFunc | None = None):
        self.bound: dict = {}
        self.ana = sym.Analyzer()
        if func is not None:
            walk(func.body, [(tirx.Bind, self._note_binding), (tirx.LetStmt, self._note_binding)])

    def _note_binding(self, node) -> None:
        value = getattr(node, "value", None)
        if isinstance(value, Expr) and hasattr(value, "ty"):
            self.bound[node.var] = value

    def resolve(self, e, depth: int = 0):
        """``e`` with a bound variable replaced by its value (the simplifier's view of it)."""
        while isinstance(e, tirx.Var) and e in self.bound and depth < _MAX_RESOLVE:
            e, depth = self.bound[e], depth + 1
        return e

    def _index_may(self, a, b) -> bool:
        for _ in range(_MAX_RESOLVE):       # named indices (``j = i + 32``) as the simplifier sees them
            a2, b2 = substitute(a, self.bound), substitute(b, self.bound)
            if tvm_ffi.structural_equal(a2, a) and tvm_ffi.structural_equal(b2, b):
                break
            a, b = a2, b2
        if str(a.ty) != str(b.ty):
            a, b = tirx.Cast("int64", a), tirx.Cast("int64", b)
        try:
            return not self.ana.can_prove(tirx.NE(a, b))
        except Exception:           # an index the analyzer cannot reason about: it may coincide
            return True

    def may(self, a, b, depth: int = 0) -> bool:
        """True unless ``a`` and ``b`` can never become the same expression under TVM's simplifier."""
        if depth > _MAX_RESOLVE:
            return True
        a, b = self.resolve(a), self.resolve(b)
        if a.same_as(b) or tvm_ffi.structural_equal(a, b):
            return True
        if _is_int(a) and _is_int(b):
            return self._index_may(a, b)
        if type(a) is not type(b) or str(a.ty) != str(b.ty):
            return False
        if isinstance(a, (tirx.FloatImm, tirx.IntImm)):
            return float(a.value) == float(b.value)
        if isinstance(a, tirx.Var):
            return False                  # two different free variables stay different
        if isinstance(a, TensorLoad):
            return (a.source.same_as(b.source) and len(a.indices) == len(b.indices)
                    and all(self.may(x, y, depth + 1) for x, y in zip(a.indices, b.indices)))
        if isinstance(a, _BINARY):
            return self.may(a.a, b.a, depth + 1) and self.may(a.b, b.b, depth + 1)
        if isinstance(a, tirx.Not):
            return self.may(a.a, b.a, depth + 1)
        if isinstance(a, tirx.Select):
            return all(self.may(x, y, depth + 1) for x, y in ((a.condition, b.condition),
                                                              (a.true_value, b.true_value),
                                                              (a.false_value, b.false_value)))
        if isinstance(a, tirx.Cast):
            return self.may(a.value, b.value, depth + 1)
        if isinstance(a, Call):
            return (a.op.same_as(b.op) and len(a.args) == len(b.args)
                    and all(self.may(x, y, depth + 1) for x, y in zip(a.args, b.args)))
        if isinstance(a, tirx.Broadcast):
            return self.may(a.value, b.value, depth + 1)
        if isinstance(a, tirx.Ramp):
            return self.may(a.base, b.base, depth + 1) and self.may(a.stride, b.stride, depth + 1)
        return True                       # an expression kind not modelled here: assume the worst
