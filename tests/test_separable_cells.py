"""Separable cell grids (``separable_cells``) against enumeration, and conversion prices with and without them.

A grid claims that the element of cell (thread, slot) sits at tile row ``row_t + row_s`` and column ``col_t +
col_s``; every claim is compared with the fragment's own tables over its whole domain. Conversion pricing that
reads the grid (vector widths, rows of one shape, the no-op and shuffle tests) must give exactly the cost the
enumerated cells give, at every padding.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tilelayout import Fragment, make_mma_accumulator_fragment, make_wgmma_accumulator_fragment
from tilelayout.passes.inference import conversion as cv
from tilelayout.passes.inference import separable_cells as sc
from tilelayout.passes.inference.loop_plan import plan_loop_layout

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from maint.fuzz import enumerated_cells, enumerated_holders  # noqa: E402
from test_conversion_counting import (_bit_fragment, _golden_fragments, _round_trip_reference,
                                      draw_bit_permuted_pair, same_shaped_pairs)


def _assert_grid_is_the_fragment(frag):
    grid = sc.separable_cells(frag)
    assert grid is not None, frag
    elem, thread, slot = enumerated_cells(frag)
    assert np.array_equal(grid.elements(), elem), frag
    assert np.array_equal(grid.threads_of_cells(), thread), frag
    assert np.array_equal(grid.slots_of_cells(), slot), frag
    cols = int(frag.input_shape[-1])
    rows_ok = (grid.row_t[:, None] + grid.row_s[None, :]).reshape(-1) == elem // cols
    assert rows_ok.all() and (grid.col_s.max(initial=0) + grid.col_t.max(initial=0)) < cols, frag


def _inferred_fragments():
    """Every fragment and loop layout inference gives the golden kernels, under both models (built by the
    constructors, so those with recorded digits are among them), one per mapping and thread range."""
    import importlib
    import warnings
    from pathlib import Path
    from tilelayout.passes.inference.layout_inference import infer_layouts
    out = {}
    for path in sorted((Path(__file__).resolve().parent.parent / "cases").glob("[!_]*.py")):
        mod = importlib.import_module(f"cases.{path.stem}")
        for build in mod.VARIANTS.values():
            for model in ("register-count", "io-aware"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = infer_layouts(build(), None, model)
                for lay in list(result.buffers.values()) + [d.layout for d in result.op_loops.values()]:
                    if isinstance(lay, Fragment) and lay.is_static:
                        out.setdefault((lay.key, lay.thread_range), lay)
    return list(out.values())


_INFERRED: list = []


def _inferred():
    if not _INFERRED:
        _INFERRED.extend(_inferred_fragments())
    return _INFERRED


def test_inferred_fragments_with_a_grid_match_their_tables():
    """Every fragment of the golden kernels' results that has a grid is described exactly, and the
    accumulators and planned loops are among them; fragments without recorded digits get none."""
    described = 0
    for frag in _inferred():
        if sc.separable_cells(frag) is None:
            continue
        _assert_grid_is_the_fragment(frag)
        described += 1
    assert described > 40
    assert all(sc.separable_cells(f) is None for f in _golden_fragments() if f.cell_digits() is None)


@pytest.mark.parametrize("m,n,threads", [(16, 8, 32), (64, 64, 128), (64, 128, 128), (128, 128, 256),
                                         (128, 64, 128), (32, 256, 128)])
def test_mma_accumulators_have_grids(m, n, threads):
    for policy in ("square", "full_row", "full_col"):
        try:
            frag = make_mma_accumulator_fragment(m, n, threads, warp_policy=policy)
        except Exception:  # noqa: BLE001 - a policy with no partition for this tile
            continue
        _assert_grid_is_the_fragment(frag.bind_thread_range(0, threads))


@pytest.mark.parametrize("m,n,threads", [(64, 8, 128), (64, 128, 128), (128, 64, 256), (128, 256, 256)])
def test_wgmma_accumulators_have_grids(m, n, threads):
    _assert_grid_is_the_fragment(make_wgmma_accumulator_fragment(m, n, threads).bind_thread_range(0, threads))


@pytest.mark.parametrize("extents,threads,width", [([64, 128], 128, 4), ([64, 64], 128, 2), ([128], 128, 1),
                                                   ([32, 8], 128, 4), ([16, 16], 64, 8), ([2, 2048], 256, 8),
                                                   ([8, 32, 4], 128, 2)])
def test_planned_loop_layouts_have_grids(extents, threads, width):
    _assert_grid_is_the_fragment(plan_loop_layout(extents, threads, width, True))


def test_a_user_built_twin_does_not_hide_a_planned_grid():
    """The same mapping written as user expressions (no recorded digits, so no grid) and then planned (digits
    recorded): the planned one still gets its grid; the memo once answered it with the twin's None."""
    from tilelayout import fragment
    sc.clear_caches()
    fragment.clear_caches()             # no interned planned twin from an earlier test lends it digits
    twin = Fragment([64, 128], lambda i, j: i % 4 * 32 + j // 4, lambda i, j: i // 4 * 4 + j % 4)
    bound = twin.bind_thread_range(0, 128)
    assert bound.cell_digits() is None and sc.separable_cells(bound) is None
    _assert_grid_is_the_fragment(plan_loop_layout([64, 128], 128, 4, True))


def test_what_no_grid_describes_is_refused():
    """Fragments without recorded digits (a rotated row, which TVM's iter-map rewriting would misread as the
    identity), digits that do not cover the cells once, and a plan whose rows cross a thread."""
    rotated = Fragment([4, 32], lambda i, j: (j + 1) % 32, lambda i, j: i).bind_thread_range(0, 32)
    assert sc.separable_cells(rotated) is None
    with pytest.raises(Exception, match="do not cover"):
        Fragment([4, 32], lambda i, j: j, lambda i, j: i)._known_by_construction(32, 4, cell_digits=[(4, 32)])
    # 2 x 2560 over 256 threads in groups of 4: thread 160 holds the end of row 0 and the start of row 1, so
    # the row of a cell is no thread part plus slot part
    assert sc.separable_cells(plan_loop_layout([2, 2560], 256, 8, True)) is None


def _priced(src, dst, threads, elem_bytes, separable: bool, monkeypatch):
    """Every padding's round trip, the no-op test and the shuffle count, with or without grids."""
    with monkeypatch.context() as m:
        if not separable:
            m.setattr(cv, "separable_cells", lambda frag: None)
        cv.clear_caches()
        out = [cv.is_noop(src, dst, threads), cv.shuffle_count(src, dst, threads, 32, elem_bytes)]
        out += [cv.shared_cost(src, dst, threads, 32, elem_bytes, pad) for pad in cv._pads(elem_bytes)]
        out.append(cv.conversion_cost(src, dst, threads, 32, elem_bytes))
        cv.clear_caches()
    return out


def test_prices_with_grids_equal_prices_from_enumerated_cells_on_golden_pairs(monkeypatch):
    """Pairs of same-shaped fragments from the golden kernels' results (up to 8,192 elements), at least one
    side with a grid: the no-op test, the shuffle count, every padding's round trip and the chosen way are
    what enumerated cells give."""
    pairs = 0
    for a, b, threads, src, dst in same_shaped_pairs([f for f in _inferred() if int(np.prod(f.input_shape)) <= 8192]):
        if sc.separable_cells(a) is None and sc.separable_cells(b) is None:
            continue
        for elem_bytes in (2, 4):
            assert _priced(src, dst, threads, elem_bytes, True, monkeypatch) == \
                _priced(src, dst, threads, elem_bytes, False, monkeypatch), (a, b, elem_bytes)
        pairs += 1
    assert pairs > 30


def _digit_bit_fragment(rows: int, cols: int, perm: list, thread_bits: int, replicate: int):
    """``_bit_fragment`` with its cell digits recorded as a constructor would: cell bit k (slot bits, then
    thread bits, then the replica) is element bit ``perm[...]``, element index e = i * cols + j."""
    frag = _bit_fragment(rows, cols, perm, thread_bits, replicate)
    lo, hi = perm[:thread_bits], perm[thread_bits:]
    digits = [(2, (1 << b) * replicate) for b in hi] + [(2, (1 << b) * replicate) for b in lo]
    digits += [(replicate, 1)] if replicate > 1 else []
    return frag._known_by_construction(1 << thread_bits if replicate == 1 else (1 << thread_bits) * replicate,
                                       1 << len(hi), cell_digits=digits)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_prices_with_grids_equal_the_cell_by_cell_count_on_bit_permuted_fragments(data):
    """Bit permutations (replicated or not) with their digits recorded: the grid describes them exactly, and
    every padding's wavefronts and vector widths are the definitions' (``_round_trip_reference``), as is the
    no-op test."""
    src, dst, threads = draw_bit_permuted_pair(data, _digit_bit_fragment, (1, 2, 4, 8, 16, 32))
    cv.clear_caches()
    _assert_grid_is_the_fragment(dst)
    _assert_grid_is_the_fragment(src)
    elem_bytes = data.draw(st.sampled_from([1, 2, 4, 8]))
    pad = data.draw(st.sampled_from(cv._pads(elem_bytes)))
    got = cv.shared_cost(src, dst, threads, 32, elem_bytes, pad)
    assert (got.wavefronts, *got.vectors) == _round_trip_reference(src, dst, threads, 32, elem_bytes, pad)
    elem, thread, _ = enumerated_cells(dst)
    holder = {}
    for e, t in zip(*enumerated_cells(src)[:2]):
        holder.setdefault(int(e), set()).add(int(t))
    assert cv.is_noop(src, dst, threads) == all(int(t) in holder[int(e)] for e, t in zip(elem, thread))
    assert cv.shuffle_count(src, dst, threads, 32, elem_bytes) == _shuffles_without_grids(src, dst, threads,
                                                                                            elem_bytes)


def _shuffles_without_grids(src, dst, threads, elem_bytes):
    saved = cv.separable_cells
    cv.separable_cells = lambda frag: None
    try:
        cv.clear_caches()
        return cv.shuffle_count(src, dst, threads, 32, elem_bytes)
    finally:
        cv.separable_cells = saved
        cv.clear_caches()


def _compare_holder_samples() -> int:
    """Compare the holder sample read from each one-replica source with the one evaluated from its thread
    expression, on every pair of golden fragments over one shape; the number of pairs compared."""
    frags = _inferred()
    compared = 0
    for dst in frags:
        grid = sc.separable_cells(dst)
        if grid is None:
            continue
        for src in frags:
            if list(src.input_shape) != list(dst.input_shape) or sc.separable_cells(src) is None or \
                    src.replicate_size != 1:
                continue
            fast = cv._sample_holders(src, grid)
            slow = cv._sample_holders(src, grid, source_grid=False)
            assert len(fast) == len(slow) == 3
            for a, b in zip(fast, slow):
                assert np.array_equal(np.broadcast_to(a, b.shape), b)
            compared += 1
    return compared


def test_holder_samples_from_the_source_grid_equal_the_evaluated_ones():
    """The no-op and shuffle tests' sample (one cell per destination thread, every holder of its element in
    the source) is read from a one-replica source's digits or grid: the same arrays as evaluating the source's
    thread expression, on every pair of golden fragments over one shape that the sample applies to."""
    assert _compare_holder_samples() > 40


def test_holder_samples_from_the_source_grid_without_digit_holders_equal_the_evaluated_ones(monkeypatch):
    """The sample's middle path (a one-replica source's grid scattered into an element -> thread table), taken
    when the digits are not a mixed radix of the element index: forced here on every pair, the same arrays."""
    monkeypatch.setattr(cv, "digit_holders", lambda frag, elements: None)
    assert _compare_holder_samples() > 40


def _digit_holder_fragments():
    """Golden fragments plus the constructors' families over a range of shapes, thread counts and ranges."""
    out = list(_inferred())
    for m, n, threads in ((64, 64, 128), (64, 128, 128), (128, 128, 256), (128, 64, 256), (64, 256, 128)):
        out.append(make_wgmma_accumulator_fragment(m, n, threads))
        out.append(make_wgmma_accumulator_fragment(m, n, threads).bind_thread_range(threads, threads))
    for m, n, threads in ((16, 8, 32), (32, 32, 128), (64, 64, 128), (128, 128, 256), (64, 32, 64)):
        out.append(make_mma_accumulator_fragment(m, n, threads))
    for shape, threads, width in (([64, 128], 128, 4), ([32, 64], 128, 8), ([128], 128, 1), ([8, 16, 32], 64, 2),
                                  ([48, 40], 96, 4), ([16, 8], 256, 1)):
        out.append(plan_loop_layout(shape, threads, width, True))
    return out


def test_digit_holders_equal_the_enumerated_holders():
    """``digit_holders`` (who holds each element, read off a mixed-radix source's digits) against the
    fragment's enumerated cells, over every element; it answers for the accumulators and planned loops and
    declines (None) where the digits are absent, replicated or not a mixed radix of the element index."""
    answered = declined = 0
    for frag in _digit_holder_fragments():
        size = int(np.prod([int(s) for s in frag.input_shape]))
        held = sc.digit_holders(frag, np.arange(size, dtype=np.int64))
        if held is None:
            declined += 1
            continue
        assert np.array_equal(held, enumerated_holders(frag)), frag
        answered += 1
    assert answered > 30 and declined > 0, (answered, declined)


def test_the_epilogue_conversion_reads_grids_and_no_expression_table(monkeypatch):
    """The conversion an io-aware gemm epilogue prices (wgmma accumulator to the store's planned layout) is
    priced from grids alone: neither fragment's thread or index table is evaluated."""
    src = make_wgmma_accumulator_fragment(64, 128, 128).bind_thread_range(0, 128)
    dst = plan_loop_layout([64, 128], 128, 4, True)
    cv.clear_caches()
    sc.separable_cells(src), sc.separable_cells(dst)
    tabulated = []
    monkeypatch.setattr(cv, "_enumerate_cells", lambda frag: tabulated.append(frag))
    cost = cv.conversion_cost(src, dst, 128, 32, 4)
    assert not tabulated
    assert (cost.kind, cost.pad, cost.wavefronts) == ("shared", 8, 512)


@pytest.mark.parametrize("elem_bytes", [2, 4, 8])
def test_a_grid_whose_phases_differ_is_seated_not_counted_from_one_row(elem_bytes):
    """Thread t holds element t of an 8 x 12 tile: the grid describes it (the thread digit cut at the row), but
    the lanes of one 128-byte phase cover different stretches of rows, so the one-row count does not apply;
    the price is the definitions' at every padding."""
    lay = Fragment([8, 12], lambda i, j: i * 12 + j, lambda i, j: 0)._known_by_construction(
        96, 1, cell_digits=[(96, 1)]).bind_thread_range(0, 96)
    _assert_grid_is_the_fragment(lay)
    side = cv._side(lay, 96, False)
    assert cv._uniform_rows(side, 1, 12, 8, elem_bytes, 32) is None
    other = plan_loop_layout([8, 12], 96, 1, True)
    for pad in cv._pads(elem_bytes):
        cv.clear_caches()
        got = cv.shared_cost(other, lay, 96, 32, elem_bytes, pad)
        assert (got.wavefronts, *got.vectors) == _round_trip_reference(other, lay, 96, 32, elem_bytes, pad)


def test_recorded_digits_are_the_inverse_the_cute_scorer_derives():
    """The CuTe scorer takes a constructor's recorded digits as its packed inverse (``packed_inverse``): on every
    accumulator and planned loop of a grid of shapes it is the mode list the iter-map rewrite finds and
    inverts, so every statement score reads the same modes either way."""
    import itertools
    import math
    from tilelayout import cute
    from tilelayout.cute.algebra import right_inverse_modes
    from tilelayout.passes.inference.cost_models import statement_score
    frags = []
    for m, n, threads in itertools.product([64, 128], [8, 64, 128, 256], [128, 256]):
        for make in (lambda: make_wgmma_accumulator_fragment(m, n, threads),
                     *[lambda p=p: make_mma_accumulator_fragment(m, n, threads, warp_policy=p)
                       for p in ("square", "full_row", "full_col")]):
            try:
                frags.append(make())
            except Exception:  # noqa: BLE001 - no partition for this tile
                pass
    for extents, threads, width in itertools.product(([64, 128], [16, 16], [2, 2048], [8, 32, 4]), (32, 128, 256),
                                                     (1, 2, 4, 8)):
        frags.append(plan_loop_layout(extents, threads, width, True))
    checked = 0
    for frag in frags:
        if frag.cell_digits() is None:
            continue
        statement_score.clear_caches()
        cells = int(frag.thread_extent) * int(math.prod(frag.output_shape))
        got = statement_score.packed_inverse(frag, cells)
        derived = right_inverse_modes(statement_score.symbolic_flat_modes(frag))
        assert list(zip(cute.flatten(got.shape), cute.flatten(got.stride))) == derived, frag
        checked += 1
    assert checked > 100


def test_digit_holders_decline_digits_that_are_no_mixed_radix_of_the_element():
    """Digits whose strides do not chain (1, e0, e0 * e1, ...) do not name an element's cell digit by digit:
    declined, as are replicated fragments and fragments without recorded digits."""
    from types import SimpleNamespace

    def stub(digits, reps=1):
        return SimpleNamespace(cell_digits=lambda: digits, replicate_size=reps, output_shape=[4],
                               input_shape=[4, 4], thread_extent=4, thread_range=None)
    elements = np.arange(16, dtype=np.int64)
    assert sc.digit_holders(stub([(2, 1), (2, 2), (2, 4), (2, 8)]), elements) is not None
    assert sc.digit_holders(stub([(2, 1), (2, 2), (2, 8), (2, 4)]), elements) is not None    # any order
    assert sc.digit_holders(stub([(2, 1), (2, 3), (2, 4), (2, 8)]), elements) is None        # a gap
    assert sc.digit_holders(stub([(4, 1), (2, 2), (2, 8)]), elements) is None                # an overlap
    assert sc.digit_holders(stub([(2, 1), (2, 2), (2, 4), (2, 8)], reps=2), elements) is None
    assert sc.digit_holders(stub(None), elements) is None
    held = sc.digit_holders(stub([(2, 1), (2, 8), (2, 2), (2, 4)]), elements)
    # cell c = d0 + 2 d1 + 4 d2 + 8 d3 with d0 = n % 2, d1 = n // 8, d2 = n // 2 % 2, d3 = n // 4 % 2; thread = c // 4
    cells = elements % 2 + 2 * (elements // 8) + 4 * (elements // 2 % 2) + 8 * (elements // 4 % 2)
    assert np.array_equal(held, cells // 4)
