"""The io-aware model's CuTe statement scorer as a standalone function over one fragment.

A thin wrapper over ``passes/cost_models/statement_score.score_cute`` (the code the cost model runs),
so this view and the model cannot disagree: one fragment, one global access whose element address is
``base + sum(coord[d] * strides[d])`` (row-major strides of ``global_shape`` by default), element size
and direction -> ``CuteScore(vector, issue, bandwidth, segments, notes)`` or ``Unconvertible(reason)``.
Hardware geometry (lane width, warp size) comes from the target exactly as the model takes it for a
fragment <-> global copy. ``maint/oracle.py`` computes the same numbers by enumeration.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tilelayout.errors import TileLayoutError  # noqa: E402
from tilelayout.expr import row_major_strides  # noqa: E402
from tilelayout.passes.inference.cost_models.statement_score import (SEGMENT_BYTES, GlobalAccess,  # noqa: E402
                                                                     Unconvertible, address_layout,
                                                                     prepare_cute, score_cute)
from tilelayout.passes.hardware import max_vector_load_bits, warp_size  # noqa: E402

__all__ = ["CuteScore", "Unconvertible", "score_fragment", "row_major_strides"]


@dataclass(frozen=True)
class CuteScore:
    vector: int
    issue: int
    bandwidth: int
    segments: int
    notes: str = ""

    @property
    def numbers(self) -> tuple:
        return (self.vector, self.issue, self.bandwidth, self.segments)


def score_fragment(frag, global_shape, elem_bytes: int, is_store: bool, target=None, strides=None,
                   base: int = 0) -> CuteScore | Unconvertible:
    """Score ``frag`` as one fragment <-> global statement (a load, or a store when ``is_store``)."""
    if strides is None:
        if global_shape is None or len(global_shape) != frag.input_dim:
            raise ValueError(f"global shape {global_shape} does not match the rank {frag.input_dim} of {frag!r}")
        strides = row_major_strides(global_shape)
    access = GlobalAccess("global", tuple(int(s) for s in strides), int(base), int(elem_bytes), bool(is_store))
    bits, warp = max_vector_load_bits(target, global_only=True), warp_size(target)
    try:
        prep = prepare_cute(frag, [access])
        if isinstance(prep, Unconvertible):
            return prep
        scores = score_cute(frag, [access], 1, bits, warp, SEGMENT_BYTES)
    except TileLayoutError as err:
        return Unconvertible(f"{type(err).__name__}: {err}")
    if isinstance(scores, Unconvertible):
        return scores
    (score,) = scores
    slot_modes, thread_modes, _ = prep.addresses[0]
    addr = address_layout(frag, prep.inverse, access.strides, prep.slots, prep.threads)
    notes = f"cell->address {addr}; slot modes {slot_modes}; thread modes {thread_modes}"
    return CuteScore(score.vector, score.issue, score.bandwidth, score.segments, notes)
