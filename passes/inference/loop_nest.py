"""A uniform view of every loop-shaped op: user ``T.parallel`` nests and the element loops implied by
copy / fill / elementwise tile ops (TileLang lowers a copy to a SIMT parallel loop and infers it like
one; so do we, which makes a fragment<->global copy behave exactly like an elementwise loop)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tvm import tirx

from tilelayout.errors import InferenceError

from .ops import Access, BufferInfo, CopyOp, ElementwiseOp, FillOp, ParallelOp, Region

__all__ = ["LoopNest", "nest_of"]


@dataclass(eq=False)
class LoopNest:
    """Loop variables over static extents plus every buffer access in program order."""

    op: Any
    loop_vars: list
    extents: list
    accesses: list                 # list[Access]
    inner_vars: list = field(default_factory=list)   # serial loop vars inside the nest
    is_user_loop: bool = False
    key: str | None = None

    @property
    def index(self) -> int:
        return self.op.index

    def fragment_accesses(self) -> list:
        return self._fragment_accesses

    @cached_property
    def _fragment_accesses(self) -> list:
        return [a for a in self.accesses if a.buffer.is_fragment]

    def fragments(self) -> list:
        return self._fragments

    @cached_property
    def _fragments(self) -> list:
        out = []
        for a in self._fragment_accesses:
            if not any(a.buffer is b for b in out):
                out.append(a.buffer)
        return out

    def accesses_of(self, buffer: BufferInfo) -> list:
        return [a for a in self.accesses if a.buffer is buffer]

    @cached_property
    def value_lane_cap(self):
        """Most vector lanes a user nest's stored values allow (``loop_plan.value_lane_cap``), or None."""
        from .loop_plan import value_lane_cap
        return value_lane_cap(self.op.root) if isinstance(self.op, ParallelOp) else None

    @property
    def touches_fragment(self) -> bool:
        return any(a.buffer.is_fragment for a in self.accesses)

    @property
    def touches_memory(self) -> bool:
        return any(a.buffer.is_global or a.buffer.is_shared for a in self.accesses)

    @property
    def stores_memory(self) -> bool:
        return any(a.is_write and (a.buffer.is_global or a.buffer.is_shared) for a in self.accesses)

    @property
    def touches_shared(self) -> bool:
        return any(a.buffer.is_shared for a in self.accesses)

    @property
    def size(self) -> int:
        out = 1
        for e in self.extents:
            out *= e
        return out

    def describe(self) -> str:
        return self.op.describe()


def _region_indices(region: Region, loop_vars: list, kept: list) -> list:
    """Indices of ``region`` driven by the loop variables over its non-unit dimensions."""
    out, k = [], 0
    for d, (off, ext) in enumerate(zip(region.offsets, region.extents)):
        if d in kept:
            out.append(off + loop_vars[k] if not (isinstance(off, int) and off == 0) else loop_vars[k])
            k += 1
        else:
            out.append(off if not isinstance(off, int) else tirx.const(off, "int32"))
    return out


def _kept_dims(region: Region) -> list:
    return [d for d, e in enumerate(region.extents) if not (isinstance(e, int) and e == 1)]


def _static_extents(extents, op) -> list:
    out = []
    for e in extents:
        if not isinstance(e, int):
            raise InferenceError(f"{op.describe()}: symbolic extent {e} is not supported by layout inference yet; "
                                 f"make the tile shape a compile-time constant")
        out.append(e)
    return out


def _region_nest(op, dst: Region, srcs: list) -> LoopNest:
    kept = _kept_dims(dst)
    extents = _static_extents([dst.extents[d] for d in kept], op) or [1]
    loop_vars = [tirx.Var(f"v{k}", "int32") for k in range(len(extents))]
    accesses = []
    for src in srcs:
        src_kept = _kept_dims(src)
        src_ext = [src.extents[d] for d in src_kept]
        if [e for e in src_ext] != [dst.extents[d] for d in kept]:
            raise InferenceError(f"{op.describe()}: source region {src} and destination region {dst} have "
                                 f"different non-unit extents ({src_ext} vs {[dst.extents[d] for d in kept]})")
        accesses.append(Access(src.buffer, _region_indices(src, loop_vars, src_kept), True, False))
    accesses.append(Access(dst.buffer, _region_indices(dst, loop_vars, kept), False, True))
    return LoopNest(op, loop_vars, extents, accesses)


def nest_of(op) -> LoopNest | None:
    """The loop nest an op behaves like, or None for ops with their own rules (reduce, gemm). Kept on the op:
    the engine, the cost model and an epilogue split's engine (which shares the ops before the split with the
    unsplit program's graph) all ask for it, and a nest is a fact about the op alone."""
    hit = op.__dict__.get("_nest", _NO_NEST)
    if hit is _NO_NEST:
        hit = _build_nest(op)
        object.__setattr__(op, "_nest", hit)       # ops are frozen dataclasses; the nest is not one of their fields
    return hit


_NO_NEST = object()


def _build_nest(op) -> LoopNest | None:
    if isinstance(op, ParallelOp):
        extents = _static_extents(op.extents, op)
        for m in op.mins:
            if not (isinstance(m, int) and m == 0):
                raise InferenceError(f"{op.describe()}: parallel loops must start at 0 (got min {m})")
        inner = [loop.var for loop in op.inner_loops if loop.var is not None]
        return LoopNest(op, list(op.loop_vars), extents, list(op.accesses), inner, True, op.key)
    if isinstance(op, CopyOp):
        return _region_nest(op, op.dst, [op.src])
    if isinstance(op, FillOp):
        return _region_nest(op, op.dst, [])
    if isinstance(op, ElementwiseOp):
        return _region_nest(op, op.dst, list(op.srcs))
    return None
