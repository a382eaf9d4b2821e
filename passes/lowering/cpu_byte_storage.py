"""CPU build only: fp8 buffers the kernel allocates are stored as bytes (uint8), values unchanged.

Why: apache-tvm 0.27's LLVM backend legalises an allocated fp8 buffer's loads to f32 conversions, so the
bit-level reinterpretation every tensor-core operand packing needs (``reinterpret("uint8", A_s[i])``: four fp8
codes into one 32-bit register) stops compiling ("Invalid bitcast"), and its fp8 -> f32 conversion maps the code
0 to 2^-7. Holding such buffers as uint8 keeps every code bit-exact: a load becomes
``reinterpret(fp8, A_s_bytes[i])`` (folded away where the kernel takes the bits again), a store stores the
value's bits. Parameters keep their dtype (the caller's arrays); CUDA builds never run this pass.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from ..ir_utils import mapped, walk

__all__ = ["byte_storage"]


def _is_fp8(dtype) -> bool:
    return str(dtype).startswith("float8")


def _reinterpret_arg(expr, dtype: str):
    """``x`` when ``expr`` is ``reinterpret(..., x)`` with ``x`` of ``dtype``, else None."""
    if isinstance(expr, tvm.ir.Call) and isinstance(expr.op, tvm.ir.Op) and str(expr.op.name) == "tirx.reinterpret":
        inner = expr.args[0]
        if str(inner.ty) == dtype:
            return inner
    return None


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
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) == "tirx.reinterpret" and str(c.ty) == "uint8":
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
