"""The golden runner's shortcuts through TVMScript's parser (``case_loader``): syntax trees shared by source
(``share_source_parses``), caller stacks without unread source lines (``light_caller_stacks``) and compiled
expressions shared by shape (``share_expression_code``).

Each is only sound if the parser builds the same kernel with it: every case variant is parsed without the
shortcut and again with it, and the printed kernels must be identical.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint.case_loader import (discover, light_caller_stacks, load_case, share_expression_code,  # noqa: E402
                               share_source_parses)
from maint import case_loader  # noqa: E402
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
    original, lines = diagnostics.Source.as_ast, diagnostics.getsourcelines
    with share_source_parses():
        assert diagnostics.Source.as_ast is not original and diagnostics.getsourcelines is not lines
        with share_source_parses() as nested:        # nesting neither re-wraps nor restores early
            assert nested
        assert diagnostics.Source.as_ast is not original and diagnostics.getsourcelines is not lines
    assert diagnostics.Source.as_ast is original and diagnostics.getsourcelines is lines


def test_sharing_is_undone_when_the_run_raises():
    original, lines = diagnostics.Source.as_ast, diagnostics.getsourcelines
    with pytest.raises(RuntimeError):
        with share_source_parses():
            raise RuntimeError("case failed")
    assert diagnostics.Source.as_ast is original and diagnostics.getsourcelines is lines


def test_a_definition_is_cut_out_of_its_file_once():
    """While sharing, every variant built from one definition gets the lines TVM finds for it, found once."""
    builds = _variants()
    real = diagnostics.getsourcelines
    calls: list = []

    def counting(obj):
        calls.append(obj.__code__)
        return real(obj)

    diagnostics.getsourcelines = counting
    try:
        with share_source_parses():
            for build in builds.values():
                build()
    finally:
        diagnostics.getsourcelines = real
    assert len(calls) == len(set(calls)) < len(builds)


def test_expression_code_shared_by_shape_builds_every_variant_alike():
    from tvm.script.parser.core import evaluator
    builds = _variants()
    plain = {key: build().script() for key, build in builds.items()}
    compiled: list = []
    real_compile = compile

    def counting(*args, **kwargs):
        compiled.append(1)
        return real_compile(*args, **kwargs)

    original = evaluator._eval_expr
    with share_expression_code() as on:
        assert on and evaluator._eval_expr is not original
        case_loader.compile = counting              # count what the shared evaluator really compiles
        try:
            shared = {key: build().script() for key, build in builds.items()}
        finally:
            del case_loader.compile
    assert evaluator._eval_expr is original
    assert [k for k in plain if plain[k] != shared[k]] == []
    assert 0 < len(compiled) < 2000                 # a few hundred shapes, where TVM alone compiles ~15,000


def test_expression_shapes_tell_literal_types_apart():
    """1, 1.0, True and -0.0 / 0.0 compare (and hash) equal in Python but compile to different constants."""
    from tvm.script.parser.core import doc
    keys = {case_loader._shape_key(doc.Constant(v, None, 1, 0, 1, 1), doc.AST) for v in (1, 1.0, True, 0.0, -0.0)}
    assert len(keys) == 5
    moved = [case_loader._shape_key(doc.Name("x", doc.Load(), line, 0, line, 1), doc.AST) for line in (1, 7)]
    assert moved[0] == moved[1]                      # where it was written does not change the code
    with pytest.raises(case_loader._Unkeyed):
        case_loader._shape_key(doc.Constant(float("nan"), None, 1, 0, 1, 1), doc.AST)


def test_expression_sharing_ends_with_the_context_and_nests():
    from tvm.script.parser.core import evaluator
    original = evaluator._eval_expr
    with pytest.raises(RuntimeError):
        with share_expression_code():
            with share_expression_code() as nested:
                assert nested and evaluator._eval_expr is not original
            assert evaluator._eval_expr is not original
            raise RuntimeError("case failed")
    assert evaluator._eval_expr is original


def _outer_frames():
    import inspect
    return inspect.stack(), case_loader._LightInspect.stack()


def test_light_stacks_keep_what_the_decorator_reads():
    """The first three frames are ``inspect.stack()``'s (source line included); every frame keeps its frame
    object, file, line and function."""
    full, light = (lambda: _outer_frames())()
    full = full[1:]                  # inspect.stack() was called one line apart: compare from the caller on
    light = light[1:]
    assert len(full) == len(light)
    for k, (a, b) in enumerate(zip(full, light)):
        assert a.frame is b.frame and a.lineno == b.lineno and a.function == b.function
        if k < case_loader._FRAMES_WITH_SOURCE - 1:
            assert a.code_context == b.code_context and a.filename == b.filename


def test_light_stacks_build_every_variant_alike():
    from tvm.tirx.script.parser import entry
    builds = _variants()
    plain = {key: build().script() for key, build in builds.items()}
    real = entry.inspect
    with light_caller_stacks() as on:
        assert on and entry.inspect is not real
        with light_caller_stacks() as nested:
            assert nested
        assert entry.inspect is not real
        light = {key: build().script() for key, build in builds.items()}
    assert entry.inspect is real
    assert [k for k in plain if plain[k] != light[k]] == []
