"""A float compared with itself is a NaN test: ``x != x`` is true exactly for NaN, ``x == x`` false exactly for NaN.

TVM's simplifier treats comparisons as if values were integers and folds ``x != x`` to false (``x == x``,
``x <= x``, ``x >= x`` to true), so ``T.if_then_else(x != x, -1.0, x)`` passes NaNs through on every target
(TileLang #3024). The user's function is rewritten on entry to inference and lowering, before anything
simplifies it: the self-comparison becomes ``T.isnan(x)`` (or its negation), which every backend keeps.
``x < x`` and ``x > x`` are false for every float, NaN included, so their folding is right and they stay.
"""
from __future__ import annotations

import tvm_ffi
from tvm import tirx

from .ir_utils import mapped

__all__ = ["rewrite_nan_tests"]


def _is_float(e) -> bool:
    return str(e.ty).startswith(("float", "bfloat"))


def _self_compared(node) -> bool:
    return _is_float(node.a) and tvm_ffi.structural_equal(node.a, node.b)


def _isnan(node, negate: bool):
    if not _self_compared(node):
        return node
    test = tirx.isnan(node.a)
    return tirx.Not(test) if negate else test


def rewrite_nan_tests(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every float self-comparison written as the NaN test it is (``x != x`` -> ``isnan(x)``;
    ``x == x``, ``x <= x``, ``x >= x`` -> ``not isnan(x)``)."""
    body = mapped(func.body, [(tirx.NE, lambda n: _isnan(n, False)), (tirx.EQ, lambda n: _isnan(n, True)),
                              (tirx.LE, lambda n: _isnan(n, True)), (tirx.GE, lambda n: _isnan(n, True))])
    return func if body.same_as(func.body) else func.with_body(body)
