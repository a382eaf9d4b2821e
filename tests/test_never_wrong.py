"""Kernels that were once silently wrong (or crashed): each runs the lowered code on the CPU against a numpy
reference written here, independently of the lowering, or checks the typed error a bad kernel gets.

Kernels are TVMScript text parsed with ``tvm.script.from_source``.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilelayout as tl
from conftest import kernel_warnings, main_text
from tilelayout.errors import TileLayoutError

MODELS = ("register-count", "io-aware")


def _parse(text: str):
    import tvm
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx})


def _run(text: str, *arrays, model: str = "register-count"):
    """The lowered kernel run on the CPU (threads serialised) on copies of ``arrays``."""
    out = [a.copy() for a in arrays]
    tl.build_cpu(_parse(text), cost_model=model)(*out)
    return out


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


# ---------------------------------------------------------------------------------------------------
# 1. Tile ops and parallel nests under a thread-dependent `if`: the fragment used to be laid out over all
# 128 threads although only 64 ran the ops, so half of the elements were never written.

UNDER_IF = main_text('A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")', threads=128, body='''
    F = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    if COND:
        Tx.copy(F[0:64, 0:64], A[0:64, 0:64])
        for i in T.parallel(64):
            for j in T.parallel(64):
                F[i, j] = F[i, j] * T.float32(2) + T.float32(1)
        Tx.copy(B[0:64, 0:64], F[0:64, 0:64])
''')


@pytest.mark.parametrize("cond, lo, ext", [("tx < 64", 0, 64), ("tx >= 64", 64, 64), ("64 <= tx and tx < 96", 64, 32),
                                           ("tx > 31 and tx <= 40", 32, 9)])
@pytest.mark.parametrize("model", MODELS)
def test_ops_under_thread_condition_run_on_that_range(cond, lo, ext, model):
    text = UNDER_IF.replace("COND", cond)
    with kernel_warnings("TileLayoutResourceWarning") as over:
        res = tl.infer_layouts(_parse(text), cost_model=model)
    # 64x64 elements on nine threads are over the register budget; on 32 or more they are not
    assert bool(over) == (ext < 32)
    assert res.buffers["F"].thread_range == (lo, ext)
    assert all(l.thread_range[0] >= lo and l.thread_range[0] + l.thread_extent <= lo + ext for l in res.loops.values())
    A = _rand(64, 64)
    with kernel_warnings("TileLayoutResourceWarning"):
        _, B = _run(text, A, np.zeros_like(A), model=model)
    np.testing.assert_array_equal(B, A * 2 + 1)


PRODUCER_CONSUMER = main_text('A: T.Buffer((64, 32), "float32"), B: T.Buffer((64, 32), "float32")',
                              threads=128, body='''
    S = T.alloc_buffer((64, 32), "float32", scope="shared")
    P = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    C = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    m = T.alloc_buffer((64,), "float32", scope="local.fragment")
    if tx < 64:
        Tx.copy(P[0:64, 0:32], A[0:64, 0:32])
        for i in T.parallel(64):
            for j in T.parallel(32):
                P[i, j] = P[i, j] + T.float32(3)
        Tx.copy(S[0:64, 0:32], P[0:64, 0:32])
    T.tvm_storage_sync("shared")
    if tx >= 64:
        Tx.copy(C[0:64, 0:32], S[0:64, 0:32])
        Tx.max(m[0:64], C[0:64, 0:32], axes=[1])
        for i in T.parallel(64):
            for j in T.parallel(32):
                C[i, j] = C[i, j] - m[i]
        Tx.copy(B[0:64, 0:32], C[0:64, 0:32])
''')


@pytest.mark.parametrize("model", MODELS)
def test_warp_specialised_producer_consumer(model):
    res = tl.infer_layouts(_parse(PRODUCER_CONSUMER), cost_model=model)
    assert res.buffers["P"].thread_range == (0, 64)
    assert res.buffers["C"].thread_range == (64, 64) and res.buffers["m"].thread_range == (64, 64)
    A = _rand(64, 32)
    _, B = _run(PRODUCER_CONSUMER, A, np.zeros_like(A), model=model)
    P = A + 3
    np.testing.assert_allclose(B, P - P.max(axis=1, keepdims=True), rtol=1e-6)


SHARED_ACROSS_RANGES = main_text('A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")',
                                 threads=128, body='''
    F = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(F[0:64, 0:64], A[0:64, 0:64])
    if tx < 64:
        Tx.copy(B[0:64, 0:64], F[0:64, 0:64])
''')


def test_fragment_shared_between_ranges_is_refused_or_correct():
    # the fragment is written by all 128 threads, then read by threads 0..63 only: either the layout puts every
    # element of F on threads 0..63 (correct), or the kernel is refused naming the op and the range
    A = _rand(64, 64)
    try:
        _, B = _run(SHARED_ACROSS_RANGES, A, np.zeros_like(A))
    except TileLayoutError as err:
        assert "[0, 64)" in str(err) and "copy B" in str(err)
    else:
        np.testing.assert_array_equal(B, A)


@pytest.mark.parametrize("cond", ["tx % 2 == 0", "tx < 32 or tx >= 96", "tx < bx + 64"])
def test_non_range_thread_condition_is_refused(cond):
    text = UNDER_IF.replace("COND", cond)
    with pytest.raises(TileLayoutError, match="copy F"):
        tl.infer_layouts(_parse(text))


def test_reduction_needing_a_barrier_under_a_thread_condition_is_refused():
    # 9 threads (32..40) hold each row of C: combining them needs a shared-memory exchange behind __syncthreads,
    # which threads outside the condition never reach (a deadlock on a GPU)
    text = PRODUCER_CONSUMER.replace("tx >= 64", "tx > 31 and tx <= 40")
    with pytest.raises(TileLayoutError, match="barrier"):
        tl.infer_layouts(_parse(text))


def test_thread_range_reaches_cuda_source():
    src = tl.cuda_source(_parse(PRODUCER_CONSUMER))
    assert "threadIdx.x" in src and "64" in src


# ---------------------------------------------------------------------------------------------------
# 2. Partial visits at an offset: the loop derived from the fragment through ``F[i + 3, j]`` has thread
# ``(_i + 3) % 8 * 16 + _j // 4``; apache-tvm's iter-map detection drops the ``+ 3`` of that rotation, and the
# trusted inverse sent rows to the wrong threads and registers (896 of 1,024 outputs wrong). Inverses are now
# verified by enumeration; a layout with no closed-form inverse is partitioned by a guarded scan.

# one kernel, rows 3..10 of F written by a parallel nest or by a copy of the region
_OFFSET = main_text('A: T.Buffer((8, 64), "float32"), B: T.Buffer((16, 64), "float32")', threads=128, body='''
    F = T.alloc_buffer((16, 64), "float32", scope="local.fragment")
    Tx.fill(F[0:16, 0:64], T.float32(0))
{write}
    Tx.copy(B[0:16, 0:64], F[0:16, 0:64])
''')
OFFSET_VISIT = _OFFSET.format(write='''    for i in T.parallel(8):
        for j in T.parallel(64):
            F[i + 3, j] = A[i, j]''')
OFFSET_COPY = _OFFSET.format(write="    Tx.copy(F[3:11, 0:64], A[0:8, 0:64])")


@pytest.mark.parametrize("text", [OFFSET_VISIT, OFFSET_COPY], ids=["parallel", "copy"])
@pytest.mark.parametrize("model", MODELS)
def test_partial_visit_at_an_offset(text, model):
    A = _rand(8, 64)
    _, B = _run(text, A, np.zeros((16, 64), "float32"), model=model)
    want = np.zeros((16, 64), "float32")
    want[3:11] = A
    np.testing.assert_array_equal(B, want)


@pytest.mark.parametrize("offset", [1, 5, 8])
def test_partial_visit_at_other_offsets(offset):
    text = OFFSET_VISIT.replace("i + 3", f"i + {offset}")
    A = _rand(8, 64, seed=offset)
    _, B = _run(text, A, np.zeros((16, 64), "float32"))
    want = np.zeros((16, 64), "float32")
    want[offset:offset + 8] = A
    np.testing.assert_array_equal(B, want)


def test_rotation_inverse_is_checked():
    from tilelayout.layout import Layout, placeholder as P
    lay = Layout.from_exprs([8, 64], [P(1) % 4, (P(0) + 3) % 8 * 16 + P(1) // 4])
    try:
        inv = lay.inverse()
    except TileLayoutError:
        return                       # refusing is fine; a wrong inverse is not
    tab = np.asarray(lay.table()).reshape(-1, 2)
    back = np.asarray(inv.table())[tuple(tab.T)]
    coords = np.stack(np.unravel_index(np.arange(tab.shape[0]), (8, 64)), axis=1)
    assert (back == coords).all()


# ---------------------------------------------------------------------------------------------------
# 3. A reversed read of a reduction's result with 32 threads: the per-thread split of ``(127 - _i) // 4`` was
# off by three and thread 31 wrote O0[-3] (heap corruption).

REVERSED_AFTER_REDUCE = main_text('A: T.Buffer((128, 8), "float32"), O0: T.Buffer((128,), "float32")',
                                  threads=32, body='''
    F = T.alloc_buffer((128, 8), "float32", scope="local.fragment")
    f1 = T.alloc_buffer((128,), "float32", scope="local.fragment")
    f2 = T.alloc_buffer((128,), "float32", scope="local.fragment")
    Tx.copy(F[0:128, 0:8], A[0:128, 0:8])
    Tx.max(f1[0:128], F[0:128, 0:8], axes=[1])
    for i in T.parallel(128):
        f2[i] = T.max(f1[127 - i], f1[i])
    Tx.copy(O0[0:128], f2[0:128])
''')


@pytest.mark.parametrize("model", MODELS)
def test_reversed_read_after_reduction(model):
    A = _rand(128, 8)
    _, O = _run(REVERSED_AFTER_REDUCE, A, np.zeros(128, "float32"), model=model)
    row = A.max(axis=1)
    np.testing.assert_array_equal(O, np.maximum(row[::-1], row))


# ---------------------------------------------------------------------------------------------------
# 4. Reversed and diagonal reads: inference returned a loop layout that lowering could not invert. Lowering now
# realises every valid layout (a layout without a closed-form inverse is partitioned by a guarded scan), and
# indices that TVM's buffer flattening would rewrite wrongly (``(3 - j) % 4``) are protected.

# A copied into a 128x128 fragment F on 128 threads; what reads F follows (here and in section 5)
_F_FROM_A = main_text('A: T.Buffer((128, 128), "float32"), B: T.Buffer((128, 128), "float32")', threads=128, body='''
    F = T.alloc_buffer((128, 128), "float32", scope="local.fragment")
    Tx.copy(F[0:128, 0:128], A[0:128, 0:128])
''')

REVERSED_2D = _F_FROM_A + '''    for i in T.parallel(128):
        for j in T.parallel(128):
            B[i, j] = F[127 - i, 127 - j]
'''

DIAGONAL = main_text('A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32")', threads=32, body='''
    F = T.alloc_buffer((16, 16), "float32", scope="local.fragment")
    Tx.copy(F[0:16, 0:16], A[0:16, 0:16])
    for i in T.parallel(16):
        F[i, i] = F[i, i] + T.float32(1)
    Tx.copy(B[0:16, 0:16], F[0:16, 0:16])
''')


@pytest.mark.parametrize("model", MODELS)
def test_reversed_2d_read(model):
    A = _rand(128, 128)
    _, B = _run(REVERSED_2D, A, np.zeros_like(A), model=model)
    np.testing.assert_array_equal(B, A[::-1, ::-1])


@pytest.mark.parametrize("model", MODELS)
def test_diagonal_update(model):
    A = _rand(16, 16)
    _, B = _run(DIAGONAL, A, np.zeros_like(A), model=model)
    np.testing.assert_array_equal(B, A + np.eye(16, dtype="float32"))


def test_flattening_rewrite_is_avoided():
    from tilelayout.passes.lowering.index_guard import _changed_by_flattening
    from tvm import tirx
    j = tirx.Var("j", "int32")
    bad = tirx.floordiv(127 - j, 4) * 4 + tirx.floormod(3 - j, 4)
    assert _changed_by_flattening([bad], [128], {j: (0, 128)})
    assert not _changed_by_flattening([tirx.floordiv(j, 4) * 4 + tirx.floormod(j, 4)], [128], {j: (0, 128)})


# ---------------------------------------------------------------------------------------------------
# 5. Pins are validated: thread ids inside the block, one element per (thread, slot), the buffer's shape, a
# Fragment for a fragment buffer, an existing buffer, one layout per buffer.

PIN_KERNEL = _F_FROM_A + '''    Tx.copy(B[0:128, 0:128], F[0:128, 0:128])
'''


def _pinned(layouts):
    return tl.annotate_layouts(_parse(PIN_KERNEL), layouts)


@pytest.mark.parametrize("layout, match", [
    (tl.Fragment((128, 128), lambda i, j: i - 64, lambda i, j: j), "outside"),
    (tl.Fragment((128, 128), lambda i, j: i + 64, lambda i, j: j), "outside"),
    (tl.Fragment((128, 128), lambda i, j: i, lambda i, j: j).bind_thread_range(64, 64), "outside"),
    (tl.Fragment((128, 128), lambda i, j: i % 64, lambda i, j: j), "two elements"),
    (tl.Layout((128, 128), lambda i, j: [i, j]), "plain Layout"),
])
def test_invalid_pins_are_refused(layout, match):
    with pytest.raises(TileLayoutError, match=match):
        tl.infer_layouts(_pinned({"F": layout}))


def test_pin_of_the_wrong_shape_is_refused():
    with pytest.raises(TileLayoutError, match="shape"):
        _pinned({"F": tl.Fragment((64, 128), lambda i, j: i, lambda i, j: j)})


def test_pin_of_a_missing_buffer_is_refused():
    with pytest.raises(TileLayoutError, match="no such buffer"):
        _pinned({"G": tl.Fragment((128, 128), lambda i, j: i, lambda i, j: j)})
    raw = _pinned({"F": tl.Fragment((128, 128), lambda i, j: i, lambda i, j: j)})
    renamed = raw.with_attr("tilelayout.layouts", {"G": raw.attrs["tilelayout.layouts"]["F"]})
    with pytest.raises(TileLayoutError, match="no such buffer"):
        tl.infer_layouts(renamed)


def test_pinning_one_buffer_twice_differently_is_refused():
    from tilelayout.annotate import function_buffers
    func = _parse(PIN_KERNEL)
    F = next(b for b in function_buffers(func) if str(b.name) == "F")
    a = tl.Fragment((128, 128), lambda i, j: i, lambda i, j: j)
    b = tl.Fragment((128, 128), lambda i, j: j, lambda i, j: i)
    with pytest.raises(TileLayoutError, match="twice"):
        tl.annotate_layouts(func, {F: a, "F": b})


def test_valid_pin_is_honoured_and_correct():
    pin = tl.Fragment((128, 128), lambda i, j: (i * 7 + j) % 128, lambda i, j: i)
    res = tl.infer_layouts(_pinned({"F": pin}))
    assert res.buffers["F"].is_equal(pin.bind_thread_range(0, 128))
    A = _rand(128, 128)
    out = [A.copy(), np.zeros_like(A)]
    tl.build_cpu(_pinned({"F": pin}))(*out)
    np.testing.assert_array_equal(out[1], A)


# ---------------------------------------------------------------------------------------------------
# 6-8. Out-of-bounds constant regions, negative layout outputs, thread-block limits.

OOB_COPY = main_text('A: T.Buffer((128, 64), "float32"), B: T.Buffer((128, 64), "float32")', threads=128, body='''
    F = T.alloc_buffer((128, 64), "float32", scope="local.fragment")
    Tx.copy(F[0:128, 0:64], A[0:128, 0:64])
    Tx.copy(B[100000:100128, 0:64], F[0:128, 0:64])
''')


def test_constant_region_outside_its_buffer_is_refused():
    with pytest.raises(TileLayoutError, match=r"B\[100000:100128, 0:64\] lies outside buffer `B`"):
        tl.infer_layouts(_parse(OOB_COPY))
    # a region running partly past a global buffer is a partial tile (safe memory pads it); without safe memory
    # it is refused
    partly = _parse(OOB_COPY.replace("A[0:128, 0:64]", "A[0:128, 8:72]"))
    with pytest.raises(TileLayoutError, match="outside buffer `A`"):
        tl.build_cpu(partly.with_attr("tilelayout.safe_memory", False))


def test_negative_layout_outputs_are_refused():
    lay = tl.Layout([8], lambda i: [i - 4])
    with pytest.raises(tl.LayoutError, match="negative"):
        lay.output_shape
    assert "invalid" in repr(lay)          # printing an invalid layout still works
    with pytest.raises(tl.LayoutError, match="negative"):
        tl.layout_from_dict({"kind": "Layout", "input_shape": [8], "forward_index": ["_i - 4"]})
    assert tl.Layout([8], lambda i: [7 - i]).output_shape == [8]


@pytest.mark.parametrize("threads", [0, 1025, 2048])
def test_thread_block_limits(threads):
    text = UNDER_IF.replace("COND", "tx < 64").replace('"threadIdx.x", 128', f'"threadIdx.x", {threads}')
    with pytest.raises(TileLayoutError, match="thread"):
        tl.infer_layouts(_parse(text))
    with pytest.raises(TileLayoutError, match="thread"):
        tl.lower(_parse(text))


# ---------------------------------------------------------------------------------------------------
# 9. Bad input: every malformed value gets a TileLayoutError, never a raw TypeError/AttributeError/TVM error,
# a RecursionError or a MemoryError.

_GOOD_F = {"kind": "Fragment", "input_shape": [8, 8], "output_shape": [2], "forward_index": ["_j % 2"],
           "forward_thread": "_i * 4 + _j // 2", "replicate": 1, "threads": 32}
_GOOD_L = {"kind": "Layout", "input_shape": [8, 8], "output_shape": [64], "forward_index": ["_i * 8 + _j"]}


def f(**kw):
    d = dict(_GOOD_F)
    d.update(kw)
    return {k: v for k, v in d.items() if v is not ...}


def l(**kw):
    d = dict(_GOOD_L)
    d.update(kw)
    return {k: v for k, v in d.items() if v is not ...}


MALFORMED = [
    None, 3, "Layout", [], {}, {"kind": None}, {"kind": 3}, {"kind": "Swizzle"}, l(kind="layout"),
    l(input_shape=...), l(forward_index=...), f(forward_thread=...),
    l(input_shape="abc"), l(input_shape=None), l(input_shape=8), l(input_shape=[8.5, 8]), l(input_shape=[[8], 8]),
    l(input_shape=[0, 8]), l(input_shape=[-4, 8]), l(input_shape=[True, 8]), l(input_shape=[]),
    l(forward_index="_i * 8 + _j"), l(forward_index=None), l(forward_index=[3]), l(forward_index=[None]),
    l(forward_index=["_i +"]), l(forward_index=["_q"]), l(forward_index=["__import__('os')"]),
    l(forward_index=["_i / 0"]), l(forward_index=["_i // 0"]), l(forward_index=["_i % 0"]), l(forward_index=["_i - 100"]),
    l(forward_index=["_i.real"]), l(forward_index=["lambda: 1"]), l(forward_index=["_i ** 2"]),
    f(replicate=2.7), f(replicate="2"), f(replicate=0), f(replicate=-1), f(replicate=None), f(replicate=10**12),
    f(replicate=True), f(forward_thread=3), f(forward_thread=["_i"]), f(forward_thread="_rep"),
    f(thread_range=[0]), f(thread_range="0,32"), f(thread_range=[-1, 32]), f(thread_range=[0, 0]),
    f(thread_range=[0.5, 32]), f(thread_range=None), f(forward_index=["_rep"]),
    l(input_shape=["n"], forward_index=["_i"]), l(input_shape=["n +"], forward_index=["_i"]),
    l(input_shape=["1/0"], forward_index=["_i"]), l(input_shape=["_i"], forward_index=["_i"]),
    l(forward_index=["Cast(3, _i)"]), l(forward_index=["max(_i)"]), l(forward_index=["Select(_i)"]),
    l(forward_index=["(" * 500 + "_i" + ")" * 500]),
]


@pytest.mark.parametrize("d", MALFORMED, ids=[f"m{k}" for k in range(len(MALFORMED))])
def test_malformed_layout_dicts_raise_typed_errors(d):
    try:
        out = tl.layout_from_dict(d)
    except TileLayoutError:
        return
    # the few that are valid layouts after all (``_rep`` in a fragment without replicas, a symbolic extent)
    # must be usable: printing, tabulating and round-tripping raise nothing but typed errors
    repr(out)
    try:
        if out.is_static:
            out.table()
        assert tl.layout_from_dict(out.to_dict()).is_equal(out)
    except TileLayoutError:
        pass


def test_malformed_list_is_long_enough():
    assert len(MALFORMED) >= 30


def test_layout_dict_rejections_that_used_to_pass():
    for bad in (l(input_shape="abc"), f(replicate=2.7), f(replicate=10**12), l(forward_index=["_i // 0"])):
        with pytest.raises(TileLayoutError):
            tl.layout_from_dict(bad)


@pytest.mark.parametrize("text", [None, 3, 2.5, b"2:1", [2], "(" * 5000 + "1" + ")" * 5000 + ":1", "((2,3):(1,2)",
                                  "(2,3):(1,2,3)", "2:1@x", "Sw<3,3,3> o 0 o None"])
def test_cute_parse_bad_input(text):
    with pytest.raises(TileLayoutError):
        tl.cute.parse(text)
    with pytest.raises(TileLayoutError):
        tl.cute.parse_int_tuple(text) if not isinstance(text, str) or ":" not in text else tl.cute.parse(text)


def test_constant_division_by_zero_in_a_layout():
    with pytest.raises(TileLayoutError, match="zero"):
        tl.Layout([8], lambda i: i // 0)
    with pytest.raises(TileLayoutError, match="zero"):
        tl.Fragment([8], lambda i: i % 0)


def test_huge_replication_is_refused():
    with pytest.raises(TileLayoutError, match="replicate"):
        tl.Fragment([8], lambda i, r: i, replicate=10**12)


def test_unknown_cost_model_and_target_are_typed_value_errors():
    func = _parse(UNDER_IF.replace("COND", "tx < 64"))
    for kwargs in ({"cost_model": "nope"}, {"target": "nonsense-target"}):
        with pytest.raises(ValueError) as info:
            tl.infer_layouts(func, **kwargs)
        assert isinstance(info.value, TileLayoutError)


def test_thread_condition_through_a_per_thread_scalar():
    text = UNDER_IF.replace("    if COND:", "    t: T.int32 = tx\n    if t < 64:")
    assert tl.infer_layouts(_parse(text)).buffers["F"].thread_range == (0, 64)
    A = _rand(64, 64)
    _, B = _run(text, A, np.zeros_like(A))
    np.testing.assert_array_equal(B, A * 2 + 1)


def test_condition_on_an_unknown_per_thread_value_is_refused():
    text = UNDER_IF.replace("    if COND:", "    t: T.int32 = tx\n    for k in range(2):\n        t = t + k\n    if t < 64:")
    with pytest.raises(TileLayoutError, match="per-thread"):
        tl.infer_layouts(_parse(text))


def test_parallel_nest_reading_the_thread_index_is_refused():
    text = UNDER_IF.replace("F[i, j] * T.float32(2)", "F[i, j] * T.Cast(\"float32\", tx)").replace("COND", "tx < 64")
    with pytest.raises(TileLayoutError, match="thread index"):
        tl.infer_layouts(_parse(text))


GEMM_UNDER_IF = main_text('A: T.Buffer((32, 16), "float16"), B: T.Buffer((16, 32), "float16"), C: T.Buffer((32, 32), "float32")',
                          threads=128, body='''
    As = T.alloc_buffer((32, 16), "float16", scope="shared")
    Bs = T.alloc_buffer((16, 32), "float16", scope="shared")
    acc = T.alloc_buffer((32, 32), "float32", scope="local.fragment")
    if tx >= 64:
        Tx.copy(As[0:32, 0:16], A[0:32, 0:16])
        Tx.copy(Bs[0:16, 0:32], B[0:16, 0:32])
    T.tvm_storage_sync("shared")
    if tx >= 64:
        Tx.gemm(acc[0:32, 0:32], As[0:32, 0:16], Bs[0:16, 0:32], acc[0:32, 0:32], False, False, 1.0, 0.0)
        Tx.copy(C[0:32, 0:32], acc[0:32, 0:32])
''')


def test_tensor_core_gemm_under_a_thread_condition():
    res = tl.infer_layouts(_parse(GEMM_UNDER_IF))
    assert res.buffers["acc"].thread_range == (64, 64)
    # fp16 operands, fp32 accumulator: the mma.sync instruction runs on the two warps of threads 64..127
    A, B = _rand(32, 16).astype("float16"), _rand(16, 32, seed=1).astype("float16")
    _, _, C = _run(GEMM_UNDER_IF, A, B, np.zeros((32, 32), "float32"))
    np.testing.assert_allclose(C, A.astype("float32") @ B.astype("float32"), rtol=1e-3, atol=1e-3)
    # on the GPU only threads 64..127 reach the gemm's barrier: a named barrier over them, not __syncthreads
    src = tl.cuda_source(_parse(GEMM_UNDER_IF), target={"kind": "cuda", "arch": "sm_80"})
    assert 'bar.sync %0, %1;' in src and src.count("__syncthreads()") == 1     # the user's own barrier


def test_scalar_gemm_under_a_thread_condition():
    func = _parse(GEMM_UNDER_IF).with_attr("tilelayout.gemm_fallback", "scalar")
    res = tl.infer_layouts(func)
    assert res.buffers["acc"].thread_range == (64, 64)
    A, B = _rand(32, 16).astype("float16"), _rand(16, 32, seed=1).astype("float16")
    out = [A, B, np.zeros((32, 32), "float32")]
    with pytest.warns(UserWarning, match="scalar"):
        tl.build_cpu(func)(*out)
    C = out[2]
    np.testing.assert_allclose(C, A.astype("float32") @ B.astype("float32"), rtol=1e-3, atol=1e-3)



CONSTANT_CANCELLATION = main_text('A: T.Buffer((128,), "float16"), O: T.Buffer((128,), "float16")', threads=32,
                                  body='''
    f = T.alloc_buffer((128,), "float16", scope="local.fragment")
    Tx.copy(f[0:128], A[0:128])
    for i in T.parallel(128):
        f[i] = (T.float16(3.0) + f[i]) - T.float16(3.0)
    Tx.copy(O[0:128], f[0:128])
''')


def test_float_constant_cancellation_keeps_the_rounding_it_asks_for():
    """(3 + x) - 3 in float16 rounds x to the spacing of float16 numbers near 4 (1/256): x = 1.009765625 gives
    1.0078125. Both the CUDA and the CPU build compute x itself."""
    from tilelayout.passes.lowering.pipeline import check_numeric

    def reference(d):
        three = np.float16(3.0)
        return {"O": ((three + d["A"]).astype(np.float16) - three).astype(np.float16)}
    res = check_numeric(_parse(CONSTANT_CANCELLATION), reference, tolerance=(0, 0))
    assert res.ok, res.message
