"""A gemm with its A operand in registers (loaded from global into a fragment), B in shared memory.

It pins the instruction's A-operand fragment: mma.sync m16n8k16's A registers on sm_80 (ldmatrix order,
replicated over the warps that share rows), wgmma's RS A registers on sm_90 (each warp a 16-row slab of
every 64-row block); the copy from global fills every replica. Square policy (TileLang's default).
"""
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (maint/peer, both models, each variant compared on its own target): A_f, C_frag
and B_s equal ours as mappings on every variant (sm_80 m64n64k32_t128: 2x2 warps, A_f
`_rep * 64 + _i // 32 * 32 + _i % 8 * 4 + _j % 8 // 2`, replicate 2; sm_90: wgmma 4x1 / 4x2 warps, A_f
replicated over the N-warpgroups)."""


def _gemm_rs(arch: str, m: int, n: int, k: int, threads: int):
    @T.prim_func
    def kernel(A: T.Buffer((m, k), "float16"), B: T.Buffer((k, n), "float16"), C: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        A_f = T.alloc_buffer((m, k), "float16", scope="local.fragment")
        B_s = T.alloc_buffer((k, n), "float16", scope="shared")
        C_frag = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        Tx.copy(A_f[0:m, 0:k], A[0:m, 0:k])
        Tx.copy(B_s[0:k, 0:n], B[0:k, 0:n])
        Tx.gemm(C_frag[0:m, 0:n], A_f[0:m, 0:k], B_s[0:k, 0:n], C_frag[0:m, 0:n], False, False, T.float32(1),
                T.float32(0))
        Tx.copy(C[0:m, 0:n], C_frag[0:m, 0:n])

    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


SHAPES = {"m64n64k32_t128": (64, 64, 32, 128), "m128n128k32_t256": (128, 128, 32, 256)}
VARIANTS, REFERENCE = {}, {}
for _tag, _arch in (("sm80", "sm_80"), ("sm90", "sm_90")):
    for _name, _shape in SHAPES.items():
        _v = f"{_tag}_{_name}"
        VARIANTS[_v] = (lambda a=_arch, s=_shape: _gemm_rs(a, *s))
        REFERENCE[_v] = lambda dd: {"C": dd["A"].astype(np.float64) @ dd["B"].astype(np.float64)}


def check(variant, model, result):
    bufs = result["buffers"]
    m, n, k, threads = SHAPES[variant.split("_", 1)[1]]
    for name in ("A_f", "C_frag"):
        _support.assert_valid_fragment(name, bufs[name])
    # every thread computing accumulator row i holds row i of A (all of its K), in the PTX quad of that row
    c_rows, a_rows = _support.row_holders(bufs["C_frag"]), _support.row_holders(bufs["A_f"])
    for i, (c, a) in enumerate(zip(c_rows, a_rows)):
        assert c == a, f"row {i}: C_frag lives in {sorted(c)[:8]} but A_f in {sorted(a)[:8]}"
    a_thr = _support.thread_table(bufs["A_f"])
    i, j = np.indices((m, k))
    assert np.array_equal(a_thr % 32, np.broadcast_to((4 * (i % 8) + (j % 8) // 2)[..., None], a_thr.shape)), \
        "A_f lanes are not the PTX A-fragment lanes (4 * (row % 8) + (k % 8) // 2)"
