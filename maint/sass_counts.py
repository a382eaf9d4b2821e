"""Static SASS instruction counts of a cubin, grouped the way a code-quality comparison reads them.

``cuobjdump -sass`` (the ``nvidia-cuda-cuobjdump`` wheel; it calls ``nvdisasm``, from the
``nvidia-cuda-nvdisasm`` wheel) disassembles the cubin; every instruction's opcode is counted into one group:

- ``MMA``: tensor-core math (HMMA, HGMMA, IMMA, QMMA, DMMA ...);
- ``LDSM`` / ``STSM``: ldmatrix / stmatrix;
- ``LDG<w>`` / ``STG<w>``: global loads and stores by width in bits (``LDG.E.128`` -> ``LDG128``; no width
  suffix is 32 bits, ``.U8`` / ``.S16`` ... their bits);
- ``LDGSTS`` (cp.async), ``UTMALDG`` / ``UTMASTG`` (TMA), ``BAR`` (barriers), ``SYNCS`` (mbarrier
  operations), ``SHFL``, ``LDL`` / ``STL`` (local memory: a register array ptxas could not keep in registers);
- ``total``: every instruction.

Static counts: a loop's body is counted once, whatever its trip count.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

__all__ = ["GROUPS", "cuobjdump", "sass_counts", "count_opcodes"]

#: the groups a table shows, in its column order
GROUPS = ("MMA", "LDSM", "STSM", "LDG32", "LDG64", "LDG128", "STG32", "STG64", "STG128", "LDGSTS", "UTMALDG",
          "UTMASTG", "BAR", "SYNCS", "SHFL", "LDL", "STL", "total")

_OPCODE = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)")
_NARROW = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "64": 64, "128": 128}


def cuobjdump() -> str | None:
    """Path of ``cuobjdump``: on PATH, else the one the ``nvidia-cuda-cuobjdump`` wheel installs."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for path in sorted(Path(root).glob("*/bin/cuobjdump")):
            return str(path)
    return None


def _width(opcode: str) -> int:
    for part in opcode.split(".")[1:]:
        if part in _NARROW:
            return _NARROW[part]
    return 32


def count_opcodes(opcodes: list) -> Counter:
    """The groups (module docstring) of a list of SASS opcodes (``LDG.E.128``, ``HMMA.16816.F32`` ...)."""
    out: Counter = Counter()
    for op in opcodes:
        head = op.split(".")[0]
        out["total"] += 1
        if head in ("HMMA", "HGMMA", "IMMA", "IGMMA", "QMMA", "QGMMA", "DMMA", "BMMA", "HMMA16", "OMMA"):
            out["MMA"] += 1
        elif head in ("LDSM", "STSM", "LDGSTS", "UTMALDG", "UTMASTG", "SHFL", "LDL", "STL"):
            out[head] += 1
        elif head in ("BAR", "SYNCS"):
            out[head] += 1
        elif head in ("LDG", "STG"):
            w = _width(op)
            out[f"{head}{w}" if w >= 32 else f"{head}32"] += 1
    return out


def sass_counts(cubin: Path) -> Counter:
    """Grouped static instruction counts of ``cubin`` (raises FileNotFoundError without cuobjdump)."""
    tool = cuobjdump()
    if tool is None:
        raise FileNotFoundError("cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    env = dict(os.environ)
    env["PATH"] = str(Path(tool).parent) + os.pathsep + env.get("PATH", "")      # nvdisasm beside it
    proc = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    opcodes = [m.group(1) for m in map(_OPCODE.match, proc.stdout.splitlines()) if m]
    return count_opcodes(opcodes)


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(path, dict(sass_counts(Path(path))))
