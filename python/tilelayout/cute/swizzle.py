"""Swizzle functors and ComposedLayout (swizzle o offset o layout): XOR layouts no shape:stride can express."""
from __future__ import annotations

import tvm
from tvm import tirx

from .int_tuple import CuteError, is_int
from .layout import Layout, LayoutBase, cosize, size

__all__ = ["Swizzle", "ComposedLayout"]


class Swizzle:
    """XOR the ``b_bits`` bits at ``m_base + s_shift`` into the ``b_bits`` bits at ``m_base`` (negative shift: the
    other way): ``Swizzle(3, 3, 3)`` is the 128-byte pattern on 8-element (16-byte fp16) chunks."""

    __slots__ = ("bits", "base", "shift")

    def __init__(self, b_bits: int, m_base: int, s_shift: int):
        if not all(is_int(x) for x in (b_bits, m_base, s_shift)):
            raise CuteError(f"Swizzle({b_bits!r}, {m_base!r}, {s_shift!r}): arguments must be ints")
        if b_bits < 0 or m_base < 0 or abs(s_shift) < b_bits:
            raise CuteError(f"Swizzle({b_bits}, {m_base}, {s_shift}): needs b_bits >= 0, m_base >= 0 and "
                            f"|s_shift| >= b_bits so that the two bit fields do not overlap")
        self.bits, self.base, self.shift = int(b_bits), int(m_base), int(s_shift)

    b_bits = property(lambda self: self.bits)
    m_base = property(lambda self: self.base)
    s_shift = property(lambda self: self.shift)

    @property
    def yyy_pos(self) -> int:  # lowest bit of the source field
        return self.base + max(0, self.shift)

    @property
    def zzz_pos(self) -> int:  # lowest bit of the field that gets XORed
        return self.base - min(0, self.shift)

    def __call__(self, offset):
        """Swizzle an int, a numpy int array, or a PrimExpr (as ``a ^ (a >> yyy & mask) << zzz``)."""
        if isinstance(offset, tirx.IntImm):
            offset = int(offset.value)
        if self.bits == 0:
            return offset
        mask = (1 << self.bits) - 1
        if isinstance(offset, tvm.ir.Expr) and not isinstance(offset, tirx.IntImm):
            moved = offset // (1 << self.yyy_pos) % (1 << self.bits) * (1 << self.zzz_pos)
            return tirx.bitwise_xor(offset, moved)
        return offset ^ (((offset >> self.yyy_pos) & mask) << self.zzz_pos)

    def is_identity(self) -> bool:
        return self.bits == 0

    def size(self) -> int:
        return 1 << (self.bits + self.base + abs(self.shift))

    def cosize(self) -> int:
        return self.size()

    def __eq__(self, other):
        return isinstance(other, Swizzle) and (self.bits, self.base, self.shift) == (other.bits, other.base, other.shift)

    def __hash__(self):
        return hash((self.bits, self.base, self.shift))

    def __str__(self):
        return f"Sw<{self.bits},{self.base},{self.shift}>"

    def __repr__(self):
        return f"Swizzle({self.bits}, {self.base}, {self.shift})"


class ComposedLayout(LayoutBase):
    """``swizzle(offset + layout(c))``: the outer function may be a Swizzle or a Layout."""

    __slots__ = ("swizzle", "offset", "layout")

    def __init__(self, swizzle, offset, layout: Layout):
        if not isinstance(layout, Layout):
            raise CuteError(f"ComposedLayout: inner layout must be a Layout, got {layout!r}")
        if not isinstance(swizzle, (Swizzle, Layout)):
            raise CuteError(f"ComposedLayout: outer function must be a Swizzle or a Layout, got {swizzle!r}")
        self.swizzle, self.offset, self.layout = swizzle, offset, layout

    layoutB = property(lambda self: self.swizzle)  # pycute's names
    layoutA = property(lambda self: self.layout)

    def __call__(self, *args):
        return self.swizzle(self.offset + self.layout(*args))

    def __len__(self):
        return len(self.layout)

    def __getitem__(self, i):
        return ComposedLayout(self.swizzle, self.offset, self.layout[i])

    @property
    def shape(self):
        return self.layout.shape

    def size(self):
        return size(self.layout)

    def cosize(self):
        return cosize(self.swizzle)

    def __eq__(self, other):
        return isinstance(other, ComposedLayout) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))

    def __str__(self):
        return f"{self.swizzle} o {self.offset} o {self.layout}"

    def __repr__(self):
        return f"ComposedLayout({self.swizzle!r}, {self.offset!r}, {self.layout!r})"
