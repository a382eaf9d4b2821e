"""CPU emulation of warp- and warpgroup-collective tensor-core instructions (ldmatrix, mma.sync, wgmma).

``SerializeThreads`` runs threads one after another, so an instruction whose operands come from the
registers of *other* lanes cannot run as a per-thread statement. Each such call becomes two phases,
exactly like the exchange the hardware performs:

1. every thread publishes the registers (or, for ldmatrix, the row address) it contributes;
2. every thread computes its destination registers from the published values of the lanes that,
   per the PTX fragment tables (``mma_ptx``), hold the operand elements it needs.

The emulation reads the instruction from the call (op name and PTX modifier tokens), never from the
lowering's intent, so an operand or accumulator in the wrong lane or register gives a wrong result.
Arithmetic: products and sums in the accumulator type (f32 / s32 / f64; an f16 accumulator sums in f32 and
rounds once per instruction), k in increasing order. Multiplicands are read as the tensor core reads the
register bits: fp8 codes decoded from their bit fields (``fp8_to_f32``), f32 registers of a .tf32 instruction
truncated to tf32 (``tf32_input``).
"""
from __future__ import annotations

import re

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from ..ir_utils import int_value
from .loop_partition import LoweringError
from .mma_ptx import PTX_TYPE, TF32_MASK, MmaInst, WgmmaInst, dtype_bits

__all__ = ["is_collective", "emulate_collective", "COLLECTIVE_OPS", "fp8_to_f32", "tf32_input"]

_PTX_DTYPE = {**{v: k for k, v in PTX_TYPE.items()}, "tf32": "float32"}
_MMA_OPS = ("tirx.ptx.mma", "tirx.ptx.mma_f16acc", "tirx.ptx.mma_int", "tirx.ptx.mma_f64")
_LDMATRIX_OPS = ("tirx.ptx.ldmatrix",)
_WGMMA_MMA = re.compile(r"tirx\.ptx\.wgmma_(f16|bf16|f16_f16acc|tf32|fp8|fp8_f16acc)_(ss|rs)$")
_WGMMA_SYNC = ("tirx.ptx.wgmma_fence", "tirx.ptx.wgmma_commit_group", "tirx.ptx.wgmma_wait_group",
               "tirx.ptx.fence_proxy")
COLLECTIVE_OPS = _MMA_OPS + _LDMATRIX_OPS


def _op_name(call) -> str:
    return str(call.op.name) if isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) else ""


def is_collective(call) -> bool:
    """A tensor-core call that reads other lanes' registers (or orders the warpgroup's async MMAs)."""
    name = _op_name(call)
    return name in COLLECTIVE_OPS or bool(_WGMMA_MMA.match(name)) or name in _WGMMA_SYNC


def _split_args(call) -> tuple[list, list]:
    """(operands, PTX modifier tokens) of a table-driven ``tirx.ptx.*`` call."""
    operands, tokens = [], []
    for a in call.args:
        if isinstance(a, tvm.ir.StringImm):
            tokens.append(str(a.value))
        else:
            operands.append(a)
    return operands, tokens[:-1]          # the last string is the codegen flag marker


def _mma_from_tokens(tokens: list) -> MmaInst:
    shape = next((t for t in tokens if re.fullmatch(r"m\d+n\d+k\d+", t)), None)
    try:
        col = tokens.index("col", tokens.index("row"))
    except ValueError:
        raise LoweringError(f"cannot emulate mma with modifiers {tokens}: only .row.col is supported") from None
    types = [t for t in tokens[col + 1:] if t and t not in ("satfinite",)][:4]
    m, n, k = (int(x) for x in re.findall(r"\d+", shape or ""))
    if len(types) < 4 or not ((m, n) == (16, 8) or (m, n, k, types[1]) == (8, 8, 4, "f64")):
        raise LoweringError(f"cannot emulate mma {shape} {types}: only m16n8kK and the f64 m8n8k4 are emulated")
    d, a, b, c = types
    return MmaInst(k, _PTX_DTYPE[a], _PTX_DTYPE[b], _PTX_DTYPE[d], m, n)


def _unpack(word, part, dtype: str):
    """Element ``part`` (low bits first) of a 32-bit register holding ``32 // bits`` elements of ``dtype``."""
    bits = dtype_bits(dtype)
    if bits >= 32:
        return word if str(word.ty) == dtype else tirx.reinterpret(dtype, word)
    if dtype == "bfloat16":       # the value as the f32 with the same top 16 bits (exact)
        w = word if str(word.ty) == "uint32" else tirx.reinterpret("uint32", word)
        part_bits = tirx.shift_right(w, tirx.const(16, "uint32")) if not (isinstance(part, int) and part == 0) else w
        if not isinstance(part, int):
            part_bits = tirx.shift_right(w, tirx.Cast("uint32", part * 16))
        return tirx.reinterpret("float32", tirx.shift_left(tirx.bitwise_and(part_bits, tirx.const(0xFFFF, "uint32")),
                                                           tirx.const(16, "uint32")))
    w = word if str(word.ty) == "uint32" else tirx.reinterpret("uint32", word)
    shifted = tirx.shift_right(w, tirx.Cast("uint32", part * bits)) if not (isinstance(part, int) and part == 0) \
        else w
    if dtype in _FP8_FORMAT:
        return fp8_to_f32(tirx.bitwise_and(shifted, tirx.const(0xFF, "uint32")), dtype)
    raw = tirx.Cast(f"uint{bits}", tirx.bitwise_and(shifted, tirx.const((1 << bits) - 1, "uint32")))
    return raw if dtype == f"uint{bits}" else tirx.reinterpret(dtype, raw)


def tf32_input(value, dtype: str):
    """A multiplicand as the tensor core reads it: an f32 register (a .tf32 operand) keeps its sign, exponent and
    top 10 mantissa bits -- the low 13 bits are dropped, i.e. truncation toward zero. Truncation, not rounding:
    the register holds the raw f32 bits (the lowering, like TileLang's, issues no cvt.rna.tf32.f32), and a tensor
    core fed raw f32 ignores those bits (measured on Ampere and Hopper: 1 + 0.75 * 2^-10 enters as 1.0); other
    dtypes pass unchanged."""
    if dtype != "float32":
        return value
    bits = tirx.bitwise_and(tirx.reinterpret("uint32", value), tirx.const(TF32_MASK, "uint32"))
    return tirx.reinterpret("float32", bits)


#: fp8 formats as the PTX ISA defines .e4m3 and .e5m2: (exponent bits, mantissa bits, bias)
_FP8_FORMAT = {"float8_e4m3fn": (4, 3, 7), "float8_e5m2": (5, 2, 15)}


def fp8_to_f32(bits, dtype: str):
    """The f32 value of the fp8 code in the low 8 bits of the uint32 ``bits``, decoded from the bit fields.

    Written out rather than a TIR cast: apache-tvm 0.27's LLVM legalisation of fp8 -> f32 maps the code 0 to
    2^-7 (it ignores zero and subnormals), and a tensor core takes the bits as PTX defines them. e4m3 has no
    infinities (exponent 15 with mantissa 7 is NaN); e5m2 is IEEE-like (exponent 31: infinity or NaN)."""
    ebits, mbits, bias = _FP8_FORMAT[dtype]
    u32 = lambda v: tirx.const(v, "uint32")        # noqa: E731
    sign = tirx.bitwise_and(tirx.shift_right(bits, u32(7)), u32(1))
    exp = tirx.bitwise_and(tirx.shift_right(bits, u32(mbits)), u32((1 << ebits) - 1))
    man = tirx.bitwise_and(bits, u32((1 << mbits) - 1))
    signbit = tirx.shift_left(sign, u32(31))
    normal = tirx.reinterpret("float32", tirx.bitwise_or(tirx.bitwise_or(
        signbit, tirx.shift_left(exp + u32(127 - bias), u32(23))), tirx.shift_left(man, u32(23 - mbits))))
    tiny = tirx.Cast("float32", man) * tirx.const(2.0 ** (1 - bias - mbits), "float32")   # exact in f32
    subnormal = tirx.reinterpret("float32", tirx.bitwise_or(tirx.reinterpret("uint32", tiny), signbit))  # -0 too
    nan = tirx.reinterpret("float32", tirx.bitwise_or(signbit, u32(0x7FC00000)))
    top = u32((1 << ebits) - 1)
    if dtype == "float8_e4m3fn":
        special = tirx.Select(tirx.And(exp == top, man == u32(7)), nan, normal)
    else:
        inf = tirx.reinterpret("float32", tirx.bitwise_or(signbit, u32(0x7F800000)))
        special = tirx.Select(exp == top, tirx.Select(man == u32(0), inf, nan), normal)
    return tirx.Select(exp == u32(0), subnormal, special)


def _pack(values: list, dtype: str):
    """A uint32 register holding ``values`` (low bits first), each of ``dtype``.

    Kept apart from ``lower_gemm.pack_elements`` on purpose: the emulation is the check of the lowering, so it
    must not share the lowering's reading of PTX's register format (a shared mistake would cancel out)."""
    bits = dtype_bits(dtype)
    out = None
    for p, v in enumerate(values):
        if dtype == "bfloat16":   # bf16 bits = the top half of the (exact) f32 value; LLVM legalises bf16 to f32
            word = tirx.shift_right(tirx.reinterpret("uint32", tirx.Cast("float32", v)), tirx.const(16, "uint32"))
        else:
            raw = v if dtype == f"uint{bits}" else tirx.reinterpret(f"uint{bits}", v)
            word = tirx.Cast("uint32", raw)
        if p:
            word = tirx.shift_left(word, tirx.const(p * bits, "uint32"))
        out = word if out is None else tirx.bitwise_or(out, word)
    return out


def _as(dtype: str, value):
    """``value`` in ``dtype``: a bit-preserving reinterpretation between same-width integer registers
    (s32 accumulators travel in u32 registers), a conversion otherwise."""
    have = str(value.ty)
    if have == dtype:
        return value
    if dtype_bits(have) == dtype_bits(dtype) and "float" not in have + dtype:
        return tirx.reinterpret(dtype, value)
    return tirx.Cast(dtype, value)


def _store_to(load, value):
    if not isinstance(load, TensorLoad):
        raise LoweringError(f"cannot emulate: destination {load} is not a register")
    return tirx.BufferStore(load.source, value, list(load.indices))


def emulate_collective(call, phases) -> tirx.Stmt:
    """The phases (over all threads) that emulate one collective ``call`` (see the module docstring)."""
    name = _op_name(call)
    if name in _MMA_OPS:
        return _emulate_mma(call, phases)
    if name in _LDMATRIX_OPS:
        return _emulate_ldmatrix(call, phases)
    if name in _WGMMA_SYNC:
        return tirx.Evaluate(0)           # threads are serialised: every wgmma (and shared write) has completed
    if _WGMMA_MMA.match(name):
        from .emulate_wgmma import emulate_wgmma
        return emulate_wgmma(call, phases)
    raise LoweringError(f"no CPU emulation for {name}")


def _exchange(phases, name: str, width: int, dtype: str):
    buf = tirx.decl_buffer([phases.nthreads, width], dtype, name=name)
    phases.extra.append(tirx.AllocBuffer(buf))
    return buf


def _emulate_mma(call, phases) -> tirx.Stmt:
    operands, tokens = _split_args(call)
    inst = _mma_from_tokens(tokens)
    nd = inst.c_elems // inst.c_pack
    ra, rb = inst.a_regs, inst.b_regs
    d, a, b, c = (operands[:nd], operands[nd:nd + ra], operands[nd + ra:nd + ra + rb],
                  operands[nd + ra + rb:2 * nd + ra + rb])
    if len(operands) != 2 * nd + ra + rb:
        raise LoweringError(f"cannot emulate {inst.ptx}: expected {2 * nd + ra + rb} operands, got {len(operands)}")
    t = phases.flat_thread()
    xa = _exchange(phases, "mma_xa", ra, inst.reg_dtype)
    xb = _exchange(phases, "mma_xb", rb, inst.reg_dtype)
    publish = [tirx.BufferStore(xa, v, [t, i]) for i, v in enumerate(a)]
    publish += [tirx.BufferStore(xb, v, [t, i]) for i, v in enumerate(b)]
    lane = tirx.floormod(t, 32)
    base = tirx.floordiv(t, 32) * 32
    acc_t = {"float32": "float32", "float16": "float32", "float64": "float64"}.get(inst.acc_dtype, "int32")
    tmp = tirx.decl_buffer([inst.c_elems], acc_t, name="mma_d")
    phases.extra.append(tirx.AllocBuffer(tmp))
    steps = []
    for e in range(inst.c_elems):
        kk = tirx.Var("kk", "int32")       # TIR defines each loop variable once
        row, col = inst.c_element(lane, e)
        la, ra, pa = inst.a_owner(row, kk)
        lb, rb, pb = inst.b_owner(kk, col)
        av = tf32_input(_unpack(tirx.BufferLoad(xa, [base + la, ra]), pa, inst.a_dtype), inst.a_dtype)
        bv = tf32_input(_unpack(tirx.BufferLoad(xb, [base + lb, rb]), pb, inst.b_dtype), inst.b_dtype)
        if inst.c_pack == 1:
            cv = _as(acc_t, c[e])
        else:
            cv = tirx.Cast(acc_t, _unpack(c[e // 2], e % 2, "float16"))
        steps.append(tirx.BufferStore(tmp, cv, [e]))
        mac = tirx.BufferStore(tmp, tirx.BufferLoad(tmp, [e]) + tirx.Cast(acc_t, av) * tirx.Cast(acc_t, bv), [e])
        steps.append(tirx.For(kk, 0, inst.k, tirx.ForKind.SERIAL, mac))
    steps += write_accumulator(d, tmp, inst)
    return tirx.SeqStmt([phases.thread_loop(tirx.SeqStmt(publish)), phases.thread_loop(tirx.SeqStmt(steps))])


def write_accumulator(d: list, tmp, inst) -> list:
    """Stores of the computed accumulator elements (``tmp``) into the destination registers ``d``: one element
    per register, or two float16 halves per 32-bit register (``c_pack == 2``), first element in the low half."""
    if inst.c_pack == 1:
        return [_store_to(d[e], _as(str(d[e].ty), tirx.BufferLoad(tmp, [e]))) for e in range(inst.c_elems)]
    return [_store_to(d[r], _pack([tirx.Cast("float16", tirx.BufferLoad(tmp, [2 * r + p])) for p in range(2)],
                                  "float16"))
            for r in range(inst.c_elems // inst.c_pack)]


def shared_element(addr) -> tuple:
    """(buffer, flat element index) a PTX shared-memory address operand points at."""
    node = addr
    while isinstance(node, tvm.ir.Call) and _op_name(node) in ("tirx.cuda.cvta_generic_to_shared", "tirx.ptx.addr"):
        if _op_name(node) == "tirx.ptx.addr" and int_value(node.args[1]) not in (0, None):
            raise LoweringError("cannot emulate an address with a byte offset")
        node = node.args[0]
    if isinstance(node, tvm.ir.Call) and _op_name(node) == "tirx.address_of":
        node = node.args[0]
    if not isinstance(node, TensorLoad) or len(node.indices) != 1:
        raise LoweringError(f"cannot emulate: address operand {addr} is not the address of a flat buffer element")
    return node.source, node.indices[0]


def _emulate_ldmatrix(call, phases) -> tirx.Stmt:
    operands, tokens = _split_args(call)
    trans = "trans" in tokens
    regs, addr = operands[:-1], operands[-1]
    nmat = {"x1": 1, "x2": 2, "x4": 4}[next(t for t in tokens if t in ("x1", "x2", "x4"))]
    if len(regs) != nmat:
        raise LoweringError(f"cannot emulate ldmatrix: {len(regs)} registers for {nmat} matrices")
    buf, index = shared_element(addr)
    dtype = str(buf.dtype)
    per16 = 16 // dtype_bits(dtype)          # buffer elements in one 16-bit matrix element
    t = phases.flat_thread()
    xaddr = _exchange(phases, "ldmatrix_rows", 1, "int32")
    publish = tirx.BufferStore(xaddr, index, [t, 0])
    lane = tirx.floormod(t, 32)
    base = tirx.floordiv(t, 32) * 32

    def row_start(matrix, row):
        return tirx.BufferLoad(xaddr, [base + 8 * matrix + row, 0])

    def cells(start, col16):
        return [tirx.BufferLoad(buf, [start + col16 * per16 + q]) for q in range(per16)]

    out = []
    for j, reg in enumerate(regs):
        if not trans:
            row, col = lane // 4, (lane % 4) * 2
            values = cells(row_start(j, row), col) + cells(row_start(j, row), col + 1)
        else:
            values = cells(row_start(j, (lane % 4) * 2), lane // 4) + cells(row_start(j, (lane % 4) * 2 + 1), lane // 4)
        word = _pack(values, dtype)
        if str(reg.ty) != "uint32":
            word = tirx.reinterpret(str(reg.ty), word)
        out.append(_store_to(reg, word))
    return tirx.SeqStmt([phases.thread_loop(publish), phases.thread_loop(tirx.SeqStmt(out))])
