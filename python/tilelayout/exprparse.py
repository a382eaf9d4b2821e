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
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise LayoutError(f"cannot parse index expression {text!r}: {err.msg}") from None

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
            return _BINOPS[type(node.op)](conv(node.left), conv(node.right))
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
            if name == "Cast" and len(node.args) == 2 and isinstance(node.args[0], ast.Constant):
                return tirx.Cast(node.args[0].value, conv(node.args[1]))
            if name in _CALLS:
                return _CALLS[name](*[conv(a) for a in node.args])
        raise LayoutError(f"unsupported construct {ast.dump(node)[:60]} in index expression {text!r}")

    return conv(tree.body)
