"""Lower tile ops into per-thread code, using the layouts layout inference wrote into the IR.

- ``copy`` / ``fill`` / elementwise ops become ``T.parallel`` nests over the destination region, annotated with
  the loop layout inference recorded for them (function attribute ``tilelayout.tile_loops``), so partition
  treats them like user loops; no loop decision is made here.
- ``sum`` / ``max`` / ``min`` with a fragment source: every thread folds the source cells it owns into a
  per-thread accumulator indexed like the destination, then the holders of each destination element
  combine their partials -- warp shuffles (xor butterfly) when the holders of every element form one
  xor-coset inside a warp, otherwise a shared-memory exchange -- so every holder ends with the full result.
  A destination held by only some of the threads that hold a source row (inference keeps such a layout when a
  consumer gave it fewer registers) is combined over all of them, then only its owners keep the result.
  A source replica is counted once (only replica 0 contributes).
- ``gemm``: tensor-core instructions (``lower_gemm``: ldmatrix / mma.sync, wgmma on sm_90) whose register
  fragments are the annotated layouts; the per-thread scalar k-loop only when the function opts in with the
  attribute ``tilelayout.gemm_fallback = "scalar"``. How each gemm was lowered is recorded in the
  ``tilelayout.gemm_instructions`` attribute.

Fragment accesses stay logical (``frag[i, j]``); partition turns them into local-array slots.

Size (about 650 lines): the pass and the reduction lowering (warp butterfly, shared-memory exchange); gemm
lowering and conversions live in their own modules.
"""
from __future__ import annotations


import types

import numpy as np
import tvm
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.annotate import REDUCTIONS_ATTR, TILE_LOOPS_ATTR, annotate_loop, read_reductions, read_tile_loops
from tilelayout.errors import warn_user
from tilelayout.expr import row_major_offset as _flat
from tilelayout.fragment import Fragment
from tilelayout.layout import substitute

from .from_inference import CopyOp, ElementwiseOp, FillOp, GemmOp, ReduceOp, build_op_graph
from ..hardware import func_target, has_tma, normalize_target, warp_size
from ..all_reduce import _cell_elements, _reduced, _split_basis, _xor_basis, unheld_partial  # noqa: F401 (tests use some)
from .from_inference import finalized_buffer, nest_of
from ..ir_utils import int_value, make_analyzer, mutate, prim_func_pass, thread_launch, walk
from . import lower_gemm as _gemm
from .lower_gemm import _region_index
from .cell_loops import ForCells as _ForCells, guard as _guard, slot_loops as _slot_loops
from .loop_partition import LoweringError, buffer_layouts, check_thread_fit
from .lower_conversion import is_conversion, lower_conversion_call
from .shared_liveness import keep_shared_alive
from .tile_values import (_cast, _is_one, _leading_bits, _operands, _shuffle_xor, elementwise_value,  # noqa: F401
                          member_mask, reduce_combine, reduce_identity)
from .uniform_branches import mark_uniform_branches

__all__ = ["LowerTileOps", "lower_tile_ops", "elementwise_value", "reduce_identity",
           "reduce_combine", "SHARED_LIMIT_BYTES"]

#: shared memory a reduction workspace may take (the static per-block limit of every CUDA GPU)
SHARED_LIMIT_BYTES = 48 * 1024


def LowerTileOps(target=None):
    """Pass: tile ops -> annotated parallel nests (copy/fill/elementwise) or per-thread code (reduce/gemm)."""
    return prim_func_pass("tilelayout.LowerTileOps", lambda func: lower_tile_ops(func, func_target(func, target)))


def element_loop(op, node, nest, kind):
    """The loop nest a copy/fill/elementwise tile op means: ``dst[x] = f(srcs[x])`` for every x."""
    dst = nest.accesses[-1]
    loads = [tirx.BufferLoad(a.buffer.var, a.indices) for a in nest.accesses[:-1]]
    dtype = dst.buffer.dtype
    if isinstance(op, CopyOp):
        value = _cast(dtype, loads[0])
    elif isinstance(op, FillOp):
        value = _cast(dtype, op.value)
    elif op.name == "select":
        # the predicate is a lambda over the destination's coordinates (the region starts at the origin)
        pred = op.params[-1]
        on, off = (_cast(dtype, v) for v in _operands(op, node, loads))
        cond = substitute(pred.pred, dict(zip(list(pred.vars), nest.loop_vars)))
        value = tirx.Select(cond, on, off)     # both sides are in-bounds region reads: evaluating both is safe
    elif op.name == "binary_chain":
        data, a, b = (_cast(dtype, v) for v in _operands(op, node, loads))
        op0, op1, reverse = op.params[-3:]
        first = elementwise_value(op0, dtype, [a, data], None)
        value = elementwise_value(op1, dtype, [b, first] if reverse else [first, b], None)
    else:
        value = elementwise_value(op.name, dtype, _operands(op, node, loads),
                                  tirx.BufferLoad(dst.buffer.var, dst.indices))
    body = tirx.BufferStore(dst.buffer.var, value, dst.indices)
    for v, e in reversed(list(zip(nest.loop_vars, nest.extents))):
        body = tirx.For(v, 0, e, kind, body)
    return body


# --------------------------------------------------------------------------------------- the pass

def lower_tile_ops(func, target=None):
    """``func`` with every tile op replaced by loops (see the module docstring); the target is ``target``, else
    the function's own, else the default."""
    target = normalize_target(func_target(func, target))
    graph = build_op_graph(func)
    tx, threads = thread_launch(func)
    layouts = buffer_layouts(func)
    attrs = func.attrs
    fallback = str(attrs[_gemm.GEMM_FALLBACK_ATTR]) if attrs is not None and _gemm.GEMM_FALLBACK_ATTR in attrs else None
    if fallback not in (None, "scalar"):
        raise LoweringError(f"function attribute {_gemm.GEMM_FALLBACK_ATTR}={fallback!r}: the only fallback is "
                            f"\"scalar\" (omit the attribute for tensor-core lowering)")
    lowering = _Lowering(graph, tx, threads, target, layouts, read_tile_loops(func), fallback)
    lowering.reductions = read_reductions(func)
    lowering.func = func
    ops = [op for op in graph.ops if isinstance(op, (CopyOp, FillOp, ElementwiseOp, ReduceOp, GemmOp))]

    def on_tile(node, mutator):
        if is_conversion(node):     # a layout conversion: the way inference decided (lower_conversion.py)
            return lower_conversion_call(node, layouts, tx, threads, target)
        mine = [op for op in ops if op.stmt.same_as(node)]   # a composite primitive expands to several ops
        if not mine:
            raise LoweringError(f"tile op {node.op.name} was not recognised by the front end")
        stmts = [lowering.lower(op, node) for op in mine]
        return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)

    def on_evaluate(node, mutator):
        buf = finalized_buffer(node)
        return node if buf is None else lowering.finalize(buf)

    out = keep_shared_alive(mark_uniform_branches(func.with_body(mutate(func.body, [
        (TilePrimitiveCall, on_tile), (tirx.Evaluate, on_evaluate)]))))
    if lowering.host:
        out = out.with_body(tirx.SeqStmt(lowering.host + [out.body]))
    if lowering.reports:
        out = out.with_attr(_gemm.GEMM_REPORT_ATTR, dict(lowering.reports))
    return out


class _Lowering:
    def __init__(self, graph, tx, threads: int, target, layouts: dict, tile_loops: dict,
                 gemm_fallback: str | None = None):
        self.graph, self.tx, self.threads, self.target = graph, tx, threads, target
        self.layouts, self.tile_loops = layouts, tile_loops
        self.gemm_fallback = gemm_fallback
        self.reports: dict = {}
        self.thread_name = tx.name if tx is not None else "threadIdx.x"
        self.counter: dict = {}
        self.reductions: dict = {}
        self.host: list = []       # statements before the launch (TMA stores' tensor maps)

    def fresh(self, base: str) -> str:
        self.counter[base] = self.counter.get(base, 0) + 1
        return f"{base}_{self.counter[base]}" if self.counter[base] > 1 else base

    def layout_of(self, buf, op) -> Fragment:
        lay = self.layouts.get(buf.name)
        if lay is None:
            raise LoweringError(f"fragment {buf.name}: {op.describe()} needs its layout but it has no layout "
                                f"annotation; run layout inference first")
        return lay

    def lower(self, op, node):
        if isinstance(op, (CopyOp, FillOp, ElementwiseOp)):
            return self.loop_op(op, node)
        if isinstance(op, ReduceOp):
            return self.reduce(op)
        return self.gemm(op)

    # ------------------------------------------------------------------ copy / fill / elementwise
    def loop_op(self, op, node):
        """The element loop of a copy/fill/elementwise op, carrying the loop decision inference recorded."""
        entry = self.tile_loops.get(op.index)
        if entry is None or entry[0] != op.describe():
            raise LoweringError(f"{op.describe()}: no loop decision recorded for this tile op (attribute "
                                f"{TILE_LOOPS_ATTR!r}); run layout inference first")
        _, layout, predicate, padding_guard, replica_guard = entry
        if isinstance(op, CopyOp) and op.src.buffer.is_fragment and op.dst.buffer.is_shared:
            from .lower_stmatrix import stmatrix_copy
            stored = stmatrix_copy(op, self.layout_of(op.src.buffer, op), self.layouts.get(op.dst.buffer.name),
                                   self.tx, self.threads, self.target, (predicate, padding_guard, replica_guard))
            if stored is not None:
                self.report(op, stored[1])
                return stored[0]
        if isinstance(op, CopyOp) and op.src.buffer.is_shared and not op.dst.buffer.is_shared \
                and not op.dst.buffer.is_fragment and has_tma(self.target):
            from .tma_store import tma_store_copy
            stored = tma_store_copy(op, layout, self.layouts.get(op.src.buffer.name), self.tx, self.threads,
                                    [p for p in self.func.params if tirx.is_buffer_var(p)],
                                    (predicate, padding_guard, replica_guard))
            if stored is not None:
                self.host += stored[1]
                self.report(op, stored[2])
                return stored[0]
        body = element_loop(op, node, nest_of(op), tirx.ForKind.PARALLEL)
        return annotate_loop(body, layout, predicate, padding_guard, replica_guard)

    # ------------------------------------------------------------------ reductions
    def reduce(self, op: ReduceOp):
        src, dst = op.src.buffer, op.dst.buffer
        if not src.is_fragment:
            if not dst.is_fragment:
                raise LoweringError(f"{op.describe()}: a reduction between two non-fragment buffers is not supported; "
                                    f"reduce into a fragment")
            return self.reduce_from_memory(op)
        if not op.src.is_full:
            raise LoweringError(f"{op.describe()}: reductions over part of fragment {src.name} are not supported")
        ls = self.layout_of(src, op)
        check_thread_fit(f"fragment {src.name}", ls, self.threads)
        lr, combine = self.reduction_decision(op, ls)
        if dst.is_fragment:
            if not op.dst.is_full:
                raise LoweringError(f"{op.describe()}: reductions into part of fragment {dst.name} are not supported")
            work = self.layout_of(dst, op)
            check_thread_fit(f"fragment {dst.name}", work, self.threads)
            if [int_value(s) if not isinstance(s, int) else s for s in work.input_shape] != list(lr.input_shape):
                raise LoweringError(f"{op.describe()}: fragment {dst.name} has shape {work.input_shape} but the "
                                    f"reduction produces {lr.input_shape}")
            # combining in the destination needs it to hold every partial; otherwise the destination's holders
            # must be some of the partials' holders: all of those combine, then each owner takes its elements
            err = work.containment_error(lr) if combine == "destination" else lr.containment_error(work)
            if err is not None:
                raise LoweringError(
                    f"buffer {dst.name}: {op.describe()}: unsatisfiable reduction replication: the holders of "
                    f"each result must be all the threads holding source elements of its row, or some of "
                    f"them, but {err}")
            owners, work = (None, work) if combine == "destination" else (work, lr)
        else:
            work, owners = lr, None
        dtype = dst.dtype
        acc = tirx.decl_buffer([int(s) for s in work.output_shape], dtype, name=self.fresh(f"{dst.name}_red"),
                               scope="local")
        stmts: list = [tirx.AllocBuffer(acc)]
        wfor = _ForCells(work, self.tx, self.threads, f"{op.describe()} (destination {dst.name})", "d")
        # 1. identity in every slot (also in padding cells, so cross-thread steps may read them)
        ident = reduce_identity(op.reducer, dtype)
        stmts.append(_slot_loops(wfor, tirx.BufferStore(acc, ident, wfor.svars)))
        # 2. fold the source cells this thread owns (replica 0 only: a replicated value counts once)
        sfor = _ForCells(ls, self.tx, self.threads, f"{op.describe()} (source {src.name})", "s")
        scoords = sfor.coords[:-1]
        red = [c for d, c in enumerate(scoords) if d not in op.axes] or [tirx.const(0, "int32")]
        slot = [sfor.ana.simplify(e) for e in work.forward(*red)]
        value = _cast(dtype, tirx.BufferLoad(src.var, scoords))
        fold = tirx.BufferStore(acc, reduce_combine(op.reducer, tirx.BufferLoad(acc, slot), value), slot)
        conds = list(sfor.guards)
        if ls.replicate_size > 1:
            conds.append(sfor.coords[-1] == 0)
        stmts.append(_slot_loops(sfor, _guard(fold, conds, sfor.ana)))
        # 3. combine across the holders of each destination element
        stmts.extend(self.all_reduce(op, work, wfor, acc))
        # 4. write the result
        dcoords, rep = wfor.coords[:-1], wfor.coords[-1]
        result = tirx.BufferLoad(acc, wfor.svars)
        if owners is not None:
            # iterate the owners' cells; each owner also holds the element in the reducer layout, at its slot there
            wfor = _ForCells(owners, self.tx, self.threads, f"{op.describe()} (destination {dst.name})", "o")
            dcoords = wfor.coords[:-1]
            result = tirx.BufferLoad(acc, [wfor.ana.simplify(e) for e in work.forward(*dcoords)])
            idx = dcoords
            conds = list(wfor.guards)
        elif dst.is_fragment:
            idx = dcoords
            conds = list(wfor.guards)
        else:
            kept = [e for d, e in enumerate(op.src.extents) if d not in op.axes]
            idx = _region_index(op.dst, [c for c, e in zip(dcoords, kept) if not (isinstance(e, int) and e == 1)])
            conds = list(wfor.guards) + ([rep == 0] if work.replicate_size > 1 else [])
        if op.accum:
            result = reduce_combine(op.reducer, tirx.BufferLoad(dst.var, idx), result)
        stmts.append(_slot_loops(wfor, _guard(tirx.BufferStore(dst.var, result, idx), conds, wfor.ana)))
        return tirx.SeqStmt(stmts)

    def all_reduce(self, op, work: Fragment, wfor: "_ForCells", acc) -> list:
        """Combine the partials of every holder of each destination element; all holders end with the result."""
        cells = _cell_elements(work, self.threads)
        counts = np.bincount(cells[cells >= 0].reshape(-1), minlength=work.size)
        if counts.max() <= 1:
            return []
        warp = warp_size(self.target)
        split = _split_basis(_xor_basis(cells, counts), warp)
        if split is None:
            return self.shared_exchange(op, work, wfor, acc)
        lanes, warps = split
        butterfly = None
        if lanes:   # butterfly inside each warp: every lane of a coset gets the coset's total
            steps = []
            members = member_mask(op.thread_range, self.threads, warp)
            for m in lanes:
                shuffled = _shuffle_xor(tirx.BufferLoad(acc, wfor.svars), m, warp, members)
                steps.append(tirx.BufferStore(acc, reduce_combine(op.reducer, tirx.BufferLoad(acc, wfor.svars),
                                                                  shuffled), wfor.svars))
            butterfly = tirx.SeqStmt(steps) if len(steps) > 1 else steps[0]
        if not warps:
            return [_slot_loops(wfor, butterfly)]
        # one value per warp-coset, exchanged through shared memory
        group = tirx.const(0, "int32")
        for k, m in enumerate(warps):
            group = group + tirx.bitwise_and(tirx.shift_right(self.tx, m.bit_length() - 1), 1) * (1 << k)
        # after the butterfly every lane of a coset holds the same total: one of them publishes it (several
        # lanes storing one shared element at once is a data race, however equal the values)
        publisher = tirx.bitwise_and(self.tx, _leading_bits(lanes)) == 0 if lanes else None
        return self.shared_exchange(op, work, wfor, acc, group, 1 << len(warps), publisher, butterfly)

    def shared_exchange(self, op, work: Fragment, wfor: "_ForCells", acc, slot=None, count: int | None = None,
                        publisher=None, before_put=None) -> list:
        """Every holder publishes its partial at ``ws[element, slot]`` (default: its replica index; only the
        threads where ``publisher`` holds, when given), then folds the ``count`` published values of each of its
        elements. ``before_put`` (the warp butterfly) runs per slot just before that slot's publish, so each
        partial is stored, and its register freed, as soon as it is complete (32 rows of partials are not all
        live at once: 170 -> 163 registers on a 128 x 256 row max)."""
        if slot is None:
            slot, count = wfor.coords[-1], work.replicate_size
        elems = int(work.size)
        if op.thread_range is not None:
            lo, ext = op.thread_range
            raise LoweringError(f"{op.describe()}: combining the partials of {op.dst.buffer.name} needs a block-wide "
                                f"barrier, but the op runs under a thread-dependent condition (threads [{lo}, "
                                f"{lo + ext})) that only part of the block reaches")
        per_element = count * max(1, tvm.DataType(acc.dtype).bits // 8)
        chunk = min(elems, SHARED_LIMIT_BYTES // per_element)
        if chunk < 1:
            raise LoweringError(f"{op.describe()}: the cross-thread exchange of one element needs {per_element} "
                                f"bytes of shared memory ({count} partials), over the {SHARED_LIMIT_BYTES}-byte limit")
        rounds = -(-elems // chunk)
        ws = tirx.decl_buffer([chunk, count], acc.dtype, name=self.fresh(f"{op.dst.buffer.name}_xchg"),
                              scope="shared")
        flat = _flat(wfor.coords[:-1], [int(s) for s in work.input_shape])
        # more partials than fit at once (nbytes over the limit) go in rounds of ``chunk`` elements
        rd = tirx.Var("xr", "int32")
        row = flat - rd * chunk if rounds > 1 else flat
        mine = [tirx.FloorDiv(flat, chunk) == rd] if rounds > 1 else []
        put = tirx.BufferStore(ws, tirx.BufferLoad(acc, wfor.svars), [row, slot])
        r = tirx.Var("r", "int32")
        take = tirx.SeqStmt([
            tirx.BufferStore(acc, tirx.BufferLoad(ws, [row, tirx.const(0, "int32")]), wfor.svars),
            tirx.For(r, 1, count - 1, tirx.ForKind.SERIAL, tirx.BufferStore(
                acc, reduce_combine(op.reducer, tirx.BufferLoad(acc, wfor.svars), tirx.BufferLoad(ws, [row, r])),
                wfor.svars)),
        ]) if count > 1 else tirx.Evaluate(0)
        sync = tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))
        guarded_put = _guard(put, list(wfor.guards) + mine + ([publisher] if publisher is not None else []), wfor.ana)
        take_all = _slot_loops(wfor, _guard(take, list(wfor.guards) + mine, wfor.ana))
        if rounds == 1:
            publish = guarded_put if before_put is None else tirx.SeqStmt([before_put, guarded_put])
            return [tirx.AllocBuffer(ws), sync, _slot_loops(wfor, publish), sync, take_all, sync]
        first = [] if before_put is None else [_slot_loops(wfor, before_put)]
        step = [_slot_loops(wfor, guarded_put), sync, take_all, sync]
        return [*first, tirx.AllocBuffer(ws), sync, tirx.For(rd, 0, rounds, tirx.ForKind.SERIAL, tirx.SeqStmt(step))]

    def reduction_decision(self, op: ReduceOp, src: Fragment) -> tuple:
        """(partials' layout, who combines) as inference recorded them (``REDUCTIONS_ATTR``), checked against
        the source's layout: every thread holding a source element (its first replica, the one folded) must
        hold the partial of that element's result."""
        entry = self.reductions.get(op.index)
        if entry is None or entry[0] != op.describe():
            raise LoweringError(f"{op.describe()}: no reduction decision recorded for this tile op (attribute "
                                f"{REDUCTIONS_ATTR!r}); run layout inference first")
        _, reduced, combine = entry
        if not isinstance(reduced, Fragment):
            raise LoweringError(f"{op.describe()}: its recorded reduced layout {reduced!r} is not a Fragment")
        err = unheld_partial(src, reduced, op.axes, self.threads)
        if err is not None:
            raise LoweringError(f"buffer {op.src.buffer.name}: {op.describe()}: the recorded reduced layout "
                                f"{reduced!r} does not fit the source's layout: {err}")
        return reduced, combine

    def finalize(self, var):
        """``finalize_reducer``: the partials every holder of a reducer element keeps are combined across its
        holders (``all_reduce``: shuffles, shared memory across warps); all holders end with the result."""
        info = self.graph.buffer(var)
        reducer, replication = info.reducer
        what = f"finalize_reducer({info.name})"
        if replication == "none":       # every holder ran all updates of its elements: nothing to combine
            return tirx.Evaluate(0)
        op = types.SimpleNamespace(reducer=reducer, thread_range=None, describe=lambda: what,
                                   dst=types.SimpleNamespace(buffer=info))
        work = self.layout_of(info, op)
        check_thread_fit(f"fragment {info.name}", work, self.threads)
        acc = tirx.decl_buffer([int(s) for s in work.output_shape], info.dtype, name=self.fresh(f"{info.name}_red"),
                               scope="local")
        wfor = _ForCells(work, self.tx, self.threads, what, "d")
        coords = wfor.coords[:-1]
        stmts = [tirx.AllocBuffer(acc),
                 _slot_loops(wfor, tirx.BufferStore(acc, reduce_identity(reducer, info.dtype), wfor.svars)),
                 _slot_loops(wfor, _guard(tirx.BufferStore(acc, tirx.BufferLoad(var, coords), wfor.svars),
                                          list(wfor.guards), wfor.ana))]
        combine = self.all_reduce(op, work, wfor, acc)
        if not combine:
            return tirx.Evaluate(0)
        stmts.extend(combine)
        stmts.append(_slot_loops(wfor, _guard(tirx.BufferStore(var, tirx.BufferLoad(acc, wfor.svars), coords),
                                              list(wfor.guards), wfor.ana)))
        return tirx.SeqStmt(stmts)

    def reduce_from_memory(self, op: ReduceOp):
        dst = op.dst.buffer
        work = self.layout_of(dst, op)
        if not op.dst.is_full:
            raise LoweringError(f"{op.describe()}: reductions into part of fragment {dst.name} are not supported")
        wfor = _ForCells(work, self.tx, self.threads, f"{op.describe()} (destination {dst.name})", "d")
        dcoords = wfor.coords[:-1]
        dtype = dst.dtype
        acc = tirx.decl_buffer([1], dtype, name=self.fresh(f"{dst.name}_red"), scope="local")
        zero = [tirx.const(0, "int32")]
        kvars = [tirx.Var(f"k{a}", "int32") for a in op.axes]
        src_ext = list(op.src.extents)
        it = iter(dcoords)
        full = [kvars[op.axes.index(d)] if d in op.axes else next(it) for d in range(len(src_ext))]
        src_idx = [o + c for o, c in zip(op.src.offsets, full)]
        fold = tirx.BufferStore(acc, reduce_combine(op.reducer, tirx.BufferLoad(acc, zero),
                                                    _cast(dtype, tirx.BufferLoad(op.src.buffer.var, src_idx))), zero)
        for k, a in reversed(list(zip(kvars, op.axes))):
            fold = tirx.For(k, 0, src_ext[a], tirx.ForKind.SERIAL, fold)
        result = tirx.BufferLoad(acc, zero)
        if op.accum:
            result = reduce_combine(op.reducer, tirx.BufferLoad(dst.var, dcoords), result)
        body = tirx.SeqStmt([tirx.BufferStore(acc, reduce_identity(op.reducer, dtype), zero), fold,
                             tirx.BufferStore(dst.var, result, dcoords)])
        return tirx.SeqStmt([tirx.AllocBuffer(acc), _slot_loops(wfor, _guard(body, wfor.guards, wfor.ana))])

    # ------------------------------------------------------------------ gemm
    def gemm(self, op: GemmOp):
        if self.gemm_fallback == "scalar":
            warn_user(f"{op.describe()}: lowered to the scalar per-thread k-loop ({_gemm.GEMM_FALLBACK_ATTR}="
                      f"\"scalar\"), not to tensor-core instructions", UserWarning)
            self.report(op, "scalar per-thread k-loop (opted in with tilelayout.gemm_fallback=\"scalar\")")
            return self.scalar_gemm(op)
        return self.tensor_core_gemm(op)

    def report(self, op, text: str) -> None:
        key = op.describe()
        while key in self.reports:
            key += "'"
        self.reports[key] = text

    def tensor_core_gemm(self, op: GemmOp):
        d = op.c.buffer
        if not d.is_fragment:
            raise LoweringError(f"{op.describe()}: the gemm accumulator {d.name} must be a fragment (local.fragment)")
        if not op.c.is_full or len(op.c.squeezed_extents()) != 2 or len(d.shape) != 2:
            raise LoweringError(f"{op.describe()}: the gemm accumulator must be the whole 2-D fragment {d.name}")
        if self.tx is None:
            raise LoweringError(f"{op.describe()}: tensor-core lowering needs a threadIdx.x launch")
        plan = self.gemm_plan(op)
        from .lower_tcgen05 import refuse_tcgen05
        refuse_tcgen05(op, plan, self.target)
        work = self.layout_of(d, op)
        if plan is not None and plan.instruction == "tcgen05":
            return self.tcgen05_gemm(op, plan, work)
        inst = _gemm.choose_instruction(op, self.target)
        m, n = (int(s) for s in d.shape)
        wanted = [_gemm.tiling_of_plan(plan)] if plan is not None else None
        base, running = work.thread_range or (0, self.threads)
        if base % warp_size(self.target):
            raise LoweringError(f"{op.describe()}: it runs on threads [{base}, {base + running}), which do not start "
                                f"at a warp boundary; tensor-core instructions need whole warps")
        tiling = _gemm.match_tiling(work, m, n, running, inst, wanted)
        if tiling is None:
            what = f"the recorded gemm plan ({plan.describe()})" if plan is not None else \
                f"any warp tiling of {inst.name} over {self.threads} threads"
            raise LoweringError(
                f"buffer {d.name}: {op.describe()}: its layout {work!r} is not an accumulator layout of {inst.name} "
                f"under {what} (each warp must hold whole 16x8 blocks in the lanes PTX assigns); let inference "
                f"choose it, or make M a multiple of 16 per warp and N of 8")
        ctx = _gemm.GemmContext(self.tx, self.threads, self.target, self.layouts, self.fresh, base)
        shared = [r.buffer for r in (op.a, op.b) if r.buffer.is_shared]
        if running < self.threads:
            # a gemm under ``if tx >= 64``: only its threads reach the barrier, so it must be a named barrier
            # over exactly them (``__syncthreads`` there would hang the block); ids 1..15 by warp offset
            sync = [_gemm.ptx_call("bar.sync", tirx.const(1 + (base // 32) % 15, "uint32"),
                                   tirx.const(running, "uint32"))] if shared else []
        else:
            sync = [tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))] if shared else []
        before = list(sync)
        note = ""
        if tiling.kind == "strips":
            from .lower_wgmma import lower_gemm_wgmma, wgmma_feasible
            winst, why = wgmma_feasible(op, tiling, self.target, ctx)
            if winst is not None:
                core, text = lower_gemm_wgmma(op, tiling, winst, ctx)
                # generic-proxy shared writes must be visible to the async proxy wgmma reads through
                before = [_gemm.ptx_call("fence.proxy.async.shared::cta")] + sync
            else:
                note = f" (the plan's wgmma layout, realised warp by warp: {why})"
        if not tiling.kind == "strips" or note:
            core, text = _gemm.lower_gemm_mma(op, work, tiling, inst, ctx)
        self.report(op, text + note)
        pre, post, allocs = self.gemm_epilogue(op, tiling, inst, ctx)
        out = tirx.SeqStmt(allocs + pre + before + [core] + sync + post)
        if running < self.threads and _has_block_barrier(out):
            raise LoweringError(f"{op.describe()}: it runs on threads [{base}, {base + running}) only, but its lowering "
                                f"needs a block-wide barrier there (the other threads never reach it); move the gemm "
                                f"out of the thread condition")
        return out

    def tcgen05_gemm(self, op: GemmOp, plan, work):
        """A gemm planned as tcgen05.mma (``lower_tcgen05``): ``C = alpha * A@B + beta * bias`` folded in as the
        Tensor Memory accumulator is read out."""
        from .lower_tcgen05 import lower_gemm_tcgen05, refuse_pipelined
        refuse_pipelined(op, plan, getattr(self, "func", None))
        base, running = work.thread_range or (0, self.threads)
        d, dtype = op.c.buffer, op.c.buffer.dtype
        bias = None if op.clear else op.bias
        if bias is not None and bias.buffer.is_fragment and not (bias.buffer is d and bias.is_full):
            from tilelayout.errors import Tcgen05LoweringError
            raise Tcgen05LoweringError(f"{op.describe()}: a register-fragment bias ({bias.buffer.name}) other than the "
                                       f"accumulator is not lowered with tcgen05.mma; add it after the gemm")

        def epilogue(value, row, col):
            idx = _region_index(op.c, [row, col])
            acc = _cast(dtype, value)
            acc = acc if _is_one(op.alpha) else acc * _cast(dtype, op.alpha)
            if bias is not None:
                term = _cast(dtype, tirx.BufferLoad(bias.buffer.var, _region_index(bias, [row, col])))
                acc = acc + (term if _is_one(op.beta) else term * _cast(dtype, op.beta))
            return tirx.BufferStore(d.var, acc, idx)

        ctx = _gemm.GemmContext(self.tx, self.threads, self.target, self.layouts, self.fresh, base)
        core, text = lower_gemm_tcgen05(op, plan, work, ctx, running, epilogue)
        self.report(op, text)
        return core

    def gemm_plan(self, op: GemmOp):
        """The plan inference recorded for ``op`` (None when the function carries no plans)."""
        from .from_inference import gemm_ordinal, read_gemm_plans
        func = getattr(self, "func", None)
        plans = read_gemm_plans(func) if func is not None else {}
        if not plans:
            return None
        plan = plans.get(gemm_ordinal(func, op))
        if plan is None:
            raise LoweringError(f"{op.describe()}: the function records gemm plans but none for this gemm; run "
                                f"layout inference again")
        return plan

    def gemm_epilogue(self, op: GemmOp, tiling, inst, ctx):
        """(statements before, after, allocations) giving ``D = alpha * A@B + beta * bias`` around an
        instruction sequence that accumulates A@B into D's registers."""
        d = op.c.buffer
        dtype = d.dtype
        alpha_one = _is_one(op.alpha)
        zero = lambda idx, _: tirx.BufferStore(d.var, tirx.const(0, dtype), idx)   # noqa: E731
        if op.clear:
            post = [] if alpha_one else [_gemm.accumulator_cells(tiling, inst, op, ctx, lambda idx, _: tirx.BufferStore(
                d.var, tirx.BufferLoad(d.var, idx) * _cast(dtype, op.alpha), idx))]
            return [_gemm.accumulator_cells(tiling, inst, op, ctx, zero)], post, []
        bias = op.bias
        if bias is not None and bias.buffer is d and op.c.is_full and bias.is_full and _is_one(op.beta) and alpha_one:
            return [], [], []
        if bias is not None and bias.buffer.is_fragment and bias.buffer is not d:
            lay = self.layout_of(bias.buffer, op)
            if not bias.is_full:
                raise LoweringError(f"{op.describe()}: a fragment bias ({bias.buffer.name}) must be used whole")
            _gemm.check_register_operand(op, bias, lay, tiling.owner_table(inst), "C")
        ce = inst.c_elems
        keep = tirx.decl_buffer([tiling.na * tiling.nb * ce], dtype, name=self.fresh(f"{d.name}_bias"), scope="local")

        def slot(cell):
            a, b, e = cell
            return [(a * tiling.nb + b) * ce + e]

        def save(idx, cell):       # the accumulator is the whole 2-D fragment: idx are its (row, col)
            term = _cast(dtype, tirx.BufferLoad(bias.buffer.var, _region_index(bias, list(idx))))
            return tirx.BufferStore(keep, term if _is_one(op.beta) else term * _cast(dtype, op.beta), slot(cell))

        def finish(idx, cell):
            acc = tirx.BufferLoad(d.var, idx)
            acc = acc if alpha_one else acc * _cast(dtype, op.alpha)
            return tirx.BufferStore(d.var, acc + tirx.BufferLoad(keep, slot(cell)), idx)

        pre = [_gemm.accumulator_cells(tiling, inst, op, ctx, save), _gemm.accumulator_cells(tiling, inst, op, ctx, zero)]
        return pre, [_gemm.accumulator_cells(tiling, inst, op, ctx, finish)], [tirx.AllocBuffer(keep)]

    def scalar_gemm(self, op: GemmOp):
        d = op.c.buffer
        if not d.is_fragment:
            raise LoweringError(f"{op.describe()}: the gemm accumulator {d.name} must be a fragment")
        if not op.c.is_full or len(op.c.squeezed_extents()) != len(d.shape):
            raise LoweringError(f"{op.describe()}: the gemm accumulator must be the whole 2-D fragment {d.name}")
        work = self.layout_of(d, op)
        wfor = _ForCells(work, self.tx, self.threads, f"{op.describe()} (accumulator {d.name})", "d")
        m, n = wfor.coords[0], wfor.coords[1]
        k = tirx.Var("k", "int32")
        a_sq = op.a.squeezed_extents()
        kext = a_sq[0] if op.transpose_a else a_sq[1]
        a_idx = _region_index(op.a, [k, m] if op.transpose_a else [m, k])
        b_idx = _region_index(op.b, [n, k] if op.transpose_b else [k, n])
        for region, idx, name in ((op.a, a_idx, "A"), (op.b, b_idx, "B")):
            if region.buffer.is_fragment:
                self.check_gemm_operand(op, work, region, name, op.transpose_a if name == "A" else op.transpose_b)
        dtype = d.dtype
        acc = tirx.decl_buffer([1], dtype, name=self.fresh(f"{d.name}_acc"), scope="local")
        zero = [tirx.const(0, "int32")]
        prod = _cast(dtype, tirx.BufferLoad(op.a.buffer.var, a_idx)) * _cast(dtype, tirx.BufferLoad(op.b.buffer.var, b_idx))
        mac = tirx.BufferStore(acc, tirx.BufferLoad(acc, zero) + prod, zero)
        result = tirx.BufferLoad(acc, zero) * _cast(dtype, op.alpha) if not _is_one(op.alpha) else tirx.BufferLoad(acc, zero)
        if op.bias is not None and not op.clear:
            bias = op.bias
            if bias.buffer.is_fragment and not bias.buffer is d:
                self.check_gemm_operand(op, work, bias, "C", False, elementwise=True)
            c_idx = _region_index(bias, [m, n])
            term = _cast(dtype, tirx.BufferLoad(bias.buffer.var, c_idx))
            result = result + (term if _is_one(op.beta) else term * _cast(dtype, op.beta))
        body = tirx.SeqStmt([tirx.BufferStore(acc, tirx.const(0, dtype), zero),
                             tirx.For(k, 0, kext, tirx.ForKind.SERIAL, mac),
                             tirx.BufferStore(d.var, result, [m, n])])
        return tirx.SeqStmt([tirx.AllocBuffer(acc), _slot_loops(wfor, _guard(body, wfor.guards, wfor.ana))])

    def check_gemm_operand(self, op, work: Fragment, region, name: str, transposed: bool, elementwise=False):
        """A fragment operand must be held, wherever an accumulator element is computed, for all of its k."""
        lay = self.layout_of(region.buffer, op)
        if not region.is_full:
            raise LoweringError(f"{op.describe()}: fragment operand {name} ({region.buffer.name}) must be used whole")
        holds = lay.thread_table() + (lay.thread_range or (0, 0))[0]       # (*shape, R)
        runs = work.thread_table() + (work.thread_range or (0, 0))[0]      # (M, N, R)
        mm, nn = runs.shape[0], runs.shape[1]
        for i in range(mm):
            for j in range(nn):
                need = set(int(t) for t in runs[i, j])
                if elementwise:
                    rows = [holds[i, j]]
                elif name == "A":
                    rows = [holds[:, i] if transposed else holds[i, :]]
                else:
                    rows = [holds[j, :] if transposed else holds[:, j]]
                row = rows[0].reshape(rows[0].shape[0] if not elementwise else 1, -1)
                for kk in range(row.shape[0]):
                    have = set(int(t) for t in row[kk])
                    missing = need - have
                    if missing:
                        raise LoweringError(
                            f"buffer {region.buffer.name}: {op.describe()}: thread {min(missing)} computes accumulator "
                            f"element {[i, j]} but does not hold the {name} element it needs (k={kk}); give "
                            f"{region.buffer.name} a layout that holds whole rows per thread or stage it in shared memory")


# --------------------------------------------------------------------------------------- helpers

def _has_block_barrier(stmt) -> bool:
    """Whether ``stmt`` contains ``__syncthreads`` (``tvm_storage_sync``), which every thread must reach."""
    hits: list = []
    walk(stmt, [(tvm.ir.Call, lambda c: hits.append(1) if isinstance(c.op, tvm.ir.Op)
                 and str(c.op.name) == "tirx.tvm_storage_sync" else None)])
    return bool(hits)
