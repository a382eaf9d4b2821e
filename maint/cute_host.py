"""NVIDIA's CuTe, compiled on the host: the facts ``maint/cute_oracle.py`` compares our tensor-core code with.

CuTe (the CUTLASS headers; the ``nvidia-cutlass`` wheel installs them, TileLang bundles them) states who holds
what for every tensor-core instruction independently of the PTX reading our lowering and its CPU emulation share:
MMA atom traits (thread, value) -> coordinate maps of A, B and C; ldmatrix copy atoms (source rows, destination
bits); the GMMA shared-memory layout atoms; ``make_gmma_desc``. This module writes one small C++ program that
evaluates exactly the atoms, tiles and descriptors asked for and prints them as JSON, compiles it with the host
C++ compiler (g++ by default, ``$CXX``) and caches the binary by a hash of its source, the compiler and the header
paths (``$TILELAYOUT_CACHE`` or ``~/.cache/tilelayout``), so a second run compiles nothing.

The headers include ``cuda_runtime_api.h``, ``cuda_fp16.h``, ``vector_types.h`` and libcu++'s ``cuda/std``: they
come from a CUDA toolkit's include directory (``$CUDA_HOME``, ``/usr/local/cuda``, or beside ``nvcc``); no GPU is
needed. ``unavailable()`` says what is missing (the tests skip with that reason).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TileRequest", "Requests", "cutlass_include", "cuda_include", "compiler", "unavailable", "evaluate",
           "program_source", "run_source", "SMEM_TILE_ENTRY"]

#: ldmatrix copy atoms (m8n8 .b16): plain x1/x2/x4 and .trans x1/x2/x4
LDSM_ATOMS = ("SM75_U32x1_LDSM_N", "SM75_U32x2_LDSM_N", "SM75_U32x4_LDSM_N",
              "SM75_U16x2_LDSM_T", "SM75_U16x4_LDSM_T", "SM75_U16x8_LDSM_T")


def cutlass_include() -> Path | None:
    """The CUTLASS/CuTe include directory: ``$CUTLASS_INCLUDE``, the nvidia-cutlass wheel's, or apache-tvm's copy."""
    env = os.environ.get("CUTLASS_INCLUDE")
    candidates = [Path(env)] if env else []
    try:
        import cutlass_library
        candidates.append(Path(cutlass_library.__file__).parent / "source" / "include")
    except ImportError:
        pass
    try:
        import tvm
        candidates.append(Path(tvm.__file__).parent / "3rdparty" / "cutlass" / "include")
    except ImportError:
        pass
    return next((c for c in candidates if (c / "cute" / "atom" / "mma_traits_sm90_gmma.hpp").is_file()), None)


def cuda_include() -> list[Path]:
    """The CUDA toolkit include directories the CUTLASS headers need on the host (and CUDA 13's ``cccl``)."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    for root in roots:
        if root and (Path(root) / "include" / "cuda_runtime_api.h").is_file():
            inc = Path(root) / "include"
            return [inc] + ([inc / "cccl"] if (inc / "cccl" / "cuda" / "std").is_dir() else [])
    return []


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def unavailable() -> str | None:
    """Why the CuTe oracle cannot run here, or None."""
    if compiler() is None:
        return "no host C++ compiler (g++ or $CXX)"
    if cutlass_include() is None:
        return "no CUTLASS/CuTe headers (pip install nvidia-cutlass, or set CUTLASS_INCLUDE)"
    if not cuda_include():
        return "no CUDA toolkit headers (cuda_runtime_api.h: set CUDA_HOME)"
    return None


@dataclass(frozen=True)
class TileRequest:
    """One operand tile as a CuTe GMMA layout atom tiled over the whole stored tile: ``tile_to_shape(atom,
    (mn, k), order)``, evaluated at every element, and ``make_gmma_desc`` of every ``(slice_mn, slice_k)`` block."""

    bits: int
    major: str          # "K" or "MN"
    atom: str           # "INTER", "SW32", "SW64", "SW128"
    mn: int
    k: int
    order: str          # "MN": atoms tiled along MN first (CuTe's default), "K": along K first
    slice_mn: int
    slice_k: int

    @property
    def key(self) -> str:
        return (f"{self.major}_{self.atom}_{self.bits}b_{self.mn}x{self.k}_{self.order}first_"
                f"{self.slice_mn}x{self.slice_k}")


@dataclass
class Requests:
    mma: set = field(default_factory=set)        # CuTe op names, e.g. "SM80_16x8x16_F32F16F16F32_TN"
    gmma: set = field(default_factory=set)       # e.g. "SM90_64x64x16_F32F16F16_RS<GMMA::Major::K,GMMA::Major::K>"
    tiles: set = field(default_factory=set)      # TileRequest


#: C++ shared by the Hopper and Blackwell programs (after ``g_smem_base`` and ``using namespace cute``): the
#: emulated shared memory and one JSON entry per tiled layout atom, its descriptors made by ``desc(tile)``
SMEM_TILE_ENTRY = r"""
alignas(1024) static unsigned char g_smem[1 << 18];

// ``Atom`` tiled over MN x K in ``Order``: the element offset of every (mn, k), and desc(tile) of every
// SMN x SK block
template <class Ty, class Atom, int MN, int K, class Order, int SMN, int SK, class Desc>
void smem_tile_entry(char const* name, bool first, Desc desc) {
  auto L = tile_to_shape(Atom{}, make_shape(Int<MN>{}, Int<K>{}), Order{});
  g_smem_base = (char const*)g_smem;
  // the swizzle acts on byte addresses (the smem pointer carries it): offsets are read through a tensor
  Tensor t = make_tensor(make_smem_ptr((Ty*)g_smem), L);
  std::printf("%s\"%s\": {\"offsets\": [", first ? "" : ",", name);
  for (int m = 0; m < MN; ++m) {
    std::printf(m ? ",[" : "[");
    for (int k = 0; k < K; ++k)
      std::printf(k ? ",%d" : "%d", int(((char const*)&t(m, k) - g_smem_base) / int(sizeof(Ty))));
    std::printf("]");
  }
  std::printf("], \"descriptors\": [");
  for (int i = 0; i < MN / SMN; ++i) {
    std::printf(i ? ",[" : "[");
    for (int s = 0; s < K / SK; ++s) {
      Tensor tile = local_tile(t, make_shape(Int<SMN>{}, Int<SK>{}), make_coord(i, s));
      std::printf(s ? ",\"%llu\"" : "\"%llu\"", (unsigned long long)desc(tile));
    }
    std::printf("]");
  }
  std::printf("]}\n");
}
"""

_PRELUDE = r"""// generated by maint/cute_host.py: CuTe facts as JSON
#include <cstddef>
#include <cstdint>
#include <cstdio>
static char const* g_smem_base = nullptr;
// the host stand-in of the shared-window conversion: byte offset from the emulated shared memory base
inline std::size_t __cvta_generic_to_shared(void const* p) { return std::size_t((char const*)p - g_smem_base); }
#define CUTE_CVTA_GENERIC_TO_SHARED_ACTIVATED 1
#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm80.hpp>
#include <cute/atom/mma_traits_sm89.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/atom/copy_traits_sm75.hpp>
using namespace cute;
using namespace cute::SM90;
""" + SMEM_TILE_ENTRY + r"""
template <class L> void table(L const& l) {
  std::printf("[");
  for (int t = 0; t < int(size<0>(l)); ++t) {
    std::printf(t ? ",[" : "[");
    for (int v = 0; v < int(size<1>(l)); ++v) std::printf(v ? ",%d" : "%d", int(l(t, v)));
    std::printf("]");
  }
  std::printf("]");
}

// GMMA (WithB false): A is the register A of the RS form, B a shared-memory descriptor with no thread layout
template <class Op, bool WithB = true> void mma_entry(char const* name, bool first) {
  using T = MMA_Traits<Op>;
  using S = typename T::Shape_MNK;
  std::printf("%s\"%s\": {\"shape\": [%d, %d, %d], \"A\": ", first ? "" : ",", name, int(size<0>(S{})),
              int(size<1>(S{})), int(size<2>(S{})));
  table(typename T::ALayout{});
  if constexpr (WithB) {
    std::printf(", \"B\": ");
    table(typename T::BLayout{});
  }
  std::printf(", \"C\": ");
  table(typename T::CLayout{});
  std::printf("}\n");
}

template <class Op> void copy_entry(char const* name, bool first) {
  using T = Copy_Traits<Op>;
  std::printf("%s\"%s\": {\"src\": ", first ? "" : ",", name);
  table(typename T::SrcLayout{});
  std::printf(", \"dst\": ");
  table(typename T::DstLayout{});
  std::printf("}\n");
}

template <GMMA::Major M, class Ty, class Atom, int MN, int K, class Order, int SMN, int SK>
void tile_entry(char const* name, bool first) {
  smem_tile_entry<Ty, Atom, MN, K, Order, SMN, SK>(
      name, first, [](auto const& tile) { return GMMA::make_gmma_desc<M>(tile).desc_; });
}

// CuTe's register convention for a 16-bit accumulator: an array of half_t recast to 32-bit registers
void f16_packing() {
  Tensor h = make_tensor<half_t>(Int<4>{});
  for (int i = 0; i < 4; ++i) h(i) = half_t::bitcast(uint16_t(0x1111 * (i + 1)));
  Tensor u = recast<uint32_t>(h);
  std::printf("\"f16_pack\": [\"%u\", \"%u\"]", unsigned(u(0)), unsigned(u(1)));
  Tensor w = make_tensor<uint32_t>(Int<2>{});
  w(0) = 0x89AB4567u; w(1) = 0x01EFCDu;
  Tensor g = recast<half_t>(w);
  std::printf(", \"f16_unpack\": [%u, %u, %u, %u]\n", unsigned(g(0).raw()), unsigned(g(1).raw()),
              unsigned(g(2).raw()), unsigned(g(3).raw()));
}
"""

_ATOM_TYPE = {("K", "INTER"): "Layout_K_INTER_Atom", ("K", "SW32"): "Layout_K_SW32_Atom",
              ("K", "SW64"): "Layout_K_SW64_Atom", ("K", "SW128"): "Layout_K_SW128_Atom",
              ("MN", "INTER"): "Layout_MN_INTER_Atom", ("MN", "SW32"): "Layout_MN_SW32_Atom",
              ("MN", "SW64"): "Layout_MN_SW64_Atom", ("MN", "SW128"): "Layout_MN_SW128_Atom"}
_UINT = {8: "uint8_t", 16: "uint16_t", 32: "uint32_t"}


def program_source(req: Requests) -> str:
    """The C++ program evaluating ``req`` (deterministic: sorted)."""
    body = ["int main() {", '  std::printf("{\\"mma\\": {");']
    for i, name in enumerate(sorted(req.mma)):
        body.append(f'  mma_entry<{name}>("{name}", {str(i == 0).lower()});')
    body.append('  std::printf("}, \\"gmma\\": {");')
    for i, name in enumerate(sorted(req.gmma)):
        body.append(f'  mma_entry<{name}, false>("{_json_key(name)}", {str(i == 0).lower()});')
    body.append('  std::printf("}, \\"ldsm\\": {");')
    for i, name in enumerate(LDSM_ATOMS):
        body.append(f'  copy_entry<{name}>("{name}", {str(i == 0).lower()});')
    body.append('  std::printf("}, \\"tiles\\": {");')
    for i, t in enumerate(sorted(req.tiles, key=lambda t: t.key)):
        ty = _UINT[t.bits]
        order = "Step<_1,_2>" if t.order == "MN" else "Step<_2,_1>"
        atom = f"GMMA::{_ATOM_TYPE[(t.major, t.atom)]}<{ty}>"
        body.append(f'  tile_entry<GMMA::Major::{t.major}, {ty}, {atom}, {t.mn}, {t.k}, {order}, {t.slice_mn}, '
                    f'{t.slice_k}>("{t.key}", {str(i == 0).lower()});')
    body += ['  std::printf("}, ");', "  f16_packing();", '  std::printf("}\\n");', "  return 0;", "}"]
    return _PRELUDE + "\n".join(body) + "\n"


def _json_key(name: str) -> str:
    return name.replace("GMMA::Major::", "").replace("<>", "")


def _cache_dir() -> Path:
    root = os.environ.get("TILELAYOUT_CACHE") or str(Path.home() / ".cache" / "tilelayout")
    return Path(root) / "cute_oracle"


def _prune(folder: Path, keep: int) -> None:
    """Remove all but the ``keep`` most recently built oracle binaries (each distinct program leaves one)."""
    built = sorted(folder.glob("oracle_*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in built[keep:]:
        old.unlink(missing_ok=True)


def evaluate(req: Requests) -> dict:
    """Run the CuTe program for ``req`` (compiled once per distinct source) and return its JSON."""
    return run_source(program_source(req))


def run_source(source: str) -> dict:
    """Compile ``source`` (a C++ program printing JSON) against CuTe once per distinct source, run it, parse it."""
    why = unavailable()
    if why:
        raise RuntimeError(f"CuTe oracle unavailable: {why}")
    cxx = compiler()
    includes = [cutlass_include()] + cuda_include()
    flags = ["-std=c++17", "-O0", "-w"] + [f"-I{p}" for p in includes]
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    digest = hashlib.sha256("\n".join([source, cxx, *version, *flags]).encode()).hexdigest()[:20]
    exe = _cache_dir() / f"oracle_{digest}"
    if not exe.is_file():
        exe.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "oracle.cpp"
            src.write_text(source)
            out = Path(tmp) / "oracle"
            run = subprocess.run([cxx, *flags, str(src), "-o", str(out)], capture_output=True, text=True)
            if run.returncode:
                raise RuntimeError(f"compiling the CuTe oracle failed:\n{run.stderr[-4000:]}")
            os.replace(out, exe)        # atomic: a concurrent run sees a whole binary or none
        _prune(exe.parent, keep=8)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    if run.returncode:
        raise RuntimeError(f"the CuTe oracle failed: {run.stderr[-2000:]}")
    return json.loads(run.stdout)
