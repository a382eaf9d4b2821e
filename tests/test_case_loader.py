"""The golden runner's sharing of TVMScript syntax trees (``case_loader.share_source_parses``).

Sharing is only sound if a parse never changes the tree it reads: every case variant is parsed without
sharing and again with it (most variants then parse a tree an earlier variant already used), and the
printed kernels must be identical.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint.case_loader import discover, load_case, share_source_parses  # noqa: E402
from tvm.script.parser.core import diagnostics  # noqa: E402

CASES = ROOT / "cases"


def _variants() -> dict:
    return {(name, variant): build for name in discover(CASES)
            for variant, build in load_case(CASES, name).VARIANTS.items()}


def test_shared_trees_parse_every_variant_to_the_same_kernel():
    builds = _variants()
    plain = {key: build().script() for key, build in builds.items()}
    made: list = []
    original = diagnostics.Source.as_ast

    def counting(self):
        made.append(self.source)
        return original(self)

    diagnostics.Source.as_ast = counting       # count the trees TVM really builds while sharing is on
    try:
        with share_source_parses() as on:
            assert on
            shared = {key: build().script() for key, build in builds.items()}
    finally:
        diagnostics.Source.as_ast = original
    assert [k for k in plain if plain[k] != shared[k]] == []
    # one tree per distinct source, where TVM alone builds two per variant
    assert len(made) == len(set(made)) < len(builds)


def test_sharing_ends_with_the_context():
    original = diagnostics.Source.as_ast
    with share_source_parses():
        assert diagnostics.Source.as_ast is not original
        with share_source_parses() as nested:        # nesting neither re-wraps nor restores early
            assert nested
        assert diagnostics.Source.as_ast is not original
    assert diagnostics.Source.as_ast is original


def test_sharing_is_undone_when_the_run_raises():
    original = diagnostics.Source.as_ast
    with pytest.raises(RuntimeError):
        with share_source_parses():
            raise RuntimeError("case failed")
    assert diagnostics.Source.as_ast is original
