"""``run.py --explain`` and the bandwidth lines of ``run.py --show``: why inference chose what it chose.

The text comes from ``tilelayout.report`` (the same words the ``tilelayout explain`` / ``show`` commands
print): per free-level component, each distinct outcome with the roots that led to it (identical attempts
collapsed with a count), its cost (mem, regs), layouts and per-statement io scores, and whether it won or
why it failed.
"""
from __future__ import annotations

from tilelayout.report import bandwidth_lines, explain_lines


def explain_result(result) -> list:
    """Human-readable account of every free-level attempt of one inference result."""
    return explain_lines(result)


__all__ = ["explain_result", "bandwidth_lines"]
