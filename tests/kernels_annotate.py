"""TVMScript kernels for tests/test_annotate.py (TVMScript parsing needs a real source file)."""

from tvm.script import tirx as T
from tvm.tirx.layout import R, S, ComposeLayout, TileLayout, TCol, TLane, laneid, m, warpid

SEED_FRAG = TileLayout(S[(8, 2, 4, 2):(4 @ laneid, 1 @ warpid, 1 @ laneid, 1)] + R[2:4 @ warpid] + 5 @ warpid)
SWIZZLE_128B = ComposeLayout(3, 3, 3, TileLayout(S[(8, 64):(64 @ m, 1 @ m)]))
TMEM_ACC = TileLayout(S[(2, 128, 112):(112 @ TCol, 1 @ TLane, 1 @ TCol)])
ROW_MAJOR_SPELLED = TileLayout(S[(8, 16):(16, 1)])
FLAT_SPELLED = TileLayout(S[128])
COLUMN_MAJOR = TileLayout(S[(8, 16):(1, 8)])
SCALE_ATOM = TileLayout(S[(32, 16):(1 @ TLane, 1 @ TCol)] + R[4:32 @ TLane])


@T.prim_func
def two_nests(A: T.Buffer((128, 128), "float32"), B: T.Buffer((128, 128), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    frag = T.alloc_buffer((128, 128), "float32", scope="local.fragment")
    acc = T.alloc_buffer((128,), "float32", scope="local.fragment")
    for i in T.parallel(128):
        for j in T.parallel(128):
            frag[i, j] = A[i, j] * T.float32(2)
    for i in T.parallel(128):
        acc[i] = T.float32(0)
    for k in range(2):
        for i in T.parallel(128):
            for j in T.parallel(128):
                B[i, j] = frag[i, j] + acc[i]


@T.prim_func
def pinned(A: T.Buffer((8, 16), "float32"), B: T.Buffer((8, 64), "float16")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 352)
    F = T.alloc_buffer((8, 16), "float32", scope="local.fragment", layout=SEED_FRAG)
    Sm = T.alloc_buffer((8, 64), "float16", scope="shared", layout=SWIZZLE_128B)
    D1 = T.alloc_buffer((8, 16), "float32", scope="shared", layout=ROW_MAJOR_SPELLED)
    D2 = T.alloc_buffer((8, 16), "float32", scope="shared", layout=FLAT_SPELLED)
    D3 = T.alloc_buffer((8, 16), "float32", scope="shared")
    C = T.alloc_buffer((8, 16), "float32", scope="shared", layout=COLUMN_MAJOR)
    Tm = T.alloc_buffer((2, 128, 112), "float32", scope="tmem", layout=TMEM_ACC)
    for i in T.parallel(8):
        for j in T.parallel(16):
            F[i, j] = A[i, j]
            D1[i, j] = F[i, j]
            D2[i, j] = D1[i, j]
            D3[i, j] = D2[i, j]
            C[i, j] = D3[i, j]
    for i in T.parallel(8):
        for j in T.parallel(64):
            Sm[i, j] = B[i, j]


@T.prim_func
def scale_factors(A: T.Buffer((32, 16), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    SF = T.alloc_buffer((32, 16), "float32", scope="tmem", layout=SCALE_ATOM)
    for i in T.parallel(32):
        for j in T.parallel(16):
            SF[i, j] = A[i, j]


@T.prim_func(s_tir=True)
def block_style(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        with T.sblock("blk"):
            Fr = T.sblock_alloc_buffer((64,), "float32", scope="local.fragment")
            for i in T.parallel(64):
                Fr[i] = A[i]
            for i in T.parallel(64):
                B[i] = Fr[i]
