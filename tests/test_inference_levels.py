"""Layout inference level by level: strict (pins, constant-index and floating fragments), common
(propagation from known layouts), free (components, every root tried, cheapest attempt, ties to the
earliest root, failed attempts recorded).

The state after a level is captured by stopping the real driver just before the next level runs.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernels_inference as K  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.annotate import annotate_layouts  # noqa: E402
from tilelayout.errors import InferenceError  # noqa: E402
from tilelayout.passes.inference.layout_inference import _Engine  # noqa: E402

T128 = 128


class _Stop(Exception):
    pass


def layouts_after(func, level: str, monkeypatch) -> dict:
    """{buffer name: layout} and {op index: loop layout} once ``level`` ("strict" or "common") is done."""
    seen = {}

    def stop(self, state, *args):
        seen["buffers"] = dict(state.layouts)
        seen["loops"] = {i: d.layout for i, d in state.loops.items()}
        raise _Stop

    with monkeypatch.context() as m:
        m.setattr(_Engine, "_drain_all" if level == "strict" else "_free", stop)
        with pytest.raises(_Stop):
            tl.infer_layouts(func)
    return seen


@pytest.fixture(scope="module")
def kernels():
    cache = {}

    def get(name, build):
        if name not in cache:
            cache[name] = build()
        return cache[name]
    return get


# Row-major pin for the 64x128 chain: thread = 2 threads per row, 64 consecutive columns each.
PIN = tl.Fragment([64, 128], lambda i, j: i * 2 + j // 64, lambda i, j: j % 64)


# --------------------------------------------------------------------------- strict

def test_annotated_pin_is_a_strict_fact_and_propagates_without_search(kernels, monkeypatch):
    func = annotate_layouts(kernels("chain", lambda: K.chain(64, 128, T128)), {"x": PIN})
    strict = layouts_after(func, "strict", monkeypatch)
    assert set(strict["buffers"]) == {"x"} and strict["buffers"]["x"].is_equal(PIN)
    common = layouts_after(func, "common", monkeypatch)
    assert set(common["buffers"]) == {"x", "y"} and len(common["loops"]) == 3
    r = tl.infer_layouts(func)
    assert r.attempts == []                     # everything settled before the free level
    for name in ("x", "y"):
        assert r.buffers[name].is_equal(PIN.bind_thread_range(0, T128)), name
    assert r.loops["i,j[64x128]"].is_equal(PIN.bind_thread_range(0, T128))
    K.check_result(r, T128)


def test_tirx_layout_on_the_buffer_is_a_pin(kernels):
    r = tl.infer_layouts(kernels("tirx", K.tirx_pinned))
    assert r.attempts == []
    assert r.buffers["frag"].is_equal(tl.Fragment([8, 16], lambda i, j: i, lambda i, j: j).bind_thread_range(0, 8))
    K.check_result(r, 8)


def test_constant_index_read_is_fully_replicated_at_strict_level(kernels, monkeypatch):
    func = kernels("const", lambda: K.const_index(64, 64, T128))
    full = tl.fully_replicated([2], T128)
    strict = layouts_after(func, "strict", monkeypatch)
    assert set(strict["buffers"]) == {"s"} and strict["buffers"]["s"].is_equal(full)
    r = tl.infer_layouts(func)
    assert r.buffers["s"].is_equal(full)
    assert r.attempts and all(a.layouts["s"].is_equal(full) for a in r.attempts)
    K.check_result(r, T128)


def test_floating_fragment_use_is_fully_replicated(kernels, monkeypatch):
    func = kernels("floating", lambda: K.floating_use(T128))
    strict = layouts_after(func, "strict", monkeypatch)
    assert set(strict["buffers"]) == {"f"} and strict["buffers"]["f"].is_equal(tl.fully_replicated([4], T128))
    r = tl.infer_layouts(func)
    assert r.buffers["f"].is_fully_replicated and r.buffers["f"].replicate_size == T128
    # the copy into f is settled by common propagation: only the x component is searched
    assert sorted({a.component for a in r.attempts}) == [1] and [a.root for a in r.attempts] == [1, 2]
    K.check_result(r, T128)


def test_nothing_is_invented_at_strict_or_common_level(kernels, monkeypatch):
    func = kernels("chain_free", lambda: K.chain(64, 128, T128))
    assert layouts_after(func, "strict", monkeypatch)["buffers"] == {}
    common = layouts_after(func, "common", monkeypatch)
    assert common["buffers"] == {} and common["loops"] == {}


# --------------------------------------------------------------------------- common

def test_common_level_propagates_through_a_reduction(kernels, monkeypatch):
    """Pin x: the reduction, the subtract loop, y and both copies follow at common level."""
    pin = tl.Fragment([64, 128], lambda i, j: i * 2 + j // 64, lambda i, j: j % 64)
    func = annotate_layouts(kernels("rowmax", lambda: K.row_max_then_subtract(64, 128, T128)), {"x": pin})
    common = layouts_after(func, "common", monkeypatch)
    assert set(common["buffers"]) == {"x", "row_max", "y"} and sorted(common["loops"]) == [0, 2, 3]
    mx = common["buffers"]["row_max"]
    want = tl.Fragment([64], lambda i, r: i * 2 + r, lambda i: 0 * i, replicate=2)
    assert mx.is_equal(want.bind_thread_range(0, T128))
    r = tl.infer_layouts(func)
    assert r.attempts == []
    K.check_result(r, T128)


def test_propagation_order_does_not_depend_on_buffer_names(kernels):
    """Same program with the fragments pinned on the other end: the same layouts come out."""
    func = kernels("pinned_pair", lambda: K.pinned_pair(T128))
    pin = tl.Fragment([64, 64], lambda i, j: i * 2 + j // 32, lambda i, j: j % 32)
    a = tl.infer_layouts(annotate_layouts(func, {"x": pin}))
    b = tl.infer_layouts(annotate_layouts(func, {"y": pin}))
    for name in ("x", "y"):
        assert a.buffers[name].is_equal(b.buffers[name])
    assert a.loops["i,j[64x64]"].is_equal(b.loops["i,j[64x64]"])


# --------------------------------------------------------------------------- free

def test_components_are_ops_sharing_a_fragment_in_program_order(kernels):
    func = kernels("two", K.two_components)
    engine = _Engine(func, None, None)
    assert engine.components() == [[0, 2], [1, 3]]
    r = tl.infer_layouts(func)
    assert [(a.component, a.root) for a in r.attempts] == [(0, 0), (0, 2), (1, 1), (1, 3)]
    assert [a.chosen for a in r.attempts] == [True, False, True, False]
    assert set(r.attempts[0].layouts) == {"a"} and set(r.attempts[2].layouts) == {"b"}
    K.check_result(r, T128)


def test_every_root_is_tried_and_failures_are_recorded_with_their_reason(kernels):
    r = tl.infer_layouts(kernels("accumulate", lambda: K.accumulate_rows(T128)))
    assert [a.root for a in r.attempts] == [0, 1, 2, 3]
    ok = [a for a in r.attempts if a.error is None]
    failed = [a for a in r.attempts if a.error is not None]
    assert [a.root for a in ok] == [1] and ok[0].chosen and ok[0].regs == 64 + 16
    for a in failed:
        assert a.mem is None and a.regs is None and not a.chosen and a.layouts == {}
        assert "buffer r" in a.error and "sum r[0:64] <- x[0:64, 0:128] axes=[1] accum (op #2)" in a.error
    d = failed[0].to_dict()
    assert d["error"] == failed[0].error and d["root_description"].startswith("fill r[0:64]")
    K.check_result(r, T128)


def test_all_roots_of_row_max_agree(kernels):
    """Starting anywhere in x -> row max -> y gives the same layouts (the broadcast of row_max[i] induces
    exactly the reducer's layout)."""
    r = tl.infer_layouts(kernels("rowmax_free", lambda: K.row_max_then_subtract(64, 128, T128)))
    assert [a.error for a in r.attempts] == [None] * 4
    first = r.attempts[0].layouts
    for a in r.attempts[1:]:
        assert all(a.layouts[k].is_equal(v) for k, v in first.items())


def test_cheapest_attempt_wins(kernels):
    func = kernels("row_scale", lambda: K.row_scale(64, 128, T128))
    rc = tl.infer_layouts(func, cost_model="register-count")
    assert [(a.mem, a.regs, a.chosen) for a in rc.attempts] == [(0, 1, True), (0, 16, False)]
    io = tl.infer_layouts(func, cost_model="io-aware")
    assert [a.chosen for a in io.attempts] == [False, True] and io.attempts[1].mem < io.attempts[0].mem
    assert rc.buffers["r"].replicate_size == 2 and io.buffers["r"].replicate_size == 32
    K.check_result(rc, T128)
    K.check_result(io, T128)


def test_equal_costs_keep_the_earliest_root(kernels):
    r = tl.infer_layouts(kernels("chain_tie", lambda: K.chain(64, 128, T128)))
    # x and y hold 64 registers each; x dies element by element as y is written, so the peak is 64
    assert [(a.mem, a.regs) for a in r.attempts] == [(0, 64)] * 3
    assert [a.chosen for a in r.attempts] == [True, False, False]


def test_chosen_attempt_is_the_result(kernels):
    func = importlib.import_module("cases.transposed_store").VARIANTS["fp32_128x128_t128"]()
    r = tl.infer_layouts(func, cost_model="io-aware")
    (best,) = [a for a in r.attempts if a.chosen]
    for name, lay in best.layouts.items():
        assert r.buffers[name].is_equal(lay)
    assert len(best.loops) == 2                       # the copy's element loop and the user nest
    assert best.loops["parallel i,j[128x128] (op #1)"].is_equal(r.loops["i,j[128x128]"])
    assert best.loops["copy frag[0:128, 0:128] <- A[0:128, 0:128] (op #0)"].is_equal(r.op_loops[0].layout)


def test_when_every_attempt_fails_the_error_lists_each_root(kernels):
    with pytest.raises(InferenceError) as err:
        tl.infer_layouts(kernels("oob", K.out_of_bounds))
    text = str(err.value)
    assert "every attempt failed" in text
    assert "root copy frag[0:100] <- A[0:100] (op #0)" in text and "root parallel i[256] (op #1)" in text
    assert "leaves buffer frag (shape [100])" in text
