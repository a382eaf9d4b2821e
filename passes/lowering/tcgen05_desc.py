"""tcgen05 descriptors (Blackwell sm_100a): the instruction descriptor and the shared-memory matrix descriptor.

Why here and not in ``wgmma_desc``: the shared-memory *layouts* a tcgen05.mma descriptor names are the wgmma
canonical layouts (same placement formula, same LBO / SBO meaning, same address-bit swizzles), so the solver
is ``wgmma_desc.solve`` unchanged; only the 64-bit encoding differs (PTX ISA "Shared memory descriptor",
tcgen05 matrix descriptors; CuTe's ``UMMA::SmemDescriptor``):

    bits [0, 14) start >> 4 | [16, 30) LBO >> 4 | [32, 46) SBO >> 4 | [46, 48) version, 1 on sm_100 |
    [49, 52) base offset (0 here) | bit 52 LBO mode (0: relative) | [61, 64) layout: 0 none, 1 128B with
    32-byte atoms (not used), 2 128B, 4 64B, 6 32B

(wgmma's 2-bit field at [62, 64) held 1 / 2 / 3 for 128B / 64B / 32B: the same swizzles, so ``SWIZZLE_CODE``
maps wgmma's mode codes to tcgen05's.) The 32-bit instruction descriptor (``.kind::f16`` / ``tf32`` /
``f8f6f4``; CuTe's ``UMMA::InstrDescriptor``):

    [0, 2) sparsity selector, 2 sparse, 3 saturate (0) | [4, 6) D format: 0 f16, 1 f32 | [7, 10) A format |
    [10, 13) B format | 13, 14 negate A, B | 15 A MN-major | 16 B MN-major | [17, 23) N >> 3 | [24, 29) M >> 4 |
    [30, 32) max shift (.ws only)

with formats f16 0, bf16 1, tf32 2 (kind::f16 / tf32) and e4m3 0, e5m2 1 (kind::f8f6f4). Both encoders are
compared with CuTe's ``make_umma_desc`` / ``make_instr_desc`` in ``tests/test_tcgen05_emulation.py``; the CPU
emulation (``emulate_tcgen05``) decodes the bits with its own code.
"""
from __future__ import annotations

from tilelayout.errors import LoweringError

from .wgmma_desc import DescriptorLayout

__all__ = ["SWIZZLE_CODE", "smem_descriptor", "instr_descriptor", "KIND_OF", "FORMAT", "K_OF_KIND"]

#: wgmma_desc mode code -> tcgen05 layout-type code
SWIZZLE_CODE = {0: 0, 1: 2, 2: 4, 3: 6}

#: operand dtype -> (PTX kind, format code in the instruction descriptor)
FORMAT = {"float16": ("kind::f16", 0), "bfloat16": ("kind::f16", 1), "float32": ("kind::tf32", 2),
          "float8_e4m3fn": ("kind::f8f6f4", 0), "float8_e5m2": ("kind::f8f6f4", 1)}
KIND_OF = {dtype: kind for dtype, (kind, _) in FORMAT.items()}
K_OF_KIND = {"kind::f16": 16, "kind::tf32": 8, "kind::f8f6f4": 32}
_D_FORMAT = {"float16": 0, "float32": 1}


def smem_descriptor(start: int, layout: DescriptorLayout) -> int:
    """The 64-bit tcgen05 shared-memory descriptor of a tile at byte address ``start`` laid out as ``layout``
    (a ``wgmma_desc.solve`` answer)."""
    if start % 16 or not 0 <= start < 1 << 18:
        raise LoweringError(f"a tcgen05 operand tile must start at a 16-byte aligned shared address below 256 KiB, "
                            f"got {start}")
    for name, value in (("LBO", layout.lbo), ("SBO", layout.sbo)):
        if value % 16 or not 0 <= value >> 4 < 1 << 14:
            raise LoweringError(f"tcgen05 descriptor {name}={value} bytes is not a 16-byte multiple below 256 KiB")
    return ((start >> 4) | (layout.lbo >> 4) << 16 | (layout.sbo >> 4) << 32 | 1 << 46
            | SWIZZLE_CODE[layout.mode] << 61)


def instr_descriptor(a_dtype: str, b_dtype: str, d_dtype: str, m: int, n: int, a_mn_major: bool = False,
                     b_mn_major: bool = False) -> int:
    """The 32-bit instruction descriptor of a dense, unnegated cta_group::1 tcgen05.mma."""
    if a_dtype not in FORMAT or b_dtype not in FORMAT or KIND_OF[a_dtype] != KIND_OF[b_dtype]:
        raise LoweringError(f"tcgen05.mma has no kind multiplying {a_dtype} by {b_dtype}")
    kind = KIND_OF[a_dtype]
    if kind == "kind::f16" and a_dtype != b_dtype:
        raise LoweringError(f"tcgen05.mma kind::f16 multiplies equal types, not {a_dtype} by {b_dtype}")
    if d_dtype not in _D_FORMAT or (d_dtype == "float16" and kind == "kind::tf32"):
        raise LoweringError(f"tcgen05.mma {kind} has no {d_dtype} accumulator")
    if m not in (64, 128) or n % (16 if m == 128 else 8) or not 0 < n <= 256:
        raise LoweringError(f"tcgen05.mma cta_group::1 has no shape M={m} N={n} (M 64 or 128; N up to 256, a multiple "
                            f"of 8 for M=64 and 16 for M=128)")
    return (_D_FORMAT[d_dtype] << 4 | FORMAT[a_dtype][1] << 7 | FORMAT[b_dtype][1] << 10 | int(a_mn_major) << 15
            | int(b_mn_major) << 16 | (n >> 3) << 17 | (m >> 4) << 24)
