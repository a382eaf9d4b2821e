"""Kernels for the tile-level select and atomic-add tests (TVMScript needs its source in a file)."""
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

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


def select_offset_region():
    @T.prim_func
    def kernel(S: T.Buffer((64, 64), "float32"), O: T.Buffer((64, 64), "float32")):
        tx = T.launch_thread("threadIdx.x", 128)
        s = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
        Tx.copy(s[0:64, 0:64], S[0:64, 0:64])
        Tx.select(s[0:32, 32:64], s[0:32, 32:64], T.float32(0), lambda i, j: i >= j)
        Tx.copy(O[0:64, 0:64], s[0:64, 0:64])
    return _on(kernel, "sm_80")


def select_reading_memory():
    @T.prim_func
    def kernel(S: T.Buffer((64, 64), "float32"), M: T.Buffer((64, 64), "int8"), O: T.Buffer((64, 64), "float32")):
        tx = T.launch_thread("threadIdx.x", 128)
        s = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
        Tx.copy(s[0:64, 0:64], S[0:64, 0:64])
        Tx.select(s[0:64, 0:64], s[0:64, 0:64], T.float32(0), lambda i, j: M[i, j] != T.int8(0))
        Tx.copy(O[0:64, 0:64], s[0:64, 0:64])
    return _on(kernel, "sm_80")
