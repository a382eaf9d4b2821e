"""Warp shuffles as the race check sees them: a synchronisation point of the lanes of one warp.

A ``shfl.sync`` waits until every lane its member mask names has reached it, so an access a lane makes before
the shuffle is ordered before an access another lane of the same warp makes after it (lane 0 storing a row's
reduction after the holders of the row read it, with butterfly shuffles between). The race check gives every
thread a count of the shuffles it has executed that synchronise its whole warp (member mask
``__activemask()`` or all lanes) and records it with every access: two accesses of lanes of one warp, in one
barrier interval, are ordered when their counts differ. That holds only if the lanes of a warp execute the
same shuffles, which the GPU requires and the check verifies: after each such shuffle every lane compares its
count with the counts of all lanes of its warp, and a difference is reported (``SHUFFLE_DIVERGENCE``).
A shuffle whose constant mask names only part of the warp orders nothing here (its lanes' counts would drift
apart from the others'), so accesses around it are checked as if it were not there.

Needs no import of ``race_check``: the instrumenter hands in what the statements refer to.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from ..ir_utils import int_value, walk

__all__ = ["SHUFFLE_DIVERGENCE", "WARP", "syncing_shuffle", "warp_of", "shuffle_count_init", "shuffle_count_step",
           "lockstep_check"]

#: the log code of a shuffle that the lanes of a warp did not all execute
SHUFFLE_DIVERGENCE = 8
WARP = 32
_SHUFFLE_PREFIX = "tirx.tvm_warp_shuffle"


def _op(call) -> str:
    return str(call.op.name) if isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) else ""


def _full_mask(mask, nthreads: int) -> bool:
    """Whether ``mask`` names every lane of the warp: ``__activemask()`` (every lane that reaches the shuffle,
    all of them when the lanes execute the same shuffles, which ``lockstep_check`` verifies) or a constant with
    every existing lane's bit."""
    if _op(mask) == "tirx.tvm_warp_activemask":
        return True
    m = int_value(mask)
    if m is None:
        return False
    lanes = min(nthreads, WARP)
    want = (1 << lanes) - 1
    return (m & 0xFFFFFFFF) & want == want


def syncing_shuffle(node, nthreads: int) -> bool:
    """Whether statement or expression ``node`` executes a shuffle that synchronises its whole warp."""
    hits = []
    walk(node, [(tvm.ir.Call, lambda c: hits.append(1) if _op(c).startswith(_SHUFFLE_PREFIX) and c.args
                 and _full_mask(c.args[0], nthreads) else None)])
    return bool(hits)


def warp_of(tid):
    """The warp of flat thread id ``tid`` (warps are 32 consecutive linear thread ids)."""
    return tirx.floordiv(tid, WARP)


def shuffle_count_init(count, counts, tid) -> list:
    """The start of a thread: its count is 0, published for the lanes of its warp."""
    zero = [tirx.const(0, "int32")]
    return [tirx.BufferStore(count, tirx.const(0, "int32"), zero), tirx.BufferStore(counts, tirx.const(0, "int32"), [tid])]


def shuffle_count_step(count, counts, tid) -> list:
    """The thread reaches a synchronising shuffle: its count grows by one, published for its warp's lanes."""
    zero = [tirx.const(0, "int32")]
    return [tirx.BufferStore(count, tirx.BufferLoad(count, zero) + 1, zero),
            tirx.BufferStore(counts, tirx.BufferLoad(count, zero), [tid])]


def lockstep_check(count, counts, tid, nthreads: int, report) -> tirx.Stmt:
    """After a shuffle (in a phase of its own on the CPU, so every lane has published its count): a lane of this
    warp whose count differs from this thread's did not execute the same shuffles. ``report(lane)`` logs it."""
    lane = tirx.Var("race_lane", "int32")
    other = warp_of(tid) * WARP + lane
    zero = [tirx.const(0, "int32")]
    differs = tirx.And(other < nthreads, tirx.BufferLoad(counts, [other]) != tirx.BufferLoad(count, zero))
    return tirx.For(lane, 0, WARP, tirx.ForKind.SERIAL, tirx.IfThenElse(differs, report(other), None))
