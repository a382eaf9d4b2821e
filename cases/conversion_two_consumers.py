"""One fragment, two consumers that want it split differently: ``X = F * 2`` and ``Y = F + 1`` with ``X`` and
``Y`` pinned (``tl.annotate_layouts``) to different thread splits.

``F`` takes ``X``'s split from the first loop; the second loop, derived from ``Y``'s pin, needs another. The
plain inference replicates ``F`` in every thread (4,096 registers, over budget), so ``F`` is split and
converted before the second consumer. Variants: rows against columns (elements cross warps: a shared
round trip) and a permutation of lanes inside each warp (warp shuffles, cheaper than shared here).
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (sm_90, both models; maint/peer), given the same pins through T.annotate_layout:
both variants fail with `InternalError: Layout infer conflict between F and Y in T.Parallel loop`; the
kernel does not compile. Its users restage F through shared memory by hand."""

_ROWS = (lambda i, j: i * 2 + j // 32, lambda i, j: j % 32)          # thread, slot: half a row per thread
_SPLITS = {   # (X, Y) on 64x64 over 128 threads
    "rows_vs_columns_64x64_t128": (_ROWS, (lambda i, j: j * 2 + i // 32, lambda i, j: i % 32)),
    "lane_permutation_64x64_t128": (_ROWS, (lambda i, j: i // 16 * 32 + j // 32 * 16 + i % 16, lambda i, j: j % 32)),
}


def _fragment(thread, slot):
    from tilelayout import Fragment
    return Fragment([64, 64], thread, slot)


def _kernel(variant: str):
    from tilelayout import annotate_layouts

    @T.prim_func
    def kernel(A: T.Buffer((64, 64), "float32"), B1: T.Buffer((64, 64), "float32"), B2: T.Buffer((64, 64), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        F = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
        X = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
        Y = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
        Tx.copy(F[0:64, 0:64], A[0:64, 0:64])
        for i in T.parallel(64):
            for j in T.parallel(64):
                X[i, j] = F[i, j] * T.float32(2)
        for i in T.parallel(64):
            for j in T.parallel(64):
                Y[i, j] = F[i, j] + T.float32(1)
        Tx.copy(B1[0:64, 0:64], X[0:64, 0:64])
        Tx.copy(B2[0:64, 0:64], Y[0:64, 0:64])
    x, y = _SPLITS[variant]
    return annotate_layouts(kernel, {"X": _fragment(*x), "Y": _fragment(*y)})


VARIANTS = {name: (lambda name=name: _kernel(name)) for name in _SPLITS}
REFERENCE = {name: (lambda d: {"B1": d["A"] * 2, "B2": d["A"] + 1}) for name in _SPLITS}


def check(variant, model, result):
    bufs = result["buffers"]
    assert "F_cv" in bufs, f"F must be split: {sorted(bufs)}"
    for name in ("F", "F_cv"):
        _support.assert_valid_fragment(name, bufs[name])
        _support.assert_replicate(name, bufs[name], 1)
    first, second = sorted(result["loops"])
    loops = result["loops"]
    owners = {}
    for key in (first, second):
        owners[key] = [n for n in ("F", "F_cv") if _owns(key, loops[key], n, bufs[n])]
    assert sorted(sum(owners.values(), [])) == ["F", "F_cv"] and all(len(v) == 1 for v in owners.values()), owners
    expected = "shared" if variant.startswith("rows") else "shuffle"
    assert _support.conversion_kind(bufs["F"], bufs["F_cv"]) == expected


def _owns(key, loop, name, frag) -> bool:
    try:
        _support.assert_owned(key, loop, name, frag, lambda i, j: (i, j))
    except AssertionError:
        return False
    return True
