"""Lowering of gemms planned as tcgen05.mma (Blackwell, sm_100a): for now, a clear refusal.

Why: inference plans every gemm on sm_100a / sm_103a as tcgen05.mma with its accumulator in Tensor Memory
(``passes/inference/tcgen05_plan.py``) and gives the accumulator fragment the registers ``tcgen05.ld`` fills.
The instruction sequence (``tcgen05.alloc``, the descriptors, ``tcgen05.mma``, ``commit`` to an mbarrier,
``tcgen05.ld``) is not emitted yet. mma.sync would compute the same numbers on another layout, so lowering
such a plan with it would silently give up Blackwell's tensor cores: it is refused instead, naming the gemm and
its plan. The descriptors and a CPU emulation of the instructions exist already (``tcgen05_desc``,
``emulate_tcgen05``).
"""
from __future__ import annotations

from tilelayout.errors import Tcgen05LoweringError

__all__ = ["refuse_tcgen05"]


def refuse_tcgen05(op, plan, target) -> None:
    """Raise ``Tcgen05LoweringError`` for a gemm planned as tcgen05 (or on a tcgen05 target without a plan)."""
    from .from_inference import has_tcgen05
    if plan is not None and plan.instruction != "tcgen05":
        return
    if plan is None and not (has_tcgen05(target) and str(op.a.buffer.dtype) != "float64"):
        return
    arch = target.attrs.get("arch", "")
    what = f"planned as {plan.describe()}" if plan is not None else \
        "has no recorded gemm plan (inference would plan tcgen05.mma)"
    raise Tcgen05LoweringError(
        f"{op.describe()}: {what} for {arch}, but tcgen05 lowering is not available yet (tcgen05.alloc, mma, "
        f"commit and tcgen05.ld are not emitted); it is not lowered to mma.sync instead. Target sm_90a (wgmma) or "
        f"sm_80 (mma.sync) to lower this kernel")
