"""The row-major element offset of a global access as ``base + sum(coord[d] * strides[d])`` over its nest.

io-aware scores a statement from the strides of each global access. Most indices are sums of loop variables
times constants; reading the strides off that polynomial is a proof on the whole domain, so the exact
enumeration (evaluate every point, check the affine prediction everywhere) is needed only for the rest
(``floordiv``/``floormod`` that happen to be affine on the domain, selects, ...), where it stays the judge.
Block indices and enclosing serial loop variables (charged through the statement's ``repeat``) count as 0.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.ir import prim as P

from tilelayout.errors import EvaluationError
from tilelayout.evaluate import evaluate, grid_env

__all__ = ["affine_address", "affine_address_by_enumeration", "linear_form"]


def _zero_vars(nest, graph) -> list:
    out = list(graph.block_vars.values())
    out += [loop.var for loop in getattr(nest.op, "serial_loops", ()) if loop.var is not None]
    return out


def linear_form(expr, variables: list, zeros: list) -> tuple | None:
    """(coefficient per variable, constant) when ``expr`` is an integer polynomial of degree <= 1 in
    ``variables`` with ``zeros`` bound to 0; None for anything else (the caller then enumerates)."""
    index = {}
    for k, v in enumerate(variables):
        index[v] = k
    zero = set(zeros)
    n = len(variables)

    def walk(e):
        kind = type(e)
        if kind is P.IntImm:
            return [0] * n, int(e.value)
        if isinstance(e, tvm.ir.Var):
            if e in index:
                coefs = [0] * n
                coefs[index[e]] = 1
                return coefs, 0
            if e in zero:
                return [0] * n, 0
            return None
        if kind is P.Add or kind is P.Sub:
            a, b = walk(e.a), walk(e.b)
            if a is None or b is None:
                return None
            sign = 1 if kind is P.Add else -1
            return [x + sign * y for x, y in zip(a[0], b[0])], a[1] + sign * b[1]
        if kind is P.Mul:
            a, b = walk(e.a), walk(e.b)
            if a is None or b is None:
                return None
            if not any(b[0]):
                return [x * b[1] for x in a[0]], a[1] * b[1]
            if not any(a[0]):
                return [a[1] * y for y in b[0]], a[1] * b[1]
            return None
        if kind is P.Cast and str(e.ty).startswith(("int", "uint")):
            return walk(e.value)
        return None

    return walk(expr)


def affine_address(access, nest, graph) -> tuple | None:
    """(strides per loop dim, base) of the access's row-major element offset, proven on the whole domain
    (symbolically when every index is linear, else by enumeration); None when not affine. A dimension of
    extent 1 has stride 0."""
    buf = access.buffer
    if not all(isinstance(s, int) for s in buf.shape):
        return None
    zeros = _zero_vars(nest, graph)
    strides, base = [0] * len(nest.loop_vars), 0
    for idx, ext in zip(access.indices, buf.shape):
        form = linear_form(idx, list(nest.loop_vars), zeros) if not isinstance(idx, int) else ([0] * len(strides), idx)
        if form is None:
            return affine_address_by_enumeration(access, nest, graph)
        strides = [s * ext + c for s, c in zip(strides, form[0])]
        base = base * ext + form[1]
    strides = [s if e > 1 else 0 for s, e in zip(strides, nest.extents)]
    return tuple(strides), base


def affine_address_by_enumeration(access, nest, graph) -> tuple | None:
    """The same answer by evaluating the offset at every point of the nest and checking the affine
    prediction at each; None when not affine or not enumerable."""
    buf = access.buffer
    if not all(isinstance(s, int) for s in buf.shape):
        return None
    env = grid_env(nest.loop_vars, nest.extents)
    for var in _zero_vars(nest, graph):
        env[var] = np.int64(0)
    shape = tuple(nest.extents)
    try:
        flat = np.zeros(shape, dtype=np.int64)
        for idx, ext in zip(access.indices, buf.shape):
            flat = flat * ext + np.broadcast_to(evaluate(idx, env), shape)
    except EvaluationError:  # an index the model cannot enumerate (a data-dependent load, a free variable)
        return None
    origin = (0,) * len(shape)
    base = int(flat[origin])
    strides = []
    for d in range(len(shape)):
        unit = list(origin)
        unit[d] = 1 if shape[d] > 1 else 0
        strides.append(int(flat[tuple(unit)]) - base if shape[d] > 1 else 0)
    predicted = np.full(shape, base, dtype=np.int64)
    for d, st in enumerate(strides):
        view = [1] * len(shape)
        view[d] = shape[d]
        predicted = predicted + (np.arange(shape[d], dtype=np.int64) * st).reshape(view)
    if not np.array_equal(predicted, flat):
        return None
    return tuple(strides), base
