"""A dequantising gemm: int4 weights packed two per int8 byte, unpacked in registers and fed to the tensor cores
as the register A operand (the "Dequantization GEMM" of TileLang's README and ``examples/dequantize_gemm``,
ported as written: ``Ct = dequant(B) @ A^T`` over a pipelined K loop).

Each K step copies a tile of A and of the packed B into shared memory, copies the packed tile into the fragment
``B_local``, unpacks it with a parallel nest (``B_dequantize_local[i, j]`` is nibble ``j % 2`` of
``B_local[i, j // 2]``: a shift and a mask, then a cast to float16) and runs the gemm with the unpacked tile in
registers. Pinned:

- ``B_dequantize_local`` is the instruction's A-operand fragment (mma.sync m16n8k16 on sm_80, wgmma RS on
  sm_90a): every thread computing accumulator row i holds row i of it, in the PTX lane of its (row, k);
- ``B_local`` is held by exactly the threads that unpack it: each packed byte sits in the thread(s) holding
  both nibbles it produces, so the unpacking moves nothing between threads (no conversion, no shared round
  trip for the packed tile);
- lowered and run on the CPU, the kernel matches a numpy dequantise-and-multiply written from the definitions
  (nibble k % 2 of byte k // 2, low nibble first, as an unsigned value 0..15).
"""
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 (maint/peer twins: the README kernel with T.Pipelined and the example's unpacking
expression; both models, each variant on its own target). On sm_80 B_local, B_dequantize_local and Ct_local
equal ours as mappings (2x2 warps: B_dequantize_local is the mma.sync A fragment replicated over the two warps
that share its rows, B_local the same threads with one slot per byte); its A_shared carries the stage as an
outer dimension ([3, 128, 32]) and equals ours stage by stage as flat offsets (the 64-byte swizzle). On sm_90a
TileLang warp-specialises the pipelined loop, so its fragments have thread_range [128, 256); shifted to
[0, 128) they equal ours (wgmma RS, one warpgroup, no replica). It also lists its copy and clear loops, which
we lower as tile ops. Correct; we must match. Ours only: under io-aware every variant's accumulator store is
staged through a second version (Ct_local_cv), as in every gemm epilogue where that pays (the 128x128 ones
since registers are counted by liveness: the two versions are never wholly live together)."""


def _dequant_gemm(arch: str, m: int, n: int, k: int, bm: int, bn: int, bk: int, stages: int, threads: int):
    kp, bkp = k // 2, bk // 2

    @T.prim_func
    def kernel(A: T.Buffer((m, k), "float16"), B: T.Buffer((n, kp), "int8"), Ct: T.Buffer((n, m), "float16")):
        bx = T.launch_thread("blockIdx.x", n // bn)
        by = T.launch_thread("blockIdx.y", m // bm)
        tx = T.launch_thread("threadIdx.x", threads)
        A_shared = T.alloc_buffer((bm, bk), "float16", scope="shared")
        B_shared = T.alloc_buffer((bn, bkp), "int8", scope="shared")
        B_local = T.alloc_buffer((bn, bkp), "int8", scope="local.fragment")
        B_dequantize_local = T.alloc_buffer((bn, bk), "float16", scope="local.fragment")
        Ct_local = T.alloc_buffer((bn, bm), "float32", scope="local.fragment")
        Tx.fill(Ct_local[0:bn, 0:bm], T.float32(0))
        for ko in T.serial(k // bk, annotations={"num_stages": stages}):
            Tx.copy(A_shared[0:bm, 0:bk], A[by * bm:by * bm + bm, ko * bk:ko * bk + bk])
            Tx.copy(B_shared[0:bn, 0:bkp], B[bx * bn:bx * bn + bn, ko * bkp:ko * bkp + bkp])
            Tx.copy(B_local[0:bn, 0:bkp], B_shared[0:bn, 0:bkp])
            for i in T.parallel(bn):
                for j in T.parallel(bk):
                    B_dequantize_local[i, j] = T.Cast("float16", T.bitwise_and(
                        T.shift_right(B_local[i, j // 2], T.Cast("int8", j % 2 * 4)), T.int8(15)))
            Tx.gemm(Ct_local[0:bn, 0:bm], B_dequantize_local[0:bn, 0:bk], A_shared[0:bm, 0:bk],
                    Ct_local[0:bn, 0:bm], False, True, T.float32(1), T.float32(1))
        Tx.copy(Ct[bx * bn:bx * bn + bn, by * bm:by * bm + bm], Ct_local[0:bn, 0:bm])

    return kernel.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))


#: (arch, M, N, K, block M, block N, block K, stages, threads): TileLang's example test shape (256^3, 128x128x32
#: blocks, 128 threads) on sm_80 and sm_90a, and a 64x64 block over a longer K with 2 stages
SHAPES = {
    "sm80_b128x128x32_s3_t128": ("sm_80", 256, 256, 256, 128, 128, 32, 3, 128),
    "sm90a_b128x128x32_s3_t128": ("sm_90a", 256, 256, 256, 128, 128, 32, 3, 128),
    "sm80_b64x64x64_s2_t128": ("sm_80", 128, 64, 256, 64, 64, 64, 2, 128),
}

VARIANTS = {name: (lambda s=shape: _dequant_gemm(*s)) for name, shape in SHAPES.items()}


def _reference(d: dict) -> dict:
    packed = d["B"].astype(np.int64) & 0xFF                        # the byte's bits, as 0..255
    low, high = packed & 15, packed >> 4                            # nibble 0 is the low one
    weights = np.stack([low, high], axis=-1).reshape(packed.shape[0], -1).astype(np.float64)   # (N, K)
    return {"Ct": weights @ d["A"].astype(np.float64).T}


REFERENCE = {name: _reference for name in VARIANTS}
TOLERANCE = {name: (5e-3, 5e-3) for name in VARIANTS}     # float16 output of float32 sums of exact products


def _holders(d: dict) -> np.ndarray:
    """Per element (row-major), the block threads holding it, sorted: one row per element."""
    table = _support.block_threads(d)
    return np.sort(table.reshape(-1, table.shape[-1]), axis=1)


def _distinct(rows: np.ndarray) -> bool:
    """No element is held twice by one thread: then two sorted rows are equal exactly when their sets are."""
    return rows.shape[1] < 2 or not (rows[:, 1:] == rows[:, :-1]).any()


def check(variant, model, result):
    bufs = result["buffers"]
    arch, _m, _n, _k, bm, bn, bk, _stages, threads = SHAPES[variant]
    for name in ("B_local", "B_dequantize_local", "Ct_local"):
        _support.assert_valid_fragment(name, bufs[name])
    _support.assert_replicate("Ct_local", bufs["Ct_local"], 1)
    # the unpacked tile is the gemm's A operand: accumulator row i and operand row i live in the same threads
    _support.assert_same_rows("Ct_local", bufs["Ct_local"], "B_dequantize_local", bufs["B_dequantize_local"])
    lanes = _support.thread_table(bufs["B_dequantize_local"]) % 32
    i, j = np.indices((bn, bk))
    assert np.array_equal(lanes, np.broadcast_to((4 * (i % 8) + (j % 8) // 2)[..., None], lanes.shape)), \
        "B_dequantize_local lanes are not the PTX A-fragment lanes (4 * (row % 8) + (k % 8) // 2)"
    # each packed byte is held by exactly the threads holding both nibbles it unpacks into
    # packed: (bn * bk / 2, R), element (row, col) at row * bk / 2 + col
    packed = _holders(bufs["B_local"])
    unpacked = _holders(bufs["B_dequantize_local"])          # (bn * bk, R'), element (row, k) at row * bk + k
    as_arrays = _distinct(packed) and _distinct(unpacked)
    for nibble in (0, 1):
        got = unpacked[nibble::2]                            # element (row, 2 * col + nibble), in packed order
        if as_arrays:
            same = np.zeros(len(packed), dtype=bool) if got.shape != packed.shape else (got == packed).all(axis=1)
        else:                                                # a thread holding an element twice: compare as sets
            same = np.array([set(a.tolist()) == set(b.tolist()) for a, b in zip(packed, got)], dtype=bool)
        if not same.all():
            flat = int(np.argmin(same))
            row, col = divmod(flat, bk // 2)
            raise AssertionError(f"B_local[{row}, {col}] is held by {packed[flat][:8].tolist()} but "
                                 f"B_dequantize_local[{row}, {2 * col + nibble}] by {got[flat][:8].tolist()}")
    if arch == "sm_80":
        assert bufs["A_shared"]["kind"] == "Layout", f"A_shared must get a shared swizzle: {bufs['A_shared']}"
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
