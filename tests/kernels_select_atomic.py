"""Kernels for the tile-level select and atomic-add tests: decorated factories, and fixed-shape kernels parsed from
text (``conftest.parse_kernel``)."""
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from conftest import buffer_type, parse_kernel
from tilelayout import lang


def _on(kernel, arch):
    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


def causal_mask(m: int = 64, n: int = 64, arch: str = "sm_80"):
    """An attention score tile masked causally: ``s = s if i >= j else -inf``, then a row max."""
    @T.prim_func
    def kernel(S: T.Buffer((m, n), "float32"), O: T.Buffer((m, n), "float32"), R: T.Buffer((m,), "float32")):
        tx = T.launch_thread("threadIdx.x", 128)
        s = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        r = T.alloc_buffer((m,), "float32", scope="local.fragment")
        Tx.copy(s[0:m, 0:n], S[0:m, 0:n])
        Tx.select(s[0:m, 0:n], s[0:m, 0:n], T.float32(-1e30), lambda i, j: i >= j)
        Tx.max(r[0:m], s[0:m, 0:n], axes=[1])
        Tx.copy(O[0:m, 0:n], s[0:m, 0:n])
        Tx.copy(R[0:m], r[0:m])
    return _on(kernel, arch)


def select_two_tiles(m: int = 64, n: int = 128, arch: str = "sm_80"):
    """Both values are tiles (a fragment and a shared tile), the predicate uses a block offset."""
    @T.prim_func
    def kernel(A: T.Buffer((2 * m, n), "float16"), B: T.Buffer((2 * m, n), "float16"),
               O: T.Buffer((2 * m, n), "float16")):
        bx = T.launch_thread("blockIdx.x", 2)
        tx = T.launch_thread("threadIdx.x", 128)
        a = T.alloc_buffer((m, n), "float16", scope="local.fragment")
        b_s = T.alloc_buffer((m, n), "float16", scope="shared")
        o = T.alloc_buffer((m, n), "float16", scope="local.fragment")
        Tx.copy(a[0:m, 0:n], A[bx * m:bx * m + m, 0:n])
        Tx.copy(b_s[0:m, 0:n], B[bx * m:bx * m + m, 0:n])
        Tx.select(o[0:m, 0:n], a[0:m, 0:n], b_s[0:m, 0:n], lambda i, j: (bx * m + i + j) % 3 == 0)
        Tx.copy(O[bx * m:bx * m + m, 0:n], o[0:m, 0:n])
    return _on(kernel, arch)


def _select_in_place(params: str, select: str):
    """A 64x64 float32 tile ``s`` copied in from S, selected in place by ``select`` (the Tx.select line), copied
    out to O, on 128 threads and no block launch."""
    return _on(parse_kernel(params, 128, f"""
    s = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(s[0:64, 0:64], S[0:64, 0:64])
    {select}
    Tx.copy(O[0:64, 0:64], s[0:64, 0:64])""", blocks=()), "sm_80")


def select_offset_region():
    return _select_in_place(f"S: {buffer_type(64, 64)}, O: {buffer_type(64, 64)}",
                            "Tx.select(s[0:32, 32:64], s[0:32, 32:64], T.float32(0), lambda i, j: i >= j)")


def select_reading_memory():
    tile = buffer_type(64, 64)
    return _select_in_place(f"S: {tile}, M: {buffer_type(64, 64, dtype='int8')}, O: {tile}",
                            "Tx.select(s[0:64, 0:64], s[0:64, 0:64], T.float32(0), lambda i, j: M[i, j] != T.int8(0))")


def dq_accumulate(batch: int = 2, seq: int = 128, heads: int = 2, dim: int = 64, bm: int = 64,
                  dtype: str = "float32", arch: str = "sm_90a"):
    """Attention backward's dQ accumulation: each block (a KV tile) computes a partial dQ tile in a fragment
    (here dO[b, rows, h, :] * scale, where scale depends on the KV block) and adds it atomically into dQ."""
    blocks = 2

    @T.prim_func
    def kernel(dO: T.Buffer((batch, seq, heads, dim), dtype), scale: T.Buffer((blocks,), dtype),
               dQ: T.Buffer((batch, seq, heads, dim), dtype)):
        bx = T.launch_thread("blockIdx.x", seq // bm)
        by = T.launch_thread("blockIdx.y", heads)
        bz = T.launch_thread("blockIdx.z", batch * blocks)
        tx = T.launch_thread("threadIdx.x", 128)
        dq = T.alloc_buffer((bm, dim), dtype, scope="local.fragment")
        Tx.copy(dq[0:bm, 0:dim], dO[bz // blocks, bx * bm:bx * bm + bm, by, 0:dim])
        for i in T.parallel(bm):
            for j in T.parallel(dim):
                dq[i, j] = dq[i, j] * scale[bz % blocks]
        lang.atomic_add(dQ[bz // blocks, bx * bm:bx * bm + bm, by, 0:dim], dq[0:bm, 0:dim])
    return _on(kernel, arch)


def atomic_into_shared(n: int = 64, arch: str = "sm_80"):
    """A fragment added atomically twice into a zeroed shared tile (a [1, 4, n] region: unit dims dropped)."""
    @T.prim_func
    def kernel(X: T.Buffer((4, n), "float32"), Y: T.Buffer((4, n), "float32")):
        tx = T.launch_thread("threadIdx.x", 128)
        f = T.alloc_buffer((4, n), "float32", scope="local.fragment")
        acc = T.alloc_shared((1, 4, n), "float32")
        Tx.copy(f[0:4, 0:n], X[0:4, 0:n])
        Tx.fill(acc[0:1, 0:4, 0:n], T.float32(0))
        lang.atomic_add(acc[0:1, 0:4, 0:n], f[0:4, 0:n])
        lang.atomic_add(acc[0, 0:4, 0:n], f[0:4, 0:n])
        Tx.copy(Y[0:4, 0:n], acc[0, 0:4, 0:n])
    return _on(kernel, arch)


def atomic_shape_mismatch():
    return _on(parse_kernel(f"X: {buffer_type(64, 64)}, Y: {buffer_type(64, 32)}", 128, """
    f = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(f[0:64, 0:64], X[0:64, 0:64])
    lang.atomic_add(Y[0:64, 0:32], f[0:64, 0:64])""", blocks=()), "sm_80")
