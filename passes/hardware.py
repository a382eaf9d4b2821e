"""Hardware geometry from the target, in one place shared by the io-aware model and the vectorizer,
so the model's belief about vector width and the emitted code cannot drift."""
from __future__ import annotations

import re

import tvm

from tilelayout.errors import ConfigError

DEFAULT_TARGET = {"kind": "cuda", "arch": "sm_90"}
SEGMENT_BYTES = 128  # global-memory transaction granularity the io-aware model counts


def normalize_target(target=None) -> tvm.target.Target:
    """A tvm Target from a Target, dict or string; default CUDA sm_90 (where TileLang's goldens were recorded)."""
    if target is None:
        return tvm.target.Target(DEFAULT_TARGET)
    if isinstance(target, tvm.target.Target):
        return target
    try:
        return tvm.target.Target(target)
    except Exception as err:
        raise ConfigError(f"cannot make a TVM target from {target!r}: {str(err).splitlines()[-1]}") from None


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


def vector_lanes_limit(target, element_bits, global_only: bool = False) -> int:
    """The most lanes one vector access of a statement may have: the target's widest vector access divided
    by the widest element the statement moves (global, shared or register side). The io-aware model and the
    vectorizer both take their cap from here, so the width scored is the width emitted."""
    widest = max([int(b) for b in element_bits] or [8])
    return max(1, max_vector_load_bits(target, global_only) // widest)


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
