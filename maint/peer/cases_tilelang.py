"""TileLang twins of every case in ``cases/``, for ``shared/peer/tilelang_peer.py`` (dev only).

Each kernel mirrors one ``cases/<case>.py`` variant: same shapes, dtypes, thread counts and
buffer names, written in TileLang's front end (``T.copy(src, dst)``, ``T.Parallel``,
``T.alloc_fragment``). KERNELS keys are ``"<case>/<variant>"`` so the peer's output lines up
with our snapshots. Run with the peer venv's Python, never from the project's tests.
"""
import tilelang.language as T


def _roundtrip(m, n, dtype, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), dtype), B: T.Tensor((m, n), dtype)):
        with T.Kernel(1, threads=threads):
            frag = T.alloc_fragment((m, n), dtype)
            T.copy(A, frag)
            T.copy(frag, B)
    return main


def _broadcast(rows, cols, threads):
    @T.prim_func
    def main(S: T.Tensor((rows,), T.float32), Out: T.Tensor((rows, cols), T.float32)):
        with T.Kernel(1, threads=threads):
            s_frag = T.alloc_fragment((rows,), T.float32)
            T.copy(S, s_frag)
            for i, j in T.Parallel(rows, cols):
                Out[i, j] = s_frag[i] * 2.0
    return main


def _transposed(m, n, dtype, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), dtype), B: T.Tensor((n, m), dtype)):
        with T.Kernel(1, threads=threads):
            frag = T.alloc_fragment((m, n), dtype)
            T.copy(A, frag)
            for i, j in T.Parallel(m, n):
                B[j, i] = frag[i, j]
    return main


def _chain(m, n, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), T.float16), B: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            x16 = T.alloc_fragment((m, n), T.float16)
            x32 = T.alloc_fragment((m, n), T.float32)
            T.copy(A, x16)
            for i, j in T.Parallel(m, n):
                x32[i, j] = x16[i, j].astype(T.float32) * 2.0
            T.copy(x32, B)
    return main


def _widening_copy(m, n, src, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), src), B: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            acc = T.alloc_fragment((m, n), T.float32)
            T.copy(A, acc)
            T.copy(acc, B)
    return main


def _softmaxish(m, n, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), T.float32), B: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((m, n), T.float32)
            row_max = T.alloc_fragment((m,), T.float32)
            y = T.alloc_fragment((m, n), T.float32)
            T.copy(A, x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(m, n):
                y[i, j] = x[i, j] - row_max[i]
            T.copy(y, B)
    return main


def _tiled(m, n, bm, bn, dtype, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), dtype), B: T.Tensor((m, n), dtype)):
        with T.Kernel(T.ceildiv(n, bn), T.ceildiv(m, bm), threads=threads) as (bx, by):
            frag = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], frag)
            T.copy(frag, B[by * bm, bx * bn])
    return main


def _staged(m, n, dtype, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), dtype), B: T.Tensor((m, n), dtype)):
        with T.Kernel(1, threads=threads):
            smem = T.alloc_shared((m, n), dtype)
            frag = T.alloc_fragment((m, n), dtype)
            T.copy(A, smem)
            T.copy(smem, frag)
            T.copy(frag, B)
    return main


def _mixed_read(small, full, threads):
    @T.prim_func
    def main(C: T.Tensor((full,), T.float32)):
        with T.Kernel(1, threads=threads):
            frag = T.alloc_fragment((full,), T.float32)
            T.clear(frag)
            for i in T.Parallel(small):
                frag[i] = 5.0
            for i in T.Parallel(full):
                C[i] = frag[i] + 1.0
    return main


def _mixed_write(small, full, threads):
    @T.prim_func
    def main(C: T.Tensor((full,), T.float32)):
        with T.Kernel(1, threads=threads):
            frag = T.alloc_fragment((full,), T.float32)
            T.clear(frag)
            for i in T.Parallel(small):
                frag[i] = 7.0
            for i in T.Parallel(full):
                frag[i] = 5.0
            for i in T.Parallel(full):
                C[i] = frag[i]
    return main


def _const_pair(m, n, threads):
    @T.prim_func
    def main(S: T.Tensor((2,), T.float32), A: T.Tensor((m, n), T.float32),
             Out: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            s = T.alloc_fragment((2,), T.float32)
            T.copy(S, s)
            for i, j in T.Parallel(m, n):
                Out[i, j] = A[i, j] * s[0] + s[1]
    return main


def _adjacent_rows(m, n, threads):
    @T.prim_func
    def main(V: T.Tensor((m + 1,), T.float32), A: T.Tensor((m, n), T.float32),
             Out: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            r = T.alloc_fragment((m + 1,), T.float32)
            T.copy(V, r)
            for i, j in T.Parallel(m, n):
                Out[i, j] = A[i, j] * (r[i + 1] - r[i])
    return main


def _register_spill(m, n, threads):
    @T.prim_func
    def main(V: T.Tensor((m + 1,), T.float32), A: T.Tensor((m, n), T.float32), B: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            r = T.alloc_fragment((m + 1,), T.float32)
            x = T.alloc_fragment((m, n), T.float32)
            y = T.alloc_fragment((m, n), T.float32)
            T.copy(V, r)
            T.copy(A, x)
            for i, j in T.Parallel(m, n):
                y[i, j] = x[i, j] * (r[i + 1] - r[i])
            T.copy(y, B)
    return main


def _pinned_mma():
    pin = T.Fragment([128, 128],
                     forward_thread_fn=lambda i, j: i // 64 * 64 + j // 64 * 32 + i % 8 * 4 + j % 8 // 2,
                     forward_index_fn=lambda i, j: i % 64 // 16 * 32 + j % 64 // 8 * 4 + i % 16 // 8 * 2 + j % 2)

    @T.prim_func
    def main(A: T.Tensor((128, 128), T.float32), B: T.Tensor((128, 128), T.float32)):
        with T.Kernel(1, threads=128):
            acc = T.alloc_fragment((128, 128), T.float32)
            tmp = T.alloc_fragment((128, 128), T.float32)
            T.annotate_layout({acc: pin})
            T.copy(A, acc)
            for i, j in T.Parallel(128, 128):
                tmp[i, j] = acc[i, j] * 0.5
            T.copy(tmp, B)
    return main


def _ragged(n, threads):
    @T.prim_func
    def main(X: T.Tensor((1, n), T.float32), Y: T.Tensor((1, n), T.float32)):
        with T.Kernel(1, threads=threads):
            frag = T.alloc_fragment((1, n), T.float32)
            for i, j in T.Parallel(1, n):
                frag[i, j] = X[i, j] * 2.0
            T.copy(frag, Y)
    return main


def _ragged_copy(n, threads):
    @T.prim_func
    def main(X: T.Tensor((1, n), T.float32), Y: T.Tensor((1, n), T.float32)):
        with T.Kernel(1, threads=threads):
            frag = T.alloc_fragment((1, n), T.float32)
            T.copy(X, frag)
            T.copy(frag, Y)
    return main


def _gemm(m, n, k, threads):
    @T.prim_func
    def main(A: T.Tensor((m, k), T.float16), B: T.Tensor((k, n), T.float16),
             C: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((m, k), T.float16)
            B_s = T.alloc_shared((k, n), T.float16)
            C_frag = T.alloc_fragment((m, n), T.float32)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_frag, clear_accum=True)  # ours: alpha 1, beta 0
            for i, j in T.Parallel(m, n):
                C_frag[i, j] = C_frag[i, j] * 2.0
            T.copy(C_frag, C)
    return main


def _scale_columns(m, n, threads):
    @T.prim_func
    def main(W: T.Tensor((n,), T.float32), X: T.Tensor((m, n), T.float32),
             Out: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            w = T.alloc_fragment((n,), T.float32)
            T.copy(W, w)
            for i, j in T.Parallel(m, n):
                Out[i, j] = X[i, j] * w[j]
    return main


KERNELS = {
    "elementwise_copy/fp16_128x128_t128": lambda: _roundtrip(128, 128, T.float16, 128),
    "elementwise_copy/fp32_64x256_t256": lambda: _roundtrip(64, 256, T.float32, 256),
    "fp8_copy/128x256_t128": lambda: _roundtrip(128, 256, T.float8_e4m3, 128),
    "fp8_copy/64x128_t64": lambda: _roundtrip(64, 128, T.float8_e4m3, 64),
    "broadcast_read/issue1729_2x2560_t256": lambda: _broadcast(2, 2560, 256),
    "broadcast_read/rows4_cols1024_t128": lambda: _broadcast(4, 1024, 128),
    "transposed_store/fp32_128x128_t128": lambda: _transposed(128, 128, T.float32, 128),
    "transposed_store/fp16_64x256_t128": lambda: _transposed(64, 256, T.float16, 128),
    "mixed_dtype_chain/128x128_t128": lambda: _chain(128, 128, 128),
    "mixed_dtype_chain/64x512_t256": lambda: _chain(64, 512, 256),
    "mixed_dtype_copy/fp16_to_fp32_128x128_t128": lambda: _widening_copy(128, 128, T.float16, 128),
    "mixed_dtype_copy/bf16_to_fp32_64x256_t256": lambda: _widening_copy(64, 256, T.bfloat16, 256),
    "reduce_broadcast/64x128_t128": lambda: _softmaxish(64, 128, 128),
    "reduce_broadcast/128x256_t256": lambda: _softmaxish(128, 256, 256),
    "offset_region_copy/fp16_tile64x64_t128": lambda: _tiled(256, 256, 64, 64, T.float16, 128),
    "offset_region_copy/fp32_tile32x128_t128": lambda: _tiled(128, 512, 32, 128, T.float32, 128),
    "shared_staging/fp16_64x64_t128": lambda: _staged(64, 64, T.float16, 128),
    "shared_staging/fp32_128x128_t128": lambda: _staged(128, 128, T.float32, 128),
    "mixed_extents/read_100_to_256_t128": lambda: _mixed_read(100, 256, 128),
    "mixed_extents/write_100_to_256_t128": lambda: _mixed_write(100, 256, 128),
    "two_index_read/const_pair_64x128_t128": lambda: _const_pair(64, 128, 128),
    "two_index_read/adjacent_rows_64x128_t128": lambda: _adjacent_rows(64, 128, 128),
    "ragged_extent/loop_1x229_t128": lambda: _ragged(229, 128),
    "ragged_extent/loop_1x192_t128": lambda: _ragged(192, 128),
    "ragged_extent/copy_1x229_t128": lambda: _ragged_copy(229, 128),
    "gemm_tile/m64n64k64_t128": lambda: _gemm(64, 64, 64, 128),
    "gemm_tile/m128n128k32_t128": lambda: _gemm(128, 128, 32, 128),
    "broadcast_column/m64_n128_t128": lambda: _scale_columns(64, 128, 128),
    "register_spill/m64_n128_t128": lambda: _register_spill(64, 128, 128),
    "pinned_layout/mma_pin_128x128_t128": _pinned_mma,
}


# ------------------------------------------------------------------ front-end coverage (scans, atomics, ...)

def _manual_scan(m, n, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), T.float32), B: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            F = T.alloc_fragment((m, n), T.float32)
            T.copy(A, F)
            for i in T.Parallel(m):
                for j in T.serial(1, n):
                    F[i, j] = F[i, j] + F[i, j - 1]
            T.copy(F, B)
    return main


def _cumsum_frag(m, n, threads, reverse):
    @T.prim_func
    def main(A: T.Tensor((m, n), T.float32), B: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            F = T.alloc_fragment((m, n), T.float32)
            T.copy(A, F)
            T.cumsum(F, dim=1, reverse=reverse)
            T.copy(F, B)
    return main


def _cumsum_shared(m, n, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), T.float32), B: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((m, n), T.float32)
            F = T.alloc_fragment((m, n), T.float32)
            T.copy(A, S)
            T.cumsum(S, dim=0)
            T.copy(S, F)
            T.copy(F, B)
    return main


def _split_k(m, k, splits, threads):
    kt = k // splits

    @T.prim_func
    def main(A: T.Tensor((m, k), T.float32), Out: T.Tensor((m,), T.float32)):
        with T.Kernel(splits, threads=threads) as bx:
            F = T.alloc_fragment((m, kt), T.float32)
            s = T.alloc_fragment((m,), T.float32)
            T.copy(A[0:m, bx * kt:bx * kt + kt], F)
            T.reduce_sum(F, s, dim=1)
            for i in T.Parallel(m):
                T.atomic_add(Out[i], s[i])
    return main


def _histogram(m, n, bins, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), T.int32), Hist: T.Tensor((bins,), T.int32)):
        with T.Kernel(1, threads=threads):
            H = T.alloc_shared((bins,), T.int32)
            for b in T.Parallel(bins):
                H[b] = 0
            for i, j in T.Parallel(m, n):
                T.atomic_add(H[(A[i, j] % bins + bins) % bins], 1)
            for b in T.Parallel(bins):
                Hist[b] = H[b]
    return main


KERNELS.update({
    "row_scan/manual_f32_128x128_t128": lambda: _manual_scan(128, 128, 128),
    "row_scan/cumsum_f32_64x32_t64": lambda: _cumsum_frag(64, 32, 64, False),
    "row_scan/cumsum_reverse_f32_64x32_t128": lambda: _cumsum_frag(64, 32, 128, True),
    "row_scan/cumsum_shared_dim0_f32_32x64_t64": lambda: _cumsum_shared(32, 64, 64),
    "atomic_accumulate/split_k_rowsum_64x256_k4_t128": lambda: _split_k(64, 256, 4, 128),
    "atomic_accumulate/shared_histogram_64x64_b16_t128": lambda: _histogram(64, 64, 16, 128),
})


def _grouped(m, n, group, threads):
    g = n // group

    @T.prim_func
    def main(B: T.Tensor((m, n), T.float32), Out: T.Tensor((m, g), T.float32)):
        with T.Kernel(1, threads=threads):
            acc = T.alloc_fragment((m, g), T.float32)
            T.fill(acc, 0)
            for i, j in T.Parallel(m, n):
                acc[i, j // group] += B[i, j]
            T.copy(acc, Out)
    return main


KERNELS.update({
    "grouped_accumulation/issue1374_16x448_g32_t128": lambda: _grouped(16, 448, 32, 128),
    "grouped_accumulation/rows64x128_g4_t128": lambda: _grouped(64, 128, 4, 128),
})
