"""Kernels of a hypothetical user, outside cases/: what the ``tilelayout`` command is tested on."""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx


@T.prim_func
def row_softmax_shift(A: T.Buffer((64, 128), "float32"), B: T.Buffer((64, 128), "float32")):
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    frag = T.alloc_buffer((64, 128), "float32", scope="local.fragment")
    mx = T.alloc_buffer((64,), "float32", scope="local.fragment")
    Tx.copy(frag[0:64, 0:128], A[0:64, 0:128])
    Tx.max(mx[0:64], frag[0:64, 0:128], axes=[1])
    for i in T.parallel(64):
        for j in T.parallel(128):
            frag[i, j] = frag[i, j] - mx[i]
    Tx.copy(B[0:64, 0:128], frag[0:64, 0:128])


def build_staged():
    """A zero-argument builder, as golden cases write them: copy through a swizzle-able shared tile."""

    @T.prim_func
    def staged(A: T.Buffer((64, 64), "float16"), B: T.Buffer((64, 64), "float16")):
        tx = T.launch_thread("threadIdx.x", 64)
        smem = T.alloc_buffer((64, 64), "float16", scope="shared.dyn")
        frag = T.alloc_buffer((64, 64), "float16", scope="local.fragment")
        Tx.copy(smem, A)
        Tx.copy(frag, smem)
        Tx.copy(B[0:64, 0:64], frag[0:64, 0:64])

    return staged


def huge_fragment():
    """256x256 float32 over 64 threads: 1024 registers per thread, far over the 255 limit."""

    @T.prim_func
    def huge(A: T.Buffer((256, 256), "float32"), B: T.Buffer((256, 256), "float32")):
        tx = T.launch_thread("threadIdx.x", 64)
        frag = T.alloc_buffer((256, 256), "float32", scope="local.fragment")
        Tx.copy(frag, A)
        Tx.copy(B, frag)

    return huge


def reference_shift(inputs):
    """numpy semantics of row_softmax_shift: subtract each row's maximum."""
    a = inputs["A"]
    return {"B": a - a.max(axis=1, keepdims=True)}


def wrong_reference(inputs):
    """A deliberately wrong reference (adds the maximum), so ``check`` must fail with exit status 1."""
    a = inputs["A"]
    return {"B": a + a.max(axis=1, keepdims=True)}


NOT_A_KERNEL = np.zeros(3)


def loop_past_fragment():
    """A parallel loop reading 128 elements of a 64-element fragment: refused with a TileLayoutError."""

    @T.prim_func
    def past(A: T.Buffer((64,), "float32"), B: T.Buffer((128,), "float32")):
        tx = T.launch_thread("threadIdx.x", 64)
        frag = T.alloc_buffer((64,), "float32", scope="local.fragment")
        Tx.copy(frag, A)
        for i in T.parallel(128):
            B[i] = frag[i]

    return past


def too_many_threads():
    """2048 threads per block: over CUDA's 1024."""

    @T.prim_func
    def wide(A: T.Buffer((2048,), "float32"), B: T.Buffer((2048,), "float32")):
        tx = T.launch_thread("threadIdx.x", 2048)
        frag = T.alloc_buffer((2048,), "float32", scope="local.fragment")
        Tx.copy(frag, A)
        Tx.copy(B, frag)

    return wide


def big_shared(scope="shared.dyn", rows=512):
    """A rows x 256 float32 shared tile staged between global buffers (512 rows: 512 KiB)."""

    @T.prim_func
    def staged(A: T.Buffer((rows, 256), "float32"), B: T.Buffer((rows, 256), "float32")):
        tx = T.launch_thread("threadIdx.x", 256)
        smem = T.alloc_buffer((rows, 256), "float32", scope=scope)
        frag = T.alloc_buffer((rows, 256), "float32", scope="local.fragment")
        Tx.copy(smem, A)
        Tx.copy(frag, smem)
        Tx.copy(B, frag)

    return staged


def offset_past_fragment():
    """A loop as long as its fragment whose index is shifted by one: out of bounds, but not because the loop
    is larger than the fragment."""

    @T.prim_func
    def shifted(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        tx = T.launch_thread("threadIdx.x", 64)
        frag = T.alloc_buffer((64,), "float32", scope="local.fragment")
        Tx.copy(frag, A)
        for i in T.parallel(64):
            B[i] = frag[i + 1]

    return shifted


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
