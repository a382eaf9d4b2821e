"""Fragments read before any op writes them.

A register fragment starts as garbage. Reading one before anything wrote it is almost always a mistake,
most often TileLang's source-first argument order carried over: ``Tx.copy(A, frag)`` copies the
(unwritten) fragment *into* ``A``. Each such read is reported once per fragment with the op and a hint; by
default as a ``tl.UninitializedReadWarning``, and as a ``tl.UninitializedReadError`` in strict mode
(``tl.layout_config(strict=True)`` or the environment variable ``TILELAYOUT_STRICT=1``).

A plain store outside any op (``d[0] = x``, a fragment's floating write) writes its fragment for the ops after
it. Program order is the judge: an op inside a serial loop that reads a fragment only a later op of the same
loop writes reads garbage in the first iteration, so it is reported too. An op that reads a fragment at
other indices than it writes (a scan reading the element its previous serial iteration wrote) is not.
"""
from __future__ import annotations

import os

from tilelayout.errors import UninitializedReadError, UninitializedReadWarning, warn_user

from .ops import ConvertOp, CopyOp, ElementwiseOp, FillOp, GemmOp, OpGraph, ParallelOp, ReduceOp

__all__ = ["uninitialized_reads", "check_uninitialized_reads"]


def _writes_reads(op) -> tuple[list, list]:
    """(fragments written, fragments read before the op's own write) of one op."""
    if isinstance(op, (CopyOp, ConvertOp)):      # a conversion inference inserted writes the new version
        return [op.dst.buffer], [op.src.buffer]
    if isinstance(op, FillOp):
        return [op.dst.buffer], []
    if isinstance(op, ElementwiseOp):
        return [op.dst.buffer], [r.buffer for r in op.srcs]
    if isinstance(op, ReduceOp):
        return [op.dst.buffer], [op.src.buffer] + ([op.dst.buffer] if op.accum else [])
    if isinstance(op, GemmOp):
        reads = [op.a.buffer, op.b.buffer] + ([op.bias.buffer] if op.bias is not None and not op.clear else [])
        return [op.c.buffer], reads
    if isinstance(op, ParallelOp):
        written = [a.buffer for a in op.accesses if a.is_write]
        reads = []
        first = _first_events(op)
        for a in op.accesses:
            if not a.is_read or first.get(id(a.buffer.var)) == "write":
                continue           # the op writes the fragment before it reads it
            # a read the op itself may have produced (other indices of a buffer it writes) is loop-carried
            if a.is_write or not any(w is a.buffer for w in written):
                reads.append(a.buffer)
        return written, reads
    return [], []


def _first_events(op) -> dict:
    """{id(buffer var): "read" | "write"}: the first access of each buffer in the nest's evaluation order (a
    store's value is read before the store happens)."""
    from tilelayout.ir_walk import walk_typed
    from tvm import tirx
    from tvm.ir import TensorLoad
    first: dict = {}

    def note(var, kind):
        key = next((k for k, v in vars_.items() if v.same_as(var)), None)
        if key is None:
            key = len(vars_)
            vars_[key] = var
        first.setdefault(key, kind)

    vars_: dict = {}
    walk_typed(op.root.body, [
        (TensorLoad, lambda n: note(n.source, "read") if tirx.is_buffer_var(n.source) else None),
        (tirx.BufferStore, lambda n: note(n.buffer, "write")),
    ], order="post")
    out = {}
    for a in op.accesses:
        key = next((k for k, v in vars_.items() if v.same_as(a.buffer.var)), None)
        if key is not None:
            out[id(a.buffer.var)] = first[key]
    return out


def _hint(op, buf) -> str:
    if isinstance(op, CopyOp) and op.src.buffer is buf and not op.dst.buffer.is_fragment:
        return (f"; Tx.copy takes the destination first (TIRx order): to fill {buf.name} from {op.dst.buffer.name} "
                f"write Tx.copy({buf.name}[...], {op.dst.buffer.name}[...])")
    if isinstance(op, (ReduceOp, GemmOp)) and buf in _writes_reads(op)[0]:
        return f"; it accumulates into {buf.name}: clear it first (Tx.fill) or do not accumulate"
    return f"; write {buf.name} (Tx.fill / Tx.copy) before this op"


def uninitialized_reads(graph: OpGraph) -> list[str]:
    """One message per fragment read before any op writes it, in program order."""
    written: set = set()
    reported: set = set()
    out = []

    def group(buf):
        return tuple(id(b.var) for b in graph.alias_group(buf))

    floating_seen = 0
    for k, op in enumerate(graph.ops):
        # plain stores outside any op (``d[0] = ...``) that come before this op's statement write their fragment
        before = graph.registered_before[k][1] if k < len(graph.registered_before) else floating_seen
        for buf, access in graph.floating[floating_seen:before]:
            if access.is_write:
                written.add(group(buf))
        floating_seen = max(floating_seen, before)
        writes, reads = _writes_reads(op)
        for buf in reads:
            if not buf.is_fragment or group(buf) in written or group(buf) in reported:
                continue
            reported.add(group(buf))
            line = f" (line {op.line})" if op.line is not None else ""
            out.append(f"{op.describe()}{line} reads fragment {buf.name} before any op writes it{_hint(op, buf)}")
        for buf in writes:
            written.add(group(buf))
    return out


def _strict(strict: bool | None) -> bool:
    if strict is not None:
        return strict
    from .cost_models import _CONFIG
    configured = _CONFIG.get().get("strict")
    if configured is not None:
        return bool(configured)
    return os.environ.get("TILELAYOUT_STRICT", "") not in ("", "0")


def check_uninitialized_reads(graph: OpGraph, strict: bool | None = None) -> list[str]:
    """Warn (or raise, in strict mode) for every uninitialised fragment read; return the messages."""
    messages = uninitialized_reads(graph)
    if messages and _strict(strict):
        raise UninitializedReadError("; ".join(messages))
    for m in messages:
        warn_user(m, UninitializedReadWarning)
    return messages
