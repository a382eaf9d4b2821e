"""Shared-memory bank swizzles (TileLang's ``SwizzleMode`` and bank-swizzled layouts).

A bank swizzle works on 16-byte chunks. An *atom* is 8 rows of ``G`` chunks (G = 2, 4, 8 for the
32B, 64B, 128B modes); inside an atom chunk ``c`` of row ``s`` is stored at chunk ``c ^ (s // (8 // G))``,
which is CuTe's ``Swizzle<log2 G, 4, 3>`` on byte addresses. Atoms are stacked row-block by row-block
(``ts = i // 8``) and then column-block by column-block (``tc = j // (G * vec)``), the arrangement TMA boxes
and the wgmma/tcgen05 descriptors expect.

Two forms of the same placement:

* TileLang's structured form, outputs ``[tc, ts, index]`` (``make_full/half/quarter_bank_swizzled_layout``,
  ``make_wgmma_swizzled_layout``, ``make_tcgen05mma_swizzled_layout``), identical to what TileLang prints.
* The flat form, one output = the element offset in the tile (``make_swizzled_layout``). It is the
  row-major linearisation of the structured form, so for an (8, 64) float16 tile in 128B mode it is
  the TIRx layout documentation's ``64*i + 8*((j//8) ^ i) + j%8``. The flat form is what TIRx's ``ComposeLayout`` describes.

Leading dimensions (beyond the last two) are passed through unchanged with ``Layout.expand``.
"""
from __future__ import annotations

import enum

import numpy as np
import tvm
from tvm import tirx

from .errors import LayoutError
from .layout import Layout, normalize_shape, placeholder

__all__ = [
    "SwizzleMode", "element_bits", "make_swizzled_layout", "make_linear_layout", "make_full_bank_swizzled_layout",
    "make_half_bank_swizzled_layout", "make_quarter_bank_swizzled_layout", "make_bank_swizzled_layout",
    "make_wgmma_swizzled_layout", "make_tcgen05mma_swizzled_layout", "choose_swizzle_mode", "detect_swizzle_mode",
    "merge_swizzle_layouts", "make_volta_swizzled_layout",
]


class SwizzleMode(enum.Enum):
    """Bank swizzle granularity; ordinals are CUDA's ``CU_TENSOR_MAP_SWIZZLE_*`` values."""

    NONE = 0
    SWIZZLE_32B = 1
    SWIZZLE_64B = 2
    SWIZZLE_128B = 3

    @property
    def byte_width(self) -> int:
        """Bytes per swizzled row (TileLang's ``swizzle_byte_size``: 1 for NONE)."""
        return 1 if self is SwizzleMode.NONE else 16 << self.value

    @property
    def bits(self) -> int:
        """XOR width B of CuTe's ``Swizzle<B, 4, 3>`` (0 for NONE)."""
        return self.value

    @property
    def atom_size(self) -> int:
        """16-byte chunks per swizzled row (TileLang's ``swizzle_atom_size``: 1 for NONE)."""
        return 1 << self.value

    @property
    def wgmma_layout_type(self) -> int:
        """``layout_type`` field of a Hopper wgmma shared-memory descriptor."""
        return (0, 3, 2, 1)[self.value]

    @property
    def tcgen05_layout_type(self) -> int:
        """Swizzle field of a Blackwell tcgen05 shared-memory descriptor."""
        return (0, 6, 4, 2)[self.value]

    @property
    def smem_alignment(self) -> int:
        """Required shared-memory base alignment in bytes (one full 8-row atom for swizzled modes)."""
        return 128 << self.value

    @classmethod
    def from_ordinal(cls, n: int) -> "SwizzleMode":
        """The mode with ordinal ``n`` (0 none, 1 32-byte, 2 64-byte, 3 128-byte)."""
        try:
            return cls(int(n))
        except ValueError:
            raise LayoutError(f"no SwizzleMode with ordinal {n!r} (valid: 0..3)") from None

    @classmethod
    def from_bytes(cls, width: int) -> "SwizzleMode":
        """The bank swizzle whose pattern spans ``width`` bytes (32, 64 or 128)."""
        for mode in cls:
            if mode is not cls.NONE and mode.byte_width == width:
                return mode
        raise LayoutError(f"no bank swizzle of {width!r} bytes (valid: 32, 64, 128)")


_BANK_MODES = (SwizzleMode.SWIZZLE_32B, SwizzleMode.SWIZZLE_64B, SwizzleMode.SWIZZLE_128B)


def element_bits(dtype) -> int:
    """Bits of one element of ``dtype`` (a string such as "float16", a tvm DataType, or a bit count)."""
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        bits = int(dtype)
    else:
        try:
            t = tvm.DataType(str(dtype))
        except Exception:
            raise LayoutError(f"unknown dtype {dtype!r}") from None
        bits = t.bits * t.lanes
    if bits < 1 or 128 % bits:
        raise LayoutError(f"bank swizzles need an element width dividing 128 bits, {dtype!r} has {bits}")
    return bits


def _as_mode(mode) -> SwizzleMode:
    if isinstance(mode, SwizzleMode):
        return mode
    if isinstance(mode, str) and mode.upper() in SwizzleMode.__members__:
        return SwizzleMode[mode.upper()]
    raise LayoutError(f"swizzle mode must be a SwizzleMode (NONE, SWIZZLE_32B, SWIZZLE_64B, SWIZZLE_128B), got {mode!r}")


def _tile_shape(shape, what: str) -> tuple[list, int, int]:
    shape = normalize_shape(shape, what)
    if len(shape) < 2:
        raise LayoutError(f"{what} needs at least two dimensions (rows, contiguous), got shape {shape}")
    rows, cont = shape[-2], shape[-1]
    if not (isinstance(rows, int) and isinstance(cont, int)):
        raise LayoutError(f"{what} needs constant last two dimensions, got shape {shape}")
    return shape[:-2], rows, cont


def _xor_bits(a, b, nbits: int):
    """a ^ b for nbits-bit values, spelled with parity arithmetic as TileLang does (keeps bounds analyzable)."""
    out = tirx.const(0, "int32")
    for k in range(nbits):
        bit = tirx.floormod(tirx.floordiv(tirx.floormod(a, 2 << k), 1 << k)
                            + tirx.floordiv(tirx.floormod(b, 2 << k), 1 << k), 2)
        out = out + bit * (1 << k)
    return out


def _bank_parts(rows: int, cont: int, bits: int, mode: SwizzleMode, what: str):
    """(tc, ts, index) expressions of TileLang's bank swizzle over (_i, _j)."""
    g = mode.atom_size
    vec = 128 // bits
    if not (rows == 4 or rows % 8 == 0):
        raise LayoutError(f"{what}: {mode.name} needs 4 rows or a multiple of 8, got {rows} rows")
    if cont % (g * vec):
        raise LayoutError(f"{what}: {mode.name} needs the contiguous dimension to be a multiple of {g * vec} "
                          f"elements ({mode.byte_width} bytes of {bits}-bit elements), got {cont}")
    i, j = placeholder(0), placeholder(1)
    ts, s = tirx.floordiv(i, 8), tirx.floormod(i, 8)
    vec_id, v = tirx.floordiv(j, vec), tirx.floormod(j, vec)
    tc, c = tirx.floordiv(vec_id, g), tirx.floormod(vec_id, g)
    chunk = _xor_bits(c, tirx.floordiv(s, 8 // g), mode.bits)
    return [tc, ts, v + (chunk + s * g) * vec]


def make_bank_swizzled_layout(shape, dtype, mode, flat: bool = False) -> Layout:
    """Bank swizzle of the last two dims: TileLang's [tc, ts, index] outputs, or one flat offset."""
    mode = _as_mode(mode)
    what = f"{mode.name} swizzle of shape {list(shape) if isinstance(shape, (list, tuple)) else shape} {dtype}"
    lead, rows, cont = _tile_shape(shape, what)
    if mode is SwizzleMode.NONE:
        return make_linear_layout([rows, cont]).expand(lead)
    bits = element_bits(dtype)
    tc, ts, index = _bank_parts(rows, cont, bits, mode, what)
    atom = min(rows, 8) * mode.atom_size * (128 // bits)        # elements per atom = extent of ``index``
    row_blocks = -(-rows // 8)
    if not flat:
        layout = Layout.from_exprs([rows, cont], [tc, ts, index]).expand(lead)
        extents = [cont // (mode.atom_size * (128 // bits)), row_blocks, atom]
    else:
        layout = Layout.from_exprs([rows, cont], [(tc * row_blocks + ts) * atom + index]).expand(lead)
        extents = [rows * cont]
    # the extents are known in closed form (tc, ts and the XOR'd index each take every value of their range,
    # so the flat offset is a permutation of the tile): evaluating the XOR arithmetic over the tile to find
    # them is what annotating a kernel's shared tiles used to spend its time on (tests compare both)
    layout.__dict__["_output_shape"] = [int(x) for x in lead] + extents
    return layout


def make_full_bank_swizzled_layout(shape, dtype) -> Layout:
    """TileLang's 128B bank swizzle, outputs [tc, ts, index] (+ leading dims)."""
    return make_bank_swizzled_layout(shape, dtype, SwizzleMode.SWIZZLE_128B)


def make_half_bank_swizzled_layout(shape, dtype) -> Layout:
    """TileLang's 64B bank swizzle, outputs [tc, ts, index] (+ leading dims)."""
    return make_bank_swizzled_layout(shape, dtype, SwizzleMode.SWIZZLE_64B)


def make_quarter_bank_swizzled_layout(shape, dtype) -> Layout:
    """TileLang's 32B bank swizzle, outputs [tc, ts, index] (+ leading dims)."""
    return make_bank_swizzled_layout(shape, dtype, SwizzleMode.SWIZZLE_32B)


def make_linear_layout(shape) -> Layout:
    """Row-major offset over the whole shape (one output)."""
    shape = normalize_shape(shape, "linear layout")
    if not shape:
        raise LayoutError("a linear layout needs at least one dimension")

    def flat(*coords):
        out = tirx.const(0, "int32")
        for c, s in zip(coords, shape):
            out = out * s + c
        return out
    return Layout(shape, flat)


def choose_swizzle_mode(shape, dtype) -> SwizzleMode:
    """Widest bank swizzle the tile allows (TileLang's Hopper/Blackwell rule): rows % 8 == 0 and the row
    a multiple of the swizzle width; otherwise NONE."""
    lead, rows, cont = _tile_shape(shape, "choose_swizzle_mode")
    bits = element_bits(dtype)
    if rows % 8:
        return SwizzleMode.NONE
    for mode in reversed(_BANK_MODES):
        if cont % (mode.atom_size * (128 // bits)) == 0:
            return mode
    return SwizzleMode.NONE


def make_swizzled_layout(shape, dtype, mode=None) -> Layout:
    """Swizzled shared-memory layout of the last two dims, in the flat form (one offset output, plus the
    leading dims passed through). ``mode=None`` picks ``choose_swizzle_mode(shape, dtype)``."""
    mode = choose_swizzle_mode(shape, dtype) if mode is None else _as_mode(mode)
    return make_bank_swizzled_layout(shape, dtype, mode, flat=True)


def _hopper_layout(shape, dtype, who: str) -> Layout:
    lead, rows, cont = _tile_shape(shape, who)
    bits = element_bits(dtype)
    mode = choose_swizzle_mode(shape, dtype)
    if mode is SwizzleMode.NONE:
        if cont % (128 // bits):
            raise LayoutError(f"{who}: shape {list(shape)} {dtype} is unsupported: the row of {cont} elements is not "
                              f"a whole number of 16-byte chunks and cannot be swizzled or read as 16-byte vectors")
        return make_linear_layout([rows, cont]).expand(lead)
    return make_bank_swizzled_layout(shape, dtype, mode)


def make_wgmma_swizzled_layout(shape, dtype) -> Layout:
    """Hopper wgmma operand layout (TileLang's rule; structured form): the widest bank swizzle when rows are a
    multiple of 8, else row-major when rows are whole 16-byte chunks, else an error."""
    return _hopper_layout(shape, dtype, "make_wgmma_swizzled_layout")


def make_tcgen05mma_swizzled_layout(shape, dtype) -> Layout:
    """Blackwell tcgen05 operand layout; the same rule as wgmma (TileLang gives identical layouts)."""
    return _hopper_layout(shape, dtype, "make_tcgen05mma_swizzled_layout")


def _linear_table(layout: Layout) -> np.ndarray | None:
    if not layout.is_static or layout.size > (1 << 20):
        return None
    return layout._linear_table()


def detect_swizzle_mode(layout: Layout, dtype) -> SwizzleMode | None:
    """Which bank swizzle (or NONE = row-major) places every element of ``layout`` where it is, judged on the
    flat offsets (so the structured and the flat forms both match); None when no construction does."""
    from .fragment import Fragment
    if isinstance(layout, Fragment) or not isinstance(layout, Layout) or layout.input_dim < 2:
        return None
    mine = _linear_table(layout)
    if mine is None:
        return None
    for mode in (SwizzleMode.NONE,) + _BANK_MODES:
        try:
            candidate = make_bank_swizzled_layout(layout.input_shape, dtype, mode, flat=True)
        except LayoutError:
            continue
        if np.array_equal(mine, _linear_table(candidate)):
            return mode
    return None


def merge_swizzle_layouts(a: Layout, b: Layout, dtype) -> Layout | None:
    """Two bank-swizzled layouts of one buffer: the one with the smaller swizzle (a if equal). None when either
    is not a bank swizzle (TileLang resolves shared-layout conflicts this way)."""
    if list(a.input_shape) != list(b.input_shape):
        raise LayoutError(f"cannot merge swizzles of different shapes: {a!r} and {b!r}")
    ma, mb = detect_swizzle_mode(a, dtype), detect_swizzle_mode(b, dtype)
    if ma not in _BANK_MODES or mb not in _BANK_MODES:
        return None
    return b if mb.value < ma.value else a


# ----------------------------------------------------------------------------------------------- Volta (sm_70)
# Volta's mma.sync reads operands as 64-bit (4 x 16-bit) fragments along K, or as 128-bit (8 x 16-bit) vectors
# along M/N, so its operand tiles use CUTLASS's sm70 crosswise / congruous permutations rather than the 16-byte
# bank swizzles above. TileLang hard-codes 16-bit elements for them: the dtype never changes the result.

def _bit(x, k: int):
    """Bit k of a non-negative expression."""
    return tirx.floormod(tirx.floordiv(x, 1 << k), 2)


def _volta_crosswise(i, j, rows: int):
    """K-contiguous operand (rows % 32 == 0, cont % 32 == 0): each 4-element K vector ``vec = j // 4`` owns a
    block of ``4 * rows`` elements; inside it row i lands at a permuted slot whose two low bits are
    ``i[2] ^ vec[1]`` and ``i[4] ^ i[3] ^ vec[2]``, bits 2..3 are ``i[0..1]`` and the high part is ``i // 16``."""
    vec, lane = tirx.floordiv(j, 4), tirx.floormod(j, 4)
    low = tirx.floormod(_bit(i, 2) + _bit(vec, 1), 2) \
        + 2 * tirx.floormod(_bit(i, 4) + _bit(i, 3) + _bit(vec, 2), 2)
    slot = tirx.floordiv(i, 16) * 16 + tirx.floormod(i, 4) * 4 + low
    return vec * (4 * rows) + slot * 4 + lane


def _volta_congruous(i, j, cont: int, is_a: bool):
    """M/N-contiguous operand (rows % 4 == 0, cont % 64 == 0): 8-element vectors ``v = j // 8`` in 64-element
    column tiles. Vector ``r = v % 8`` of a tile moves to row ``r // 2`` (A) or ``r % 4`` (B) of its 4-row group,
    and to column slot ``4 * (r % 2)`` (A) or ``4 * (r // 4)`` (B) plus ``(i % 4) ^ new_row`` within the tile."""
    v, lane = tirx.floordiv(j, 8), tirx.floormod(j, 8)
    tile, r = tirx.floordiv(v, 8), tirx.floormod(v, 8)
    if is_a:
        row, half = tirx.floordiv(r, 2), tirx.floormod(r, 2)
    else:
        row, half = tirx.floormod(r, 4), tirx.floordiv(r, 4)
    col = half * 4 + _xor_bits(tirx.floormod(i, 4), row, 2)
    return (tirx.floordiv(i, 4) * 4 + row) * cont + (tile * 8 + col) * 8 + lane


def _check_volta_dtype(dtype, what: str) -> None:
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        if dtype < 1:
            raise LayoutError(f"{what}: element width must be a positive bit count, got {dtype}")
        return
    try:
        tvm.DataType(str(dtype))
    except Exception:
        raise LayoutError(f"{what}: unknown dtype {dtype!r}") from None


def _as_flag(value, name: str, what: str) -> bool:
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
        return bool(value)
    raise LayoutError(f"{what}: {name} must be a bool, got {value!r}")


def make_volta_swizzled_layout(shape, dtype, is_a: bool = True, k_inner: bool = True) -> Layout:
    """Shared-memory layout of a Volta GEMM operand tile, TileLang's rule, flat form (one element offset, plus
    leading dims passed through). The last two dims are (rows, cont), ``cont`` contiguous in the buffer:

    * ``k_inner`` and rows, cont multiples of 32: crosswise (K-contiguous) permutation;
    * else cont a multiple of 64 and rows of 4: congruous permutation, A's or B's variant by ``is_a``;
    * else row-major, with the row pitch padded by 8 elements (16 bytes of 16-bit data) when cont % 16 == 0.

    ``dtype`` is validated but, as in TileLang, does not change the layout (Volta MMA operands are 16-bit).
    Refused like TileLang: fewer than two dims, or a symbolic extent among the last two."""
    what = f"make_volta_swizzled_layout of shape {list(shape) if isinstance(shape, (list, tuple)) else shape} {dtype}"
    _check_volta_dtype(dtype, what)
    is_a, k_inner = _as_flag(is_a, "is_a", what), _as_flag(k_inner, "k_inner", what)
    lead, rows, cont = _tile_shape(shape, what)
    i, j = placeholder(0), placeholder(1)
    if k_inner and rows % 32 == 0 and cont % 32 == 0:
        offset = _volta_crosswise(i, j, rows)
    elif rows % 4 == 0 and cont % 64 == 0:
        offset = _volta_congruous(i, j, cont, is_a)
    else:
        offset = i * (cont + 8 if cont % 16 == 0 else cont) + j
    return Layout.from_exprs([rows, cont], [offset]).expand(lead)
