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
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise LayoutError(f"cannot parse extent {text[:80]!r}: {getattr(err, 'msg', err)}") from None
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})


def layout_from_dict(d: dict, variables: dict | None = None):
    """Inverse of ``to_dict``: rebuild a Layout or Fragment from its snapshot form.

    Symbolic extents ("n") become fresh int32 Vars unless ``variables`` ({name: Var}) supplies them, so a
    caller who owns the shape variables gets back a layout over the very same ones. Malformed input (wrong
    types, unknown kinds, bad expressions, negative outputs) raises LayoutError naming the field.
    """
    from .exprparse import parse_expr
    if not isinstance(d, dict) or "kind" not in d:
        raise LayoutError(f"not a layout dict: {_short(d)}")
    kind = d["kind"]
    if kind not in ("Layout", "Fragment"):
        raise LayoutError(f"unknown layout kind {_short(kind)} (expected 'Layout' or 'Fragment')")
    required = ["input_shape", "forward_index"] + (["forward_thread"] if kind == "Fragment" else [])
    missing = [k for k in required if k not in d]
    if missing:
        raise LayoutError(f"layout dict of kind {kind!r} lacks {', '.join(missing)}: {_short(d)}")
    raw_shape, raw_index = d["input_shape"], d["forward_index"]
    if not isinstance(raw_shape, (list, tuple)) or not raw_shape:
        raise LayoutError(f"layout dict: input_shape must be a non-empty list of extents, got {_short(raw_shape)}")
    for s in raw_shape:
        if isinstance(s, bool) or not isinstance(s, (int, str)):
            raise LayoutError(f"layout dict: an extent must be a positive int or an expression string, got {_short(s)}")
    if not isinstance(raw_index, (list, tuple)) or not all(isinstance(e, str) for e in raw_index):
        raise LayoutError(f"layout dict: forward_index must be a list of expression strings, got {_short(raw_index)}")
    names = dict(variables or {})
    for s in raw_shape:  # symbolic extents name their own variables; reuse the caller's if given
        if isinstance(s, str):
            for name in _identifiers(s):
                if name in _BY_NAME:
                    raise LayoutError(f"layout dict: extent {s!r} uses the placeholder {name!r}")
                if name not in names:
                    names[name] = tirx.Var(name, "int32")
    scope = {**names, **_BY_NAME}
    shape = [s if isinstance(s, int) else parse_expr(s, names) for s in raw_shape]
    exprs = [parse_expr(e, scope) for e in raw_index]
    if kind == "Layout":
        return _checked_outputs(Layout.from_exprs(shape, exprs))
    thread = d["forward_thread"]
    if not isinstance(thread, str):
        raise LayoutError(f"layout dict: forward_thread must be an expression string, got {_short(thread)}")
    replicate = d.get("replicate", 1)
    if isinstance(replicate, bool) or not isinstance(replicate, int):
        raise LayoutError(f"layout dict: replicate must be a positive int, got {_short(replicate)}")
    frag = Fragment.from_exprs(shape, parse_expr(thread, scope), exprs, replicate)
    rng = d.get("thread_range")
    if rng is not None:
        if not isinstance(rng, (list, tuple)) or len(rng) != 2:
            raise LayoutError(f"layout dict: thread_range must be [min, extent], got {_short(rng)}")
        frag = frag.bind_thread_range(*rng)
    return _checked_outputs(frag)


def _checked_outputs(layout):
    """Compute the output shape now (it raises for negative outputs), so a bad dict fails where it is read."""
    if layout.is_static:
        layout.output_shape
    return layout


def _short(value, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
