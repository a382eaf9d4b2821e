"""Snapshot form of layouts: ``layout_from_dict`` rebuilds a Layout or Fragment from ``to_dict``'s output.

It lives apart from both classes because it builds either kind (so neither module imports the other).
"""
from __future__ import annotations

from tvm import tirx

from .errors import LayoutError
from .expr import _BY_NAME
from .fragment import Fragment
from .layout import Layout

__all__ = ["layout_from_dict"]

def _identifiers(text: str) -> list:
    import ast
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise LayoutError(f"cannot parse extent {text!r}: {err.msg}") from None
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})


def layout_from_dict(d: dict, variables: dict | None = None):
    """Inverse of ``to_dict``: rebuild a Layout or Fragment from its snapshot form.

    Symbolic extents ("n") become fresh int32 Vars unless ``variables`` ({name: Var}) supplies them, so a
    caller who owns the shape variables gets back a layout over the very same ones.
    """
    from .exprparse import parse_expr
    if not isinstance(d, dict) or "kind" not in d:
        raise LayoutError(f"not a layout dict: {d!r}")
    required = ["input_shape", "forward_index"] + (["forward_thread"] if d["kind"] == "Fragment" else [])
    missing = [k for k in required if k not in d]
    if missing:
        raise LayoutError(f"layout dict of kind {d['kind']!r} lacks {', '.join(missing)}: {d!r}")
    names = dict(variables or {})
    for s in d["input_shape"]:  # symbolic extents name their own variables; reuse the caller's if given
        if isinstance(s, str):
            for name in _identifiers(s):
                if name not in names and name not in _BY_NAME:
                    names[name] = tirx.Var(name, "int32")
    scope = {**names, **_BY_NAME}
    shape = [s if isinstance(s, int) else parse_expr(s, names) for s in d["input_shape"]]
    exprs = [parse_expr(e, scope) for e in d["forward_index"]]
    if d["kind"] == "Layout":
        return Layout.from_exprs(shape, exprs)
    if d["kind"] != "Fragment":
        raise LayoutError(f"unknown layout kind {d['kind']!r}")
    frag = Fragment.from_exprs(shape, parse_expr(d["forward_thread"], scope), exprs, int(d.get("replicate", 1)))
    if d.get("thread_range") is not None:
        frag = frag.bind_thread_range(*d["thread_range"])
    return frag
