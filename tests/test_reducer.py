"""``lang.alloc_reducer`` / ``finalize_reducer`` (TileLang's reducer): sum, max and min rows, replication "all"
(partials per thread, combined by shuffles, by shared memory when an element's threads span warps) and "none",
run on the CPU under the race detector against numpy; CUDA compiled with nvcc for sm_80 and sm_90a; every break
of the fill / update / finalize protocol refused naming the reducer."""
from __future__ import annotations

import re

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kernels_reducer as KR  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout import lang as L  # noqa: E402
from tilelayout.passes.lowering.pipeline import check_numeric, compile_ptx, cuda_source, lower_func  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
MODELS = ["register-count", "io-aware"]
_NUMPY = {"sum": lambda a: a.astype(np.float64).sum(axis=1), "max": lambda a: a.max(axis=1),
          "min": lambda a: a.min(axis=1)}


def _rows_reference(op, start=None):
    def ref(d):
        out = _NUMPY[op](d["A"])
        if start is not None:
            out = np.maximum(out, start) if op == "max" else np.minimum(out, start) if op == "min" else out + start
        return {"B": out}
    return ref


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("replication", ["all", "none"])
def test_rows_match_numpy(op, replication, model):
    func = KR.rows(op, replication, tiles=2)
    res = check_numeric(func, _rows_reference(op), cost_model=model, tolerance=(1e-5, 1e-5))
    assert res.ok, res.message


@pytest.mark.parametrize("model", MODELS)
def test_replication_all_splits_rows_over_threads(model):
    """The reducer holds a few partial rows per thread (its layout replicated over the threads running the
    row's iterations), where "none" keeps whole rows: fewer registers, and a combine at finalize."""
    all_ = tl.infer_layouts(KR.rows("sum", "all"), cost_model=model)
    none = tl.infer_layouts(KR.rows("sum", "none"), cost_model=model)
    r_all, r_none = all_.buffers["r"], none.buffers["r"]
    assert r_all.replicate_size > 1
    loop = next(v for k, v in all_.loops.items() if k.startswith("i,j"))
    assert loop.replicate_size == 1
    # every thread running an iteration (i, j) holds r[i]
    threads = loop.thread_table()[..., 0]
    holders = r_all.thread_table()
    for i in range(threads.shape[0]):
        assert set(int(t) for t in threads[i]) <= set(int(t) for t in holders[i].reshape(-1))
    none_loop = next(v for k, v in none.loops.items() if k.startswith("i,j"))
    assert (none_loop.thread_table()[..., 0] == none_loop.thread_table()[:, :1, 0]).all(), \
        "replication none: every iteration of a row must run in the row's thread"
    text = lower_func(KR.rows("sum", "all"), cost_model=model).script()
    assert "tvm_warp_shuffle_xor" in text
    assert "tvm_warp_shuffle_xor" not in lower_func(KR.rows("sum", "none"), cost_model=model).script()


@pytest.mark.parametrize("op", ["sum", "max"])
def test_partials_across_warps_combine_through_shared_memory(op):
    """4 rows of 512 over 256 threads: each row's iterations span warps, so finalize exchanges warp partials
    through shared memory behind barriers (the race detector checks them)."""
    func = KR.rows(op, "all", m=4, n=512, threads=256)
    text = lower_func(func).script()
    assert "tvm_storage_sync" in text and "r_xchg" in text
    res = check_numeric(func, _rows_reference(op), tolerance=(1e-5, 1e-5))
    assert res.ok, res.message


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_start_values_count_once(op):
    """max/min are idempotent: a start value in every partial is still the start value once."""
    func = KR.rows(op, "all", m=32, n=64, start=0.25)
    res = check_numeric(func, _rows_reference(op, 0.25), tolerance=(1e-6, 1e-6))
    assert res.ok, res.message


def test_a_reducer_reused_for_a_second_epoch():
    func = KR.two_epochs()

    def ref(d):
        s = d["A"].astype(np.float64).sum(axis=1)
        return {"B": s, "C": 2 * s}
    res = check_numeric(func, ref, tolerance=(1e-5, 1e-5))
    assert res.ok, res.message


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_reducers_compile_with_nvcc(arch):
    target = {"kind": "cuda", "arch": arch}
    for func in (KR.rows("sum", "all"), KR.rows("max", "all", m=4, n=512, threads=256), KR.rows("min", "none")):
        ptx = compile_ptx(cuda_source(func, target), target).decode()
        assert ".entry" in ptx


@pytest.mark.parametrize("build, message", [
    (KR.read_during_accumulation, r"reducer r \(sum, replication \"all\"\): used by tirx.tile.copy during its "
                                  r"accumulation"),
    (KR.never_finalized, r"reducer r .*never finalized"),
    (KR.update_before_fill, r"reducer r .*before Tx.fill starts"),
    (KR.sum_starting_at_one, r"reducer r .*Tx.fill must give 0"),
    (KR.wrong_update, r"reducer r .*must only update it as `r\[i\] = r\[i\] \+ v`"),
    (KR.finalized_twice, r"reducer r .*finalize_reducer without an open accumulation"),
    (KR.store_outside_nest, r"reducer r .*accessed outside a T.parallel nest"),
    (KR.finalize_under_if, r"reducer r .*finalize_reducer under an `if`"),
    (KR.finalize_inside_loop_only, r"reducer r .*before Tx.fill starts|reducer r .*finalize_reducer without"),
])
def test_protocol_breaks_are_refused_by_name(build, message):
    with pytest.raises(tl.ReducerError, match=message):
        tl.infer_layouts(build())
    with pytest.raises(tl.TileLayoutError):
        lower_func(build())


def test_bad_arguments_are_refused():
    with pytest.raises(tl.TileLayoutError, match="op 'prod' is not one of sum, max, min"):
        L.alloc_reducer((4,), "float32", op="prod")
    with pytest.raises(tl.TileLayoutError, match="replication 'some' is not one of all, none"):
        L.alloc_reducer((4,), "float32", replication="some")
    with pytest.raises(tl.TileLayoutError, match="finalize_reducer: expected the buffer"):
        L.finalize_reducer(3)


@pytest.mark.parametrize("model", MODELS)
def test_fewer_iterations_than_threads_count_each_update_once(model):
    """TileLang #2408: 8 elements summed by 128 threads gave 576 (each iteration run, and counted, in 16
    threads); here the updating loop runs each iteration in one thread and the sum is 36."""
    func = KR.issue2408_eight_elements()
    res = tl.infer_layouts(func, cost_model=model)
    assert res.loops["i[8]"].replicate_size == 1
    out = check_numeric(func, lambda d: {"B": np.array([d["A"].astype(np.float64).sum()])}, cost_model=model,
                        tolerance=(1e-6, 1e-6))
    assert out.ok, out.message
    from tilelayout.passes.lowering.pipeline import build_cpu
    A, B = np.arange(1, 9, dtype=np.float32), np.zeros(1, np.float32)
    build_cpu(func, cost_model=model)(A, B)
    assert B[0] == 36.0


# ------------------------------------------------------------------------------- automatic splitting

def _fragment_registers(result) -> int:
    from tilelayout.passes.inference.auto_reducers import _fragment_registers as count
    return count(result)


@pytest.mark.parametrize("model", MODELS)
def test_an_accumulation_over_the_register_budget_is_split_across_threads(model):
    """The plain gemv (128 x 256 tile, 128 threads, ``acc[i] += a[i, j] * x[j]`` into an ordinary fragment):
    whole rows per thread need 257 fragment registers, over the 255 budget, so inference turns acc into a
    reducer (rows split over threads, combined after the loop): under the budget, and numpy's answer."""
    from cases import gemv
    func = gemv.VARIANTS["sm80_plain_256x1024_b256_t128"]()
    res = tl.infer_layouts(func, cost_model=model)
    assert _fragment_registers(res) <= 255
    assert res.buffers["o_acc"].replicate_size > 1
    notes = [re.search(r"split across threads as reducers: (\d+) fragment registers .*; (\d+) with partials", n)
             for n in res.notes]
    figures = [(int(m.group(1)), int(m.group(2))) for m in notes if m]
    assert figures and figures[0][0] > 255 >= figures[0][1], res.notes
    assert "tilelayout_finalize_reducer" in res.func.script()

    def ref(d):
        return {"o": (d["a"] * d["x"][None, :]).astype(np.float16).astype(np.float64).sum(axis=1)}
    out = check_numeric(func, ref, cost_model=model, tolerance=(2e-2, 5e-2))
    assert out.ok, out.message


def test_an_accumulation_within_the_budget_keeps_rows_in_one_thread():
    from cases import gemv
    res = tl.infer_layouts(gemv.gemv_plain(block_n=128, threads=256))
    assert res.buffers["o_acc"].replicate_size <= 2 and not any("split across" in n for n in res.notes)
    assert "tilelayout_finalize_reducer" not in res.func.script()
