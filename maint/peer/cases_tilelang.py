"""TileLang twins of every case in ``cases/``, for the TileLang-side peer runner (dev only, see README.md).

Each kernel mirrors one ``cases/<case>.py`` variant: same shapes, dtypes, thread counts and
buffer names, written in TileLang's front end (``T.copy(src, dst)``, ``T.Parallel``,
``T.alloc_fragment``). KERNELS keys are ``"<case>/<variant>"`` so the peer's output lines up
with our snapshots. Run with the peer venv's Python, never from the project's tests.
"""
import tilelang.language as T


def _roundtrip(m, n, dtype, threads, staged=False, transposed=False):
    """Twin of cases/elementwise_copy.roundtrip: ``staged`` goes through ``smem``, ``transposed`` stores ``B[j, i]``."""
    out = (n, m) if transposed else (m, n)

    @T.prim_func
    def main(A: T.Tensor((m, n), dtype), B: T.Tensor(out, dtype)):
        with T.Kernel(1, threads=threads):
            if staged:
                smem = T.alloc_shared((m, n), dtype)
            frag = T.alloc_fragment((m, n), dtype)
            if staged:
                T.copy(A, smem)
                T.copy(smem, frag)
            else:
                T.copy(A, frag)
            if transposed:
                for i, j in T.Parallel(m, n):
                    B[j, i] = frag[i, j]
            else:
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


def _mixed(small, full, threads, write):
    @T.prim_func
    def main(C: T.Tensor((full,), T.float32)):
        with T.Kernel(1, threads=threads):
            frag = T.alloc_fragment((full,), T.float32)
            T.clear(frag)
            for i in T.Parallel(small):
                frag[i] = 7.0 if write else 5.0
            if write:
                for i in T.Parallel(full):
                    frag[i] = 5.0
                for i in T.Parallel(full):
                    C[i] = frag[i]
            else:
                for i in T.Parallel(full):
                    C[i] = frag[i] + 1.0
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


def _conversion_gemm_sym(n, threads):
    @T.prim_func
    def main(A: T.Tensor((n, n), T.float16), B: T.Tensor((n, n), T.float16), C: T.Tensor((n, n), T.float32)):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((n, n), T.float16)
            B_s = T.alloc_shared((n, n), T.float16)
            acc = T.alloc_fragment((n, n), T.float32)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            for i, j in T.Parallel(n, n):
                C[i, j] = acc[i, j] + acc[j, i]
    return main


def _conversion_register_sym(n, threads):
    @T.prim_func
    def main(A: T.Tensor((n, n), T.float32), B: T.Tensor((n, n), T.float32)):
        with T.Kernel(1, threads=threads):
            F = T.alloc_fragment((n, n), T.float32)
            T.copy(A, F)
            for i, j in T.Parallel(n, n):
                B[i, j] = F[i, j] * F[j, i]
    return main


def _conversion_transposed(n, threads):
    @T.prim_func
    def main(A: T.Tensor((n, n), T.float32), B: T.Tensor((n, n), T.float32)):
        with T.Kernel(1, threads=threads):
            F = T.alloc_fragment((n, n), T.float32)
            G = T.alloc_fragment((n, n), T.float32)
            H = T.alloc_fragment((n, n), T.float32)
            T.copy(A, F)
            for i, j in T.Parallel(n, n):
                G[i, j] = F[i, j] + 1.0
            for i, j in T.Parallel(n, n):
                H[i, j] = F[j, i] * G[i, j]
            T.copy(H, B)
    return main


def _conversion_two_consumers(y_thread, y_index):
    x_pin = T.Fragment([64, 64], forward_thread_fn=lambda i, j: i * 2 + j // 32, forward_index_fn=lambda i, j: j % 32)
    y_pin = T.Fragment([64, 64], forward_thread_fn=y_thread, forward_index_fn=y_index)

    @T.prim_func
    def main(A: T.Tensor((64, 64), T.float32), B1: T.Tensor((64, 64), T.float32), B2: T.Tensor((64, 64), T.float32)):
        with T.Kernel(1, threads=128):
            F = T.alloc_fragment((64, 64), T.float32)
            X = T.alloc_fragment((64, 64), T.float32)
            Y = T.alloc_fragment((64, 64), T.float32)
            T.annotate_layout({X: x_pin, Y: y_pin})
            T.copy(A, F)
            for i, j in T.Parallel(64, 64):
                X[i, j] = F[i, j] * 2.0
            for i, j in T.Parallel(64, 64):
                Y[i, j] = F[i, j] + 1.0
            T.copy(X, B1)
            T.copy(Y, B2)
    return main


def _conversion_accumulate_rows(m, n, threads):
    @T.prim_func
    def main(A: T.Tensor((m, n), T.float32), R: T.Tensor((m,), T.float32)):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((m, n), T.float32)
            r = T.alloc_fragment((m,), T.float32)
            T.fill(r, 0.0)
            T.copy(A, x)
            T.reduce_sum(x, r, dim=1, clear=False)
            T.copy(r, R)
    return main


def _attention(dim, bm, bn, threads, causal, policy=True, batch=1, heads=1, seq=0, masked=False, stages=0):
    """examples/flash_attention/example_mha_fwd_bhsd.py, serial K/V loop (TileLang's T.Pipelined with one
    stage infers the same layouts); with ``masked``, examples/blocksparse_attention as written there (mask row
    in a local array, the whole attention step under ``if block_mask[k] != 0``, T.Pipelined with
    num_stages=1): the same kernel otherwise, so one body serves both."""
    seq = seq or 2 * max(bm, bn)
    scale = (1.0 / dim) ** 0.5 * 1.44269504
    blocks = seq // bn
    shape = [batch, heads, seq, dim]
    kw = {"policy": T.GemmWarpPolicy.FullRow} if policy else {}

    @T.macro
    def step(Q_shared, K_shared, V_shared, acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale,
             scores_sum, logsum, K, V, bx, by, bz, k):
        T.copy(K[bz, by, k * bn:(k + 1) * bn, :], K_shared)
        if causal:
            for i, j in T.Parallel(bm, bn):
                acc_s[i, j] = T.if_then_else(bx * bm + i >= k * bn + j, 0, -T.infinity(T.float32))
        else:
            T.clear(acc_s)
        T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, **kw)
        T.copy(scores_max, scores_max_prev)
        T.fill(scores_max, -T.infinity(T.float32))
        T.reduce_max(acc_s, scores_max, dim=1, clear=False)
        for i in T.Parallel(bm):
            scores_max[i] = T.max(scores_max[i], scores_max_prev[i])
        for i in T.Parallel(bm):
            scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
        for i, j in T.Parallel(bm, bn):
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
        T.reduce_sum(acc_s, scores_sum, dim=1)
        for i in T.Parallel(bm):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        T.copy(acc_s, acc_s_cast)
        for i, j in T.Parallel(bm, dim):
            acc_o[i, j] *= scores_scale[i]
        T.copy(V[bz, by, k * bn:(k + 1) * bn, :], V_shared)
        T.gemm(acc_s_cast, V_shared, acc_o, **kw)

    @T.macro
    def body(Q, K, V, O, BlockSparseMask):
        with T.Kernel(T.ceildiv(seq, bm), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([bm, dim], T.float16)
            K_shared = T.alloc_shared([bn, dim], T.float16)
            V_shared = T.alloc_shared([bn, dim], T.float16)
            O_shared = T.alloc_shared([bm, dim], T.float16)
            acc_s = T.alloc_fragment([bm, bn], T.float32)
            acc_s_cast = T.alloc_fragment([bm, bn], T.float16)
            acc_o = T.alloc_fragment([bm, dim], T.float32)
            scores_max = T.alloc_fragment([bm], T.float32)
            scores_max_prev = T.alloc_fragment([bm], T.float32)
            scores_scale = T.alloc_fragment([bm], T.float32)
            scores_sum = T.alloc_fragment([bm], T.float32)
            logsum = T.alloc_fragment([bm], T.float32)
            if masked:
                block_mask = T.alloc_local([blocks], "bool")
            T.copy(Q[bz, by, bx * bm:(bx + 1) * bm, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(T.float32))
            if masked:
                for vj in T.serial(blocks):
                    block_mask[vj] = BlockSparseMask[bz, by, bx, vj]
            loop_range = T.min(T.ceildiv(seq, bn), T.ceildiv((bx + 1) * bm, bn)) if causal else T.ceildiv(seq, bn)
            if masked:
                for k in T.Pipelined(loop_range, num_stages=1):
                    if block_mask[k] != 0:
                        step(Q_shared, K_shared, V_shared, acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev,
                             scores_scale, scores_sum, logsum, K, V, bx, by, bz, k)
            else:
                for k in (T.Pipelined(loop_range, num_stages=stages) if bool(stages) else T.serial(loop_range)):
                    step(Q_shared, K_shared, V_shared, acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev,
                         scores_scale, scores_sum, logsum, K, V, bx, by, bz, k)
            for i, j in T.Parallel(bm, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, O[bz, by, bx * bm:(bx + 1) * bm, :])

    if masked:
        @T.prim_func
        def main(Q: T.Tensor(shape, T.float16), K: T.Tensor(shape, T.float16), V: T.Tensor(shape, T.float16),
                 BlockSparseMask: T.Tensor([batch, heads, seq // bm, blocks], "bool"),
                 O: T.Tensor(shape, T.float16)):
            body(Q, K, V, O, BlockSparseMask)
    else:
        @T.prim_func
        def main(Q: T.Tensor(shape, T.float16), K: T.Tensor(shape, T.float16), V: T.Tensor(shape, T.float16),
                 O: T.Tensor(shape, T.float16)):
            body(Q, K, V, O, None)
    return main


def _flash(dim, bm, bn, threads, causal, policy=True, batch=1, heads=1, stages=0):
    return _attention(dim, bm, bn, threads, causal, policy, batch, heads, stages=stages)


def _gemm_chain(m, n, k, d, threads, policy=True):
    kw = {"policy": T.GemmWarpPolicy.FullRow} if policy else {}

    @T.prim_func
    def main(A: T.Tensor((m, k), T.float16), B: T.Tensor((n, k), T.float16), C: T.Tensor((n, d), T.float16),
             D: T.Tensor((m, d), T.float32)):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((m, k), T.float16)
            B_s = T.alloc_shared((n, k), T.float16)
            C_s = T.alloc_shared((n, d), T.float16)
            S = T.alloc_fragment((m, n), T.float32)
            P = T.alloc_fragment((m, n), T.float16)
            O = T.alloc_fragment((m, d), T.float32)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(C, C_s)
            T.gemm(A_s, B_s, S, transpose_B=True, clear_accum=True, **kw)
            T.copy(S, P)
            T.gemm(P, C_s, O, clear_accum=True, **kw)
            T.copy(O, D)
    return main


def _gemm_rs(m, n, k, threads):
    @T.prim_func
    def main(A: T.Tensor((m, k), T.float16), B: T.Tensor((k, n), T.float16), C: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=threads):
            A_f = T.alloc_fragment((m, k), T.float16)
            B_s = T.alloc_shared((k, n), T.float16)
            C_frag = T.alloc_fragment((m, n), T.float32)
            T.copy(A, A_f)
            T.copy(B, B_s)
            T.gemm(A_f, B_s, C_frag, clear_accum=True)
            T.copy(C_frag, C)
    return main



def _gemm_fp8(a_dtype, b_dtype, acc, m, n, k, threads, a_in_registers):
    """cases/gemm_fp8: A [M, K], B [N, K] (transpose_B, the K-major form wgmma needs for 8-bit types)."""
    @T.prim_func
    def main(A: T.Tensor((m, k), a_dtype), B: T.Tensor((n, k), b_dtype), C: T.Tensor((m, n), acc)):
        with T.Kernel(1, threads=threads):
            if a_in_registers:
                A_s = T.alloc_fragment((m, k), a_dtype)
            else:
                A_s = T.alloc_shared((m, k), a_dtype)
            B_s = T.alloc_shared((n, k), b_dtype)
            C_frag = T.alloc_fragment((m, n), acc)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_frag, transpose_B=True, clear_accum=True)
            T.copy(C_frag, C)
    return main

KERNELS = {
    "elementwise_copy/fp16_128x128_t128": lambda: _roundtrip(128, 128, T.float16, 128),
    "elementwise_copy/fp32_64x256_t256": lambda: _roundtrip(64, 256, T.float32, 256),
    "fp8_copy/128x256_t128": lambda: _roundtrip(128, 256, T.float8_e4m3, 128),
    "fp8_copy/64x128_t64": lambda: _roundtrip(64, 128, T.float8_e4m3, 64),
    "broadcast_read/issue1729_2x2560_t256": lambda: _broadcast(2, 2560, 256),
    "broadcast_read/rows4_cols1024_t128": lambda: _broadcast(4, 1024, 128),
    "transposed_store/fp32_128x128_t128": lambda: _roundtrip(128, 128, T.float32, 128, transposed=True),
    "transposed_store/fp16_64x256_t128": lambda: _roundtrip(64, 256, T.float16, 128, transposed=True),
    "mixed_dtype_chain/128x128_t128": lambda: _chain(128, 128, 128),
    "mixed_dtype_chain/64x512_t256": lambda: _chain(64, 512, 256),
    "mixed_dtype_copy/fp16_to_fp32_128x128_t128": lambda: _widening_copy(128, 128, T.float16, 128),
    "mixed_dtype_copy/bf16_to_fp32_64x256_t256": lambda: _widening_copy(64, 256, T.bfloat16, 256),
    "reduce_broadcast/64x128_t128": lambda: _softmaxish(64, 128, 128),
    "reduce_broadcast/128x256_t256": lambda: _softmaxish(128, 256, 256),
    "offset_region_copy/fp16_tile64x64_t128": lambda: _tiled(256, 256, 64, 64, T.float16, 128),
    "offset_region_copy/fp32_tile32x128_t128": lambda: _tiled(128, 512, 32, 128, T.float32, 128),
    "shared_staging/fp16_64x64_t128": lambda: _roundtrip(64, 64, T.float16, 128, staged=True),
    "shared_staging/fp32_128x128_t128": lambda: _roundtrip(128, 128, T.float32, 128, staged=True),
    "mixed_extents/read_100_to_256_t128": lambda: _mixed(100, 256, 128, write=False),
    "mixed_extents/write_100_to_256_t128": lambda: _mixed(100, 256, 128, write=True),
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
    "conversion_symmetric/gemm_acc_m64n64k64_t128": lambda: _conversion_gemm_sym(64, 128),
    "conversion_symmetric/register_tile_64x64_t128": lambda: _conversion_register_sym(64, 128),
    "conversion_transposed/fp32_64x64_t128": lambda: _conversion_transposed(64, 128),
    "conversion_two_consumers/rows_vs_columns_64x64_t128": lambda: _conversion_two_consumers(
        lambda i, j: j * 2 + i // 32, lambda i, j: i % 32),
    "conversion_two_consumers/lane_permutation_64x64_t128": lambda: _conversion_two_consumers(
        lambda i, j: i // 16 * 32 + j // 32 * 16 + i % 16, lambda i, j: j % 32),
    "conversion_avoided/accumulate_rows_64x128_t128": lambda: _conversion_accumulate_rows(64, 128, 128),
}


def _reduce_rows(m, n, threads, reducer, axis=1):
    """Also the row and column reductions of bench_kernels_tilelang.py."""
    r = m if axis == 1 else n

    @T.prim_func
    def main(A: T.Tensor((m, n), T.float32), B: T.Tensor((r,), T.float32)):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((m, n), T.float32)
            s = T.alloc_fragment((r,), T.float32)
            T.copy(A, x)
            if reducer == "sum":
                T.reduce_sum(x, s, dim=axis)
            else:
                T.reduce_max(x, s, dim=axis)
            T.copy(s, B)
    return main


KERNELS.update({
    "reduce_owner_subset/sum_128x128_t32": lambda: _reduce_rows(128, 128, 32, "sum"),
    "reduce_owner_subset/max_64x256_t64": lambda: _reduce_rows(64, 256, 64, "max"),
    "reduce_owner_subset/max_64x256_t128": lambda: _reduce_rows(64, 256, 128, "max"),
})


# attention-class kernels: the variant name starts with the arch it is meant for (compare.py compares each
# against TileLang on that arch only)
for _arch in ("sm80", "sm90"):
    for _d, _bm, _bn, _t, _causal in ((64, 64, 64, 128, False), (64, 64, 64, 128, True), (128, 128, 128, 256, False),
                                      (128, 128, 128, 256, True), (64, 128, 128, 128, True), (128, 64, 64, 128, False)):
        _name = f"flash_attention/{_arch}_d{_d}_b{_bm}x{_bn}_t{_t}{'_causal' if _causal else ''}"
        KERNELS[_name] = (lambda d=_d, bm=_bm, bn=_bn, t=_t, c=_causal: _flash(d, bm, bn, t, c))
    KERNELS[f"flash_attention/{_arch}_d64_b64x64_t128_default_policy"] = (
        lambda: _flash(64, 64, 64, 128, False, policy=False))
    KERNELS[f"flash_attention/{_arch}_d64_b64x64_t128_stages1"] = lambda: _flash(64, 64, 64, 128, False, stages=1)
    KERNELS[f"gemm_chain/{_arch}_m64n64k64d64_t128"] = lambda: _gemm_chain(64, 64, 64, 64, 128)
    KERNELS[f"gemm_chain/{_arch}_m128n64k32d128_t256_default_policy"] = (
        lambda: _gemm_chain(128, 64, 32, 128, 256, policy=False))
    KERNELS[f"gemm_register_a/{_arch}_m64n64k32_t128"] = lambda: _gemm_rs(64, 64, 32, 128)
    KERNELS[f"gemm_register_a/{_arch}_m128n128k32_t256"] = lambda: _gemm_rs(128, 128, 32, 256)


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


def _dyn_rows_scale(tile, n, threads):
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m, n), T.float32), B: T.Tensor((m, n), T.float32)):
        with T.Kernel(T.ceildiv(m, tile), threads=threads) as bx:
            F = T.alloc_fragment((tile, n), T.float32)
            T.copy(A[bx * tile, 0], F)
            for i, j in T.Parallel(tile, n):
                F[i, j] = F[i, j] * 2.0 + 1.0
            T.copy(F, B[bx * tile, 0])
    return main


def _dyn_row_sums(tile, n, threads):
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m, n), T.float32), S: T.Tensor((m,), T.float32)):
        with T.Kernel(T.ceildiv(m, tile), threads=threads) as bx:
            F = T.alloc_fragment((tile, n), T.float32)
            s = T.alloc_fragment((tile,), T.float32)
            T.copy(A[bx * tile, 0], F)
            T.reduce_sum(F, s, dim=1)
            T.copy(s, S[bx * tile])
    return main


def _dyn_staged_2d(tile, threads):
    m = T.dynamic("m")
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((m, n), T.float16), B: T.Tensor((m, n), T.float16)):
        with T.Kernel(T.ceildiv(n, tile), T.ceildiv(m, tile), threads=threads) as (bx, by):
            S = T.alloc_shared((tile, tile), T.float16)
            F = T.alloc_fragment((tile, tile), T.float16)
            T.copy(A[by * tile, bx * tile], S)
            T.copy(S, F)
            for i, j in T.Parallel(tile, tile):
                F[i, j] = F[i, j] + 1.0
            T.copy(F, B[by * tile, bx * tile])
    return main


def _dyn_gemm_m(tile, n, k, threads):
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m, k), T.float16), B: T.Tensor((k, n), T.float16), C: T.Tensor((m, n), T.float32)):
        with T.Kernel(T.ceildiv(m, tile), threads=threads) as bx:
            A_s = T.alloc_shared((tile, k), T.float16)
            B_s = T.alloc_shared((k, n), T.float16)
            C_frag = T.alloc_fragment((tile, n), T.float32)
            T.copy(A[bx * tile, 0], A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_frag, clear_accum=True)
            T.copy(C_frag, C[bx * tile, 0])
    return main


KERNELS.update({
    "dynamic_tiles/rows_scale_64x64_t128": lambda: _dyn_rows_scale(64, 64, 128),
    "dynamic_tiles/row_sums_64x128_t128": lambda: _dyn_row_sums(64, 128, 128),
    "dynamic_tiles/staged_2d_32x32_t64": lambda: _dyn_staged_2d(32, 64),
    "dynamic_tiles/gemm_m_64x64x32_t128": lambda: _dyn_gemm_m(64, 64, 32, 128),
})


# cases/gemm_fp8 (TileLang's float8_e4m3 is TVM's float8_e4m3fn); each variant runs on its own target
# (--arch sm_89 / sm_90a)
KERNELS.update({
    "gemm_fp8/sm89_e4m3_m64n64k64_t128": lambda: _gemm_fp8(T.float8_e4m3, T.float8_e4m3, T.float32, 64, 64, 64, 128,
                                                           False),
    "gemm_fp8/sm89_e5m2xe4m3_f16acc_m64n64k64_t128": lambda: _gemm_fp8(T.float8_e5m2, T.float8_e4m3, T.float16, 64,
                                                                       64, 64, 128, False),
    "gemm_fp8/sm90a_e4m3_ss_m64n128k64_t128": lambda: _gemm_fp8(T.float8_e4m3, T.float8_e4m3, T.float32, 64, 128, 64,
                                                                128, False),
    "gemm_fp8/sm90a_e5m2_rs_m64n64k64_t128": lambda: _gemm_fp8(T.float8_e5m2, T.float8_e5m2, T.float32, 64, 64, 64,
                                                               128, True),
})


# ------------------------------------------------------------------ software pipelining (T.Pipelined)

def _gemm_pipelined(m, n, k, bk, stages, threads=128, staged_c=False):
    """A pipelined gemm tile; with ``staged_c``, examples/gemm as written: the fp16 result staged through C_s."""
    c_dtype = T.float16 if staged_c else T.float32

    @T.prim_func
    def main(A: T.Tensor((m, k), T.float16), B: T.Tensor((k, n), T.float16), C: T.Tensor((m, n), c_dtype)):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((m, bk), T.float16)
            B_s = T.alloc_shared((bk, n), T.float16)
            if staged_c:
                C_s = T.alloc_shared((m, n), T.float16)
            acc_f = T.alloc_fragment((m, n), T.float32)
            T.clear(acc_f)
            for ko in T.Pipelined(k // bk, num_stages=stages):
                T.copy(A[0:m, ko * bk:ko * bk + bk], A_s)
                T.copy(B[ko * bk:ko * bk + bk, 0:n], B_s)
                T.gemm(A_s, B_s, acc_f)
            if staged_c:
                T.copy(acc_f, C_s)
                T.copy(C_s, C)
            else:
                T.copy(acc_f, C)
    return main


def _rowsum_pipelined(m, n, bn, stages, threads=128):
    """Pipelined row sums of X; ``n=None``: a dynamic ``n``, its last tile counted by ``T.ceildiv``."""
    if n is None:
        n = T.dynamic("n")
        tiles = T.ceildiv(n, bn)
    else:
        tiles = n // bn

    @T.prim_func
    def main(X: T.Tensor((m, n), T.float32), R: T.Tensor((m,), T.float32)):
        with T.Kernel(1, threads=threads):
            X_s = T.alloc_shared((m, bn), T.float32)
            acc = T.alloc_fragment((m, bn), T.float32)
            row = T.alloc_fragment((m,), T.float32)
            T.clear(acc)
            for ko in T.Pipelined(tiles, num_stages=stages):
                T.copy(X[0:m, ko * bn:ko * bn + bn], X_s)
                for i, j in T.Parallel(m, bn):
                    acc[i, j] = acc[i, j] + X_s[i, j]
            T.reduce_sum(acc, row, dim=1)
            T.copy(row, R)
    return main


KERNELS.update({
    "gemm_pipelined/rowsum_dynamic_sm80_s3": lambda: _rowsum_pipelined(64, None, 32, 3),
    "gemm_pipelined/sm80_s2_k128": lambda: _gemm_pipelined(64, 128, 128, 32, 2),
    "gemm_pipelined/staged_c_sm80_s3_128x128": lambda: _gemm_pipelined(128, 128, 128, 32, 3, staged_c=True),
    "gemm_pipelined/staged_c_sm90a_s3_128x128": lambda: _gemm_pipelined(128, 128, 128, 32, 3, staged_c=True),
    "gemm_pipelined/sm80_s3_k96": lambda: _gemm_pipelined(64, 128, 96, 32, 3),
    "gemm_pipelined/sm80_s3_k128": lambda: _gemm_pipelined(64, 128, 128, 32, 3),
    "gemm_pipelined/sm90_s3_k128": lambda: _gemm_pipelined(64, 128, 128, 32, 3),
    "gemm_pipelined/sm90a_s2_k128": lambda: _gemm_pipelined(64, 128, 128, 32, 2),
    "gemm_pipelined/sm90a_s3_k96": lambda: _gemm_pipelined(64, 128, 96, 32, 3),
    "gemm_pipelined/rowsum_sm80_s2": lambda: _rowsum_pipelined(64, 256, 32, 2),
    "gemm_pipelined/rowsum_sm90_s3": lambda: _rowsum_pipelined(64, 256, 32, 3),
})


def _moe_topk(blocks, bm, n, k, threads):
    """TileLang's examples/topk kernel, as written there (top-k gating over a block of token rows)."""
    @T.prim_func
    def main(logits: T.Tensor((blocks * bm, n), T.float32), gates: T.Tensor((blocks * bm, k), T.float32),
             indices: T.Tensor((blocks * bm, k), T.int32)):
        with T.Kernel(blocks, threads=threads) as bx:
            scores = T.alloc_fragment((bm, n), T.float32)
            max_val = T.alloc_fragment((bm,), T.float32)
            expand_idx = T.alloc_fragment((bm, n), T.int32)
            max_idx = T.alloc_fragment((bm,), T.int32)
            T.copy(logits[bx * bm, 0], scores)
            for t in T.serial(k):
                T.fill(expand_idx, -1)
                T.reduce_max(scores, max_val, dim=1, clear=True)
                for i, j in T.Parallel(bm, n):
                    expand_idx[i, j] = T.if_then_else(max_val[i] == scores[i, j], j, expand_idx[i, j])
                T.reduce_max(expand_idx, max_idx, dim=1, clear=True)
                for i, j in T.Parallel(bm, n):
                    scores[i, j] = T.if_then_else(max_val[i] == scores[i, j], -10000.0, scores[i, j])
                for i in T.Parallel(bm):
                    gates[bx * bm + i, t] = max_val[i]
                    indices[bx * bm + i, t] = max_idx[i]
    return main


KERNELS.update({
    "moe_topk/e128_k6_b64_t128": lambda: _moe_topk(5, 64, 128, 6, 128),
    "moe_topk/e64_k8_b128_t256": lambda: _moe_topk(2, 128, 64, 8, 256),
    "moe_topk/e256_k4_b32_t128": lambda: _moe_topk(3, 32, 256, 4, 128),
})


def _fp8_quantize(row_blocks, groups, bm, group, threads, pin):
    """TileLang's examples/cast per-token (per 128-column group) fp8 cast, with |x| taken in a nest before the
    row maximum as the TIRx port has to (TIRx has no absmax reduction), so both sides infer the same program."""
    m, n = row_blocks * bm, groups * group

    @T.prim_func
    def main(X: T.Tensor((m, n), T.float32), X_fp8: T.Tensor((m, n), "float8_e4m3"),
             X_amax: T.Tensor((m, groups), T.float32)):
        with T.Kernel(row_blocks, groups, threads=threads) as (bx, by):
            y = T.alloc_fragment((bm, group), T.float32)
            y_abs = T.alloc_fragment((bm, group), T.float32)
            amax = T.alloc_fragment((bm,), T.float32)
            s = T.alloc_fragment((bm,), T.float32)
            y_q = T.alloc_fragment((bm, group), T.float32)
            y_q8 = T.alloc_fragment((bm, group), "float8_e4m3")
            if pin:
                T.annotate_layout({y: T.Fragment(y.shape, forward_thread_fn=lambda i, j: (i // (bm // 4)) * 32 + j % 32)})
            T.copy(X[bx * bm:(bx + 1) * bm, by * group:(by + 1) * group], y)
            for i, j in T.Parallel(bm, group):
                y_abs[i, j] = T.abs(y[i, j])
            T.reduce_max(y_abs, amax, dim=1)
            for i in T.Parallel(bm):
                amax[i] = T.max(amax[i], 1e-4)
                s[i] = amax[i] / 448.0
            for i, j in T.Parallel(bm, group):
                y_q[i, j] = T.clamp(y[i, j] / s[i], -448.0, 448.0)
            T.copy(y_q, y_q8)
            for i in T.Parallel(bm):
                X_amax[bx * bm + i, by] = s[i]
            T.copy(y_q8, X_fp8[bx * bm:(bx + 1) * bm, by * group:(by + 1) * group])
    return main


KERNELS.update({
    "fp8_quantize/b8_g128_t128_pinned": lambda: _fp8_quantize(2, 2, 8, 128, 128, True),
    "fp8_quantize/b8_g128_t128": lambda: _fp8_quantize(2, 2, 8, 128, 128, False),
    "fp8_quantize/b32_g128_t256": lambda: _fp8_quantize(2, 2, 32, 128, 256, False),
})


def _block_sparse(dim, bm, bn, threads, causal, seq):
    return _attention(dim, bm, bn, threads, causal, seq=seq, masked=True)


KERNELS.update({
    "block_sparse_attention/sm80_d64_b64x64_t128_causal": lambda: _block_sparse(64, 64, 64, 128, True, 256),
    "block_sparse_attention/sm90_d64_b64x64_t128_causal": lambda: _block_sparse(64, 64, 64, 128, True, 256),
    "block_sparse_attention/sm80_d128_b128x128_t256": lambda: _block_sparse(128, 128, 128, 256, False, 512),
})


def _split_kv_combine(batch, heads, num_split, dim, threads):
    """The combine kernel of TileLang's examples/deepseek_mla (and examples/flash_decoding), as written there."""
    @T.prim_func
    def main(glse: T.Tensor((batch, heads, num_split), T.float32),
             Output_partial: T.Tensor((batch, heads, num_split, dim), T.float16),
             Output: T.Tensor((batch, heads, dim), T.float16)):
        with T.Kernel(heads, batch, threads=threads) as (by, bz):
            po_local = T.alloc_fragment([dim], T.float16)
            o_accum_local = T.alloc_fragment([dim], T.float32)
            lse_local_split = T.alloc_local([1], T.float32)
            lse_logsum_local = T.alloc_local([1], T.float32)
            lse_max_local = T.alloc_local([1], T.float32)
            scale_local = T.alloc_local([1], T.float32)
            T.clear(lse_logsum_local)
            T.clear(o_accum_local)
            lse_max_local[0] = -T.infinity(T.float32)
            for k in T.serial(num_split):
                lse_max_local[0] = T.max(lse_max_local[0], glse[bz, by, k])
            for k in T.Pipelined(num_split, num_stages=1):
                lse_local_split[0] = glse[bz, by, k]
                lse_logsum_local[0] += T.exp2(lse_local_split[0] - lse_max_local[0])
            lse_logsum_local[0] = T.log2(lse_logsum_local[0]) + lse_max_local[0]
            for k in T.serial(num_split):
                for i in T.Parallel(dim):
                    po_local[i] = Output_partial[bz, by, k, i]
                lse_local_split[0] = glse[bz, by, k]
                scale_local[0] = T.exp2(lse_local_split[0] - lse_logsum_local[0])
                for i in T.Parallel(dim):
                    o_accum_local[i] += po_local[i] * scale_local[0]
            for i in T.Parallel(dim):
                Output[bz, by, i] = o_accum_local[i]
    return main


KERNELS.update({
    "split_kv_combine/mla_d512_s4_t128": lambda: _split_kv_combine(2, 4, 4, 512, 128),
    "split_kv_combine/gqa_d128_s16_t128": lambda: _split_kv_combine(2, 3, 16, 128, 128),
    "split_kv_combine/d64_s8_t64": lambda: _split_kv_combine(1, 2, 8, 64, 64),
})


# ------------------------------------------------------------------ cases/dequant_gemm (TileLang's README /
# examples/dequantize_gemm: int4 weights packed two per int8, unpacked in registers, register-A gemm)

def _dequant_gemm(m, n, k, bm, bn, bk, stages, threads):
    kp, bkp = k // 2, bk // 2

    @T.prim_func
    def main(A: T.Tensor((m, k), T.float16), B: T.Tensor((n, kp), T.int8), Ct: T.Tensor((n, m), T.float16)):
        with T.Kernel(n // bn, m // bm, threads=threads) as (bx, by):
            A_shared = T.alloc_shared((bm, bk), T.float16)
            B_shared = T.alloc_shared((bn, bkp), T.int8)
            B_local = T.alloc_fragment((bn, bkp), T.int8)
            B_dequantize_local = T.alloc_fragment((bn, bk), T.float16)
            Ct_local = T.alloc_fragment((bn, bm), T.float32)
            T.clear(Ct_local)
            for ko in T.Pipelined(k // bk, num_stages=stages):
                T.copy(A[by * bm, ko * bk], A_shared)
                T.copy(B[bx * bn, ko * bkp], B_shared)
                T.copy(B_shared, B_local)
                for i, j in T.Parallel(bn, bk):
                    B_dequantize_local[i, j] = ((B_local[i, j // 2] >> (j % 2 * 4).astype(T.int8))
                                                & T.int8(15)).astype(T.float16)
                T.gemm(B_dequantize_local, A_shared, Ct_local, transpose_B=True)
            T.copy(Ct_local, Ct[bx * bn, by * bm])
    return main


KERNELS.update({
    "dequant_gemm/sm80_b128x128x32_s3_t128": lambda: _dequant_gemm(256, 256, 256, 128, 128, 32, 3, 128),
    "dequant_gemm/sm90a_b128x128x32_s3_t128": lambda: _dequant_gemm(256, 256, 256, 128, 128, 32, 3, 128),
    "dequant_gemm/sm80_b64x64x64_s2_t128": lambda: _dequant_gemm(128, 64, 256, 64, 64, 64, 2, 128),
})


def _named_offsets_gemm(m, n, k, bm, bn, bk, stages, threads=128):
    """TileLang's tiled gemm with named offsets, as its examples write them."""
    @T.prim_func
    def main(A: T.Tensor((m, k), T.float16), B: T.Tensor((k, n), T.float16), C: T.Tensor((m, n), T.float32)):
        with T.Kernel(n // bn, m // bm, threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), T.float16)
            B_s = T.alloc_shared((bk, bn), T.float16)
            C_local = T.alloc_fragment((bm, bn), T.float32)
            row0 = by * bm
            col0 = bx * bn
            T.clear(C_local)
            for ko in T.Pipelined(k // bk, num_stages=stages):
                k0 = ko * bk
                T.copy(A[row0:row0 + bm, k0:k0 + bk], A_s)
                T.copy(B[k0:k0 + bk, col0:col0 + bn], B_s)
                T.gemm(A_s, B_s, C_local)
            T.copy(C_local, C[row0:row0 + bm, col0:col0 + bn])
    return main


def _block_sparse_gemm(m, n, k, bm, bn, bk, stages, threads=128):
    """TileLang's examples/blocksparse_gemm kernel (an int8 mask, as our twin reads it)."""
    @T.prim_func
    def main(A: T.Tensor((m, k), T.float16), B: T.Tensor((k, n), T.float16),
             BlockMask: T.Tensor((m // bm, n // bn, k // bk), T.int8), C: T.Tensor((m, n), T.float32)):
        with T.Kernel(n // bn, m // bm, threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), T.float16)
            B_s = T.alloc_shared((bk, bn), T.float16)
            C_local = T.alloc_fragment((bm, bn), T.float32)
            T.clear(C_local)
            for ko in T.Pipelined(k // bk, num_stages=stages):
                if BlockMask[by, bx, ko] != 0:
                    T.copy(A[by * bm, ko * bk], A_s)
                    T.copy(B[ko * bk, bx * bn], B_s)
                    T.gemm(A_s, B_s, C_local)
            T.copy(C_local, C[by * bm, bx * bn])
    return main


def _conv_im2col(batch, h, w, c, f, kh, stride, pad, bm, bn, bk, stages, threads=128):
    """TileLang's examples/convolution kernel (the sm_80 path: im2col by a parallel loop, weights as a view)."""
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (w + 2 * pad - kh) // stride + 1
    kk = kh * kh * c

    @T.prim_func
    def main(data: T.Tensor((batch, h, w, c), T.float16), weight: T.Tensor((kh, kh, c, f), T.float16),
             out: T.Tensor((batch, oh, ow, f), T.float32)):
        with T.Kernel(f // bn, batch * oh * ow // bm, threads=threads) as (bx, by):
            data_s = T.alloc_shared((bm, bk), T.float16)
            weight_s = T.alloc_shared((bk, bn), T.float16)
            out_local = T.alloc_fragment((bm, bn), T.float32)
            weight_flat = T.Tensor((kk, f), T.float16, weight.data)
            out_flat = T.Tensor((batch * oh * ow, f), T.float32, out.data)
            T.clear(out_local)
            for ko in T.Pipelined(kk // bk, num_stages=stages):
                for i, j in T.Parallel(bm, bk):
                    kq = ko * bk + j
                    mq = by * bm + i
                    ah = mq % (oh * ow) // ow * stride + kq // (kh * c) - pad
                    aw = mq % ow * stride + kq // c % kh - pad
                    in_bound = (ah >= 0) and (aw >= 0) and (ah < h) and (aw < w)
                    data_s[i, j] = T.if_then_else(in_bound, data[mq // (oh * ow), ah, aw, kq % c], 0)
                T.copy(weight_flat[ko * bk, bx * bn], weight_s)
                T.gemm(data_s, weight_s, out_local)
            T.copy(out_local, out_flat[by * bm, bx * bn])
    return main


KERNELS.update({
    "pipelined_indexing/sm80_named_offsets_s2": lambda: _named_offsets_gemm(128, 128, 128, 64, 64, 32, 2),
    "pipelined_indexing/sm80_block_sparse_s3": lambda: _block_sparse_gemm(128, 128, 256, 64, 64, 32, 3),
    "pipelined_indexing/sm80_conv_im2col_s2": lambda: _conv_im2col(2, 8, 8, 32, 64, 3, 1, 1, 64, 64, 32, 2),
})


def _gemv(m, n, block_m, block_n, threads, stages, reducer):
    """TileLang's examples/gemv gemv_alloc_reducer (the legacy replication="all" reducer); ``reducer=False``: the
    gemv with an ordinary fragment accumulator ``o_acc`` (what examples/gemv's reducer replaces)."""
    @T.prim_func
    def main(a: T.Tensor((m, n), T.float16), x: T.Tensor((n,), T.float16), o: T.Tensor((m,), T.float16)):
        with T.Kernel(T.ceildiv(m, block_m), threads=threads) as i0_m:
            # meta_var: the accumulator keeps its own buffer name (o_reducer / o_acc), as in cases/gemv
            if reducer:
                o_reducer = T.alloc_reducer(block_m, T.float32, replication="all")
                acc = T.meta_var(o_reducer)
            else:
                o_acc = T.alloc_fragment((block_m,), T.float32)
                acc = T.meta_var(o_acc)
            T.clear(acc)
            for i0_n in T.Pipelined(T.ceildiv(n, block_n), num_stages=stages):
                a_smem = T.alloc_shared((block_m, block_n), T.float16)
                T.copy(a[i0_m * block_m, i0_n * block_n], a_smem)
                a_frag = T.alloc_fragment((block_m, block_n), T.float16)
                T.copy(a_smem, a_frag)
                x_frag = T.alloc_fragment(block_n, T.float16)
                T.copy(x[i0_n * block_n], x_frag)
                for i1_m, i1_n in T.Parallel(block_m, block_n):
                    acc[i1_m] += a_frag[i1_m, i1_n] * x_frag[i1_n]
            if reducer:
                T.finalize_reducer(acc)
            T.copy(acc, o[i0_m * block_m])
    return main


KERNELS.update({
    "gemv/sm80_reducer_256x1024_t256": lambda: _gemv(256, 1024, 128, 128, 256, 2, True),
    "gemv/sm90a_reducer_256x1024_t128": lambda: _gemv(256, 1024, 128, 128, 128, 3, True),
})


def _grouped_gemm(sizes, k, n, bm, bn, bk, stages, threads=128):
    """TileLang's examples/grouped_gemm/example_grouped_gemm_fwd.py kernel (trans_b=False)."""
    groups, total = len(sizes), sum(sizes)
    blocks = sum(-(-s // bm) for s in sizes)

    @T.prim_func
    def main(A: T.Tensor((total, k), T.float16), B: T.Tensor((groups, k, n), T.float16),
             C: T.Tensor((total, n), T.float32), batch_sizes: T.Tensor((groups,), T.int32),
             batch_offsets: T.Tensor((groups,), T.int32), batch_padded_offsets: T.Tensor((groups,), T.int32)):
        with T.Kernel(blocks, T.ceildiv(n, bn), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), T.float16)
            B_s = T.alloc_shared((bk, bn), T.float16)
            C_local = T.alloc_fragment((bm, bn), T.float32)
            cur_batch_idx = T.alloc_var(dtype=T.int32)
            cur_batch_size = T.alloc_var(dtype=T.int32)
            m_start_padded = bx * bm
            cur_batch_idx = 0
            for i in range(groups):
                in_cur_batch_idx = m_start_padded >= batch_padded_offsets[i]
                cur_batch_idx = T.if_then_else(in_cur_batch_idx, i, cur_batch_idx)
            cur_batch_size = batch_sizes[cur_batch_idx]
            m_start = m_start_padded - batch_padded_offsets[cur_batch_idx] + batch_offsets[cur_batch_idx]
            actual_rows = T.max(0, T.min(bm, cur_batch_size + batch_padded_offsets[cur_batch_idx] - m_start_padded))
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=stages):
                T.copy(A[m_start:m_start + bm, ko * bk:(ko + 1) * bk], A_s)
                T.copy(B[cur_batch_idx, ko * bk:(ko + 1) * bk, by * bn:(by + 1) * bn], B_s)
                T.gemm(A_s, B_s, C_local)
            for i, j in T.Parallel(bm, bn):
                if i < actual_rows:
                    C[m_start + i, by * bn + j] = C_local[i, j]
    return main


KERNELS.update({
    "grouped_gemm/sm80_groups64_40_100_s2": lambda: _grouped_gemm((64, 40, 100), 128, 64, 64, 64, 32, 2),
    "grouped_gemm/sm90a_groups64_40_100_s3": lambda: _grouped_gemm((64, 40, 100), 128, 64, 64, 64, 32, 3),
})


KERNELS.update({
    "gemv/sm80_plain_256x1024_b256_t128": lambda: _gemv(256, 1024, 128, 256, 128, 2, False),
})
