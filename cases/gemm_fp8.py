"""fp8 gemms (e4m3 / e5m2) on the instructions that take them: mma.sync m16n8k32 on sm_89 and wgmma m64nNk32
on sm_90a (SS, and RS with A in registers). The variant name starts with its target (the kernel carries it).

A is [M, K] and B is [N, K] (``transpose_B``): the K-major form wgmma requires for 8-bit operands. It pins the
8-bit fragments, which are int8's m16n8k32 ones: the accumulator lane of element (i, j) is
``4 * (i % 8) + (j % 8) // 2`` (as for 16-bit types), a register A operand's lane is
``4 * (i % 8) + (k % 16) // 4`` (four consecutive K codes per 32-bit register); sm_89 gives each warp a
contiguous block (2x2 warps, square), sm_90a each warp a 16-row slab of the warpgroup's 64 rows.
"""
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (maint/peer, both cost models; twins `gemm_fp8/*` in cases_tilelang.py, each run on
its own target, --arch sm_89 / sm_90a; maint/peer/compare.py). Where TileLang infers, it equals ours as mappings:
C_frag (sm_89: square 2x2 warps, mma.sync accumulator; sm_90a: wgmma, warp w of the warpgroup owns rows
16w..16w+15), A_s (sm_90a RS: the A registers, four fp8 codes per lane and register) and the shared tiles (64B
swizzle of the 64-byte rows; TileLang prints them as [1, row groups, offset]). Where we differ:
sm89_e5m2xe4m3_f16acc (A e5m2, B e4m3) -- TileLang refuses it ("Mixed-dtype GEMM only supports f8f6f4 family
operands currently"); PTX's .f8type line takes any e4m3/e5m2 pair, and we lower it. Like TileLang, we plan wgmma
for fp8 only when A is K-major and B is [N, K] (transpose_B)."""

E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"


def _gemm_fp8(arch: str, a_dtype: str, b_dtype: str, acc: str, m: int, n: int, k: int, threads: int,
              a_in_registers: bool):
    a_scope = "local.fragment" if a_in_registers else "shared"

    @T.prim_func
    def kernel(A: T.Buffer((m, k), a_dtype), B: T.Buffer((n, k), b_dtype), C: T.Buffer((m, n), acc)):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        A_s = T.alloc_buffer((m, k), a_dtype, scope=a_scope)
        B_s = T.alloc_buffer((n, k), b_dtype, scope="shared")
        C_frag = T.alloc_buffer((m, n), acc, scope="local.fragment")
        Tx.copy(A_s[0:m, 0:k], A[0:m, 0:k])
        Tx.copy(B_s[0:n, 0:k], B[0:n, 0:k])
        Tx.gemm(C_frag[0:m, 0:n], A_s[0:m, 0:k], B_s[0:n, 0:k], C_frag[0:m, 0:n], False, True, T.float32(1),
                T.float32(0))
        Tx.copy(C[0:m, 0:n], C_frag[0:m, 0:n])

    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


#: variant -> (arch, A dtype, B dtype, accumulator, m, n, k, threads, A in registers)
SPECS = {
    "sm89_e4m3_m64n64k64_t128": ("sm_89", E4M3, E4M3, "float32", 64, 64, 64, 128, False),
    "sm89_e5m2xe4m3_f16acc_m64n64k64_t128": ("sm_89", E5M2, E4M3, "float16", 64, 64, 64, 128, False),
    "sm90a_e4m3_ss_m64n128k64_t128": ("sm_90a", E4M3, E4M3, "float32", 64, 128, 64, 128, False),
    "sm90a_e5m2_rs_m64n64k64_t128": ("sm_90a", E5M2, E5M2, "float32", 64, 64, 64, 128, True),
}
VARIANTS, REFERENCE, TOLERANCE = {}, {}, {}
for _v, _spec in SPECS.items():
    VARIANTS[_v] = (lambda s=_spec: _gemm_fp8(*s))
    # fp8 codes decoded by ml_dtypes, the product in float64
    REFERENCE[_v] = lambda d: {"C": d["A"].astype(np.float64) @ d["B"].astype(np.float64).T}
    # f32 accumulators: fp8 products are exact in f32, only the summation order differs; an f16 accumulator
    # rounds after every k32 instruction
    TOLERANCE[_v] = (2e-2, 2e-2) if _spec[3] == "float16" else (1e-5, 1e-5)


def check(variant, model, result):
    arch, _, _, _, m, n, k, threads, a_regs = SPECS[variant]
    bufs = result["buffers"]
    acc = bufs["C_frag"]
    _support.assert_valid_fragment("C_frag", acc)
    _support.assert_replicate("C_frag", acc, 1)
    thr = _support.thread_table(acc)[..., 0]
    i, j = np.indices((m, n))
    assert np.array_equal(thr % 32, 4 * (i % 8) + (j % 8) // 2), "C_frag lanes are not the PTX m16n8 C lanes"
    warp = thr // 32
    if arch == "sm_89":       # square 2x2 warps over 128 threads, M-block fastest, each a contiguous block
        want = (j // (n // 2)) * 2 + i // (m // 2)
    else:                     # wgmma: warp w of the warpgroup owns rows 16w..16w+15
        want = (i % 64) // 16
    assert np.array_equal(warp, want), f"C_frag warps differ from the {arch} instruction's warp tiling"
    if a_regs:
        a = bufs["A_s"]
        _support.assert_valid_fragment("A_s", a)
        a_thr = _support.thread_table(a)
        r, c = np.indices((m, k))
        lanes = 4 * (r % 8) + (c % 16) // 4            # four fp8 codes per register, k32 A fragment
        assert np.array_equal(a_thr % 32, np.broadcast_to(lanes[..., None], a_thr.shape)), \
            "A_s lanes are not the PTX k32 8-bit A-fragment lanes"
        c_rows, a_rows = _support.row_holders(acc), _support.row_holders(a)
        for row, (cr, ar) in enumerate(zip(c_rows, a_rows)):
            assert cr == ar, f"row {row}: C_frag lives in {sorted(cr)[:8]} but A_s in {sorted(ar)[:8]}"
    else:
        for name in ("A_s", "B_s"):
            assert bufs[name]["kind"] == "Layout", f"{name} must get a shared swizzle: {bufs[name]}"
