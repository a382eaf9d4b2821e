"""Front-end coverage of constructs real kernels use: serial scans inside parallel nests, cumsum,
atomics, multi-dimensional thread blocks. Each kernel is inferred under both cost models, lowered, run
on the CPU against an independent numpy computation, and compiled to CUDA source."""
from __future__ import annotations

import numpy as np
import pytest

import tilelayout as tl
from tilelayout.errors import InferenceError, LayoutError
from tilelayout.passes.inference.frontend import FrontendError

from tests import kernels_coverage as K

MODELS = ("register-count", "io-aware")


def _run(func, arrays, model):
    kernel = tl.build_cpu(func, cost_model=model)
    out = [a.copy() for a in arrays]
    kernel(*out)
    return out


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------------------------------ scans

@pytest.mark.parametrize("model", MODELS)
def test_manual_row_scan_keeps_each_row_in_one_thread_and_matches_numpy(model):
    func = K.manual_scan(64, 32, 64)
    frag = tl.infer_layouts(func, cost_model=model).buffers["F"]
    threads = frag.thread_table()
    assert (threads == threads[:, :1]).all()
    a = _rand(64, 32)
    _, b = _run(func, [a, np.zeros_like(a)], model)
    np.testing.assert_allclose(b, np.cumsum(a, axis=1), rtol=1e-5, atol=1e-5)


def test_manual_scan_cuda_unrolls_the_serial_loop_into_constant_register_slots():
    src = tl.cuda_source(K.manual_scan(32, 8, 32))
    assert "F_ptr[7] = (F_ptr[7] + F_ptr[6]);" in src
    assert "for (int j" not in src


@pytest.mark.parametrize("model", MODELS)
def test_serial_loop_over_a_middle_dimension(model):
    func = K.column_scan_3d(32)
    frag = tl.infer_layouts(func, cost_model=model).buffers["F"]
    t = frag.thread_table()
    assert (t == t[:, :1]).all()
    a = _rand(4, 16, 8)
    _, b = _run(func, [a, np.zeros_like(a)], model)
    ref = a.copy()
    for j in range(15):
        ref[:, 14 - j, :] = ref[:, 14 - j, :] * 0.5 + ref[:, 15 - j, :]
    np.testing.assert_allclose(b, ref, rtol=1e-5, atol=1e-5)


def test_serial_index_leaving_the_fragment_is_refused_with_the_range():
    with pytest.raises(InferenceError, match=r"leaves fragment F .*reach -1\.\.14"):
        tl.infer_layouts(K.scan_out_of_bounds())


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("dim,reverse,into_other", [(1, False, False), (1, True, True), (0, False, True),
                                                    (0, True, False)])
def test_cumsum_over_fragments_matches_numpy(model, dim, reverse, into_other):
    func = K.cumsum(32, 16, 64, dim, reverse, into_other)
    a = _rand(32, 16, seed=dim + 2 * reverse)
    _, b = _run(func, [a, np.zeros_like(a)], model)
    ref = np.flip(np.cumsum(np.flip(a, dim), axis=dim), dim) if reverse else np.cumsum(a, axis=dim)
    np.testing.assert_allclose(b, ref, rtol=1e-5, atol=1e-4)
    tl.cuda_source(func, cost_model=model)


@pytest.mark.parametrize("model", MODELS)
def test_cumsum_of_a_one_dimensional_shared_tile(model):
    func = K.cumsum_1d(100, 32)
    a = _rand(100)
    _, b = _run(func, [a, np.zeros_like(a)], model)
    np.testing.assert_allclose(b, np.cumsum(a), rtol=1e-5, atol=1e-4)


def test_cumsum_rejects_mismatched_regions():
    import tvm
    from tvm.script import tirx as T
    from tilelayout import lang
    buf_a = tvm.tirx.decl_buffer((4, 8), "float32", name="a")
    buf_b = tvm.tirx.decl_buffer((4, 4), "float32", name="b")
    with pytest.raises(LayoutError, match="must be equal"):
        lang.cumsum(buf_a, buf_b, dim=1)
    with pytest.raises(LayoutError, match="dim 2 out of range"):
        lang.cumsum(buf_a, dim=2)
    del T


# ------------------------------------------------------------------------------------------ atomics

@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("shared", [True, False])
def test_histogram_with_atomics_matches_numpy(model, shared):
    func = K.histogram(64, 32, 16, 128, shared)
    a = np.random.default_rng(1).integers(-1000, 1000, (64, 32)).astype(np.int32)
    _, h = _run(func, [a, np.zeros(16, np.int32)], model)
    np.testing.assert_array_equal(h, np.bincount(np.mod(a, 16).ravel(), minlength=16))


def test_shared_atomics_are_fenced_and_stay_scalar_in_cuda():
    src = tl.cuda_source(K.histogram(64, 32, 16, 128, True))
    body = src[src.index("__global__ void"):]
    first, last = body.index("atomicAdd"), body.rindex("atomicAdd")
    assert "__syncthreads()" in body[:first] and "__syncthreads()" in body[last:]
    assert body.count("atomicAdd") == 1


@pytest.mark.parametrize("model", MODELS)
def test_split_k_atomic_from_a_replicated_loop_is_done_once_per_element(model):
    func = K.split_k(64, 256, 4, 128)
    r = tl.infer_layouts(func, cost_model=model)
    assert r.loops["i[64]"].replicate_size > 1          # the guard matters
    a = _rand(64, 256)
    base = _rand(64, seed=3)
    _, out = _run(func, [a, base], model)
    np.testing.assert_allclose(out, base + a.sum(axis=1), rtol=1e-4, atol=1e-3)
    src = tl.cuda_source(func, cost_model=model)
    assert "atomicAdd" in src and "% 16) == 0" in src.replace("&", "%")


@pytest.mark.parametrize("model", MODELS)
def test_tvm_spelling_of_atomic_add(model):
    func = K.tvm_atomic_add(32, 64, 128)
    a = _rand(32, 64)
    _, out = _run(func, [a, np.zeros(32, np.float32)], model)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-4, atol=1e-4)
    assert "atomicAdd" in tl.cuda_source(func, cost_model=model)


def test_integer_atomic_max_and_min():
    func = K.atomic_minmax(16, 64, 128)
    a = np.random.default_rng(2).integers(-10**6, 10**6, (16, 64)).astype(np.int32)
    mx = np.full(16, -2**31, np.int32)
    mn = np.full(16, 2**31 - 1, np.int32)
    _, got_mx, got_mn = _run(func, [a, mx, mn], "io-aware")
    np.testing.assert_array_equal(got_mx, a.max(axis=1))
    np.testing.assert_array_equal(got_mn, a.min(axis=1))
    src = tl.cuda_source(func)
    assert "atomicMax" in src and "atomicMin" in src


def test_floating_point_atomic_max_is_refused_naming_the_buffer():
    from tvm import tirx
    from tilelayout import lang
    buf = tirx.decl_buffer((4,), "float32", name="Mx")
    with pytest.raises(LayoutError, match="atomic_max on Mx .*integer"):
        lang.atomic_max(tirx.BufferLoad(buf, [tirx.const(0, "int32")]), tirx.const(1.0, "float32"))


def test_atomic_on_a_fragment_is_refused():
    with pytest.raises(FrontendError, match="atomic add on F .*local.fragment"):
        tl.infer_layouts(K.atomic_on_fragment())


# ------------------------------------------------------------------------------ multi-dimensional blocks

@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("x,y", [(32, 4), (16, 8)])
def test_two_dimensional_block_uses_the_linear_thread_id(model, x, y):
    func = K.row_softmax_2d_block(64, 128, x, y)
    r = tl.infer_layouts(func, cost_model=model)
    assert r.buffers["F"].thread_extent == x * y
    a = _rand(64, 128)
    _, b, c = _run(func, [a, np.zeros_like(a), np.zeros((y, x), np.int32)], model)
    np.testing.assert_allclose(b, a - a.max(axis=1, keepdims=True), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(c, np.arange(y)[:, None] * 1000 + np.arange(x)[None, :])
    src = tl.cuda_source(func, cost_model=model)
    assert "threadIdx.y" in src and "__launch_bounds__(" + str(x * y) + ")" in src


def test_annotated_function_keeps_the_users_launches():
    r = tl.infer_layouts(K.row_softmax_2d_block(64, 128, 32, 4))
    text = r.func.script()
    assert 'T.launch_thread("threadIdx.y", 4)' in text and 'T.launch_thread("threadIdx.x", 32)' in text


@pytest.mark.parametrize("model", MODELS)
def test_three_dimensional_block(model):
    func = K.three_dim_block()
    a = np.random.default_rng(4).standard_normal((64, 64)).astype(np.float16)
    _, b = _run(func, [a, np.zeros_like(a)], model)
    np.testing.assert_array_equal(b, a * np.float16(2))
    assert "threadIdx.z" in tl.cuda_source(func, cost_model=model)


# ------------------------------------------------------------------------------------ reads before writes

def test_source_first_copy_warns_naming_the_op_buffer_and_the_tirx_order():
    with pytest.warns(tl.UninitializedReadWarning, match=r"copy A\[0:64, 0:64\] <- frag.*reads fragment frag before "
                                                          r"any op writes it.*destination first"):
        tl.infer_layouts(K.source_first_copy())


def test_strict_mode_turns_the_warning_into_an_error(monkeypatch):
    with tl.layout_config(strict=True):
        with pytest.raises(tl.UninitializedReadError, match="reads fragment frag"):
            tl.infer_layouts(K.source_first_copy())
    monkeypatch.setenv("TILELAYOUT_STRICT", "1")
    with pytest.raises(tl.UninitializedReadError):
        tl.infer_layouts(K.source_first_copy())
    with tl.layout_config(strict=False):
        with pytest.warns(tl.UninitializedReadWarning):
            tl.infer_layouts(K.source_first_copy())


def test_self_update_of_an_unwritten_fragment_warns():
    with pytest.warns(tl.UninitializedReadWarning, match="reads fragment s before any op writes it"):
        tl.infer_layouts(K.accumulate_without_clear())


def test_initialised_kernels_and_loop_carried_scans_do_not_warn():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", tl.UninitializedReadWarning)
        tl.infer_layouts(K.cumsum(32, 16, 64, 1, False, True))     # reads G[prev] it wrote one step before
        tl.infer_layouts(K.manual_scan(32, 16, 32))
        tl.infer_layouts(K.split_k(64, 256, 4, 128))


# ------------------------------------------------------------------------------------ every tile primitive

SUPPORTED = {"copy", "copy_async", "fill", "zero", "memset", "cast", "add", "sub", "mul", "fdiv", "maximum",
             "minimum", "fma", "exp", "exp2", "log2", "sqrt", "reciprocal", "silu", "sum", "max", "min",
             "unary_reduce", "binary_reduce", "binary_chain", "reduce_negate", "gemm"}
REFUSED = {"select", "permute_layout", "gemm_async"}


def test_every_registered_tile_primitive_is_either_supported_or_refused_by_name():
    import tvm
    from tilelayout.passes.inference.composite_ops import COMPOSITE_OPS
    from tilelayout.passes.inference.frontend import _ELEMENTWISE
    registered = {n.rsplit(".", 1)[-1] for n in tvm.ir.Op.list_op_names() if n.startswith("tirx.tile.")}
    assert registered == SUPPORTED | REFUSED, registered ^ (SUPPORTED | REFUSED)
    modelled = set(_ELEMENTWISE) | set(COMPOSITE_OPS) | {"copy", "copy_async", "fill", "sum", "max", "min", "gemm"}
    assert SUPPORTED <= modelled


@pytest.mark.parametrize("model", MODELS)
def test_composite_primitives_match_numpy(model):
    func = K.composites()
    a = np.random.default_rng(5).random((64, 32)).astype(np.float32)
    outs = [np.zeros((64, 32), np.float32), np.zeros(64, np.float32), np.zeros(64, np.float32),
            np.zeros(64, np.float32), np.zeros((64, 32), np.float32)]
    _, b, c, d, e, g2 = _run(func, [a] + outs, model)
    unary = np.exp(a * 0.5 + 1.0)                  # unary_reduce: exp(x * scale + bias), then sum
    np.testing.assert_allclose(c, unary.sum(axis=1), rtol=1e-5)
    h = a * 0.5                                    # binary_reduce over memset(0.5): x * h, then max
    np.testing.assert_allclose(g2, h, rtol=1e-6)
    np.testing.assert_allclose(d, h.max(axis=1), rtol=1e-6)
    np.testing.assert_allclose(b, 2 * (unary - a), rtol=1e-5, atol=1e-5)   # reversed chain: 2 * (G - F)
    np.testing.assert_allclose(e, -a.min(axis=1), rtol=1e-6)               # reduce_negate(min)
    tl.cuda_source(func, cost_model=model)


def test_select_lowers_to_a_per_thread_select():
    from tilelayout.passes.lowering.pipeline import check_numeric
    res = check_numeric(K.select_op(), lambda d: {"B": np.where(np.arange(16)[:, None] >= np.arange(16)[None, :],
                                                                d["A"], np.float32(0))})
    assert res.ok and res.exact, res.message


def test_accumulating_reduce_negate_is_refused():
    with pytest.raises(FrontendError, match="accum=True"):
        tl.infer_layouts(K.reduce_negate_accum())


@pytest.mark.parametrize("model", MODELS)
def test_absmax_abssum_and_bitwise_or_reductions_as_serial_loops(model):
    func = K.row_reductions_by_serial_loop()
    a = np.random.default_rng(6).standard_normal((32, 16)).astype(np.float32)
    bits = np.random.default_rng(7).integers(0, 1 << 20, (32, 16)).astype(np.int32)
    _, _, mx, sm, bo = _run(func, [a, bits, np.zeros(32, np.float32), np.zeros(32, np.float32),
                                   np.zeros(32, np.int32)], model)
    np.testing.assert_array_equal(mx, np.abs(a).max(axis=1))
    np.testing.assert_allclose(sm, np.abs(a).sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(bo, np.bitwise_or.reduce(bits, axis=1))


# ------------------------------------------------------------------------------------------ dynamic shapes

@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("m", [64, 192, 100, 1, 130])
def test_symbolic_rows_with_static_tiles(model, m):
    kernel = tl.build_cpu(K.dynamic_scale(), cost_model=model)
    a = _rand(m, 64, seed=m)
    _, b = kernel(a, np.zeros_like(a))
    np.testing.assert_array_equal(b, 2 * a)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("m", [128, 100, 7])
def test_partial_tile_reads_contribute_zero(model, m):
    kernel = tl.build_cpu(K.dynamic_column_sums(), cost_model=model)
    a = _rand(m, 32, seed=m)
    _, out = kernel(a, np.zeros(32, np.float32))
    np.testing.assert_allclose(out, a.sum(axis=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("m,n", [(64, 96), (50, 70), (33, 31)])
def test_symbolic_rows_and_columns(model, m, n):
    kernel = tl.build_cpu(K.dynamic_both(), cost_model=model)
    a = np.random.default_rng(m * n).standard_normal((m, n)).astype(np.float16)
    _, b = kernel(a, np.zeros_like(a))
    np.testing.assert_array_equal(b, a + np.float16(1))


def test_guards_only_where_a_region_may_leave_its_buffer():
    import re

    from tilelayout.passes.lowering.pipeline import lower_func
    lowered = lower_func(K.dynamic_scale()).script()    # before TVM copies the unrolled row loop out
    assert len(re.findall(r"< m\b", lowered)) == 2       # the load and the store of the row tile
    src = tl.cuda_source(K.dynamic_scale())
    body = src[src.index("__global__ void"):]
    assert "condval" in body and "float4" in body      # predicated, still vectorised along the row
    static = tl.cuda_source(K.manual_scan(64, 32, 64))
    assert "condval" not in static and "if (" not in static[static.index("__global__ void"):]


def test_cpu_kernel_checks_symbolic_extents_agree():
    kernel = tl.build_cpu(K.dynamic_scale())
    with pytest.raises(ValueError, match="m = 10"):
        kernel(_rand(10, 64), np.zeros((11, 64), np.float32))


@pytest.mark.parametrize("model", MODELS)
def test_atomic_in_a_replicated_reversed_loop_runs_once_per_element(model):
    func = K.reversed_atomic(64, 64, 128)
    a = _rand(64, 64)
    _, out = _run(func, [a, np.zeros(64, np.float32)], model)
    np.testing.assert_allclose(out, 2 * a.sum(axis=1)[::-1], rtol=1e-4, atol=1e-4)
