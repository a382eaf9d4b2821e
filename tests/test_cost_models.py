"""Cost-model registry, selection precedence and the register-count model.

Selection, most specific first: the ``cost_model=`` argument, ``tl.layout_config(cost_model=...)``,
``$TILELAYOUT_COST_MODEL``, the default ``register-count``. A user model registered with
``register_cost_model`` takes part in the free-level search like the built-in ones.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernels_inference as K  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.passes.inference import cost_models  # noqa: E402
from tilelayout.passes.inference.cost_models import (AttemptCost, available_cost_models, get_cost_model,  # noqa: E402
                                           layout_config, register_cost_model, resolve_cost_model_name)
from tilelayout.passes.inference.cost_models.base import count_register_slots  # noqa: E402

ENV = "TILELAYOUT_COST_MODEL"


@pytest.fixture(scope="module")
def broadcast():
    """The #1729 kernel: register-count keeps the copy-first attempt, io-aware the loop-first one."""
    return importlib.import_module("cases.broadcast_read").VARIANTS["rows4_cols1024_t128"]()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


class MostReplicas:
    """Prefers attempts whose fragments hold more replicas (the opposite of register-count)."""
    name = "test-most-replicas"

    def score(self, component, candidate_layouts, context):
        reps = sum(getattr(l, "replicate_size", 0) for l in candidate_layouts.values())
        return AttemptCost(mem=-reps, regs=0)


class Flat:
    """Every attempt costs the same: the earliest successful root must win."""
    name = "test-flat"
    calls = 0

    def score(self, component, candidate_layouts, context):
        Flat.calls += 1
        return AttemptCost(mem=7, regs=7)


register_cost_model(MostReplicas, override=True)
register_cost_model(Flat, override=True)


def _chosen_root(result) -> int:
    (a,) = [a for a in result.attempts if a.chosen]
    return a.root


# --------------------------------------------------------------------------- registry

def test_builtin_models_are_registered():
    assert {"register-count", "io-aware"} <= set(available_cost_models())
    assert available_cost_models() == sorted(available_cost_models())
    assert get_cost_model("io-aware").name == "io-aware"
    assert resolve_cost_model_name() == cost_models.DEFAULT_COST_MODEL == "register-count"


def test_unknown_name_is_a_value_error_listing_the_valid_ones(broadcast, monkeypatch):
    for call in (lambda: resolve_cost_model_name("fastest"), lambda: tl.infer_layouts(broadcast, cost_model="fastest"),
                 lambda: layout_config(cost_model="fastest").__enter__()):
        with pytest.raises(ValueError) as err:
            call()
        text = str(err.value)
        assert "fastest" in text and "register-count" in text and "io-aware" in text
    monkeypatch.setenv(ENV, "bogus")
    with pytest.raises(ValueError, match="bogus.*register-count"):
        tl.infer_layouts(broadcast)


def test_register_cost_model_validates_its_input():
    class NoName:
        def score(self, *a):
            return AttemptCost()

    class NoScore:
        name = "test-no-score"

    with pytest.raises(ValueError, match="name"):
        register_cost_model(NoName)
    with pytest.raises(ValueError, match="score"):
        register_cost_model(NoScore)

    class Clash:
        name = "io-aware"
        score = MostReplicas.score

    with pytest.raises(ValueError, match="already registered"):
        register_cost_model(Clash)
    assert get_cost_model("io-aware").__class__.__name__ == "IOAwareModel"
    with pytest.raises(ValueError, match="cost_model must be"):
        get_cost_model(42)


def test_attempt_cost_is_lexicographic_mem_then_regs():
    a, b, c = AttemptCost(1, 100), AttemptCost(2, 0), AttemptCost(1, 99)
    assert a.better_than(b) and c.better_than(a) and not a.better_than(a)
    assert sorted([b, a, c]) == [c, a, b]
    assert AttemptCost(1, 1, details=("x",)) == AttemptCost(1, 1)


# --------------------------------------------------------------------------- selection precedence

def test_selection_precedence(broadcast, monkeypatch):
    def model_of(**kw):
        return tl.infer_layouts(broadcast, **kw).cost_model

    assert model_of() == "register-count"
    monkeypatch.setenv(ENV, "io-aware")
    assert model_of() == "io-aware"                                        # env over default
    with layout_config(cost_model="test-flat"):
        assert model_of() == "test-flat"                                   # context over env
        assert model_of(cost_model="register-count") == "register-count"    # argument over context
        with layout_config(cost_model="test-most-replicas"):
            assert model_of() == "test-most-replicas"                      # innermost context wins
        assert model_of() == "test-flat"
    assert model_of() == "io-aware"
    monkeypatch.delenv(ENV)
    assert model_of() == "register-count"


def test_model_object_can_be_passed_directly(broadcast):
    r = tl.infer_layouts(broadcast, cost_model=MostReplicas())
    assert r.cost_model == "test-most-replicas"


# --------------------------------------------------------------------------- models decide the search

def test_models_pick_different_roots_on_the_broadcast_kernel(broadcast):
    rc = tl.infer_layouts(broadcast, cost_model="register-count")
    io = tl.infer_layouts(broadcast, cost_model="io-aware")
    most = tl.infer_layouts(broadcast, cost_model="test-most-replicas")
    assert _chosen_root(rc) == 0 and _chosen_root(io) == 1 and _chosen_root(most) == 1
    assert rc.buffers["s_frag"].replicate_size == 32 and most.buffers["s_frag"].replicate_size == 128
    # candidate_layouts holds buffer layouts only (loop layouts are not registers)
    assert [(a.mem, a.regs) for a in most.attempts] == [(-32, 0), (-128, 0)]


def test_ties_go_to_the_earliest_root(broadcast):
    Flat.calls = 0
    r = tl.infer_layouts(broadcast, cost_model="test-flat")
    assert Flat.calls == len(r.attempts) == 2
    assert [(a.mem, a.regs, a.chosen) for a in r.attempts] == [(7, 7, True), (7, 7, False)]


def test_ties_skip_failed_roots():
    """Starting from the fill fails (the reduction needs another layout of r); a flat model keeps the
    earliest successful root."""
    r = tl.infer_layouts(K.accumulate_rows(128), cost_model="test-flat")
    assert [a.error is None for a in r.attempts] == [False, True, False, False]
    assert _chosen_root(r) == 1


# --------------------------------------------------------------------------- register-count

@pytest.mark.parametrize("kernel,peak,slots", [
    # x, row_max (64 rows / 4 per thread), y: x is read for the last time as y is written, element by element
    (lambda: K.row_max_then_subtract(64, 128, 128), 64 + 16, 64 + 16 + 64),
    (lambda: K.const_pair(64, 128, 128), 2 + 64, 2 + 64),                 # s fully replicated: 2 slots
    (lambda: K.small_fragment(4, 128), 1, 1),
])
def test_register_count_is_the_register_peak_in_slots(kernel, peak, slots):
    r = tl.infer_layouts(kernel(), cost_model="register-count")
    chosen = next(a for a in r.attempts if a.chosen)
    assert chosen.mem == 0 and chosen.regs == peak
    assert sum(int(np.prod(l.output_shape)) for l in r.buffers.values() if isinstance(l, tl.Fragment)) == slots


def test_count_register_slots_ignores_non_fragments_and_refuses_symbolic_slots():
    frag = tl.Fragment([64, 64], lambda i, j: i % 16 * 8 + j // 8)
    assert count_register_slots({"a": frag, "s": tl.Layout([8, 8], lambda i, j: [i * 8 + j])}) == 32
    assert count_register_slots({}) == 0
