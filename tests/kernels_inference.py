"""TVMScript kernels for the layout-inference and cost-model tests.

Each factory returns a fresh PrimFunc (named ``kernel``) parsed from TVMScript text without the launch lines every
kernel repeats (``conftest.parse_kernel``); tests build them once per module. The end of the file holds the
exact-enumeration checks every inferred layout is held to (independent of the inference code's own ownership and
injectivity checks).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from conftest import buffer_type, parse_kernel

# kernels that are also golden cases are imported from them, not repeated here
from cases.elementwise_copy import roundtrip as copy_roundtrip  # noqa: F401
from cases.ragged_extent import ragged  # noqa: F401  (#2398: n columns, n not a multiple of the threads)
from cases.register_spill import spill_kernel as register_spill  # noqa: F401


# ----------------------------------------------------------------------------------------- basic shapes

def chain(m: int, n: int, threads: int, op: Callable = lambda v: v * T.float32(2)):
    """copy A -> x; y = op(x) (parallel, default x * 2); copy y -> B: one component of three ops."""
    return parse_kernel(f"A: {buffer_type(m, n)}, B: {buffer_type(m, n)}", threads, f"""
    x = T.alloc_buffer(({m}, {n}), "float32", scope="local.fragment")
    y = T.alloc_buffer(({m}, {n}), "float32", scope="local.fragment")
    Tx.copy(x[0:{m}, 0:{n}], A[0:{m}, 0:{n}])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            y[i, j] = op(x[i, j])
    Tx.copy(B[0:{m}, 0:{n}], y[0:{m}, 0:{n}])""", op=op)


def two_components():
    """Two independent fragments: {copy A->a, copy a->B} and {copy C->b, parallel D = b + 1}."""
    params = 'A: T.Buffer((64, 64), "float16"), B: T.Buffer((64, 64), "float16"), ' \
        f"C: {buffer_type(32, 128)}, D: {buffer_type(32, 128)}"
    return parse_kernel(params, 128, """
    a = T.alloc_buffer((64, 64), "float16", scope="local.fragment")
    b = T.alloc_buffer((32, 128), "float32", scope="local.fragment")
    Tx.copy(a[0:64, 0:64], A[0:64, 0:64])
    Tx.copy(b[0:32, 0:128], C[0:32, 0:128])
    Tx.copy(B[0:64, 0:64], a[0:64, 0:64])
    for i in T.parallel(32):
        for j in T.parallel(128):
            D[i, j] = b[i, j] + T.float32(1)""")


def plain_loop(m: int, n: int, threads: int):
    """A parallel nest touching only global memory: a planned loop layout, no fragment."""
    return parse_kernel(f"A: {buffer_type(m, n)}, B: {buffer_type(m, n)}", threads, f"""
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            B[i, j] = A[i, j] * T.float32(2)""")


def short_loop(n: int, threads: int):
    """Fewer iterations than threads, global only: the loop layout needs a thread predicate."""
    return parse_kernel(f"A: {buffer_type(n)}, B: {buffer_type(n)}", threads, f"""
    for i in T.parallel({n}):
        B[i] = A[i] + T.float32(1)""")


def small_fragment(n: int, threads: int):
    """A fragment with fewer elements than threads, written by a loop: replicated to fill the block."""
    return parse_kernel(f"A: {buffer_type(n)}, B: {buffer_type(n)}", threads, f"""
    f = T.alloc_buffer(({n},), "float32", scope="local.fragment")
    for i in T.parallel({n}):
        f[i] = A[i] * T.float32(3)
    Tx.copy(B[0:{n}], f[0:{n}])""")


def fill_then_store(m: int, n: int, threads: int):
    return parse_kernel(f"B: {buffer_type(m, n)}", threads, f"""
    frag = T.alloc_buffer(({m}, {n}), "float32", scope="local.fragment")
    Tx.fill(frag[0:{m}, 0:{n}], T.float32(0))
    Tx.copy(B[0:{m}, 0:{n}], frag[0:{m}, 0:{n}])""")


# ----------------------------------------------------------------------------------------- strict level

def const_index(m: int, n: int, threads: int):
    """``Out[i, j] = A[i, j] * s[0]``: a constant-index fragment read is fully replicated at strict level."""
    return parse_kernel(f"A: {buffer_type(m, n)}, Out: {buffer_type(m, n)}", threads, f"""
    s = T.alloc_buffer((2,), "float32", scope="local.fragment")
    Tx.fill(s[0:2], T.float32(1))
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            Out[i, j] = A[i, j] * s[0]""")


def floating_use(threads: int):
    """``f[0]`` decides an ``if`` outside every op: f must be in every thread (fully replicated)."""
    return parse_kernel(f"V: {buffer_type(4)}, A: {buffer_type(64, 64)}, B: {buffer_type(64, 64)}", threads, """
    f = T.alloc_buffer((4,), "float32", scope="local.fragment")
    x = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(f[0:4], V[0:4])
    Tx.copy(x[0:64, 0:64], A[0:64, 0:64])
    if f[0] > T.float32(0):
        Tx.copy(B[0:64, 0:64], x[0:64, 0:64])""")


def pinned_pair(threads: int):
    """y = x + 1 elementwise (64x64); the tests pin x and y (annotate_layouts) to provoke or avoid conflicts."""
    return chain(64, 64, threads, lambda v: v + T.float32(1))


# ----------------------------------------------------------------------------------------- reductions

def _reduce(reducer):
    def build(m: int, n: int, axis: int, threads: int, rows: int | None = None):
        """``R = reducer(x, axis)`` for x copied in from A; ``rows``: only x's first rows are reduced (axis 1)."""
        rows = m if rows is None else rows
        out = n if axis == 0 else rows
        return parse_kernel(f"A: {buffer_type(m, n)}, R: {buffer_type(out)}", threads, f"""
    x = T.alloc_buffer(({m}, {n}), "float32", scope="local.fragment")
    r = T.alloc_buffer(({out},), "float32", scope="local.fragment")
    Tx.copy(x[0:{m}, 0:{n}], A[0:{m}, 0:{n}])
    reducer(r[0:{out}], x[0:{rows}, 0:{n}], axes=[{axis}])
    Tx.copy(R[0:{out}], r[0:{out}])""", reducer=reducer)
    return build


reduce_sum, reduce_max, reduce_min = _reduce(Tx.sum), _reduce(Tx.max), _reduce(Tx.min)


def row_max_then_subtract(m: int, n: int, threads: int):
    """x -> row max ``row_max`` -> y = x - row_max[i] -> B: the ``reduce_broadcast`` case's kernel."""
    from cases.reduce_broadcast import _softmaxish
    return _softmaxish(m, n, threads)


def partial_reduce():
    """The row max of only the first 32 of x's 64 rows: a reduction of part of a fragment."""
    return reduce_max(64, 128, 1, 128, rows=32)


# ----------------------------------------------------------------------------------------- TileLang bugs

def head_then_full(small: int, full: int, threads: int):
    """#2957: a short loop writes the head of a fragment, a long loop reads all of it."""
    return parse_kernel(f"A: {buffer_type(full)}, C: {buffer_type(full)}", threads, f"""
    frag = T.alloc_buffer(({full},), "float32", scope="local.fragment")
    Tx.copy(frag[0:{full}], A[0:{full}])
    for i in T.parallel({small}):
        frag[i] = T.float32(5)
    for i in T.parallel({full}):
        C[i] = frag[i] + T.float32(1)""")


def full_then_head(small: int, full: int, threads: int):
    """#2957 the other way round: the long loop writes every element, the short one reads the head."""
    return parse_kernel(f"A: {buffer_type(full)}, C: {buffer_type(small)}", threads, f"""
    frag = T.alloc_buffer(({full},), "float32", scope="local.fragment")
    for i in T.parallel({full}):
        frag[i] = A[i] * T.float32(2)
    for i in T.parallel({small}):
        C[i] = frag[i]""")


def const_pair(m: int, n: int, threads: int):
    """#3005: ``F[i, j] = A[i, j] * s[0] + s[1]`` with a (2,) fragment s and a fragment F."""
    return parse_kernel(f"S: {buffer_type(2)}, A: {buffer_type(m, n)}, Out: {buffer_type(m, n)}", threads, f"""
    s = T.alloc_buffer((2,), "float32", scope="local.fragment")
    F = T.alloc_buffer(({m}, {n}), "float32", scope="local.fragment")
    Tx.copy(s[0:2], S[0:2])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            F[i, j] = A[i, j] * s[0] + s[1]
    Tx.copy(Out[0:{m}, 0:{n}], F[0:{m}, 0:{n}])""")


def out_of_bounds():
    """A loop larger than the fragment it reads: refused with a message, never silently truncated."""
    return parse_kernel(f"A: {buffer_type(100)}, C: {buffer_type(256)}", 128, """
    frag = T.alloc_buffer((100,), "float32", scope="local.fragment")
    Tx.copy(frag[0:100], A[0:100])
    for i in T.parallel(256):
        C[i] = frag[i]""")


def unsupported_op():
    return parse_kernel(f"A: {buffer_type(64)}", 64, """
    frag = T.alloc_buffer((64,), "float32", scope="local.fragment")
    Tx.select(frag[0:64], frag[0:64], T.float32(0), lambda i: A[i] > T.float32(3))
    Tx.copy(A[0:64], frag[0:64])""")


def two_thread_dims():
    return parse_kernel(f"A: {buffer_type(64)}", (32, 2), """
    frag = T.alloc_buffer((64,), "float32", scope="local.fragment")
    Tx.fill(frag[0:64], T.float32(0))
    Tx.copy(A[0:64], frag[0:64])""")


# ----------------------------------------------------------------------------------------- io-aware model

def row_scale(m: int, n: int, threads: int):
    """``Out[i, j] = A[i, j] * r[i]`` with r copied in: a loop-first plan indexes r by a thread-dependent
    row (local-memory spill); the copy-first attempt keeps r's slot constant per thread."""
    return parse_kernel(f"Rv: {buffer_type(m)}, A: {buffer_type(m, n)}, Out: {buffer_type(m, n)}", threads, f"""
    r = T.alloc_buffer(({m},), "float32", scope="local.fragment")
    Tx.copy(r[0:{m}], Rv[0:{m}])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            Out[i, j] = A[i, j] * r[i]""")


def gather_load(one_access: bool):
    """A loop reading global memory at a non-affine column ``(j * 5) % 64`` (a permutation)."""
    if one_access:
        return parse_kernel(f"A: {buffer_type(64, 64)}, B: {buffer_type(64, 64)}", 128, """
    x = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    for i in T.parallel(64):
        for j in T.parallel(64):
            x[i, j] = A[i, (j * 5) % 64]
    Tx.copy(B[0:64, 0:64], x[0:64, 0:64])""")
    return parse_kernel(f"A: {buffer_type(64, 64)}, B: {buffer_type(64, 64)}, Out: {buffer_type(64, 64)}", 128, """
    x = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(x[0:64, 0:64], B[0:64, 0:64])
    for i in T.parallel(64):
        for j in T.parallel(64):
            Out[i, j] = A[i, (j * 5) % 64] + x[i, j]""").with_attr("global_symbol", "kernel2")


def repeated_copy(reps: int):
    """The same fragment round trip inside a serial loop of ``reps`` trips (serial repeat)."""
    return parse_kernel(f"A: {buffer_type(reps * 64, 64)}, B: {buffer_type(reps * 64, 64)}", 128, f"""
    frag = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    for k in range({reps}):
        Tx.copy(frag[0:64, 0:64], A[k * 64:k * 64 + 64, 0:64])
        Tx.copy(B[k * 64:k * 64 + 64, 0:64], frag[0:64, 0:64])""")


def partial_copy():
    """A copy that fills only half of the fragment: outside what the statement score can enumerate."""
    return parse_kernel(f"A: {buffer_type(64, 64)}, B: {buffer_type(64, 64)}", 128, """
    frag = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.fill(frag[0:64, 0:64], T.float32(0))
    Tx.copy(frag[0:32, 0:64], A[0:32, 0:64])
    Tx.copy(B[0:64, 0:64], frag[0:64, 0:64])""")


# ----------------------------------------------------------------------------------------- enumeration checks

def fragment_cells(frag):
    """(threads (P, R), flat slots (P,)) of a fragment from its own tables (thread counted from 0)."""
    threads = np.asarray(frag.thread_table(), dtype=np.int64)
    P = int(np.prod(threads.shape[:-1]))
    slots_parts = np.asarray(frag.table(), dtype=np.int64).reshape(P, -1)
    ext = [int(e) for e in frag.output_shape]
    slot = np.zeros(P, dtype=np.int64)
    for k, e in enumerate(ext):
        slot = slot * e + slots_parts[:, k]
    return threads.reshape(P, -1), slot


def assert_valid_fragment(name: str, frag, threads: int) -> None:
    """Every (point, replica) has its own (thread, slot), threads inside the bound range, distinct replicas."""
    th, slot = fragment_cells(frag)
    lo, ext = frag.thread_range or (0, threads)
    assert th.min() >= 0 and th.max() + lo < lo + ext <= threads, f"{name}: threads outside [{lo}, {lo + ext}): {frag!r}"
    cells = th * (int(slot.max()) + 1) + slot[:, None]
    assert np.unique(cells).size == cells.size, f"{name}: two (point, replica) pairs share a register: {frag!r}"


def access_elements(nest, access) -> np.ndarray:
    """Flat element index of ``access`` at every loop point (row-major), evaluated with numpy."""
    from tilelayout.evaluate import evaluate
    grids = np.meshgrid(*[np.arange(e, dtype=np.int64) for e in nest.extents], indexing="ij")
    env = dict(zip(nest.loop_vars, grids))
    flat = np.zeros(tuple(nest.extents), dtype=np.int64)
    for idx, ext in zip(access.indices, access.buffer.shape):
        val = np.broadcast_to(np.asarray(evaluate(idx, env), dtype=np.int64), flat.shape)
        assert val.min() >= 0 and val.max() < ext, f"{access} out of bounds"
        flat = flat * ext + val
    return flat.reshape(-1)


def ownership_violation(nest, loop, access, frag) -> str | None:
    """Reads: every thread running an iteration holds the element; writes: runners == holders."""
    runs = np.asarray(loop.thread_table(), dtype=np.int64).reshape(-1, loop.replicate_size) \
        + (loop.thread_range or (0, 0))[0]
    holders = np.asarray(frag.thread_table(), dtype=np.int64).reshape(-1, frag.replicate_size) \
        + (frag.thread_range or (0, 0))[0]
    elems = access_elements(nest, access)
    for p in range(runs.shape[0]):
        run, hold = set(runs[p].tolist()), set(holders[elems[p]].tolist())
        if not run <= hold:
            return f"iteration {p} runs on {sorted(run - hold)[:4]} which do not hold {access}"
        if access.is_write and not access.is_constant and run != hold:
            return f"iteration {p} writes {access} but holders {sorted(hold - run)[:4]} do not run it"
    return None


def check_result(result, threads: int) -> None:
    """Every fragment is a valid fragment; every loop layout covers its nest injectively; every fragment
    access in every loop-shaped op (parallel nests and copies) respects ownership -- all by enumeration."""
    from tilelayout import Fragment
    from tilelayout.passes.inference.loop_nest import nest_of
    for name, lay in result.buffers.items():
        if isinstance(lay, Fragment):
            assert_valid_fragment(name, lay, threads)
    for index, decision in result.op_loops.items():
        op = result.graph.ops[index]
        nest = nest_of(op)
        loop = decision.layout
        assert list(loop.input_shape) == list(nest.extents), f"{op.describe()}: loop layout misses iterations"
        assert_valid_fragment(f"loop of {op.describe()}", loop, threads)
        for access in nest.fragment_accesses():
            err = ownership_violation(nest, loop, access, result.buffers[access.buffer.name])
            assert err is None, f"{op.describe()}: {err}"


# ----------------------------------------------------------------------------------------- TIRx pins

def tirx_pinned():
    """A fragment whose TIRx ``layout=`` is not the default: a strict-level pin (row i on lane i)."""
    from tvm.tirx.layout import S, TileLayout, laneid
    return parse_kernel(f"A: {buffer_type(8, 16)}, B: {buffer_type(8, 16)}", 8, """
    frag = T.alloc_buffer((8, 16), "float32", scope="local.fragment", layout=pin)
    Tx.copy(frag[0:8, 0:16], A[0:8, 0:16])
    Tx.copy(B[0:8, 0:16], frag[0:8, 0:16])""", pin=TileLayout(S[(8, 16):(1 @ laneid, 1)]))


def small_roundtrip(n: int, threads: int, dtype: str):
    """A fragment of fewer elements than threads copied in and out: replicated to fill the block."""
    return parse_kernel(f"A: {buffer_type(n, dtype=dtype)}, B: {buffer_type(n, dtype=dtype)}", threads, f"""
    f = T.alloc_buffer(({n},), "{dtype}", scope="local.fragment")
    Tx.copy(f[0:{n}], A[0:{n}])
    Tx.copy(B[0:{n}], f[0:{n}])""")


def accumulate_rows(threads: int):
    """r is filled, then ``sum(x, axis 1)`` accumulates into it: starting from the fill plans r the wrong
    way for the reduction (that attempt fails); starting from the copy works (the ``conversion_avoided`` case's
    kernel, 64x128)."""
    from cases.conversion_avoided import _kernel as accumulate
    return accumulate(64, 128, threads)


def column_broadcast(m: int, n: int, threads: int):
    """``Out[i, j] = c[j] * 2``: each column value is read by every row; the coalesced loop needs c[j] in
    the threads that run column j (a partial replication), not in every thread."""
    return parse_kernel(f"Cv: {buffer_type(n)}, Out: {buffer_type(m, n)}", threads, f"""
    c = T.alloc_buffer(({n},), "float32", scope="local.fragment")
    Tx.copy(c[0:{n}], Cv[0:{n}])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            Out[i, j] = c[j] * T.float32(2)""")


def nest_3d(threads: int):
    """A 3-D parallel nest writing a fragment at its own coordinates (no spill possible)."""
    return parse_kernel(f"A: {buffer_type(4, 8, 32)}, B: {buffer_type(4, 8, 32)}", threads, """
    x = T.alloc_buffer((4, 8, 32), "float32", scope="local.fragment")
    for a in T.parallel(4):
        for b in T.parallel(8):
            for c in T.parallel(32):
                x[a, b, c] = A[a, b, c] + T.float32(1)
    Tx.copy(B[0:4, 0:8, 0:32], x[0:4, 0:8, 0:32])""")
