"""Does the generated CUDA declare the shared-memory alignment its wgmma descriptors assume?

A descriptor with a W-byte swizzle and base offset 0 (all of ours, and CuTe's ``make_gmma_desc``) is right only
if its tile's swizzle pattern starts on an ``8 * W``-byte boundary of the shared window (1024 bytes for 128B).
Read from the CUDA source TVM generates: every descriptor (``cvta_generic_to_shared(&buf[offset]) & 0x3FFFF >> 4
| fields``), the buffer it points into with that buffer's declared ``__align__`` / ``alignas``, and the offset
of the tile inside the buffer with every variable at 0 (the first K step of the first block: a tile start).
"""
from __future__ import annotations

import re

__all__ = ["declared_alignments", "descriptors", "problems"]

_DECL = re.compile(r"(?:extern\s+)?__shared__\s+(?:__align__\((\d+)\)\s+|alignas\((\d+)\)\s+)?[\w ]+?\s+(\w+)\[")
_DESC = re.compile(r"cvta_generic_to_shared\(\(&\((.*?)\[([^\[\]]*)\]\)\)\)\)\s*&\s*\(uint64_t\)262143ULL\)\s*>>\s*"
                   r"\(uint64_t\)4ULL\)\s*\|\s*\(uint64_t\)(\d+)ULL")
_SIZEOF = {"half": 2, "nv_bfloat16": 2, "__nv_bfloat16": 2, "float": 4, "uint": 4, "int": 4, "uchar": 1, "char": 1,
           "signed char": 1, "__nv_fp8_e4m3": 1, "__nv_fp8_e5m2": 1, "fp8_e4_t": 1, "fp8_e5_t": 1}
#: descriptor layout type -> swizzle width in bytes (0: interleaved, 16-byte cells)
_WIDTH = {1: 128, 2: 64, 3: 32, 0: 16}


def declared_alignments(source: str) -> dict:
    """Shared buffer name -> the alignment its declaration states (0: none stated)."""
    out = {}
    for m in _DECL.finditer(source):
        out[m.group(3)] = int(m.group(1) or m.group(2) or 0)
    return out


def _offset(expr: str) -> int:
    """An index expression of the source with every variable at 0."""
    text = re.sub(r"\(\((?:int|uint|long|int64_t)\)[\w.]+\)", "0", expr)
    text = re.sub(r"\((?:int|uint|long|int64_t)\)", "", text)
    text = re.sub(r"[A-Za-z_][\w.]*", "0", text).replace("/", "//")
    return int(eval(text, {"__builtins__": {}}, {}))        # noqa: S307 -- integers and operators only


def descriptors(source: str) -> list:
    """(buffer, element type, byte offset of the tile at all variables 0, required alignment) of every
    descriptor in ``source``."""
    out = []
    for m in _DESC.finditer(source):
        pointer, index, bits = m.group(1), m.group(2), int(m.group(3))
        cast = re.search(r"\(([\w ]+?)\s*\*\)", pointer)
        name = re.findall(r"\w+", pointer)[-1]
        elem = cast.group(1).strip() if cast else None
        size = _SIZEOF.get(elem, 1) if elem else 1
        required = 8 * _WIDTH[bits >> 62] if bits >> 62 else 16
        out.append((name, elem, _offset(index) * size, required))
    return out


def problems(source: str) -> list:
    """Every descriptor whose buffer is declared less aligned than it assumes, or whose tile sits off the
    boundary inside the buffer."""
    declared = declared_alignments(source)
    out = []
    for name, elem, offset, required in descriptors(source):
        have = declared.get(name)
        if have is None:
            out.append(f"descriptor into {name}: no __shared__ declaration of {name} found")
        elif have < required:
            out.append(f"descriptor into {name} assumes {required}-byte alignment, {name} is declared "
                       f"__align__({have})")
        # a start inside the atom's first row (a K step of an unrolled loop: 16, 32, ... bytes) leaves the address
        # bits the swizzle reads (the row within the atom) as at the tile's base, so base offset 0 still holds
        if offset % required >= max(16, required // 8):
            out.append(f"descriptor into {name} at byte offset {offset}, not a multiple of {required} nor a step "
                       f"along the first {max(16, required // 8)}-byte row of its atom")
    return out
