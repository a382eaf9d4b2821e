"""CPU emulation of Blackwell's tcgen05 instructions on numpy state: Tensor Memory, alloc / dealloc, mma (SS), ld, st.

Why: tcgen05 code cannot run here (no sm_100 GPU), yet every piece of it (the TMEM allocation, the descriptors,
the accumulator placement, the read-out fragment) must be checked against numpy before it is trusted. This
module executes the instructions from their *encoded operands* (the 64-bit shared-memory descriptors, the
32-bit instruction descriptor, the 32-bit TMEM addresses) as the PTX ISA defines them, with its own decoding:
it shares no code with the encoders (``tcgen05_desc``), the solver (``wgmma_desc``) or the fragments
(``tilelayout.tmem``), so a wrong field, swizzle, lane or register order there gives a wrong number here or a
refusal (``EmulationError``) naming what is wrong.

Facts used (PTX ISA, tcgen05 sections):
* TMEM: 128 lanes x 512 columns of 32 bits; an address is ``lane << 16 | column``. ``alloc`` takes a power of
  two of columns, 32 to 512; a warp touches only the lanes of subpartition ``warp_id % 4`` (32 lanes).
* mma (cta_group::1, dense, SS): D[M x N] (+)= A[M x K] B[N x K]^T, A and B read through shared-memory
  descriptors (canonical layouts, K- or MN-major as the instruction descriptor says), D at the TMEM address:
  M=128 in lanes 0..127 (lane field 0), M=64 in 16 lanes of each subpartition (lane field 0 or 16: row r in lane
  32 * (r // 16) + lane field + r % 16); columns from the address on. Products and sums in float32, K in order;
  tf32 operands truncated to 10 mantissa bits; fp8 decoded.
* ld / st shapes 32x32b, 16x64b, 16x128b, 16x256b with ``.num`` repetitions (the "Matrix fragments" figures).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from tilelayout.errors import LoweringError

__all__ = ["EmulationError", "TensorMemory", "read_operand", "decode_smem_descriptor", "decode_instr_descriptor"]

LANES, COLUMNS = 128, 512


class EmulationError(LoweringError):
    """An emulated tcgen05 instruction was issued with operands the hardware rejects or leaves undefined."""


# ------------------------------------------------------------------------------------------ descriptors

_LAYOUT_WIDTH = {0: 0, 2: 128, 4: 64, 6: 32}


def decode_smem_descriptor(desc: int) -> tuple[int, int, int, int]:
    """(start, LBO, SBO, swizzle width in bytes; 0 = none) of a tcgen05 shared-memory descriptor."""
    desc = int(desc)
    if (desc >> 46) & 3 != 1:
        raise EmulationError(f"shared-memory descriptor {desc:#x}: version field {(desc >> 46) & 3}, sm_100 needs 1 "
                             f"(a wgmma descriptor?)")
    if (desc >> 49) & 7 or (desc >> 52) & 1:
        raise EmulationError(f"shared-memory descriptor {desc:#x}: base offset / absolute LBO mode are not emulated")
    layout = desc >> 61
    if layout not in _LAYOUT_WIDTH:
        raise EmulationError(f"shared-memory descriptor {desc:#x}: layout type {layout} is not emulated")
    field = lambda shift: ((desc >> shift) & 0x3FFF) << 4    # noqa: E731
    return field(0), field(16), field(32), _LAYOUT_WIDTH[layout]


_FORMATS = {"kind::f16": {0: "float16", 1: "bfloat16"}, "kind::tf32": {2: "tfloat32"},
            "kind::f8f6f4": {0: "float8_e4m3fn", 1: "float8_e5m2"}}
_K = {"kind::f16": 16, "kind::tf32": 8, "kind::f8f6f4": 32}


def decode_instr_descriptor(idesc: int, kind: str) -> dict:
    """The fields of a dense cta_group::1 instruction descriptor: m, n, k, a/b dtype, a/b MN-major."""
    idesc = int(idesc)
    if kind not in _FORMATS:
        raise EmulationError(f"tcgen05.mma .{kind} is not emulated")
    bit = lambda pos, width=1: (idesc >> pos) & ((1 << width) - 1)    # noqa: E731
    if bit(2) or bit(0, 2) or bit(3) or bit(13) or bit(14) or bit(30, 2):
        raise EmulationError(f"instruction descriptor {idesc:#x}: sparsity, saturation, negation or shift is set")
    if bit(4, 2) != 1:
        raise EmulationError(f"instruction descriptor {idesc:#x}: D format {bit(4, 2)}; only float32 (1) is emulated")
    a, b = _FORMATS[kind].get(bit(7, 3)), _FORMATS[kind].get(bit(10, 3))
    if a is None or b is None:
        raise EmulationError(f"instruction descriptor {idesc:#x}: formats {bit(7, 3)} / {bit(10, 3)} are not valid "
                             f"for .{kind}")
    m, n = bit(24, 5) << 4, bit(17, 6) << 3
    if m not in (64, 128) or not n or n > 256 or n % (16 if m == 128 else 8):
        raise EmulationError(f"instruction descriptor {idesc:#x}: no cta_group::1 shape M={m} N={n}")
    return {"m": m, "n": n, "k": _K[kind], "a": a, "b": b, "a_mn": bool(bit(15)), "b_mn": bool(bit(16))}


def _decode_values(raw: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values of raw element bits as the tensor core reads them."""
    if dtype == "float16":
        return raw.astype(np.uint16).view(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if dtype == "tfloat32":                 # raw float32 bits, the low 13 mantissa bits ignored
        return (raw.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    fp8 = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}[dtype]
    return raw.astype(np.uint8).view(fp8).astype(np.float32)


_BYTES = {"float16": 2, "bfloat16": 2, "tfloat32": 4, "float8_e4m3fn": 1, "float8_e5m2": 1}


def read_operand(smem: np.ndarray, desc: int, rows: int, k: int, dtype: str, mn_major: bool) -> np.ndarray:
    """The rows x k float32 operand a descriptor names in ``smem`` (bytes), per the canonical layouts:
    K-major  row r, byte b along K: (r % 8) * W + (r // 8) * SBO + b (W-byte rows; unswizzled: 16-byte core
    rows, (b // 16) * LBO); MN-major byte x along M/N, row y along K: x % W + (x // W) * LBO + (y % 8) * W +
    (y // 8) * SBO (unswizzled: x % 16 + (x // 16) * SBO + (y % 8) * 16 + (y // 8) * LBO); then the address
    bits [4, 7) XOR'd with bits [7, 10) masked to the swizzle width."""
    start, lbo, sbo, width = decode_smem_descriptor(desc)
    size = _BYTES[dtype]
    r, kk = np.meshgrid(np.arange(rows), np.arange(k), indexing="ij")
    if not mn_major:
        b = kk * size
        if width:
            addr = (r % 8) * width + (r // 8) * sbo + b
        else:
            addr = (r % 8) * 16 + (r // 8) * sbo + b % 16 + (b // 16) * lbo
    else:
        x = r * size
        if width:
            addr = x % width + (x // width) * lbo + (kk % 8) * width + (kk // 8) * sbo
        else:
            addr = x % 16 + (x // 16) * sbo + (kk % 8) * 16 + (kk // 8) * lbo
    addr = addr + start
    if width:
        addr = addr ^ ((addr >> 3) & (((width // 16) - 1) << 4))
    if addr.max() + size > smem.size:
        raise EmulationError(f"descriptor {int(desc):#x} reaches byte {int(addr.max()) + size} of a {smem.size}-byte "
                             f"shared memory")
    raw = np.zeros(addr.shape, dtype=np.uint32)
    for byte in range(size):                # little-endian element bytes
        raw |= smem[addr + byte].astype(np.uint32) << np.uint32(8 * byte)
    return _decode_values(raw, dtype)


# ------------------------------------------------------------------------------------------ ld / st shapes

def _ld_window(shape: str, num: int) -> list:
    """[(thread, register, lane offset, column offset)] of one warp's tcgen05.ld/st, from the PTX figures."""
    lanes, per_rep = {"32x32b": (32, 1), "16x64b": (16, 2), "16x128b": (16, 4), "16x256b": (16, 8)}[shape]
    out = []
    for rep in range(num):
        for lane in range(lanes):
            for c in range(per_rep):
                col = rep * per_rep + c
                if shape == "32x32b":
                    thread, reg = lane, rep
                elif shape == "16x64b":           # two threads per lane, lanes 8-15 one thread up
                    thread, reg = 4 * (lane % 8) + 2 * c + lane // 8, rep
                elif shape == "16x128b":          # four threads per lane, lanes 8-15 in the odd register
                    thread, reg = 4 * (lane % 8) + c, 2 * rep + lane // 8
                else:                             # four threads per lane, two columns each
                    thread, reg = 4 * (lane % 8) + c // 2, 4 * rep + 2 * (lane // 8) + c % 2
                out.append((thread, reg, lane, col))
    return out


_MAX_NUM = {"32x32b": 128, "16x64b": 128, "16x128b": 64, "16x256b": 32}


class TensorMemory:
    """One CTA's Tensor Memory and its allocator, with the instructions that act on it."""

    def __init__(self) -> None:
        self.cells = np.zeros((LANES, COLUMNS), dtype=np.uint32)
        self.allocations: dict = {}         # first column -> columns
        self.permit = True

    # ----------------------------------------------------------------- allocation
    def alloc(self, columns: int) -> int:
        """``tcgen05.alloc``: the address (lane 0) of ``columns`` fresh columns, aligned to their count."""
        if not self.permit:
            raise EmulationError("tcgen05.alloc after tcgen05.relinquish_alloc_permit")
        if columns < 32 or columns > COLUMNS or columns & (columns - 1):
            raise EmulationError(f"tcgen05.alloc of {columns} columns: a power of two from 32 to {COLUMNS}")
        for first in range(0, COLUMNS, columns):
            if all(first + columns <= c0 or c0 + n <= first for c0, n in self.allocations.items()):
                self.allocations[first] = columns
                return first
        raise EmulationError(f"tcgen05.alloc of {columns} columns: Tensor Memory is full ({self.allocations})")

    def dealloc(self, taddr: int, columns: int) -> None:
        if taddr >> 16 or self.allocations.get(taddr & 0xFFFF) != columns:
            raise EmulationError(f"tcgen05.dealloc of {columns} columns at {taddr:#x}: no such allocation")
        del self.allocations[taddr & 0xFFFF]

    def relinquish_alloc_permit(self) -> None:
        self.permit = False

    def _check_columns(self, first: int, count: int, what: str) -> None:
        if not any(c0 <= first and first + count <= c0 + n for c0, n in self.allocations.items()):
            raise EmulationError(f"{what}: columns {first}..{first + count - 1} are not inside one allocation "
                                 f"({self.allocations})")

    # ----------------------------------------------------------------- ld / st
    def _window(self, warp: int, shape: str, num: int, taddr: int, what: str) -> tuple[int, int, list]:
        if shape not in _MAX_NUM or num not in [1 << e for e in range(8)] or num > _MAX_NUM[shape]:
            raise EmulationError(f"{what}: no shape .{shape}.x{num}")
        lane0, col0 = taddr >> 16, taddr & 0xFFFF
        sub = 32 * (warp % 4)
        allowed = (sub,) if shape == "32x32b" else (sub, sub + 16)
        if lane0 not in allowed:
            raise EmulationError(f"{what} by warp {warp}: lane {lane0} is outside its subpartition (lanes {sub}.."
                                 f"{sub + 31}; a .{shape} window starts at lane {' or '.join(map(str, allowed))})")
        cells = _ld_window(shape, num)
        width = max(c for *_, c in cells) + 1
        self._check_columns(col0, width, what)
        return lane0, col0, cells

    def ld(self, warp: int, shape: str, num: int, taddr: int) -> np.ndarray:
        """``tcgen05.ld.sync.aligned.<shape>.x<num>.b32`` by warp ``warp``: (32 threads, registers) uint32."""
        lane0, col0, cells = self._window(warp, shape, num, taddr, f"tcgen05.ld.{shape}.x{num}")
        regs = np.zeros((32, max(r for _, r, _, _ in cells) + 1), dtype=np.uint32)
        for t, r, lane, col in cells:
            regs[t, r] = self.cells[lane0 + lane, col0 + col]
        return regs

    def st(self, warp: int, shape: str, num: int, taddr: int, regs: np.ndarray) -> None:
        """``tcgen05.st.sync.aligned.<shape>.x<num>.b32`` by warp ``warp`` from (32, registers) uint32."""
        lane0, col0, cells = self._window(warp, shape, num, taddr, f"tcgen05.st.{shape}.x{num}")
        regs = np.asarray(regs, dtype=np.uint32)
        for t, r, lane, col in cells:
            self.cells[lane0 + lane, col0 + col] = regs[t, r]

    # ----------------------------------------------------------------- mma
    def mma(self, kind: str, taddr_d: int, smem: np.ndarray, a_desc: int, b_desc: int, idesc: int,
            enable_input_d: bool) -> None:
        """``tcgen05.mma.cta_group::1.<kind> [d], a_desc, b_desc, idesc, enable_input_d`` (SS)."""
        f = decode_instr_descriptor(idesc, kind)
        m, n, k = f["m"], f["n"], f["k"]
        lane0, col0 = taddr_d >> 16, taddr_d & 0xFFFF
        if m == 128 and lane0 != 0 or m == 64 and lane0 not in (0, 16):
            raise EmulationError(f"tcgen05.mma M={m}: D at lane {lane0} (M=128 starts at lane 0, M=64 at 0 or 16)")
        self._check_columns(col0, n, f"tcgen05.mma D at {taddr_d:#x}")
        a = read_operand(smem, a_desc, m, k, f["a"], f["a_mn"])
        b = read_operand(smem, b_desc, n, k, f["b"], f["b_mn"])
        rows = np.arange(m)
        lanes = rows if m == 128 else 32 * (rows // 16) + lane0 + rows % 16
        cols = col0 + np.arange(n)
        acc = self.cells[np.ix_(lanes, cols)].view(np.float32).copy() if enable_input_d else \
            np.zeros((m, n), dtype=np.float32)
        for kk in range(k):                 # float32 products and sums, K in order
            acc = (acc + a[:, kk:kk + 1] * b[None, :, kk]).astype(np.float32)
        self.cells[np.ix_(lanes, cols)] = acc.view(np.uint32)
