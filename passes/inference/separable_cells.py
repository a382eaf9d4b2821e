"""A fragment's cells as a (thread, slot) grid whose tile row and column split into a thread part and a slot part.

Pricing a conversion (``conversion.py``) walks the cells of both fragments in (thread, slot) order and asks, per
padding of the staging tile, where each cell's element sits (tile row, column). Enumerating and sorting the
cells costs a few passes over every one of them (8,192 for a 64x128 accumulator) before any counting starts.
Fragments whose constructor composed them from mixed-radix digits -- MMA and wgmma accumulators, planned loop
layouts -- record those digits (``Fragment.cell_digits``: the cell ``thread * slots + slot`` read backwards as
(extent, stride) digits of the element index). When every digit is wholly a thread digit or wholly a slot digit
(cut at the slot count where one straddles it), and wholly a column digit or wholly a row digit of the tile
(cut at the column count), an element's tile row is ``row_t[thread] + row_s[slot]`` and its column ``col_t[thread]
+ col_s[slot]``. The stride-independent facts pricing needs (vector widths, rows of one shape) then read T + S
numbers instead of T x S cells, and the cells themselves come from two broadcasts when a test still needs them.

Only recorded digits are read: TVM's iter-map rewriting, which could find such digits for any fragment, drops
offsets under a division (``(n + 1) % 32`` comes back as ``n % 32``), and a wrong grid would turn a real
conversion into a no-op. ``separable_cells`` returns None whenever the structure is not shown (no recorded
digits, a digit that cuts no boundary evenly, column digits that could carry into the row); the caller then
enumerates. Tests compare the parts with enumeration and every price with the cell-by-cell one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SeparableCells", "separable_cells", "digit_holders", "clear_caches"]


@dataclass(frozen=True)
class SeparableCells:
    """Every (element, replica) cell of a fragment that maps them one-to-one onto threads ``t0 .. t0 + threads - 1``
    x slots ``0 .. slots - 1``: the element of cell (t0 + t, s) sits at tile row ``row_t[t] + row_s[s]`` and
    column ``col_t[t] + col_s[s]`` of the row-major ``rows x cols`` tile (its flat index is row * cols + col)."""

    t0: int
    threads: int
    slots: int
    rows: int
    cols: int
    replicate: int
    row_t: np.ndarray
    row_s: np.ndarray
    col_t: np.ndarray
    col_s: np.ndarray

    def elements(self) -> np.ndarray:
        """Flat element index of every cell, in (thread, slot) order."""
        row = self.row_t[:, None] + self.row_s[None, :]
        return (row * self.cols + self.col_t[:, None] + self.col_s[None, :]).reshape(-1)

    def threads_of_cells(self) -> np.ndarray:
        return np.repeat(np.arange(self.t0, self.t0 + self.threads, dtype=np.int64), self.slots)

    def slots_of_cells(self) -> np.ndarray:
        return np.tile(np.arange(self.slots, dtype=np.int64), self.threads)


def _cut(digits: list, boundary: int, key: int) -> list | None:
    """``digits`` (cell lower, extent, n-stride) with every digit whose span crosses ``boundary`` (in cell space,
    key 0: lower factors; in n space, key 2: strides) cut into the part below and the part from it; None when a
    crossing digit does not divide evenly there."""
    out = []
    for digit in digits:
        lower, ext, stride = digit
        unit = lower if key == 0 else stride
        if unit < boundary < unit * ext:
            if boundary % unit or ext % (boundary // unit):
                return None
            low = boundary // unit
            out += [(lower, low, stride), (lower * low, ext // low, stride * low)]
        else:
            out.append(digit)
    return out


def _below(digits: list, boundary: int) -> tuple | None:
    """(digits whose n-strides stay below ``boundary``, the others divided by it), or None when the low ones can
    reach it together (a carry) or a high one is not a multiple of it."""
    low = [d for d in digits if d[2] < boundary]
    high = [d for d in digits if d[2] >= boundary]
    if sum((ext - 1) * stride for _, ext, stride in low) >= boundary or any(s % boundary for _, _, s in high):
        return None
    return low, [(lower, ext, stride // boundary) for lower, ext, stride in high]


def _part(digits: list, count: int, unit: int) -> np.ndarray:
    """sum over ``digits`` of ((x // (lower / unit)) % extent) * stride for x in 0 .. count - 1."""
    x = np.arange(count, dtype=np.int64)
    out = np.zeros(count, dtype=np.int64)
    for lower, ext, stride in digits:
        out += (x // (lower // unit)) % ext * stride
    return out


def _derive(frag) -> SeparableCells | None:
    recorded = frag.cell_digits()
    if recorded is None:
        return None
    try:
        shape = [int(s) for s in frag.input_shape]
        slots = int(math.prod(int(s) for s in frag.output_shape))
    except (TypeError, ValueError):
        return None
    if not shape:
        return None
    reps, threads = int(frag.replicate_size), int(frag.thread_extent)
    cols, rows = shape[-1], int(math.prod(shape[:-1]))
    if rows * cols * reps != threads * slots or threads * slots < 2:
        return None
    digits, lower = [], 1
    for ext, stride in recorded:
        digits.append((lower, ext, stride))
        lower *= ext
    if lower != threads * slots:
        return None
    digits = _cut(digits, slots, 0)                          # thread digits vs slot digits
    if digits is not None and reps > 1:
        digits = _cut(digits, reps, 2)                       # replica digits vs element digits
        split = None if digits is None else _below(digits, reps)
        digits = None if split is None else split[1]         # n = element * reps + replica
    if digits is not None:
        digits = _cut(digits, cols, 2)                       # column digits vs row digits
    split = None if digits is None else _below(digits, cols)
    if split is None:
        return None
    col, row = split
    in_slot = lambda d: d[0] * d[1] <= slots              # noqa: E731 - after the cut a digit is one or the other
    lo = (frag.thread_range or (0, 0))[0]
    return SeparableCells(
        int(lo), threads, slots, rows, cols, reps,
        row_t=_part([d for d in row if not in_slot(d)], threads, slots),
        row_s=_part([d for d in row if in_slot(d)], slots, 1),
        col_t=_part([d for d in col if not in_slot(d)], threads, slots),
        col_s=_part([d for d in col if in_slot(d)], slots, 1))


def separable_cells(frag) -> SeparableCells | None:
    """The separable cell grid of ``frag`` (module doc), or None; memoised by mapping, thread range and whether
    a constructor recorded the cell digits: an equal mapping built from user expressions has none, and its
    None must not hide the grid of the planned layout met later (interning then gives both the digits)."""
    key = (frag.key, frag.thread_range, frag.cell_digits() is not None)
    if key not in _SEPARABLE:
        if len(_SEPARABLE) > 1024:
            _SEPARABLE.clear()
        _SEPARABLE[key] = _derive(frag)
    return _SEPARABLE[key]


def digit_holders(frag, elements: np.ndarray) -> np.ndarray | None:
    """The thread (its range start included) holding each flat element index in ``elements``, read off the
    recorded cell digits without listing the cells: when the fragment has one replica and its digits, ordered
    by element stride, are a mixed radix of the element index (strides 1, e0, e0 * e1, ... up to the size),
    element n is the cell whose k-th digit is ``(n // stride_k) % extent_k``. None when that is not shown."""
    recorded = frag.cell_digits()
    if recorded is None or int(frag.replicate_size) != 1:
        return None
    try:
        slots = int(math.prod(int(s) for s in frag.output_shape))
        size = int(math.prod(int(s) for s in frag.input_shape))
    except (TypeError, ValueError):
        return None
    digits, lower = [], 1
    for ext, stride in recorded:
        if ext > 1:
            digits.append((lower, int(ext), int(stride)))
        lower *= int(ext)
    if lower != size or size != slots * int(frag.thread_extent):
        return None
    reach = 1
    for _, ext, stride in sorted(digits, key=lambda d: d[2]):
        if stride != reach:
            return None
        reach *= ext
    if reach != size:
        return None
    cell = np.zeros(elements.shape, dtype=np.int64)
    for low, ext, stride in digits:
        cell += (elements // stride) % ext * low
    return cell // slots + int((frag.thread_range or (0, 0))[0])


#: separable grids by (fragment key, thread range, cell digits recorded)
_SEPARABLE: dict = {}


def clear_caches() -> None:
    _SEPARABLE.clear()
