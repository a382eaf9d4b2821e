"""The io-aware scorer's shortcuts agree with exact enumeration over the whole domain.

Two shortcuts: a global access's strides read off its linear index polynomial (instead of evaluating the
offset at every point), and segments counted once per kind of vector step of the separable
``thread part + step part`` address table (instead of over every (thread, step) cell).
"""
from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from tvm import tirx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tilelayout.passes.inference.cost_models.affine_address import (affine_address,  # noqa: E402
                                                                    affine_address_by_enumeration, linear_form)
from tilelayout.passes.inference.cost_models.statement_score import (count_segments,  # noqa: E402
                                                                     count_segments_split)
from tilelayout.passes.inference.frontend import build_op_graph  # noqa: E402
from tilelayout.passes.inference.loop_nest import nest_of  # noqa: E402


def _kernel_accesses():
    """(label, access, nest, graph) for every global access of every golden case and benchmark kernel."""
    out = []
    builders = {}
    for path in sorted((ROOT / "cases").glob("[!_]*.py")):
        mod = importlib.import_module(f"cases.{path.stem}")
        builders.update({f"{path.stem}/{v}": b for v, b in mod.VARIANTS.items()})
    from maint import bench_kernels
    builders.update(bench_kernels.KERNELS)
    for label, build in builders.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = build_op_graph(build())
        for op in graph.ops:
            try:
                nest = nest_of(op)
            except Exception:  # noqa: BLE001 - ops the model never scores (symbolic extents)
                continue
            for a in (nest.accesses if nest is not None else ()):
                if a.buffer.is_global:
                    out.append((label, a, nest, graph))
    return out


def test_symbolic_strides_equal_enumeration_on_every_kernel_access():
    accesses = _kernel_accesses()
    assert len(accesses) > 100
    for label, a, nest, graph in accesses:
        assert affine_address(a, nest, graph) == affine_address_by_enumeration(a, nest, graph), (label, a)


def _fake(indices, shape, extents, zeros=(), serial=()):
    loop_vars = [tirx.Var(f"v{k}", "int32") for k in range(len(extents))]
    idx = [f(*loop_vars, *zeros, *serial) for f in indices]
    op = SimpleNamespace(serial_loops=tuple(SimpleNamespace(var=v) for v in serial))
    nest = SimpleNamespace(loop_vars=loop_vars, extents=list(extents), op=op)
    graph = SimpleNamespace(block_vars={f"blockIdx.{k}": v for k, v in zip("xyz", zeros)})
    access = SimpleNamespace(buffer=SimpleNamespace(shape=list(shape)), indices=idx)
    return access, nest, graph


_BX, _K = tirx.Var("bx", "int32"), tirx.Var("k", "int32")
_CASES = [
    # linear: read symbolically
    ([lambda i, j: i, lambda i, j: j], [64, 128], [64, 128], True),
    ([lambda i, j: j, lambda i, j: i], [128, 64], [64, 128], True),
    ([lambda i, j: i * 2 + 3, lambda i, j: 7 - j], [200, 128], [64, 8], True),
    ([lambda i, j: i + j * 4], [4096], [4, 16], True),
    ([lambda i, j, bx: bx * 64 + i, lambda i, j, bx: j + bx * i], [1024, 128], [64, 128], True),
    ([lambda i, j, k: k * 8 + i, lambda i, j, k: j], [64, 32], [8, 32], True),
    ([lambda i, j: tirx.Cast("int64", i), lambda i, j: j], [64, 32], [64, 32], True),
    ([lambda i, j: i * j, lambda i, j: j], [64, 32], [1, 32], False),      # affine: i only takes 0
    ([lambda i: tirx.const(5, "int32")], [16], [1], True),
    # not a polynomial of degree 1: enumeration decides (affine on the domain, or not)
    ([lambda i, j: tirx.floordiv(i * 4 + j, 4), lambda i, j: j], [64, 4], [64, 4], False),
    ([lambda i, j: tirx.floormod(i, 64), lambda i, j: j], [64, 16], [64, 16], False),
    ([lambda i, j: tirx.floormod(i, 8), lambda i, j: j], [64, 16], [64, 16], False),
    ([lambda i, j: i * j, lambda i, j: j], [4096, 32], [64, 32], False),
    ([lambda i, j: tirx.Select(i < 4, i, j), lambda i, j: j], [64, 32], [8, 8], False),
]


@pytest.mark.parametrize("indices,shape,extents,linear", _CASES)
def test_symbolic_strides_equal_enumeration_on_hand_built_indices(indices, shape, extents, linear):
    nargs = indices[0].__code__.co_argcount
    zeros = (_BX,) if nargs == 3 and "bx" in indices[0].__code__.co_varnames else ()
    serial = (_K,) if nargs == 3 and not zeros else ()
    access, nest, graph = _fake(indices, shape, extents, zeros, serial)
    forms = [linear_form(i, nest.loop_vars, list(zeros) + list(serial)) for i in access.indices]
    assert all(f is not None for f in forms) == linear
    assert affine_address(access, nest, graph) == affine_address_by_enumeration(access, nest, graph)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_segment_counts_by_kind_of_step_equal_the_full_table(data):
    threads = data.draw(st.sampled_from([1, 8, 32, 40, 64, 96, 128]))
    steps = data.draw(st.integers(1, 40))
    vector = data.draw(st.sampled_from([1, 2, 4, 8]))
    elem_bytes = data.draw(st.sampled_from([1, 2, 4, 8]))
    warp = data.draw(st.sampled_from([32, 64]))
    strides = st.integers(-3, 300)
    t_stride, s_stride = data.draw(strides), data.draw(strides)
    by_thread = (np.arange(threads) * t_stride + data.draw(st.integers(0, 1000))) % 5000
    by_step = np.arange(steps) * s_stride + data.draw(st.integers(0, 1000))
    if data.draw(st.booleans()):
        by_thread = by_thread[np.random.default_rng(data.draw(st.integers(0, 99))).permutation(threads)]
    by_thread, by_step = by_thread.astype(np.int64), by_step.astype(np.int64)
    first = by_thread[:, None] + by_step[None, :]
    kind = data.draw(st.sampled_from(["none", "parts", "table"]))
    R = data.draw(st.sampled_from([2, 3, 4, 128]))
    a = (np.arange(threads) * data.draw(st.integers(0, 5))) % R
    b = (np.arange(steps) * data.draw(st.integers(0, 5))) % R
    table = (a[:, None] + b[None, :]) % R
    if kind == "table":
        table = (table + data.draw(st.integers(0, 1)) * (np.arange(threads)[:, None] * np.arange(steps)[None, :])) % R
    replica = {"none": None, "parts": (a.astype(np.int64), b.astype(np.int64), R), "table": table}[kind]
    active = np.ones_like(first, dtype=bool) if replica is None else table == 0
    expected = count_segments(first, vector, elem_bytes, active, warp, 128)
    assert count_segments_split(by_thread, by_step, vector, elem_bytes, replica, warp, 128) == expected


def _as_layout(modes):
    from tilelayout import cute
    if len(modes) == 1:
        return cute.Layout(modes[0][0], modes[0][1])
    return cute.Layout(tuple(e for e, _ in modes), tuple(d for _, d in modes))


def _modes_of(layout):
    from tilelayout import cute
    return [(int(e), int(d)) for e, d in zip(cute.flatten(layout.shape), cute.flatten(layout.stride))]


_MODES = st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 8, 16]), st.sampled_from([0, 1, 2, 3, 4, 8, 16, 32, 64, 128])),
                  min_size=1, max_size=5)


@settings(max_examples=500, deadline=None)
@given(a=_MODES, b=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([0, 1, 2, 4, 8, -1, -2])),
                           min_size=1, max_size=3))
def test_mode_list_composition_equals_layout_composition(a, b):
    from tilelayout import cute
    from tilelayout.cute.algebra import coalesce_modes, compose_modes
    # cute.composition follows C++ CuTe; the mode-list form keeps the stronger (pycute) divisibility check and
    # reads a left operand as ending at its size, so compare where both answer inside A's domain.
    try:
        expected = _modes_of(cute.composition(_as_layout(a), _as_layout(b)))
        fast = compose_modes(a, b)
    except cute.CuteError:
        return
    reach = sum((e - 1) * abs(d) for e, d in b)
    if reach < cute.size(_as_layout(a)):
        assert coalesce_modes(fast) == coalesce_modes(expected)
    assert coalesce_modes(expected) == _modes_of(cute.coalesce(_as_layout(expected)))


@settings(max_examples=500, deadline=None)
@given(a=_MODES)
def test_mode_list_right_inverse_equals_layout_right_inverse(a):
    from tilelayout import cute
    from tilelayout.cute.algebra import right_inverse_modes
    assert right_inverse_modes(a) == _modes_of(cute.right_inverse(_as_layout(a)))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_functional_dependence_check_equals_distinct_pairs(data):
    from tilelayout.passes.inference.fragment_rules import varies_within
    n = data.draw(st.integers(0, 300))
    keys = np.asarray(data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)), dtype=np.int64)
    if data.draw(st.booleans()):            # a function of the key, maybe perturbed at one entry
        values = (keys * data.draw(st.integers(0, 7))) % 11
        if n and data.draw(st.booleans()):
            values[data.draw(st.integers(0, n - 1))] += 1
    else:
        values = np.asarray(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), dtype=np.int64)
    pairs = {(int(k), int(v)) for k, v in zip(keys, values)}
    assert varies_within(keys, values) == (len({k for k, _ in pairs}) != len(pairs))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_step_kinds_name_each_distinct_key_once_with_its_count(data):
    """``_kinds`` (a dictionary pass below 97 steps, ``np.unique`` above) gives each distinct key's first step
    and how many steps share it, as ``np.unique`` does, in any order; empty keys included."""
    from tilelayout.passes.inference.cost_models.statement_score import _kinds
    size = data.draw(st.sampled_from([0, 1, 2, 7, 32, 96, 97, 200]))
    key = np.random.default_rng(data.draw(st.integers(0, 10 ** 6))).integers(
        0, data.draw(st.sampled_from([1, 3, 40, 10 ** 6])), size=size)
    first_of, counts = _kinds(key)
    _, want_first, want_counts = np.unique(key, return_index=True, return_counts=True)
    got = sorted(zip(first_of.tolist(), counts.tolist()))
    assert got == sorted(zip(want_first.tolist(), want_counts.tolist()))
    assert first_of.dtype == np.int64 and counts.dtype == np.int64
