"""Run GPU-style kernels on the CPU, for numeric checks without a GPU.

``SerializeThreads`` keeps the per-thread program the GPU would run and executes the threads one after
another: ``blockIdx`` become outer serial loops; every statement that may communicate between threads
(each statement of a sequence that touches shared memory, contains a barrier or a warp shuffle) runs as
its own phase -- a loop over all threads -- which is the barrier the GPU would need there; per-thread
arrays (``local``) get a leading thread dimension, shared memory becomes a plain array, and a warp
shuffle becomes a two-phase exchange through a per-thread array.

``SequentialSemantics`` is the reference the lowering is checked against: it runs the *unlowered* tile
program once, sequentially, as one thread -- tile ops over whole regions, parallel loops over every
iteration, fragments as full logical arrays -- so it depends on no layout at all.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.expr import mentions as _uses_any
from tilelayout.layout import substitute

from ..ir_utils import int_value, mapped, mutate, prim_func_pass, walk
from .atomics import atomics_as_updates
from .emulate_async_copy import PER_THREAD_KEY
from .emulate_collective import emulate_collective, is_collective
from .tcgen05_cpu import emulate_tcgen05_call, is_tcgen05_call
from .loop_partition import LoweringError

__all__ = ["SerializeThreads", "serialize_threads", "SequentialSemantics", "sequential_semantics", "LOCAL_SCOPES"]

LOCAL_SCOPES = ("local", "local.var", "local.fragment", "warp")
_SHUFFLES = ("tirx.tvm_warp_shuffle_xor", "tirx.tvm_warp_shuffle")


# --------------------------------------------------------------------------------------- shared parts

def _launches(func):
    """(block launches [(var, extent)], thread launches [(var, extent)], body without the launch attrs)."""
    blocks, threads = [], []

    def on_attr(node):
        if node.attr_key == "thread_extent" and isinstance(node.node, tirx.IterVar):
            tag = str(node.node.thread_tag)
            ext = int_value(node.value)
            if ext is None and tag.startswith("blockIdx"):
                ext = node.value        # a grid over symbolic extents: the CPU loop binds them from the arrays
            elif ext is None:
                raise LoweringError(f"{tag} extent {node.value} must be a constant to run on the CPU")
            target = blocks if tag.startswith("blockIdx") else threads
            if not any(v.same_as(node.node.var) for v, _, _ in target):
                target.append((node.node.var, ext, tag))
            return node.body
        return node

    body = mapped(func.body, [(tirx.AttrStmt, on_attr)])
    order = {"x": 2, "y": 1, "z": 0}
    threads.sort(key=lambda t: order.get(t[2][-1], 3))    # z slowest ... x fastest
    return [(v, e) for v, e, _ in blocks], [(v, e) for v, e, _ in threads], body


def _hoist_allocs(body):
    """Remove every AllocBuffer from ``body``; return (body, buffers in order)."""
    found = []

    def on_alloc(node):
        found.append(node.buffer)
        return tirx.Evaluate(0)

    body = mapped(body, [(tirx.AllocBuffer, on_alloc)])
    return body, found


def _hoist_param_views(body, params: list):
    """Remove every ``DeclBuffer`` over a parameter's data from ``body``; return (body, declarations): they
    depend on the parameter only, and must stay in scope for every per-thread phase built from the body."""
    found = []

    def on_decl(node):
        data = node.data
        if isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op) and \
                str(data.op.name) == "tirx.buffer_data" and any(data.args[0].same_as(p) for p in params):
            found.append(node)
            return tirx.Evaluate(0)
        return node

    body = mapped(body, [(tirx.DeclBuffer, on_decl)])
    return body, found


def _parallel_to_serial(stmt):
    return mapped(stmt, [(tirx.For, lambda f: tirx.For(f.loop_var, f.min, f.extent, tirx.ForKind.SERIAL, f.body,
                                                       None, f.annotations, f.step)
                          if f.kind == tirx.ForKind.PARALLEL else f)])


def _wrap_blocks(body, blocks):
    for v, ext in reversed(blocks):
        nv = tirx.Var(v.name, "int32")
        body = tirx.For(nv, 0, ext, tirx.ForKind.SERIAL, substitute(body, {v: nv}))
    return body


def _fresh_lets(stmt):
    """``stmt`` with every ``Let`` expression binding a variable of its own. Each phase has its own thread
    variable, so one ``Let`` of a thread-dependent index copied into statements of two phases (the race
    check's shadow update and the access it checks, the cp.async emulation's copies of one address) would bind
    one variable to two different values, which TVM's LLVM code generator refuses ("Trying to update var")."""
    def on_let(e):
        v = tirx.Var(e.var.name, e.var.ty)
        return tirx.Let(v, e.value, substitute(e.body, {e.var: v}))
    return mapped(stmt, [(tirx.Let, on_let)])


def _rebuffer(stmt, remap: dict, lead=None):
    """Accesses of remapped buffers go to their CPU arrays (with ``lead`` as leading index for per-thread ones)."""
    def target(buf):
        for b, (nb, per_thread) in remap.items():
            if b.same_as(buf):
                return nb, per_thread
        return None, False

    def idx(per_thread, indices):
        if per_thread:
            if lead is None:
                raise LoweringError("a per-thread buffer is used outside any thread phase")
            return [lead] + list(indices)
        return list(indices)

    def on_store(s):
        nb, pt = target(s.buffer)
        return s if nb is None else tirx.BufferStore(nb, s.value, idx(pt, s.indices))

    def on_load(e):
        nb, pt = target(e.source)
        return e if nb is None else tirx.BufferLoad(nb, idx(pt, e.indices))

    return mapped(stmt, [(tirx.BufferStore, on_store), (TensorLoad, on_load)])


def _has(stmt, pred) -> bool:
    hits = []

    def on_call(c):
        if pred(c):
            hits.append(1)

    walk(stmt, [(tvm.ir.Call, on_call)])
    return bool(hits)


def _is_sync(c) -> bool:
    """A barrier: ``__syncthreads`` or a named barrier over part of the block (``bar.sync id, n``)."""
    return isinstance(c.op, tvm.ir.Op) and str(c.op.name) in ("tirx.tvm_storage_sync", _NAMED_BARRIER)


def _is_block_sync(c) -> bool:
    """A barrier every thread of the block must reach."""
    return isinstance(c.op, tvm.ir.Op) and str(c.op.name) == "tirx.tvm_storage_sync"


#: ``bar.sync id, count``: synchronises the ``count`` threads that execute it (a warp-specialised region)
_NAMED_BARRIER = "tirx.ptx.bar_sync_count"


def _is_shuffle(c) -> bool:
    return isinstance(c.op, tvm.ir.Op) and str(c.op.name) in _SHUFFLES


def _communicates(c) -> bool:
    """A call that exchanges values between threads: barrier, shuffle, or a tensor-core collective."""
    return _is_sync(c) or _is_shuffle(c) or is_collective(c) or is_tcgen05_call(c)


# --------------------------------------------------------------------------------------- SerializeThreads

def SerializeThreads():
    """A PrimFunc pass running a lowered GPU kernel's threads one after another (see the module docstring)."""
    return prim_func_pass("tilelayout.SerializeThreads", serialize_threads)


def serialize_threads(func):
    """The thread-bound ``func`` as a CPU function (see the module docstring). The shared-tile markers of
    ``shared_liveness`` are dropped (every tile becomes its own CPU array, with no merged memory to protect) and
    the ``tvm_thread_invariant`` wrappers of ``uniform_branches`` removed (they only guide TVM's barriers)."""
    from .shared_liveness import drop_keep_alive
    from .uniform_branches import unwrap
    func = unwrap(drop_keep_alive(func))
    blocks, threads, body = _launches(func)
    body = atomics_as_updates(body)
    nthreads = 1
    for _, ext in threads:
        nthreads *= ext
    body, allocs = _hoist_allocs(body)
    body, views = _hoist_param_views(body, [p for p in func.params if tirx.is_buffer_var(p)])
    remap, decls = {}, list(views)
    for b in allocs:
        scope = b.scope()
        if scope in LOCAL_SCOPES:
            nb = tirx.decl_buffer([nthreads] + list(b.shape), b.dtype, name=f"{b.name}_per_thread")
            remap[b] = (nb, True)
        else:
            nb = tirx.decl_buffer(list(b.shape), b.dtype, name=f"{b.name}_{scope.split('.')[0] or 'g'}")
            remap[b] = (nb, False)
        decls.append(tirx.AllocBuffer(nb))
    shared = [b for b in allocs if b.scope().startswith("shared")]
    ctx = _Phases([v for v, _ in threads], [e for _, e in threads], nthreads, remap, shared)
    body = ctx.serialize(_parallel_to_serial(body))
    body = tirx.SeqStmt(decls + ctx.extra + [_wrap_blocks(body, blocks)]) if decls or ctx.extra else \
        _wrap_blocks(body, blocks)
    return func.with_body(body)


class _Phases:
    def __init__(self, tvars, extents, nthreads: int, remap: dict, shared: list):
        self.tvars, self.extents, self.nthreads = tvars, extents, nthreads
        self.remap, self.shared = remap, shared
        self.extra: list = []          # exchange buffers of emulated shuffles
        self.guards: list = []         # enclosing thread-dependent conditions (warp-specialised regions)

    def touches_shared(self, stmt) -> bool:
        hits = []
        walk(stmt, [(tirx.BufferStore, lambda s: hits.append(1) if any(s.buffer.same_as(b) for b in self.shared) else None),
                    (TensorLoad, lambda e: hits.append(1) if any(e.source.same_as(b) for b in self.shared) else None)])
        return bool(hits)

    def needs_split(self, stmt) -> bool:
        if _has(stmt, _communicates):
            return True
        multi = []
        walk(stmt, [(tirx.SeqStmt, lambda s: multi.append(1))])
        return bool(multi) and self.touches_shared(stmt)

    def thread_loop(self, stmt):
        for cond in reversed(self.guards):
            stmt = tirx.IfThenElse(cond, stmt, None)
        if not self.tvars:
            return _rebuffer(stmt, self.remap, tirx.const(0, "int32"))
        t = tirx.Var("t", "int32")
        vmap, rest = {}, t
        for v, ext in zip(reversed(self.tvars), reversed(self.extents)):   # x fastest
            vmap[v] = tirx.floormod(rest, ext) if ext > 1 else tirx.const(0, "int32")
            rest = tirx.floordiv(rest, ext)
        stmt = _fresh_lets(_rebuffer(substitute(stmt, vmap), self.remap, t))
        return tirx.For(t, 0, self.nthreads, tirx.ForKind.SERIAL, stmt)

    def serialize(self, stmt):
        if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == PER_THREAD_KEY:
            return self.thread_loop(stmt.body)        # an emulation block (emulate_async_copy): one phase
        if isinstance(stmt, tirx.Evaluate) and _has(stmt, _is_sync):
            return tirx.Evaluate(0)                   # the phase boundary is the barrier
        if isinstance(stmt, tirx.Evaluate) and is_collective(stmt.value):
            return emulate_collective(stmt.value, self)   # warp/warpgroup exchange, see emulate_mma
        if isinstance(stmt, tirx.Evaluate) and is_tcgen05_call(stmt.value):
            return emulate_tcgen05_call(stmt.value, self)  # Tensor Memory and its mbarrier, see tcgen05_cpu
        if not self.needs_split(stmt):
            return self.thread_loop(stmt)
        if isinstance(stmt, tirx.SeqStmt):
            if any(isinstance(s, tirx.Bind) for s in stmt.seq):
                raise LoweringError("cannot run on the CPU: a per-thread scalar (Bind) crosses a barrier")
            return tirx.SeqStmt([self.serialize(s) for s in stmt.seq])
        if isinstance(stmt, tirx.For):
            if _uses_any([stmt.min, stmt.extent], self.tvars):
                raise LoweringError(f"cannot run on the CPU: loop {stmt.loop_var.name} has thread-dependent bounds "
                                    f"and contains a barrier or shuffle")
            return tirx.For(stmt.loop_var, stmt.min, stmt.extent, tirx.ForKind.SERIAL, self.serialize(stmt.body),
                            None, stmt.annotations, stmt.step)
        if isinstance(stmt, tirx.IfThenElse):
            if _uses_any(stmt.condition, self.tvars):
                if _has(stmt, _is_block_sync):
                    raise LoweringError("cannot run on the CPU: a block-wide barrier under a thread-dependent "
                                        "condition (on a GPU only part of the block would reach it)")
                if not (_has(stmt, _is_shuffle) or _has(stmt, _is_sync) or _has(stmt, is_collective)
                        or _has(stmt, is_tcgen05_call)):
                    return self.thread_loop(stmt)
                # shuffles, named barriers and warp collectives inside a warp-specialised region: every phase
                # runs in the threads the condition selects (the lowering only emits them over whole warps)
                parts = []
                for cond, case in ((stmt.condition, stmt.then_case), (tirx.Not(stmt.condition), stmt.else_case)):
                    if case is not None:
                        self.guards.append(cond)
                        parts.append(self.serialize(case))
                        self.guards.pop()
                return tirx.SeqStmt(parts) if len(parts) > 1 else parts[0]
            if self._reads_per_thread(stmt.condition):
                return self._uniform_branch(stmt)
            other = self.serialize(stmt.else_case) if stmt.else_case is not None else None
            return tirx.IfThenElse(stmt.condition, self.serialize(stmt.then_case), other)
        if isinstance(stmt, tirx.AttrStmt):
            return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, self.serialize(stmt.body))
        if isinstance(stmt, tirx.BufferStore) and _has(stmt, _is_shuffle):
            return self.shuffle(stmt)
        return self.thread_loop(stmt)

    def _reads_per_thread(self, expr) -> bool:
        hits = []
        walk(expr, [(TensorLoad, lambda e: hits.append(1) if any(
            pt and e.source.same_as(b) for b, (_, pt) in self.remap.items()) else None)])
        return bool(hits)

    def _uniform_branch(self, stmt):
        """An ``if`` around barriers on per-thread values without the thread index: a local copy of block-uniform
        data (the front end accepts only those, ``inference/uniform_locals.py``). The serial program takes it once,
        on thread 0's value, after a phase asserting every thread's value agrees: threads that disagreed would
        split at the barriers inside on a GPU, so the check fails loudly instead of running one side."""
        if self.guards:
            raise LoweringError("cannot run on the CPU: a condition on per-thread values around a barrier inside a "
                                "thread-dependent region")
        first = _rebuffer(stmt.condition, self.remap, tirx.const(0, "int32"))
        t = tirx.Var("t", "int32")
        each = _rebuffer(stmt.condition, self.remap, t)
        agree = tirx.For(t, 0, self.nthreads, tirx.ForKind.SERIAL, tirx.AssertStmt(
            tirx.Cast("int32", each) == tirx.Cast("int32", first), tvm.ir.StringImm("RuntimeError"),
            [tvm.ir.StringImm(f"threads disagree on the block-uniform condition {stmt.condition}")]))
        other = self.serialize(stmt.else_case) if stmt.else_case is not None else None
        return tirx.SeqStmt([agree, tirx.IfThenElse(first, self.serialize(stmt.then_case), other)])

    def shuffle(self, store):
        """``x = f(shfl_xor(v, m))`` -> phase 1: every thread publishes v; phase 2: read the partner's."""
        calls = []
        walk(store, [(tvm.ir.Call, lambda c: calls.append(c) if _is_shuffle(c) else None)], order="post")
        phases, table = [], []
        for c in calls:
            indexed = str(c.op.name) == "tirx.tvm_warp_shuffle"     # read lane c.args[2] of the segment
            value, lane_mask, width = c.args[1], int_value(c.args[2]), int_value(c.args[3])
            if width is None or (not indexed and (lane_mask is None or lane_mask >= width)):
                raise LoweringError(f"cannot emulate shuffle {c}: lane mask and width must be constants")
            ex = tirx.decl_buffer([self.nthreads], str(value.ty), name="shfl_xchg")
            self.extra.append(tirx.AllocBuffer(ex))
            phases.append(self._publish(ex, value))
            table.append((c, ex, (c.args[2], width) if indexed else lane_mask))

        def on_call(c):
            for call, ex, m in table:
                if call.same_as(c):
                    if isinstance(m, tuple):
                        lane, width = m
                        base = tirx.floordiv(self._flat_thread(), width) * width
                        return tirx.BufferLoad(ex, [base + tirx.floormod(lane, width)])
                    return tirx.BufferLoad(ex, [tirx.bitwise_xor(self._flat_thread(), m)])
            return c

        replaced = mapped(store, [(tvm.ir.Call, on_call)])
        return tirx.SeqStmt(phases + [self.thread_loop(replaced)])

    def flat_thread(self):
        return self._flat_thread()

    def _flat_thread(self):
        out = tirx.const(0, "int32")
        for v, ext in zip(self.tvars, self.extents):
            out = out * ext + v
        return out

    def _publish(self, ex, value):
        return self.thread_loop(tirx.BufferStore(ex, value, [self._flat_thread()]))


# --------------------------------------------------------------------------------------- reference

def SequentialSemantics():
    """A PrimFunc pass turning an unlowered tile program into its sequential, layout-free semantics."""
    return prim_func_pass("tilelayout.SequentialSemantics", sequential_semantics)


def sequential_semantics(func):
    """The unlowered tile program run once, by one thread, op by op over whole regions (the reference)."""
    from .from_inference import ConvertOp, CopyOp, ElementwiseOp, FillOp, GemmOp, ReduceOp, build_op_graph
    from .from_inference import finalized_buffer
    graph = build_op_graph(func)
    blocks, threads, body = _launches(func)
    if threads and _uses_any(body, [v for v, _ in threads]):
        raise LoweringError("the sequential reference cannot model a kernel whose code reads threadIdx; declare a "
                            "numpy REFERENCE for it")
    body, allocs = _hoist_allocs(body)
    remap, decls = {}, []
    for b in allocs:
        nb = tirx.decl_buffer(list(b.shape), b.dtype, name=f"{b.name}_ref")
        remap[b] = (nb, False)
        decls.append(tirx.AllocBuffer(nb))
    ops = [op for op in graph.ops if isinstance(op, (CopyOp, FillOp, ElementwiseOp, ReduceOp, GemmOp, ConvertOp))]

    def on_tile(node, mutator):
        mine = []
        for op in ops:
            if op.stmt.same_as(node):
                if isinstance(op, ConvertOp):       # a layout conversion means a plain copy here
                    op = CopyOp(index=op.index, stmt=op.stmt, dst=op.dst, src=op.src)
                mine.append(_reference_op(op, node))   # composite primitives expand to several ops
        if not mine:
            raise LoweringError(f"tile op {node.op.name} has no reference semantics")
        return mine[0] if len(mine) == 1 else tirx.SeqStmt(mine)

    def on_evaluate(node, mutator):       # finalize_reducer: run once, by one thread, the reducer holds the total
        return tirx.Evaluate(0) if finalized_buffer(node) is not None else node

    body = atomics_as_updates(mutate(body, [(TilePrimitiveCall, on_tile), (tirx.Evaluate, on_evaluate)]))
    body = _rebuffer(_parallel_to_serial(body), remap)
    body = _wrap_blocks(body, blocks)
    out = func.with_body(tirx.SeqStmt(decls + [body]) if decls else body)
    # safe global memory: a partial last tile or a data-dependent offset runs past the buffer; reads there give
    # the pad and writes are dropped (the predicates the lowering gets; the numpy interpreter models them alone)
    from .bounds_guards import guard_out_of_bounds
    return guard_out_of_bounds(out)


def _reference_op(op, node):
    from .from_inference import CopyOp, ElementwiseOp, FillOp, GemmOp
    from .lower_tile_ops import _cast, _region_index, element_loop, reduce_combine, reduce_identity
    if isinstance(op, (CopyOp, FillOp, ElementwiseOp)):
        from .from_inference import nest_of
        return element_loop(op, node, nest_of(op), tirx.ForKind.SERIAL)
    acc = tirx.decl_buffer([1], (op.c if isinstance(op, GemmOp) else op.dst).buffer.dtype, name="ref_acc")
    zero = [tirx.const(0, "int32")]
    if isinstance(op, GemmOp):
        m, n, k = (tirx.Var(x, "int32") for x in "mnk")
        dtype = op.c.buffer.dtype
        a_sq, c_sq = op.a.squeezed_extents(), op.c.squeezed_extents()
        kext = a_sq[0] if op.transpose_a else a_sq[1]
        a = tirx.BufferLoad(op.a.buffer.var, _region_index(op.a, [k, m] if op.transpose_a else [m, k]))
        b = tirx.BufferLoad(op.b.buffer.var, _region_index(op.b, [n, k] if op.transpose_b else [k, n]))
        mac = tirx.BufferStore(acc, tirx.BufferLoad(acc, zero) + _cast(dtype, a) * _cast(dtype, b), zero)
        result = tirx.BufferLoad(acc, zero) * _cast(dtype, op.alpha)
        if op.bias is not None and not op.clear:
            result = result + _cast(dtype, tirx.BufferLoad(op.bias.buffer.var, _region_index(op.bias, [m, n]))) * \
                _cast(dtype, op.beta)
        body = tirx.SeqStmt([tirx.BufferStore(acc, tirx.const(0, dtype), zero),
                             tirx.For(k, 0, kext, tirx.ForKind.SERIAL, mac),
                             tirx.BufferStore(op.c.buffer.var, result, _region_index(op.c, [m, n]))])
        body = tirx.For(m, 0, c_sq[0], tirx.ForKind.SERIAL, tirx.For(n, 0, c_sq[1], tirx.ForKind.SERIAL, body))
        return tirx.SeqStmt([tirx.AllocBuffer(acc), body])
    # reduction: for every kept coordinate fold the reduced axes, then store (or combine with the old value)
    dtype = op.dst.buffer.dtype
    ext = list(op.src.extents)
    cvars = [tirx.Var(f"c{d}", "int32") for d in range(len(ext))]
    src_idx = [o + c for o, c in zip(op.src.offsets, cvars)]
    fold = tirx.BufferStore(acc, reduce_combine(op.reducer, tirx.BufferLoad(acc, zero),
                                                _cast(dtype, tirx.BufferLoad(op.src.buffer.var, src_idx))), zero)
    for d in reversed(op.axes):
        fold = tirx.For(cvars[d], 0, ext[d], tirx.ForKind.SERIAL, fold)
    kept = [d for d in range(len(ext)) if d not in op.axes]
    dst_idx = _region_index(op.dst, [cvars[d] for d in kept if not (isinstance(ext[d], int) and ext[d] == 1)])
    result = tirx.BufferLoad(acc, zero)
    if op.accum:
        result = reduce_combine(op.reducer, tirx.BufferLoad(op.dst.buffer.var, dst_idx), result)
    body = tirx.SeqStmt([tirx.BufferStore(acc, reduce_identity(op.reducer, dtype), zero), fold,
                         tirx.BufferStore(op.dst.buffer.var, result, dst_idx)])
    for d in reversed(kept):
        body = tirx.For(cvars[d], 0, ext[d], tirx.ForKind.SERIAL, body)
    return tirx.SeqStmt([tirx.AllocBuffer(acc), body])
