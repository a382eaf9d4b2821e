"""Hardware geometry from the target, in one place shared by the io-aware model and the vectorizer,
so the model's belief about vector width and the emitted code cannot drift."""
from __future__ import annotations

import re

import tvm

from tilelayout.errors import ConfigError

#: Hopper with its arch-specific features (wgmma); layout inference is the same on sm_90 and sm_90a
DEFAULT_TARGET = {"kind": "cuda", "arch": "sm_90a"}
SEGMENT_BYTES = 128  # global-memory transaction granularity the io-aware model counts

#: what a plain ``sm_90`` target gives up against ``sm_90a`` (PTX's arch-specific Hopper instructions)
SM90_WITHOUT_A = ("wgmma (gemms run as mma.sync on the same accumulator layout), TMA (cp.async.bulk.tensor) and "
                  "setmaxnreg")
_WARNED_TARGETS: set = set()


def normalize_target(target=None) -> tvm.target.Target:
    """A tvm Target from a Target, dict or string; default CUDA sm_90a. A CUDA target without an arch on a
    machine without a GPU is refused (TVM would silently pick sm_50)."""
    if target is None:
        return tvm.target.Target(DEFAULT_TARGET)
    if isinstance(target, tvm.target.Target):
        return target
    if _cuda_without_arch(target) and not _gpu_present():
        raise ConfigError(f"the target {target!r} names no CUDA arch and this machine has no GPU to take it from; "
                          f"name one, e.g. {{\"kind\": \"cuda\", \"arch\": \"sm_90a\"}}")
    try:
        made = tvm.target.Target(target)
    except Exception as err:
        raise ConfigError(f"cannot make a TVM target from {target!r}: {str(err).splitlines()[-1]}") from None
    return made


def _cuda_without_arch(target) -> bool:
    """A CUDA target spelled without an arch (TVM fills one in from the GPU, or sm_50 without one)."""
    if isinstance(target, dict):
        return target.get("kind") == "cuda" and "arch" not in target and "tag" not in target
    if isinstance(target, str):
        words = target.split()
        return bool(words) and words[0] == "cuda" and not any("arch" in w for w in words)
    return False


def _gpu_present() -> bool:
    try:
        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001 -- a TVM without CUDA runtime: no GPU
        return False


def warn_target_features(target: tvm.target.Target) -> None:
    """Lowering for a plain sm_90: one warning per process naming what it gives up against sm_90a (layout
    inference is the same on both, so only the lowering warns)."""
    arch = str(target.attrs.get("arch", ""))
    if target.kind.name != "cuda" or arch != "sm_90" or arch in _WARNED_TARGETS:
        return
    _WARNED_TARGETS.add(arch)
    from tilelayout.errors import TargetFeatureWarning, warn_user
    warn_user(f"target sm_90 (without the arch-specific 'a') gives up {SM90_WITHOUT_A}; use sm_90a for them",
              TargetFeatureWarning)


def func_target(func, target=None):
    """``target`` when given, else the ``"target"`` attribute a kernel carries (``func.with_attr("target",
    ...)``), else None (the default target): a kernel written for sm_80 says so once, and every pass honours it."""
    if target is not None:
        return target
    attrs = getattr(func, "attrs", None)
    if attrs is not None and "target" in attrs:
        return attrs["target"]
    return None


def sm_version(target: tvm.target.Target) -> int:
    """Compute capability as an int (90 for sm_90a); 0 when the target has no CUDA arch."""
    match = re.match(r"sm_(\d+)", str(target.attrs.get("arch", "")))
    return int(match.group(1)) if match and target.kind.name == "cuda" else 0


def max_vector_load_bits(target=None, global_only: bool = False) -> int:
    """Widest vector access: 256 bits on sm_100+ for statements touching only global memory, else 128."""
    target = normalize_target(target)
    return 256 if global_only and sm_version(target) >= 100 else 128


def vector_lanes_limit(target, element_bits, global_only: bool = False, widening_from: int | None = None) -> int:
    """The most lanes one vector access of a statement may have: the target's widest vector access divided
    by the widest element the statement moves (global, shared or register side). The io-aware model and the
    vectorizer both take their cap from here, so the width scored is the width emitted. ``widening_from``:
    the statement loads floats of that many bits from memory into wider float registers
    (``widening_load_bits``), and the memory side sets the lanes (8 fp16 -> fp32: one 128-bit load, two
    registers vectors' worth of conversions)."""
    return lanes_for_bits(max_vector_load_bits(target, global_only), element_bits, widening_from)


#: a converting load's register side may span this many of the target's widest vectors (TVM prints 8 float32
#: lanes as one ``ulonglong4``; ptxas keeps it in registers)
WIDENING_REGISTER_VECTORS = 2


def lanes_for_bits(max_bits: int, element_bits, widening_from: int | None = None) -> int:
    """``vector_lanes_limit`` for a given widest access of ``max_bits``."""
    widest = max([int(b) for b in element_bits] or [8])
    lanes = max(1, max_bits // widest)
    if widening_from:
        wide = max(1, max_bits // int(widening_from))
        if wide > lanes and wide * widest <= WIDENING_REGISTER_VECTORS * max_bits:
            lanes = wide
    return lanes


def widening_load_bits(accesses) -> int | None:
    """Bits of the memory side when a statement only loads floats from global or shared memory into wider
    float registers, else None. ``accesses``: (bits, is_register, is_write, dtype) per access."""
    memory = [(b, w) for b, reg, w, _ in accesses if not reg]
    registers = [(b, w) for b, reg, w, _ in accesses if reg]
    if not memory or not registers or any(w for _, w in memory) or not all(w for _, w in registers):
        return None
    if not all(str(d).startswith(("float", "bfloat")) and not str(d).startswith("float8") for *_, d in accesses):
        return None
    widest_memory = max(b for b, _ in memory)
    return widest_memory if widest_memory < min(b for b, _ in registers) else None


def warp_size(target=None) -> int:
    target = normalize_target(target)
    value = target.attrs.get("thread_warp_size")
    return int(value) if value is not None else (64 if target.kind.name == "rocm" else 32)


def max_threads_per_block(target=None) -> int:
    """The most threads one block may launch on ``target`` (1,024 on every CUDA GPU)."""
    target = normalize_target(target)
    value = target.attrs.get("max_num_threads")
    return int(value) if value is not None else 1024


def check_block_threads(threads: int, target=None, what: str = "the kernel") -> None:
    """Refuse a thread count the target cannot launch in one block."""
    limit = max_threads_per_block(target)
    if threads < 1 or threads > limit:
        raise ConfigError(f"{what} launches {threads} threads (threadIdx.x) per block; "
                          f"{normalize_target(target).kind.name} blocks take 1 to {limit}")


def has_tma(target) -> bool:
    """Whether ``target`` has the Tensor Memory Accelerator as PTX exposes it (``sm_90a`` and later ``a`` targets)."""
    return sm_version(target) >= 90 and str(target.attrs.get("arch", "")).endswith("a")
