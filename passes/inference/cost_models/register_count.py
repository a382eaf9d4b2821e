"""register-count: TileLang's default model; the attempt with the fewest register slots wins."""
from __future__ import annotations

from .base import AttemptCost, ScoringContext, count_register_slots


class RegisterCountModel:
    name = "register-count"

    def score(self, component, candidate_layouts: dict, context: ScoringContext) -> AttemptCost:
        return AttemptCost(mem=0, regs=count_register_slots(candidate_layouts))
