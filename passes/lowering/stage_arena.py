"""The staged tiles of a pipelined loop, and when they share one allocation (an arena).

``software_pipeline`` gives every pipelined shared tile ``s`` stages. After the loop those stages are dead, and a
tile first used after it (a gemm epilogue's ``C_s``) could live on their bytes. apache-tvm 0.27's merge of dynamic
shared memory (``MergeSharedMemoryAllocations``) reuses the bytes of a dead allocation for a later one, but gives
the later one the place of a single dead allocation only: a 32 KiB ``C_s`` after a loop staging ``A_s`` and
``B_s`` at 24 KiB each got bytes of its own (the 128x128 staged gemm took 81 KiB on sm_90a where 49 suffice).

So when a loop's staged tiles are dynamic shared tiles of one dtype, allocated next to each other, and a dynamic
tile first used after the loop is larger than each of them, the tiles become one allocation, named after its
members (``A_s_B_s``), each at a base offset that keeps its alignment; TVM's merge then hands the whole arena to the
later tile. Nothing else changes: every stage keeps its stride and alignment, so swizzles, TMA boxes and wgmma
descriptors address the same bytes relative to their tile.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx

from ..ir_utils import constant_numel, walk

__all__ = ["StagedTile", "share_arenas", "arena_record", "ARENAS_ATTR"]

#: function attribute: arena name -> [{"tile", "base", "stride"}] of its members (for tools reading the lowered
#: program: the CuTe oracle, reports), in the order they sit in the arena
ARENAS_ATTR = "tilelayout.stage_arenas"


@dataclass(frozen=True)
class StagedTile:
    """Where a pipelined tile's stages live: stage ``q`` of ``old`` is at ``buffer[base + q * stride + i]``."""
    buffer: tirx.Buffer
    old: tirx.Buffer
    shape: list
    stride: int
    base: int = 0


def _bytes(buf) -> int | None:
    n = constant_numel(buf)
    return None if n is None else n * tvm.DataType(str(buf.dtype)).bits // 8


def _parent_sequence(body, loop) -> list | None:
    """The statements of the sequence that holds ``loop`` directly."""
    found: list = []

    def on_seq(s):
        if any(x.same_as(loop) for x in s.seq):
            found.append(list(s.seq))
    walk(body, [(tirx.SeqStmt, on_seq)])
    return found[0] if found else None


def _names(stmt, buf) -> bool:
    hits: list = []
    walk(stmt, [(tirx.Var, lambda v: hits.append(1) if v.same_as(buf) else None)])
    return bool(hits)


def _later_tile_needs_arena(seq: list, loop, members: list) -> bool:
    """Whether a dynamic shared tile of ``seq`` that no statement before ``loop`` names is larger than every
    member (TVM's merge could then place it on no single one of them)."""
    at = next(k for k, x in enumerate(seq) if x.same_as(loop))
    largest = max(_bytes(m.buffer) for m in members)
    for x in seq:
        if not isinstance(x, tirx.AllocBuffer) or str(x.buffer.scope()) != "shared.dyn":
            continue
        buf = x.buffer
        if any(buf.same_as(m.old) for m in members):
            continue
        size = _bytes(buf)
        if size is None or size <= largest:
            continue
        if not any(_names(y, buf) for y in seq[:at] if not isinstance(y, tirx.AllocBuffer)):
            return True
    return False


def share_arenas(body, loops: list, plans: list, staged: dict) -> dict:
    """``staged`` (tile name -> ``StagedTile``) with the tiles of each loop that qualifies (module docstring) moved
    into one arena buffer; tiles pipelined by several loops keep their own allocations."""
    owners: dict = {}
    for plan in plans:
        for name in plan["buffers"]:
            owners[name] = owners.get(name, 0) + 1
    out = dict(staged)
    for loop, plan in zip(loops, plans):
        names = [str(n) for n in plan["buffers"]]
        members = [staged[n] for n in names if n in staged]
        if len(members) < 2 or len(members) != len(names) or any(owners[n] > 1 for n in names):
            continue
        if any(str(m.old.scope()) != "shared.dyn" or str(m.old.dtype) != str(members[0].old.dtype) for m in members):
            continue
        seq = _parent_sequence(body, loop)
        if seq is None or not all(any(isinstance(x, tirx.AllocBuffer) and x.buffer.same_as(m.old) for x in seq)
                                  for m in members):
            continue
        if not _later_tile_needs_arena(seq, loop, members):
            continue
        align = max(int(m.buffer.data_alignment) for m in members)
        ebytes = tvm.DataType(str(members[0].old.dtype)).bits // 8
        step = max(align // ebytes, 1)
        bases, total = [], 0
        for m in members:
            total = -(-total // step) * step
            bases.append(total)
            total += int(m.buffer.shape[0])
        arena = tirx.decl_buffer([total], str(members[0].old.dtype), name="_".join(names), scope="shared.dyn",
                                 data_alignment=align)
        for n, m, base in zip(names, members, bases):
            out[n] = StagedTile(arena, m.old, m.shape, m.stride, base)
    return out


def arena_record(staged: dict) -> dict:
    """``ARENAS_ATTR``'s value for ``staged``: the members of every arena, by base."""
    out: dict = {}
    for name, t in staged.items():
        if str(t.buffer.name) != name:
            out.setdefault(str(t.buffer.name), []).append({"tile": name, "base": t.base, "stride": t.stride})
    return {k: sorted(v, key=lambda e: e["base"]) for k, v in sorted(out.items())}
