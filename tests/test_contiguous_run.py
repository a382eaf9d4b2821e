"""Vectorisation's contiguity test: the closed form for affine offsets (``loop_plan._affine_run``) gives the
analyzer's answer (``_proved_run``) on random offsets, and both agree with enumeration where they say yes."""
from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings, strategies as st
from tvm import tirx

from tilelayout.passes.inference import loop_plan


def _offset(draw, loop_vars, outer_var):
    coeffs = [draw(st.sampled_from([0, 1, 1, 2, 3, 4, 8, 16, 32, 64, -1, 130])) for _ in loop_vars]
    expr = tirx.const(draw(st.sampled_from([0, 0, 1, 4, 8, 16, 36])), "int32")
    for v, c in zip(loop_vars, coeffs):
        if c:
            expr = expr + v * c if draw(st.booleans()) else expr + c * v
    if draw(st.booleans()):
        expr = expr + outer_var * draw(st.sampled_from([1, 8, 32, 96]))     # a serial loop: any integer
    if draw(st.booleans()):
        expr = expr - loop_vars[0] * draw(st.sampled_from([1, 2, 8]))
    return expr


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_affine_closed_form_equals_the_analyzer(data):
    extents = [data.draw(st.sampled_from([1, 2, 4, 8, 16])) for _ in range(3)]
    loop_vars = [tirx.Var(f"v{k}", "int32") for k in range(3)]
    outer = tirx.Var("ko", "int32")
    offset = _offset(data.draw, loop_vars, outer)
    width = data.draw(st.sampled_from([2, 4, 8]))
    inner, inner_ext = loop_vars[-1], extents[-1]
    if inner_ext % width:
        return
    bounds = dict(zip(loop_vars, extents))
    terms = loop_plan.affine_terms(offset)
    assert terms is not None
    fast = loop_plan._affine_run(terms, inner, width, bounds)
    proved = loop_plan._proved_run(offset, inner, inner_ext, width, bounds)
    assert fast == proved, (str(offset), width, extents)
    if fast:        # and a yes is true: every aligned run of the inner loop reads consecutive, aligned elements
        env_vars = loop_vars + [outer]
        for point in itertools.product(*[range(e) for e in extents[:-1]], [0, 1, 5]):
            values = dict(zip(loop_vars[:-1], point[:-1]))
            values[outer] = point[-1]
            offs = [_eval(offset, {**values, inner: j}) for j in range(inner_ext)]
            runs = np.asarray(offs).reshape(-1, width)
            assert (runs == runs[:, :1] + np.arange(width)).all() and (runs[:, 0] % width == 0).all()


def _eval(expr, values):
    from tilelayout.evaluate import evaluate
    return int(evaluate(expr, {k: np.int64(v) for k, v in values.items()}))


def test_non_affine_offsets_go_to_the_analyzer():
    v = tirx.Var("v", "int32")
    assert loop_plan.affine_terms(tirx.floordiv(v, 2) * 8 + v % 2) is None
    assert loop_plan.affine_terms(v * v) is None
    assert loop_plan.is_contiguous_run(tirx.floordiv(v, 4) * 4 + v % 4, v, 16, 4, {v: 16})
    assert not loop_plan.is_contiguous_run(v % 4 * 4 + tirx.floordiv(v, 4), v, 16, 4, {v: 16})
