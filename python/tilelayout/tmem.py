"""Tensor Memory (Blackwell sm_100a) as a layout space, and the register fragments ``tcgen05.ld`` produces.

Why: a tcgen05.mma accumulator lives in Tensor Memory (TMEM), 128 lanes x 512 columns of 32-bit cells per CTA,
and reaches registers only through ``tcgen05.ld``. Describing both sides with our own objects lets the fragment
read out of TMEM take part in inference like any register fragment:

* ``tmem_tile_layout(rows, cols, ...)``: a ``Layout`` from a tile's (row, column) to its TMEM (lane, column).
  ``rows=128`` is the full datapath (row r in lane r; tcgen05.mma M=128, cta_group::1); ``rows=64`` is the
  half-subpartition tile tcgen05.mma M=64 writes (row r in lane ``32 * (r // 16) + 16 * half + r % 16``: 16 rows
  in each warp's 32-lane subpartition, the lower or upper ``half``). ``col_offset`` places the tile anywhere in
  the 512 columns.
* ``ld_cell(shape, thread, reg)``: where register ``reg`` of ``thread`` (0..31) of one warp's ``tcgen05.ld``
  (shapes ``32x32b``, ``16x64b``, ``16x128b``, ``16x256b``, repetition ``.x1`` .. ``.x128``) comes from, as a
  (lane, column) offset from the instruction's address; ``ld_thread_reg`` is its inverse.
* ``tmem_ld_fragment(shape, rows, cols, ...)``: the ``Fragment`` of a warpgroup reading a tile through one
  shape: the two maps composed, so a fragment over the tile's (row, column) coordinates.

The instruction maps are PTX ISA's "Matrix fragments for shape .32x32b / .16x64b / .16x128b / .16x256b"
(a warp reads the 32 lanes of its subpartition, ``warp_id % 4``; the 16-lane shapes the 16 lanes from the
address's lane). Checked against CuTe's ``SM100_TMEM_LOAD_*`` copy traits compiled on the host
(``tests/test_tmem.py``). 16-bit packing (``.pack::16b``) and ``.16x32bx2`` are not modelled.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import LayoutError
from .fragment import Fragment
from .layout import Layout

__all__ = ["TMEM_LANES", "TMEM_COLUMNS", "LD_SHAPES", "LD_NUMS", "ld_registers", "ld_cell", "ld_thread_reg",
           "tmem_tile_layout", "tmem_ld_fragment", "TmemBlock", "accumulator_blocks", "accumulator_ld_shape",
           "alloc_columns", "check_ld_shape"]

TMEM_LANES = 128
TMEM_COLUMNS = 512
#: lanes one warp may access: warp ``w`` reads and writes lanes ``32 * (w % 4)`` .. ``+ 31`` only
SUBPARTITION_LANES = 32

#: shape -> (lanes one warp reads, 32-bit columns per repetition)
LD_SHAPES = {"32x32b": (32, 1), "16x64b": (16, 2), "16x128b": (16, 4), "16x256b": (16, 8)}
#: shape -> the repetitions ``.num`` PTX allows (at most 128 registers per thread)
LD_NUMS = {"32x32b": (1, 2, 4, 8, 16, 32, 64, 128), "16x64b": (1, 2, 4, 8, 16, 32, 64, 128),
           "16x128b": (1, 2, 4, 8, 16, 32, 64), "16x256b": (1, 2, 4, 8, 16, 32)}


def check_ld_shape(shape: str, num: int | None = None) -> None:
    """Refuse a shape (and repetition) ``tcgen05.ld`` / ``st`` does not have."""
    if shape not in LD_SHAPES:
        raise LayoutError(f"tcgen05.ld/st has no shape {shape!r}; the shapes are {', '.join(LD_SHAPES)}")
    if num is not None and num not in LD_NUMS[shape]:
        raise LayoutError(f"tcgen05.ld/st .{shape} has no repetition .x{num}; it takes "
                          f"{', '.join(f'.x{n}' for n in LD_NUMS[shape])}")


def ld_registers(shape: str, num: int) -> int:
    """32-bit registers each thread gets from ``tcgen05.ld.<shape>.x<num>``."""
    check_ld_shape(shape, num)
    lanes, cols = LD_SHAPES[shape]
    return lanes * cols * num // 32


def ld_cell(shape: str, thread: int, reg: int) -> tuple[int, int]:
    """(lane, column) offset from the instruction's address of register ``reg`` of ``thread`` (0..31)."""
    check_ld_shape(shape)
    if shape == "32x32b":           # thread t reads its own lane, one column per register
        return thread, reg
    if shape == "16x64b":           # a row of two columns is split over two threads
        return thread // 4 + 8 * (thread % 2), (thread // 2) % 2 + 2 * reg
    if shape == "16x128b":          # rows 0-7 in even registers, 8-15 in odd ones; four threads per row
        return thread // 4 + 8 * (reg % 2), thread % 4 + 4 * (reg // 2)
    return thread // 4 + 8 * ((reg // 2) % 2), reg % 2 + 2 * (thread % 4) + 8 * (reg // 4)   # 16x256b


def ld_thread_reg(shape: str, lane, col):
    """Inverse of ``ld_cell``: (thread, register) holding (lane, column) of the window; ints or expressions."""
    check_ld_shape(shape)
    if shape == "32x32b":
        return lane, col
    if shape == "16x64b":
        return 4 * (lane % 8) + 2 * (col % 2) + lane // 8, col // 2
    if shape == "16x128b":
        return 4 * (lane % 8) + col % 4, lane // 8 + 2 * (col // 4)
    return 4 * (lane % 8) + (col % 8) // 2, col % 2 + 2 * (lane // 8) + 4 * (col // 8)


def _check_tile(rows: int, cols: int, col_offset: int, half: int) -> None:
    if rows not in (64, 128):
        raise LayoutError(f"a TMEM tile has 128 rows (full datapath) or 64 (half subpartitions), got {rows}")
    if half not in (0, 1) or (rows == 128 and half):
        raise LayoutError(f"half={half}: a 64-row TMEM tile sits in the lower (0) or upper (1) 16 lanes of each "
                          f"subpartition; a 128-row tile uses all lanes (half=0)")
    if cols < 1 or col_offset < 0 or col_offset + cols > TMEM_COLUMNS:
        raise LayoutError(f"a TMEM tile of {cols} columns at column {col_offset} does not fit the "
                          f"{TMEM_COLUMNS} columns of Tensor Memory")


def tmem_tile_layout(rows: int, cols: int, col_offset: int = 0, half: int = 0) -> Layout:
    """(row, column) of a tile -> (lane, column) in TMEM (module doc)."""
    _check_tile(rows, cols, col_offset, half)
    if rows == 128:
        return Layout([rows, cols], lambda r, c: [r, c + col_offset])
    return Layout([rows, cols], lambda r, c: [r // 16 * 32 + 16 * half + r % 16, c + col_offset])


def tmem_ld_fragment(shape: str, rows: int, cols: int, warpgroups: int = 1, blocks: int = 1) -> Fragment:
    """Registers of ``warpgroups`` x 128 threads reading ``blocks`` TMEM tiles of ``rows`` x ``cols`` through
    ``shape``, as one fragment over the stacked ``blocks * rows`` x ``cols`` tile.

    ``rows=128`` (a full-datapath tile): warp w reads rows 32w..32w+31; with a 16-lane shape in two issues
    (lanes +0 and +16), the second issue's registers after the first's. ``rows=64`` (a half-subpartition tile,
    either half): warp w reads rows 16w..16w+15 with a 16-lane shape; ``32x32b`` cannot read it (it would
    read the other half's lanes too). Warpgroup g reads columns ``g * cols / warpgroups`` onwards (as many
    issues of at most ``.x<max>`` as needed: their registers continue the numbering of one long ``.xN``).
    Block b's registers follow block b-1's. The fragment's thread is the thread of the warpgroups (warp ``w``
    of a warpgroup accesses subpartition ``w``), its slot the register.
    """
    check_ld_shape(shape)
    lanes, per_rep = LD_SHAPES[shape]
    _check_tile(rows, cols, 0, 0)
    if warpgroups < 1 or cols % warpgroups:
        raise LayoutError(f"{cols} TMEM columns cannot be split evenly over {warpgroups} warpgroup(s)")
    if blocks < 1:
        raise LayoutError(f"blocks must be positive, got {blocks}")
    width = cols // warpgroups
    if width % per_rep:
        raise LayoutError(f"tcgen05.ld .{shape} reads {per_rep} columns per repetition; {width} columns per "
                          f"warpgroup are not a multiple")
    if rows == 64 and lanes == 32:
        raise LayoutError("a 64-row (half-subpartition) TMEM tile is read with a 16-lane shape (16x64b, 16x128b, "
                          "16x256b); 32x32b would read the other half's lanes too")
    rows_per_warp = rows // 4            # 32 or 16 rows of the tile in each subpartition
    issue_regs = lanes * width // 32     # registers of one warp's reads of its rows (one lane window)
    block_regs = issue_regs * (rows_per_warp // lanes)

    def thread(i, c):
        t, _ = ld_thread_reg(shape, i % lanes, c % width)
        return c // width * 128 + (i % rows) // rows_per_warp * 32 + t

    def index(i, c):
        _, reg = ld_thread_reg(shape, i % lanes, c % width)
        if rows_per_warp != lanes:       # a 16-lane shape over 32 rows: the upper lanes' issue second
            reg = (i % rows_per_warp) // lanes * issue_regs + reg
        return reg if blocks == 1 else i // rows * block_regs + reg

    return Fragment([blocks * rows, cols], thread, index)


def accumulator_ld_shape(instr_m: int) -> str:
    """The ``tcgen05.ld`` shape reading an accumulator of M=``instr_m``: ``32x32b`` for the full datapath (a row
    per thread), ``16x256b`` for M=64's half subpartitions (eight columns per repetition)."""
    if instr_m == 128:
        return "32x32b"
    if instr_m == 64:
        return "16x256b"
    raise LayoutError(f"tcgen05.mma (cta_group::1) has M=64 or M=128, not {instr_m}")


@dataclass(frozen=True)
class TmemBlock:
    """One M-block of an accumulator in TMEM: rows ``row0 .. row0 + rows - 1`` of the tile, all its columns,
    at TMEM column ``col_offset`` in the lower or upper ``half`` (64-row blocks)."""

    row0: int
    rows: int
    cols: int
    col_offset: int
    half: int

    def layout(self) -> Layout:
        return tmem_tile_layout(self.rows, self.cols, self.col_offset, self.half)


def accumulator_blocks(m: int, n: int, instr_m: int) -> list[TmemBlock]:
    """Where an m x n accumulator computed by M=``instr_m`` instructions lies in TMEM: 128-row blocks side by
    side in columns; 64-row blocks in pairs sharing columns (lower, then upper half: CuTe's interleaved
    allocation), pairs side by side. Raises when the blocks need more than 512 columns."""
    accumulator_ld_shape(instr_m)
    if m % instr_m:
        raise LayoutError(f"an accumulator of {m} rows is not a whole number of M={instr_m} blocks")
    count = m // instr_m
    per_column_block = 2 if instr_m == 64 else 1
    blocks = [TmemBlock(b * instr_m, instr_m, n, (b // per_column_block) * n, b % per_column_block)
              for b in range(count)]
    needed = -(-count // per_column_block) * n
    if needed > TMEM_COLUMNS:
        raise LayoutError(f"an {m}x{n} float32 accumulator needs {needed} TMEM columns; Tensor Memory has "
                          f"{TMEM_COLUMNS}")
    return blocks


def alloc_columns(needed: int) -> int:
    """Columns ``tcgen05.alloc`` must ask for to get ``needed``: a power of two, at least 32, at most 512."""
    if needed < 1 or needed > TMEM_COLUMNS:
        raise LayoutError(f"cannot allocate {needed} TMEM columns (1 .. {TMEM_COLUMNS})")
    cols = 32
    while cols < needed:
        cols *= 2
    return cols
