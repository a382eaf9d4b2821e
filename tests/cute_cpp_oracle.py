"""Run C++ CuTe (CUTLASS's headers, compiled for the host) on generated cases: the oracle of test_cute_cpp_parity.

CuTe's algebra decides a result's form at compile time from static extents and strides (``Int<4>``); runtime
``int`` leaves keep every mode unmerged. So the cases are written into one C++ source as expressions over static
values (``CASE(7, composition(make_layout(...), ...))``), with ``int`` leaves only where a case stands for our
symbolic (PrimExpr) leaves. The executable is cached under the temporary directory by a hash of its source, the
harness files, the headers' location and the compiler, so a rerun with the same seed compiles nothing.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tilelayout.cute import Layout, ScaledBasis
from tilelayout.cute.int_tuple import is_int, is_tuple

HARNESS = Path(__file__).resolve().parent / "cute_cpp"


def cutlass_include() -> Path | None:
    """CUTLASS's include directory: $TILELAYOUT_CUTLASS_INCLUDE, the nvidia-cutlass wheel, or TVM's copy."""
    candidates = []
    if os.environ.get("TILELAYOUT_CUTLASS_INCLUDE"):
        candidates.append(Path(os.environ["TILELAYOUT_CUTLASS_INCLUDE"]))
    for pkg, sub in (("cutlass_library", "source/include"), ("tvm", "3rdparty/cutlass/include")):
        spec = importlib.util.find_spec(pkg)
        if spec is not None and spec.submodule_search_locations:
            candidates += [Path(p) / sub for p in spec.submodule_search_locations]
    return next((c for c in candidates if (c / "cute" / "layout.hpp").is_file()), None)


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")


def skip_reason() -> str | None:
    if compiler() is None:
        return "no C++ compiler (g++ or $CXX) on PATH"
    if cutlass_include() is None:
        return "CUTLASS headers not found (pip install nvidia-cutlass, or set TILELAYOUT_CUTLASS_INCLUDE)"
    return None


def cpp_int(x, static: bool = True) -> str:
    return f"Int<{int(x)}>{{}}" if static else f"int({int(x)})"


def cpp_leaf(x, static: bool = True) -> str:
    if isinstance(x, ScaledBasis):
        return f"ScaledBasis<Int<{int(x.value)}>,{','.join(map(str, x.mode))}>{{}}"
    return cpp_int(x, static)


def cpp_tuple(t, static: bool = True, maker: str = "make_shape") -> str:
    if is_tuple(t):
        return f"{maker}(" + ",".join(cpp_tuple(x, static, maker) for x in t) + ")"
    return cpp_leaf(t, static)


def cpp_layout(layout: Layout, static: bool = True) -> str:
    """A C++ expression for ``layout`` (static leaves, or runtime ``int`` leaves when ``static`` is False)."""
    return (f"make_layout({cpp_tuple(layout.shape, static, 'make_shape')},"
            f"{cpp_tuple(layout.stride, static, 'make_stride')})")


def cpp_tiler(b) -> str:
    """A tiler: a Layout, an int, or a tuple of them (CuTe's make_tile)."""
    if isinstance(b, Layout):
        return cpp_layout(b)
    if is_int(b):
        return cpp_int(b)
    return "make_tile(" + ",".join(cpp_tiler(x) for x in b) + ")"


def _digest(source: str, include: Path, cxx: str) -> str:
    h = hashlib.sha256(source.encode())
    for f in sorted(HARNESS.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(HARNESS)).encode() + f.read_bytes())
    h.update(str(include).encode() + cxx.encode())
    return h.hexdigest()[:20]


def run(expressions: list[str], jobs: int = 2) -> list[str]:
    """Print each C++ expression with CuTe's ``print``; the i-th answer with ``_`` (static marks) removed."""
    cxx, include = compiler(), cutlass_include()
    chunks = [list(range(len(expressions)))[k::jobs] for k in range(jobs)]
    sources = ["#include \"oracle.hpp\"\nint main() {\n"
               + "".join(f"CASE({i}, {expressions[i]});\n" for i in chunk) + "return 0;\n}\n" for chunk in chunks]
    exes, procs = [], []
    for src in sources:
        work = Path(tempfile.gettempdir()) / f"tilelayout-cute-oracle-{_digest(src, include, cxx)}"
        exe = work / "oracle"
        exes.append(exe)
        if exe.is_file():
            continue
        work.mkdir(parents=True, exist_ok=True)
        (work / "cases.cpp").write_text(src)
        tmp = work / f"oracle.{os.getpid()}"
        cmd = [cxx, "-std=c++17", "-O0", "-w", f"-I{HARNESS / 'shim'}", f"-I{include}", f"-I{HARNESS}",
               str(work / "cases.cpp"), "-o", str(tmp)]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), tmp, exe,
                      work))
    for proc, tmp, exe, work in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"C++ CuTe rejected a case we accept (or the harness broke); source in {work}:\n"
                               + out[-6000:])
        os.replace(tmp, exe)
    answers: dict[int, str] = {}
    for exe in exes:
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            key, _, text = line.partition("\t")
            answers[int(key)] = text.replace("_", "").replace(" ", "")
    return [answers[i] for i in range(len(expressions))]
