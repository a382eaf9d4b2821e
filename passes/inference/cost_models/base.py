"""Cost-model protocol: an attempt's cost is (mem, regs), compared lexicographically."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence


@dataclass(frozen=True, order=True)
class AttemptCost:
    """Lower is better: memory traffic first, registers as the tie-break."""

    mem: int = 0
    regs: int = 0
    details: tuple = field(default=(), compare=False)

    def better_than(self, other: "AttemptCost") -> bool:
        """Strictly cheaper: lower ``(mem, regs)``, compared lexicographically."""
        return (self.mem, self.regs) < (other.mem, other.regs)


@dataclass
class ScoringContext:
    """What a model may look at besides the candidate layouts."""

    graph: Any                      # passes.inference.ops.OpGraph
    target: Any                     # tvm.target.Target
    loop_layouts: dict              # op index -> Fragment (loop layouts of the attempt)


class CostModel(Protocol):
    name: str

    def score(self, component: Sequence, candidate_layouts: dict, context: ScoringContext) -> AttemptCost:
        """Cost of one free-level attempt: ``component`` ops, ``candidate_layouts`` buffer name -> layout."""


def fragment_registers32(layouts: dict, bits_of) -> dict:
    """{fragment name: 32-bit registers per thread} for the fragments of static shape in ``layouts``
    (``bits_of(name)``: element width). Elements narrower than 32 bits share a register (two float16, four
    int8), as the code lowering emits packs them; this is the register figure every report prints
    (``tilelayout show``, ``explain``, the resource warnings and the register budget)."""
    import math
    from tilelayout.fragment import Fragment
    out = {}
    for name in sorted(layouts):
        lay = layouts[name]
        shape = lay.output_shape if isinstance(lay, Fragment) else None
        if shape is not None and all(isinstance(s, int) for s in shape):
            out[name] = math.ceil(math.prod(shape) * bits_of(name) / 32)
    return out


def register_count32(layouts: dict, bits_of) -> int:
    """32-bit registers per thread the fragments of ``layouts`` take (``bits_of(name)``: element width)."""
    return sum(fragment_registers32(layouts, bits_of).values())


def count_register_slots(candidate_layouts: dict) -> int:
    """Sum of per-thread slot counts over every fragment in the map (loop layouts are not counted)."""
    from tilelayout.fragment import Fragment
    total = 0
    for name in sorted(candidate_layouts):
        layout = candidate_layouts[name]
        if isinstance(layout, Fragment):
            slots = 1
            for s in layout.output_shape:
                if not isinstance(s, int):
                    raise ValueError(f"fragment {name!r} has a symbolic slot count {s}; registers cannot be counted")
                slots *= s
            total += slots
    return total
