"""TileLang twins of ``maint/bench_kernels.py`` (dev only; run with the peer venv's Python).

Same names, shapes, dtypes, thread counts and buffer names, in TileLang's front end (``T.copy(src, dst)``,
``T.Parallel``, ``T.reduce_*(src, dst, dim)``, ``T.alloc_fragment``).
"""
import importlib.util
from pathlib import Path

import tilelang.language as T

# the reductions and the gemm tile are the golden cases' twins (the file is loaded by path, not as a package)
_spec = importlib.util.spec_from_file_location("cases_tilelang", Path(__file__).with_name("cases_tilelang.py"))
_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cases)


def layernorm(m=64, n=1024, threads=256):
    @T.prim_func
    def main(A: T.Tensor((m, n), T.bfloat16), B: T.Tensor((m, n), T.bfloat16)):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((m, n), T.bfloat16)
            xc = T.alloc_fragment((m, n), T.bfloat16)
            y = T.alloc_fragment((m, n), T.bfloat16)
            mean = T.alloc_fragment((m,), T.bfloat16)
            var = T.alloc_fragment((m,), T.bfloat16)
            T.copy(A, x)
            T.reduce_sum(x, mean, dim=1)
            for i, j in T.Parallel(m, n):
                xc[i, j] = x[i, j] - mean[i] * T.bfloat16(1.0 / n)
            for i, j in T.Parallel(m, n):
                y[i, j] = xc[i, j] * xc[i, j]
            T.reduce_sum(y, var, dim=1)
            for i, j in T.Parallel(m, n):
                y[i, j] = xc[i, j] / T.sqrt(var[i] * T.bfloat16(1.0 / n) + T.bfloat16(1e-5))
            T.copy(y, B)
    return main


def rmsnorm(m=32, n=2048, threads=128):
    @T.prim_func
    def main(A: T.Tensor((m, n), T.float16), B: T.Tensor((m, n), T.float16)):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((m, n), T.float16)
            sq = T.alloc_fragment((m, n), T.float32)
            ss = T.alloc_fragment((m,), T.float32)
            T.copy(A, x)
            for i, j in T.Parallel(m, n):
                sq[i, j] = T.Cast(T.float32, x[i, j]) * T.Cast(T.float32, x[i, j])
            T.reduce_sum(sq, ss, dim=1)
            for i, j in T.Parallel(m, n):
                x[i, j] = T.Cast(T.float16, T.Cast(T.float32, x[i, j]) / T.sqrt(ss[i] * (1.0 / n) + 1e-6))
            T.copy(x, B)
    return main


def softmax(m=128, n=256, threads=256):
    @T.prim_func
    def main(A: T.Tensor((m, n), T.float32), B: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((m, n), T.float32)
            row_max = T.alloc_fragment((m,), T.float32)
            row_sum = T.alloc_fragment((m,), T.float32)
            T.copy(A, x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(m, n):
                x[i, j] = T.exp(x[i, j] - row_max[i])
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(m, n):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, B)
    return main


def dequant(m=128, n=256, threads=128):
    @T.prim_func
    def main(W: T.Tensor((m, n), T.int8), S: T.Tensor((m,), T.float16), Out: T.Tensor((m, n), T.float16)):
        with T.Kernel(1, threads=threads):
            w = T.alloc_fragment((m, n), T.int8)
            scale = T.alloc_fragment((m,), T.float16)
            out = T.alloc_fragment((m, n), T.float16)
            T.copy(W, w)
            T.copy(S, scale)
            for i, j in T.Parallel(m, n):
                out[i, j] = T.Cast(T.float16, w[i, j]) * scale[i]
            T.copy(out, Out)
    return main


KERNELS = {
    "layernorm_64x1024_bf16_t256": layernorm,
    "rmsnorm_32x2048_fp16_t128": rmsnorm,
    "softmax_128x256_fp32_t256": softmax,
    "reduce_rows_128x128_t32": lambda: _cases._reduce_rows(128, 128, 32, "sum"),
    "reduce_cols_128x256_t128": lambda: _cases._reduce_rows(128, 256, 128, "max", axis=0),
    "gemm_128x128x64_fp16_t128": lambda: _cases._gemm(128, 128, 64, 128),
    "dequant_w8_128x256_t128": dequant,
}
