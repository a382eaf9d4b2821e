"""Planning a loop layout from scratch: vector width from the accesses, then threads round-robin over
vector groups (TileLang's PlanLoopPartition), replicated to fill the block when fragments are touched.

The vector-width rule itself is ``passes/vector_width.py``, which the vectorizer applies too; its names stay
importable from here.
"""
from __future__ import annotations

import functools
from typing import Sequence

from tvm import tirx

from tilelayout.fragment import Fragment
from tilelayout.layout import placeholder

from ..vector_width import (FLOAT8_CONVERSION_LANES, INTEGER_BITWISE_LANES, NARROW_ARITHMETIC_LANES,  # noqa: F401
                            _affine_run, _largest_pow2_at_most, _proved_run, affine_terms, is_contiguous_run,
                            linear_offset, plan_vector_width, same_in_group, value_lane_cap)

__all__ = ["plan_loop_layout", "plan_vector_width", "is_contiguous_run", "same_in_group", "linear_offset",
           "select_min_padding_width", "value_lane_cap"]


def select_min_padding_width(width: int, total: int, threads: int) -> int:
    """Among width, width/2, ..., 1 the one wasting the fewest thread slots (ties -> wider)."""
    best, best_waste = width, None
    w = width
    while w >= 1:
        waste = -(-total // (threads * w)) * threads * w - total
        if best_waste is None or waste < best_waste:
            best, best_waste = w, waste
        w //= 2
    return best


def plan_loop_layout(extents: Sequence[int], threads: int, width: int, touches_fragment: bool,
                     thread_min: int = 0) -> Fragment:
    """flat = row-major(coords); group = flat // V; thread = group % T; slot = group // T * V + flat % V,
    over the ``threads`` threads starting at ``thread_min``."""
    if all(isinstance(e, int) for e in extents):
        plan = _plan_static(tuple(extents), threads, width, touches_fragment)
    else:
        plan = _plan(extents, threads, width, touches_fragment)
    return plan.bind_thread_range(thread_min, threads) if thread_min else plan


def clear_caches() -> None:
    _plan_static.cache_clear()


@functools.lru_cache(maxsize=512)
def _plan_static(extents: tuple, threads: int, width: int, touches_fragment: bool) -> Fragment:
    """Layouts are immutable values: every loop of the same extents shares one plan (and its cached tables)."""
    return _plan(list(extents), threads, width, touches_fragment)


def _plan(extents: Sequence[int], threads: int, width: int, touches_fragment: bool) -> Fragment:
    total = 1
    for e in extents:
        total *= e
    if touches_fragment:
        while width > 1 and total % (threads * width):
            width //= 2
    variables = [placeholder(k) for k in range(len(extents))]
    flat = linear_offset(variables, extents)
    group = tirx.floordiv(flat, width)
    thread = tirx.floormod(group, threads)
    slot = tirx.floordiv(group, threads) * width + tirx.floormod(flat, width)
    layout = Fragment.from_exprs(list(extents), thread, [slot])
    if isinstance(total, int) and total > 0:
        # injective: slot // width recovers group // threads and slot % width the point within its group,
        # thread the group modulo threads; so (thread, slot) gives the group, the point and (row-major) the
        # coordinates. Groups 0..G-1 (G = ceil(total / width)) land on threads g % threads, and the last
        # block of threads * width points, starting at point q * width * threads, gives the largest slots
        # q * width + (its point % width): extent and slot count in exact arithmetic, no table
        q = (total - 1) // (width * threads)
        slots = q * width + min(width, total - q * width * threads)
        used = min(threads, -(-total // width))
        # every cell used (no partial group, no partial round of the threads): cell thread * slots + slot holds
        # the point slot // width * (width * used) + thread * width + slot % width
        whole = total % width == 0 and (total // width) % used == 0
        # a fused iterator split by the width and the threads: it has a closed-form inverse (tests invert
        # plans over a grid of extents, widths and thread counts, padded and not, beyond enumeration too)
        layout._known_by_construction(used, slots, inverse=True, cell_digits=(
            [(width, 1), (slots // width, width * used), (used, width)] if whole else None))
        if touches_fragment and layout.thread_extent < threads:
            # replica r of an element sits r thread-extents further on: still one-to-one, slots unchanged
            copies = threads // layout.thread_extent
            layout = layout.replicate(copies)._known_by_construction(layout.thread_extent * copies, slots,
                                                                     inverse=True, cell_digits=(
                [(width, copies), (slots // width, width * used * copies), (used, width * copies), (copies, 1)]
                if whole else None))
    elif touches_fragment and layout.thread_extent < threads:
        layout = layout.replicate(threads // layout.thread_extent)
    return layout.bind_thread_range(0, threads)
