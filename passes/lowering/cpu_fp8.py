"""CPU builds only: fp8 as the GPU sees it, where apache-tvm 0.27's LLVM backend gets it wrong.

Two faults of that backend, both measured over all 256 codes against ml_dtypes:

- it legalises an allocated fp8 buffer's loads to f32 conversions, so the bit-level reinterpretation every
  tensor-core operand packing needs (``reinterpret("uint8", A_s[i])``: four fp8 codes into one 32-bit
  register) stops compiling ("Invalid bitcast");
- its fp8 -> f32 conversion is wrong for zero and subnormals (e4m3 code 0 becomes 2^-7; 18 e4m3 and 16 e5m2
  codes differ, e5m2 infinities and NaNs become finite).

So, before the CPU compile: allocated fp8 buffers are held as bytes (uint8), a load becomes
``reinterpret(fp8, A_s_bytes[i])`` (folded away where the kernel takes the bits again) and a store stores the
value's bits; every conversion of an fp8 value to a wider float decodes the code from its bit fields
(``emulate_mma.fp8_to_f32``, the PTX definition). Parameters keep their dtype (the caller's arrays). The
reverse conversion (float -> fp8) is left to TVM: it flushes e4m3 subnormal results to zero on the CPU (a
known difference; no gemm path converts to fp8). CUDA builds never run this pass.
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
    """``func`` with fp8 storage and fp8 -> float conversions made exact for the CPU (module docstring)."""
    return exact_decoding(byte_storage(func))


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
        value = _reinterpret_arg(s.value, "uint8")
        if value is None:
            value = tirx.reinterpret("uint8", s.value)
        return tirx.BufferStore(new, value, list(s.indices))

    def on_alloc(a):
        old, new = new_of(a.buffer)
        return a if old is None else tirx.AllocBuffer(new, a.annotations)

    body = mapped(func.body, [(TensorLoad, on_load), (tvm.ir.Call, on_call), (tirx.BufferStore, on_store),
                              (tirx.AllocBuffer, on_alloc)])
    return func.with_body(body)
