"""CPU builds only: fp8 as the GPU sees it, where apache-tvm 0.27's LLVM backend gets it wrong.

Three faults of that backend, the first two measured over all 256 codes against ml_dtypes:

- it legalises an allocated fp8 buffer's loads to f32 conversions, so the bit-level reinterpretation every
  tensor-core operand packing needs (``reinterpret("uint8", A_s[i])``: four fp8 codes into one 32-bit
  register) stops compiling ("Invalid bitcast");
- its fp8 -> f32 conversion is wrong for zero and subnormals (e4m3 code 0 becomes 2^-7; 18 e4m3 and 16 e5m2
  codes differ, e5m2 infinities and NaNs become finite);
- a float -> fp8 conversion stored into an allocated fp8 buffer does not compile at all ("bitcast float to
  i8": the per-token fp8 quantisation of the ``fp8_quantize`` case).

So, before the CPU compile: allocated fp8 buffers are held as bytes (uint8), a load becomes
``reinterpret(fp8, A_s_bytes[i])`` (folded away where the kernel takes the bits again) and a store stores the
value's bits; every conversion of an fp8 value to a wider float decodes the code from its bit fields
(``emulate_mma.fp8_to_f32``, the PTX definition); every conversion of a 16- or 32-bit float to fp8 is encoded
bit by bit as CUDA's conversion does it (``f32_to_fp8``: round to nearest even, saturating to the largest
finite value, which is what ``__nv_fp8_e4m3(float)`` and ``cvt.rn.satfinite`` give). Parameters keep their
dtype (the caller's arrays). A float64 source is still left to TVM. CUDA builds never run this pass.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from ..ir_utils import mapped, walk

__all__ = ["byte_storage", "cpu_fp8"]


#: the fp8 formats PTX's tensor cores read (their decoding is written out in ``emulate_mma.fp8_to_f32``)
_DECODED = ("float8_e4m3fn", "float8_e5m2")


def _is_fp8(dtype) -> bool:
    return str(dtype).startswith("float8")


def _reinterpret_arg(expr, dtype: str):
    """``x`` when ``expr`` is ``reinterpret(..., x)`` with ``x`` of ``dtype``, else None."""
    if isinstance(expr, tvm.ir.Call) and isinstance(expr.op, tvm.ir.Op) and str(expr.op.name) == "tirx.reinterpret":
        inner = expr.args[0]
        if str(inner.ty) == dtype:
            return inner
    return None


def cpu_fp8(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with fp8 storage and both conversions made exact for the CPU (module docstring)."""
    return exact_decoding(byte_storage(exact_encoding(func)))


#: largest finite code of each fp8 format (its bit fields are ``emulate_mma._FP8_FORMAT``'s); e4m3fn has no
#: infinity, so its exponent 15 still holds finite values up to mantissa 6, while e5m2's exponent 31 is infinity
_LARGEST = {"float8_e4m3fn": 0x7E, "float8_e5m2": 0x7B}


def f32_to_fp8(value, dtype: str):
    """The uint8 code of the float32 ``value`` in ``dtype``, as CUDA converts: round to nearest even,
    magnitudes past the largest finite value (infinity too) saturate to it, NaN stays NaN, the sign is kept
    (also on zero and on results that underflow to zero).

    On the 24-bit significand ``v`` of ``|value| = v * 2^(E - 23)``: the result's significand keeps
    ``mbits + 1`` bits for a normal result, fewer below the smallest normal exponent ``emin`` (one fewer per
    binade); rounding ``v`` right by that shift gives ``q``, and the code is ``max(E - emin, 0) << mbits``
    plus ``q`` (a carry out of the significand moves into the exponent field by itself)."""
    from .emulate_mma import _FP8_FORMAT
    _, mbits, bias = _FP8_FORMAT[dtype]
    largest = _LARGEST[dtype]
    emin = 1 - bias
    i64 = lambda v: tirx.const(v, "int64")        # noqa: E731
    bits = tirx.Cast("int64", tirx.reinterpret("uint32", tirx.Cast("float32", value)))
    sign = tirx.shift_right(bits, i64(31))
    field = tirx.bitwise_and(tirx.shift_right(bits, i64(23)), i64(0xFF))
    man = tirx.bitwise_and(bits, i64(0x7FFFFF))
    exp = field - i64(127)
    sig = tirx.bitwise_or(man, i64(1 << 23))
    shift = tirx.min(i64(23 - mbits) + tirx.max(emin - exp, i64(0)), i64(40))
    q = tirx.shift_right(sig, shift)
    rest = tirx.bitwise_and(sig, tirx.shift_left(i64(1), shift) - i64(1))
    half = tirx.shift_left(i64(1), shift - i64(1))
    up = tirx.Or(rest > half, tirx.And(rest == half, tirx.bitwise_and(q, i64(1)) == i64(1)))
    code = tirx.max(exp - i64(emin), i64(0)) * i64(1 << mbits) + q + tirx.Select(up, i64(1), i64(0))
    code = tirx.min(code, i64(largest))
    code = tirx.Select(field == i64(0), i64(0), code)          # zero, and float32 subnormals (far below fp8's)
    nan = i64(0x7F) if dtype == "float8_e4m3fn" else \
        tirx.bitwise_or(i64(0x7E), tirx.bitwise_and(tirx.shift_right(man, i64(23 - mbits)), i64(3)))
    code = tirx.Select(tirx.And(field == i64(0xFF), man != i64(0)), nan, code)
    return tirx.Cast("uint8", tirx.bitwise_or(code, tirx.shift_left(sign, i64(7))))


def exact_encoding(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Every ``Cast(fp8, x)`` of a 16- or 32-bit float ``x`` (formats with a ``_LARGEST``) encoded bit by bit
    (``f32_to_fp8``); widening those sources to float32 is exact."""
    def on_cast(c):
        dst, src = str(c.ty), str(c.value.ty)
        if dst not in _LARGEST or src not in ("float32", "float16", "bfloat16"):
            return c
        return tirx.reinterpret(dst, f32_to_fp8(c.value, dst))

    return func.with_body(mapped(func.body, [(tirx.Cast, on_cast)]))


def exact_decoding(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Every ``Cast(float, x)`` of an fp8 value ``x`` decoded from ``x``'s bits."""
    from .emulate_mma import fp8_to_f32

    def on_cast(c):
        src = str(c.value.ty)
        if src not in _DECODED or not str(c.ty).startswith(("float", "bfloat")) or _is_fp8(c.ty):
            return c
        bits = _reinterpret_arg(c.value, "uint8")
        bits = bits if bits is not None else tirx.reinterpret("uint8", c.value)
        value = fp8_to_f32(tirx.Cast("uint32", bits), src)
        return value if str(c.ty) == "float32" else tirx.Cast(str(c.ty), value)

    return func.with_body(mapped(func.body, [(tirx.Cast, on_cast)]))


def constant_code(value: float, dtype: str) -> int:
    """The uint8 code of the constant ``value`` in the fp8 ``dtype``, converted as CUDA does (round to nearest
    even, saturating to the largest finite value; NaN stays NaN)."""
    import ml_dtypes
    import numpy as np
    fmt = np.dtype(getattr(ml_dtypes, dtype))
    top = float(ml_dtypes.finfo(fmt).max)
    clipped = value if value != value else min(max(value, -top), top)
    return int(np.array([clipped], dtype=np.float64).astype(fmt).view(np.uint8)[0])


def _as_bytes(value, dtype: str):
    """The uint8 code of the fp8 ``value`` stored into a byte-held buffer. A constant (the cp.async emulation's
    NaN poison, a bounds guard's pad) becomes its code, as LLVM cannot bitcast a float to i8; a choice between
    values (a guarded load, ``if_then_else(in_bounds, A[i], pad)``) chooses between their codes."""
    inner = _reinterpret_arg(value, "uint8")
    if inner is not None:
        return inner
    if isinstance(value, tirx.FloatImm):
        return tirx.const(constant_code(float(value.value), dtype), "uint8")
    if isinstance(value, tirx.Select):
        return tirx.Select(value.condition, _as_bytes(value.true_value, dtype), _as_bytes(value.false_value, dtype))
    if isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op) and \
            str(value.op.name) in ("prim.if_then_else", "tirx.if_then_else"):
        cond, a, b = value.args
        return tirx.if_then_else(cond, _as_bytes(a, dtype), _as_bytes(b, dtype))
    return tirx.reinterpret("uint8", value)


def byte_storage(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every allocated fp8 buffer held as uint8 (see the module docstring)."""
    found: list = []
    walk(func.body, [(tirx.AllocBuffer, lambda a: found.append(a.buffer) if _is_fp8(a.buffer.dtype) else None)])
    if not found:
        return func
    swap = {}
    for buf in found:
        swap[buf] = tirx.decl_buffer(list(buf.shape), "uint8", name=f"{buf.name}_bytes", scope=buf.scope())

    def new_of(buf):
        for old, new in swap.items():
            if old.same_as(buf):
                return old, new
        return None, None

    def on_load(e):
        old, new = new_of(e.source)
        if old is None:
            return e
        return tirx.reinterpret(str(old.dtype), tirx.BufferLoad(new, list(e.indices)))

    def on_call(c):
        if not isinstance(c.op, tvm.ir.Op):
            return c
        if str(c.op.name) == "tirx.reinterpret" and str(c.ty) == "uint8":
            inner = _reinterpret_arg(c.args[0], "uint8")
            if inner is not None:
                return inner
        return c

    def on_store(s):
        old, new = new_of(s.buffer)
        if old is None:
            return s
        return tirx.BufferStore(new, _as_bytes(s.value, str(old.dtype)), list(s.indices))

    def on_alloc(a):
        old, new = new_of(a.buffer)
        return a if old is None else tirx.AllocBuffer(new, a.annotations)

    body = mapped(func.body, [(TensorLoad, on_load), (tvm.ir.Call, on_call), (tirx.BufferStore, on_store),
                              (tirx.AllocBuffer, on_alloc)])
    return func.with_body(body)
