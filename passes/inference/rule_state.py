"""What a per-op inference rule may read and change: the state it is handed, declared.

The engine (``layout_inference._State``) is the one implementation; declaring the interface here keeps
the rules honest about what they depend on (facts of the kernel, the layouts and loop decisions made so
far, one way to change a layout) and lets a reader see the whole contract without reading the engine.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

__all__ = ["RuleState"]


@runtime_checkable
class RuleState(Protocol):
    """The state per-op rules (``op_rules``, ``fragment_rules``) work on during one inference attempt."""

    #: buffer name -> Layout | Fragment decided so far (read-only for rules: change through ``propose``)
    layouts: dict
    #: op index -> LoopDecision decided so far for loop-shaped ops
    loops: dict
    #: names of buffers whose layout is a strict-level fact (pinned, or demanded by an instruction)
    strict: set

    @property
    def threads(self) -> int:
        """Threads that run the op being inferred: the extent of ``thread_range``."""

    @property
    def thread_range(self) -> tuple:
        """(min, extent) of the threads that run the op being inferred: the whole block unless the op sits
        under a condition on the thread index (``if tx < 64``)."""

    @property
    def block_threads(self) -> int:
        """Threads the kernel launches (``threadIdx.x`` extent, linearised)."""

    @property
    def target(self) -> Any:
        """The normalised ``tvm.target.Target``."""

    @property
    def thread_name(self) -> str:
        """Name of the thread variable, for messages and predicates."""

    def layout(self, buf) -> Any:
        """The layout decided for ``buf`` (a front-end BufferInfo), or None."""

    def setter(self, buf) -> str:
        """How ``buf`` got its layout, for messages (an op's description or "a pinned layout")."""

    def loop(self, nest) -> Any:
        """The LoopDecision of a loop-shaped op, or None."""

    def set_loop(self, nest, decision) -> None:
        """Record the LoopDecision of a loop-shaped op."""

    def pinned_loop(self, nest) -> Any:
        """A loop layout the user pinned on this nest, or None."""

    def note(self, text: str) -> None:
        """Add a line to the attempt's explanation."""

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()`` cached under ``key`` across attempts (a raised search error is cached too)."""

    def gemm_plan(self, op) -> Any:
        """The ``gemm_plan.GemmPlan`` decided for gemm ``op`` before the levels run (instruction, shape, warps)."""

    def propose(self, buf, layout, op, level: int) -> None:
        """The one way a rule changes a buffer's layout: set it, keep it, upgrade it to a superset of
        owners, merge two swizzles, or raise LayoutConflictError naming both demands."""
