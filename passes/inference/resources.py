"""Resource totals of an inference result, and warnings when they exceed what the target offers.

The inferred layouts decide how many registers each thread holds and how much shared memory a block
allocates, so inference is where a kernel author first learns that a kernel will spill, fail to compile
or fail to launch. The totals are estimates from the layouts alone (every fragment counted as live for
the whole kernel, temporaries of lowering not counted); they are printed by ``tilelayout show`` and
warned about with ``TileLayoutResourceWarning``, never raised: the layouts are still correct.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tilelayout.errors import TileLayoutResourceWarning, warn_user
from tilelayout.fragment import Fragment

from ..hardware import normalize_target, sm_version

__all__ = ["ResourceUsage", "resource_usage", "fragment_registers", "shared_tile_bytes", "stage_stride", "resource_warnings", "warn_resources", "shared_memory_limit",
           "result_peak", "static_shared_bytes",
           "MAX_REGISTERS_PER_THREAD", "MAX_STATIC_SHARED_BYTES", "LARGE_FRAGMENT_REGISTERS"]

#: the most 32-bit registers one CUDA thread can address (every architecture since sm_35)
MAX_REGISTERS_PER_THREAD = 255
#: statically declared ``__shared__`` arrays (scope "shared") are limited to 48 KiB per block; more needs
#: dynamic shared memory (scope "shared.dyn") and the opt-in limit below
MAX_STATIC_SHARED_BYTES = 48 * 1024
#: one fragment needing more than half the register budget on its own is unusual enough to name: it is
#: usually a fragment replicated to every thread, or a tile too large for the thread count
LARGE_FRAGMENT_REGISTERS = 128

# opt-in shared memory per block (bytes) by compute capability, from NVIDIA's CUDA programming guide
# (table "Technical Specifications per Compute Capability"); capabilities not listed use the nearest lower one
_SHARED_OPT_IN = ((90, 227 * 1024), (89, 99 * 1024), (87, 163 * 1024), (86, 99 * 1024), (80, 163 * 1024),
                  (75, 64 * 1024), (70, 96 * 1024), (0, 48 * 1024))
_SHARED_OVERRIDES = {120: 99 * 1024, 121: 99 * 1024}


def shared_memory_limit(target=None) -> int:
    """Bytes of shared memory one block may use on ``target`` (the opt-in maximum for dynamic shared memory)."""
    target = normalize_target(target)
    sm = sm_version(target)
    if sm in _SHARED_OVERRIDES:
        return _SHARED_OVERRIDES[sm]
    for floor, limit in _SHARED_OPT_IN:
        if sm >= floor:
            return limit
    return 48 * 1024


def _thread_limit(target) -> int:
    value = target.attrs.get("max_num_threads")
    return int(value) if value is not None else 1024


@dataclass
class ResourceUsage:
    """Per-thread registers, per-block shared memory and threads implied by one inference result."""

    threads: int
    thread_limit: int
    registers: int                                        # 32-bit registers per thread, all fragments
    fragment_registers: dict = field(default_factory=dict)   # fragment name -> 32-bit registers per thread
    fragment_slots: dict = field(default_factory=dict)       # fragment name -> elements per thread
    shared_bytes: int = 0                                 # all shared buffers of the block
    static_shared_bytes: int = 0                          # those in scope "shared" (static arrays)
    shared_buffers: dict = field(default_factory=dict)    # shared buffer name -> bytes
    shared_limit: int = 0
    shared_stages: dict = field(default_factory=dict)     # multi-buffered shared buffer name -> stages
    peak: object = None                                   # register_liveness.RegisterPeak of the plan

    def lines(self) -> list[str]:
        """Human-readable totals, as ``tilelayout show`` prints them."""
        regs = ", ".join(f"{n} {r}" for n, r in self.fragment_registers.items()) or "no fragments"
        shared = ", ".join(f"{n} {b} B" + (f" ({self.shared_stages[n]} stages)" if n in self.shared_stages else "")
                           for n, b in self.shared_buffers.items()) or "no shared buffers"
        peak = [self.peak.line(MAX_REGISTERS_PER_THREAD)] if self.peak is not None else []
        return [f"threads per block: {self.threads} (limit {self.thread_limit})", *peak,
                f"fragment registers per thread, all fragments summed: {self.registers} x 32-bit ({regs})",
                f"shared memory per block: {self.shared_bytes} B (limit {self.shared_limit} B; {shared})"]

    def to_dict(self) -> dict:
        """JSON-ready form (``tilelayout show --json``)."""
        return {"threads": self.threads, "thread_limit": self.thread_limit, "registers": self.registers,
                "register_limit": MAX_REGISTERS_PER_THREAD, "fragment_registers": dict(self.fragment_registers),
                "fragment_slots": dict(self.fragment_slots), "shared_bytes": self.shared_bytes,
                "static_shared_bytes": self.static_shared_bytes, "shared_buffers": dict(self.shared_buffers),
                "shared_stages": dict(self.shared_stages), "shared_limit": self.shared_limit,
                "register_peak": self.peak.to_dict() if self.peak is not None else None}


def _product(values) -> int | None:
    out = 1
    for v in values:
        try:
            out *= int(v)
        except (TypeError, ValueError):
            return None
    return out


#: bytes each stage of a multi-buffered (software-pipelined) shared tile is aligned to: a swizzle repeats every
#: 1024 bytes at most, so every stage keeps its swizzle phase
STAGE_ALIGN_BYTES = 1024


def stage_stride(elements: int, dtype: str, align_bytes: int = STAGE_ALIGN_BYTES) -> int:
    """Elements between two stages of a multi-buffered tile: the tile rounded up so each stage starts at the
    buffer's alignment."""
    import tvm
    nbytes = max(1, tvm.DataType(dtype).bits // 8)
    unit = max(1, align_bytes // nbytes) if align_bytes > 0 else 1
    return -(-elements // unit) * unit


def shared_tile_bytes(elements: int, dtype: str, stages: int = 1) -> int:
    """Bytes a shared tile of ``elements`` allocates; ``stages`` > 1: as many aligned copies (a pipelined loop's
    multi-buffered tile, ``stage_stride``). The one count shared by ``tilelayout show``, the resource warnings
    and the pipeline planner's shared-memory check."""
    import tvm
    bits = tvm.DataType(dtype).bits
    if stages > 1:
        return stage_stride(elements, dtype) * max(1, bits // 8) * stages
    return elements * bits // 8


def fragment_registers(result) -> dict:
    """{fragment name: 32-bit registers per thread} of an inference result (``fragment_registers32``)."""
    from .cost_models.base import fragment_registers32
    graph = getattr(result, "graph", None)
    infos = {b.name: b for b in graph.buffers} if graph is not None else {}
    frags = {n: l for n, l in result.buffers.items() if isinstance(l, Fragment)}
    return fragment_registers32(frags, lambda n: infos[n].bits if n in infos else 32)


def resource_usage(result, stages: dict | None = None) -> ResourceUsage:
    """Totals of ``result`` (an ``InferenceResult`` with its op graph); symbolic sizes are left out.

    ``stages``: {shared buffer name: copies} of the tiles a software-pipelined loop multi-buffers (the
    ``tilelayout.pipeline`` decisions of ``pipeline_plan``); such a tile counts once per stage."""
    target = normalize_target(result.target)
    graph = result.graph
    stages = stages or {}
    usage = ResourceUsage(threads=int(graph.thread_extent) if graph is not None else 0,
                          thread_limit=_thread_limit(target), registers=0, shared_limit=shared_memory_limit(target))
    usage.fragment_registers = fragment_registers(result)
    for name in usage.fragment_registers:
        usage.fragment_slots[name] = _product(result.buffers[name].output_shape)
    for info in (graph.buffers if graph is not None else []):
        if not info.is_shared:
            continue
        layout = result.buffers.get(info.name)
        sizes = [_product(info.shape)]
        if layout is not None:
            sizes.append(_product(layout.output_shape))
        if any(s is None for s in sizes):
            continue
        nbytes = shared_tile_bytes(max(sizes), info.dtype, stages.get(info.name, 1))
        if info.name in stages:
            usage.shared_stages[info.name] = stages[info.name]
        usage.shared_buffers[info.name] = nbytes
        if not info.scope.endswith(".dyn"):
            usage.static_shared_bytes += nbytes
    usage.registers = sum(usage.fragment_registers.values())
    usage.peak = getattr(result, "register_peak", None) or result_peak(result)
    usage.shared_bytes = sum(usage.shared_buffers.values())
    return usage


def result_peak(result):
    """The register peak of an inference result (``register_liveness.RegisterPeak``), its conversions placed
    with the way inference chose for each; None without an op graph. Inference records it as
    ``result.register_peak``; this recomputes it for a result built otherwise."""
    from .ops import ConvertOp
    from .register_liveness import overhead_estimate, register_peak
    graph = getattr(result, "graph", None)
    if graph is None or not hasattr(graph, "ops"):
        return None
    ways = {(c.get("src"), c.get("dst")): c.get("cost") for c in getattr(result, "conversions", ()) or ()}
    converts = {op.index: ways[(op.src.buffer.name, op.dst.buffer.name)] for op in graph.ops
                if isinstance(op, ConvertOp) and (op.src.buffer.name, op.dst.buffer.name) in ways}
    frags = {n: lay for n, lay in result.buffers.items() if isinstance(lay, Fragment)}
    plans = getattr(result, "gemm_plans", None)
    target = normalize_target(result.target) if getattr(result, "target", None) is not None else None
    return register_peak(graph, frags, conversions=converts, overhead=overhead_estimate(graph, plans, target),
                         gemm_plans=plans, target=target)


def static_shared_bytes(graph) -> int:
    """Bytes of the kernel's static shared buffers (scope "shared", each tile a pipelined loop multi-buffers once
    per stage): what a conversion's static staging tile shares the ``MAX_STATIC_SHARED_BYTES`` with."""
    from .register_liveness import pipeline_stages
    stages = pipeline_stages(graph)
    total = 0
    for info in graph.buffers:
        if not info.is_shared or info.scope.endswith(".dyn"):
            continue
        size = _product(info.shape)
        if size is not None:
            total += shared_tile_bytes(size, info.dtype, stages.get(info.name, 1))
    return total


def _largest(table: dict, k: int = 3) -> str:
    top = sorted(table.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return ", ".join(f"{n} ({v})" for n, v in top)


def resource_warnings(result) -> list[str]:
    """Messages for every limit ``result`` exceeds, each naming the buffers responsible (program order)."""
    usage = resource_usage(result)
    func = result.graph.func_name if result.graph is not None else "kernel"
    out = []
    if usage.threads > usage.thread_limit:
        out.append(f"{func}: {usage.threads} threads per block exceed the target's limit of {usage.thread_limit}; "
                   f"the kernel cannot launch")
    peak = usage.peak
    if peak is None and usage.registers > MAX_REGISTERS_PER_THREAD:
        out.append(f"{func}: fragments need {usage.registers} 32-bit registers per thread (largest: "
                   f"{_largest(usage.fragment_registers)}), over the {MAX_REGISTERS_PER_THREAD} a thread can "
                   f"address; the compiler will spill to local memory (use more threads or smaller tiles)")
    if peak is not None and peak.registers > MAX_REGISTERS_PER_THREAD:
        roles = peak.roles
        advice = ("use more threads or smaller tiles" if not roles or max(roles.values()) > MAX_REGISTERS_PER_THREAD
                  else "each thread range needs at most " + ", ".join(f"{n} (threads {r})" for r, n in roles.items())
                  + ": the fragments of different ranges are live across each other's code; put each range's ops "
                  "in one branch so they are not")
        out.append(f"{func}: the register peak is {peak.registers} 32-bit registers per thread at {peak.point} "
                   f"(live there: {_largest(peak.live)}; {peak.overhead} estimated for indices and addresses), "
                   f"over the {MAX_REGISTERS_PER_THREAD} a thread can address; the compiler will spill to local "
                   f"memory ({advice})")
    for name, regs in usage.fragment_registers.items():
        if regs > LARGE_FRAGMENT_REGISTERS:
            out.append(f"fragment {name}: {usage.fragment_slots[name]} elements ({regs} 32-bit registers) per "
                       f"thread, more than {LARGE_FRAGMENT_REGISTERS}; check that it is not replicated to every "
                       f"thread by accident")
    if usage.shared_bytes > usage.shared_limit:
        out.append(f"{func}: shared buffers take {usage.shared_bytes} bytes per block (largest: "
                   f"{_largest(usage.shared_buffers)}), over the target's {usage.shared_limit}-byte limit")
    elif usage.static_shared_bytes > MAX_STATIC_SHARED_BYTES:
        static = {n: b for n, b in usage.shared_buffers.items() if not _is_dynamic(result, n)}
        out.append(f"{func}: static shared buffers (scope \"shared\") take {usage.static_shared_bytes} bytes, over "
                   f"CUDA's {MAX_STATIC_SHARED_BYTES}-byte limit for static arrays (largest: {_largest(static)}); "
                   f"use scope \"shared.dyn\"")
    return out


def _is_dynamic(result, name: str) -> bool:
    try:
        return result.graph.buffer(name).scope.endswith(".dyn")
    except KeyError:
        return False


def warn_resources(result) -> list[str]:
    """Emit each of ``resource_warnings(result)`` as a ``TileLayoutResourceWarning``; return the messages."""
    messages = resource_warnings(result)
    for text in messages:
        warn_user(text, TileLayoutResourceWarning)
    return messages



def live_register_slots(result) -> int:
    """Register slots per thread of the fragments that can be live at once.

    A layout conversion makes a second version of a fragment (``x_cv <- x``); once nothing reads or writes
    ``x`` after the conversion, the two versions never coexist and the compiler reuses ``x``'s registers for
    ``x_cv``. Such a pair counts as its larger version, as one logical buffer with one layout would; every
    other fragment counts in full (no liveness beyond that). A conversion inside a serial loop retires its
    source only when no other op in that loop touches it (the next iteration could read it again)."""
    from .cost_models.base import count_register_slots
    from .ops import ConvertOp
    total = count_register_slots(result.buffers)
    graph = getattr(result, "graph", None)
    if graph is None:
        return total

    def slots(name: str) -> int:
        lay = result.buffers.get(name)
        return count_register_slots({name: lay}) if isinstance(lay, Fragment) else 0

    ops = list(graph.ops)
    for conv in ops:
        if not isinstance(conv, ConvertOp):
            continue
        src, dst = conv.src.buffer.name, conv.dst.buffer.name
        touches = [op for op in ops if op is not conv and any(b.name == src for b in op.buffers())]
        if any(op.index > conv.index for op in touches):
            continue
        outer = conv.serial_loops[0] if conv.serial_loops else None
        if outer is not None and any(op.serial_loops and op.serial_loops[0] is outer for op in touches):
            continue
        total -= min(slots(src), slots(dst))
    return total
