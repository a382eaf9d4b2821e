"""Kernels for tests/test_reducer.py: rows accumulated into ``tilelayout.lang.alloc_reducer`` fragments, and
kernels that break the reducer's protocol (each must be refused naming the reducer)."""
from __future__ import annotations

from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from tilelayout import lang as L

_IDENTITY = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}


def _update(op, r, i, v):
    if op == "sum":
        return r[i] + v
    return T.max(r[i], v) if op == "max" else T.min(r[i], v)


def rows(op: str = "sum", replication: str = "all", m: int = 64, n: int = 128, threads: int = 128,
         start: float | None = None, tiles: int = 1, *, fill: bool = True, update: str | None = None,
         finalize: str = "after", store: str = "after"):
    """B[i] = op over j of A[i, j], the row accumulated over ``tiles`` column tiles of width n; ``start``: the
    fill value (default the identity). The other keywords break the reducer's protocol (the misuse kernels
    below): ``fill`` False leaves out the fill; ``update`` is the op the nest applies if not ``op``; ``finalize``
    is "after" the tile loop, "twice" there, "in loop" (at the end of each tile) or "never"; ``store`` copies r
    to B "after" finalizing, "before" it (during the accumulation) or "never"."""
    first = _IDENTITY[op] if start is None else start
    applied = update or op
    store_before, store_after = store == "before", store == "after"
    finalize_in_loop, finalize_after, finalize_again = finalize == "in loop", finalize in ("after", "twice"), \
        finalize == "twice"

    @T.prim_func
    def kernel(A: T.Buffer((m, n * tiles), "float32"), B: T.Buffer((m,), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        a = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        r = L.alloc_reducer((m,), "float32", op=op, replication=replication)
        if fill:
            Tx.fill(r[0:m], T.float32(first))
        for k in T.serial(tiles):
            Tx.copy(a[0:m, 0:n], A[0:m, k * n:k * n + n])
            for i in T.parallel(m):
                for j in T.parallel(n):
                    r[i] = _update(applied, r, i, a[i, j])
            if finalize_in_loop:
                L.finalize_reducer(r)
        if store_before:
            Tx.copy(B[0:m], r[0:m])
        if finalize_after:
            L.finalize_reducer(r)
        if finalize_again:
            L.finalize_reducer(r)
        if store_after:
            Tx.copy(B[0:m], r[0:m])
    return kernel


def two_epochs(m: int = 32, n: int = 64, threads: int = 128):
    """One reducer used twice: B = row sums of A, C = row maxima of A + B (a fresh epoch after the first)."""
    @T.prim_func
    def kernel(A: T.Buffer((m, n), "float32"), B: T.Buffer((m,), "float32"), C: T.Buffer((m,), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        a = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        r = L.alloc_reducer((m,), "float32", op="sum")
        Tx.copy(a[0:m, 0:n], A[0:m, 0:n])
        for epoch in T.serial(2):
            Tx.fill(r[0:m], T.float32(0))
            for i in T.parallel(m):
                for j in T.parallel(n):
                    r[i] = r[i] + a[i, j] * T.Cast("float32", epoch + 1)
            L.finalize_reducer(r)
            if epoch == 0:
                Tx.copy(B[0:m], r[0:m])
            else:
                Tx.copy(C[0:m], r[0:m])
    return kernel


# ------------------------------------------------------------------------------------------ misuse

def read_during_accumulation():
    return rows("sum", "all", 32, 64, 128, store="before")


def never_finalized():
    return rows("sum", "all", 32, 64, 128, finalize="never", store="never")


def update_before_fill():
    return rows("sum", "all", 32, 64, 128, fill=False)


def sum_starting_at_one():
    return rows("sum", "all", 32, 64, 128, start=1.0)


def wrong_update():
    return rows("sum", "all", 32, 64, 128, update="max")


def finalized_twice():
    return rows("sum", "all", 32, 64, 128, finalize="twice")


def store_outside_nest():
    @T.prim_func
    def kernel(A: T.Buffer((32, 64), "float32"), B: T.Buffer((32,), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        r = L.alloc_reducer((32,), "float32")
        Tx.fill(r[0:32], T.float32(0))
        for j in T.serial(64):
            r[0] = r[0] + A[0, j]
        L.finalize_reducer(r)
        Tx.copy(B[0:32], r[0:32])
    return kernel


def finalize_under_if():
    @T.prim_func
    def kernel(A: T.Buffer((32, 64), "float32"), B: T.Buffer((32,), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        a = T.alloc_buffer((32, 64), "float32", scope="local.fragment")
        r = L.alloc_reducer((32,), "float32")
        Tx.copy(a[0:32, 0:64], A[0:32, 0:64])
        if bx == 0:
            Tx.fill(r[0:32], T.float32(0))
            for i in T.parallel(32):
                for j in T.parallel(64):
                    r[i] = r[i] + a[i, j]
            L.finalize_reducer(r)
        Tx.copy(B[0:32], a[0:32, 0])
    return kernel


def finalize_inside_loop_only():
    """Filled once before a loop whose body finalizes: the second iteration would update a closed reducer."""
    return rows("sum", "all", 32, 64, 128, tiles=2, finalize="in loop")


def issue2408_eight_elements(threads: int = 128):
    """TileLang #2408: 128 threads summing 8 elements into a one-element reducer must give 36 for 1..8 (TileLang's
    legacy reducer ran each iteration in 16 threads and counted it 16 times: 576)."""
    @T.prim_func
    def kernel(A: T.Buffer((8,), "float32"), B: T.Buffer((1,), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        src = T.alloc_buffer((8,), "float32", scope="local.fragment")
        acc = L.alloc_reducer((1,), "float32")
        Tx.copy(src[0:8], A[0:8])
        Tx.fill(acc[0:1], T.float32(0))
        for i in T.parallel(8):
            acc[0] = acc[0] + src[i]
        L.finalize_reducer(acc)
        Tx.copy(B[0:1], acc[0:1])
    return kernel
