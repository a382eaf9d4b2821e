"""Which fragment stores to global memory a layout conversion could coalesce (the epilogue of a gemm).

An MMA accumulator stored straight to global memory moves whole 128-byte segments for a few bytes each
(the io-aware ratio against the minimum is 4.00 for mma.sync's m16n8 tiles). Converting the fragment to a
layout the store coalesces costs a shared-memory round trip; ``conversion_plan`` tries the split for every
store this module names and keeps it only when the io-aware total (conversion included) is lower.
"""
from __future__ import annotations

import numpy as np

from ..hardware import SEGMENT_BYTES
from .cost_models.io_aware import op_statement, score_statement
from .frontend import ConvertOp, CopyOp
from .loop_nest import nest_of

__all__ = ["epilogue_splits", "minimum_bytes"]


def minimum_bytes(st, access) -> int:
    """Bytes of the distinct 128-byte segments the access's region covers: what a perfect store moves."""
    shape = [int(s) for s in st.frag.input_shape]
    rows = _row_segments(shape, access)
    if rows is not None:
        return rows * SEGMENT_BYTES * (st.repeat or 1)
    addr = np.full((1,) * len(shape), access.base, dtype=np.int64)
    for d, (extent, stride) in enumerate(zip(shape, access.strides)):     # broadcast, not a grid per axis
        addr = addr + (np.arange(extent, dtype=np.int64) * int(stride)).reshape([-1 if k == d else 1
                                                                                for k in range(len(shape))])
    seg = (addr * access.elem_bytes // SEGMENT_BYTES).reshape(-1)
    lo, span = int(seg.min()), int(seg.max()) - int(seg.min()) + 1
    if span > 4 * seg.size + 4096:
        return int(np.unique(seg).size) * SEGMENT_BYTES * (st.repeat or 1)
    hit = np.zeros(span, dtype=bool)            # distinct segments by marking, not by sorting
    hit[seg - lo] = True
    return int(np.count_nonzero(hit)) * SEGMENT_BYTES * (st.repeat or 1)


def _row_segments(shape: list, access) -> int | None:
    """The distinct segments of a region of contiguous rows counted in closed form, or None (then they are
    enumerated): after unit dims, one contiguous run of ``C`` elements, or ``R`` of them whose starts lie a whole
    number of segments apart (stride ``S``, ``S * bytes`` a multiple of 128). Every row then spans the same ``k``
    segments, shifted by ``S * bytes / 128``; when that shift is at least ``k`` no two rows share one."""
    dims = [(extent, int(stride)) for extent, stride in zip(shape, access.strides) if extent != 1]
    if not dims:
        dims = [(1, 1)]
    if len(dims) > 2 or dims[-1][1] != 1:
        return None
    eb, base, cols = access.elem_bytes, access.base, dims[-1][0]
    k = (base + cols - 1) * eb // SEGMENT_BYTES - base * eb // SEGMENT_BYTES + 1
    if len(dims) == 1:
        return k
    count, stride = dims[0]
    if stride <= 0 or stride * eb % SEGMENT_BYTES or stride * eb // SEGMENT_BYTES < k:
        return None
    return count * k


def epilogue_splits(engine, state) -> list:
    """Splits "convert F before the store" for every whole-fragment store to global memory that moves more
    than the minimum under the io-aware model (only that model prices memory traffic), for fragments whose
    layout was fixed before any search (an MMA accumulator, a user pin)."""
    from .splits import Split
    if getattr(engine.model, "name", None) != "io-aware":
        return []
    converted = {op.dst.buffer.name for op in engine.ops if isinstance(op, ConvertOp)}
    loops = {i: d.layout for i, d in state.loops.items()}
    out = []
    for op in engine.ops:
        if not isinstance(op, CopyOp) or not (op.src.buffer.is_fragment and op.dst.buffer.is_global):
            continue
        if op.conditions:
            continue    # no barrier under a (possibly thread-dependent) condition
        if not op.src.is_full or op.src.buffer.name in converted or op.src.buffer.name not in state.strict:
            continue    # a layout the free level chose already weighed this store; only fixed ones are staged
        st = op_statement(op, nest_of(op), state.layouts, loops, engine.graph)
        if st is None or st.unscorable is not None or len(st.accesses) != 1:
            continue
        cost = score_statement(st, engine.target)
        if not cost.scores:
            continue
        moved, least = cost.scores[0].bandwidth, minimum_bytes(st, st.accesses[0])
        if moved > least:
            out.append(Split(op.src.buffer.name, op.index, None,
                             f"stage {op.src.buffer.name} for {op.describe()}: its store moves {moved} B, "
                             f"{moved / least:.2f}x the minimum {least} B"))
    return out
