"""What layout inference hands back: one ``Attempt`` per free-level try and the ``InferenceResult``.

Plain records, in a module of their own so that the modules reading them (the annotations reader, the conversion
planner, reports) need not import the inference engine that fills them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Attempt", "InferenceResult"]


@dataclass
class Attempt:
    """One free-level attempt: which root went first, what it cost, whether it won, or why it failed."""

    component: int
    root: int
    root_description: str
    mem: int | None = None
    regs: int | None = None
    chosen: bool = False
    error: str | None = None
    layouts: dict = field(default_factory=dict)      # buffer name -> Layout | Fragment (component buffers)
    loops: dict = field(default_factory=dict)        # op description -> loop Fragment
    details: tuple = ()                              # per-statement costs from the cost model
    conversions: list = field(default_factory=list)  # conversions of the attempt (see conversion_plan)
    note: str | None = None                          # e.g. over the register budget
    registers: int | None = None                     # 32-bit registers per thread of every fragment laid out so far

    def to_dict(self) -> dict:
        """JSON-ready form: cost, verdict, error and the attempt's layouts as dicts. ``regs`` is the cost
        model's register figure (register slots, any element width); ``registers`` the 32-bit registers per
        thread, counted as ``tilelayout show`` counts them."""
        out = {k: getattr(self, k) for k in ("component", "root", "root_description", "mem", "regs", "registers",
                                             "chosen", "error")}
        out["layouts"] = {k: v.to_dict() for k, v in self.layouts.items()}
        out["loops"] = {k: v.to_dict() for k, v in self.loops.items()}
        return out


@dataclass
class InferenceResult:
    """What ``infer_layouts`` decided for one kernel.

    ``buffers``: buffer name -> Layout (shared tiles) or Fragment (register fragments); ``loops``: loop key
    (``"i,j[64x128]"``, see docs/annotations.md) -> the Fragment of each user ``T.parallel`` nest;
    ``attempts``: every free-level ``Attempt`` (cost, verdict or failure); ``func``: the PrimFunc with every
    decision written as annotations; ``cost_model`` and ``target``: what the decisions were made for;
    ``loop_info`` / ``op_loops``: loop decisions with their guards, by loop key / by op number; ``graph``:
    the front end's op graph; ``register_peak``: the plan's register peak (where, what is live; also the function
attribute ``tilelayout.register_peak``). ``tl.get_layouts(func)`` rebuilds buffers and loops from the annotations."""

    buffers: dict                  # buffer name -> Layout | Fragment
    loops: dict                    # loop key -> Fragment (user parallel nests)
    attempts: list                 # list[Attempt]
    func: Any                      # annotated PrimFunc
    cost_model: str = ""
    target: Any = None
    loop_info: dict = field(default_factory=dict)    # loop key -> LoopDecision
    graph: Any = None
    op_loops: dict = field(default_factory=dict)     # op index -> LoopDecision (every loop-shaped op)
    gemm_plans: dict = field(default_factory=dict)   # op index -> GemmPlan (every gemm)
    conversions: list = field(default_factory=list)  # inserted conversions: dicts with src, dst, kind, cost, ...
    notes: list = field(default_factory=list)        # conflicts met and how they were resolved, in words
    register_peak: Any = None                        # register_liveness.RegisterPeak of the plan

    def summary(self) -> str:
        """One line per buffer and loop layout (``tilelayout show`` prints more)."""
        lines = [f"{name}: {lay!r}" for name, lay in self.buffers.items()]
        lines += [f"loop {key}: {lay!r}" for key, lay in self.loops.items()]
        return "\n".join(lines)
