"""Loop vectorize: widths follow the shared width rule and hardware limit, guards stay correct, and the
vector lanes in TVM's device code match every case's VECTOR_ANCHOR under the io-aware model."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint.lanes import lowered_lanes, vector_lanes  # noqa: E402
from maint.run import discover  # noqa: E402
from tilelayout.passes.hardware import max_vector_load_bits  # noqa: E402
from tilelayout.passes.lowering.loop_vectorize import VECTOR_WIDTH_KEY, LoopVectorize, vectorize_function  # noqa: E402
from tilelayout.passes.lowering.pipeline import lower, lower_func  # noqa: E402

SM100 = tvm.target.Target({"kind": "cuda", "arch": "sm_100"})


@T.prim_func
def global_copy(A: T.Buffer((64, 256), "float32"), B: T.Buffer((64, 256), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    Tx.copy(B[0:64, 0:256], A[0:64, 0:256])


@T.prim_func
def slot_loops(A: T.Buffer((128, 4), "float32"), B: T.Buffer((128,), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    for s in T.serial(4, annotations={"tilelayout.slot_loop": "store_invariant"}):
        B[tx] = A[tx, s]
    for s in T.serial(4, annotations={"tilelayout.slot_loop": "broadcast_load"}):
        A[tx, s] = B[tx]
    for s in T.serial(4, annotations={"tilelayout.slot_loop": "guard_varies"}):
        if s < 3:
            A[tx, s] = T.float32(0)
    for s in T.serial(4, annotations={"tilelayout.slot_loop": "guard_invariant"}):
        if tx < 64:
            A[tx, s] = T.float32(1)


def _widths(func) -> dict:
    out = {}

    def on_for(f):
        if VECTOR_WIDTH_KEY in f.annotations:
            key = str(f.annotations.get("tilelayout.slot_loop", "?"))
            out.setdefault(key, []).append(int(f.annotations[VECTOR_WIDTH_KEY]))

    tvm_ffi.structural_walk(func.body, (tirx.For, on_for))
    return out


def _case(name):
    return importlib.import_module(f"cases.{name}")


def _anchored():
    from maint.lowered_checks import anchor_table
    out = []
    for name in discover(ROOT / "cases"):
        for variant in sorted(getattr(_case(name), "VECTOR_ANCHOR", {})):
            for model in ("register-count", "io-aware"):
                anchor = anchor_table(_case(name), variant, model)
                if anchor:
                    out.append(pytest.param(name, variant, model, anchor, id=f"{name}/{variant}/{model}"))
    return out


@pytest.mark.parametrize("name,variant,model,anchor", _anchored())
def test_device_code_lanes_match_the_vector_anchor_and_the_scored_width(name, variant, model, anchor):
    from maint.lowered_checks import scored_lanes
    lanes = lowered_lanes(_case(name).VARIANTS[variant](), cost_model=model)
    assert {k: lanes.get(k) for k in anchor} == anchor
    scored = scored_lanes(_case(name).VARIANTS[variant](), model)
    assert {k: scored[k] for k in anchor if k in scored} == {k: lanes[k] for k in anchor if k in scored}


@pytest.mark.parametrize("name,variant,width", [("elementwise_copy", "fp16_128x128_t128", 8),
                                                ("elementwise_copy", "fp32_64x256_t256", 4),
                                                ("fp8_copy", "128x256_t128", 16)])
def test_copy_width_is_one_128_bit_vector(name, variant, width):
    widths = _widths(lower_func(_case(name).VARIANTS[variant]()))
    assert widths == {"v0,v1[%s]" % "x".join(str(int(s)) for s in _case(name).VARIANTS[variant]().params[0].shape):
                      [width, width]}


def test_global_only_copies_use_256_bits_from_sm100():
    assert max_vector_load_bits(SM100, global_only=True) == 256
    assert _widths(lower_func(global_copy, SM100)) == {"v0,v1[64x256]": [8]}
    assert _widths(lower_func(global_copy)) == {"v0,v1[64x256]": [4]}
    assert lowered_lanes(global_copy, SM100) == {"A": 8, "B": 8}
    assert lowered_lanes(global_copy) == {"A": 4, "B": 4}


def test_width_rules_on_hand_written_slot_loops():
    out = vectorize_function(slot_loops)
    assert _widths(out) == {"store_invariant": [1],    # a store that does not move with the slot stays scalar
                            "broadcast_load": [4],     # an invariant load is broadcast
                            "guard_varies": [1],       # a guard that changes inside a vector forbids it
                            "guard_invariant": [4]}    # an invariant guard is hoisted
    text = out.script()
    assert "if tx < 64:\n        for s_v in T.vectorized(4" in text


def test_guards_of_partitioned_loops():
    text = lower_func(_case("mixed_extents").VARIANTS["read_100_to_256_t128"]()).script()
    assert "if tx < 50:" in text and "T.vectorized(2" in text
    padded = _widths(lower_func(_case("ragged_extent").VARIANTS["loop_1x229_t128"]()))
    assert padded == {"i,j[1x229]": [1], "v0[229]": [1]}     # the copy drops the unit dim


def test_pass_object_runs_alone():
    from tilelayout.passes.inference.layout_inference import infer_layouts
    from tilelayout.passes.lowering.loop_partition import partition_function
    from tilelayout.passes.lowering.lower_tile_ops import lower_tile_ops
    func = partition_function(lower_tile_ops(infer_layouts(_case("elementwise_copy").VARIANTS["fp16_128x128_t128"]()).func))
    out = LoopVectorize()(tvm.IRModule({"main": func}))["main"]
    assert "T.vectorized(8" in out.script()


def test_lanes_of_a_scalar_kernel():
    lanes = vector_lanes(lower(_case("ragged_extent").VARIANTS["copy_1x229_t128"]()))
    assert lanes == {"X": 1, "Y": 1}


@pytest.mark.parametrize("index,width", [("j", 8), ("0", 8), ("j // 2", 2), ("j // 8", 8), ("j % 4 * 2", 1),
                                         ("j // 4 * 4 + j % 4", 8), ("(j + 1) // 2", 1)])
def test_register_loads_keep_a_width_where_each_group_reads_one_register_or_consecutive_ones(index, width):
    """The width rule on a register array read (``f[j] = p[index]`` over 16 lanes of float16): the widest power of
    two at which, enumerated over the whole loop, every aligned group of lanes reads a single register or
    consecutive aligned ones (a gather would need a vector of register indices; see loop_plan)."""
    import numpy as np
    from tilelayout.evaluate import evaluate
    from tilelayout.exprparse import parse_expr
    from tilelayout.passes.inference.loop_plan import plan_vector_width
    from tilelayout.passes.lowering.loop_vectorize import _Buf
    j = tirx.Var("j", "int32")
    expr = parse_expr(index, {"j": j})
    reads = [(_Buf("p", 16, [16], "local"), [expr], False), (_Buf("f", 16, [16], "local"), [j], True)]
    got = plan_vector_width([j], [16], reads, 128)
    assert got == width
    values = np.broadcast_to(evaluate(expr, {j: np.arange(16, dtype=np.int64)}), (16,))

    def fits(w):
        groups = values.reshape(-1, w)
        same = (groups == groups[:, :1]).all()
        run = (np.diff(groups, axis=1) == 1).all() and (groups[:, 0] % w == 0).all()
        return same or run
    assert fits(got) and (got == 8 or not fits(2 * got))     # 8: float16's 128-bit cap


def _lane_kernel(dtype: str, lanes: int, expr: str, n: int = 16):
    """A kernel storing ``expr`` (over ``a[o * lanes + s]``) in a ``lanes``-wide vector loop."""
    return tvm.script.from_source(f'''
@T.prim_func
def main(A: T.Buffer((512,), "{dtype}"), B: T.Buffer((512,), "{dtype}")):
    T.func_attr({{"target": T.target({{"kind": "cuda", "arch": "sm_90"}})}})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    a = T.alloc_local(({n},), "{dtype}")
    b = T.alloc_local(({n},), "{dtype}")
    for s in T.serial({n}):
        a[s] = A[tx * {n} + s]
    for o in T.serial({n // lanes}):
        for s in T.vectorized({lanes}):
            b[o * {lanes} + s] = {expr.format(x=f"a[o * {lanes} + s]")}
    for s in T.serial({n}):
        B[tx * {n} + s] = b[s]
''')


#: (dtype, stored value): the operations apache-tvm 0.27's CUDA generator got wrong at 4 or 8 lanes
LANE_LIMITED = [
    ("int8", 'T.shift_right({x}, T.int8(4))'), ("int8", 'T.shift_left({x}, T.Cast("int8", (s + tx) % 2 * 4))'),
    ("uint8", 'T.bitwise_and({x}, T.uint8(15))'), ("int32", 'T.bitwise_xor({x}, T.int32(6))'),
    ("int8", '{x} * T.int8(3)'), ("int8", 'T.max({x}, T.int8(1))'), ("int16", 'T.min({x}, T.int16(1))'),
    ("float16", 'T.Select({x} > T.float16(0), {x}, T.float16(0))'),
    ("float16", 'T.Cast("float16", T.Cast("float8_e4m3fn", {x}))'),
    ("int8", 'T.Cast("int8", s + o * 4 + tx)'), ("float32", '{x} * T.float32(3)'), ("float32", 'T.max({x}, T.float32(0))'),
]


@pytest.mark.parametrize("dtype,expr", LANE_LIMITED)
def test_value_lane_cap_names_the_limit_of_every_measured_operation(dtype, expr):
    from tilelayout.passes.inference.loop_plan import (FLOAT8_CONVERSION_LANES, INTEGER_BITWISE_LANES,
                                                       NARROW_ARITHMETIC_LANES, value_lane_cap)
    func = _lane_kernel(dtype, 2, expr)
    want = INTEGER_BITWISE_LANES if "shift" in expr or "bitwise" in expr or "{x}" not in expr else \
        FLOAT8_CONVERSION_LANES if "float8" in expr else NARROW_ARITHMETIC_LANES
    assert value_lane_cap(func.body) == want


def test_value_lane_cap_ignores_addresses_and_plain_moves():
    from tilelayout.passes.inference.loop_plan import value_lane_cap
    # index arithmetic (// and % in the load and store indices) is per lane scalar; a cast of a load, fp16 adds
    assert value_lane_cap(_lane_kernel("float16", 8, '{x} + {x}').body) is None
    assert value_lane_cap(_lane_kernel("float16", 8, 'T.Cast("float16", T.Cast("float32", {x}))').body) is None


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("dtype,expr", LANE_LIMITED)
def test_every_lane_limited_operation_compiles_at_its_cap(dtype, expr):
    """At the width ``value_lane_cap`` allows, TVM builds the kernel and nvcc compiles it to PTX."""
    from tilelayout.passes.inference.loop_plan import value_lane_cap
    from tilelayout.passes.lowering.pipeline import compile_ptx
    cap = value_lane_cap(_lane_kernel(dtype, 2, expr).body)
    func = _lane_kernel(dtype, cap, expr)
    source = tvm.compile(func, target=func.attrs["target"]).mod.imports[0].inspect_source("cuda")
    compile_ptx(source, func.attrs["target"])


def test_a_global_float32_multiply_on_sm100_keeps_four_lanes():
    """Pure global statements get 256-bit vectors from sm_100 on, and apache-tvm 0.27 mis-emits an 8-lane float32
    multiply (nvcc: "too many arguments in function call"); a plain copy keeps its 8 lanes."""
    widths = {}
    for expr in ("A[i, j] * T.float32(2.0)", "A[i, j]"):
        func = tvm.script.from_source(f'''
@T.prim_func
def main(A: T.Buffer((64, 256), "float32"), B: T.Buffer((64, 256), "float32")):
    T.func_attr({{"target": T.target({{"kind": "cuda", "arch": "sm_100"}})}})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    for i in T.parallel(64):
        for j in T.parallel(256):
            B[i, j] = {expr}
''')
        lowered = lower(func)
        found = []
        from tilelayout.passes.ir_utils import walk
        walk(lowered[list(lowered.functions)[0]].body,
             [(tirx.For, lambda n: found.append(int(n.extent)) if n.kind == tirx.ForKind.VECTORIZED else None)])
        widths[expr] = max(found)
    assert widths == {"A[i, j] * T.float32(2.0)": 4, "A[i, j]": 8}
