"""A float compared with itself is a NaN test: ``x != x`` is true exactly for NaN, ``x == x`` false exactly for NaN.

TVM's simplifier treats comparisons as if values were integers and folds ``x != x`` to false (``x == x``,
``x <= x``, ``x >= x`` to true), so ``T.if_then_else(x != x, -1.0, x)`` passes NaNs through on every target
(TileLang #3024). The user's function is rewritten on entry to inference and lowering, before anything
simplifies it: the self-comparison becomes ``T.isnan(x)`` (or its negation), which every backend keeps.
``x < x`` and ``x > x`` are false for every float, NaN included, so their folding is right and they stay.

The simplifier also decides sameness after simplifying indices (``A[i] == A[(i + 32) % 32]`` in a loop over 32
is ``A[i] == A[i]``). A comparison whose operands differ as written but may coincide (``float_coincidence``)
is guarded instead: ``a == b`` becomes ``not isnan(a) and a == b`` (``<=``, ``>=`` alike), ``a != b`` becomes
``isnan(a) or a != b``. Both are the IEEE result whether or not the operands turn out the same, and right
after the simplifier folds the bare comparison.
"""
from __future__ import annotations

import tvm_ffi
from tvm import tirx
from tvm.ir import Call

from .float_coincidence import Coincidence, is_float
from .ir_utils import mapped, walk

__all__ = ["rewrite_nan_tests"]


def _guarded(func) -> list:
    """Comparisons already guarded by an earlier run (``not isnan(a) and a == b``, ``isnan(a) or a != b``)."""
    found: list = []

    def note(n):
        test = n.a.a if isinstance(n, tirx.And) and isinstance(n.a, tirx.Not) else n.a
        if isinstance(test, Call) and getattr(test.op, "name", "") == "tirx.isnan" and \
                isinstance(n.b, (tirx.EQ, tirx.NE, tirx.LE, tirx.GE)) and \
                tvm_ffi.structural_equal(test.args[0], n.b.a):
            found.append(n.b)
    walk(func.body, [(tirx.And, note), (tirx.Or, note)])
    return found


def _isnan(node, negate: bool, same: Coincidence, guarded: list):
    if not is_float(node.a) or any(node.same_as(g) for g in guarded):
        return node
    if tvm_ffi.structural_equal(node.a, node.b):
        test = tirx.isnan(node.a)
        return tirx.Not(test) if negate else test
    if not same.may(node.a, node.b):
        return node
    if negate:
        return tirx.And(tirx.Not(tirx.isnan(node.a)), node)
    return tirx.Or(tirx.isnan(node.a), node)


def rewrite_nan_tests(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every float self-comparison written as the NaN test it is (``x != x`` -> ``isnan(x)``;
    ``x == x``, ``x <= x``, ``x >= x`` -> ``not isnan(x)``) and every comparison that may become one guarded.
    Running it twice changes nothing more."""
    same, guarded = Coincidence(func), _guarded(func)
    body = mapped(func.body, [(kind, lambda n, negate=negate: _isnan(n, negate, same, guarded))
                              for kind, negate in ((tirx.NE, False), (tirx.EQ, True), (tirx.LE, True),
                                                   (tirx.GE, True))])
    return func if body.same_as(func.body) else func.with_body(body)
