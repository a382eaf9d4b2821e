"""Lowering of gemms planned as tcgen05.mma (Blackwell, sm_100a): the non-pipelined SS form, and refusals.

Why: inference plans every gemm on sm_100a / sm_103a as tcgen05.mma with its accumulator in Tensor Memory
(``passes/inference/tcgen05_plan.py``) and gives the accumulator fragment the registers ``tcgen05.ld`` fills.
mma.sync would compute the same numbers on another layout, so a plan this module cannot lower is refused
(``Tcgen05LoweringError``), never silently lowered to mma.sync.

What is lowered: a gemm statement whose operands are both in shared memory (SS), with M=128 instructions
(read out by ``tcgen05.ld.32x32b``: a row per thread) or M=64 ones (``16x256b``, blocks in the lower and upper
half subpartitions), on all the block's threads (whole warpgroups). The statement becomes:

1. ``fence.proxy.async`` + barrier: the operands written by ordinary stores become visible to the tensor core;
2. warp 0 of the gemm ``tcgen05.alloc``s the plan's columns (the address lands in a shared word) and
   relinquishes its allocation permit; thread 0 initialises an mbarrier (count 1); ``tcgen05.fence`` around a
   barrier publishes both;
3. thread 0 issues every ``tcgen05.mma`` (per K step and M/N block; the first K step with ``enable_input_d``
   false, so TMEM needs no clearing) and ``tcgen05.commit``s them to the mbarrier;
4. every thread waits on the mbarrier (parity 0), reads its cells with the plan's ``tcgen05.ld`` +
   ``wait::ld``, and folds them into the accumulator fragment with the gemm's alpha / beta
   (``C = alpha * A@B + beta * bias``);
5. a barrier, then warp 0 ``tcgen05.dealloc``s the columns and thread 0 invalidates the mbarrier (the next
   execution of the statement, in a loop, initialises it afresh).

Descriptors: the shared-memory layouts are solved by ``wgmma_desc.solve`` (the formats agree) and encoded by
``tcgen05_desc``; the instruction descriptor by ``tcgen05_desc.instr_descriptor``. The register <-> (row,
column) map of the read-out is checked cell by cell against the accumulator fragment inference recorded.

Refused (``Tcgen05LoweringError``, naming the gemm): a register-fragment bias other than the accumulator,
MN-major tf32 / fp8 operands, operands without a canonical layout, a gemm on part of the block's threads, and
pipelined K loops (the ``num_stages`` software pipeline: one TMEM allocation per stage and mbarrier phases
across iterations are not emitted).
"""
from __future__ import annotations

import numpy as np
from tvm import tirx
from tvm.backend.cuda.op import cuda_cvta_generic_to_shared, cuda_mbarrier_wait

from tilelayout.errors import Tcgen05LoweringError

from .lower_gemm import _Operand, _region_index, ptx_call
from .lower_wgmma import descriptor_layout
from .mma_ptx import dtype_bits
from .tcgen05_desc import K_OF_KIND, KIND_OF, instr_descriptor, smem_descriptor
from .wgmma_desc import DescriptorLayout

__all__ = ["refuse_tcgen05", "refuse_pipelined", "lower_gemm_tcgen05", "TARGET_HINT"]

#: what the refusal of an unlowered form says
TARGET_HINT = "Target sm_90a (wgmma) or sm_80 (mma.sync) to lower this kernel"


def refuse_tcgen05(op, plan, target) -> None:
    """Raise ``Tcgen05LoweringError`` for a gemm on a tcgen05 target that has no recorded plan, or a tcgen05 plan
    lowered for a target without tcgen05."""
    from .from_inference import has_tcgen05
    if plan is not None:
        if plan.instruction == "tcgen05" and not has_tcgen05(target):
            raise Tcgen05LoweringError(f"{op.describe()}: planned as {plan.describe()}, but the lowering target "
                                       f"{target.attrs.get('arch', target)} has no tcgen05; infer layouts for this "
                                       f"target instead")
        return
    if not (has_tcgen05(target) and str(op.a.buffer.dtype) != "float64"):
        return
    arch = target.attrs.get("arch", "")
    raise Tcgen05LoweringError(
        f"{op.describe()}: has no recorded gemm plan (inference would plan tcgen05.mma) for {arch}; run layout "
        f"inference first. It is not lowered to mma.sync instead. {TARGET_HINT}")


def refuse_pipelined(op, plan, func) -> None:
    """Refuse a tcgen05 gemm in a function with a software-pipelined (``num_stages``) loop: the per-stage TMEM
    allocation and mbarrier phases such a loop needs are not emitted."""
    from ..ir_utils import walk
    from .pipeline_plan import PIPELINE_KEY, STAGES_KEY
    if func is None:
        return
    staged = []

    def on_for(loop):
        notes = loop.annotations or {}
        if PIPELINE_KEY in notes or (STAGES_KEY in notes and int(notes[STAGES_KEY]) > 1):
            staged.append(loop.loop_var.name)
    walk(func.body, [(tirx.For, on_for)])
    if staged:
        _refuse(op, plan, f"the kernel software-pipelines loop {staged[0]} (num_stages), and pipelined tcgen05 "
                          f"gemms are not lowered yet")


def _refuse(op, plan, why: str):
    raise Tcgen05LoweringError(f"{op.describe()}: planned as {plan.describe()}, but {why}; tcgen05 lowering covers "
                               f"the non-pipelined SS gemm only, and this gemm is not lowered "
                               f"to mma.sync instead. {TARGET_HINT}")


def _descriptor(operand: _Operand, layout: DescriptorLayout, stored_index: list):
    """The 64-bit tcgen05 shared-memory descriptor of the tile starting at stored element ``stored_index``."""
    ptr = tirx.address_of(tirx.BufferLoad(operand.buf.var, _region_index(operand.region, stored_index)))
    addr = tirx.Cast("uint64", cuda_cvta_generic_to_shared(ptr))
    start = tirx.shift_right(tirx.bitwise_and(addr, tirx.const(0x3FFFF, "uint64")), tirx.const(4, "uint64"))
    return tirx.bitwise_or(start, tirx.const(smem_descriptor(0, layout), "uint64"))


def _readout(plan, width: int) -> tuple[str, int, int]:
    """(tcgen05.ld shape, repetitions of one issue, columns of one issue) reading a warpgroup's ``width`` columns:
    the plan's shape, as many repetitions as divide the columns (at most 128 registers per issue)."""
    from tilelayout import tmem
    shape = plan.ld_shape
    per_rep = tmem.LD_SHAPES[shape][1]
    num = max(x for x in tmem.LD_NUMS[shape] if (width // per_rep) % x == 0)
    return shape, num, num * per_rep


def _check_readout(op, plan, layout, blocks, groups: int, width: int) -> None:
    """Every (thread, register) this lowering reads out lands on the (row, column) the recorded accumulator
    fragment gives that thread (the fragment is what inference decided; the read-out must agree): warp w of
    warpgroup g reads its rows of each block (32 with ``32x32b``, 16 with a 16-lane shape) from column g * width."""
    from tilelayout import tmem
    from tilelayout.fragment import Fragment
    if not isinstance(layout, Fragment) or layout.replicate_size != 1:
        _refuse(op, plan, f"the accumulator {op.c.buffer.name} has no unreplicated fragment layout")
    table = np.asarray(layout.thread_table())[..., 0]
    shape, num, chunk = _readout(plan, width)
    rows_per_warp = plan.instr_m // 4
    want = np.full(table.shape, -1, dtype=np.int64)
    for blk in blocks:
        for g in range(groups):
            for w in range(4):
                for lane in range(32):
                    for c0 in range(0, width, chunk):
                        for r in range(tmem.ld_registers(shape, num)):
                            dl, dc = tmem.ld_cell(shape, lane, r)
                            want[blk.row0 + rows_per_warp * w + dl, g * width + c0 + dc] = 128 * g + 32 * w + lane
    bad = np.argwhere(table != want)
    if len(bad):
        r, c = (int(x) for x in bad[0])
        _refuse(op, plan, f"its accumulator fragment {op.c.buffer.name} puts ({r}, {c}) in thread {int(table[r, c])}, "
                          f"and tcgen05.ld.{shape} gives it thread {int(want[r, c])}")


def lower_gemm_tcgen05(op, plan, layout, ctx, running: int, epilogue) -> tuple[tirx.Stmt, str]:
    """(statements, report line) of a gemm planned as tcgen05 (module doc); ``epilogue(value, row, col)`` is the
    store folding A@B element ``value`` at accumulator (row, col) into the fragment."""
    from tilelayout import tmem
    if ctx.thread_base or running != ctx.threads:
        _refuse(op, plan, f"it runs on threads [{ctx.thread_base}, {ctx.thread_base + running}) of the block's "
                          f"{ctx.threads} (the read-out and the barriers are emitted for all the block's threads)")
    A = _Operand(op, op.a, "A", op.transpose_a, ctx)
    B = _Operand(op, op.b, "B", op.transpose_b, ctx)
    for operand in (A, B):
        if not operand.buf.is_shared:
            _refuse(op, plan, f"operand {operand.which} ({operand.buf.name}) is not in shared memory")
        if not operand.k_contiguous and dtype_bits(operand.dtype) != 16:
            _refuse(op, plan, f"operand {operand.which} ({operand.buf.name}) is {operand.dtype} stored MN-major; "
                              f"only 16-bit operands are lowered MN-major (store it K-major)")
    m, n, k = plan.m, plan.n, plan.k
    im, inn = plan.instr_m, plan.instr_n
    kind = KIND_OF.get(str(A.dtype))
    ik = K_OF_KIND.get(kind, 0)
    if kind is None or k % ik:
        _refuse(op, plan, f"operand dtype {A.dtype} / K={k} has no tcgen05 kind here")
    ksteps, mblocks, nblocks = k // ik, m // im, n // inn
    a_tiles = [A.storage_index(b * im, s * ik) for b in range(mblocks) for s in range(ksteps)]
    b_tiles = [B.storage_index(s * ik, j * inn) for j in range(nblocks) for s in range(ksteps)]
    a_rc = (im, ik) if A.k_contiguous else (ik, im)
    b_rc = (inn, ik) if B.k_contiguous else (ik, inn)
    a_layout, b_layout = descriptor_layout(A, a_tiles, *a_rc, ctx), descriptor_layout(B, b_tiles, *b_rc, ctx)
    for operand, lay in ((A, a_layout), (B, b_layout)):
        if lay is None:
            _refuse(op, plan, f"operand {operand.which} ({operand.buf.name}) has no canonical layout a shared-memory "
                              f"descriptor can name (use make_tcgen05mma_swizzled_layout or leave it to inference)")
    idesc = instr_descriptor(str(A.dtype), str(B.dtype), "float32", im, inn, not A.k_contiguous, not B.k_contiguous)
    blocks = tmem.accumulator_blocks(m, n, im)
    groups = running // 128
    if groups != plan.warp_n or n % groups:
        _refuse(op, plan, f"it runs on {running} threads, not the plan's {plan.warp_n} warpgroup(s)")
    width = n // groups
    _check_readout(op, plan, layout, blocks, groups, width)

    tx = ctx.rel_tx
    fresh = ctx.fresh
    taddr_s = tirx.decl_buffer([1], "uint32", name=fresh("tmem_addr"), scope="shared")
    bar_s = tirx.decl_buffer([1], "uint64", name=fresh("tmem_bar"), scope="shared")
    shape, num, chunk = _readout(plan, width)
    nregs = tmem.ld_registers(shape, num)
    rows_per_warp = im // 4
    regs = tirx.decl_buffer([nregs], "uint32", name=fresh("tmem_regs"), scope="local")
    u32 = lambda v: tirx.const(v, "uint32")          # noqa: E731
    taddr = tirx.BufferLoad(taddr_s, [0])
    bar_ptr = tirx.address_of(tirx.BufferLoad(bar_s, [0]))
    sync = tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))
    warp0 = tirx.floordiv(tx, 32) == 0
    ncols = plan.tmem_columns

    ks = tirx.Var(fresh("tks"), "int32")
    issue = []
    for blk in blocks:
        for j in range(nblocks):
            d_addr = taddr + u32((16 * blk.half) << 16 | (blk.col_offset + j * inn))
            a_desc = _descriptor(A, a_layout, A.storage_index(blk.row0, ks * ik))
            b_desc = _descriptor(B, b_layout, B.storage_index(ks * ik, j * inn))
            issue.append(ptx_call(f"tcgen05.mma.cta_group::1.{kind}", d_addr, a_desc, b_desc, u32(idesc),
                                  u32(0), u32(0), u32(0), u32(0), ks > 0))
    mma_loop = tirx.For(ks, 0, ksteps, tirx.ForKind.SERIAL, tirx.SeqStmt(issue) if len(issue) > 1 else issue[0])
    commit = ptx_call("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64", bar_ptr)

    warp_in_group = tirx.floormod(tirx.floordiv(tx, 32), 4)
    group = tirx.floordiv(tx, 128)
    lane = tirx.floormod(tx, 32)
    readout = []
    for blk in blocks:
        for c0 in range(0, width, chunk):
            lane_field = tirx.shift_left(tirx.Cast("uint32", warp_in_group * 32 + 16 * blk.half), u32(16))
            col = tirx.Cast("uint32", group * width) + u32(blk.col_offset + c0)
            addr = taddr + lane_field + col
            readout.append(ptx_call(f"tcgen05.ld.sync.aligned.{shape}.x{num}.b32",
                                    *[tirx.BufferLoad(regs, [r]) for r in range(nregs)], addr))
            readout.append(ptx_call("tcgen05.wait::ld.sync.aligned"))
            for r in range(nregs):
                dl, dc = tmem.ld_cell(shape, lane, r)
                value = tirx.reinterpret("float32", tirx.BufferLoad(regs, [r]))
                readout.append(epilogue(value, blk.row0 + warp_in_group * rows_per_warp + dl,
                                        group * width + c0 + dc))
    stmts = [
        tirx.AllocBuffer(taddr_s), tirx.AllocBuffer(bar_s), tirx.AllocBuffer(regs),
        ptx_call("fence.proxy.async.shared::cta"), sync,
        tirx.IfThenElse(warp0, tirx.SeqStmt([
            ptx_call("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32",
                     tirx.address_of(tirx.BufferLoad(taddr_s, [0])), u32(ncols)),
            ptx_call("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned")]), None),
        tirx.IfThenElse(tx == 0, ptx_call("mbarrier.init.shared::cta.b64", bar_ptr, u32(1)), None),
        ptx_call("tcgen05.fence::before_thread_sync"), sync, ptx_call("tcgen05.fence::after_thread_sync"),
        tirx.IfThenElse(tx == 0, tirx.SeqStmt([mma_loop, commit]), None),
        tirx.Evaluate(cuda_mbarrier_wait(bar_ptr, 0)),
        ptx_call("tcgen05.fence::after_thread_sync"),
        *readout,
        ptx_call("tcgen05.fence::before_thread_sync"), sync,
        tirx.IfThenElse(warp0, ptx_call("tcgen05.dealloc.cta_group::1.sync.aligned.b32", taddr, u32(ncols)), None),
        tirx.IfThenElse(tx == 0, ptx_call("mbarrier.inval.shared::cta.b64", bar_ptr), None),
    ]
    report = (f"tcgen05.mma m{im}n{inn}k{ik} {kind} x{ksteps * mblocks * nblocks} by one thread, SS (A "
              f"{'K' if A.k_contiguous else 'M'}-major, B {'K' if B.k_contiguous else 'N'}-major), accumulator in "
              f"Tensor Memory ({ncols} columns), read by tcgen05.ld.{shape}.x{num} over {groups} warpgroup(s)")
    return tirx.SeqStmt(stmts), report
