"""Loop partition: every (slot, thread) cell the partitioned loop runs is exactly one iteration (and replica),
checked by exact numpy enumeration; guards, fragment localisation and the errors for bad layouts."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tilelayout as tl  # noqa: E402
from conftest import kernel_warnings, parse_main  # noqa: E402
from tilelayout import Fragment  # noqa: E402
from tilelayout.annotate import (LOOP_LAYOUT_KEY, annotate_layouts, annotate_loop, encode_layout,  # noqa: E402
                                 parallel_nests)
from tilelayout.evaluate import evaluate  # noqa: E402
from tilelayout.layout import placeholder as P  # noqa: E402
from tilelayout.passes.inference.layout_inference import infer_layouts  # noqa: E402
from tilelayout.passes.lowering.loop_partition import (PARTITIONED_KEY, LoopPartition, LoweringError,  # noqa: E402
                                              partition_function, per_thread_cells)
from tilelayout.passes.lowering.lower_tile_ops import lower_tile_ops  # noqa: E402

CASES = ["elementwise_copy", "transposed_store", "broadcast_read", "mixed_extents", "ragged_extent",
         "reduce_broadcast", "two_index_read"]


def _cells(layout: Fragment, threads: int):
    """Enumerate the partitioned loop: valid (coords..., rep) per cell and the thread that runs it."""
    tx = tirx.Var("tx", "int32")
    svars, slots, coords, guards, _ = per_thread_cells(layout, tx, threads, "test")
    grids = np.meshgrid(*[np.arange(s) for s in slots], np.arange(threads), indexing="ij")
    env = {v: g for v, g in zip(svars + [tx], grids)}
    shape = grids[0].shape
    ok = np.ones(shape, dtype=bool)
    for g in guards:
        ok &= np.broadcast_to(evaluate(g, env), shape).astype(bool)
    vals = [np.broadcast_to(evaluate(c, env), shape) for c in coords]
    return [v[ok] for v in vals], grids[-1][ok]


def _loop_layouts():
    out = []
    for name in CASES:
        module = importlib.import_module(f"cases.{name}")
        for variant, build in module.VARIANTS.items():
            with kernel_warnings():      # golden kernels warn by design; only their loop layouts are used here
                res = infer_layouts(build(), cost_model="register-count")
            for index, decision in sorted(res.op_loops.items()):
                out.append(pytest.param(decision.layout, res.graph.thread_extent, id=f"{name}/{variant}/op{index}"))
    return out


@pytest.mark.parametrize("layout,threads", _loop_layouts())
def test_partition_runs_every_iteration_once_on_its_thread(layout, threads):
    vals, runner = _cells(layout, threads)
    shape = [int(s) for s in layout.input_shape]
    reps = layout.replicate_size
    flat = np.ravel_multi_index([v.astype(np.int64) for v in vals[:-1]], shape) * reps + vals[-1]
    counts = np.bincount(flat, minlength=int(np.prod(shape)) * reps)
    assert counts.size == int(np.prod(shape)) * reps, "a cell maps outside the iteration space"
    assert (counts == 1).all(), f"iterations dropped ({int((counts == 0).sum())}) or repeated ({int((counts > 1).sum())})"
    # the thread running each cell is the one the layout assigns (independent table)
    lo = (layout.thread_range or (0, threads))[0]
    expected = layout.thread_table()[tuple(v.astype(np.int64) for v in vals[:-1]) + (vals[-1].astype(np.int64),)] + lo
    np.testing.assert_array_equal(runner, expected)


def _lowered(module_name, variant, model="register-count"):
    module = importlib.import_module(f"cases.{module_name}")
    return lower_tile_ops(infer_layouts(module.VARIANTS[variant](), cost_model=model).func)


def _script(func) -> str:
    return "\n".join(l for l in func.script().splitlines() if "func_attr" not in l)


def _kinds(func) -> list:
    kinds = []
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda f: kinds.append(int(f.kind))))
    return kinds


def test_partition_output_has_no_parallel_loops_and_local_fragments():
    func = partition_function(_lowered("transposed_store", "fp32_128x128_t128"))
    assert int(tirx.ForKind.PARALLEL) not in _kinds(func)
    text = _script(func)
    assert "local.fragment" not in text
    assert "frag = T.alloc_local((128,))" in text                # output_shape of the 128x128 / 128 fragment
    assert tirx.analysis.verify_well_formed(func, assert_mode=False)


def test_pass_object_is_printable_and_runs_alone():
    mod = tvm.IRModule({"main": _lowered("elementwise_copy", "fp16_128x128_t128")})
    out = LoopPartition()(mod)
    text = out["main"].script()
    assert PARTITIONED_KEY in text and "T.parallel" not in text


def test_thread_guard_for_a_loop_smaller_than_the_block():
    text = _script(partition_function(_lowered("mixed_extents", "read_100_to_256_t128")))
    assert "if tx < 50:" in text               # the 100-iteration loop runs on 50 threads x 2 slots


def test_padding_guard_for_a_ragged_extent():
    text = _script(partition_function(_lowered("ragged_extent", "loop_1x229_t128")))
    assert "s * 128 + tx < 229" in text


def test_replica_guard_only_on_memory_stores():
    text = _script(partition_function(_lowered("broadcast_read", "rows4_cols1024_t128")))
    assert "if tx // 4 == 0:" in text          # 32 replicas: only replica 0 writes Out


# ------------------------------------------------------------------------------------ bad layouts

def _retag_loop(func, key_prefix: str, layout: Fragment, raw: bool = False):
    """Replace the layout annotation of the first parallel nest whose key starts with ``key_prefix``
    (``raw``: write the annotation directly, bypassing annotate_loop's own checks)."""
    target = next(loop for key, loop in parallel_nests(func) if key.startswith(key_prefix))

    def on_for(loop, mutator):
        if loop.same_as(target):
            if raw:
                ann = {str(k): v for k, v in loop.annotations.items()}
                ann[LOOP_LAYOUT_KEY] = encode_layout(layout)
                return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, None, ann)
            return annotate_loop(loop, layout)
        return mutator.default_mutate(loop)

    return func.with_body(tvm_ffi.structural_mutate(func.body, [(tirx.For, on_for)]))


def test_non_invertible_loop_layout_is_refused_naming_the_loop():
    func = _lowered("transposed_store", "fp32_128x128_t128")
    bad = Fragment.from_exprs([128, 128], P(1), [tirx.const(0, "int32")]).bind_thread_range(0, 128)  # 128 per register
    with pytest.raises(LoweringError, match=r"loop i,j\[128x128\]: cannot partition"):
        partition_function(_retag_loop(func, "i,j", bad))


def test_loop_layout_that_does_not_cover_the_loop_is_refused():
    func = _lowered("transposed_store", "fp32_128x128_t128")
    small = Fragment.from_exprs([64, 128], P(1) % 128, [P(0)]).bind_thread_range(0, 128)
    with pytest.raises(LoweringError, match=r"loop i,j\[128x128\]: its layout covers \[64, 128\]"):
        partition_function(_retag_loop(func, "i,j", small, raw=True))


def test_loop_layout_whose_threads_do_not_hold_the_fragment_is_refused():
    func = _lowered("transposed_store", "fp32_128x128_t128")
    # valid and bijective, but thread (i) instead of the fragment's owner
    wrong = Fragment.from_exprs([128, 128], P(0), [P(1)]).bind_thread_range(0, 128)
    with pytest.raises(LoweringError, match=r"buffer frag: loop i,j\[128x128\].*does not hold"):
        partition_function(_retag_loop(func, "i,j", wrong))


def test_thread_extent_mismatch_with_a_pinned_layout_is_refused():
    func = _lowered("elementwise_copy", "fp32_64x256_t256")
    too_wide = Fragment.from_exprs([64, 256], P(0) % 4 * 64 + P(1) // 4, [P(0) // 4 * 4 + P(1) % 4]) \
        .bind_thread_range(0, 512)
    with pytest.raises(LoweringError, match=r"fragment frag: thread-extent mismatch.*512.*256 threads"):
        partition_function(annotate_layouts(func, {"frag": too_wide}))


def test_fragment_without_a_layout_is_refused():
    kernel = parse_main('A: T.Buffer((128,), "float32")', threads=128, name="kernel", body='''
    f = T.alloc_buffer((128,), "float32", scope="local.fragment")
    for i in T.parallel(128):
        f[i] = A[i]
''')

    with pytest.raises(LoweringError, match="fragment f: no layout annotation"):
        partition_function(kernel)


def test_shared_tiles_with_a_layout_are_stored_at_their_physical_address():
    func = partition_function(_lowered("gemm_tile", "m64n64k64_t128"))
    text = _script(func)
    # swizzled: one flat array of 64 x 64, aligned to 1024 bytes (where wgmma's swizzle patterns start)
    assert 'A_s = T.alloc_shared((4096,), "float16", align=1024)' in text


def test_a_shared_layout_mapping_two_elements_to_one_address_is_refused():
    from tilelayout import Layout
    with pytest.warns(tl.TileLayoutResourceWarning, match=r"static shared buffers .* 65536 bytes"):
        func = _lowered("shared_staging", "fp32_128x128_t128")
    colliding = Layout([128, 128], lambda i, j: [i * 64 + j % 64])
    with pytest.raises(LoweringError, match="shared buffer smem: layout .* maps two elements to one address"):
        partition_function(annotate_layouts(func, {"smem": colliding}))


# ------------------------------------------------------------------------------------ views of shared tiles

_shared_view = parse_main('A: T.Buffer((64, 64), "float16"), B: T.Buffer((64, 64), "float16")',
                          threads=128, name="_shared_view", body='''
    S = T.alloc_buffer((64, 64), "float16", scope="shared")
    flat = T.decl_buffer((4096,), "float16", data=S.data, scope="shared")
    Tx.copy(S[0:64, 0:64], A[0:64, 0:64])
    for i in T.parallel(4096):
        flat[i] = flat[i] * T.float16(2)
    Tx.copy(B[0:64, 0:64], S[0:64, 0:64])
''')


def test_a_view_of_a_shared_tile_is_refused_by_name_before_any_build():
    from tilelayout.passes.lowering.pipeline import build_cpu, cuda_source, lower
    for step in (lower, cuda_source, build_cpu):
        with pytest.raises(LoweringError, match=r"buffer flat: a view .*of the shared tile S is not supported"):
            step(_shared_view)
