"""CPU emulation of ``wgmma.mma_async`` (warpgroup of 128 threads), from the instruction as issued.

Shared-memory operands are read through their descriptors: the emulation evaluates the 64-bit descriptor
the kernel computed (with a shared address taken as the byte offset inside its buffer, whose base the GPU
aligns to the swizzle pattern), decodes start / LBO / SBO / mode from the bits and places every element by
the PTX canonical-layout formula and address-bit swizzle, written here independently of the lowering's
solver. A register A (the rs form) is exchanged between the warpgroup's threads like mma.sync's operands.
Threads run one after another, so every wgmma has completed when the next statement runs: fences, commits
and waits are no-ops here.
"""
from __future__ import annotations

import re

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from .emulate_mma import (_PTX_DTYPE, _as, _exchange, _op_name, _split_args, _unpack, fp8_to_f32,
                          tf32_input, write_accumulator)
from ..ir_utils import mapped
from .loop_partition import LoweringError
from .mma_ptx import FP8, WgmmaInst, dtype_bits

__all__ = ["emulate_wgmma"]


def _buffer_of(desc):
    """(shared buffer, descriptor with its shared address replaced by the byte offset in that buffer)."""
    found = []

    def on_call(c):
        if _op_name(c) == "tirx.cuda.cvta_generic_to_shared":
            inner = c.args[0]
            if isinstance(inner, tvm.ir.Call) and _op_name(inner) == "tirx.address_of":
                load = inner.args[0]
                if isinstance(load, TensorLoad) and len(load.indices) == 1:
                    found.append(load.source)
                    bytes_ = dtype_bits(str(load.source.dtype)) // 8
                    return tirx.Cast("uint32", load.indices[0] * bytes_)
        return c

    out = mapped(desc, [(tvm.ir.Call, on_call)])
    if len(found) != 1:
        raise LoweringError(f"cannot emulate wgmma: descriptor {desc} does not name exactly one shared buffer")
    return found[0], out


def _decode(desc, scratch, at: int) -> list:
    """Statements storing the descriptor's (start, LBO, SBO, swizzle width) bytes at ``scratch[at:at + 4]``
    (decoded once per instruction and thread: inline, the index expressions grow past what TVM simplifies)."""
    def field(shift, bits=14):
        v = tirx.shift_right(desc, tirx.const(shift, "uint64")) if shift else desc
        return tirx.Cast("int32", tirx.bitwise_and(v, tirx.const((1 << bits) - 1, "uint64")))
    mode = field(62, 2)
    width = tirx.Select(mode == 1, 128, tirx.Select(mode == 2, 64, tirx.Select(mode == 3, 32, 0)))
    values = [field(0) * 16, field(16) * 16, field(32) * 16, width]
    return [tirx.BufferStore(scratch, v, [at + i]) for i, v in enumerate(values)]


def _element(buf, scratch, at: int, k_major, x, y, dtype: str):
    """Element (x, y) of the tile decoded at ``scratch[at:]``: K-major x = row (M or N), y = k; MN-major
    x = m/n, y = k."""
    start, lbo, sbo, width = (tirx.BufferLoad(scratch, [at + i]) for i in range(4))
    nbytes = dtype_bits(dtype) // 8
    wide = tirx.max(width, 16)          # a divisor that is never 0 (its branch is unused when unswizzled)
    if k_major:
        r, kb = x, y * nbytes
        swz = start + (r % 8) * wide + (r // 8) * sbo + kb
        inter = start + (r % 8) * 16 + (r // 8) * sbo + kb % 16 + (kb // 16) * lbo
    else:
        xb, r = x * nbytes, y
        swz = start + xb % wide + (xb // wide) * lbo + (r % 8) * wide + (r // 8) * sbo
        inter = start + xb % 16 + (xb // 16) * sbo + (r % 8) * 16 + (r // 8) * lbo
    addr = tirx.Select(width > 0, swz, inter)
    mask = (wide // 16 - 1) * 16       # 0 when unswizzled (wide = 16)
    addr = tirx.bitwise_xor(addr, tirx.bitwise_and(tirx.shift_right(addr, 3), mask))
    value = tirx.BufferLoad(buf, [addr // nbytes])
    if dtype in FP8:        # decoded from its bits, as the tensor core reads them
        return fp8_to_f32(tirx.Cast("uint32", tirx.reinterpret("uint8", value)), dtype)
    return value


def emulate_wgmma(call, phases) -> tirx.Stmt:
    name = _op_name(call)
    operands, tokens = _split_args(call)
    form = "rs" if name.endswith("_rs") else "ss"
    shape = next((t for t in tokens if re.fullmatch(r"m64n\d+k\d+", t)), None)
    if shape is None:
        raise LoweringError(f"cannot emulate {name}: no m64nNkK shape in {tokens}")
    n, k = (int(x) for x in re.findall(r"\d+", shape)[1:])
    types = [t for t in tokens[tokens.index(shape) + 1:] if t]
    inst = WgmmaInst(n, k, _PTX_DTYPE[types[1]], _PTX_DTYPE[types[2]], _PTX_DTYPE[types[0]])
    nd = inst.c_elems // inst.c_pack
    d, rest = operands[:nd], operands[nd:]
    imm = [int(x.value) for x in rest if isinstance(x, tirx.IntImm) and str(x.ty) != "bool"]
    trans = inst.transposable           # 8-bit lines have no transpose immediates: K-major operands
    if form == "ss":
        a_desc, b_desc, scale_d = rest[0], rest[1], rest[2]
        scale_a, scale_b, trans_a, trans_b = imm[-4:] if trans else imm[-2:] + [0, 0]
    else:
        a_regs, b_desc, scale_d = rest[0:4], rest[4], rest[5]
        scale_a, scale_b, trans_b = imm[-3:] if trans else imm[-2:] + [0]
        trans_a = 0
    t = phases.flat_thread()
    tg = tirx.floormod(t, 128)
    base = tirx.floordiv(t, 128) * 128
    publish = []
    if form == "rs":
        xa = _exchange(phases, "wgmma_xa", 4, "uint32")
        publish = [tirx.BufferStore(xa, v, [t, i]) for i, v in enumerate(a_regs)]
    else:
        a_buf, a_desc = _buffer_of(a_desc)
    b_buf, b_desc = _buffer_of(b_desc)
    acc_t = "float32"
    tmp = tirx.decl_buffer([inst.c_elems], acc_t, name="wgmma_d")
    scratch = tirx.decl_buffer([8], "int32", name="wgmma_desc")
    phases.extra += [tirx.AllocBuffer(tmp), tirx.AllocBuffer(scratch)]
    steps = _decode(b_desc, scratch, 4) + (_decode(a_desc, scratch, 0) if form == "ss" else [])
    for e in range(inst.c_elems):           # the accumulator registers in (zero when scale-d is false)
        if inst.c_pack == 1:
            old = _as(acc_t, d[e])
        else:
            old = tirx.Cast(acc_t, _unpack(d[e // 2], e % 2, "float16"))
        steps.append(tirx.BufferStore(tmp, tirx.Select(scale_d, old, tirx.const(0, acc_t)), [e]))
    # one loop over the thread's accumulator elements (not unrolled: the operand addressing, with its swizzle
    # and fp8 decoding, is emitted once instead of once per element)
    ev = tirx.Var("ev", "int32")
    kk = tirx.Var("kk", "int32")
    row, col = inst.c_element(tg, ev)
    if form == "ss":
        av = _element(a_buf, scratch, 0, trans_a == 0, row, kk, inst.a_dtype)
    else:
        owner, reg, part = inst.a_owner(row, kk)
        av = _unpack(tirx.BufferLoad(xa, [base + owner, reg]), part, inst.a_dtype)
    av = tf32_input(av, inst.a_dtype)
    bv = tf32_input(_element(b_buf, scratch, 4, trans_b == 0, col, kk, inst.b_dtype), inst.b_dtype)
    prod = tirx.Cast(acc_t, av) * tirx.Cast(acc_t, bv) * tirx.const(scale_a * scale_b, acc_t)
    mac = tirx.For(kk, 0, inst.k, tirx.ForKind.SERIAL, tirx.BufferStore(tmp, tirx.BufferLoad(tmp, [ev]) + prod, [ev]))
    steps.append(tirx.For(ev, 0, inst.c_elems, tirx.ForKind.SERIAL, mac))
    steps += write_accumulator(d, tmp, inst)
    out = [phases.thread_loop(tirx.SeqStmt(steps))]
    if publish:
        out.insert(0, phases.thread_loop(tirx.SeqStmt(publish)))
    return tirx.SeqStmt(out) if len(out) > 1 else out[0]
