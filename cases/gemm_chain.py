"""Two chained gemms without softmax: ``S = A B^T`` (shared operands), ``P = S`` cast to fp16 in registers,
``O = P C`` with P as the register A operand.

It pins the joint gemm plan: the two gemms share the instruction (mma.sync on sm_80, wgmma on sm_90, SS then
RS) and the warp partition, all warps on M, so the cast ``P = S`` is thread-local (P's A-operand layout holds
exactly the elements S's accumulator layout gives each thread) -- with ``warp_policy="full_row"`` on both
gemms, and without any policy, where the chain is detected and decided jointly.
"""
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (maint/peer, both models, each variant compared on its own target). With FullRow
on both gemms (m64n64k64d64_t128) S, P, O and the shared swizzles equal ours as mappings on sm_80 and sm_90.
Without a policy (m128n64k32d128_t256_default_policy) TileLang plans each gemm alone with Square, which
splits the 8 warps over N as well (sm_80 mma.sync, sm_90 wgmma 4x2), so P (the second gemm's A operand,
replicated over its N-warps) cannot be written from S, and TileLang stops with "InternalError: Layout infer
conflict between S and P in T.Parallel loop" on both targets; we decide the chain jointly (8x1 warps) and
the copy S -> P is thread-local."""


def chain(arch: str, m: int, n: int, k: int, d: int, threads: int, policy_s: str | None, policy_o: str | None,
          row_max: bool = False):
    """``S = A B^T``; ``P = S`` (fp16, registers); ``O = P C``. ``policy_*``: each gemm's ``warp_policy`` (None: no
    keyword). With ``row_max``, also a row max of S that scales O (``O *= rmax``): the row vector and the register
    A operand tie both gemms' rows to the same threads (the warp-policy tests' attention-shaped chain)."""
    def gemm(D, A, B, C, tb, policy):
        if policy is None:
            return Tx.gemm(D, A, B, C, False, tb, T.float32(1), T.float32(0))
        return Tx.gemm(D, A, B, C, False, tb, T.float32(1), T.float32(0), warp_policy=policy)

    @T.prim_func
    def kernel(A: T.Buffer((m, k), "float16"), B: T.Buffer((n, k), "float16"), C: T.Buffer((n, d), "float16"),
               D: T.Buffer((m, d), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        A_s = T.alloc_buffer((m, k), "float16", scope="shared")
        B_s = T.alloc_buffer((n, k), "float16", scope="shared")
        C_s = T.alloc_buffer((n, d), "float16", scope="shared")
        S = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        P = T.alloc_buffer((m, n), "float16", scope="local.fragment")
        O = T.alloc_buffer((m, d), "float32", scope="local.fragment")
        if row_max:
            rmax = T.alloc_buffer((m,), "float32", scope="local.fragment")
        Tx.copy(A_s[0:m, 0:k], A[0:m, 0:k])
        Tx.copy(B_s[0:n, 0:k], B[0:n, 0:k])
        Tx.copy(C_s[0:n, 0:d], C[0:n, 0:d])
        gemm(S[0:m, 0:n], A_s[0:m, 0:k], B_s[0:n, 0:k], S[0:m, 0:n], True, policy_s)
        if row_max:
            Tx.max(rmax[0:m], S[0:m, 0:n], axes=[1])
        Tx.copy(P[0:m, 0:n], S[0:m, 0:n])
        gemm(O[0:m, 0:d], P[0:m, 0:n], C_s[0:n, 0:d], O[0:m, 0:d], False, policy_o)
        if row_max:
            for i in T.parallel(m):
                for j in T.parallel(d):
                    O[i, j] = O[i, j] * rmax[i]
        Tx.copy(D[0:m, 0:d], O[0:m, 0:d])

    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


def _chain(arch: str, m: int, n: int, k: int, d: int, threads: int, policy: bool):
    return chain(arch, m, n, k, d, threads, *(("full_row", "full_row") if policy else (None, None)))


SHAPES = {"m64n64k64d64_t128": (64, 64, 64, 64, 128, True),
          "m128n64k32d128_t256_default_policy": (128, 64, 32, 128, 256, False)}
VARIANTS, REFERENCE, TOLERANCE = {}, {}, {}
for _tag, _arch in (("sm80", "sm_80"), ("sm90", "sm_90")):
    for _name, _shape in SHAPES.items():
        _v = f"{_tag}_{_name}"
        VARIANTS[_v] = (lambda a=_arch, s=_shape: _chain(a, *s))
        # P is rounded to fp16 between the gemms, as the kernel does
        REFERENCE[_v] = lambda dd: {"D": (dd["A"].astype(np.float32) @ dd["B"].astype(np.float32).T).astype(np.float16)
                                    .astype(np.float64) @ dd["C"].astype(np.float64)}
        # S summed in another order (f32 on the tensor cores, f64 in the interpreter) can round one P element to
        # the neighbouring fp16 value: one ulp of P (~5e-4 near 1) times a row of C moves D by up to ~2e-2
        TOLERANCE[_v] = (2e-2, 2e-2)


def check(variant, model, result):
    bufs = result["buffers"]
    m, n, k, d, threads, _ = SHAPES[variant.split("_", 1)[1]]
    for name in ("S", "P", "O"):
        _support.assert_valid_fragment(name, bufs[name])
        _support.assert_replicate(name, bufs[name], 1)
    # the cast P = S needs no data from another thread: P[i, j] lives where S[i, j] does
    s_thr, p_thr = _support.block_threads(bufs["S"]), _support.block_threads(bufs["P"])
    assert np.array_equal(s_thr, p_thr), "P = S is not thread-local: P's A layout and S's accumulator differ"
    _support.assert_same_rows("S", bufs["S"], "O", bufs["O"])
    # all warps on M: a row lives in one quad of lanes of one warp
    rows = _support.row_holders(bufs["S"])
    assert all(len(r) == 4 and len({t // 32 for t in r}) == 1 for r in rows), "a row of S spans several warps"
