"""An epilogue split's run built from the unsplit run (``epilogue_reuse``) gives what the full run gives: the
same layouts, loops, attempts, conversions, notes and annotated function, on every kernel that stages one."""
from __future__ import annotations

import importlib
import pathlib
import warnings

import pytest

from tilelayout.passes.inference import conversion_plan, layout_inference
from tilelayout.passes.inference.layout_inference import clear_caches, infer_layouts

ROOT = pathlib.Path(__file__).resolve().parent.parent
_SHORTCUT = layout_inference._Engine.run_after_epilogue_split
STAGED = ["gemm_pipelined", "gemm_fp8", "gemm_register_a", "gemm_chain", "gemm_tile", "conversion_two_consumers"]


def _variants():
    out = []
    for case in STAGED:
        mod = importlib.import_module(f"cases.{case}")
        out += [(case, v) for v in sorted(mod.VARIANTS)]
    return out


def _everything(result) -> dict:
    """Every output of one inference, as plain data."""
    return {
        "buffers": {k: v.to_dict() for k, v in result.buffers.items()},
        "loops": {k: v.to_dict() for k, v in result.loops.items()},
        "op_loops": {k: (v.layout.to_dict(), v.predicate, v.padding_guard, v.replica_guard, str(v.source))
                     for k, v in result.op_loops.items()},
        "attempts": [(a.to_dict(), a.note, [str(d) for d in a.details],
                      [{k: str(v) for k, v in c.items()} for c in a.conversions]) for a in result.attempts],
        "conversions": [{k: str(v) for k, v in c.items()} for c in result.conversions],
        "notes": list(result.notes),
        "func": result.func.script(),
    }


def _infer(func, reuse: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(conversion_plan, "REUSE_UNSPLIT_RUN", reuse)
    taken = []

    def spy(self, *args):
        state = _SHORTCUT(self, *args)
        taken.append(state is not None)
        return state

    monkeypatch.setattr(layout_inference._Engine, "run_after_epilogue_split", spy)
    clear_caches()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = infer_layouts(func, None, "io-aware")
    return _everything(result), taken


@pytest.mark.parametrize("case,variant", _variants())
def test_reused_run_equals_full_run(case, variant, monkeypatch):
    build = importlib.import_module(f"cases.{case}").VARIANTS[variant]
    full, taken_full = _infer(build(), False, monkeypatch)
    reused, taken = _infer(build(), True, monkeypatch)
    assert not taken_full
    assert reused == full


def test_reuse_is_taken_on_gemm_epilogues(monkeypatch):
    """The gemm kernels whose store is their last op take the shortcut (else the test above proves nothing)."""
    mod = importlib.import_module("cases.gemm_pipelined")
    for variant in ("sm80_s2_k128", "sm90a_s3_k96"):
        _, taken = _infer(mod.VARIANTS[variant](), True, monkeypatch)
        assert taken == [True]


def test_reuse_refuses_a_store_that_is_not_the_last_op(monkeypatch):
    """conversion_two_consumers stages stores followed by other ops: those splits run in full."""
    mod = importlib.import_module("cases.conversion_two_consumers")
    _, taken = _infer(mod.VARIANTS["rows_vs_columns_64x64_t128"](), True, monkeypatch)
    assert False in taken
