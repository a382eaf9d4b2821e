"""The TMA schedule of a pipelined loop that ``tma_plan`` marked ``mode = "tma"`` (sm_90a).

Reads the plan's TMA entries (one per copy: global parameter, box, swizzle, panels, region start) and never
re-derives them. For a loop ``for k in [lo, lo + n)`` with ``s`` stages:

- host, before the launch: one tensor map per copy (``tvm_stack_alloca("tensormap")`` +
  ``tensormap_encode_tiled``: the global's dimensions and byte strides, the box, the swizzle); TVM passes it to
  the kernel as a ``const __grid_constant__ CUtensorMap`` parameter;
- a shared ``uint64`` array of ``s`` mbarriers ("full" barriers, one per stage), initialised by thread 0 with an
  arrival count of 1, then ``fence.mbarrier_init``, a ``fence.proxy.async`` by every thread and a block barrier
  (when no statement of the loop writes shared memory through the generic proxy, the wgmmas' own proxy fence and
  the barrier after it are dropped from the loop: three block barriers per iteration become two);
- ``P(j)`` (iteration ``j``'s loads into stage ``q = (j - lo) % s``), by thread 0: ``mbarrier.arrive.expect_tx``
  of the stage's bytes on barrier ``q``, then one ``cp.async.bulk.tensor`` per panel of every tile, completing
  on barrier ``q``;
- the schedule::

      for p in 0 .. s-2:  [if p < n] P(lo + p)
      for k in [lo, lo + n):
          mbarrier wait(full[(k - lo) % s], parity ((k - lo) // s) % 2)   # stage k's bytes have landed
          __syncthreads()          # everyone finished C(k - 1): its stage may be refilled
          if k + s - 1 < lo + n: P(k + s - 1)
          C(k)

  Stage ``q`` is filled at its ``i``-th use by the ``i``-th phase of barrier ``q``, so the wait names parity
  ``i % 2``. Every load is waited for inside the loop: nothing is left in flight after it.
"""
from __future__ import annotations

import tvm
from tvm import sym, tirx

from tilelayout.errors import PipelineError
from tilelayout.expr import substitute

from ..ir_utils import under_guard, walk
from .lower_gemm import ptx_call
from .tma_plan import TMA_SWIZZLES

__all__ = ["tma_pipeline_loop", "TMA_LOAD"]

#: the PTX of one TMA load into this CTA's shared memory (the rank is filled in)
TMA_LOAD = "cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes"


def _ptr(buf, index):
    return tirx.address_of(tirx.BufferLoad(buf, [index]))


def _tensor_map(entry: dict, glob, label: str) -> tuple:
    """(tensor-map variable, host statements encoding it) for one copy of the plan."""
    from tvm.script import tirx as T
    shape = [int(s) for s in glob.shape]
    dtype = str(glob.dtype)
    ebytes = tvm.DataType(dtype).bits // 8
    rank = len(shape)
    dims = list(reversed(shape))
    strides, acc = [], ebytes
    for s in dims[:-1]:
        acc *= s
        strides.append(acc)
    box = [int(b) for b in entry["box"]]
    if len(box) != rank:
        raise PipelineError(f"{label}: the TMA plan of {entry['buffer']} has a box of rank {len(box)} for "
                            f"{glob.name} of rank {rank}")
    tmap = tirx.Var(f"{entry['buffer']}_tmap", T.handle("tensormap").ty)
    encode = tirx.op.tensormap_encode_tiled(
        tmap, glob.data, *dims, *strides, *box, *([1] * rank), descriptor_dtype=dtype, rank=rank, interleave=0,
        swizzle=TMA_SWIZZLES[int(entry["swizzle"])], l2_promotion=2, oob_fill=0)
    return tmap, [tirx.Bind(tmap, tirx.op.tvm_stack_alloca("tensormap", 1)), tirx.Evaluate(encode)]


def _call_name(stmt) -> str:
    c = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    return str(c.op.name) if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op) else ""


def _writes_shared(stmts: list) -> bool:
    """Whether any of ``stmts`` writes shared memory through the generic proxy (a store, or a call such as
    cp.async or stmatrix that names a shared destination)."""
    hits = []

    def on_store(st):
        if str(st.buffer.scope()).startswith("shared"):
            hits.append(st)

    def on_call(c):
        name = str(c.op.name) if isinstance(c.op, tvm.ir.Op) else ""
        if name.startswith("tirx.ptx.") and not name.startswith(("tirx.ptx.wgmma", "tirx.ptx.fence", "tirx.ptx.bar",
                                                                  "tirx.ptx.ldmatrix", "tirx.ptx.mma")):
            hits.append(c)
    for st in stmts:
        walk(st, [(tirx.BufferStore, on_store), (tvm.ir.Call, on_call)])
    return bool(hits)


def _without_proxy_fence(consumer: list) -> list:
    """``consumer`` without a wgmma's ``fence.proxy.async`` and the block barrier after it, when nothing in the
    iteration writes shared memory through the generic proxy: the tiles wgmma reads arrive by TMA (the async
    proxy) and the mbarrier wait already made them visible, and writes before the loop were fenced once before
    its first barrier, so the fence has nothing to order."""
    if _writes_shared(consumer):
        return consumer
    return _drop_fence_pairs(consumer)


def _drop_fence_pairs(stmts: list) -> list:
    out, k = [], 0
    consumer = []
    for st in stmts:        # the consumer comes regrouped: statements of one sequence, or sequences of them
        if isinstance(st, tirx.SeqStmt):
            inner = _drop_fence_pairs(list(st.seq))
            consumer.append(inner[0] if len(inner) == 1 else tirx.SeqStmt(inner))
        else:
            consumer.append(st)
    while k < len(consumer):
        st = consumer[k]
        if _call_name(st) == "tirx.ptx.fence_proxy" and k + 1 < len(consumer) and \
                _call_name(consumer[k + 1]) == "tirx.tvm_storage_sync":
            k += 2
            continue
        out.append(st)
        k += 1
    return out


def tma_pipeline_loop(loop, plan: dict, staged: dict, params: list, tx, producer: list, consumer: list, restage,
                      issue_cp=None):
    """(the loop's TMA schedule, host statements, report text); ``producer``: the lowered body's (guard,
    statement) pairs that write the TMA-loaded tiles (replaced by the TMA loads); ``consumer``: the other
    statements, in order; ``restage(stmt, stage)``: ``stmt`` reading stage ``stage`` of the staged tiles;
    ``issue_cp(j, stage)``: the cp.async copies of iteration ``j`` into ``stage`` of the tiles TMA does not load
    (None: there are none). With those, every issue also commits a cp.async group, each iteration first waits
    for its own group (``wait_group s - 2``) and the loop drains with ``wait_group 0``."""
    s = plan["stages"]
    label = f"loop {loop.loop_var.name} ({s} stages)"
    if tx is None:
        raise PipelineError(f"{label}: TMA needs the kernel's threadIdx.x")
    for guard, _ in producer:
        if guard is not None:
            raise PipelineError(f"{label}: a TMA-loaded copy sits under an if; the plan admits none")
    entries = plan["tma"]
    by_name = {str(p.name): p for p in params}
    host, maps = [], []
    for e in entries:
        glob = by_name.get(str(e["global"]))
        if glob is None:
            raise PipelineError(f"{label}: the TMA plan reads {e['global']}, which is not a parameter of the kernel")
        if str(e["buffer"]) not in staged:
            raise PipelineError(f"{label}: the TMA plan loads {e['buffer']}, which the loop does not multi-buffer")
        tmap, stmts = _tensor_map(e, glob, label)
        host += stmts
        maps.append(tmap)
    bar = tirx.decl_buffer([s], "uint64", name=f"{loop.loop_var.name}_full", scope="shared")
    total = sum(int(e["bytes"]) for e in entries)
    k, lo, n = loop.loop_var, loop.min, loop.extent
    ana = sym.Analyzer()

    def issue(j, stage, guard=None):
        body = [ptx_call("mbarrier.arrive.expect_tx.shared.b64", _ptr(bar, stage), tirx.const(total, "uint32"))]
        for e, tmap in zip(entries, maps):
            tile = staged[str(e["buffer"])]
            start = [ana.simplify(substitute(o, {k: j})) for o in e["start"]]
            rank = len(start)
            for p in range(int(e["panels"])):
                coords = list(reversed(start))
                coords[0] = coords[0] + p * int(e["panel"])
                coords = [tirx.Cast("int32", ana.simplify(c)) if str(c.ty) != "int32" else ana.simplify(c)
                          for c in (tirx.const(c, "int32") if isinstance(c, int) else c for c in coords)]
                dst = tile.base + stage * tile.stride + p * int(e["rows"]) * int(e["panel"])
                body.append(ptx_call(TMA_LOAD.format(rank=rank), _ptr(tile.buffer, dst), tirx.address_of(tmap), *coords,
                                     _ptr(bar, stage)))
        st = tirx.IfThenElse(tx == 0, tirx.SeqStmt(body), None)
        if issue_cp is not None:
            st = tirx.SeqStmt([st, issue_cp(j, stage)])
        return under_guard(st, guard, ana)

    sync = tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))
    init = [tirx.AllocBuffer(bar),
            tirx.IfThenElse(tx == 0, tirx.SeqStmt(
                [ptx_call("mbarrier.init.shared.b64", _ptr(bar, q), tirx.const(1, "uint32")) for q in range(s)]
                + [ptx_call("fence.mbarrier_init.release.cluster")]), None),
            # every thread's earlier generic-proxy writes of shared memory (a tile copied before the loop that a
            # wgmma in it reads) reach the async proxy: the loop's wgmmas need no fence of their own
            ptx_call("fence.proxy.async.shared::cta"),
            sync]
    commit = [ptx_call("cp.async.commit_group")] if issue_cp is not None else []
    prologue = []
    for p in range(s - 1):
        st = issue(lo + p, tirx.const(p, "int32"), tirx.const(p, "int32") < n)
        prologue += ([st] if st is not None else []) + commit
    if issue_cp is None:
        consumer = _without_proxy_fence(consumer)
    from tvm.backend.cuda.op import cuda_mbarrier_wait
    stage = tirx.floormod(k - lo, s)
    steady = [ptx_call("cp.async.wait_group", s - 2)] if issue_cp is not None else []
    steady += [tirx.Evaluate(cuda_mbarrier_wait(_ptr(bar, stage), tirx.floormod(tirx.floordiv(k - lo, s), 2))), sync]
    ahead = k + (s - 1)
    st = issue(ahead, tirx.floormod(ahead - lo, s), ahead < lo + n)
    steady += ([st] if st is not None else []) + commit
    steady += [restage(c, stage) for c in consumer]
    notes = {key: val for key, val in loop.annotations.items()}
    new_loop = tirx.For(k, lo, n, loop.kind, tirx.SeqStmt(steady), loop.thread_binding, notes, loop.step)
    out = tirx.SeqStmt(init + prologue + [new_loop] + ([ptx_call("cp.async.wait_group", 0)] if commit else []))
    loads = ", ".join(f"{e['buffer']} {int(e['panels'])} x {int(e['bytes']) // int(e['panels'])} B "
                      f"({int(e['swizzle'])}B swizzle)" for e in entries)
    others = [name for name in staged if name not in {str(e["buffer"]) for e in entries}]
    text = (f"TMA, {s} stages of {', '.join(staged)} (cp.async.bulk.tensor per stage: {loads}; mbarrier "
            f"expect_tx {total} B); one mbarrier wait + one barrier per iteration")
    if others:
        text += f"; cp.async for {', '.join(others)} (wait_group {s - 2} before the mbarrier wait)"
    return out, host, text
