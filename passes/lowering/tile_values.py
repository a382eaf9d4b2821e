"""The scalar values tile ops compute: elementwise operations, reduction identities and combiners, and the
warp-shuffle step of a butterfly. Shared by tile-op lowering and by the sequential semantics
(``serialize_threads``), so the lowered kernel and its layout-free reference compute each value alike.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from .loop_partition import LoweringError

__all__ = ["elementwise_value", "member_mask", "reduce_identity", "reduce_combine"]


def _cast(dtype: str, value):
    if isinstance(value, (int, float)):
        return tirx.const(value, dtype)
    return value if str(value.ty) == dtype else tirx.Cast(dtype, value)


def _is_one(value) -> bool:
    if isinstance(value, (int, float)):
        return value == 1
    return isinstance(value, (tirx.FloatImm, tirx.IntImm)) and float(value.value) == 1.0


def member_mask(thread_range: tuple | None, threads: int, warp: int):
    """The member mask of a shuffle every thread of ``thread_range`` (None: the whole block) executes.

    A constant full mask when that range is whole warps: ptxas then needs no ``__activemask()`` result per
    shuffle (7 registers fewer on a 32-row butterfly). Otherwise ``__activemask()``, which names the lanes that
    reach the shuffle; a constant naming lanes that never arrive would be undefined behaviour."""
    lo, ext = thread_range if thread_range is not None else (0, threads)
    if lo % warp == 0 and ext % warp == 0:
        return tirx.const((1 << warp) - 1, "uint32")
    return tirx.call_intrin("uint32", "tirx.tvm_warp_activemask")


def _shuffle_xor(value, mask: int, warp: int, members):
    """``value`` of the lane ``mask`` apart; ``members``: the shuffle's member mask (``member_mask``)."""
    dtype = str(value.ty)
    bits = tvm.DataType(dtype).bits
    wide = dtype if bits >= 32 or (dtype in ("float16", "bfloat16")) else ("float32" if "float" in dtype else "int32")
    v = _cast(wide, value)
    out = tirx.call_intrin(wide, "tirx.tvm_warp_shuffle_xor", members, v, mask, warp, warp)
    return _cast(dtype, out)


def reduce_identity(reducer: str, dtype: str):
    if reducer == "sum":
        return tirx.const(0, dtype)
    if reducer == "max":
        return tirx.min_value(dtype)
    if reducer == "min":
        return tirx.max_value(dtype)
    raise LoweringError(f"unknown reducer {reducer!r}")


def reduce_combine(reducer: str, a, b):
    if reducer == "sum":
        return a + b
    if reducer == "max":
        return tirx.max(a, b)
    if reducer == "min":
        return tirx.min(a, b)
    raise LoweringError(f"unknown reducer {reducer!r}")


def _operands(op, node, loads: list) -> list:
    """Positional operands of an elementwise tile call: loads for regions, the scalars as they are (from the
    op's own operand list when it was expanded from a composite primitive)."""
    from tvm.ir import TensorRegion
    out, it = [], iter(loads)
    if getattr(op, "operands", None) is not None:
        return [next(it) if hasattr(a, "buffer") else a for a in op.operands]
    for a in list(node.args)[1:]:
        out.append(next(it) if isinstance(a, TensorRegion) else a)
    return out


def elementwise_value(name: str, dtype: str, operands: list, old):
    """The value an elementwise tile op stores (TIRx semantics: ``dst = f(operands)``)."""
    def arg(k, default=None):
        v = operands[k] if k < len(operands) else None
        return default if v is None else _cast(dtype, v)

    if name == "zero":
        return tirx.const(0, dtype)
    if name in ("add", "sub", "mul", "fdiv", "maximum", "minimum"):
        a, b = arg(0), arg(1)
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "fdiv": lambda: a / b,
                "maximum": lambda: tirx.max(a, b), "minimum": lambda: tirx.min(a, b)}[name]()
    if name == "cast":
        return _cast(dtype, operands[0] if operands and operands[0] is not None else old)
    if name == "fma":
        return arg(0) * arg(1) + arg(2)
    if name in ("exp", "exp2", "log2", "sqrt"):
        x = arg(0, old)
        scale, bias = arg(2), arg(1)
        if scale is not None:
            x = x * scale
        if bias is not None:
            x = x + bias
        return {"exp": tirx.exp, "exp2": tirx.exp2, "log2": tirx.log2, "sqrt": tirx.sqrt}[name](x)
    if name == "negate":
        return tirx.const(0, dtype) - arg(0, old)
    if name == "reciprocal":
        return tirx.const(1, dtype) / arg(0, old)
    if name == "silu":
        x = arg(0, old)
        return x / (tirx.const(1, dtype) + tirx.exp(tirx.const(0, dtype) - x))
    raise LoweringError(f"elementwise tile op {name!r} has no lowering")


def _leading_bits(masks: list) -> int:
    """The leading bits of an echelon basis of the xor masks ``masks``: exactly one thread id of every coset
    ``tx ^ span(masks)`` has none of them set."""
    basis: list = []
    for m in masks:
        for b in basis:
            m = min(m, m ^ b)
        if m:
            basis.append(m)
    out = 0
    for b in basis:
        out |= 1 << (b.bit_length() - 1)
    return out
