"""register-count: TileLang's default model, counting only what is live: the attempt whose register peak
(the most register slots live at one program point, ``register_liveness``) is lowest wins. TileLang sums every
fragment; the sum is the same figure for a kernel whose fragments are all live at once."""
from __future__ import annotations

from ..register_liveness import peak_of, program_points, slot_weights
from .base import AttemptCost, ScoringContext, count_register_slots


class RegisterCountModel:
    name = "register-count"

    def score(self, component, candidate_layouts: dict, context: ScoringContext) -> AttemptCost:
        graph = getattr(context, "graph", None)
        if graph is None or not getattr(graph, "ops", None):
            return AttemptCost(mem=0, regs=count_register_slots(candidate_layouts))
        return AttemptCost(mem=0, regs=peak_of(program_points(graph), slot_weights(candidate_layouts))[0])
