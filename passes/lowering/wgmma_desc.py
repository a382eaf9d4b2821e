"""wgmma shared-memory matrix descriptors, as the PTX ISA defines them (sm_90a).

A descriptor names a multiplicand tile in shared memory by its start address, two byte strides (LBO, SBO)
and a swizzle mode; the hardware places element (x, y) of the tile -- x along the "leading" dimension of
the canonical layout, y along the other -- by a fixed formula, then XORs address bits (the swizzle). This
module states that formula once, for both directions:

- the lowering solves it against a buffer's annotated layout (``solve``): which mode and strides make the
  canonical placement equal our physical placement, checked at every element of every tile;
- the CPU emulation (``emulate_wgmma``) evaluates it on the descriptor bits the kernel computed at run time.

Canonical layouts (PTX ISA "Shared Memory Matrix Layout", sizes in bytes, W = swizzle width 128/64/32):
K-major, swizzled:     row r, byte k  ->  start + (r % 8) * W + (r // 8) * SBO + k                  (k < W)
K-major, interleaved:  row r, byte k  ->  start + (r % 8) * 16 + (r // 8) * SBO + k % 16 + (k // 16) * LBO
MN-major, swizzled:    byte x, row y  ->  start + x % W + (x // W) * LBO + (y % 8) * W + (y // 8) * SBO
MN-major, interleaved: byte x, row y  ->  start + x % 16 + (x // 16) * SBO + (y % 8) * 16 + (y // 8) * LBO
then ``addr ^ ((addr >> 3) & ((W / 16 - 1) << 4))`` (Swizzle<B, 4, 3> on byte addresses; identity unswizzled).
Descriptor bits: [0, 14) start >> 4, [16, 30) LBO >> 4, [32, 46) SBO >> 4, [62, 64) mode (1: 128B, 2: 64B,
3: 32B, 0: none); the base-offset field stays 0, so every swizzled tile must start its pattern at an
address aligned to 8 * W (shared buffers holding swizzled tiles are aligned to 1024 bytes).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MODES", "canonical_address", "swizzle", "DescriptorLayout", "solve", "encode_fields"]

#: mode code -> swizzle width in bytes (0: no swizzle, "interleaved")
MODES = {1: 128, 2: 64, 3: 32, 0: 0}


def swizzle(addr, width: int):
    """The physical byte address of canonical address ``addr`` under a ``width``-byte swizzle."""
    if not width:
        return addr
    mask = (width // 16 - 1) << 4
    return addr ^ ((addr >> 3) & mask)


def canonical_address(k_major: bool, width: int, start, lbo, sbo, x, y):
    """Byte address (before the swizzle) of tile element (x, y): K-major x = row, y = byte along K;
    MN-major x = byte along M/N, y = row along K. Works on ints and numpy arrays."""
    if k_major:
        r, kb = x, y
        if width:
            return start + (r % 8) * width + (r // 8) * sbo + kb
        return start + (r % 8) * 16 + (r // 8) * sbo + kb % 16 + (kb // 16) * lbo
    xb, r = x, y
    if width:
        return start + xb % width + (xb // width) * lbo + (r % 8) * width + (r // 8) * sbo
    return start + xb % 16 + (xb // 16) * sbo + (r % 8) * 16 + (r // 8) * lbo


@dataclass(frozen=True)
class DescriptorLayout:
    mode: int            # descriptor mode code (see MODES)
    lbo: int             # bytes
    sbo: int             # bytes
    k_major: bool

    @property
    def width(self) -> int:
        return MODES[self.mode]


def encode_fields(layout: DescriptorLayout) -> int:
    """The descriptor bits other than the start address."""
    lbo = layout.lbo
    return ((lbo >> 4) & 0x3FFF) << 16 | ((layout.sbo >> 4) & 0x3FFF) << 32 | (layout.mode << 62)


def solve(phys_bytes: np.ndarray, tiles: list, rows: int, cols: int, k_major: bool,
          elem_bytes: int) -> DescriptorLayout | None:
    """A descriptor layout placing every tile like ``phys_bytes`` (byte address of every stored element).

    ``tiles``: stored (row, col) of each tile's first element; a tile covers ``rows`` x ``cols`` stored
    elements with the contiguous stored dimension last. K-major: stored rows are the M/N rows, columns K;
    MN-major: stored rows are K, columns M/N. Returns None when no mode fits every element."""
    r_idx, c_idx = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    for mode in (1, 2, 3, 0):
        width = MODES[mode]
        r0, c0 = tiles[0]
        base = int(phys_bytes[r0, c0])
        if k_major:
            if width and cols * elem_bytes > width:
                continue
            sbo = int(phys_bytes[r0 + 8, c0]) - base if rows > 8 else 8 * max(width, 16)
            # swizzled K-major tiles do not use LBO ("assumed 1" in 16-byte units)
            lbo = 16 if width else (int(phys_bytes[r0, c0 + 16 // elem_bytes]) - base if cols * elem_bytes > 16 else 16)
            x, y = r_idx, c_idx * elem_bytes
        else:
            sbo_probe = (r0 + 8, c0) if rows > 8 else None
            if width:
                sbo = int(phys_bytes[sbo_probe]) - base if sbo_probe else 8 * width
                # one swizzle width along M/N: a single repeat, so no stride between repeats is read; 0 as
                # CuTe's make_gmma_desc writes it (the stride of a size-1 mode)
                lbo = int(phys_bytes[r0, c0 + width // elem_bytes]) - base if cols * elem_bytes > width else 0
            else:
                sbo = int(phys_bytes[r0, c0 + 16 // elem_bytes]) - base if cols * elem_bytes > 16 else 16
                lbo = int(phys_bytes[sbo_probe]) - base if sbo_probe else 128
            x, y = c_idx * elem_bytes, r_idx
        unused_lbo = not k_major and width and cols * elem_bytes <= width
        if (lbo <= 0 and not unused_lbo) or sbo <= 0 or lbo % 16 or sbo % 16 or lbo >> 4 >= 1 << 14 \
                or sbo >> 4 >= 1 << 14:
            continue
        ok = True
        for (tr, tc) in tiles:
            start = int(phys_bytes[tr, tc])
            if start % 16 or (width and start % (8 * width) and not _same_pattern(start, width)):
                ok = False
                break
            want = swizzle(canonical_address(k_major, width, start, lbo, sbo, x, y), width)
            if not np.array_equal(want, phys_bytes[tr + r_idx, tc + c_idx]):
                ok = False
                break
        if ok:
            return DescriptorLayout(mode, lbo, sbo, k_major)
    return None


def _same_pattern(start: int, width: int) -> bool:
    """A start inside a swizzle pattern is fine when it only moves along the first row (the XOR of row 0 is
    the identity): the hardware recomputes the pattern from the address bits."""
    return (start % (8 * width)) < width
