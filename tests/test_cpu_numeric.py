"""CPU execution: every case variant lowered under both cost models computes what the program means; the
layout-free reference agrees with numpy; a deliberately wrong layout is caught numerically; warp shuffles and
barriers inside loops are emulated faithfully."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conftest import KERNEL_WARNINGS, case_variant_params, kernel_warnings  # noqa: E402
from tilelayout import Fragment  # noqa: E402
from tilelayout.annotate import annotate_loop, parallel_nests  # noqa: E402
from tilelayout.layout import placeholder as P  # noqa: E402
from tilelayout.passes.inference.layout_inference import infer_layouts  # noqa: E402
from tilelayout.passes.lowering.pipeline import (build_cpu, build_reference_cpu, check_case, check_numeric,  # noqa: E402
                                        random_inputs, reference_outputs)


from tilelayout.passes.lowering.loop_partition import LoweringError  # noqa: E402


def _case(name):
    return importlib.import_module(f"cases.{name}")


@pytest.mark.parametrize("name,variant", case_variant_params(AssertionError))
def test_every_case_variant_matches_its_reference(name, variant):
    """``maint/run.py --numeric`` on one variant: under both models (and, for a dynamic-shape variant, at each of
    its EXTENTS: tile multiples, partial tiles, under one tile) the lowered kernel matches the case's REFERENCE or
    the interpreter, and the interpreter agrees with the TVM-compiled sequential semantics and the REFERENCE."""
    from maint.lowered_checks import numeric_variant
    # golden kernels warn by design (resources, conversions, an sm_90 target without 'a'); numbers are checked
    with kernel_warnings(*KERNEL_WARNINGS, "TargetFeatureWarning"):
        lines, total, passed = numeric_variant(_case(name), name, variant, ["register-count", "io-aware"])
    assert passed == total, "\n".join(lines)


# ------------------------------------------------------------------------------------ the reference itself

NUMPY = {
    ("elementwise_copy", "fp16_128x128_t128"): lambda d: {"B": d["A"]},
    ("transposed_store", "fp32_128x128_t128"): lambda d: {"B": d["A"].T},
    ("reduce_broadcast", "64x128_t128"): lambda d: {"B": d["A"] - d["A"].max(1, keepdims=True)},
    ("broadcast_read", "rows4_cols1024_t128"): lambda d: {"Out": np.repeat(d["S"][:, None] * 2, 1024, 1)},
    ("two_index_read", "adjacent_rows_64x128_t128"): lambda d: {"Out": d["A"] * (d["V"][1:] - d["V"][:-1])[:, None]},
    ("mixed_extents", "read_100_to_256_t128"): lambda d: {"C": np.where(np.arange(256) < 100, 6.0, 1.0)},
    ("offset_region_copy", "fp32_tile32x128_t128"): lambda d: {"B": d["A"]},
}


@pytest.mark.parametrize("key", list(NUMPY), ids=["/".join(k) for k in NUMPY])
def test_sequential_reference_agrees_with_numpy(key):
    func = _case(key[0]).VARIANTS[key[1]]()
    inputs = random_inputs(func, seed=3)
    names = list(inputs)
    arrays = [inputs[n].copy() for n in names]
    build_reference_cpu(func)(*arrays)
    expected = dict(inputs)
    expected.update(NUMPY[key]({n: inputs[n].copy() for n in names}))
    for n, got in zip(names, arrays):
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(expected[n], dtype=np.float64), rtol=1e-6,
                                   err_msg=n)


@pytest.mark.parametrize("key", list(NUMPY), ids=["/".join(k) for k in NUMPY])
def test_numpy_interpreter_agrees_with_hand_written_numpy(key):
    from tilelayout.reference import run_reference
    func = _case(key[0]).VARIANTS[key[1]]()
    inputs = random_inputs(func, seed=3)
    got = run_reference(func, {n: a.copy() for n, a in inputs.items()}).outputs
    expected = dict(inputs)
    expected.update(NUMPY[key]({n: a.copy() for n, a in inputs.items()}))
    for n in inputs:
        np.testing.assert_allclose(got[n].astype(np.float64), np.asarray(expected[n], dtype=np.float64), rtol=1e-6,
                                   err_msg=n)


# ------------------------------------------------------------------------------------ catching wrong layouts

def _tampered_transpose():
    """transposed_store with its loop re-annotated: valid and bijective, but the thread running (i, j) is i,
    which does not hold frag[i, j] -- every thread reads registers it never loaded."""
    res = infer_layouts(_case("transposed_store").VARIANTS["fp32_128x128_t128"]())
    func = res.func
    (key, target), = [(k, l) for k, l in parallel_nests(func) if k.startswith("i,j")]
    wrong = Fragment.from_exprs([128, 128], P(0), [P(1)]).bind_thread_range(0, 128)

    def on_for(loop, mutator):
        return annotate_loop(loop, wrong) if loop.same_as(target) else mutator.default_mutate(loop)

    return res.func.with_body(tvm_ffi.structural_mutate(func.body, [(tirx.For, on_for)]))


def test_a_deliberately_wrong_layout_is_caught_by_the_cpu_check():
    original = _case("transposed_store").VARIANTS["fp32_128x128_t128"]()
    good = check_numeric(original)
    assert good.ok, good.message
    kernel = build_cpu(_tampered_transpose(), infer=False, verify=False)     # skip the partitioner's own check
    bad = check_numeric(original, kernel=kernel)
    assert not bad.ok
    assert bad.message.startswith("B: ") and "elements differ" in bad.message


def test_the_partitioner_refuses_the_same_layout_by_itself():
    from tilelayout.passes.lowering.loop_partition import LoweringError
    with pytest.raises(LoweringError, match="buffer frag"):
        build_cpu(_tampered_transpose(), infer=False)


# ------------------------------------------------------------------------------------ case contract

def test_declared_reference_and_tolerance_are_used():
    module = _case("elementwise_copy")
    fake = SimpleNamespace(VARIANTS=module.VARIANTS,
                           REFERENCE={"fp32_64x256_t256": lambda d: {"B": d["A"]}},
                           TOLERANCE={"fp32_64x256_t256": (0.0, 0.0)})
    assert check_case(fake, "fp32_64x256_t256").ok
    fake.REFERENCE = {"fp32_64x256_t256": lambda d: {"B": d["A"] + 1}}
    res = check_case(fake, "fp32_64x256_t256")
    assert not res.ok and "B: 16384 of 16384 elements differ" in res.message


# ------------------------------------------------------------------------------------ thread serialisation

@T.prim_func
def shuffle_kernel(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 64)
    v = T.alloc_buffer((2,), "float32", scope="local")
    for k in range(2):
        v[k] = A[tx] + T.float32(k)
    for k in range(2):
        v[k] = T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[k], 5, 32, 32) * T.float32(10) + v[k]
    B[tx] = v[0] + v[1]


@T.prim_func
def barrier_in_loop(A: T.Buffer((4, 64), "float32"), B: T.Buffer((64,), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 64)
    sm = T.alloc_buffer((64,), "float32", scope="shared")
    acc = T.alloc_buffer((1,), "float32", scope="local")
    acc[0] = T.float32(0)
    for k in range(4):
        sm[tx] = A[k, tx]
        T.tvm_storage_sync("shared")
        acc[0] = acc[0] + sm[63 - tx]
        T.tvm_storage_sync("shared")
    B[tx] = acc[0]


def _run_serialized(func, *arrays):
    from tilelayout.passes.lowering.pipeline import _cpu_compile
    from tilelayout.passes.lowering.serialize_threads import serialize_threads
    return _cpu_compile(serialize_threads(func), "main")(*arrays)


def test_warp_shuffle_is_emulated_per_lane():
    a = np.arange(64, dtype=np.float32)
    b = np.zeros(64, np.float32)
    _run_serialized(shuffle_kernel, a, b)
    partner = a[np.arange(64) ^ 5]
    np.testing.assert_array_equal(b, (partner * 10 + a) + ((partner + 1) * 10 + a + 1))


def test_barriers_inside_a_loop_split_the_phases():
    a = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    b = np.zeros(64, np.float32)
    _run_serialized(barrier_in_loop, a, b)
    np.testing.assert_allclose(b, a[:, ::-1].sum(0), rtol=1e-6)


def test_cpu_kernel_checks_its_arguments():
    kernel = build_cpu(_case("elementwise_copy").VARIANTS["fp32_64x256_t256"]())
    a = np.zeros((64, 256), np.float32)
    with pytest.raises(TypeError, match="takes 2 arrays"):
        kernel(a)
    with pytest.raises(ValueError, match="argument B must be float32"):
        kernel(a, np.zeros((64, 256), np.float16))
