"""Kernels of a hypothetical user, outside cases/: what the ``tilelayout`` command is tested on."""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx


def _row_shift(m: int, n: int, dtype: str, name: str):
    """``B = A - rowmax(A)`` on an m x n tile: one template for this file's kernel and the frontend tests' fp16 one."""

    @T.prim_func
    def kernel(A: T.Buffer((m, n), dtype), B: T.Buffer((m, n), dtype)):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        frag = T.alloc_buffer((m, n), dtype, scope="local.fragment")
        mx = T.alloc_buffer((m,), dtype, scope="local.fragment")
        Tx.copy(frag[0:m, 0:n], A[0:m, 0:n])
        Tx.max(mx[0:m], frag[0:m, 0:n], axes=[1])
        for i in T.parallel(m):
            for j in T.parallel(n):
                frag[i, j] = frag[i, j] - mx[i]
        Tx.copy(B[0:m, 0:n], frag[0:m, 0:n])

    return kernel.with_attr("global_symbol", name)


row_softmax_shift = _row_shift(64, 128, "float32", "row_softmax_shift")


def _through(shape: tuple, dtype: str, threads: int, name: str, staged: str | None = None):
    """``A -> frag -> B`` over whole buffers of ``shape``; ``staged``: A goes through a shared tile ``smem`` of that
    scope first."""
    via_shared = staged is not None

    @T.prim_func
    def kernel(A: T.Buffer(shape, dtype), B: T.Buffer(shape, dtype)):
        tx = T.launch_thread("threadIdx.x", threads)
        if via_shared:
            smem = T.alloc_buffer(shape, dtype, scope=staged)
        frag = T.alloc_buffer(shape, dtype, scope="local.fragment")
        if via_shared:
            Tx.copy(smem, A)
            Tx.copy(frag, smem)
        else:
            Tx.copy(frag, A)
        Tx.copy(B, frag)

    return kernel.with_attr("global_symbol", name)


def build_staged():
    """A zero-argument builder, as golden cases write them: copy through a swizzle-able shared tile."""
    return _through((64, 64), "float16", 64, "staged", staged="shared.dyn")


def huge_fragment():
    """256x256 float32 over 64 threads: 1024 registers per thread, far over the 255 limit."""
    return _through((256, 256), "float32", 64, "huge")


def reference_shift(inputs):
    """numpy semantics of row_softmax_shift: subtract each row's maximum."""
    a = inputs["A"]
    return {"B": a - a.max(axis=1, keepdims=True)}


def wrong_reference(inputs):
    """A deliberately wrong reference (adds the maximum), so ``check`` must fail with exit status 1."""
    a = inputs["A"]
    return {"B": a + a.max(axis=1, keepdims=True)}


NOT_A_KERNEL = np.zeros(3)


def _read_past(n_out: int, shift: int, name: str):
    """A 64-element fragment copied in, then ``B[i] = frag[i + shift]`` for i below ``n_out``: past its end when
    ``n_out + shift`` > 64."""

    @T.prim_func
    def kernel(A: T.Buffer((64,), "float32"), B: T.Buffer((n_out,), "float32")):
        tx = T.launch_thread("threadIdx.x", 64)
        frag = T.alloc_buffer((64,), "float32", scope="local.fragment")
        Tx.copy(frag, A)
        for i in T.parallel(n_out):
            B[i] = frag[i + shift]

    return kernel.with_attr("global_symbol", name)


def loop_past_fragment():
    """A parallel loop reading 128 elements of a 64-element fragment: refused with a TileLayoutError."""
    return _read_past(128, 0, "past")


def too_many_threads():
    """2048 threads per block: over CUDA's 1024."""
    return _through((2048,), "float32", 2048, "wide")


def big_shared(scope="shared.dyn", rows=512):
    """A rows x 256 float32 shared tile staged between global buffers (512 rows: 512 KiB)."""
    return _through((rows, 256), "float32", 256, "staged", staged=scope)


def offset_past_fragment():
    """A loop as long as its fragment whose index is shifted by one: out of bounds, but not because the loop
    is larger than the fragment."""
    return _read_past(64, 1, "shifted")


def _huge_copy(extent):
    """Block bx copies rows [128 bx, 128 bx + 128) of a 65536 x 65536 global buffer through a fragment; ``extent``:
    the buffers' extents, 65536 (int32) or T.int64(65536)."""

    @T.prim_func
    def big(A: T.Buffer((extent, extent), "float16"), B: T.Buffer((extent, extent), "float16")):
        bx = T.launch_thread("blockIdx.x", 512)
        tx = T.launch_thread("threadIdx.x", 128)
        frag = T.alloc_buffer((128, 128), "float16", scope="local.fragment")
        Tx.copy(frag, A[bx * 128:bx * 128 + 128, 0:128])
        Tx.copy(B[bx * 128:bx * 128 + 128, 0:128], frag)

    return big


def huge_int32_buffer():
    """A 65536 x 65536 global buffer with int32 extents: its flat indices pass 2^31 and would wrap."""
    return _huge_copy(65536)


def huge_int64_buffer():
    """The same kernel with int64 extents: indexable, so inferred normally."""
    return _huge_copy(T.int64(65536))
