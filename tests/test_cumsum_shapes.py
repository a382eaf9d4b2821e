"""lang.cumsum over fragments across shapes and thread counts, run on the CPU against numpy.

The golden case covers two shapes; these add the ones where rows and threads disagree (fewer rows than
threads, so the row-per-thread scan leaves threads replicated or idle; more rows than threads, so a thread
walks several rows), forward and reversed, in place and into a second fragment, under both cost models.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilelayout as tl

from tests import kernels_coverage as K

MODELS = ("register-count", "io-aware")

#: (rows, columns, threads): rows < threads, rows == threads, rows > threads, odd column counts
SHAPES = [(64, 32, 128), (16, 32, 128), (8, 64, 64), (4, 8, 32), (32, 16, 32), (128, 8, 32), (48, 12, 64)]


def _numpy_scan(a: np.ndarray, dim: int, reverse: bool) -> np.ndarray:
    """Inclusive prefix sum by an explicit loop in float64 (independent of the kernel and of np.cumsum)."""
    x = np.moveaxis(a.astype(np.float64), dim, -1)
    out = np.empty_like(x)
    order = range(x.shape[-1] - 1, -1, -1) if reverse else range(x.shape[-1])
    run = np.zeros(x.shape[:-1])
    for k in order:
        run = run + x[..., k]
        out[..., k] = run
    return np.moveaxis(out, -1, dim)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("m,n,threads", SHAPES)
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_rows_match_numpy(model, m, n, threads, reverse):
    func = K.cumsum(m, n, threads, 1, reverse)
    a = np.random.default_rng(m * 7 + n + reverse).standard_normal((m, n)).astype(np.float32)
    out = [a.copy(), np.zeros_like(a)]
    tl.build_cpu(func, cost_model=model)(*out)
    np.testing.assert_allclose(out[1], _numpy_scan(a, 1, reverse), rtol=1e-5, atol=1e-4)
    assert np.array_equal(out[0], a), "the source tensor must not be written"


@pytest.mark.parametrize("m,n,threads,reverse", [(16, 32, 128, True), (8, 24, 64, False)])
def test_cumsum_into_a_second_fragment_and_along_dim0(m, n, threads, reverse):
    a = np.random.default_rng(3).standard_normal((m, n)).astype(np.float32)
    for dim, into_other in ((1, True), (0, False), (0, True)):
        func = K.cumsum(m, n, threads, dim, reverse, into_other)
        out = [a.copy(), np.zeros_like(a)]
        tl.build_cpu(func)(*out)
        np.testing.assert_allclose(out[1], _numpy_scan(a, dim, reverse), rtol=1e-5, atol=1e-4,
                                   err_msg=f"dim {dim}, into_other {into_other}")


def test_the_numpy_scan_reference_is_not_trivially_satisfied():
    """The reference differs from a plain copy and from the opposite direction, so the checks can fail."""
    a = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    fwd, rev = _numpy_scan(a, 1, False), _numpy_scan(a, 1, True)
    assert np.allclose(fwd, np.cumsum(a, axis=1), atol=1e-5)
    assert not np.allclose(fwd, a, atol=1e-3) and not np.allclose(fwd, rev, atol=1e-3)


# ------------------------------------------------------------------ rows split over the lanes of a warp

#: (rows, columns, threads) where every thread can take an equal contiguous part of one row
SPLIT = [(64, 32, 128), (16, 32, 128), (8, 64, 64), (4, 8, 32), (1, 64, 32), (2, 8, 4)]


@pytest.mark.parametrize("m,n,threads", SPLIT)
def test_split_rows_hold_each_element_once_on_consecutive_lanes_of_one_warp(m, n, threads):
    for model in MODELS:
        frag = tl.infer_layouts(K.cumsum(m, n, threads, 1, False), cost_model=model).buffers["F"]
        t = np.asarray(frag.thread_table())
        assert t.shape[-1] == 1, f"{model}: F is replicated: {frag}"
        t = t[..., 0]
        assert int(np.prod(frag.output_shape)) * threads == m * n, f"{model}: {frag}"
        assert sorted(set(t.reshape(-1).tolist())) == list(range(threads)), f"{model}: idle threads: {frag}"
        for row in t:
            assert len(set((row // 32).tolist())) == 1, f"{model}: a row spans warps: {frag}"
            assert (np.diff(row) >= 0).all() and (np.diff(row) <= 1).all(), f"{model}: chunks not contiguous: {frag}"


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n,threads", [(64, 32), (32, 8), (8, 8)])
def test_one_dimensional_fragment_split_over_a_warp_matches_numpy(n, threads, reverse):
    func = K.cumsum_1d_fragment(n, threads, reverse)
    frag = tl.infer_layouts(func).buffers["F"]
    assert int(np.prod(frag.output_shape)) == n // threads, frag
    a = np.random.default_rng(n + threads).standard_normal(n).astype(np.float32)
    out = [a.copy(), np.zeros_like(a)]
    tl.build_cpu(func)(*out)
    np.testing.assert_allclose(out[1], _numpy_scan(a, 0, reverse), rtol=1e-5, atol=1e-4)


def test_split_scan_cuda_uses_shuffles_and_constant_register_slots():
    src = tl.cuda_source(K.cumsum(64, 32, 128, 1, True))
    assert "__shfl_sync" in src
    assert "float F_ptr[16];" in src
    assert "F_ptr[0] = (F_ptr[0] + F_ptr[1]);" in src         # the reverse chunk scan, slot 1 into slot 0
    assert "F_ptr[(" not in src and "F_ptr[((" not in src     # no thread-dependent register index


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("wrong", ["one lane too far", "wrong direction"])
def test_a_wrong_shuffle_lane_is_caught_by_the_cpu_check(monkeypatch, reverse, wrong):
    """The CPU run emulates the shuffles' real data flow: reading the wrong lane must give wrong sums."""
    from tilelayout.passes.lowering import lower_scan
    right = lower_scan._partner
    if wrong == "one lane too far":
        monkeypatch.setattr(lower_scan, "_partner", lambda lane, d, rev: right(lane, d + 1, rev))
    else:
        monkeypatch.setattr(lower_scan, "_partner", lambda lane, d, rev: right(lane, d, not rev))
    m, n, threads = 16, 32, 128
    a = np.random.default_rng(5).standard_normal((m, n)).astype(np.float32)
    out = [a.copy(), np.zeros_like(a)]
    tl.build_cpu(K.cumsum(m, n, threads, 1, reverse))(*out)
    assert not np.allclose(out[1], _numpy_scan(a, 1, reverse), rtol=1e-5, atol=1e-4)
    monkeypatch.setattr(lower_scan, "_partner", right)
    out = [a.copy(), np.zeros_like(a)]
    tl.build_cpu(K.cumsum(m, n, threads, 1, reverse))(*out)
    np.testing.assert_allclose(out[1], _numpy_scan(a, 1, reverse), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("m,n,threads", [(64, 32, 128), (16, 32, 128), (48, 12, 64)])
def test_two_scans_of_one_fragment_then_an_elementwise_loop(model, m, n, threads):
    """The second scan derives its loop layout from the first one's (split) fragment layout."""
    func = K.cumsum_twice(m, n, threads)
    a = np.random.default_rng(9).standard_normal((m, n)).astype(np.float32)
    out = [a.copy(), np.zeros_like(a)]
    tl.build_cpu(func, cost_model=model)(*out)
    want = 2.0 * _numpy_scan(_numpy_scan(a, 1, False), 1, True)
    np.testing.assert_allclose(out[1], want, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("reverse", [False, True])
def test_int32_split_scan_is_exact(reverse):
    func = K.cumsum_1d_fragment(64, 16, reverse, "int32")
    assert int(np.prod(tl.infer_layouts(func).buffers["F"].output_shape)) == 4
    a = np.random.default_rng(2).integers(-1000, 1000, 64).astype(np.int32)
    out = [a.copy(), np.zeros_like(a)]
    tl.build_cpu(func)(*out)
    want = (np.cumsum(a[::-1])[::-1] if reverse else np.cumsum(a)).astype(np.int32)
    assert np.array_equal(out[1], want)


@pytest.mark.parametrize("model", MODELS)
def test_split_scan_from_a_shared_tile_into_a_fragment(model):
    """cumsum(S, F, dim=0): the source is read from shared memory, each column of F split over 8 lanes."""
    from cases.row_scan import _cumsum_shared
    func = _cumsum_shared(32, 8, 64)
    frag = tl.infer_layouts(func, cost_model=model).buffers["F"]
    assert int(np.prod(frag.output_shape)) == 4 and frag.replicate_size == 1, frag
    a = np.random.default_rng(4).standard_normal((32, 8)).astype(np.float32)
    out = [a.copy(), np.zeros_like(a)]
    tl.build_cpu(func, cost_model=model)(*out)
    np.testing.assert_allclose(out[1], _numpy_scan(a, 0, False), rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc is not on PATH")
def test_lane_split_scan_compiles_with_nvcc_and_keeps_its_shuffles():
    import importlib
    from tilelayout.passes.lowering.pipeline import compile_ptx, cuda_source
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    build = importlib.import_module("cases.row_scan").VARIANTS["cumsum_reverse_f32_64x32_t128"]
    ptx = compile_ptx(cuda_source(build()), {"kind": "cuda", "arch": "sm_80"}).decode()
    assert "shfl.sync" in ptx


#: (rows, columns, threads, dim): fewer scanned lines than threads (the thread guard around the scan), as many
#: and more
SHARED_SCANS = [(8, 16, 32, 1, False), (16, 8, 32, 0, True), (8, 64, 32, 1, True), (32, 8, 32, 1, False),
                (64, 16, 32, 1, False)]


@pytest.mark.parametrize("m,n,threads,dim,reverse", SHARED_SCANS)
def test_cumsum_of_a_shared_tile_runs_on_the_cpu_and_generates_cuda(m, n, threads, dim, reverse):
    """A guarded scan of shared memory: TVM puts a barrier at the top of each scan step, so the thread guard must
    sit inside the step (every thread reaches the barrier) and not around the loop, where TVM refuses it."""
    from tilelayout.passes.lowering.pipeline import check_numeric, cuda_source
    func = K.cumsum_shared_in_place(m, n, threads, dim, reverse)
    for model in MODELS:
        res = check_numeric(func, lambda d: {"B": _numpy_scan(d["A"], dim, reverse)}, cost_model=model)
        assert res.ok, f"{model}: {res.message}"
        src = cuda_source(func, cost_model=model)
        assert "__syncthreads" in src
        if __import__("shutil").which("nvcc") is not None:
            from tilelayout.passes.lowering.pipeline import compile_ptx
            assert "bar.sync" in compile_ptx(src, {"kind": "cuda", "arch": "sm_80"}).decode()


def test_a_guard_moves_inside_a_constant_serial_loop_that_writes_shared_memory_only():
    from tvm import tirx
    from tilelayout.passes.lowering.loop_partition import guard_outside_barriers
    tx, v = tirx.Var("tx", "int32"), tirx.Var("v", "int32")
    S = tirx.decl_buffer([8, 16], "float32", name="S", scope="shared")
    F = tirx.decl_buffer([16], "float32", name="F", scope="local")
    write_shared = tirx.For(v, 0, 16, tirx.ForKind.SERIAL, tirx.BufferStore(S, tirx.const(1.0, "float32"), [tx, v]))
    out = guard_outside_barriers(tx < 8, write_shared)
    assert isinstance(out, tirx.For) and isinstance(out.body, tirx.IfThenElse)
    write_local = tirx.For(v, 0, 16, tirx.ForKind.SERIAL, tirx.BufferStore(F, tirx.const(1.0, "float32"), [v]))
    assert isinstance(guard_outside_barriers(tx < 8, write_local), tirx.IfThenElse)
    thread_bound = tirx.For(v, 0, tx, tirx.ForKind.SERIAL, tirx.BufferStore(S, tirx.const(1.0, "float32"), [tx, v]))
    assert isinstance(guard_outside_barriers(tx < 8, thread_bound), tirx.IfThenElse)
