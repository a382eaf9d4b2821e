"""Warp shuffles as the race check sees them: a synchronisation point of the lanes of one warp.

A ``shfl.sync`` waits until every lane its member mask names has reached it, so an access a lane makes before
the shuffle is ordered before an access another lane of the same warp makes after it (lane 0 storing a row's
reduction after the holders of the row read it, with butterfly shuffles between). The race check gives every
thread a count of the shuffles it has executed that synchronise its whole warp (member mask
``__activemask()`` or all lanes) and records it with every access: two accesses of lanes of one warp, in one
barrier interval, are ordered when their counts differ. That holds only for shuffles every lane of the warp
executes: after each one every lane that executed it compares its count with the counts of all lanes of its
warp, and a shuffle some lane skipped (under a condition that splits the warp, where ``__activemask()`` names
only the lanes inside) is taken back by all of them. Such a shuffle, and one whose constant mask names only
part of the warp, orders nothing here (conservative: on a GPU it orders the lanes it names).

Needs no import of ``race_check``: the instrumenter hands in what the statements refer to.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from ..ir_utils import int_value, walk

__all__ = ["WARP", "syncing_shuffle", "warp_of", "shuffle_count_init", "shuffle_count_step", "full_warp_check"]

WARP = 32
_SHUFFLE_PREFIX = "tirx.tvm_warp_shuffle"


def _op(call) -> str:
    return str(call.op.name) if isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) else ""


def _full_mask(mask, nthreads: int) -> bool:
    """Whether ``mask`` may name every lane of the warp: ``__activemask()`` (every lane that reaches the shuffle;
    ``full_warp_check`` takes back one that some lane skipped) or a constant with every existing lane's bit."""
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


def full_warp_check(count, counts, full, tid, nthreads: int) -> list:
    """After a shuffle (each statement a phase of its own on the CPU, so every lane that executed the shuffle has
    published its count): a shuffle some lane of the warp did not execute (under a condition that splits the
    warp; ``__activemask()`` then names only the lanes that did) is taken back, so it orders nothing here and the
    counts of a warp's lanes stay equal."""
    lane = tirx.Var("race_lane", "int32")
    other = warp_of(tid) * WARP + lane
    zero = [tirx.const(0, "int32")]
    missing = tirx.And(other < nthreads, tirx.BufferLoad(counts, [other]) != tirx.BufferLoad(count, zero))
    return [tirx.BufferStore(full, tirx.const(1, "int32"), zero),
            tirx.For(lane, 0, WARP, tirx.ForKind.SERIAL, tirx.BufferStore(
                full, tirx.Select(missing, tirx.const(0, "int32"), tirx.BufferLoad(full, zero)), zero)),
            tirx.BufferStore(count, tirx.BufferLoad(count, zero) - 1 + tirx.BufferLoad(full, zero), zero),
            tirx.BufferStore(counts, tirx.BufferLoad(count, zero), [tid])]
