"""TIRx's composite and remaining tile primitives, expressed as the ops layout inference already models.

- ``memset(dst, v)``: a fill.
- ``unary_reduce(u_out, r_out, x, unary_op, reduce_op, bias, scale, axes)``: ``u_out = unary(x * scale + bias)``
  then ``r_out = reduce(u_out, axes)``: an elementwise op and a reduction from the same statement.
- ``binary_reduce(b_out, r_out, x, y, binary_op, reduce_op, axes)``: ``b_out = x op y``, ``r_out = reduce(b_out)``.
- ``binary_chain(out, data, a, b, op0, op1, reverse1)``: ``out = (a op0 data) op1 b`` (``b op1 (...)`` when
  reversed): one elementwise op.
- ``reduce_negate(out, x, axes, accum, reduce_op)``: ``out = -reduce(x, axes)``: a reduction, then a negation
  (accumulating is refused: TVM does not say whether the old value is combined before or after negating).

Refused with the reason and the spelling that works: ``select`` (its predicate is a lambda over the
destination's coordinates that TVM 0.27 lowers only for Trainium; write a ``T.parallel`` loop with
``T.if_then_else``), ``permute_layout`` (moves bytes between two explicit TileLayouts; layout inference
chooses layouts itself, so pin the layout you need instead).
"""
from __future__ import annotations

from typing import Any

import tvm
from tvm.ir import TensorRegion

from .ops import ElementwiseOp, FillOp, FrontendError, ReduceOp, _const, _stmt_text
from .region_checks import match_regions, reduce_axes

__all__ = ["COMPOSITE_OPS", "expand_composite"]

_UNARY = ("exp", "exp2", "log2", "sqrt", "reciprocal", "silu")
_BINARY = ("add", "sub", "mul", "fdiv", "maximum", "minimum")
_REDUCERS = ("sum", "max", "min")

COMPOSITE_OPS = ("memset", "unary_reduce", "binary_reduce", "binary_chain", "reduce_negate", "select",
                 "permute_layout")


def _op_name(value: Any, call: Any, what: str, allowed: tuple) -> str:
    if isinstance(value, tvm.ir.Op):
        name = str(value.name).rsplit(".", 1)[-1]
    elif isinstance(value, (str, tvm.ir.StringImm)):
        name = str(value.value if isinstance(value, tvm.ir.StringImm) else value)
    else:
        name = None
    if name not in allowed:
        raise FrontendError(f"{call.op.name}: {what} must be one of {', '.join(allowed)}, got `{value}`:\n"
                            f"{_stmt_text(call)}")
    return name


def _operand(b, call: Any, value: Any, what: str):
    """A Region for a buffer region operand, the scalar itself otherwise."""
    if isinstance(value, TensorRegion):
        return b.region(value, call, what)
    if value is not None:
        b.float_scan(value)
    return value


def _elementwise(b, call: Any, name: str, dst, operands: list, params: list = ()) -> None:
    srcs = [o for o in operands if not isinstance(o, (int, float)) and hasattr(o, "buffer")]
    match_regions(call, name, [dst] + srcs)
    b.add(ElementwiseOp, call, name=name, dst=dst, srcs=srcs,
          params=[o for o in operands if not hasattr(o, "buffer")] + list(params), operands=tuple(operands))


def _reduce(b, call: Any, reducer: str, dst, src, raw_axes: Any, accum: bool) -> None:
    axes = reduce_axes(call, raw_axes, src, dst)
    b.add(ReduceOp, call, reducer=reducer, dst=dst, src=src, axes=axes, clear=not accum)


def expand_composite(b, call: Any, short: str, args: list) -> None:
    """Add the ops one composite tile primitive means to the graph (``b``: the front end's builder)."""
    if short == "memset":
        b._arity(call, args, 2)
        b.float_scan(args[1])
        b.add(FillOp, call, dst=b.region(args[0], call, "destination"), value=args[1])
    elif short == "unary_reduce":
        b._arity(call, args, 8)
        u_out, r_out = b.region(args[0], call, "unary output"), b.region(args[1], call, "reduce output")
        x = b.region(args[2], call, "unary input")
        unary = _op_name(args[3], call, "unary_op", _UNARY)
        reducer = _op_name(args[4], call, "reduce_op", _REDUCERS)
        bias, scale = _operand(b, call, args[5], "bias"), _operand(b, call, args[6], "scale")
        if (bias is not None or scale is not None) and unary not in ("exp", "exp2", "log2", "sqrt"):
            raise FrontendError(f"{call.op.name}: bias/scale apply to exp, exp2, log2 and sqrt only, not "
                                f"{unary}:\n{_stmt_text(call)}")
        _elementwise(b, call, unary, u_out, [x, bias, scale])
        _reduce(b, call, reducer, r_out, u_out, args[7], False)
    elif short == "binary_reduce":
        b._arity(call, args, 7)
        b_out, r_out = b.region(args[0], call, "binary output"), b.region(args[1], call, "reduce output")
        x, y = _operand(b, call, args[2], "input 1"), _operand(b, call, args[3], "input 2")
        binary = _op_name(args[4], call, "binary_op", _BINARY)
        reducer = _op_name(args[5], call, "reduce_op", _REDUCERS)
        _elementwise(b, call, binary, b_out, [x, y])
        _reduce(b, call, reducer, r_out, b_out, args[6], False)
    elif short == "binary_chain":
        b._arity(call, args, 7)
        out = b.region(args[0], call, "output")
        data = b.region(args[1], call, "data")
        a, c = _operand(b, call, args[2], "operand0"), _operand(b, call, args[3], "operand1")
        op0 = _op_name(args[4], call, "op0", _BINARY)
        op1 = _op_name(args[5], call, "op1", _BINARY)
        reverse = bool(_const(args[6]))
        _elementwise(b, call, "binary_chain", out, [data, a, c], [op0, op1, reverse])
    elif short == "reduce_negate":
        b._arity(call, args, 5)
        out, x = b.region(args[0], call, "output"), b.region(args[1], call, "input")
        accum = args[3]
        accum = bool(_const(list(accum)[0] if not isinstance(accum, (bool, int)) and hasattr(accum, "__len__")
                            and len(accum) == 1 else accum))
        if accum:
            raise FrontendError(f"{call.op.name}: accumulating (accum=True) is not supported: TVM does not define "
                                f"whether the old value is combined before or after the negation; reduce into a "
                                f"temporary and combine explicitly:\n{_stmt_text(call)}")
        reducer = _op_name(args[4], call, "reduce_op", _REDUCERS)
        _reduce(b, call, reducer, out, x, args[2], False)
        _elementwise(b, call, "negate", out, [out])
    elif short == "select":
        raise FrontendError(
            f"{call.op.name} is not supported: its predicate is a lambda over the destination's coordinates that "
            f"TVM 0.27 lowers only for Trainium; write `for i, j in T.parallel(...): dst[i, j] = "
            f"T.if_then_else(pred(i, j), a[i, j], b)` instead:\n{_stmt_text(call)}")
    elif short == "permute_layout":
        raise FrontendError(
            f"{call.op.name} is not supported: it moves bytes between two explicit TileLayouts, while layout "
            f"inference chooses layouts itself; pin the layout the consumer needs (a TileLayout on the buffer "
            f"or tl.annotate_layouts) and let inference place the data:\n{_stmt_text(call)}")
    else:
        raise FrontendError(f"tile op {call.op.name} is not supported:\n{_stmt_text(call)}")
