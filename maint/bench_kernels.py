"""Benchmark kernels: ports of TileLang's examples (norms, softmax, reductions, gemm, dequantisation) in TIRx.

Each has a TileLang twin of the same name, shapes, dtypes, thread count and buffer names in
``maint/peer/bench_kernels_tilelang.py``, so ``maint/bench_inference.py --peer`` times both inferences on the
same kernel and compares registers per thread. ``KERNELS``: name -> zero-argument builder of a PrimFunc.
"""
from __future__ import annotations

from cases.gemm_tile import gemm_epilogue
from cases.reduce_owner_subset import reduce_lines
from maint.kernel_text import buffer_type, parse_kernel


def layernorm(m: int = 64, n: int = 1024, threads: int = 256):
    """Row layernorm without affine terms, bf16 throughout: three (m, n) fragments, two row sums."""
    tile = buffer_type(m, n, dtype="bfloat16")
    return parse_kernel(f"A: {tile}, B: {tile}", threads, f"""
    x = T.alloc_buffer(({m}, {n}), "bfloat16", scope="local.fragment")
    xc = T.alloc_buffer(({m}, {n}), "bfloat16", scope="local.fragment")
    y = T.alloc_buffer(({m}, {n}), "bfloat16", scope="local.fragment")
    mean = T.alloc_buffer(({m},), "bfloat16", scope="local.fragment")
    var = T.alloc_buffer(({m},), "bfloat16", scope="local.fragment")
    Tx.copy(x[0:{m}, 0:{n}], A[0:{m}, 0:{n}])
    Tx.sum(mean[0:{m}], x[0:{m}, 0:{n}], axes=[1])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            xc[i, j] = x[i, j] - mean[i] * T.bfloat16({1.0 / n!r})
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            y[i, j] = xc[i, j] * xc[i, j]
    Tx.sum(var[0:{m}], y[0:{m}, 0:{n}], axes=[1])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            y[i, j] = xc[i, j] / T.sqrt(var[i] * T.bfloat16({1.0 / n!r}) + T.bfloat16(1e-5))
    Tx.copy(B[0:{m}, 0:{n}], y[0:{m}, 0:{n}])""")


def rmsnorm(m: int = 32, n: int = 2048, threads: int = 128):
    """RMS norm (TileLang's rms_norm example shape of work): fp16 in and out, fp32 sum of squares."""
    tile = buffer_type(m, n, dtype="float16")
    return parse_kernel(f"A: {tile}, B: {tile}", threads, f"""
    x = T.alloc_buffer(({m}, {n}), "float16", scope="local.fragment")
    sq = T.alloc_buffer(({m}, {n}), "float32", scope="local.fragment")
    ss = T.alloc_buffer(({m},), "float32", scope="local.fragment")
    Tx.copy(x[0:{m}, 0:{n}], A[0:{m}, 0:{n}])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            sq[i, j] = T.Cast("float32", x[i, j]) * T.Cast("float32", x[i, j])
    Tx.sum(ss[0:{m}], sq[0:{m}, 0:{n}], axes=[1])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            x[i, j] = T.Cast("float16", T.Cast("float32", x[i, j]) / T.sqrt(ss[i] * T.float32({1.0 / n!r})
                                                                              + T.float32(1e-6)))
    Tx.copy(B[0:{m}, 0:{n}], x[0:{m}, 0:{n}])""")


def softmax(m: int = 128, n: int = 256, threads: int = 256):
    """Row softmax: max, exp of the difference, sum, divide (TileLang's softmax example body)."""
    tile = buffer_type(m, n, dtype="float32")
    return parse_kernel(f"A: {tile}, B: {tile}", threads, f"""
    x = T.alloc_buffer(({m}, {n}), "float32", scope="local.fragment")
    row_max = T.alloc_buffer(({m},), "float32", scope="local.fragment")
    row_sum = T.alloc_buffer(({m},), "float32", scope="local.fragment")
    Tx.copy(x[0:{m}, 0:{n}], A[0:{m}, 0:{n}])
    Tx.max(row_max[0:{m}], x[0:{m}, 0:{n}], axes=[1])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            x[i, j] = T.exp(x[i, j] - row_max[i])
    Tx.sum(row_sum[0:{m}], x[0:{m}, 0:{n}], axes=[1])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            x[i, j] = x[i, j] / row_sum[i]
    Tx.copy(B[0:{m}, 0:{n}], x[0:{m}, 0:{n}])""")


def dequant(m: int = 128, n: int = 256, threads: int = 128):
    """int8 weights times a per-row fp16 scale into an fp16 tile (the dequantisation step of a W8A16 GEMM)."""
    params = ", ".join((f"W: {buffer_type(m, n, dtype='int8')}", f"S: {buffer_type(m, dtype='float16')}",
                        f"Out: {buffer_type(m, n, dtype='float16')}"))
    return parse_kernel(params, threads, f"""
    w = T.alloc_buffer(({m}, {n}), "int8", scope="local.fragment")
    scale = T.alloc_buffer(({m},), "float16", scope="local.fragment")
    out = T.alloc_buffer(({m}, {n}), "float16", scope="local.fragment")
    Tx.copy(w[0:{m}, 0:{n}], W[0:{m}, 0:{n}])
    Tx.copy(scale[0:{m}], S[0:{m}])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            out[i, j] = T.Cast("float16", w[i, j]) * scale[i]
    Tx.copy(Out[0:{m}, 0:{n}], out[0:{m}, 0:{n}])""")


KERNELS = {
    "layernorm_64x1024_bf16_t256": layernorm,
    "rmsnorm_32x2048_fp16_t128": rmsnorm,
    "softmax_128x256_fp32_t256": softmax,
    # TileLang's reduction test and a column max; one gemm tile: the golden cases' kernels at these shapes
    "reduce_rows_128x128_t32": lambda: reduce_lines(128, 128, 32, "sum"),
    "reduce_cols_128x256_t128": lambda: reduce_lines(128, 256, 128, "max", axis=0),
    "gemm_128x128x64_fp16_t128": lambda: gemm_epilogue(128, 128, 64, 128),
    "dequant_w8_128x256_t128": dequant,
}
