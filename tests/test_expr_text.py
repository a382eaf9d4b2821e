"""``expr_text`` prints index expressions exactly as TVM's script printer does (it is used in its place when
layouts are annotated and snapshotted): random expressions over the printed node kinds, expressions with
nodes it leaves to TVM, and every expression of every golden layout."""
from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings, strategies as st
from tvm import tirx

from tilelayout import layout_from_dict
from tilelayout.expr import expr_text

_VARS = [tirx.Var(n, "int32") for n in ("_i", "_j", "_k", "tx")]
_OPS = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, tirx.floordiv, tirx.floormod,
        lambda a, b: tirx.Add(a, b), lambda a, b: tirx.Sub(a, b), lambda a, b: tirx.Mul(a, b),
        lambda a, b: tirx.FloorDiv(a, b) if not _zero(b) else a, lambda a, b: tirx.FloorMod(a, b) if not _zero(b) else a]


def _zero(e) -> bool:
    return isinstance(e, tirx.IntImm) and e.value == 0


def _expr(draw, depth: int):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            return draw(st.sampled_from(_VARS))
        return tirx.const(draw(st.sampled_from([0, 1, 2, 3, 8, 16, 32, 64, -1, -4, 1024])), "int32")
    op = draw(st.sampled_from(_OPS))
    a, b = _expr(draw, depth - 1), _expr(draw, depth - 1)
    try:
        return op(a, b)
    except Exception:                      # TVM folds or refuses (division by a zero constant)
        return a


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_random_index_expressions_print_as_tvm_prints_them(data):
    e = _expr(data.draw, data.draw(st.integers(1, 5)))
    if isinstance(e, int):
        return
    assert expr_text(e) == str(e)


def test_other_nodes_and_renamed_variables_are_left_to_tvm():
    i, j = _VARS[:2]
    other_i = tirx.Var("_i", "int32")                         # same name, different variable: TVM renames it
    n64 = tirx.Var("n", "int64")
    renamed = [tirx.Var(n, "int32") for n in ("T", "I", "R", "a.b", "x y", "Tx")]    # sanitised or aliases
    for v in renamed:
        assert expr_text(v * 4 + 2) == str(v * 4 + 2)
    for e in [tirx.max(i, j) + 1, tirx.Select(i < j, i, j) * 2, n64 + tirx.const(1, "int64"), i + other_i,
              tirx.Cast("int32", n64) // 4, tirx.truncdiv(i, 3), tirx.const(7, "int64") * n64]:
        assert expr_text(e) == str(e)


def test_every_golden_layout_prints_as_tvm_prints_it():
    count = 0
    for path in sorted((Path(__file__).resolve().parent.parent / "expected").glob("*.json")):
        for variant in json.loads(path.read_text()).values():
            for model in variant.values():
                for d in list(model.get("buffers", {}).values()) + list(model.get("loops", {}).values()):
                    if d.get("kind") not in ("Layout", "Fragment"):
                        continue
                    lay = layout_from_dict(d)
                    exprs = list(lay.forward_index) + ([lay.forward_thread] if d["kind"] == "Fragment" else [])
                    for e in exprs:
                        assert expr_text(e) == str(e)
                        count += 1
    assert count > 500
