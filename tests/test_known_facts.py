"""Facts a constructor records about the fragment it builds (``Fragment._known_by_construction``) are the facts
enumeration finds: injectivity, thread extent and slot count, over every parameter the constructors take.

The reference evaluates the fragment's own expressions on a numpy grid (``evaluate_grid``, no Fragment cache)
and counts (thread, slot) cells with a set; nothing is shared with the constructors' reasoning."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tilelayout.errors import LayoutError
from tilelayout.evaluate import evaluate, evaluate_grid
from tilelayout.fragment import Fragment
from tilelayout.gemm_layouts import (make_gemm_fragment_a, make_gemm_fragment_b, make_mma_accumulator_fragment,
                                     make_wgmma_accumulator_fragment, make_wgmma_fragment_a)
from tilelayout.expr import placeholder, rep_placeholder
from tilelayout.passes.inference import loop_plan


def _enumerated(frag: Fragment) -> tuple:
    """(injective, thread extent, slots) of ``frag``'s expressions over every (element, replica)."""
    shape = [int(s) for s in frag.input_shape] + [frag.replicate_size]
    variables = [placeholder(k) for k in range(len(shape) - 1)] + [rep_placeholder()]
    thread = evaluate_grid([frag.forward_thread], variables, shape).reshape(-1)
    slot = evaluate_grid(list(frag.forward_index), variables, shape).reshape(-1)
    cells = set(zip(thread.tolist(), slot.tolist()))
    return len(cells) == thread.size, int(thread.max()) + 1, int(slot.max()) + 1


def _recorded(frag: Fragment) -> tuple:
    facts = frag.__dict__
    assert {"thread_extent", "_output_shape", "_injectivity_error"} <= set(facts), "facts not recorded"
    return facts["_injectivity_error"] is None, facts["thread_extent"], facts["_output_shape"][0]


def _digits_problem(frag: Fragment) -> str | None:
    """Why the recorded cell digits (``cell_digits``) are not the fragment read backwards, or None: every cell
    c = thread * S + slot must name, through the digits, the (element, replica) n = row-major(coords) * R +
    replica whose thread and slot the expressions give as c's, each n once."""
    digits = frag.cell_digits()
    if digits is None:
        return "no cell digits recorded"
    shape = [int(s) for s in frag.input_shape] + [frag.replicate_size]
    variables = [placeholder(k) for k in range(len(shape) - 1)] + [rep_placeholder()]
    thread = evaluate_grid([frag.forward_thread], variables, shape).reshape(-1)
    slot = evaluate_grid(list(frag.forward_index), variables, shape).reshape(-1)
    slots = int(np.prod([int(s) for s in frag.output_shape]))
    cells = np.arange(thread.size)
    n, lower = np.zeros_like(cells), 1
    for ext, stride in digits:
        n += (cells // lower) % ext * stride
        lower *= ext
    if lower != thread.size or sorted(n.tolist()) != list(range(thread.size)):
        return f"digits {digits} do not name every (element, replica) once"
    if not (np.array_equal(thread[n], cells // slots) and np.array_equal(slot[n], cells % slots)):
        return f"digits {digits} name other cells than the expressions"
    return None


def _assert_facts_and_inverse(frag: Fragment, where, digits: bool = False) -> None:
    """A gemm constructor's recorded facts are the enumerated ones, and the closed-form inverse it claims exists
    for an equal fragment without facts (``inverse_with_info`` raises LayoutError when there is none);
    ``digits``: its cell digits are recorded and read it backwards."""
    assert _recorded(frag) == _enumerated(frag), where
    if digits:
        assert _digits_problem(frag) is None, (where, _digits_problem(frag))
    assert frag.inverse_known_to_exist(), where
    _fresh(frag).inverse_with_info(allow_padding=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_mma_accumulator_facts(dtype):
    seen = 0
    for m, n, threads in itertools.product([16, 32, 48, 64, 128], [8, 16, 24, 64, 128], [32, 64, 128, 256]):
        for policy in ("square", "fullrow", "fullcol"):
            try:
                frag = make_mma_accumulator_fragment(m, n, threads, dtype, warp_policy=policy)
            except LayoutError:
                continue
            _assert_facts_and_inverse(frag, (m, n, threads, dtype, policy), digits=True)
            seen += 1
    assert seen > 40


def test_wgmma_accumulator_facts():
    seen = 0
    for m, n, threads in itertools.product([64, 128, 192, 256], [8, 16, 24, 64, 128, 256], [128, 256, 384]):
        partitions = [None] + [(wm, threads // 32 // wm) for wm in (4, 8, 12) if threads // 32 % wm == 0]
        for partition in partitions:
            try:
                frag = make_wgmma_accumulator_fragment(m, n, threads, warp_partition=partition)
            except LayoutError:
                continue
            _assert_facts_and_inverse(frag, (m, n, threads, partition), digits=True)
            seen += 1
    assert seen > 30


@pytest.mark.parametrize("dtype", ["float16", "int8", "float32"])
@pytest.mark.parametrize("operand", ["A", "B"])
def test_mma_operand_facts(operand, dtype):
    """The register operands ldmatrix loads (replicated over the warps that share them) record the same facts
    enumeration finds, and their closed-form inverse exists: a gemm that sets one no longer needs it checked."""
    make = make_gemm_fragment_a if operand == "A" else make_gemm_fragment_b
    seen = 0
    for m, n, k, threads in itertools.product([16, 32, 64, 128], [8, 16, 64, 128], [8, 16, 32, 64], [32, 64, 128, 256]):
        for policy, transposed in itertools.product(("square", "fullrow", "fullcol"), (False, True)):
            try:
                frag = make(m, n, k, threads, dtype, transposed, warp_policy=policy)
            except LayoutError:
                continue
            _assert_facts_and_inverse(frag, (operand, m, n, k, threads, dtype, policy, transposed))
            seen += 1
    assert seen > 100


def test_wgmma_operand_a_facts():
    seen = 0
    for m, k, threads, dtype in itertools.product([64, 128, 192, 256], [16, 32, 64], [128, 256, 384],
                                                  ["float16", "float8_e4m3fn", "float32"]):
        partitions = [None] + [(wm, threads // 32 // wm) for wm in (4, 8, 12) if threads // 32 % wm == 0]
        for partition in partitions:
            try:
                frag = make_wgmma_fragment_a(m, k, threads, dtype, warp_partition=partition)
            except LayoutError:
                continue
            _assert_facts_and_inverse(frag, (m, k, threads, dtype, partition))
            seen += 1
    assert seen > 40


@pytest.mark.parametrize("touches_fragment", [False, True])
def test_planned_loop_facts(touches_fragment):
    for extents in ([1], [3], [7, 5], [64, 32], [32, 128], [2, 3, 5], [130], [256, 4], [1, 1, 96]):
        for threads, width in itertools.product([32, 64, 128, 256], [1, 2, 4, 8]):
            loop_plan.clear_caches()
            plan = loop_plan.plan_loop_layout(extents, threads, width, touches_fragment)
            assert _recorded(plan) == _enumerated(plan), (extents, threads, width, touches_fragment)
            assert _recorded(plan)[0], "a planned loop is always injective"
            # every cell used in whole vector groups: the digits are recorded and read the plan backwards
            injective, used, slots = _recorded(plan)
            total = int(np.prod(extents))
            full = used * slots == total * plan.replicate_size
            if full and total % width == 0:
                assert plan.cell_digits() is not None, (extents, threads, width, touches_fragment)
            if plan.cell_digits() is not None:
                assert full, (extents, threads, width, touches_fragment)
                assert _digits_problem(plan) is None, (extents, threads, width, _digits_problem(plan))


def test_facts_are_checked_against_the_cell_count():
    frag = Fragment.from_exprs([8, 8], placeholder(0) * 8 + placeholder(1), [placeholder(0) * 0])
    with pytest.raises(LayoutError, match="cannot map one-to-one"):
        frag._known_by_construction(32, 1)



def _fresh(frag: Fragment) -> Fragment:
    """An equal fragment that carries none of ``frag``'s recorded facts (interning would hand back ``frag``)."""
    out = Fragment.__new__(Fragment)
    out._init_fragment([int(s) for s in frag.input_shape], frag.forward_thread, list(frag.forward_index),
                       frag.replicate_size)
    return out


@pytest.mark.parametrize("touches_fragment", [False, True])
def test_planned_loops_have_the_inverse_they_claim(touches_fragment):
    """Every planned loop says its closed-form inverse exists (conversions then skip computing it): the
    inverse lowering computes for an equal fragment exists and sends every (slot, thread) cell of the
    forward map back to its coordinates and replica, checked by evaluating it on the forward table."""
    grid = ([1], [3], [8], [7, 5], [64, 32], [2, 3, 5], [130], [256, 4], [1, 1, 96], [12, 48], [64, 5])
    for extents in grid:
        for threads, width in itertools.product([32, 96, 128, 256], [1, 2, 4, 8, 16]):
            loop_plan.clear_caches()
            plan = loop_plan.plan_loop_layout(extents, threads, width, touches_fragment)
            assert plan.inverse_known_to_exist()
            fresh = _fresh(plan)
            assert not fresh.inverse_known_to_exist()
            inv, _ = fresh.inverse_with_info(allow_padding=True)
            shape = [int(s) for s in fresh.input_shape] + [fresh.replicate_size]
            variables = [placeholder(k) for k in range(len(shape) - 1)] + [rep_placeholder()]
            slot = evaluate_grid(list(fresh.forward_index), variables, shape).reshape(-1)
            thread = evaluate_grid([fresh.forward_thread], variables, shape).reshape(-1)
            env = dict(zip(inv.forward_vars, (slot, thread)))
            back = np.stack([np.broadcast_to(evaluate(e, env), slot.shape) for e in inv.forward_index], axis=-1)
            coords = np.stack(np.unravel_index(np.arange(slot.size), tuple(shape)), axis=-1)
            assert np.array_equal(back, coords), (extents, threads, width, touches_fragment)


def test_large_planned_loops_invert_without_enumeration():
    for extents, threads, width in (([1024, 1024], 128, 8), ([4096, 256], 256, 4), ([1000, 1000], 128, 4),
                                    ([3, 100000], 96, 2)):
        loop_plan.clear_caches()
        plan = loop_plan.plan_loop_layout(extents, threads, width, True)
        assert plan.inverse_known_to_exist()
        _fresh(plan).inverse_with_info(allow_padding=True)     # raises LayoutError when there is none


def test_an_equal_fragment_built_earlier_learns_the_facts():
    """Interning hands a constructor the live fragment with its key when one exists; one built earlier by a path
    that proves nothing (here parsed from its serialised form, as a peer comparison does) must not make the
    constructor's facts vanish: the interned fragment takes them on (a full test run once lost the epilogue's
    skipped inverse this way)."""
    import gc

    from tilelayout import fragment, layout_from_dict
    loop_plan.clear_caches()
    serialised = loop_plan.plan_loop_layout([64, 128], 128, 4, True).bind_thread_range(0, 128).to_dict()
    fragment.clear_caches()
    loop_plan.clear_caches()
    gc.collect()
    earlier = layout_from_dict(serialised)
    assert not earlier.inverse_known_to_exist() and "_injectivity_error" not in earlier.__dict__
    bound = loop_plan.plan_loop_layout([64, 128], 128, 4, True).bind_thread_range(0, 128)
    assert bound is earlier
    assert bound.inverse_known_to_exist() and _recorded(bound) == _enumerated(bound)
