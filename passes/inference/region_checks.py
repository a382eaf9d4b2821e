"""Checks of a tile op's regions against each other, shared by the front end and the composite ops it expands.

Both modules read a call's operands into ``Region``s and must refuse the same mismatches with the same words;
the checks live here so neither has to import the other.
"""
from __future__ import annotations

from typing import Any

from tvm import tirx

from .ops import FrontendError, Region, _const, _is_int, _stmt_text, _text

__all__ = ["match_regions", "reduce_axes"]


def match_regions(call: Any, what: str, regions: list[Region]) -> None:
    """Tile-op regions must describe the same box once unit dimensions are dropped."""
    shapes = [r.squeezed_extents() for r in regions]
    first = shapes[0]
    for r, s in zip(regions[1:], shapes[1:]):
        bad = len(s) != len(first) or any(
            _is_int(x) and _is_int(y) and x != y for x, y in zip(s, first))
        if bad:
            raise FrontendError(
                f"{call.op.name}: regions {regions[0]} and {r} do not match (extents "
                f"{[_text(x) for x in first]} vs {[_text(x) for x in s]} without unit dims):\n"
                f"{_stmt_text(call)}")


def reduce_axes(call: Any, raw: Any, src: Region, dst: Region) -> list[int]:
    """The axes ``raw`` names, normalised and sorted; the destination must be the source without them."""
    items = list(raw) if not isinstance(raw, (int, tirx.IntImm)) else [raw]
    axes: list[int] = []
    for a in items:
        a = _const(a)
        if not _is_int(a) or not -src.rank <= a < src.rank:
            raise FrontendError(f"{call.op.name}: axis {_text(a)} out of range for source "
                                f"{src} of rank {src.rank}:\n{_stmt_text(call)}")
        axes.append(a % src.rank)
    axes = sorted(set(axes))
    kept = [e for d, e in enumerate(src.extents) if d not in axes]
    kept = [e for e in kept if not (_is_int(e) and e == 1)]
    got = dst.squeezed_extents()
    if len(got) != len(kept) or any(_is_int(x) and _is_int(y) and x != y for x, y in zip(got, kept)):
        raise FrontendError(
            f"{call.op.name}: destination {dst} does not match source {src} reduced over axes "
            f"{axes} (extents {[_text(x) for x in got]} vs {[_text(x) for x in kept]} without "
            f"unit dims):\n{_stmt_text(call)}")
    return axes
