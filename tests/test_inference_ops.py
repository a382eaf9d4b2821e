"""Per-op inference rules (copy, fill, parallel, reduce, gemm), the TileLang bug patterns done right
(#2957, #3005, #2398, #1729), ownership conflicts, and an exact-enumeration sweep of every result.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernels_inference as K  # noqa: E402
import tilelayout as tl  # noqa: E402
from conftest import kernel_warnings  # noqa: E402
from maint.oracle import score_statement_oracle  # noqa: E402
from tilelayout.annotate import annotate_layouts  # noqa: E402
from tilelayout.errors import LayoutConflictError  # noqa: E402

T128 = 128
MODELS = ("register-count", "io-aware")

KERNELS = {
    "copy_fp16": lambda: K.copy_roundtrip(64, 64, "float16", T128),
    "copy_fp8": lambda: K.copy_roundtrip(64, 128, "float8_e4m3fn", 64),
    "chain": lambda: K.chain(64, 128, T128),
    "two_components": K.two_components,
    "plain_loop": lambda: K.plain_loop(64, 128, T128),
    "short_loop": lambda: K.short_loop(100, T128),
    "small_fragment": lambda: K.small_fragment(4, T128),
    "fill": lambda: K.fill_then_store(32, 64, T128),
    "const_index": lambda: K.const_index(64, 64, T128),
    "floating": lambda: K.floating_use(T128),
    "sum_axis0": lambda: K.reduce_sum(64, 128, 0, T128),
    "sum_axis1": lambda: K.reduce_sum(64, 128, 1, T128),
    "max_axis0": lambda: K.reduce_max(32, 64, 0, T128),
    "max_axis1": lambda: K.reduce_max(64, 128, 1, T128),
    "min_axis0": lambda: K.reduce_min(32, 64, 0, T128),
    "min_axis1": lambda: K.reduce_min(128, 32, 1, T128),
    "row_max_128": lambda: K.row_max_then_subtract(128, 128, T128),
    "head_then_full": lambda: K.head_then_full(100, 256, T128),
    "full_then_head": lambda: K.full_then_head(100, 256, T128),
    "const_pair": lambda: K.const_pair(64, 128, T128),
    "register_spill": lambda: K.register_spill(64, 128, T128),
    "ragged_229": lambda: K.ragged(229, T128),
    "ragged_192": lambda: K.ragged(192, T128),
    "row_scale": lambda: K.row_scale(64, 128, T128),
    "repeated": lambda: K.repeated_copy(4),
    "partial_copy": K.partial_copy,
    "small_roundtrip": lambda: K.small_roundtrip(8, 256, "float32"),
    "column_broadcast": lambda: K.column_broadcast(64, 128, T128),
    "accumulate": lambda: K.accumulate_rows(T128),
    "nest_3d": lambda: K.nest_3d(T128),
}
THREADS = {"copy_fp8": 64, "small_roundtrip": 256}


@pytest.fixture(scope="module")
def infer():
    funcs, results = {}, {}

    def get(name, model="register-count"):
        if (name, model) not in results:
            if name not in funcs:
                funcs[name] = KERNELS[name]()
            with kernel_warnings():    # some kernels here are over a budget by design; their layouts are checked
                results[name, model] = tl.infer_layouts(funcs[name], cost_model=model)
        return results[name, model]
    return get


# --------------------------------------------------------------------------- every result, by enumeration

@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_inferred_layout_is_valid_and_owned(infer, name, model):
    """Fragments injective within the thread range, loop layouts covering their nests, every fragment
    access in every loop-shaped op run by threads that hold it (writes: exactly its holders)."""
    K.check_result(infer(name, model), THREADS.get(name, T128))


def test_the_enumeration_checks_catch_a_wrong_layout(infer):
    """The checker is not vacuous: a loop running on the wrong threads is reported."""
    r = infer("chain")
    nest = __import__("tilelayout.passes.inference.loop_nest", fromlist=["nest_of"]).nest_of(r.graph.ops[1])
    shifted = tl.Fragment([64, 128], lambda i, j: (i % 4 * 32 + j // 4 + 1) % 128,
                          lambda i, j: i // 4 * 4 + j % 4).bind_thread_range(0, T128)
    (read,) = [a for a in nest.fragment_accesses() if a.buffer.name == "x"]
    assert K.ownership_violation(nest, shifted, read, r.buffers["x"]) is not None
    with pytest.raises(AssertionError, match="share a register"):
        K.assert_valid_fragment("bad", tl.Fragment([4, 4], lambda i, j: i, lambda i, j: j // 2), 4)


# --------------------------------------------------------------------------- copy / fill / parallel

@pytest.mark.parametrize("name,elem_bytes,vector", [("copy_fp16", 2, 8), ("copy_fp8", 1, 16), ("fill", 4, 4)])
def test_copy_and_fill_give_coalesced_fragments(infer, name, elem_bytes, vector):
    r = infer(name)
    frag = r.buffers["frag"]
    assert frag.replicate_size == 1
    score = score_statement_oracle(frag, frag.input_shape, elem_bytes, False)
    assert score.vector == vector, (frag, score)
    # each warp's vector step touches one contiguous run: segments = physical minimum
    size = int(np.prod(frag.input_shape)) * elem_bytes
    assert score.segments == size // 128


def test_planned_loop_layout_is_round_robin_over_vector_groups(infer):
    """thread = (flat // V) % T, slot = flat // V // T * V + flat % V with V = 4 fp32 lanes."""
    loop = infer("plain_loop").loops["i,j[64x128]"]
    flat = np.arange(64 * 128).reshape(64, 128)
    V = 4
    assert np.array_equal(loop.thread_table()[..., 0], (flat // V) % T128)
    slot = loop.table()[..., 0]
    assert np.array_equal(slot, flat // V // T128 * V + flat % V)
    assert loop.replicate_size == 1


def test_short_loop_gets_a_thread_predicate(infer):
    r = infer("short_loop")
    info = r.loop_info["i[100]"]
    assert info.layout.thread_extent == 100 and info.predicate == "tx < 100" and not info.padding_guard
    script = r.func.script()
    assert '"tilelayout.loop_predicate": "tx < 100"' in script


def test_loop_touching_a_small_fragment_is_replicated_to_fill_the_block(infer):
    r = infer("small_fragment")
    loop = r.loops["i[4]"]
    assert loop.replicate_size == 32
    assert sorted(loop.thread_table().reshape(-1).tolist()) == list(range(T128))
    assert r.buffers["f"].replicate_size == 32


# --------------------------------------------------------------------------- reductions

@pytest.mark.parametrize("name,axis", [("sum_axis0", 0), ("sum_axis1", 1), ("max_axis0", 0), ("max_axis1", 1),
                                       ("min_axis0", 0), ("min_axis1", 1)])
def test_reduction_result_is_held_by_exactly_the_threads_of_its_source_line(infer, name, axis):
    r = infer(name)
    x, red = r.buffers["x"], r.buffers["r"]
    xt = np.asarray(x.thread_table())                             # (m, n, 1)
    kept = xt.shape[1 - axis]
    rt = np.asarray(red.thread_table())                           # (kept, R)
    assert rt.shape[0] == kept and red.replicate_size > 1
    for k in range(kept):
        line = xt[:, k] if axis == 0 else xt[k, :]
        assert set(rt[k].tolist()) == set(line.reshape(-1).tolist()), (name, k)
        assert len(set(rt[k].tolist())) == red.replicate_size     # no replica on a thread twice


def test_row_max_of_a_128x128_tile_matches_the_issue_statement(infer):
    mx = infer("row_max_128").buffers["row_max"]
    want = tl.Fragment([128], lambda i, r: i % 4 * 32 + r, lambda i: i // 4, replicate=32)
    assert mx.is_equal(want.bind_thread_range(0, T128))


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_gemm_accumulator_is_the_mma_fragment_of_the_target(arch):
    """Strict level: sm_90 with shared operands -> the wgmma accumulator, otherwise mma.sync's; either way
    a bijection of the 128x128 tile onto 128 threads x 128 registers."""
    gemm_layouts = pytest.importorskip("tilelayout.gemm_layouts")
    import kernels_frontend
    r = tl.infer_layouts(kernels_frontend.gemm, target={"kind": "cuda", "arch": arch})
    if arch == "sm_90" and hasattr(gemm_layouts, "make_wgmma_accumulator_fragment"):
        want = gemm_layouts.make_wgmma_accumulator_fragment(128, 128, T128)
    else:
        want = gemm_layouts.make_mma_accumulator_fragment(128, 128, T128, "float32")
    acc = r.buffers["acc"]
    assert acc.is_equal(want.bind_thread_range(0, T128))
    assert acc.is_bijective()
    K.check_result(r, T128)


# --------------------------------------------------------------------------- TileLang bug patterns

@pytest.mark.parametrize("name,loops", [("head_then_full", ["i[100]", "i[256]"]),
                                        ("full_then_head", ["i[256]", "i[100]"])])
def test_2957_loops_of_different_extents_cover_every_iteration(infer, name, loops):
    for model in MODELS:
        r = infer(name, model)
        frag = r.buffers["frag"]
        assert frag.input_shape == [256]                   # TileLang: the short loop's [100] layout
        K.assert_valid_fragment("frag", frag, T128)
        assert list(r.loops) == loops
        for key in loops:
            extent = int(key[2:-1])
            loop = r.loops[key]
            assert loop.input_shape == [extent]
            assert np.asarray(loop.thread_table()).shape[0] == extent


def test_3005_two_constant_indices_replicate_the_fragment(infer):
    r = infer("const_pair")
    s = r.buffers["s"]
    assert s.is_equal(tl.fully_replicated([2], T128))
    assert r.buffers["F"].replicate_size == 1


def test_3005_two_row_indices_replicate_the_fragment(infer):
    r = infer("register_spill")
    assert r.buffers["r"].is_fully_replicated and r.buffers["r"].input_shape == [65]


@pytest.mark.parametrize("name,width", [("ragged_229", 229), ("ragged_192", 192)])
def test_2398_ragged_extent_gives_a_valid_predicated_layout(infer, name, width):
    for model in MODELS:
        r = infer(name, model)
        frag = r.buffers["frag"]
        assert frag.input_shape == [1, width] and frag.replicate_size == 1
        assert frag.thread_range == (0, T128) and int(np.prod(frag.output_shape)) == 2
        info = r.loop_info[f"i,j[1x{width}]"]
        assert info.padding_guard                          # 256 cells for `width` elements
        assert info.layout.input_shape == [1, width]


def test_1729_broadcast_read_falls_back_to_full_replication():
    """2 x 2560 over 256 threads: the occurrence-indexed replication wraps around the threads, so the
    read-only fragment is fully replicated instead of collapsing the loop onto 2 threads."""
    import importlib
    func = importlib.import_module("cases.broadcast_read").VARIANTS["issue1729_2x2560_t256"]()
    r = tl.infer_layouts(func, cost_model="io-aware")
    assert r.buffers["s_frag"].is_equal(tl.fully_replicated([2], 256))
    assert r.loops["i,j[2x2560]"].replicate_size == 1
    K.check_result(r, 256)


@pytest.mark.parametrize("name,buf,holders", [("row_scale", "r", 32), ("column_broadcast", "c", 4)])
def test_broadcast_read_is_held_by_exactly_the_threads_that_read_it(infer, name, buf, holders):
    """No wrap: the broadcast fragment is partially replicated, each element on the threads running the
    iterations that read it (not fully replicated, which would spill)."""
    r = infer(name, "io-aware")
    frag = r.buffers[buf]
    assert frag.replicate_size == holders
    loop = next(iter(r.loops.values()))
    runs = np.asarray(loop.thread_table())[..., 0]               # (m, n)
    readers = [set(runs[:, k].tolist()) if buf == "c" else set(runs[k].tolist()) for k in range(runs.shape[
        1 if buf == "c" else 0])]
    holds = np.asarray(frag.thread_table())
    for k, who in enumerate(readers):
        assert set(holds[k].tolist()) == who


# --------------------------------------------------------------------------- conflicts

def test_ownership_conflict_names_the_buffer_both_ops_and_both_layouts(infer):
    func = K.pinned_pair(T128)
    px = tl.Fragment([64, 64], lambda i, j: i * 2 + j // 32, lambda i, j: j % 32)
    py = tl.Fragment([64, 64], lambda i, j: j * 2 + i // 32, lambda i, j: i % 32)
    with pytest.raises(LayoutConflictError) as err:
        tl.infer_layouts(annotate_layouts(func, {"x": px, "y": py}), conflicts="strict")
    text = str(err.value)
    assert text.startswith("buffer x:")
    assert "parallel i,j[64x64] (op #1)" in text and "derived from y" in text and "pinned" in text
    assert "_i * 2 + _j // 32" in text and "_j * 2 + _i // 32" in text
    assert "does not hold the element of x" in text


def test_reduction_into_a_pinned_superset_of_holders_is_accepted():
    """Every holder of a source row must end with its result; extra holders (a fully replicated pin) are fine."""
    pin = tl.fully_replicated([64], T128)
    result = tl.infer_layouts(annotate_layouts(K.row_max_then_subtract(64, 128, T128), {"row_max": pin}))
    assert result.buffers["row_max"].is_equal(pin)


def test_reduction_conflict_names_the_buffer_both_parties_and_both_layouts():
    """A pin holding each row in fewer threads than hold the source row cannot receive the reduction."""
    rows = tl.Fragment([64, 128], lambda i, j: i % 4 * 32 + j // 4)           # x: a row spread over 32 threads
    pin = tl.Fragment([64], lambda i: i, lambda i: [0])                         # row_max: each row in one thread
    func = annotate_layouts(K.row_max_then_subtract(64, 128, T128), {"x": rows, "row_max": pin})
    with pytest.raises(tl.LayoutError) as err:
        tl.infer_layouts(func)
    text = str(err.value)
    assert "buffer row_max" in text and "max row_max[0:64] <- x[0:64, 0:128] axes=[1] (op #1)" in text
    assert "pinned layout" in text and "replicate: 32" in text and "forward_thread: _i," in text


def test_two_different_pins_of_one_buffer_conflict_before_inference():
    """A TIRx ``layout=`` and an annotation that disagree: refused, naming the buffer and both layouts."""
    other = tl.Fragment([8, 16], lambda i, j: j % 8, lambda i, j: i * 2 + j // 8)
    with pytest.raises(LayoutConflictError) as err:
        tl.infer_layouts(annotate_layouts(K.tirx_pinned(), {"frag": other}))
    text = str(err.value)
    assert "'frag'" in text and "pinned twice" in text and "_j % 8" in text
