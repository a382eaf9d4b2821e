"""TVMScript kernels for tests/test_frontend_coverage.py: PrimFunc factories, most parsed from text without the
launch lines every kernel repeats (``conftest.parse_kernel``); those whose Python builds the body stay decorated."""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from conftest import buffer_type, parse_kernel, parse_main
from tilelayout import lang

# kernels that are also golden cases are imported from them, not repeated here
from cases.atomic_accumulate import _histogram, split_k  # noqa: F401
from cases.row_scan import manual_scan  # noqa: F401
from cases.dynamic_tiles import _staged_2d


def column_scan_3d(threads: int):
    """A serial loop over the middle dimension of a 3-D fragment: rows (b, :, c) live in one thread."""
    return parse_kernel(f"A: {buffer_type(4, 16, 8)}, B: {buffer_type(4, 16, 8)}", threads, """
    F = T.alloc_buffer((4, 16, 8), "float32", scope="local.fragment")
    Tx.copy(F[0:4, 0:16, 0:8], A[0:4, 0:16, 0:8])
    for b in T.parallel(4):
        for c in T.parallel(8):
            for j in T.serial(15):
                F[b, 15 - j - 1, c] = F[b, 15 - j - 1, c] * T.float32(0.5) + F[b, 15 - j, c]
    Tx.copy(B[0:4, 0:16, 0:8], F[0:4, 0:16, 0:8])""")


def scan_out_of_bounds():
    return parse_kernel(f"A: {buffer_type(32, 16)}, B: {buffer_type(32, 16)}", 32, """
    F = T.alloc_buffer((32, 16), "float32", scope="local.fragment")
    Tx.copy(F[0:32, 0:16], A[0:32, 0:16])
    for i in T.parallel(32):
        for j in T.serial(16):
            F[i, j] = F[i, j] + F[i, j - 1]
    Tx.copy(B[0:32, 0:16], F[0:32, 0:16])""")


def _scan(shape: tuple, threads: int, scans: tuple, dtype: str = "float32", shared: bool = False,
          spare: bool = False, into_other: bool = False, scale: bool = False):
    """``A -> tile -> lang.cumsum`` along each ``(dim, reverse)`` of ``scans`` ``-> B``; the tile is the fragment F
    or, with ``shared``, the shared tile S. ``spare``: a second fragment G of F's shape (``into_other``: the scan
    writes G, which is copied out); ``scale``: F doubled by a parallel nest after the scans."""
    def scan_all(tile):
        for dim, reverse in scans:
            lang.cumsum(tile, dim=dim, reverse=reverse)

    @T.prim_func
    def kernel(A: T.Buffer(shape, dtype), B: T.Buffer(shape, dtype)):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        if shared:
            S = T.alloc_buffer(shape, dtype, scope="shared")
            Tx.copy(S, A)
            scan_all(S)
            Tx.copy(B, S)
        else:
            F = T.alloc_buffer(shape, dtype, scope="local.fragment")
            if spare:
                G = T.alloc_buffer(shape, dtype, scope="local.fragment")
            Tx.copy(F, A)
            if into_other:
                lang.cumsum(F, G, dim=scans[0][0], reverse=scans[0][1])
                Tx.copy(B, G)
            else:
                scan_all(F)
                if scale:
                    for i in T.parallel(shape[0]):
                        for j in T.parallel(shape[1]):
                            F[i, j] = F[i, j] * T.float32(2.0)
                Tx.copy(B, F)
    return kernel


def cumsum(m: int, n: int, threads: int, dim: int, reverse: bool, into_other: bool = False):
    """lang.cumsum of a fragment F in place, or into a second fragment G."""
    return _scan((m, n), threads, ((dim, reverse),), spare=True, into_other=into_other)


def cumsum_shared_in_place(m: int, n: int, threads: int, dim: int, reverse: bool):
    """lang.cumsum of a shared tile into itself (each line of the tile scanned by one thread)."""
    return _scan((m, n), threads, ((dim, reverse),), shared=True)


def cumsum_1d_fragment(n: int, threads: int, reverse: bool, dtype: str = "float32"):
    """lang.cumsum of a whole 1-D fragment (one row)."""
    return _scan((n,), threads, ((0, reverse),), dtype)


def cumsum_twice(m: int, n: int, threads: int):
    """A forward then a reversed lang.cumsum of one fragment, then an elementwise use of it."""
    return _scan((m, n), threads, ((1, False), (1, True)), scale=True)


def cumsum_1d(n: int, threads: int):
    """lang.cumsum of a 1-D shared tile."""
    return _scan((n,), threads, ((0, False),), shared=True)


def histogram(m: int, n: int, bins: int, threads: int, shared: bool):
    if shared:
        return _histogram(m, n, bins, threads)      # the golden case's kernel
    params = f"A: {buffer_type(m, n, dtype='int32')}, Hist: {buffer_type(bins, dtype='int32')}"
    return parse_kernel(params, threads, f"""
    for i in T.parallel({m // 2}):
        for j in T.parallel({n}):
            lang.atomic_add(Hist[(A[bx * {m // 2} + i, j] % {bins} + {bins}) % {bins}], 1)""", blocks=2)


def tvm_atomic_add(m: int, n: int, threads: int):
    """TVM's own spelling: T.cuda.atomic_add(T.address_of(dst), value)."""
    return parse_kernel(f"A: {buffer_type(m, n)}, Out: {buffer_type(m)}", threads, f"""
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            T.cuda.atomic_add(T.address_of(Out[i]), A[i, j])""")


def atomic_minmax(m: int, n: int, threads: int):
    params = f"A: {buffer_type(m, n, dtype='int32')}, Mx: {buffer_type(m, dtype='int32')}, " \
        f"Mn: {buffer_type(m, dtype='int32')}"
    return parse_kernel(params, threads, f"""
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            lang.atomic_max(Mx[i], A[i, j])
            lang.atomic_min(Mn[i], A[i, j])""")


def atomic_on_fragment():
    return parse_kernel(f"A: {buffer_type(32)}", 32, """
    F = T.alloc_buffer((32,), "float32", scope="local.fragment")
    Tx.fill(F[0:32], T.float32(0))
    for i in T.parallel(32):
        T.cuda.atomic_add(T.address_of(F[i]), A[i])
    Tx.copy(A[0:32], F[0:32])""")


def row_softmax_2d_block(m: int, n: int, x: int, y: int):
    """Rows minus their max with threads=(x, y); C records each thread's (ty, tx) components."""
    params = f"A: {buffer_type(m, n)}, B: {buffer_type(m, n)}, C: {buffer_type(y, x, dtype='int32')}"
    return parse_kernel(params, (x, y), f"""
    F = T.alloc_buffer(({m}, {n}), "float32", scope="local.fragment")
    s = T.alloc_buffer(({m},), "float32", scope="local.fragment")
    Tx.copy(F[0:{m}, 0:{n}], A[0:{m}, 0:{n}])
    Tx.max(s[0:{m}], F[0:{m}, 0:{n}], axes=[1])
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            F[i, j] = F[i, j] - s[i]
    Tx.copy(B[0:{m}, 0:{n}], F[0:{m}, 0:{n}])
    C[ty, tx] = ty * 1000 + tx""")


def three_dim_block():
    """Threads launched z first, then x and y (the launch lines are written out to keep that order)."""
    return parse_kernel(f"A: {buffer_type(64, 64, dtype='float16')}, B: {buffer_type(64, 64, dtype='float16')}", (), """
    tz = T.launch_thread("threadIdx.z", 2)
    tx = T.launch_thread("threadIdx.x", 16)
    ty = T.launch_thread("threadIdx.y", 4)
    F = T.alloc_buffer((64, 64), "float16", scope="local.fragment")
    S = T.alloc_shared((64, 64), "float16")
    Tx.copy(S[0:64, 0:64], A[0:64, 0:64])
    Tx.copy(F[0:64, 0:64], S[0:64, 0:64])
    for i in T.parallel(64):
        for j in T.parallel(64):
            F[i, j] = F[i, j] * T.float16(2)
    Tx.copy(B[0:64, 0:64], F[0:64, 0:64])""")


def source_first_copy():
    """TileLang's T.copy(A, frag) order carried over: copies the unwritten fragment into A."""
    return parse_kernel(f"A: {buffer_type(64, 64)}, B: {buffer_type(64, 64)}", 128, """
    frag = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    Tx.copy(A[0:64, 0:64], frag[0:64, 0:64])
    Tx.copy(B[0:64, 0:64], frag[0:64, 0:64])""")


def accumulate_without_clear():
    return parse_kernel(f"A: {buffer_type(64, 64)}, B: {buffer_type(64)}", 128, """
    frag = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
    s = T.alloc_buffer((64,), "float32", scope="local.fragment")
    Tx.copy(frag[0:64, 0:64], A[0:64, 0:64])
    for i in T.parallel(64):
        for j in T.parallel(64):
            s[i] = s[i] + frag[i, j]
    Tx.copy(B[0:64], s[0:64])""")


def grouped_accumulation(m: int, n: int, group: int, threads: int):
    """TileLang #1374: ``acc[i, j // group] += B[i, j]``: every group of iterations updates one element."""
    g = n // group
    return parse_kernel(f"B: {buffer_type(m, n)}, Out: {buffer_type(m, g)}", threads, f"""
    acc = T.alloc_buffer(({m}, {g}), "float32", scope="local.fragment")
    Tx.fill(acc[0:{m}, 0:{g}], T.float32(0))
    for i in T.parallel({m}):
        for j in T.parallel({n}):
            acc[i, j // {group}] = acc[i, j // {group}] + B[i, j]
    Tx.copy(Out[0:{m}, 0:{g}], acc[0:{m}, 0:{g}])""")


def composites():
    """memset, unary_reduce (exp with bias/scale, sum), binary_reduce, binary_chain (reversed), reduce_negate."""
    tile, row = buffer_type(64, 32), buffer_type(64)
    return parse_main(f"A: {tile}, B: {tile}, C: {row}, D: {row}, E: {row}, G2: {tile}", threads=64, name="comp",
                      body="""
    F = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    G = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    H = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
    r = T.alloc_buffer((64,), "float32", scope="local.fragment")
    q = T.alloc_buffer((64,), "float32", scope="local.fragment")
    n = T.alloc_buffer((64,), "float32", scope="local.fragment")
    Tx.copy(F[0:64, 0:32], A[0:64, 0:32])
    Tx.memset(H[0:64, 0:32], T.float32(0.5))
    Tx.unary_reduce(G[0:64, 0:32], r[0:64], F[0:64, 0:32], "exp", "sum", T.float32(1.0), T.float32(0.5), [1])
    Tx.binary_reduce(H[0:64, 0:32], q[0:64], F[0:64, 0:32], H[0:64, 0:32], "mul", "max", [1])
    Tx.binary_chain(G[0:64, 0:32], F[0:64, 0:32], G[0:64, 0:32], T.float32(2), "sub", "mul", True)
    Tx.reduce_negate(n[0:64], F[0:64, 0:32], "min", [1], False)
    Tx.copy(B[0:64, 0:32], G[0:64, 0:32])
    Tx.copy(G2[0:64, 0:32], H[0:64, 0:32])
    Tx.copy(C[0:64], r[0:64])
    Tx.copy(D[0:64], q[0:64])
    Tx.copy(E[0:64], n[0:64])""")


def select_op():
    return parse_kernel(f"A: {buffer_type(16, 16)}, B: {buffer_type(16, 16)}", 32, """
    F = T.alloc_buffer((16, 16), "float32", scope="local.fragment")
    G = T.alloc_buffer((16, 16), "float32", scope="local.fragment")
    Tx.copy(F[0:16, 0:16], A[0:16, 0:16])
    Tx.select(G[0:16, 0:16], F[0:16, 0:16], T.float32(0), lambda i, j: i >= j)
    Tx.copy(B[0:16, 0:16], G[0:16, 0:16])""")


def reduce_negate_accum():
    return parse_kernel(f"A: {buffer_type(16, 16)}, B: {buffer_type(16)}", 32, """
    F = T.alloc_buffer((16, 16), "float32", scope="local.fragment")
    r = T.alloc_buffer((16,), "float32", scope="local.fragment")
    Tx.copy(F[0:16, 0:16], A[0:16, 0:16])
    Tx.fill(r[0:16], T.float32(0))
    Tx.reduce_negate(r[0:16], F[0:16, 0:16], "max", [1], True)
    Tx.copy(B[0:16], r[0:16])""")


def row_reductions_by_serial_loop():
    """TileLang's reduce_absmax / reduce_abssum / reduce_bitor spelled with a serial loop inside a parallel
    nest (each row in one thread)."""
    params = f"A: {buffer_type(32, 16)}, Bits: {buffer_type(32, 16, dtype='int32')}, Mx: {buffer_type(32)}, " \
        f"Sm: {buffer_type(32)}, Or: {buffer_type(32, dtype='int32')}"
    return parse_kernel(params, 32, """
    F = T.alloc_buffer((32, 16), "float32", scope="local.fragment")
    I = T.alloc_buffer((32, 16), "int32", scope="local.fragment")
    mx = T.alloc_buffer((32,), "float32", scope="local.fragment")
    sm = T.alloc_buffer((32,), "float32", scope="local.fragment")
    bo = T.alloc_buffer((32,), "int32", scope="local.fragment")
    Tx.copy(F[0:32, 0:16], A[0:32, 0:16])
    Tx.copy(I[0:32, 0:16], Bits[0:32, 0:16])
    for i in T.parallel(32):
        mx[i] = T.float32(0)
        sm[i] = T.float32(0)
        bo[i] = 0
        for j in T.serial(16):
            mx[i] = T.max(mx[i], T.abs(F[i, j]))
            sm[i] = sm[i] + T.abs(F[i, j])
            bo[i] = bo[i] | I[i, j]
    Tx.copy(Mx[0:32], mx[0:32])
    Tx.copy(Sm[0:32], sm[0:32])
    Tx.copy(Or[0:32], bo[0:32])""")


def dynamic_scale():
    """Static 64x64 tiles over a symbolic number of rows m (grid ceildiv(m, 64))."""
    @T.prim_func
    def kernel(a: T.handle, b: T.handle):
        m = T.int32()
        A = T.match_buffer(a, (m, 64), "float32")
        B = T.match_buffer(b, (m, 64), "float32")
        bx = T.launch_thread("blockIdx.x", T.ceildiv(m, 64))
        tx = T.launch_thread("threadIdx.x", 128)
        F = T.alloc_buffer((64, 64), "float32", scope="local.fragment")
        Tx.copy(F[0:64, 0:64], A[bx * 64:bx * 64 + 64, 0:64])
        for i in T.parallel(64):
            for j in T.parallel(64):
                F[i, j] = F[i, j] * T.float32(2)
        Tx.copy(B[bx * 64:bx * 64 + 64, 0:64], F[0:64, 0:64])
    return kernel


def dynamic_column_sums():
    """Column sums of an (m, 32) matrix: each block reduces its 64-row tile (rows past m must read as 0) and
    adds the partial sums atomically."""
    @T.prim_func
    def kernel(a: T.handle, o: T.handle):
        m = T.int32()
        A = T.match_buffer(a, (m, 32), "float32")
        Out = T.match_buffer(o, (32,), "float32")
        bx = T.launch_thread("blockIdx.x", T.ceildiv(m, 64))
        tx = T.launch_thread("threadIdx.x", 128)
        F = T.alloc_buffer((64, 32), "float32", scope="local.fragment")
        s = T.alloc_buffer((32,), "float32", scope="local.fragment")
        Tx.copy(F[0:64, 0:32], A[bx * 64:bx * 64 + 64, 0:32])
        Tx.sum(s[0:32], F[0:64, 0:32], axes=[0])
        for j in T.parallel(32):
            lang.atomic_add(Out[j], s[j])
    return kernel


def dynamic_both():
    """Symbolic rows and columns: (m, n) with 32x32 tiles on a 2-D grid; shared staging (the golden case's)."""
    return _staged_2d(32, 64)


def reversed_atomic(m: int, k: int, threads: int):
    """Row sums added atomically in reversed row order: the loop reads the 16-times replicated ``s`` at
    ``m - 1 - i``, so its layout is a rotation of ``s``'s; only replica 0 may add."""
    return parse_kernel(f"A: {buffer_type(m, k)}, Out: {buffer_type(m)}", threads, f"""
    F = T.alloc_buffer(({m}, {k}), "float32", scope="local.fragment")
    s = T.alloc_buffer(({m},), "float32", scope="local.fragment")
    Tx.copy(F[0:{m}, 0:{k}], A[0:{m}, 0:{k}])
    Tx.sum(s[0:{m}], F[0:{m}, 0:{k}], axes=[1])
    for i in T.parallel({m}):
        lang.atomic_add(Out[i], s[{m - 1} - i])""", blocks=2)
