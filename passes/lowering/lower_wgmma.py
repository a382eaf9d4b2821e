"""Lower a gemm planned as wgmma (sm_90a) to ``wgmma.mma_async`` instructions.

Each warpgroup owns a contiguous tile of the accumulator (the ``strips`` warp tiling); per 64-row block
and k-step it issues one ``wgmma.mma_async.sync.aligned.m64nNkK`` with N the warpgroup's columns (K = 16 for
f16/bf16, 32 for fp8, 8 for tf32; fp8 and tf32 operands must be K-major, the instruction has no transpose
immediates for them):

- SS form: A and B named by shared-memory descriptors (``wgmma_desc``), whose mode and strides are solved
  against the buffers' annotated (swizzled) layouts and checked at every element of every tile;
- RS form: A from registers (four b32 per thread, packed from the A fragment, as mma.sync's A per warp).

The accumulator registers are the fragment's own (D is read and written in place, scale-d = 1 after an
explicit initialisation). Around the instructions: ``fence.proxy.async`` + barrier (shared writes by the
generic proxy become visible to the async proxy), ``wgmma.fence`` before the first, ``commit_group`` and
``wait_group 0`` after the last, so the accumulator is complete when the gemm statement ends.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx
from tvm.backend.cuda.op import cuda_cvta_generic_to_shared

from .loop_partition import LoweringError
from .lower_gemm import (WARP, GemmContext, WarpTiling, _Operand, _region_index, check_register_operand,
                         constant_offsets, pack_elements, physical_offsets, ptx_call, unpack_element)
from .mma_ptx import WgmmaInst, dtype_bits, wgmma_instruction
from .wgmma_desc import DescriptorLayout, encode_fields, solve

__all__ = ["wgmma_feasible", "lower_gemm_wgmma"]


def _tiles_and_shape(operand: _Operand, tiling: WarpTiling, inst: WgmmaInst, ksteps: int):
    """(stored tile origins, tile rows, tile cols, K-major?) of every descriptor the gemm issues."""
    tiles = []
    for g in range(tiling.warps // 4):
        w = 4 * g
        if operand.which == "A":
            for a in range(tiling.na):
                for ks in range(ksteps):
                    tiles.append(operand.storage_index(tiling.row0(w, a), ks * inst.k))
        else:
            for ks in range(ksteps):
                tiles.append(operand.storage_index(ks * inst.k, tiling.col0(w, 0)))
    tiles = sorted(set(tuple(int(x) for x in t) for t in tiles))
    k_major = operand.k_contiguous
    mn = inst.m if operand.which == "A" else inst.n
    rows, cols = (mn, inst.k) if k_major else (inst.k, mn)
    return tiles, rows, cols, k_major


def descriptor_layout(operand: _Operand, tiles: list, rows: int, cols: int,
                      ctx: GemmContext) -> DescriptorLayout | None:
    """The canonical layout every descriptor tile of ``operand`` shares (``wgmma_desc.solve``), or None.

    ``tiles``: stored origins of ``rows`` x ``cols`` tiles. tcgen05 reads the same shared-memory descriptor
    fields, so it asks here too."""
    buf = operand.buf
    offsets = constant_offsets(operand.region)
    if not buf.is_shared or len(buf.shape) != 2 or len(operand.region.squeezed_extents()) != 2 or offsets is None:
        return None
    nbytes = dtype_bits(operand.dtype) // 8
    phys = physical_offsets(buf, ctx.layouts.get(buf.name)) * nbytes
    phys = phys[offsets[0]:, offsets[1]:]
    tiles = sorted(set(tuple(int(x) for x in t) for t in tiles))
    if any(r + rows > phys.shape[0] or c + cols > phys.shape[1] for r, c in tiles):
        return None
    return solve(phys, tiles, rows, cols, operand.k_contiguous, nbytes)


def _descriptor_layout(operand: _Operand, tiling, inst, ksteps, ctx: GemmContext) -> DescriptorLayout | None:
    """The descriptor layout of every tile ``operand`` feeds this gemm's wgmmas, or None."""
    tiles, rows, cols, _ = _tiles_and_shape(operand, tiling, inst, ksteps)
    return descriptor_layout(operand, tiles, rows, cols, ctx)


def wgmma_feasible(op, tiling: WarpTiling, target, ctx: GemmContext) -> tuple[WgmmaInst | None, str]:
    """(instruction, "") when the gemm can issue wgmma, else (None, why not)."""
    arch = str(target.attrs.get("arch", ""))
    if arch != "sm_90a":
        return None, f"wgmma needs sm_90a (target {arch or target})"
    if tiling.kind != "strips":
        return None, "the accumulator does not have the wgmma layout"
    wn = tiling.n // tiling.wn
    inst = wgmma_instruction(wn, str(op.a.buffer.dtype), str(op.b.buffer.dtype), str(op.c.buffer.dtype))
    if inst is None:
        return None, "no wgmma form for these dtypes / N"
    a_sq = op.a.squeezed_extents()
    k = int(a_sq[0] if op.transpose_a else a_sq[1])
    if k % inst.k:
        return None, f"K = {k} is not a multiple of {inst.k}"
    ksteps = k // inst.k
    A = _Operand(op, op.a, "A", op.transpose_a, ctx)
    B = _Operand(op, op.b, "B", op.transpose_b, ctx)
    if B.buf.is_fragment or not B.buf.is_shared:
        return None, "B is not in shared memory"
    if _descriptor_layout(B, tiling, inst, ksteps, ctx) is None:
        return None, f"B ({B.buf.name}) has no wgmma canonical layout"
    if not inst.transposable:
        # PTX: "the matrices A and B can be transposed only for .f16 / .bf16 types" -- 8-bit operands are K-major
        for operand in (A, B):
            if not operand.k_contiguous:
                return None, (f"{operand.which} ({operand.buf.name}) is stored MN-major, but wgmma reads "
                              f"{dtype_bits(operand.dtype)}-bit operands K-major only (store it "
                              f"{'[M, K]' if operand.which == 'A' else '[N, K] and use transpose_B'} for wgmma)")
    if A.buf.is_fragment:
        if op.transpose_a:
            return None, "a register A must be K-major"
    elif _descriptor_layout(A, tiling, inst, ksteps, ctx) is None:
        return None, f"A ({A.buf.name}) has no wgmma canonical layout"
    return inst, ""


def _descriptor(operand: _Operand, layout: DescriptorLayout, stored_index: list):
    """The 64-bit descriptor of the tile starting at stored element ``stored_index``."""
    ptr = tirx.address_of(tirx.BufferLoad(operand.buf.var, _region_index(operand.region, stored_index)))
    addr = tirx.Cast("uint64", cuda_cvta_generic_to_shared(ptr))
    start = tirx.shift_right(tirx.bitwise_and(addr, tirx.const(0x3FFFF, "uint64")), tirx.const(4, "uint64"))
    return tirx.bitwise_or(start, tirx.const(encode_fields(layout), "uint64"))


def lower_gemm_wgmma(op, tiling: WarpTiling, inst: WgmmaInst, ctx: GemmContext,
                     verify: bool = True) -> tuple[tirx.Stmt, str]:
    a_sq = op.a.squeezed_extents()
    k = int(a_sq[0] if op.transpose_a else a_sq[1])
    ksteps = k // inst.k
    tx = ctx.rel_tx
    warp = tirx.floordiv(tx, WARP)
    t_in_group = tirx.floormod(tx, 128)
    A = _Operand(op, op.a, "A", op.transpose_a, ctx)
    B = _Operand(op, op.b, "B", op.transpose_b, ctx)
    b_layout = _descriptor_layout(B, tiling, inst, ksteps, ctx)
    a_layout = None if A.buf.is_fragment else _descriptor_layout(A, tiling, inst, ksteps, ctx)
    if b_layout is None or (a_layout is None and not A.buf.is_fragment):
        raise LoweringError(f"{op.describe()}: operands lost their wgmma canonical layout")
    if A.buf.is_fragment and verify:
        lay = ctx.layouts.get(A.buf.name)
        if lay is None:
            raise LoweringError(f"fragment {A.buf.name}: {op.describe()} needs its layout; run layout inference first")
        need = np.full([int(s) for s in A.buf.shape], -1, dtype=np.int64)
        for w in range(0, tiling.warps, 4):
            for a in range(tiling.na):
                r0 = tiling.row0(w, a)
                for ks in range(ksteps):
                    for t in range(128):
                        for r in range(4):
                            for p in range(inst.pack):
                                rr, kk = inst.a_element(t, r, p)
                                need[r0 + rr, ks * inst.k + kk] = w * WARP + t
        check_register_operand(op, op.a, lay, need, "A")

    wg_row = tiling.row0(warp - tirx.floormod(warp, 4), 0)      # the warpgroup's first row
    wg_col = tiling.col0(warp, 0)
    text = inst.ptx("ss")      # one mnemonic: the engine picks the ss / rs line from the A operand
    ks_var = tirx.Var(ctx.fresh("wks"), "int32")
    a_var = tirx.Var(ctx.fresh("wma"), "int32")
    stmts = []
    a_regs = None
    if A.buf.is_fragment:   # one register set per instruction: wgmma reads them asynchronously until the wait
        a_regs = tirx.decl_buffer([ksteps * tiling.na * 4], "uint32", name=ctx.fresh("wgmma_a"), scope="local")
        stmts.append(tirx.AllocBuffer(a_regs))

    def acc_ref(a, e):
        rr, cc = inst.c_element(t_in_group, e)
        return tirx.BufferLoad(op.c.buffer.var, _region_index(op.c, [wg_row + 64 * a + rr, wg_col + cc]))

    # an f16 accumulator travels as f16x2 pairs in u32 registers, packed once before the first wgmma and
    # unpacked after the wait (the asynchronous unit owns them in between)
    nregs = inst.c_elems // inst.c_pack
    c_tmp = None
    if inst.c_pack == 2:
        c_tmp = tirx.decl_buffer([tiling.na * nregs], "uint32", name=ctx.fresh("wgmma_c"), scope="local")
        stmts.append(tirx.AllocBuffer(c_tmp))

    def d_regs():
        if c_tmp is None:
            return [acc_ref(a_var, e) for e in range(inst.c_elems)]
        return [tirx.BufferLoad(c_tmp, [a_var * nregs + r]) for r in range(nregs)]

    def over_blocks(fn):
        v = tirx.Var(ctx.fresh("wpa"), "int32")
        return tirx.For(v, 0, tiling.na, tirx.ForKind.UNROLLED, tirx.SeqStmt([fn(v, r) for r in range(nregs)]))

    pack = over_blocks(lambda a, r: tirx.BufferStore(
        c_tmp, pack_elements([acc_ref(a, 2 * r), acc_ref(a, 2 * r + 1)], "float16"), [a * nregs + r])) if c_tmp is not None else None
    unpack = over_blocks(lambda a, r: tirx.SeqStmt([tirx.BufferStore(
        op.c.buffer.var, unpack_element(tirx.BufferLoad(c_tmp, [a * nregs + r]), p, "float16"),
        list(acc_ref(a, 2 * r + p).indices)) for p in range(2)])) if c_tmp is not None else None

    row = wg_row + 64 * a_var
    kk0 = ks_var * inst.k
    b_desc = _descriptor(B, b_layout, B.storage_index(kk0, wg_col))
    body = []
    if A.buf.is_fragment:
        base = (ks_var * tiling.na + a_var) * 4
        for r in range(4):
            vals = []
            for p in range(inst.pack):
                rr, kk = inst.a_element(t_in_group, r, p)
                vals.append(A.load(row + rr, kk0 + kk))
            body.append(tirx.BufferStore(a_regs, pack_elements(vals, inst.a_dtype), [base + r]))
        a_operand = [tirx.BufferLoad(a_regs, [base + r]) for r in range(4)]
        tail = [1, 1] + ([int(not B.k_contiguous)] if inst.transposable else [])    # scale-a/b, trans-b
    else:
        a_operand = [_descriptor(A, a_layout, A.storage_index(row, kk0))]
        tail = [1, 1] + ([int(not A.k_contiguous), int(not B.k_contiguous)] if inst.transposable else [])
    # the register-A form issues after its registers are written: fence them for the async unit
    if A.buf.is_fragment:
        body.append(ptx_call("wgmma.fence.sync.aligned"))
    body.append(ptx_call(text, *d_regs(), *a_operand, b_desc, tirx.const(True, "bool"), *tail))
    loop = tirx.For(a_var, 0, tiling.na, tirx.ForKind.UNROLLED, tirx.SeqStmt(body) if len(body) > 1 else body[0])
    if pack is not None:
        stmts.append(pack)
    stmts.append(ptx_call("wgmma.fence.sync.aligned"))
    stmts.append(tirx.For(ks_var, 0, ksteps, tirx.ForKind.SERIAL, loop))
    stmts.append(ptx_call("wgmma.commit_group.sync.aligned"))
    stmts.append(ptx_call("wgmma.wait_group.sync.aligned", 0))
    if unpack is not None:
        stmts.append(unpack)
    form = "RS (A in registers)" if A.buf.is_fragment else (
        f"SS (A {'K' if A.k_contiguous else 'M'}-major {_mode(a_layout)})")
    report = (f"{inst.name} x{ksteps * tiling.na} per warpgroup ({tiling.describe()}); {form}, "
              f"B {'K' if B.k_contiguous else 'N'}-major {_mode(b_layout)}")
    return tirx.SeqStmt(stmts), report


def _mode(layout: DescriptorLayout | None) -> str:
    if layout is None:
        return ""
    return {1: "128B swizzle", 2: "64B swizzle", 3: "32B swizzle", 0: "interleaved"}[layout.mode]
