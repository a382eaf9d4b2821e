"""TIRx's composite and remaining tile primitives, expressed as the ops layout inference already models.

- ``memset(dst, v)``: a fill.
- ``unary_reduce(u_out, r_out, x, unary_op, reduce_op, bias, scale, axes)``: ``u_out = unary(x * scale + bias)``
  then ``r_out = reduce(u_out, axes)``: an elementwise op and a reduction from the same statement.
- ``binary_reduce(b_out, r_out, x, y, binary_op, reduce_op, axes)``: ``b_out = x op y``, ``r_out = reduce(b_out)``.
- ``binary_chain(out, data, a, b, op0, op1, reverse1)``: ``out = (a op0 data) op1 b`` (``b op1 (...)`` when
  reversed): one elementwise op.
- ``reduce_negate(out, x, axes, accum, reduce_op)``: ``out = -reduce(x, axes)``: a reduction, then a negation
  (accumulating is refused: TVM does not say whether the old value is combined before or after negating).

- ``select(dst, a, b, lambda i, j: pred)``: ``dst[i, j] = a[i, j] if pred(i, j) else b[i, j]`` (``a`` and ``b``
  regions or scalars): an elementwise op whose lowering is a per-thread select. The lambda's arguments are the
  coordinates in ``dst`` (the region must start at the origin, so region and buffer coordinates agree) and it
  may use scalars and loop variables but read no buffer (inference would not see the read; pass a mask as a
  region operand of an elementwise op instead).

Refused with the reason and the spelling that works: ``permute_layout`` (moves bytes between two explicit
TileLayouts; layout inference chooses layouts itself, so pin the layout you need instead).
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


def _select(b, call: Any, args: list) -> None:
    from tvm.tirx.tile_primitive import LambdaExpr
    from tvm.ir import TensorLoad
    from tilelayout.passes.ir_utils import walk
    args = [a for a in args if a is not None]
    if len(args) != 4 or not isinstance(args[3], LambdaExpr):
        raise FrontendError(f"{call.op.name}: expected (dst, true_value, false_value, lambda), got {len(args)} "
                            f"arguments:\n{_stmt_text(call)}")
    dst = b.region(args[0], call, "destination")
    pred = args[3]
    if len(list(pred.vars)) != len(dst.extents):
        raise FrontendError(f"{call.op.name}: the predicate takes {len(list(pred.vars))} coordinates, the "
                            f"destination {dst} has {len(dst.extents)} dimensions:\n{_stmt_text(call)}")
    if any(_const(o) != 0 for o in dst.offsets):
        raise FrontendError(f"{call.op.name}: the destination {dst} does not start at the origin, so whether the "
                            f"predicate's coordinates count from the region or from the buffer would be a guess; "
                            f"select on the whole buffer (or a region starting at 0):\n{_stmt_text(call)}")
    loads: list = []
    walk(pred.pred, [(TensorLoad, lambda e: loads.append(e.source.name))])
    if loads:
        raise FrontendError(f"{call.op.name} is not supported with this predicate: it reads {loads[0]}, and a "
                            f"select's predicate may use its coordinates, loop variables and scalars only (layout "
                            f"inference would not see the read); select on a mask region with a T.parallel loop "
                            f"and T.if_then_else instead:\n{_stmt_text(call)}")
    operands = [_operand(b, call, a, what) for a, what in ((args[1], "true value"), (args[2], "false value"))]
    _elementwise(b, call, "select", dst, operands, [pred])


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
        _select(b, call, args)
    elif short == "permute_layout":
        raise FrontendError(
            f"{call.op.name} is not supported: it moves bytes between two explicit TileLayouts, while layout "
            f"inference chooses layouts itself; pin the layout the consumer needs (a TileLayout on the buffer "
            f"or tl.annotate_layouts) and let inference place the data:\n{_stmt_text(call)}")
    else:
        raise FrontendError(f"tile op {call.op.name} is not supported:\n{_stmt_text(call)}")
