"""Which tensor-core calls the serialised CPU program must emulate as collectives, and the dispatch to the
emulation of each (``emulate_mma`` for mma.sync and ldmatrix, ``emulate_stmatrix`` for stmatrix,
``emulate_wgmma`` for warpgroup MMAs).

``SerializeThreads`` asks ``is_collective`` of every call and hands the collective ones to
``emulate_collective``; see ``emulate_mma``'s docstring for the two-phase exchange they become.
"""
from __future__ import annotations

import re

from tvm import tirx

from .emulate_mma import LDMATRIX_OPS, MMA_OPS, _op_name, emulate_ldmatrix, emulate_mma_sync
from .emulate_stmatrix import STMATRIX_OPS, emulate_stmatrix
from .emulate_wgmma import emulate_wgmma
from .loop_partition import LoweringError

__all__ = ["is_collective", "emulate_collective", "COLLECTIVE_OPS"]

_WGMMA_MMA = re.compile(r"tirx\.ptx\.wgmma_(f16|bf16|f16_f16acc|tf32|fp8|fp8_f16acc)_(ss|rs)$")
_WGMMA_SYNC = ("tirx.ptx.wgmma_fence", "tirx.ptx.wgmma_commit_group", "tirx.ptx.wgmma_wait_group",
               "tirx.ptx.fence_proxy")
COLLECTIVE_OPS = MMA_OPS + LDMATRIX_OPS + STMATRIX_OPS


def is_collective(call) -> bool:
    """A tensor-core call that reads other lanes' registers (or orders the warpgroup's async MMAs)."""
    name = _op_name(call)
    return name in COLLECTIVE_OPS or bool(_WGMMA_MMA.match(name)) or name in _WGMMA_SYNC


def emulate_collective(call, phases) -> tirx.Stmt:
    """The phases (over all threads) that emulate one collective ``call`` (see ``emulate_mma``'s docstring)."""
    name = _op_name(call)
    if name in MMA_OPS:
        return emulate_mma_sync(call, phases)
    if name in LDMATRIX_OPS:
        return emulate_ldmatrix(call, phases)
    if name in STMATRIX_OPS:
        return emulate_stmatrix(call, phases)
    if name in _WGMMA_SYNC:
        return tirx.Evaluate(0)           # threads are serialised: every wgmma (and shared write) has completed
    if _WGMMA_MMA.match(name):
        return emulate_wgmma(call, phases)
    raise LoweringError(f"no CPU emulation for {name}")
