"""A fragment read at ``[i, j]`` and ``[j, i]`` in one loop: a symmetrised gemm and a register tile ``F * F^T``.

No single layout serves both reads. The gemm accumulator is fixed by the MMA instruction, so the plain
inference refuses (the loop cannot run ``[i, j]`` and ``[j, i]`` in the same thread); the register tile
is fully replicated instead, 4,096 registers per thread, over the 255-register budget. Both are
conflicts to convert: the fragment is split, the loop reads one of its two indices from a second version
(``acc_cv`` / ``F_cv``) with its own layout, and an explicit conversion (a shared-memory round trip: the
transpose crosses warps) fills it. ``check`` pins the split and, by enumeration of the recorded layouts,
that every version is held where the loop reads it and that the conversion goes through shared memory.
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90, both models; maint/peer): both variants fail at compile time with the
internal check of #3005 (a fragment read at two different indices in one T.Parallel loop):
`InternalError: Check failed: (StructuralEqual()(it->second.indices, indices)) is false: acc: (j, i) and (i, j)`
(`F: (j, i) and (i, j)` likewise). Its users restage the tile through shared memory by hand."""


def _gemm_sym(n: int, threads: int):
    @T.prim_func
    def kernel(A: T.Buffer((n, n), "float16"), B: T.Buffer((n, n), "float16"), C: T.Buffer((n, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        A_s = T.alloc_buffer((n, n), "float16", scope="shared")
        B_s = T.alloc_buffer((n, n), "float16", scope="shared")
        acc = T.alloc_buffer((n, n), "float32", scope="local.fragment")
        Tx.copy(A_s[0:n, 0:n], A[0:n, 0:n])
        Tx.copy(B_s[0:n, 0:n], B[0:n, 0:n])
        Tx.gemm(acc[0:n, 0:n], A_s[0:n, 0:n], B_s[0:n, 0:n], acc[0:n, 0:n], False, False, 1.0, 0.0)
        for i in T.parallel(n):
            for j in T.parallel(n):
                C[i, j] = acc[i, j] + acc[j, i]
    return kernel


def _register_sym(n: int, threads: int):
    @T.prim_func
    def kernel(A: T.Buffer((n, n), "float32"), B: T.Buffer((n, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        F = T.alloc_buffer((n, n), "float32", scope="local.fragment")
        Tx.copy(F[0:n, 0:n], A[0:n, 0:n])
        for i in T.parallel(n):
            for j in T.parallel(n):
                B[i, j] = F[i, j] * F[j, i]
    return kernel


VARIANTS = {
    "gemm_acc_m64n64k64_t128": lambda: _gemm_sym(64, 128),
    "register_tile_64x64_t128": lambda: _register_sym(64, 128),
}


def _gemm_reference(d):
    c = d["A"].astype("float32") @ d["B"].astype("float32")
    return {"C": c + c.T}


REFERENCE = {
    "gemm_acc_m64n64k64_t128": _gemm_reference,
    "register_tile_64x64_t128": lambda d: {"B": d["A"] * d["A"].T},
}


def check(variant, model, result):
    name = "acc" if variant.startswith("gemm") else "F"
    copy = f"{name}_cv"
    bufs = result["buffers"]
    assert copy in bufs, f"{name} must be split into {name} and {copy}: {sorted(bufs)}"
    (key,) = result["loops"]
    loop = result["loops"][key]
    _support.assert_covers(key, loop)
    for buf in (name, copy):
        _support.assert_valid_fragment(buf, bufs[buf])
        _support.assert_replicate(buf, bufs[buf], 1)
    # one version serves [i, j], the other [j, i] (which one is the search's choice)
    straight = [b for b in (name, copy) if _owns(key, loop, b, bufs[b], lambda i, j: (i, j))]
    crossed = [b for b in (name, copy) if _owns(key, loop, b, bufs[b], lambda i, j: (j, i))]
    assert straight and crossed and set(straight) | set(crossed) == {name, copy}, (straight, crossed)
    assert _support.conversion_kind(bufs[name], bufs[copy]) == "shared", "a transpose across warps needs shared memory"


def _owns(key, loop, name, frag, index) -> bool:
    try:
        _support.assert_owned(key, loop, name, frag, index)
    except AssertionError:
        return False
    return True
