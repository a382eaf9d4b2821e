"""One fragment read at two different indices in one parallel loop (TileLang #3005).

``Out[i, j] = A[i, j] * s[0] + s[1]`` reads the (2,) fragment ``s`` at two constant indices;
``Out[i, j] = A[i, j] * (r[i + 1] - r[i])`` reads ``r`` at two row indices. Correct behaviour: the
thread running an iteration holds every element it reads there, so ``s`` is fully replicated
(every working thread needs both elements), ``r`` holds rows ``i`` and ``i + 1`` together, and the
loop covers its whole iteration space.
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90), both models, both variants: compile-time crash in
RecordBufferAccess, which assumes one index per buffer per loop:
`InternalError: Check failed: (StructuralEqual()(it->second.indices, indices)) is false: s: (1,) and (0,)`
(adjacent rows: `... r: (i,) and (i + 1,)`). Still open."""


def _const_pair(m: int, n: int, threads: int):
    @T.prim_func
    def kernel(S: T.Buffer((2,), "float32"), A: T.Buffer((m, n), "float32"), Out: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        s = T.alloc_buffer((2,), "float32", scope="local.fragment")
        Tx.copy(s[0:2], S[0:2])
        for i in T.parallel(m):
            for j in T.parallel(n):
                Out[i, j] = A[i, j] * s[0] + s[1]
    return kernel


def _adjacent_rows(m: int, n: int, threads: int):
    @T.prim_func
    def kernel(V: T.Buffer((m + 1,), "float32"), A: T.Buffer((m, n), "float32"), Out: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        r = T.alloc_buffer((m + 1,), "float32", scope="local.fragment")
        Tx.copy(r[0:m + 1], V[0:m + 1])
        for i in T.parallel(m):
            for j in T.parallel(n):
                Out[i, j] = A[i, j] * (r[i + 1] - r[i])
    return kernel


VARIANTS = {
    "const_pair_64x128_t128": lambda: _const_pair(64, 128, 128),
    "adjacent_rows_64x128_t128": lambda: _adjacent_rows(64, 128, 128),
}

THREADS = 128


def check(variant, model, result):
    (key,) = result["loops"]
    loop = result["loops"][key]
    _support.assert_covers(key, loop)
    if variant.startswith("const_pair"):
        s = result["buffers"]["s"]
        _support.assert_replicate("s", s, THREADS)
        _support.assert_valid_fragment("s", s)
        _support.assert_owned(key, loop, "s", s, lambda i, j: (0 * i,))
        _support.assert_owned(key, loop, "s", s, lambda i, j: (0 * i + 1,))
    else:
        r = result["buffers"]["r"]
        _support.assert_valid_fragment("r", r)
        _support.assert_owned(key, loop, "r", r, lambda i, j: (i,))
        _support.assert_owned(key, loop, "r", r, lambda i, j: (i + 1,))
