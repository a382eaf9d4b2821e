"""A transposed register read: ``H[i, j] = F[j, i] * G[i, j]`` where ``G = F + 1`` took ``F``'s layout.

The second loop needs ``F`` transposed and ``G`` straight in the same thread. Without conversions the
read-only fragment ``F`` is fully replicated (64x64 fp32: 4,096 registers per thread, correct on a CPU,
hopeless on a GPU); the register budget (255) rejects that, so ``F`` is split: one loop reads ``F``, the
other ``F_cv``, joined by a conversion through shared memory. ``check`` pins the split by enumeration.
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90, both models; maint/peer): `InternalError: Check failed: (has_best) is
false: no available layout found`: every root of the free level conflicts and TileLang has no way out."""


def _kernel(n: int, threads: int):
    @T.prim_func
    def kernel(A: T.Buffer((n, n), "float32"), B: T.Buffer((n, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        F = T.alloc_buffer((n, n), "float32", scope="local.fragment")
        G = T.alloc_buffer((n, n), "float32", scope="local.fragment")
        H = T.alloc_buffer((n, n), "float32", scope="local.fragment")
        Tx.copy(F[0:n, 0:n], A[0:n, 0:n])
        for i in T.parallel(n):
            for j in T.parallel(n):
                G[i, j] = F[i, j] + T.float32(1)
        for i in T.parallel(n):
            for j in T.parallel(n):
                H[i, j] = F[j, i] * G[i, j]
        Tx.copy(B[0:n, 0:n], H[0:n, 0:n])
    return kernel


VARIANTS = {"fp32_64x64_t128": lambda: _kernel(64, 128)}
REFERENCE = {"fp32_64x64_t128": lambda d: {"B": d["A"].T * (d["A"] + 1)}}


def check(variant, model, result):
    bufs = result["buffers"]
    assert "F_cv" in bufs, f"F must be split: {sorted(bufs)}"
    for name in ("F", "F_cv", "G", "H"):
        _support.assert_valid_fragment(name, bufs[name])
        _support.assert_replicate(name, bufs[name], 1)
    first, second = sorted(result["loops"])
    loops = result["loops"]
    # one loop reads F, the other F_cv; each version is held where its loop reads it
    users = {}
    for key, index in ((first, lambda i, j: (i, j)), (second, lambda i, j: (j, i))):
        for name in ("F", "F_cv"):
            try:
                _support.assert_owned(key, loops[key], name, bufs[name], index)
                users.setdefault(key, []).append(name)
            except AssertionError:
                pass
    assert set(sum(users.values(), [])) == {"F", "F_cv"} and len(users) == 2, users
    _support.assert_owned(second, loops[second], "G", bufs["G"], lambda i, j: (i, j))
    assert _support.conversion_kind(bufs["F"], bufs["F_cv"]) == "shared"
