"""tilelayout.report: collapsing identical free-level attempts, the tie-break statement, JSON forms."""
from __future__ import annotations

import json
from types import SimpleNamespace

import tilelayout as tl
from tilelayout.passes.inference.layout_inference import Attempt
from tilelayout.report import TIE_BREAK, attempt_groups, explain_dict, explain_lines


def _frag(thread):
    return tl.Fragment([8, 4], thread)


def _result(attempts):
    return SimpleNamespace(attempts=attempts, cost_model="fake")


def test_identical_outcomes_collapse_with_their_roots_in_order():
    a, b = _frag(lambda i, j: i * 4 + j), _frag(lambda i, j: j * 8 + i)
    attempts = [Attempt(0, 0, "op A", 10, 4, True, None, {"f": a}),
                Attempt(0, 1, "op B", 12, 4, False, None, {"f": b}),
                Attempt(0, 2, "op C", 10, 4, False, None, {"f": _frag(lambda i, j: i * 4 + j)}),
                Attempt(0, 3, "op D", error="buffer f: conflict"),
                Attempt(0, 4, "op E", error="buffer f: conflict"),
                Attempt(1, 5, "op F", 0, 1, True, None, {"g": a})]
    groups = attempt_groups(_result(attempts))
    assert [(g.component, g.roots, g.chosen) for g in groups] == [
        (0, ["op A", "op C"], True), (0, ["op B"], False), (0, ["op D", "op E"], False), (1, ["op F"], True)]
    lines = explain_lines(_result(attempts))
    assert lines[0] == f"cost model fake; {TIE_BREAK}"
    assert "    2 identical attempts: mem=10 slots=4 CHOSEN (the first root listed won)" in lines
    assert "    2 identical attempts: REJECTED: buffer f: conflict" in lines
    assert "    root op B: mem=12 slots=4 not chosen" in lines
    assert "  component 0: 5 root(s) tried, 3 distinct outcome(s)" in lines


def test_same_cost_but_different_layouts_do_not_collapse():
    attempts = [Attempt(0, 0, "op A", 10, 4, True, None, {"f": _frag(lambda i, j: i * 4 + j)}),
                Attempt(0, 1, "op B", 10, 4, False, None, {"f": _frag(lambda i, j: j * 8 + i)})]
    assert [g.count for g in attempt_groups(_result(attempts))] == [1, 1]


def test_explain_dict_is_json():
    attempts = [Attempt(0, 0, "op A", 1, 2, True, None, {"f": _frag(lambda i, j: i * 4 + j)})]
    data = json.loads(json.dumps(explain_dict(_result(attempts))))
    assert data["tie_break"] == TIE_BREAK
    assert data["attempts"][0]["layouts"]["f"]["kind"] == "Fragment" and data["attempts"][0]["count"] == 1


def test_no_search_is_said_plainly():
    assert "no free-level search was needed" in explain_lines(_result([]))[2]
