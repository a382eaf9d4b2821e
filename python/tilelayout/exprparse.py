"""Parse index expressions printed by TVM (``_i // 8 * 8 + _j % 8``) back into PrimExprs.

Snapshots store expressions as TVM prints them; reading them back needs a parser that accepts exactly
that printed form and nothing else (no eval of arbitrary Python).
"""
from __future__ import annotations

import ast
from typing import Mapping

from tvm import tirx

from .errors import LayoutError

__all__ = ["parse_expr"]

#: longest expression text accepted (printed layouts are far shorter)
MAX_TEXT = 100_000

_BINOPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: tirx.floordiv, ast.Mod: tirx.floormod,
    ast.BitXor: tirx.bitwise_xor, ast.BitAnd: tirx.bitwise_and, ast.BitOr: tirx.bitwise_or,
    ast.LShift: tirx.shift_left, ast.RShift: tirx.shift_right,
}
_CMPOPS = {
    ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: tirx.EQ(a, b), ast.NotEq: lambda a, b: tirx.NE(a, b),
}
_CALLS = {
    "max": tirx.max, "min": tirx.min, "Select": tirx.Select, "if_then_else": tirx.if_then_else,
    "truncdiv": tirx.truncdiv, "truncmod": tirx.truncmod, "Div": tirx.truncdiv,
    "bitwise_xor": tirx.bitwise_xor, "bitwise_and": tirx.bitwise_and, "bitwise_or": tirx.bitwise_or,
    "shift_left": tirx.shift_left, "shift_right": tirx.shift_right,
}


def parse_expr(text: str, variables: Mapping[str, tirx.Var]):
    """Turn printed expression ``text`` into a PrimExpr over ``variables`` (name -> Var)."""
    if not isinstance(text, str):
        raise LayoutError(f"an index expression must be a str, got {type(text).__name__}: {text!r}")
    if len(text) > MAX_TEXT:
        raise LayoutError(f"index expression of {len(text)} characters is longer than the {MAX_TEXT} accepted")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise LayoutError(f"cannot parse index expression {text[:80]!r}: {getattr(err, 'msg', err)}") from None

    def conv(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return tirx.const(node.value, "bool")
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return tirx.const(node.value, "int32")
        if isinstance(node, ast.Name):
            if node.id not in variables:
                raise LayoutError(f"unknown variable {node.id!r} in index expression {text!r}")
            return variables[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = conv(node.left), conv(node.right)
            if type(node.op) in (ast.FloorDiv, ast.Mod) and _is_zero(right):
                raise LayoutError(f"division by zero in index expression {text!r}")
            return _build(_BINOPS[type(node.op)], left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return tirx.const(0, "int32") - conv(node.operand)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMPOPS:
            return _CMPOPS[type(node.ops[0])](conv(node.left), conv(node.comparators[0]))
        if isinstance(node, ast.BoolOp):
            parts = [conv(v) for v in node.values]
            out = parts[0]
            for p in parts[1:]:
                out = tirx.And(out, p) if isinstance(node.op, ast.And) else tirx.Or(out, p)
            return out
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name == "Cast" and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                return _build(tirx.Cast, node.args[0].value, conv(node.args[1]))
            if name in _CALLS and not node.keywords:
                return _build(_CALLS[name], *[conv(a) for a in node.args])
        raise LayoutError(f"unsupported construct {ast.dump(node)[:60]} in index expression {text!r}")

    try:
        return conv(tree.body)
    except RecursionError:
        raise LayoutError(f"index expression {text[:80]!r}... is nested too deeply") from None


def _is_zero(e) -> bool:
    return isinstance(e, tirx.IntImm) and int(e.value) == 0


def _build(fn, *args):
    """Apply a TVM constructor, turning its argument errors (wrong arity, types, division by zero) into
    LayoutError."""
    try:
        return fn(*args)
    except LayoutError:
        raise
    except Exception as err:  # TVM raises TypeError / TVMError subclasses for malformed arguments
        raise LayoutError(f"malformed index expression: {type(err).__name__}: {str(err).splitlines()[0][:200]}") \
            from None
