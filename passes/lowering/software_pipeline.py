"""Software pipelining of the loops ``pipeline_plan`` marked: multi-buffered tiles and ``cp.async`` copies.

Runs after vectorisation, on the per-thread program, and reads only the ``tilelayout.pipeline`` decision. For
a loop ``for k in [lo, lo + n)`` with ``s`` stages and pipelined tiles ``T``:

- every tile of ``T`` becomes ``T[s * stride]``, stage-major: stage ``q`` holds the tile at ``q * stride`` in
  the layout's physical order (the layout is the same in every stage); ``stride`` keeps each stage on the
  tile's 1024-byte alignment, so a swizzle keeps its phase.
- the body splits into the producer (the lowered global -> shared copies of ``T``) and the consumer (the rest,
  in its order). Producer stores become ``cp.async`` of 16, 8 or 4 bytes where both addresses are provably
  contiguous and aligned for that size (the widest that holds); what is left stays a synchronous store, which
  is still correct in this schedule (below).
- the schedule, with ``P(j)`` the producer of iteration ``j`` writing stage ``(j - lo) % s`` and ``C(k)`` the
  consumer reading stage ``(k - lo) % s``::

      for p in 0 .. s-2:  [if p < n] P(lo + p); commit_group           # prologue: s - 1 groups
      for k in [lo, lo + n):
          wait_group(s - 2)          # this thread's copies of iteration k have landed ...
          __syncthreads()            # ... everyone's are visible, and everyone finished C(k - 1)
          if k + s - 1 < lo + n: P(k + s - 1)    # refills the stage C(k - 1) read
          commit_group               # one group per iteration, empty at the tail: counts stay uniform
          C(k)
      wait_group(0)                  # drain (only empty groups remain)

  Before ``wait_group`` in iteration ``k`` this thread committed ``s - 1 + k - lo`` groups; allowing ``s - 2``
  pending means the first ``k - lo + 1`` are complete, the last of which is iteration ``k``'s. The single
  barrier serves both directions: the read-after-write of stage ``k`` and the write-after-read of the stage
  the next issue overwrites (it was last read by ``C(k - 1)``, which every thread has left).
"""
from __future__ import annotations

import tvm
from tvm import sym, tirx
from tvm.ir import Range, TensorLoad

from tilelayout.errors import PipelineError
from tilelayout.expr import mentions, row_major_offset, substitute

from ..ir_utils import int_value, mapped, mutate, prim_func_pass, under_guard, walk
from .lower_gemm import ptx_call
from .pipeline_plan import PIPELINE_KEY, PIPELINE_REPORT_ATTR, read_plan, stage_stride
from .shared_liveness import drop_keep_alive, keep_shared_alive
from .stage_arena import ARENAS_ATTR, StagedTile, arena_record, share_arenas

__all__ = ["SoftwarePipeline", "software_pipeline", "CP_ASYNC_SIZES"]

#: byte sizes PTX cp.async copies, widest first
CP_ASYNC_SIZES = (16, 8, 4)


def SoftwarePipeline():
    """Pass: build the schedule ``PlanPipelines`` recorded (run after LoopVectorize)."""
    return prim_func_pass("tilelayout.SoftwarePipeline", software_pipeline)


def software_pipeline(func):
    """``func`` with every ``cp.async``-mode pipelined loop rewritten (module docstring); the shared-tile
    markers of ``shared_liveness`` are renewed, since the staged tiles replace the allocations they name."""
    return keep_shared_alive(_software_pipeline(drop_keep_alive(func)))


def _software_pipeline(func):
    loops = []
    walk(func.body, [(tirx.For, lambda f: loops.append(f) if f.annotations is not None and
                      PIPELINE_KEY in f.annotations else None)])
    if not loops:
        return func
    params = [p for p in func.params if tirx.is_buffer_var(p)]
    views = _param_views(func, params)
    allocs = {}
    walk(func.body, [(tirx.AllocBuffer, lambda a: allocs.setdefault(str(a.buffer.name), []).append(a.buffer))])
    thread_bounds = _thread_bounds(func)
    reports, staged = {}, {}
    for loop in loops:
        plan = read_plan(loop)
        label = plan["loop"]
        if plan["mode"] not in ("cp.async", "tma"):
            reports[label] = f"not pipelined: {plan['note']}"
            continue
        for name in plan["buffers"]:
            found = allocs.get(name, [])
            if len(found) != 1:
                raise PipelineError(f"buffer {name}: {label} pipelines it, but the lowered kernel allocates "
                                    f"{len(found)} shared buffers of that name")
            old = found[0]
            if old.scope() not in ("shared", "shared.dyn"):
                raise PipelineError(f"buffer {name}: {label} pipelines it, but it lowered to scope {old.scope()}")
            if name not in staged:
                staged[name] = _staged_buffer(old, plan["stages"])
    active = [loop for loop in loops if read_plan(loop)["mode"] in ("cp.async", "tma")]
    staged = share_arenas(func.body, active, [read_plan(loop) for loop in active], staged)
    out_body, host = func.body, []
    for loop in loops:
        plan = read_plan(loop)
        if plan["mode"] not in ("cp.async", "tma"):
            continue
        bufs = {name: staged[name] for name in plan["buffers"]}
        if plan["mode"] == "tma":       # TMA loads and mbarriers instead of cp.async (tma.py)
            new, prelude, text = _tma_loop(func, loop, plan, bufs, params, thread_bounds, views)
            host += prelude
        else:
            new, text = _pipeline_loop(loop, plan, bufs, params, thread_bounds, views)
        reports[plan["loop"]] = text
        out_body = mutate(out_body, [(tirx.For, lambda f, m, old=loop, new=new: new if f.same_as(old)
                                      else m.default_mutate(f))])
    placed: list = []

    def on_alloc(a):
        name = str(a.buffer.name)
        if name not in staged or a.buffer.same_as(staged[name].buffer):
            return a
        new = staged[name].buffer
        if any(new.same_as(b) for b in placed):
            return tirx.Evaluate(0)         # a later member of an arena: the first member's allocation holds it
        placed.append(new)
        return tirx.AllocBuffer(new, a.annotations)

    out_body = mapped(out_body, [(tirx.AllocBuffer, on_alloc)])
    leftover = []
    old_vars = [allocs[n][0] for n in staged]
    walk(out_body, [(tirx.BufferStore, lambda s: leftover.append(s.buffer.name)
                     if any(s.buffer.same_as(v) for v in old_vars) else None),
                    (TensorLoad, lambda e: leftover.append(e.source.name)
                     if any(e.source.same_as(v) for v in old_vars) else None)])
    if leftover:
        raise PipelineError(f"buffer {leftover[0]}: pipelined, but still used outside its pipelined loop")
    out = func.with_body(tirx.SeqStmt(host + [out_body]) if host else out_body)
    arenas = arena_record(staged)
    if arenas:
        out = out.with_attr(ARENAS_ATTR, arenas)
    return out.with_attr(PIPELINE_REPORT_ATTR, reports)


def _tma_loop(func, loop, plan: dict, staged: dict, params: list, thread_bounds: dict, views: list):
    """``tma.tma_pipeline_loop`` on the loop body split into the copies TMA replaces, the copies that stay cp.async
    (tiles the plan has no TMA entry for) and the rest."""
    from ..ir_utils import thread_launch
    from .tma import tma_pipeline_loop
    olds = [t.old for t in staged.values()]
    by_tma = {str(e["buffer"]) for e in plan["tma"]}
    producer, consumer, cp_async = [], [], []
    for guard, it in _guarded_items(loop.body, olds):
        writes = []
        walk(it, [(tirx.BufferStore, lambda st: writes.append(st.buffer))])
        mine = [w for w in writes if any(w.same_as(o) for o in olds)]
        if mine and len(mine) != len(writes):
            raise PipelineError(f"loop {loop.loop_var.name}: a lowered statement writes both a pipelined tile "
                                f"({mine[0].name}) and another buffer")
        if not mine:
            consumer.append((guard, it))
        elif all(str(w.name) in by_tma for w in mine):
            producer.append((guard, it))
        elif any(str(w.name) in by_tma for w in mine):
            raise PipelineError(f"loop {loop.loop_var.name}: a lowered statement writes a TMA-loaded tile and a "
                                f"cp.async one")
        else:
            cp_async.append((guard, it))
    issue_cp = None
    if cp_async:
        # the copies TMA does not take: cp.async, issued with the TMA loads of the same iteration (one group each)
        readable = _early_readable(loop, params, views)
        for guard, it in cp_async:
            bad = [b for b in _loads(it) if not any(b.same_as(p) for p in readable)]
            if bad or isinstance(it, (tirx.AllocBuffer, tirx.Bind)):
                raise PipelineError(f"loop {loop.loop_var.name}: the copy into a pipelined tile reads "
                                    f"{bad[0].name if bad else 'a value the loop computes'} ahead of its iteration")
        sizes: dict = {}
        bounds = {**thread_bounds, loop.loop_var: (loop.min, loop.extent)}
        cp_stmts = _regroup([(g, _async_copies(it, olds, bounds, sizes)) for g, it in cp_async])
        cp_body = tirx.SeqStmt(cp_stmts) if len(cp_stmts) > 1 else cp_stmts[0]

        def issue_cp(j, stage):
            return _restage(substitute(_fresh_loops(cp_body), {loop.loop_var: j}), staged, stage)
    if consumer and _is_block_barrier(consumer[0][1]):
        consumer = consumer[1:]     # the schedule's barrier right before C(k) already orders what this one did
    return tma_pipeline_loop(loop, plan, staged, params, thread_launch(func)[0], producer, _regroup(consumer),
                             lambda stmt, stage: _restage(stmt, staged, stage), issue_cp)


def _param_views(func, params: list) -> list:
    """Buffers declared over a parameter's data (``T.decl_buffer(shape, dtype, data=X.data)``)."""
    out = []

    def on_decl(d):
        data = d.data
        if isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op) and \
                str(data.op.name) == "tirx.buffer_data" and any(data.args[0].same_as(p) for p in params):
            out.append(d.buffer)
    walk(func.body, [(tirx.DeclBuffer, on_decl)])
    return out


def _thread_bounds(func) -> dict:
    bounds = {}

    def on_attr(n):
        if n.attr_key == "thread_extent" and isinstance(n.node, tirx.IterVar):
            ext = int_value(n.value)
            if ext is not None:
                bounds[n.node.var] = (0, ext)

    walk(func.body, [(tirx.AttrStmt, on_attr)])
    return bounds


def _staged_buffer(old, stages: int) -> StagedTile:
    """The tile's own staged buffer ``[stages * stride]``."""
    shape = [int_value(s) for s in old.shape]
    if any(s is None for s in shape):
        raise PipelineError(f"buffer {old.name}: a pipelined shared tile needs a constant shape, got {list(old.shape)}")
    n = 1
    for s in shape:
        n *= s
    align = int(old.data_alignment) if int(old.data_alignment) > 0 else 1024
    stride = stage_stride(n, str(old.dtype), max(align, 16))
    # one flat dimension, stage-major: TVM's buffer compaction may trim the unused tail of the last stage but
    # never a stage's padding, so every stage keeps its alignment (a 2-D [stages, stride] could lose it)
    new = tirx.decl_buffer([stages * stride], old.dtype, name=str(old.name), scope=old.scope(),
                           data_alignment=max(align, 16))
    return StagedTile(new, old, shape, stride)


def _items(body) -> list:
    if isinstance(body, tirx.SeqStmt):
        out = []
        for s in body.seq:
            out.extend(_items(s))
        return out
    return [body]


def _restage(stmt, staged: dict, stage):
    """Accesses of the pipelined tiles in ``stmt`` go to stage ``stage`` (element ``stage * stride + i`` of the
    flat staged buffer; a vector (Ramp) last index, as cp.async addresses carry, stays a vector)."""
    def find(buf):
        return next((t for t in staged.values() if buf.same_as(t.old)), None)

    def index(indices, tile: StagedTile):
        last = indices[-1]
        start = stage * tile.stride + tile.base if tile.base else stage * tile.stride
        if isinstance(last, tirx.Ramp):
            base = row_major_offset(list(indices[:-1]) + [last.base], tile.shape) + start
            return [tirx.Ramp(base, last.stride, last.lanes)]
        return [row_major_offset(indices, tile.shape) + start]

    def on_store(s):
        tile = find(s.buffer)
        return s if tile is None else tirx.BufferStore(tile.buffer, s.value, index(s.indices, tile))

    def on_load(e):
        tile = find(e.source)
        return e if tile is None else tirx.BufferLoad(tile.buffer, index(e.indices, tile))

    return mapped(stmt, [(tirx.BufferStore, on_store), (TensorLoad, on_load)])


def _fresh_loops(stmt):
    """A copy of ``stmt`` with fresh loop variables (the producer is emitted several times)."""
    def on_for(f):
        v = tirx.Var(f.loop_var.name, f.loop_var.ty)
        return tirx.For(v, f.min, f.extent, f.kind, substitute(f.body, {f.loop_var: v}), f.thread_binding,
                        f.annotations, f.step)
    return mapped(stmt, [(tirx.For, on_for)])


def _guarded_items(body, olds: list, guard=None) -> list:
    """(guard, statement) for each statement of the loop body; the statements of an ``if`` without ``else``
    that writes a pipelined tile come out one by one under its condition (the plan checked it is uniform)."""
    out = []
    for it in _items(body):
        if isinstance(it, tirx.IfThenElse) and it.else_case is None and _stores_any(it, olds):
            cond = it.condition if guard is None else tirx.And(guard, it.condition)
            out.extend(_guarded_items(it.then_case, olds, cond))
        else:
            out.append((guard, it))
    return out


def _stores_any(stmt, bufs: list) -> bool:
    hits = []
    walk(stmt, [(tirx.BufferStore, lambda st: hits.append(1) if any(st.buffer.same_as(b) for b in bufs) else None)])
    return bool(hits)


def _loads(node) -> list:
    out = []
    walk(node, [(TensorLoad, lambda e: out.append(e.source))])
    return out


def _early_readable(loop, params: list, views: list) -> list:
    """Buffers whose value the producer may read ahead of its iteration: global parameters and views of them
    (``T.decl_buffer(..., data=X.data)``), and registers the loop never stores to (an offset computed before
    the loop, such as a grouped gemm's group index)."""
    stored = []
    walk(loop.body, [(tirx.BufferStore, lambda st: stored.append(st.buffer))])
    local: list = []

    def on_load(e):
        b = e.source
        if str(b.scope()).startswith("local") and not any(b.same_as(x) for x in stored):
            local.append(b)
    walk(loop.body, [(TensorLoad, on_load)])
    return list(params) + list(views) + local


def _wrap(guard, stmt):
    return stmt if guard is None else tirx.IfThenElse(guard, stmt, None)


def _regroup(items: list) -> list:
    """Consecutive statements under the same condition back under one ``if``."""
    out, run, cur = [], [], None
    for guard, st in items:
        if run and guard is not cur:
            out.append(_wrap(cur, run[0] if len(run) == 1 else tirx.SeqStmt(run)))
            run = []
        cur = guard
        run.append(st)
    if run:
        out.append(_wrap(cur, run[0] if len(run) == 1 else tirx.SeqStmt(run)))
    return out


def _pipeline_loop(loop, plan: dict, staged: dict, params: list, thread_bounds: dict, views: list = ()):
    s = plan["stages"]
    label = f"loop {loop.loop_var.name} ({s} stages)"
    olds = [t.old for t in staged.values()]
    items = _guarded_items(loop.body, olds)
    producer, consumer = [], []
    for guard, it in items:
        writes = []
        walk(it, [(tirx.BufferStore, lambda st: writes.append(st.buffer))])
        mine = [w for w in writes if any(w.same_as(o) for o in olds)]
        (producer if mine else consumer).append((guard, it))
        if mine and len(mine) != len(writes):
            raise PipelineError(f"{label}: a lowered statement writes both a pipelined tile ({mine[0].name}) and "
                                f"another buffer; only plain global -> shared copies can be issued early")
    if not producer:
        raise PipelineError(f"{label}: the lowered body has no copy into {', '.join(staged)}")
    bound = []
    for _, it in consumer:
        walk(it, [(tirx.Bind, lambda b: bound.append(b.var)), (tirx.For, lambda f: bound.append(f.loop_var))])
    readable = _early_readable(loop, params, views)
    for guard, it in producer:
        bad = [b for b in _loads(it) + (_loads(guard) if guard is not None else [])
               if not any(b.same_as(p) for p in readable)]
        if bad:
            raise PipelineError(f"{label}: the copy into a pipelined tile reads {bad[0].name}, which is neither a "
                                f"global parameter nor a register the loop leaves unchanged; only such values can "
                                f"be read ahead of their iteration")
        if isinstance(it, (tirx.AllocBuffer, tirx.Bind)) or mentions(it, bound) or \
                (guard is not None and mentions(guard, bound)):
            raise PipelineError(f"{label}: the copy into a pipelined tile depends on a value the loop body computes")

    if consumer and _is_block_barrier(consumer[0][1]):
        consumer = consumer[1:]     # the schedule's barrier right before C(k) already orders what this one did
    sizes: dict = {}
    producer = _regroup([(g, _async_copies(it, olds, {**thread_bounds, loop.loop_var: (loop.min, loop.extent)},
                                           sizes)) for g, it in producer])
    consumer = _regroup(consumer)
    k, lo, n = loop.loop_var, loop.min, loop.extent
    ana = sym.Analyzer()

    def issue(j, stage, guard=None):
        body = substitute(_fresh_loops(tirx.SeqStmt(producer) if len(producer) > 1 else producer[0]), {k: j})
        return under_guard(_restage(body, staged, stage), guard, ana)

    commit = ptx_call("cp.async.commit_group")
    if s == 1:
        return _one_stage(loop, issue(k, tirx.const(0, "int32")), consumer, commit, staged, sizes)
    prologue = []
    for p in range(s - 1):
        st = issue(lo + p, tirx.const(p, "int32"), tirx.const(p, "int32") < n)
        prologue += ([st] if st is not None else []) + [commit]
    ahead = k + (s - 1)
    steady = [ptx_call("cp.async.wait_group", s - 2), tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))]
    st = issue(ahead, tirx.floormod(ahead - lo, s), ahead < lo + n)
    steady += ([st] if st is not None else []) + [commit]
    steady += [_restage(c, staged, tirx.floormod(k - lo, s)) for c in consumer]
    notes = {key: val for key, val in loop.annotations.items()}
    new_loop = tirx.For(k, lo, n, loop.kind, tirx.SeqStmt(steady), loop.thread_binding, notes, loop.step)
    out = tirx.SeqStmt(prologue + [new_loop, ptx_call("cp.async.wait_group", 0)])
    sync = sizes.pop("sync", 0)
    copies = ", ".join(f"{b} B x{c}" for b, c in sorted(sizes.items(), reverse=True)) or "none"
    text = (f"cp.async, {s} stages of {', '.join(staged)} (cp.async statements: {copies}); "
            f"wait_group {s - 2} + one barrier per iteration")
    if sync:
        text += (f"; {sync} copy statement(s) stay synchronous (a conversion, a predicate varying inside the chunk, or "
                 f"no provably aligned 4-byte chunk)")
    return out, text


def _one_stage(loop, producer, consumer: list, commit, staged: dict, sizes: dict):
    """The schedule of one stage: ``__syncthreads(); P(k); commit_group; wait_group(0); __syncthreads(); C(k)``.
    The first barrier is the write-after-read one (every thread has left ``C(k - 1)``, which read the tile), the
    second makes every thread's landed copies visible; a synchronous copy needs the same two."""
    sync = tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))
    body = [sync] + ([producer] if producer is not None else []) + [commit, ptx_call("cp.async.wait_group", 0),
                                                                    tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))]
    body += [_restage(c, staged, tirx.const(0, "int32")) for c in consumer]
    notes = {key: val for key, val in loop.annotations.items()}
    new_loop = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, tirx.SeqStmt(body), loop.thread_binding,
                        notes, loop.step)
    stays = sizes.pop("sync", 0)
    copies = ", ".join(f"{b} B x{c}" for b, c in sorted(sizes.items(), reverse=True)) or "none"
    text = (f"cp.async, 1 stage of {', '.join(staged)} (cp.async statements: {copies}); issued and waited for "
            f"(wait_group 0) within each iteration, two barriers per iteration")
    if stays:
        text += f"; {stays} copy statement(s) stay synchronous"
    return new_loop, text


def _is_block_barrier(stmt) -> bool:
    return isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call) and \
        isinstance(stmt.value.op, tvm.ir.Op) and str(stmt.value.op.name) == "tirx.tvm_storage_sync"


def _async_copies(stmt, olds: list, bounds: dict, sizes: dict):
    """``stmt`` (a lowered copy into pipelined tiles) with its stores issued as ``cp.async`` where provable."""
    def rewrite(node, scope: dict):
        if isinstance(node, tirx.For):
            inner = dict(scope)
            if int_value(node.min) is not None and int_value(node.extent) is not None:
                inner[node.loop_var] = (int_value(node.min), int_value(node.extent))
            if node.kind == tirx.ForKind.VECTORIZED:
                if isinstance(node.body, tirx.BufferStore):
                    done = _as_cp_async(node.body, node.loop_var, int_value(node.extent), inner, olds, sizes)
                    if done is not None:
                        return done
                else:       # a guard inside the vector: the lanes stay one synchronous vector store
                    sizes["sync"] = sizes.get("sync", 0) + 1
                return node
            return tirx.For(node.loop_var, node.min, node.extent, node.kind, rewrite(node.body, inner),
                            node.thread_binding, node.annotations, node.step)
        if isinstance(node, tirx.SeqStmt):
            return tirx.SeqStmt([rewrite(x, scope) for x in node.seq])
        if isinstance(node, tirx.IfThenElse):
            return tirx.IfThenElse(node.condition, rewrite(node.then_case, scope),
                                   rewrite(node.else_case, scope) if node.else_case is not None else None)
        if isinstance(node, tirx.BufferStore):
            done = _as_cp_async(node, None, 1, scope, olds, sizes)
            return done if done is not None else node
        return node

    return rewrite(stmt, dict(bounds))


def _is_zero_fill(value) -> bool:
    """``if_then_else(cond, load, 0)``: the predicated load ``bounds_guards`` writes."""
    if not (isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op)
            and str(value.op.name) in ("tirx.if_then_else", "prim.if_then_else")):
        return False
    other = value.args[2]
    return isinstance(value.args[1], TensorLoad) and isinstance(other, (tirx.IntImm, tirx.FloatImm)) and \
        float(other.value) == 0.0


def _flat_index(buf, indices):
    shape = [int_value(x) if int_value(x) is not None else x for x in buf.shape]
    return row_major_offset(indices, shape)


def _as_cp_async(store, lane, width, scope: dict, olds: list, sizes: dict):
    """``cp.async`` copies for ``store`` (vectorised over ``lane`` of ``width``, or scalar when ``lane`` is None);
    None when the store is not a plain same-type global -> pipelined-tile copy (it then stays synchronous)."""
    value = store.value
    if not any(store.buffer.same_as(o) for o in olds):
        return None
    pred = None
    if _is_zero_fill(value) and (lane is None or not mentions(value.args[0], [lane])):
        # a predicated load reading 0 outside the buffer (symbolic extents): cp.async's src-size form reads
        # nothing and zero-fills when the predicate fails (the predicate must hold for the whole chunk)
        pred, value = value.args[0], value.args[1]
    if not isinstance(value, TensorLoad) or str(value.source.dtype) != str(store.buffer.dtype) or width is None:
        sizes["sync"] = sizes.get("sync", 0) + 1
        return None
    src = value.source
    if src.strides is not None and len(src.strides) > 0:
        sizes["sync"] = sizes.get("sync", 0) + 1
        return None
    ebytes = tvm.DataType(str(store.buffer.dtype)).bits // 8
    dst_flat = _flat_index(store.buffer, store.indices)
    src_flat = _flat_index(src, value.indices)
    ana = sym.Analyzer()
    for v, (lo, ext) in scope.items():
        if lane is not None and v.same_as(lane):
            continue
        if int_value(lo) is not None and int_value(ext) is not None:
            ana.bind(v, Range.from_min_extent(int_value(lo), int_value(ext)))
    for nbytes in CP_ASYNC_SIZES:
        if ebytes == 0 or nbytes % ebytes:
            continue
        chunk = nbytes // ebytes
        if width % chunk:
            continue
        j = tirx.Var("cp", "int32")
        ok = True
        if lane is not None:
            ana.bind(j, Range.from_min_extent(0, width // chunk))
            at = {lane: j * chunk}
        else:
            at = {}
        d0, s0 = substitute(dst_flat, at), substitute(src_flat, at)
        for flat, start in ((dst_flat, d0), (src_flat, s0)):
            if not ana.can_prove(tirx.floormod(start, chunk) == 0):
                ok = False
                break
            if lane is not None:
                for e in range(1, chunk):
                    if not ana.can_prove(substitute(flat, {lane: j * chunk + e}) - start == e):
                        ok = False
                        break
            if not ok:
                break
        if not ok:
            continue
        op = "cp.async.cg.shared.global" if nbytes == 16 else "cp.async.ca.shared.global"
        count = (width // chunk) if lane is not None else 1
        if count == 1:
            at = {lane: tirx.const(0, "int32")} if lane is not None else {}
        dst_idx = [ana.simplify(substitute(x, at)) for x in store.indices]
        # the destination as a vector: TVM's region analysis then sees all bytes the copy writes
        dst_idx[-1] = tirx.Ramp(dst_idx[-1], 1, chunk) if chunk > 1 else dst_idx[-1]
        src_idx = [ana.simplify(substitute(x, at)) for x in value.indices]
        operands = [tirx.address_of(tirx.BufferLoad(store.buffer, dst_idx)),
                    tirx.address_of(tirx.BufferLoad(src, src_idx)), nbytes]
        if pred is not None:
            operands.append(tirx.Cast("uint32", tirx.if_then_else(substitute(pred, at), nbytes, 0)))
        call = ptx_call(op, *operands)
        sizes[nbytes] = sizes.get(nbytes, 0) + 1
        if count == 1:
            return call
        return tirx.For(j, 0, count, tirx.ForKind.UNROLLED, call)
    sizes["sync"] = sizes.get("sync", 0) + 1
    return None
