"""A GEMM tile: A, B staged in shared memory, the accumulator in registers, then an epilogue loop.

Strict level: the accumulator takes the mma.sync m16n8 layout tiled over the warps, and the shared
operands take the widest bank swizzle their rows allow; both models must agree, and the epilogue
loop must run every element in the thread that owns it (no replication, no re-layout).
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15, both cost models (maint/peer). sm_80 (mma.sync): C_frag and the epilogue
loop equal ours as mappings (make_mma_accumulator_fragment: Square 2x2 warps, each one contiguous
(m/2)x(n/2) block; not make_gemm_fragment_c). sm_90: T.gemm takes wgmma and C_frag differs from ours:
thread (i % 64) // 16 * 32 + i % 8 * 4 + j % 8 // 2, slot i // 64 * (n // 2) + j // 8 * 4 + i % 16 // 8 * 2
+ j % 2 (warp w owns rows 16w..16w+15 of each 64-row block, all columns; same lane atom); the loop follows
it. A_s, B_s equal ours on both targets as flat offsets (TileLang prints [panels, row groups, offset]):
128B swizzle for 64-element fp16 rows (B_s [32, 128] as two 64-column panels), 64B for A_s [128, 32]."""


def gemm_epilogue(m: int, n: int, k: int, threads: int):
    """``C = 2 * A @ B``, one tile (also ``maint/bench_kernels``' gemm)."""
    @T.prim_func
    def kernel(A: T.Buffer((m, k), "float16"), B: T.Buffer((k, n), "float16"), C: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        A_s = T.alloc_buffer((m, k), "float16", scope="shared")
        B_s = T.alloc_buffer((k, n), "float16", scope="shared")
        C_frag = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        Tx.copy(A_s[0:m, 0:k], A[0:m, 0:k])
        Tx.copy(B_s[0:k, 0:n], B[0:k, 0:n])
        Tx.gemm(C_frag[0:m, 0:n], A_s[0:m, 0:k], B_s[0:k, 0:n], C_frag[0:m, 0:n], False, False, 1.0, 0.0)
        for i in T.parallel(m):
            for j in T.parallel(n):
                C_frag[i, j] = C_frag[i, j] * T.float32(2)
        Tx.copy(C[0:m, 0:n], C_frag[0:m, 0:n])
    return kernel


VARIANTS = {
    "m64n64k64_t128": lambda: gemm_epilogue(64, 64, 64, 128),
    "m128n128k32_t128": lambda: gemm_epilogue(128, 128, 32, 128),
}


def check(variant, model, result):
    acc = result["buffers"]["C_frag"]
    _support.assert_valid_fragment("C_frag", acc)
    _support.assert_replicate("C_frag", acc, 1)
    (key,) = result["loops"]
    loop = result["loops"][key]
    _support.assert_covers(key, loop)
    _support.assert_owned(key, loop, "C_frag", acc, lambda i, j: (i, j))
    for name in ("A_s", "B_s"):
        assert result["buffers"][name]["kind"] == "Layout", f"{name} must get a shared swizzle: {result['buffers']}"
