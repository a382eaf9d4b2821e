"""One block barrier where lowering steps put several with no memory access between them.

Several lowering steps end or start with ``__syncthreads`` of their own (stmatrix stores, a TMA store, the reuse
barrier before a tile that takes a dead tile's bytes), so two of them can meet: a staged sm_90a epilogue had
``__syncthreads(); fence.proxy.async; __syncthreads()``. Statements that touch no memory -- proxy fences, which
order only the executing thread's own earlier writes, and ``shared_liveness``'s markers, which generate no code
-- do not need a barrier on each side: every access before the first barrier of such a run is ordered before every
access after its last one by that last barrier alone. So a run of barriers, fences and markers keeps its fences
and markers in order and one barrier, at its end.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from ..ir_utils import mapped
from .shared_liveness import is_keep_alive

__all__ = ["merge_barriers"]

_FENCES = ("tirx.ptx.fence_proxy",)


def _call_name(stmt) -> str:
    c = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    return str(c.op.name) if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op) else ""


def _is_block_barrier(stmt) -> bool:
    if _call_name(stmt) != "tirx.tvm_storage_sync":
        return False
    args = stmt.value.args      # ("shared"[, False, -1]): the whole block, no barrier id
    whole = len(args) < 3 or (isinstance(args[2], tirx.IntImm) and int(args[2]) == -1)
    return isinstance(args[0], tvm.ir.StringImm) and str(args[0].value) == "shared" and whole


def _is_quiet(stmt) -> bool:
    """A statement that accesses no memory: a proxy fence or a liveness marker."""
    return _call_name(stmt) in _FENCES or is_keep_alive(stmt)


def _flat(stmts) -> list:
    out = []
    for s in stmts:
        out += _flat(s.seq) if isinstance(s, tirx.SeqStmt) else [s]
    return out


def _merged(seq: list) -> list:
    out, k = [], 0
    while k < len(seq):
        if not _is_block_barrier(seq[k]):
            out.append(seq[k])
            k += 1
            continue
        j, quiet, barriers = k, [], 0
        while j < len(seq) and (_is_block_barrier(seq[j]) or _is_quiet(seq[j])):
            if _is_block_barrier(seq[j]):
                barriers += 1
            else:
                quiet.append(seq[j])
            j += 1
        while quiet and _is_quiet(seq[j - 1]) and not _is_block_barrier(seq[j - 1]):
            j -= 1                      # quiet statements after the run's last barrier stay after it
            quiet.pop()
        last = seq[j - 1]
        out += quiet + [last] if barriers > 1 else seq[k:j]
        k = j
    return out


def merge_barriers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every run of block barriers separated only by fences and markers reduced to one barrier."""
    def on_seq(s):
        flat = _flat(s.seq)
        merged = _merged(flat)
        if len(merged) == len(flat):
            return s
        return merged[0] if len(merged) == 1 else tirx.SeqStmt(merged)

    return func.with_body(mapped(func.body, [(tirx.SeqStmt, on_seq)]))
