"""The front end reads TVMScript TIRx kernels into op graphs: contents pinned exactly."""

import os
import subprocess
import sys

import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

import kernels_frontend as K
from tilelayout.errors import LayoutError
from tilelayout.passes.inference.frontend import (
    CopyOp, ElementwiseOp, FillOp, FrontendError, GemmOp, OpGraph, ParallelOp, ReduceOp,
    build_op_graph,
)


def bufs(graph):
    return [(b.name, b.scope, b.shape, b.dtype, b.bits) for b in graph.buffers]


def described(graph):
    return [op.describe() for op in graph.ops]


def names(buffers):
    return [b.name for b in buffers]


def same(a, b):
    return bool(tvm_ffi.structural_equal(a, b))


# ---------------------------------------------------------------------------------------------
# a row-max kernel (copy, reduce, parallel nest, copy back)

def test_row_max_graph_contents():
    g = build_op_graph(K.row_max)
    assert isinstance(g, OpGraph) and g.func is K.row_max
    assert g.thread_extent == 128 and g.thread_var.name == "tx"
    assert list(g.block_vars) == ["blockIdx.x"] and g.block_vars["blockIdx.x"].name == "bx"
    assert g.block_extents == {"blockIdx.x": 1}
    assert bufs(g) == [
        ("A", "global", [128, 128], "float16", 16),
        ("B", "global", [128, 128], "float16", 16),
        ("frag", "local.fragment", [128, 128], "float16", 16),
        ("mx", "local.fragment", [128], "float16", 16),
    ]
    assert g.buffers[0].var.same_as(K.row_max.params[0])
    assert [b.pinned_layout for b in g.buffers] == [None] * 4
    assert names(g.fragments()) == ["frag", "mx"]
    assert described(g) == [
        "copy frag[0:128, 0:128] <- A[0:128, 0:128] (op #0)",
        "max mx[0:128] <- frag[0:128, 0:128] axes=[1] (op #1)",
        "parallel i,j[128x128] (op #2)",
        "copy B[0:128, 0:128] <- frag[0:128, 0:128] (op #3)",
    ]
    assert [type(op) for op in g.ops] == [CopyOp, ReduceOp, ParallelOp, CopyOp]
    assert [op.kind for op in g.ops] == ["copy", "reduce", "parallel", "copy"]
    assert [op.index for op in g.ops] == [0, 1, 2, 3]
    assert [names(op.buffers()) for op in g.ops] == [["frag", "A"], ["mx", "frag"], ["frag", "mx"], ["B", "frag"]]
    assert g.users("frag") == [0, 1, 2, 3] and g.users(g.buffer("mx")) == [1, 2]
    assert g.users(K.row_max.params[1]) == [3]
    assert g.floating == [] and g.aliases == []

    copy = g.ops[0]
    assert copy.dst.buffer is g.buffer("frag") and copy.src.buffer is g.buffer("A")
    assert copy.dst.is_full and copy.src.is_full and not copy.is_async
    assert [int(o) for o in copy.src.offsets] == [0, 0] and copy.src.extents == [128, 128]

    red = g.ops[1]
    assert (red.reducer, red.axes, red.clear, red.accum) == ("max", [1], True, False)

    par = g.ops[2]
    i, j = par.loop_vars
    assert (i.name, j.name) == ("i", "j") and par.root.loop_var.same_as(i)
    assert par.extents == [128, 128] and par.mins == [0, 0] and par.key == "i,j[128x128]"
    assert [str(a) for a in par.accesses] == ["frag[i, j]:rw", "mx[i]:r"]
    frag_acc = par.accesses[0]
    assert frag_acc.buffer is g.buffer("frag") and frag_acc.is_read and frag_acc.is_write
    assert frag_acc.indices[0].same_as(i) and frag_acc.indices[1].same_as(j)
    assert par.inner_loops == [] and par.annotations == {} and par.serial_repeat == 1
    assert isinstance(par.body, tirx.BufferStore)
    assert [op.line for op in g.ops] == [16, 17, 18, 21]


def test_ops_carry_their_ir_nodes():
    g = build_op_graph(K.row_max)
    assert isinstance(g.ops[0].stmt, TilePrimitiveCall) and g.ops[0].stmt.op.name == "tirx.tile.copy"
    assert g.ops[2].stmt.same_as(g.ops[2].root) and isinstance(g.ops[2].root, tirx.For)


# ---------------------------------------------------------------------------------------------
# regions, scopes, op kinds

def test_region_offsets_keep_block_index():
    g = build_op_graph(K.block_offsets)
    bx, by = g.block_vars["blockIdx.x"], g.block_vars["blockIdx.y"]
    assert g.block_extents == {"blockIdx.x": 2, "blockIdx.y": 4} and g.thread_extent == 256
    assert described(g) == [
        "copy frag[0:64, 0:128] <- A[by * 64:by * 64 + 64, 0:128] (op #0)",
        "copy B[by * 64:by * 64 + 64, bx * 64:bx * 64 + 64] <- frag[0:64, 0:64] (op #1)",
    ]
    load, store = g.ops
    assert same(load.src.offsets[0], by * 64) and int(load.src.offsets[1]) == 0
    assert load.src.extents == [64, 128] and not load.src.is_full and load.dst.is_full
    assert same(store.dst.offsets[0], by * 64) and same(store.dst.offsets[1], bx * 64)
    assert store.dst.extents == [64, 64] and not store.src.is_full


def test_shared_staging_copies():
    g = build_op_graph(K.staging)
    assert [(b.name, b.is_global, b.is_shared, b.is_fragment, b.is_local) for b in g.buffers] == [
        ("A", True, False, False, False), ("B", True, False, False, False),
        ("smem", False, True, False, False), ("frag", False, False, True, False)]
    assert g.buffer("smem").scope == "shared.dyn" and g.block_vars == {}
    assert described(g) == [
        "copy smem[0:64, 0:64] <- A[0:64, 0:64] (op #0)",
        "copy frag[0:64, 0:64] <- smem[0:64, 0:64] (op #1)",
        "copy B[0:64, 0:64] <- frag[0:64, 0:64] (op #2)",
    ]
    assert all(r.is_full for op in g.ops for r in op.regions())
    assert g.users("smem") == [0, 1] and g.users("frag") == [1, 2]


def test_gemm_with_shared_operands_and_fragment_accumulator():
    g = build_op_graph(K.gemm)
    assert described(g) == [
        "fill acc[0:128, 0:128] = 0.0 (op #0)",
        "copy As[0:128, 0:64] <- A[0:128, 0:64] (op #1)",
        "copy Bs[0:128, 0:64] <- B[0:128, 0:64] (op #2)",
        "gemm acc[0:128, 0:128] <- As[0:128, 0:64] @ Bs[0:128, 0:64]^T + acc[0:128, 0:128] (op #3)",
        "copy C[0:128, 0:128] <- acc[0:128, 0:128] (op #4)",
    ]
    fill, gemm = g.ops[0], g.ops[3]
    assert isinstance(fill, FillOp) and float(fill.value.value) == 0.0
    assert isinstance(gemm, GemmOp)
    assert (gemm.c.buffer.name, gemm.a.buffer.name, gemm.b.buffer.name, gemm.bias.buffer.name) == (
        "acc", "As", "Bs", "acc")
    assert (gemm.transpose_a, gemm.transpose_b, gemm.clear, gemm.accumulate) == (False, True, False, True)
    assert float(gemm.alpha.value) == 1.0 and float(gemm.beta.value) == 1.0
    assert names(gemm.buffers()) == ["acc", "As", "Bs"]
    assert g.users("acc") == [0, 3, 4] and g.users("As") == [1, 3]
    assert [b.bits for b in gemm.buffers()] == [32, 16, 16]


def test_elementwise_tile_ops():
    g = build_op_graph(K.elementwise)
    assert described(g)[1:4] == [
        "exp g[0:64, 0:64] <- f[0:64, 0:64] (op #1)",
        "add f[0:64, 0:64] <- f[0:64, 0:64], g[0:64, 0:64] (op #2)",
        "mul g[0:64, 0:64] <- f[0:64, 0:64], 0.5 (op #3)",
    ]
    ew = g.ops[1:4]
    assert all(isinstance(op, ElementwiseOp) for op in ew)
    assert [(op.name, op.dst.buffer.name, names(s.buffer for s in op.srcs)) for op in ew] == [
        ("exp", "g", ["f"]), ("add", "f", ["f", "g"]), ("mul", "g", ["f"])]
    assert list(ew[0].params) == [None, None] and float(ew[2].params[0].value) == 0.5
    assert names(ew[1].buffers()) == ["f", "g"]


def test_reductions_normalise_axes_and_accum():
    g = build_op_graph(K.reductions)
    assert described(g)[1:3] == [
        "sum colsum[0:64] <- f[0:32, 0:64] axes=[0] accum (op #1)",
        "min rowmin[0:32, 0:1] <- f[0:32, 0:64] axes=[1] (op #2)",
    ]
    s, m = g.ops[1], g.ops[2]
    assert (s.reducer, s.axes, s.clear) == ("sum", [0], False)
    assert (m.reducer, m.axes, m.clear) == ("min", [1], True)


# ---------------------------------------------------------------------------------------------
# parallel nests

def test_one_fragment_read_at_two_indices_is_kept_separately():
    g = build_op_graph(K.two_indices)
    first, second = g.ops[1], g.ops[2]
    assert [str(a) for a in first.accesses] == ["A[i, j]:r", "s[0]:r", "s[1]:r", "a[i, j]:w"]
    assert [a.is_constant for a in first.accesses] == [False, True, True, False]
    assert [str(a) for a in second.accesses] == ["a[i, j * 2]:r", "a[i, j * 2 + 1]:r", "F[i, j]:w"]
    assert len(second.accesses_of(g.buffer("a"))) == 2
    assert names(first.buffers()) == ["A", "s", "a"] and names(second.buffers()) == ["a", "F"]
    assert (first.key, second.key) == ("i,j[64x32]", "i,j[64x16]")
    assert g.users("s") == [0, 1] and g.floating == []


def test_one_dimensional_nests_and_duplicate_keys():
    g = build_op_graph(K.one_dim)
    assert [(op.key, op.extents, [v.name for v in op.loop_vars]) for op in g.ops] == [
        ("i[229]", [229], ["i"]), ("i[229]#2", [229], ["i"])]
    assert [str(a) for a in g.ops[0].accesses] == ["A[i]:r", "f[i]:w"]
    g3 = build_op_graph(K.dup_keys)
    assert [op.key for op in g3.ops] == ["i[32]", "i[32]#2", "i[32]#3"]
    assert [str(a) for a in g3.ops[2].accesses] == ["f[i]:rw"]


def test_serial_loops_around_ops_give_repeat_counts():
    g = build_op_graph(K.serial_around)
    assert described(g) == [
        "fill acc[0:128, 0:64] = 0.0 (op #0)",
        "copy tile[0:128, 0:64] <- A[ko:ko + 1, 0:128, 0:64] (op #1)",
        "parallel i,j[128x64] (op #2)",
        "copy B[0:128, 0:64] <- acc[0:128, 0:64] (op #3)",
    ]
    assert [op.serial_repeat for op in g.ops] == [1, 8, 8, 1]
    assert [(l.var.name, l.kind, l.extent) for l in g.ops[2].serial_loops] == [
        ("ko", "serial", 4), ("kk", "unrolled", 2)]
    assert [str(a) for a in g.ops[2].accesses] == ["acc[i, j]:rw", "tile[i, j]:r"]


def test_inner_serial_loop_and_annotations_of_a_nest():
    g = build_op_graph(K.nest_with_inner)
    nest = g.ops[1]
    assert [str(a) for a in nest.accesses] == ["r[i]:rw", "f[i, k]:r"]
    assert [(l.var.name, l.kind, l.extent, l.min) for l in nest.inner_loops] == [("k", "serial", 8, 0)]
    assert list(nest.annotations) == ["tl.hint"] and int(nest.annotations["tl.hint"]) == 4
    assert g.ops[2].annotations == {}


def test_parallel_with_nonzero_min_and_views_alias_their_buffer():
    g = build_op_graph(K.pinned_and_views)
    nest = g.ops[0]
    assert (nest.mins, nest.extents, nest.key) == ([4], [120], "i[120]")
    assert [str(a) for a in nest.accesses] == ["A[i]:r", "flat[i]:w"]
    frag, pin, flat = g.buffer("frag"), g.buffer("pin"), g.buffer("flat")
    assert frag.pinned_layout is None and flat.pinned_layout is None
    assert same(pin.pinned_layout, K.PINNED)
    assert g.aliases == [[frag, flat]] and g.alias_group(flat) == [frag, flat]
    assert g.alias_group(pin) == [pin]
    assert g.users(frag) == [1] and g.users(flat) == [0]


def test_thread_binding_loops_decl_buffer_alias_and_symbolic_serial_loop():
    g = build_op_graph(K.thread_binding)
    assert g.thread_extent == 64 and g.thread_var.name == "tx"
    assert g.block_extents == {"blockIdx.x": 4}
    assert names(g.buffers) == ["A", "f", "g"]
    assert [names(grp) for grp in g.aliases] == [["f", "g"]]
    assert described(g) == ["copy f[0:64] <- A[bx:bx + 1, 0:64] (op #0)", "parallel i,j[8x8] (op #1)"]
    assert g.ops[1].serial_repeat is None and g.ops[0].serial_repeat == 1
    assert g.ops[1].serial_loops[0].var.name == "k"


def test_symbolic_buffer_shapes_are_not_pins():
    g = build_op_graph(K.symbolic_shape)
    a = g.buffer("A")
    assert str(a.shape[0]) == "n" and a.shape[1] == 64 and a.pinned_layout is None
    assert described(g) == ["copy f[0:64] <- A[n - 1:n, 0:64] (op #0)"]
    assert not g.ops[0].src.is_full


# ---------------------------------------------------------------------------------------------
# things outside ops

def test_floating_fragment_accesses_and_branch_conditions():
    g = build_op_graph(K.floating)
    assert [(b.name, str(a)) for b, a in g.floating] == [("f", "f[0]:r"), ("f", "f[k + 1]:r")]
    assert all(b is a.buffer for b, a in g.floating)
    fill = g.ops[1]
    assert len(fill.conditions) == 1 and isinstance(fill.conditions[0], tirx.Not)
    assert g.ops[0].conditions == () and g.buffer("loc").is_local


def test_break_while_evaluate_and_bind_are_walked_through():
    g = build_op_graph(K.with_break)
    assert described(g) == ["copy f[0:8] <- A[0:8] (op #0)", "fill f[0:8] = 0.0 (op #1)"]
    assert [str(a) for _, a in g.floating] == ["f[k]:r", "f[1]:r", "f[2]:r", "f[3]:r"]
    assert g.ops[1].serial_repeat is None and g.ops[1].serial_loops[0].kind == "while"


def test_no_thread_launch_means_one_thread():
    g = build_op_graph(K.no_threads)
    assert g.thread_extent == 1 and g.thread_var is None and g.block_vars == {}


def test_irmodule_input_and_lookup_errors():
    g = build_op_graph(tvm.IRModule({"main": K.staging}))
    assert names(g.buffers) == ["A", "B", "smem", "frag"]
    with pytest.raises(KeyError, match="no buffer 'nope'"):
        g.buffer("nope")
    with pytest.raises(FrontendError, match="expects a tvm.tirx.PrimFunc"):
        build_op_graph("not a function")
    with pytest.raises(FrontendError, match="one PrimFunc, got 2"):
        build_op_graph(tvm.IRModule({"a": K.staging, "b": K.row_max}))


# ---------------------------------------------------------------------------------------------
# errors

def test_refused_tile_op_names_the_op_and_shows_it():
    """A select whose predicate reads memory (inference would not see the read)."""
    with pytest.raises(FrontendError) as info:
        build_op_graph(K.unknown_op)
    msg = str(info.value)
    assert "tirx.tile.select" in msg and "lambda i: A[i] > T.float32(3.0))" in msg
    assert "line 103" in msg
    assert isinstance(info.value, LayoutError) and isinstance(info.value, ValueError)


def test_symbolic_thread_extent_is_rejected():
    with pytest.raises(FrontendError, match=r"threadIdx.x extent must be a constant.*`n`"):
        build_op_graph(K.symbolic_threads)


def test_second_thread_dimension_is_rejected():
    with pytest.raises(FrontendError, match="threadIdx.y = 4"):
        build_op_graph(K.thread_y)


def test_tile_op_inside_parallel_nest_is_rejected():
    with pytest.raises(FrontendError, match=r"tirx.tile.copy inside a T.parallel nest(.|\n)*A\[i, 0:32\]"):
        build_op_graph(K.tile_in_parallel)


def _with_args(func, op_name, args):
    """`func` with the first `op_name` tile op's arguments replaced."""
    done = []

    def fn(n):
        if n.op.name == op_name and not done:
            done.append(n)
            return n.replace(args=args)
        return n
    return func.with_body(tvm_ffi.structural_map(func.body, (TilePrimitiveCall, fn)))


def _row_max_vars():
    A, B = K.row_max.params
    g = build_op_graph(K.row_max)
    return A, g.buffer("frag").var, g.buffer("mx").var


@pytest.mark.parametrize("op, make, pattern", [
    ("tirx.tile.copy", lambda A, frag, mx: [frag[0:128, 0:128], A[0:128, 0:64]],
     r"regions frag\[0:128, 0:128\] and A\[0:128, 0:64\] do not match"),
    ("tirx.tile.copy", lambda A, frag, mx: [frag[0:128, 0:128], tirx.FloatImm("float16", 1.0)],
     r"source must be a buffer region, got `1.0`"),
    ("tirx.tile.copy", lambda A, frag, mx: [frag[0:128, 0:128]], r"expected 2 arguments, got 1"),
    ("tirx.tile.max", lambda A, frag, mx: [mx[0:128], frag[0:128, 0:128], [2], False],
     r"axis 2 out of range for source frag\[0:128, 0:128\] of rank 2"),
    ("tirx.tile.max", lambda A, frag, mx: [mx[0:64], frag[0:128, 0:128], [1], False],
     r"destination mx\[0:64\] does not match source frag\[0:128, 0:128\] reduced over axes \[1\]"),
    ("tirx.tile.max", lambda A, frag, mx: [mx[0:128], frag[0:128, 0:128], [0, 1], False],
     r"extents \['128'\] vs \[\]"),
    ("tirx.tile.max", lambda A, frag, mx: [mx[0:1], frag[0:128, 0:128], [0, 1], False], None),
])
def test_malformed_tile_ops_raise_clear_errors(op, make, pattern):
    func = _with_args(K.row_max, op, make(*_row_max_vars()))
    if pattern is None:
        build_op_graph(func)
        return
    with pytest.raises(FrontendError, match=pattern):
        build_op_graph(func)


@pytest.mark.parametrize("make, pattern", [
    (lambda acc, As, Bs: [acc[0:128, 0:128], As[0:128, 0:64], Bs[0:128, 0:64], acc[0:128, 0:128],
                          False, False, 1.0, 1.0], r"shapes do not agree \(K: \['64'\] vs \['128'\]\)"),
    (lambda acc, As, Bs: [acc[0:128, 0:64], As[0:128, 0:64], Bs[0:128, 0:64], acc[0:128, 0:128],
                          False, True, 1.0, 1.0], r"shapes do not agree \(D: \['128', '64'\] vs \['128', '128'\]\)"),
    (lambda acc, As, Bs: [acc[0:128, 0:128], As[0:128, 0:64], Bs[0:128, 0:64], acc[0:128, 0:64],
                          False, True, 1.0, 1.0], r"shapes do not agree \(C:"),
    (lambda acc, As, Bs: [acc[0:128, 0:128], As[0:1, 0:64], Bs[0:128, 0:64], acc[0:128, 0:128],
                          False, True, 1.0, 1.0], r"operand A = As\[0:1, 0:64\] must be a 2-D tile"),
])
def test_malformed_gemm_raises(make, pattern):
    g = build_op_graph(K.gemm)
    args = make(g.buffer("acc").var, g.buffer("As").var, g.buffer("Bs").var)
    with pytest.raises(FrontendError, match=pattern):
        build_op_graph(_with_args(K.gemm, "tirx.tile.gemm", args))


def test_gemm_with_zero_beta_clears():
    g = build_op_graph(K.gemm)
    acc, As, Bs = (g.buffer(n).var for n in ("acc", "As", "Bs"))
    func = _with_args(K.gemm, "tirx.tile.gemm", [acc[0:128, 0:128], As[0:128, 0:64], Bs[0:128, 0:64],
                                                  acc[0:128, 0:128], True, True,
                                                  tirx.FloatImm("float32", 1.0), tirx.FloatImm("float32", 0.0)])
    with pytest.raises(FrontendError, match=r"K: \['128'\] vs \['64'\]"):
        build_op_graph(func)   # A^T is 64x128, B^T is 64x128: K mismatch
    func = _with_args(K.gemm, "tirx.tile.gemm", [acc[0:128, 0:128], As[0:128, 0:64], Bs[0:128, 0:64],
                                                  acc[0:128, 0:128], False, True,
                                                  tirx.FloatImm("float32", 1.0), tirx.FloatImm("float32", 0.0)])
    gemm = build_op_graph(func).ops[3]
    assert gemm.clear and not gemm.accumulate
    assert gemm.describe() == "gemm acc[0:128, 0:128] <- As[0:128, 0:64] @ Bs[0:128, 0:64]^T (op #3)"
    assert names(gemm.buffers()) == ["acc", "As", "Bs"]


# ---------------------------------------------------------------------------------------------
# determinism

_SUMMARY = """
import sys; sys.path.insert(0, {tests!r})
import kernels_frontend as K
from tilelayout.passes.inference.frontend import build_op_graph
for name in ("row_max", "two_indices", "gemm", "serial_around", "pinned_and_views", "floating"):
    g = build_op_graph(getattr(K, name))
    print(g.describe())
    print(([[str(a) for a in op.accesses] for op in g.parallel_ops()], g.aliases))
"""


def _summary_here():
    lines = []
    for name in ("row_max", "two_indices", "gemm", "serial_around", "pinned_and_views", "floating"):
        g = build_op_graph(getattr(K, name))
        lines.append(g.describe())
        lines.append(str(([[str(a) for a in op.accesses] for op in g.parallel_ops()], g.aliases)))
    return "\n".join(lines) + "\n"


def test_same_graph_under_another_hash_seed():
    here = _summary_here()
    assert here == _summary_here()
    env = dict(os.environ, PYTHONHASHSEED="12345")
    code = _SUMMARY.format(tests=os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out == here


def test_buffer_lookup_by_name_follows_buffers_added_after_an_earlier_lookup():
    """``OpGraph.buffer`` looks names up through an index of the first buffer of each name; a buffer the walk
    (or an epilogue split) adds after a lookup is found too, and the first of two equal names still wins."""
    from dataclasses import replace
    from tilelayout.passes.inference.ops import OpGraph
    g = build_op_graph(K.row_max)
    first = g.buffers[0]
    assert g.buffer(first.name) is first
    extra = replace(first, name="added_later")
    g.buffers.append(extra)
    assert g.buffer("added_later") is extra
    g.buffers.append(replace(first, name=first.name, dtype="float16"))
    assert g.buffer(first.name) is first
    with pytest.raises(KeyError):
        g.buffer("no_such_buffer")
    assert isinstance(g, OpGraph)
