"""Keeping shared tiles that tensor-core and ``cp.async`` instructions address alive for the whole kernel.

apache-tvm 0.27 merges every dynamic shared allocation of a kernel into one buffer and lets tiles whose lifetimes
do not overlap share bytes (``s_tir.transform.MergeSharedMemoryAllocations``; static ones too under the
``tirx.merge_static_smem`` option). Its liveness analysis looks at loads and stores and at the buffer variable
named directly, but inside ``address_of(B[i])`` it only visits the index: a tile that ``ldmatrix``, ``cp.async``
or a wgmma descriptor reaches through ``address_of`` looks dead there. Flash attention's ``Q_shared`` is stored
once before the key loop and then read only by ``ldmatrix``, so the merge put ``K_shared`` (first stored in
the loop) on the same bytes, and the kernel multiplied K by K: a wrong result on every GPU, invisible to the
CPU check, which keeps each tile in its own array. A tile only ``cp.async`` writes was never seen at all, and
the merge stopped with an internal error.

So every shared tile that some ``address_of`` reaches is named directly (``tvm_access_ptr(t, B, 0, 0, 0)``,
which the merge analysis counts as a use of ``B`` and which generates no code) once right after the tiles are
allocated and once at the end of the block they are allocated in: it is live across the whole kernel and never
shares bytes. That is what the shared-memory budget (``pipeline_plan``) assumes already. Tiles reached only by
loads and stores keep TVM's reuse, whose analysis sees them. The CPU build drops the markers
(``drop_keep_alive``); passes that replace shared allocations (``software_pipeline``) re-mark afterwards.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from ..ir_utils import mapped, walk

__all__ = ["keep_shared_alive", "drop_keep_alive", "is_keep_alive"]

_SHARED = ("shared", "shared.dyn")


def is_keep_alive(stmt) -> bool:
    """A marker statement of this module: ``Evaluate(tvm_access_ptr(t, B, 0, 0, 0))``."""
    if not isinstance(stmt, tirx.Evaluate):
        return False
    call = stmt.value
    if not (isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op)
            and str(call.op.name) == "tirx.tvm_access_ptr" and len(call.args) == 5):
        return False
    return all(isinstance(a, tirx.IntImm) and int(a) == 0 for a in (call.args[2], call.args[3], call.args[4]))


def _marker(buf) -> tirx.Stmt:
    return tirx.Evaluate(tirx.call_intrin("handle", "tirx.tvm_access_ptr", tirx.type_annotation(str(buf.dtype)),
                                          buf, 0, 0, 0))


def _addressed(body) -> list:
    """Shared buffers some ``address_of`` reaches, in first-seen order."""
    found: list = []

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) == "tirx.address_of" and c.args \
                and isinstance(c.args[0], TensorLoad):
            buf = c.args[0].source
            if str(buf.scope()) in _SHARED and not any(buf.same_as(b) for b in found):
                found.append(buf)

    walk(body, [(tvm.ir.Call, on_call)])
    return found


def drop_keep_alive(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` without this module's markers."""
    def on_seq(s):
        kept = [x for x in s.seq if not is_keep_alive(x)]
        if len(kept) == len(s.seq):
            return s
        return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept) if kept else tirx.Evaluate(0)

    return func.with_body(mapped(func.body, [(tirx.SeqStmt, on_seq)]))


def keep_shared_alive(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every addressed shared tile named right after its allocation block and at its end (module
    docstring); earlier markers are replaced, so running it again changes nothing."""
    func = drop_keep_alive(func)
    addressed = _addressed(func.body)
    if not addressed:
        return func

    def on_seq(s):
        seq = list(s.seq)
        here = [k for k, x in enumerate(seq) if isinstance(x, tirx.AllocBuffer)
                and any(x.buffer.same_as(b) for b in addressed)]
        if not here:
            return s
        bufs = [seq[k].buffer for k in here]
        last = max(k for k, x in enumerate(seq) if isinstance(x, tirx.AllocBuffer))
        marks = [_marker(b) for b in bufs]
        return tirx.SeqStmt(seq[:last + 1] + marks + seq[last + 1:] + [_marker(b) for b in bufs])

    return func.with_body(mapped(func.body, [(tirx.SeqStmt, on_seq)]))


def merge_overlap(mod) -> str | None:
    """What TVM's CUDA build will do to the dynamic shared tiles of a lowered module, checked: its merge
    (``FlattenBuffer``, then ``MergeSharedMemoryAllocations``) must give every tile some ``address_of`` reaches
    bytes of its own, so the merged buffer holds at least all of them side by side. None when it does, else
    what is short. For tests and the fuzzer: the CPU check keeps every tile in its own array and cannot see an
    overlap."""
    from tvm import s_tir
    func = mod[list(mod.functions)[0]]
    sizes = {}
    for buf in _addressed(func.body):
        if str(buf.scope()) == "shared.dyn":
            n = 1
            for s in buf.shape:
                n *= int(s)
            sizes[str(buf.name)] = n * tvm.DataType(str(buf.dtype)).bits // 8
    if not sizes:
        return None
    merged = s_tir.transform.MergeSharedMemoryAllocations()(tirx.transform.FlattenBuffer()(mod))
    found: list = []
    walk(merged[list(merged.functions)[0]].body, [(tirx.AllocBuffer, lambda a: found.append(
        int(a.buffer.shape[0]) * tvm.DataType(str(a.buffer.dtype)).bits // 8)
        if str(a.buffer.scope()) == "shared.dyn" else None)])
    total = sum(found)
    if total < sum(sizes.values()):
        return (f"TVM's shared-memory merge gives {total} bytes to tiles that need {sum(sizes.values())} side by "
                f"side ({', '.join(f'{k} {v}' for k, v in sizes.items())}): two of them share bytes")
    return None
