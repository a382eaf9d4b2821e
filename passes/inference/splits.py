"""A fragment split: one reader of a fragment gets its own version, joined to the original by a conversion.

The conflict resolver and the epilogue search (``conversion_plan``, ``epilogue``) both propose splits; the record
lives here so that neither imports the other for it.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Split"]


@dataclass(frozen=True)
class Split:
    """Give the reader ``op_index`` of fragment ``buffer`` its own version (only ``access`` of a loop that
    reads the fragment at several indices, else every read of the op)."""

    buffer: str
    op_index: int
    access: int | None
    description: str
