"""Reductions: inference records the partials' layout and who combines them (``annotate.REDUCTIONS_ATTR``);
lowering follows the record, checks it against the layouts it lowers, and refuses a stale or missing one."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conftest import kernel_warnings  # noqa: E402
from tilelayout import Fragment  # noqa: E402
from tilelayout.annotate import REDUCTIONS_ATTR, annotate_layouts, read_reductions  # noqa: E402
from tilelayout.layout import placeholder as P, rep_placeholder  # noqa: E402
from tilelayout.passes.all_reduce import unheld_partial  # noqa: E402
from tilelayout.passes.inference.layout_inference import infer_layouts  # noqa: E402
from tilelayout.passes.lowering.loop_partition import LoweringError  # noqa: E402
from tilelayout.passes.lowering.lower_tile_ops import lower_tile_ops  # noqa: E402
from tilelayout.passes.lowering.pipeline import check_numeric  # noqa: E402


def _variant(case: str, name: str):
    return importlib.import_module(f"cases.{case}").VARIANTS[name]()


def _holders(frag: Fragment, threads: int) -> list:
    """Holder threads of each element (row-major), from the thread table alone."""
    lo = (frag.thread_range or (0, threads))[0]
    table = np.asarray(frag.thread_table()) + lo
    return [sorted(set(int(t) for t in row)) for row in table.reshape(-1, table.shape[-1])]


@pytest.mark.parametrize("variant, combine", [("sum_128x128_t32", "reduced"), ("max_64x256_t128", "destination")])
def test_inference_records_who_combines_and_lowering_follows_it(variant, combine):
    func = _variant("reduce_owner_subset", variant)
    with kernel_warnings("TileLayoutResourceWarning"):   # the 128x128 tile in 32 threads is over the register budget
        res = infer_layouts(func)
    (text, reduced, recorded), = read_reductions(res.func).values()
    assert "x" in text and recorded == combine
    assert REDUCTIONS_ATTR in res.func.script()          # the decision prints with the program
    # the partials' holders of row i are exactly the source's holders of row i (independent of the rules)
    x = res.buffers["x"]
    threads = 32 if variant.endswith("t32") else 128
    n_cols = int(x.input_shape[1])
    per_element = _holders(x, threads)
    for i, holders in enumerate(_holders(reduced, threads)):
        row = set().union(*(set(h) for h in per_element[i * n_cols:(i + 1) * n_cols]))
        assert holders == sorted(row)
    m, n = (128, 128) if variant.startswith("sum") else (64, 256)
    want = (lambda d: {"B": d["A"].astype(np.float64).sum(axis=1).astype(np.float32)}) if variant.startswith("sum") \
        else (lambda d: {"B": d["A"].max(axis=1)})
    with kernel_warnings("TileLayoutResourceWarning"):
        out = check_numeric(func, want)
    assert out.ok, out.message
    assert [int(s) for s in reduced.input_shape] == [m] and n > 0


def test_a_reduction_without_a_recorded_decision_is_refused():
    res = infer_layouts(_variant("reduce_broadcast", "64x128_t128"))
    func = res.func.without_attr(REDUCTIONS_ATTR)
    with pytest.raises(LoweringError, match=r"max .*no reduction decision recorded.*run layout inference first"):
        lower_tile_ops(func)


def test_a_recorded_reduced_layout_that_misses_a_source_holder_is_refused():
    res = infer_layouts(_variant("reduce_broadcast", "64x128_t128"))
    (index, (text, reduced, combine)), = read_reductions(res.func).items()
    # the source changed after inference: each row now sits in one thread, not among the recorded partials' holders
    one_thread = Fragment.from_exprs([64, 128], (P(0) + 1) % 128, [P(1)]).bind_thread_range(0, 128)
    func = annotate_layouts(res.func, {"x": one_thread})
    assert unheld_partial(one_thread, reduced, [1], 128) is not None
    with pytest.raises(LoweringError, match=r"buffer x: max .*recorded reduced layout .*does not fit the source"):
        lower_tile_ops(func)


def test_unheld_partial_names_the_first_source_element_left_out():
    src = Fragment.from_exprs([4, 8], P(0) * 8 + P(1), [0]).bind_thread_range(0, 32)   # one element per thread
    partials = Fragment.from_exprs([4], P(0) * 8 + 7, [0]).bind_thread_range(0, 32)    # only the row's last one
    err = unheld_partial(src, partials, [1], 32)
    assert err is not None and "thread 0 holds source element [0, 0]" in err
    every = Fragment.from_exprs([4], P(0) * 8 + rep_placeholder(), [0], 8).bind_thread_range(0, 32)
    assert unheld_partial(src, every, [1], 32) is None                                 # all 8 holders of each row
    assert "covers [8]" in unheld_partial(src, Fragment.from_exprs([8], P(0), [0]), [1], 32)


def test_the_recorded_decision_survives_printing_and_parsing():
    import tvm
    res = infer_layouts(_variant("reduce_broadcast", "64x128_t128"))
    parsed = tvm.script.from_source(res.func.script())
    parsed = parsed if not isinstance(parsed, tvm.IRModule) else parsed[list(parsed.functions)[0]]
    (text, reduced, combine), = read_reductions(res.func).values()
    (text2, reduced2, combine2), = read_reductions(parsed).values()
    assert (text2, combine2) == (text, combine) and reduced2.is_equal(reduced)
    lower_tile_ops(parsed)                      # lowering reads the parsed record as it reads the original
