"""CPU emulation, at the TIR level, of the tcgen05 and mbarrier calls ``lower_tcgen05`` issues.

Why: the CPU build (``serialize_threads``) runs a lowered kernel's threads one after another; a tcgen05 call is
issued by one thread or one warp but acts on Tensor Memory, an mbarrier or the block's shared memory, so each
becomes its own phase (a loop over the threads, under the enclosing thread conditions) that does what the PTX
ISA says, read from the call as issued (op name, modifier tokens, operand values computed at run time):

* Tensor Memory is one array of 128 lanes x 512 columns of 32-bit cells, with an allocation record;
  ``tcgen05.alloc`` (once per warp: its lane 0) takes columns 0.. (one allocation at a time is emulated),
  writes the address (lane 0, column 0) to the shared word named; ``dealloc`` must name that allocation;
* ``tcgen05.mma`` (cta_group::1, SS): D (+)= A B^T with A and B read through their 64-bit shared-memory
  descriptors decoded here from the bits the kernel computed (start, LBO, SBO, version 1, layout type
  0/2/4/6), placed by the canonical-layout formula and swizzle (``emulate_wgmma._element``, the emulation's own
  reading), the instruction descriptor decoded by ``emulate_tcgen05.decode_instr_descriptor``; products and
  sums in float32, K in order. It runs in every thread that issues it, so a second issuing thread would add A@B
  twice;
* ``tcgen05.commit`` arrives once on the mbarrier; ``mbarrier.init`` (count 1) zeroes it, ``mbarrier.inval``
  marks it invalid; the mbarrier word
  counts completed phases, and a wait on parity p returns when the current phase's parity is not p, else the
  GPU would hang: the emulation fails the run;
* ``tcgen05.ld.32x32b.xN``: thread t of warp w reads lane (address lane) + t % 32, columns from the address's,
  and the address's lane must be its warp's subpartition ``32 * (w % 4)``; ``.16x256b.xN`` per PTX's figure
  (16 lanes from the address's, which is the subpartition's lane 0 or 16);
* fences, ``wait::ld`` / ``wait::st`` and ``relinquish_alloc_permit``: no-ops (threads run in order).

Misuse the hardware rejects or leaves undefined (a column outside the allocation, a foreign subpartition, a
wrong descriptor version, a wait that never completes) fails the run with an assertion naming it.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from .emulate_mma import _op_name, _split_args, _store_to, shared_element, tf32_input
from .emulate_tcgen05 import COLUMNS, decode_instr_descriptor
from .emulate_wgmma import _buffer_of, _element
from .loop_partition import LoweringError

__all__ = ["TCGEN05_CALLS", "is_tcgen05_call", "emulate_tcgen05_call"]

TCGEN05_CALLS = ("tirx.ptx.tcgen05_alloc", "tirx.ptx.tcgen05_dealloc", "tirx.ptx.tcgen05_relinquish_alloc_permit",
                 "tirx.ptx.tcgen05_fence", "tirx.ptx.tcgen05_wait", "tirx.ptx.tcgen05_mma_ss",
                 "tirx.ptx.tcgen05_commit", "tirx.ptx.tcgen05_ld", "tirx.ptx.mbarrier_init",
                 "tirx.ptx.mbarrier_inval", "tirx.cuda.mbarrier_wait")
_NOOPS = ("tirx.ptx.tcgen05_relinquish_alloc_permit", "tirx.ptx.tcgen05_fence", "tirx.ptx.tcgen05_wait")


def is_tcgen05_call(call) -> bool:
    return _op_name(call) in TCGEN05_CALLS


def _state(phases):
    """(TMEM cells, allocation record [allocated columns]) shared by every emulated call of the kernel."""
    got = getattr(phases, "_tcgen05_state", None)
    if got is None:
        cells = tirx.decl_buffer([128 * COLUMNS], "uint32", name="tmem_cells")
        record = tirx.decl_buffer([1], "int32", name="tmem_alloc")
        phases.extra += [tirx.AllocBuffer(cells), tirx.AllocBuffer(record),       # nothing allocated at entry
                         tirx.BufferStore(record, tirx.const(0, "int32"), [tirx.const(0, "int32")])]
        got = (cells, record)
        phases._tcgen05_state = got
    return got


def _check(cond, message: str) -> tirx.Stmt:
    return tirx.AssertStmt(cond, tvm.ir.StringImm("RuntimeError"), [tvm.ir.StringImm(message)])


#: the word of an mbarrier after ``mbarrier.inval`` (no phase count reaches it)
_INVALID = tirx.const(0xFFFFFFFF, "uint32")


def _u32(v):
    return tirx.const(v, "uint32")


def emulate_tcgen05_call(call, phases) -> tirx.Stmt:
    """The phase emulating one tcgen05 / mbarrier ``call`` (module doc)."""
    name = _op_name(call)
    if name in _NOOPS:
        return tirx.Evaluate(0)
    operands, tokens = _split_args(call)
    t = phases.flat_thread()
    lane_zero = tirx.floormod(t, 32) == 0
    cells, record = _state(phases)
    zero = [tirx.const(0, "int32")]
    if name == "tirx.ptx.tcgen05_alloc":
        buf, index = shared_element(operands[0])
        ncols = tirx.Cast("int32", operands[1])
        body = tirx.SeqStmt([
            _check(tirx.BufferLoad(record, zero) == 0, "tcgen05.alloc while Tensor Memory is allocated (the "
                                                       "emulation holds one allocation)"),
            _check(tirx.Or(tirx.Or(ncols == 32, ncols == 64), tirx.Or(tirx.Or(ncols == 128, ncols == 256),
                                                                        ncols == 512)),
                   "tcgen05.alloc: the column count must be a power of two from 32 to 512"),
            tirx.BufferStore(record, ncols, zero),
            tirx.BufferStore(buf, tirx.Cast(str(buf.dtype), _u32(0)), [index])])
        return phases.thread_loop(tirx.IfThenElse(lane_zero, body, None))
    if name == "tirx.ptx.tcgen05_dealloc":
        taddr, ncols = operands
        body = tirx.SeqStmt([
            _check(tirx.And(tirx.BufferLoad(record, zero) == tirx.Cast("int32", ncols), taddr == _u32(0)),
                   "tcgen05.dealloc names no live allocation (address or column count differ)"),
            tirx.BufferStore(record, tirx.const(0, "int32"), zero)])
        return phases.thread_loop(tirx.IfThenElse(lane_zero, body, None))
    if name == "tirx.ptx.mbarrier_init":
        addr, count = operands[0], operands[1]
        if not (isinstance(count, tirx.IntImm) and int(count.value) == 1):
            raise LoweringError(f"cannot emulate mbarrier.init with count {count}: only count 1 is emulated")
        buf, index = shared_element(addr)
        return phases.thread_loop(tirx.BufferStore(buf, tirx.Cast(str(buf.dtype), _u32(0)), [index]))
    if name == "tirx.ptx.mbarrier_inval":        # an invalid barrier: a later wait fails until it is initialised
        buf, index = shared_element(operands[0])
        return phases.thread_loop(tirx.BufferStore(buf, tirx.Cast(str(buf.dtype), _INVALID), [index]))
    if name == "tirx.ptx.tcgen05_commit":
        buf, index = shared_element(operands[0])
        one = tirx.Cast(str(buf.dtype), _u32(1))
        return phases.thread_loop(tirx.BufferStore(buf, tirx.BufferLoad(buf, [index]) + one, [index]))
    if name == "tirx.cuda.mbarrier_wait":
        buf, index = shared_element(call.args[0])
        parity = tirx.Cast("int32", call.args[1])
        word = tirx.BufferLoad(buf, [index])
        current = tirx.Cast("int32", tirx.floormod(word, tirx.Cast(str(buf.dtype), _u32(2))))
        return phases.thread_loop(tirx.SeqStmt([
            _check(word != tirx.Cast(str(buf.dtype), _INVALID), "mbarrier wait on an invalidated mbarrier"),
            _check(current != parity, "mbarrier wait on a phase that never completes (no tcgen05.commit arrived): "
                                      "the GPU would hang here")]))
    if name == "tirx.ptx.tcgen05_ld":
        return _ld(operands, tokens, phases, t, cells, record)
    if name == "tirx.ptx.tcgen05_mma_ss":
        return _mma(operands, tokens, phases, cells, record)
    raise LoweringError(f"no CPU emulation for {name}")


def _ld(operands, tokens, phases, t, cells, record) -> tirx.Stmt:
    """``tcgen05.ld.<shape>.x<num>``: ``32x32b`` (thread = lane, register = column) and ``16x256b`` (PTX's
    figure: lane t / 4 + 8 * ((r / 2) % 2), column 8 * (r / 4) + 2 * (t % 4) + r % 2 for register r)."""
    shape = next((tok for tok in ("32x32b", "16x256b") if tok in tokens), None)
    if shape is None:
        raise LoweringError(f"cannot emulate tcgen05.ld {tokens}: only .32x32b and .16x256b are emulated")
    num = int(next(tok for tok in tokens if tok.startswith("x") and tok[1:].isdigit())[1:])
    regs, taddr = operands[:-1], operands[-1]
    want = num if shape == "32x32b" else 4 * num
    if len(regs) != want:
        raise LoweringError(f"cannot emulate tcgen05.ld.{shape}.x{num}: {len(regs)} registers, not {want}")
    lane0 = tirx.Cast("int32", tirx.shift_right(taddr, _u32(16)))
    col0 = tirx.Cast("int32", tirx.bitwise_and(taddr, _u32(0xFFFF)))
    sub = tirx.floormod(tirx.floordiv(t, 32), 4) * 32
    ok_lane = lane0 == sub if shape == "32x32b" else tirx.Or(lane0 == sub, lane0 == sub + 16)
    width = num if shape == "32x32b" else 8 * num
    steps = [_check(ok_lane, f"tcgen05.ld.{shape}: the address's lane is outside the issuing warp's subpartition "
                             f"(warp w reads lanes 32 * (w % 4) ..)"),
             _check(col0 + width <= tirx.BufferLoad(record, [tirx.const(0, "int32")]),
                    "tcgen05.ld reads columns outside the Tensor Memory allocation")]
    lane = tirx.floormod(t, 32)
    for r, reg in enumerate(regs):
        if shape == "32x32b":
            row, col = lane0 + lane, col0 + r
        else:
            row = lane0 + tirx.floordiv(lane, 4) + 8 * ((r // 2) % 2)
            col = col0 + 8 * (r // 4) + 2 * tirx.floormod(lane, 4) + r % 2
        value = tirx.BufferLoad(cells, [row * COLUMNS + col])
        if str(reg.ty) != "uint32":
            value = tirx.reinterpret(str(reg.ty), value)
        steps.append(_store_to(reg, value))
    return phases.thread_loop(tirx.SeqStmt(steps))


def _decode_smem(desc, scratch, at: int) -> list:
    """Statements storing a tcgen05 shared-memory descriptor's (start, LBO, SBO, swizzle width) bytes at
    ``scratch[at:at + 4]``, after checking its fixed fields (version 1, no base offset, relative LBO)."""
    def field(shift, bits=14):
        v = tirx.shift_right(desc, tirx.const(shift, "uint64")) if shift else desc
        return tirx.Cast("int32", tirx.bitwise_and(v, tirx.const((1 << bits) - 1, "uint64")))
    kind = field(61, 3)
    width = tirx.Select(kind == 2, 128, tirx.Select(kind == 4, 64, tirx.Select(kind == 6, 32, 0)))
    return [_check(field(46, 2) == 1, "tcgen05 shared-memory descriptor: version field is not 1 (sm_100)"),
            _check(tirx.And(field(49, 3) == 0, field(52, 1) == 0),
                   "tcgen05 shared-memory descriptor: base offset / absolute LBO mode are not emulated"),
            _check(tirx.Or(tirx.Or(kind == 0, kind == 2), tirx.Or(kind == 4, kind == 6)),
                   "tcgen05 shared-memory descriptor: layout type not emulated (0, 2, 4, 6)")] + \
        [tirx.BufferStore(scratch, v, [at + i]) for i, v in enumerate([field(0) * 16, field(16) * 16,
                                                                       field(32) * 16, width])]


def _mma(operands, tokens, phases, cells, record) -> tirx.Stmt:
    kind = next((tok for tok in tokens if tok.startswith("kind::")), None)
    if "cta_group::1" not in tokens or kind is None:
        raise LoweringError(f"cannot emulate tcgen05.mma {tokens}: only cta_group::1 with a kind is emulated")
    d, a_desc, b_desc, idesc, enable = operands[0], operands[1], operands[2], operands[3], operands[-1]
    if not isinstance(idesc, tirx.IntImm):
        raise LoweringError(f"cannot emulate tcgen05.mma: the instruction descriptor {idesc} is not a constant")
    f = decode_instr_descriptor(int(idesc.value), kind)
    m, n, k = f["m"], f["n"], f["k"]
    a_dtype = "float32" if f["a"] == "tfloat32" else f["a"]
    b_dtype = "float32" if f["b"] == "tfloat32" else f["b"]
    a_buf, a_desc = _buffer_of(a_desc)
    b_buf, b_desc = _buffer_of(b_desc)
    scratch = tirx.decl_buffer([8], "int32", name="tcgen05_desc")
    acc = tirx.decl_buffer([1], "float32", name="tcgen05_acc")
    phases.extra += [tirx.AllocBuffer(scratch), tirx.AllocBuffer(acc)]
    lane0 = tirx.Cast("int32", tirx.shift_right(d, _u32(16)))
    col0 = tirx.Cast("int32", tirx.bitwise_and(d, _u32(0xFFFF)))
    zero = [tirx.const(0, "int32")]
    steps = _decode_smem(a_desc, scratch, 0) + _decode_smem(b_desc, scratch, 4)
    if m == 128:
        steps.append(_check(lane0 == 0, "tcgen05.mma M=128: D must start at lane 0"))
    else:
        steps.append(_check(tirx.Or(lane0 == 0, lane0 == 16), "tcgen05.mma M=64: D must start at lane 0 or 16"))
    steps.append(_check(col0 + n <= tirx.BufferLoad(record, zero),
                        "tcgen05.mma writes columns outside the Tensor Memory allocation"))
    i, j, kk = tirx.Var("ti", "int32"), tirx.Var("tj", "int32"), tirx.Var("tk", "int32")
    lane = lane0 + i if m == 128 else 32 * tirx.floordiv(i, 16) + lane0 + tirx.floormod(i, 16)
    cell = lane * COLUMNS + col0 + j
    av = tf32_input(_element(a_buf, scratch, 0, not f["a_mn"], i, kk, a_dtype), a_dtype)
    bv = tf32_input(_element(b_buf, scratch, 4, not f["b_mn"], j, kk, b_dtype), b_dtype)
    old = tirx.reinterpret("float32", tirx.BufferLoad(cells, [cell]))
    mac = tirx.BufferStore(acc, tirx.BufferLoad(acc, zero) + tirx.Cast("float32", av) * tirx.Cast("float32", bv), zero)
    per_cell = tirx.SeqStmt([
        tirx.BufferStore(acc, tirx.Select(enable, old, tirx.const(0.0, "float32")), zero),
        tirx.For(kk, 0, k, tirx.ForKind.SERIAL, mac),
        tirx.BufferStore(cells, tirx.reinterpret("uint32", tirx.BufferLoad(acc, zero)), [cell])])
    steps.append(tirx.For(i, 0, m, tirx.ForKind.SERIAL, tirx.For(j, 0, n, tirx.ForKind.SERIAL, per_cell)))
    return phases.thread_loop(tirx.SeqStmt(steps))
