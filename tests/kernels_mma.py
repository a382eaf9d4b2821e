"""Kernels for the tensor-core lowering tests (TVMScript needs its source in a file)."""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx


@T.prim_func
def one_warp_mma(A: T.Buffer((16, 16), "float16"), B: T.Buffer((16, 8), "float16"), C: T.Buffer((16, 8), "float32")):
    """One m16n8k16 by hand: A through ldmatrix.x4 from shared, B packed per lane from global."""
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    S = T.alloc_buffer((256,), "float16", scope="shared")
    a = T.alloc_buffer((4,), "uint32", scope="local")
    b = T.alloc_buffer((2,), "uint32", scope="local")
    d = T.alloc_buffer((4,), "float32", scope="local")
    for i in range(8):
        S[tx * 8 + i] = A[(tx * 8 + i) // 16, (tx * 8 + i) % 16]
    T.tvm_storage_sync("shared")
    T.ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(
        a[0], a[1], a[2], a[3], T.address_of(S[(tx % 8 + 8 * (tx // 8 % 2)) * 16 + tx // 16 * 8]))
    for r in range(2):
        b[r] = T.Cast("uint32", T.reinterpret("uint16", B[(tx % 4) * 2 + 8 * r, tx // 4])) | (
            T.Cast("uint32", T.reinterpret("uint16", B[(tx % 4) * 2 + 1 + 8 * r, tx // 4])) << T.uint32(16))
    for e in range(4):
        d[e] = T.float32(0)
    T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"](
        d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b[0], b[1], d[0], d[1], d[2], d[3])
    for e in range(4):
        C[tx // 4 + 8 * (e // 2), (tx % 4) * 2 + e % 2] = d[e]


def gemm(m, n, k, threads=128, a_dtype="float16", b_dtype="float16", acc="float32", trans_a=False, trans_b=False,
         a_scope="shared", bk=None, alpha=1.0, beta=0.0, bias=False, a_from_global=False, stages=0,
         c_staged=False, accumulate=False):
    """C = alpha * A @ B (+ beta * D when ``bias``; ``bias="fragment"``: D copied into a register fragment D_f
    first, which the gemm reads): operands staged in ``a_scope`` / shared. With ``bk < k`` (or ``accumulate``) the
    accumulator is filled with 0 and a serial K loop accumulates (beta = 1) into it. ``c_staged``: C is stored
    through a shared tile C_s of the accumulator's type (dynamic shared memory) instead of directly."""
    bk = bk or k
    a_shape = (k, m) if trans_a else (m, k)
    b_shape = (n, k) if trans_b else (k, n)
    as_shape = (bk, m) if trans_a else (m, bk)
    bs_shape = (n, bk) if trans_b else (bk, n)
    steps = k // bk
    accumulate = accumulate or steps > 1
    loop_notes = {"num_stages": stages} if stages else {}

    @T.prim_func
    def kernel(A: T.Buffer(a_shape, a_dtype), B: T.Buffer(b_shape, b_dtype), D: T.Buffer((m, n), acc),
               C: T.Buffer((m, n), acc)):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        A_s = T.alloc_buffer(as_shape, a_dtype, scope=a_scope)
        B_s = T.alloc_buffer(bs_shape, b_dtype, scope="shared")
        acc_f = T.alloc_buffer((m, n), acc, scope="local.fragment")
        if c_staged:
            C_s = T.alloc_buffer((m, n), acc, scope="shared.dyn")
        if bias == "fragment":
            D_f = T.alloc_buffer((m, n), acc, scope="local.fragment")
            Tx.copy(D_f[0:m, 0:n], D[0:m, 0:n])
        if accumulate:
            Tx.fill(acc_f[0:m, 0:n], T.cast(0, acc))
        for ko in T.serial(steps, annotations=loop_notes):
            if trans_a:
                Tx.copy(A_s[0:bk, 0:m], A[ko * bk:ko * bk + bk, 0:m])
            else:
                Tx.copy(A_s[0:m, 0:bk], A[0:m, ko * bk:ko * bk + bk])
            if trans_b:
                Tx.copy(B_s[0:n, 0:bk], B[0:n, ko * bk:ko * bk + bk])
            else:
                Tx.copy(B_s[0:bk, 0:n], B[ko * bk:ko * bk + bk, 0:n])
            if accumulate:
                Tx.gemm(acc_f[0:m, 0:n], A_s[0:as_shape[0], 0:as_shape[1]], B_s[0:bs_shape[0], 0:bs_shape[1]],
                        acc_f[0:m, 0:n], trans_a, trans_b, 1.0, 1.0)
            elif a_from_global:
                Tx.gemm(acc_f[0:m, 0:n], A[0:a_shape[0], 0:a_shape[1]], B_s[0:bs_shape[0], 0:bs_shape[1]],
                        acc_f[0:m, 0:n], trans_a, trans_b, alpha, beta)
            elif bias == "fragment":
                Tx.gemm(acc_f[0:m, 0:n], A_s[0:as_shape[0], 0:as_shape[1]], B_s[0:bs_shape[0], 0:bs_shape[1]],
                        D_f[0:m, 0:n], trans_a, trans_b, alpha, beta)
            elif bias:
                Tx.gemm(acc_f[0:m, 0:n], A_s[0:as_shape[0], 0:as_shape[1]], B_s[0:bs_shape[0], 0:bs_shape[1]],
                        D[0:m, 0:n], trans_a, trans_b, alpha, beta)
            else:
                Tx.gemm(acc_f[0:m, 0:n], A_s[0:as_shape[0], 0:as_shape[1]], B_s[0:bs_shape[0], 0:bs_shape[1]],
                        acc_f[0:m, 0:n], trans_a, trans_b, alpha, beta)
        if c_staged:
            Tx.copy(C_s[0:m, 0:n], acc_f[0:m, 0:n])
            Tx.copy(C[0:m, 0:n], C_s[0:m, 0:n])
        else:
            Tx.copy(C[0:m, 0:n], acc_f[0:m, 0:n])
    return kernel


def gemm_reference(trans_a=False, trans_b=False, alpha=1.0, beta=0.0, bias=False, **_):
    """numpy's C for ``gemm`` with these settings (``check_numeric``'s reference; other ``gemm`` keywords ignored)."""
    def ref(d):
        a = d["A"].astype(np.float64)
        b = d["B"].astype(np.float64)
        a = a.T if trans_a else a
        b = b.T if trans_b else b
        out = alpha * (a @ b)
        if bias:
            out = out + beta * d["D"].astype(np.float64)
        return {"C": out}
    return ref


def gemm_b_in_registers():
    @T.prim_func
    def kernel(A: T.Buffer((64, 32), "float16"), B: T.Buffer((32, 64), "float16"), C: T.Buffer((64, 64), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        A_s = T.alloc_buffer((64, 32), "float16", scope="shared")
        B_f = T.alloc_buffer((32, 64), "float16", scope="local.fragment")
        acc_f = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
        Tx.copy(A_s[0:64, 0:32], A[0:64, 0:32])
        Tx.copy(B_f[0:32, 0:64], B[0:32, 0:64])
        Tx.gemm(acc_f[0:64, 0:64], A_s[0:64, 0:32], B_f[0:32, 0:64], acc_f[0:64, 0:64], False, False, 1.0, 0.0)
        Tx.copy(C[0:64, 0:64], acc_f[0:64, 0:64])
    return kernel


def attention_chain(m=64, n=64, k=64, d=64, threads=128, policy_s=None, policy_o=None, arch="sm_80"):
    """``S = A B^T``; a row max of S; ``P = S`` (fp16, registers); ``O = P C``; ``O *= rowmax``: the golden
    ``gemm_chain`` kernel with its row max (``policy_*``: each gemm's ``warp_policy``, None: no keyword)."""
    from cases.gemm_chain import chain
    return chain(arch, m, n, k, d, threads, policy_s, policy_o, row_max=True)
