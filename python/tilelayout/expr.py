"""Small helpers over index expressions shared by the core objects and the passes.

One definition each, so "does this expression mention that variable" and "row-major element number"
mean the same thing everywhere they are asked.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import tvm
import tvm_ffi
from tvm import tirx


def mentions(expr, variables) -> bool:
    """Whether ``expr`` (any IR node) refers to one of ``variables`` (a Var or an iterable of Vars)."""
    if isinstance(expr, (int, float)):
        return False
    targets = [variables] if isinstance(variables, tvm.ir.Var) else list(variables)
    if not targets:
        return False
    hits: list = []

    def visit(v):
        if any(v.same_as(w) for w in targets):
            hits.append(1)
            return tvm_ffi.VisitInterrupt(None)
        return None

    tvm_ffi.structural_walk(expr, (tvm.ir.Var, visit))
    return bool(hits)


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
