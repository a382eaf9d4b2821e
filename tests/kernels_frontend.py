"""TVMScript kernels for tests/test_frontend.py (TVMScript parsing needs a real source file)."""

from tvm.script import tirx as T
from tvm.tirx.layout import S, TileLayout, laneid
from tvm.tirx.script import tile as Tx

PINNED = TileLayout(S[(8, 16):(1 @ laneid, 1)])


@T.prim_func
def block_offsets(A: T.Buffer((256, 128), "float32"), B: T.Buffer((256, 128), "float32")):
    bx = T.launch_thread("blockIdx.x", 2)
    by = T.launch_thread("blockIdx.y", 4)
    tx = T.launch_thread("threadIdx.x", 256)
    frag = T.alloc_buffer((64, 128), "float32", scope="local.fragment")
    Tx.copy(frag[0:64, 0:128], A[by * 64:by * 64 + 64, 0:128])
    Tx.copy(B[by * 64:by * 64 + 64, bx * 64:bx * 64 + 64], frag[0:64, 0:64])


def _user_kernel(builder: str, *args):
    """A kernel of the CLI tests' user file (tests/data/cli/my_kernels.py), its builder loaded as the CLI loads it."""
    from pathlib import Path
    from tilelayout.kernel_file import load_callable
    return load_callable(f"{Path(__file__).resolve().parent / 'data' / 'cli' / 'my_kernels.py'}:{builder}")(*args)


row_max = _user_kernel("_row_shift", 128, 128, "float16", "row_max")   # B = A - rowmax(A), 128x128 fp16
staging = _user_kernel("build_staged")          # A -> shared smem -> fragment frag -> B


@T.prim_func
def gemm(A: T.Buffer((128, 64), "float16"), B: T.Buffer((128, 64), "float16"),
         C: T.Buffer((128, 128), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    As = T.alloc_buffer((128, 64), "float16", scope="shared")
    Bs = T.alloc_buffer((128, 64), "float16", scope="shared")
    acc = T.alloc_buffer((128, 128), "float32", scope="local.fragment")
    Tx.fill(acc, T.float32(0))
    Tx.copy(As, A)
    Tx.copy(Bs, B)
    Tx.gemm(acc, As, Bs, acc, False, True, 1.0, 1.0)
    Tx.copy(C, acc)


@T.prim_func
def two_indices(A: T.Buffer((64, 32), "float32"), F: T.Buffer((64, 32), "float32")):
    tx = T.launch_thread("threadIdx.x", 128)
    s = T.alloc_buffer((2,), "float32", scope="local.fragment")
    a = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    Tx.fill(s, T.float32(1))
    for i in T.parallel(64):
        for j in T.parallel(32):
            a[i, j] = A[i, j] * s[0] + s[1]
    for i in T.parallel(64):
        for j in T.parallel(16):
            F[i, j] = a[i, j * 2] + a[i, j * 2 + 1]


@T.prim_func
def one_dim(A: T.Buffer((229,), "float32"), B: T.Buffer((229,), "float32")):
    tx = T.launch_thread("threadIdx.x", 128)
    f = T.alloc_buffer((229,), "float32", scope="local.fragment")
    for i in T.parallel(229):
        f[i] = A[i]
    for i in T.parallel(229):
        B[i] = f[i] * T.float32(2)


@T.prim_func
def serial_around(A: T.Buffer((4, 128, 64), "float32"), B: T.Buffer((128, 64), "float32")):
    tx = T.launch_thread("threadIdx.x", 128)
    acc = T.alloc_buffer((128, 64), "float32", scope="local.fragment")
    tile = T.alloc_buffer((128, 64), "float32", scope="local.fragment")
    Tx.fill(acc, T.float32(0))
    for ko in range(4):
        for kk in T.unroll(2):
            Tx.copy(tile[0:128, 0:64], A[ko, 0:128, 0:64])
            for i in T.parallel(128):
                for j in T.parallel(64):
                    acc[i, j] = acc[i, j] + tile[i, j]
    Tx.copy(B, acc)


@T.prim_func
def thread_binding(A: T.Buffer((4, 64), "float32"), n: T.int32):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            f = T.alloc_buffer((64,), "float32", scope="local.fragment")
            g = T.decl_buffer((8, 8), "float32", data=f.data, scope="local.fragment")
            Tx.copy(f, A[bx, 0:64])
            for k in range(n):
                for i in T.parallel(8):
                    for j in T.parallel(8):
                        g[i, j] = g[i, j] + T.float32(1)


@T.prim_func
def unknown_op(A: T.Buffer((128,), "float32")):
    tx = T.launch_thread("threadIdx.x", 128)
    f = T.alloc_buffer((128,), "float32", scope="local.fragment")
    Tx.copy(f, A)
    Tx.select(f, f, T.float32(0), lambda i: A[i] > T.float32(3))


@T.prim_func
def elementwise(A: T.Buffer((64, 64), "float32")):
    tx = T.launch_thread("threadIdx.x", 64)
    f = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    g = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(f, A)
    Tx.exp(g, f)
    Tx.add(f, f, g)
    Tx.mul(g, f, T.float32(0.5))
    Tx.copy(A, g)


@T.prim_func
def reductions(A: T.Buffer((32, 64), "float32"), R: T.Buffer((64,), "float32")):
    tx = T.launch_thread("threadIdx.x", 32)
    f = T.alloc_buffer((32, 64), "float32", scope="local.fragment")
    colsum = T.alloc_buffer((64,), "float32", scope="local.fragment")
    rowmin = T.alloc_buffer((32, 1), "float32", scope="local.fragment")
    Tx.copy(f, A)
    Tx.sum(colsum, f, axes=0, accum=True)
    Tx.min(rowmin, f, axes=-1)
    Tx.copy(R, colsum)


@T.prim_func
def floating(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    tx = T.launch_thread("threadIdx.x", 32)
    f = T.alloc_buffer((16,), "float32", scope="local.fragment")
    loc = T.alloc_buffer((4,), "float32", scope="local")
    Tx.copy(f, A)
    if f[0] > T.float32(0):
        for k in range(4):
            loc[k] = f[k + 1]
    else:
        Tx.fill(f[8:16], T.float32(0))
    B[0] = loc[0]


@T.prim_func
def pinned_and_views(A: T.Buffer((128,), "float32")):
    tx = T.launch_thread("threadIdx.x", 32)
    frag = T.alloc_buffer((8, 16), "float32", scope="local.fragment")
    pin = T.alloc_buffer((8, 16), "float32", scope="local.fragment", layout=PINNED)
    flat = frag.view(128)
    for i in T.parallel(4, 124):
        flat[i] = A[i]
    Tx.copy(pin, frag)


@T.prim_func
def nest_with_inner(A: T.Buffer((64, 8), "float32"), B: T.Buffer((64,), "float32")):
    tx = T.launch_thread("threadIdx.x", 64)
    f = T.alloc_buffer((64, 8), "float32", scope="local.fragment")
    r = T.alloc_buffer((64,), "float32", scope="local.fragment")
    Tx.copy(f, A)
    for i in T.parallel(64, annotations={"tl.hint": 4}):
        r[i] = T.float32(0)
        for k in range(8):
            r[i] = r[i] + f[i, k]
    for i in T.parallel(64):
        B[i] = r[i]


@T.prim_func
def dup_keys(A: T.Buffer((32,), "float32")):
    tx = T.launch_thread("threadIdx.x", 32)
    f = T.alloc_buffer((32,), "float32", scope="local.fragment")
    for i in T.parallel(32):
        f[i] = A[i]
    for i in T.parallel(32):
        A[i] = f[i]
    for i in T.parallel(32):
        f[i] = f[i] * T.float32(2)


@T.prim_func
def symbolic_threads(A: T.Buffer((128,), "float32"), n: T.int32):
    tx = T.launch_thread("threadIdx.x", n)
    f = T.alloc_buffer((128,), "float32", scope="local.fragment")
    Tx.copy(f, A)


@T.prim_func
def tile_in_parallel(A: T.Buffer((4, 32), "float32")):
    tx = T.launch_thread("threadIdx.x", 32)
    f = T.alloc_buffer((32,), "float32", scope="local.fragment")
    for i in T.parallel(4):
        Tx.copy(f, A[i, 0:32])


@T.prim_func
def no_threads(A: T.Buffer((8,), "float32")):
    f = T.alloc_buffer((8,), "float32", scope="local.fragment")
    for i in T.parallel(8):
        f[i] = A[i]


@T.prim_func
def thread_y(A: T.Buffer((8,), "float32")):
    tx = T.launch_thread("threadIdx.x", 32)
    ty = T.launch_thread("threadIdx.y", 4)
    f = T.alloc_buffer((8,), "float32", scope="local.fragment")
    Tx.copy(f, A)


@T.prim_func
def with_break(A: T.Buffer((8,), "float32")):
    tx = T.launch_thread("threadIdx.x", 8)
    f = T.alloc_buffer((8,), "float32", scope="local.fragment")
    Tx.copy(f, A)
    for k in range(8):
        if f[k] > T.float32(0):
            break
    with T.While(f[1] > T.float32(0)):
        Tx.fill(f, T.float32(0))
    T.evaluate(f[2])
    x = f[3]
    A[0] = x


@T.prim_func
def symbolic_shape(a: T.handle, n: T.int32):
    A = T.match_buffer(a, (n, 64), "float32")
    tx = T.launch_thread("threadIdx.x", 64)
    f = T.alloc_buffer((64,), "float32", scope="local.fragment")
    Tx.copy(f, A[n - 1, 0:64])
