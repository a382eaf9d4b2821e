"""Resolve layout conflicts by splitting a fragment into two versions joined by an explicit conversion.

When no attempt of the ordinary inference gives every op what it needs (a conflict), or the only plans
found keep a tile fully replicated in every thread past the target's register budget, a reader of the
conflicting fragment ``F`` is given its own version ``F_cv``: the kernel gets

    F_cv = T.alloc_buffer(F.shape, F.dtype, scope="local.fragment")
    T.tile.copy(F_cv[...], F[...], tilelayout_conversion={...})     # the conversion, a distinct statement
    <the reader, now reading F_cv (for a loop reading F at several indices: one of them)>

and inference runs again on that program; ``F`` and ``F_cv`` take their own layouts (no rule links a
conversion's two sides) and the conversion is charged by ``conversion.conversion_cost``. Every split
tried is an attempt (``result.attempts``, ``run.py --explain``); the cheapest valid one wins, by the cost
model's (mem, regs) plus the conversion's bytes. Inference then writes the chosen way (no-op, shuffles or a
shared round trip) into the conversion's config, which lowering reads.
"""
from __future__ import annotations

import functools
import math
import re

import numpy as np
import tvm
import tvm_ffi
from tilelayout.ir_walk import walk_typed
from tvm import tirx
from tvm.ir import Range, TensorLoad, TensorRegion
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.errors import InferenceError, LayoutConflictError
from tilelayout.ffi_array import as_list
from tilelayout.fragment import Fragment

from ..hardware import warp_size
from .cost_models import _CONFIG
from .epilogue import epilogue_splits
from .splits import Split
from .resources import MAX_REGISTERS_PER_THREAD
from .conversion import (CONFIG_KEY, SHARED_STAGE_LIMIT, STRICT, ConversionCost, conversion_cost,
                         hand_staged_cost, register_walk_error, resolve_conflict_mode,
                         warn_shared)
from .frontend import ConvertOp, CopyOp, ElementwiseOp, ParallelOp, ReduceOp, graph_after_split

__all__ = ["infer_with_conversions", "Split", "split_candidates", "split_fragment", "conversion_costs",
           "read_conversions", "register_budget", "MAX_SPLITS", "MAX_EPILOGUES"]

#: splits tried per conflict (each is one more inference run)
MAX_SPLITS = 12


# ------------------------------------------------------------------------------------------ candidates

def _readers(graph, buf) -> list:
    """(op, access position or None) of every op that reads ``buf`` without writing it."""
    out = []
    for op in graph.ops:
        if op.conditions:
            continue        # a conversion under an `if` could put a barrier or a shuffle in divergent code
        if isinstance(op, ParallelOp):
            acc = op.accesses_of(buf)
            if not acc or any(a.is_write for a in acc):
                continue
            reads = [k for k, a in enumerate(op.accesses) if a.buffer is buf and a.is_read and not a.is_constant]
            if len(reads) > 1:
                out.extend((op, k) for k in reads)
            elif reads:
                out.append((op, None))
        elif isinstance(op, (CopyOp, ReduceOp, ElementwiseOp)):
            srcs = [op.src] if isinstance(op, (CopyOp, ReduceOp)) else list(op.srcs)
            if any(r.buffer is buf for r in srcs) and op.dst.buffer is not buf:
                out.append((op, None))
        # gemm operands are not split: the tensor-core lowering checks its operand layouts itself and a
        # conflict there is reported (with its fix) rather than converted
    return out


def _named_buffers(text: str, graph) -> list:
    names = [b.name for b in graph.fragments()]
    found = []
    for m in re.finditer(r"(?:buffer|fragment) (\w+)", text):
        if m.group(1) in names and m.group(1) not in found:
            found.append(m.group(1))
    return found


def _replicated_fragments(layouts: dict, graph) -> list:
    """Fragments every thread holds whole (the way out of a conflict the register budget forbids)."""
    out = []
    for buf in graph.fragments():
        lay = layouts.get(buf.name)
        # an injective layout with as many replicas as threads gives every thread every element
        if isinstance(lay, Fragment) and lay.replicate_size > 1 and lay.replicate_size >= graph.thread_extent:
            out.append(buf.name)
    return out


def split_candidates(graph, error: str | None, layouts: dict | None) -> list:
    """Splits worth trying, most specific first: readers of the fragments an error names, else of the
    fragments the over-budget plan replicated whole, else of every fragment read by several ops."""
    if layouts is not None:                 # over budget: only un-replicating a whole tile can help
        names = _replicated_fragments(layouts, graph)
    else:
        names = _named_buffers(error, graph) if error else []
    if not names and layouts is None:
        names = [b.name for b in graph.fragments() if len({op.index for op, _ in _readers(graph, b)}) > 1]
    out = []
    for name in names:
        buf = graph.buffer(name)
        if buf.is_fragment:
            for op, k in _readers(graph, buf):
                what = f"{op.accesses[k]}" if k is not None else "its reads"
                out.append(Split(name, op.index, k, f"convert {name} before {op.describe()} ({what})"))
    return out[:MAX_SPLITS]


# ------------------------------------------------------------------------------------------ the rewrite

def _fresh_name(graph, base: str) -> str:
    taken = {b.name for b in graph.buffers}
    name, n = f"{base}_cv", 1
    while name in taken:
        n += 1
        name = f"{base}_cv{n}"
    return name


@functools.lru_cache(maxsize=1)
def _region_type():
    """The type TIRx gives tile-op region arguments (read off a parsed call once)."""
    from tvm.script import tirx as T

    @T.prim_func
    def probe(A: T.Buffer((1,), "float32")):
        T.tile.copy(A[0:1], A[0:1])
    found = []
    walk_typed(probe.body, [(TilePrimitiveCall, lambda n: found.append(n.args[0].ty))])
    return found[0]


def conversion_call(dst_var, src_var, plan: dict):
    """``T.tile.copy(dst[...], src[...], tilelayout_conversion=plan)``."""
    ty = _region_type()
    regions = [TensorRegion(v, [Range.from_min_extent(0, s) for s in as_list(v.shape)], ty) for v in (dst_var, src_var)]
    return TilePrimitiveCall(*regions, op=tvm.ir.Op.get("tirx.tile.copy"), config={CONFIG_KEY: plan})


def split_fragment(func, graph, split: Split):
    """(``func`` with ``split`` applied: the new version allocated and converted right before the reader, the
    new version's name, the statements that replaced the reader's: allocation, conversion, redirected reader)."""
    from ..ir_utils import mapped, mutate
    buf = graph.buffer(split.buffer)
    op = graph.ops[split.op_index]
    name = _fresh_name(graph, buf.name)
    new = tirx.decl_buffer(as_list(buf.var.shape), buf.dtype, name=name, scope="local.fragment")
    indices = op.accesses[split.access].indices if split.access is not None else None

    def on_load(e):
        if not e.source.same_as(buf.var):
            return e
        if indices is not None and not (len(indices) == len(e.indices) and all(
                tvm_ffi.structural_equal(x, y) for x, y in zip(indices, e.indices))):
            return e
        return tirx.BufferLoad(new, as_list(e.indices))

    def redirect(stmt):
        if isinstance(stmt, TilePrimitiveCall):
            args = as_list(stmt.args)
            for k in range(1, len(args)):
                a = args[k]
                if isinstance(a, TensorRegion) and a.source.same_as(buf.var):
                    args[k] = TensorRegion(new, as_list(a.region), a.ty)
            return TilePrimitiveCall(*args, op=stmt.op, config=stmt.config) if stmt.config is not None else \
                TilePrimitiveCall(*args, op=stmt.op)
        return mapped(stmt, [(TensorLoad, on_load)])

    plan = {"src": buf.name, "dst": name, "kind": "pending"}
    conv = conversion_call(new, buf.var, plan)

    replaced = []

    def on_node(node, mutator):
        if node.same_as(op.stmt):
            replaced.append(tirx.SeqStmt([tirx.AllocBuffer(new), conv, redirect(node)]))
            return replaced[-1]
        return mutator.default_mutate(node)

    body = mutate(func.body, [(tirx.For, on_node), (TilePrimitiveCall, on_node)])
    return func.with_body(body), name, replaced[0]


# ------------------------------------------------------------------------------------------ costs

def conversion_costs(ops, state, graph, target) -> list:
    """[(ConvertOp, ConversionCost)] of the conversions among ``ops`` whose two sides have layouts in ``state``."""
    out = []
    for op in ops:
        if not isinstance(op, ConvertOp):
            continue
        src, dst = state.layouts.get(op.src.buffer.name), state.layouts.get(op.dst.buffer.name)
        if src is None or dst is None:
            continue
        _require_register_walk(op, src, dst)
        out.append((op, _cost(op, src, dst, graph, target)))
    return out


def _cost(op, src, dst, graph, target) -> ConversionCost:
    threads = graph.thread_extent
    bind = lambda f: f if f.thread_range is not None else f.bind_thread_range(0, threads)
    return conversion_cost(bind(src), bind(dst), threads, warp_size(target), max(1, op.src.buffer.bits // 8),
                           op.describe(), stage_limit=_stage_limit(graph))


def _stage_limit(graph) -> int:
    """Bytes a conversion's (static) staging tile may take: the static shared limit less what the kernel's own
    static shared buffers take (memoised on the graph: its buffers never change)."""
    hit = graph.__dict__.get("_stage_limit")
    if hit is None:
        from .resources import static_shared_bytes
        hit = graph.__dict__["_stage_limit"] = SHARED_STAGE_LIMIT - static_shared_bytes(graph)
    return hit


def _require_register_walk(op, src, dst) -> None:
    """Lowering a conversion walks the registers of both sides, which needs each layout's inverse in closed
    form; a side without one (e.g. a rotated row ``(i + 1) % 48``) cannot be converted, so the split that
    needs it is refused here rather than after inference has chosen it (``register_walk_error`` trusts a
    constructor that proved it, such as a gemm's accumulator)."""
    for side, lay, buf in (("source", src, op.src.buffer), ("destination", dst, op.dst.buffer)):
        err = register_walk_error(lay)
        if err is not None:
            raise LayoutConflictError(f"{op.describe()}: no conversion applies: the {side} layout {lay!r} has no "
                                      f"closed-form inverse, which walking its registers needs ({err})") from None


def _hand_staged(op, src, dst, graph, target) -> ConversionCost:
    threads = graph.thread_extent
    bind = lambda f: f if f.thread_range is not None else f.bind_thread_range(0, threads)
    return hand_staged_cost(bind(src), bind(dst), threads, warp_size(target), max(1, op.src.buffer.bits // 8))


# ------------------------------------------------------------------------------------------ the driver

def _regs(engine, state) -> int:
    """The plan's register peak (``register_liveness``): what the register budget is compared with."""
    from .register_liveness import plan_registers
    layouts = {b.name: state.layouts[b.name] for b in engine.graph.fragments() if b.name in state.layouts}
    converts = conversion_costs(engine.ops, state, engine.graph, engine.target)
    return plan_registers(engine.graph, layouts, converts, engine.gemm_plans, engine.target).registers


def _total(engine, state):
    """(mem, regs) of a whole program under its final layouts, conversions included."""
    from .cost_models import ScoringContext
    loops = {i: d.layout for i, d in state.loops.items()}
    cost = engine.model.score(engine.ops, dict(state.layouts), ScoringContext(engine.graph, engine.target, loops))
    extra = sum(c.mem for _, c in conversion_costs(engine.ops, state, engine.graph, engine.target))
    return cost.mem + extra, cost.regs


def register_budget() -> int:
    """Per-thread 32-bit registers a plan may use: ``layout_config(register_budget=N)``, then
    $TILELAYOUT_REGISTER_BUDGET, then the 255 every CUDA thread can address."""
    import os
    for value in (_CONFIG.get().get("register_budget"), os.environ.get("TILELAYOUT_REGISTER_BUDGET") or None):
        if value is not None:
            try:
                value = int(value)
            except ValueError:
                value = 0
            if value < 1:
                raise ValueError(f"the register budget must be a positive int, got {value!r}")
            return value
    return MAX_REGISTERS_PER_THREAD


def infer_with_conversions(func, target, cost_model, conflicts, engine_cls, errors, make_result):
    """Run inference; on a conflict (or a plan over the register budget) try splits and keep the cheapest;
    then, under the io-aware model, stage uncoalesced fragment stores through a conversion when it pays."""
    mode = resolve_conflict_mode(conflicts)
    budget = None if mode == STRICT else register_budget()
    engine = engine_cls(func, target, cost_model, budget)
    try:
        state, failure = engine.run(), None
    except errors as err:
        if mode == STRICT or not _is_conflict(err):
            raise
        state, failure = None, err
    if mode == STRICT:
        return make_result(engine, state)
    tried, notes = [], []
    over = failure is None and _regs(engine, state) > budget
    if failure is not None or over:
        if over:
            reason = f"the plan needs {_regs(engine, state)} registers per thread, over the budget of {budget}"
            splits = split_candidates(engine.graph, None, state.layouts)
        else:
            reason = str(failure)
            splits = split_candidates(engine.graph, reason, None)
        notes.append(f"layout conflict: {reason}")
        best, attempts = _try_splits(func, engine.graph, splits, target, cost_model, budget, engine_cls, errors)
        tried += attempts
        if best is None:
            if failure is not None:
                if not attempts:
                    raise failure
                reasons = "\n".join(f"  {a.root_description}: {a.error}" for a in attempts)
                raise type(failure)(f"{failure}\nno conversion resolves it; splits tried:\n{reasons}") from None
            notes.append("no conversion brings it under the register budget (kept as is)")
        else:
            func, engine, state = best
    for _ in range(MAX_EPILOGUES):
        splits = epilogue_splits(engine, state)
        if not splits:
            break
        base = _total(engine, state)
        best, attempts = _try_splits(func, engine.graph, splits, target, cost_model, budget, engine_cls, errors,
                                     base, (engine, state))
        tried += attempts
        if best is None:
            break
        func, engine, state = best
        notes.append("epilogue: " + next(a.root_description for a in attempts if a.chosen))
    result = _finish(engine, state, make_result, prelude=tried)
    result.notes[:0] = notes
    return result


#: uncoalesced stores staged per kernel, at most (each round is one more search over the remaining ones)
MAX_EPILOGUES = 4


#: an epilogue split's run starts from the unsplit run's decisions where ``epilogue_reuse`` shows they stay the
#: same (False: every split program is inferred from scratch; the tests compare both ways)
REUSE_UNSPLIT_RUN = True


def _try_splits(func, graph, splits, target, cost_model, budget, engine_cls, errors, base=None, reuse=None):
    """Run inference on every split; ((func, engine, state) of the cheapest, attempts). With ``base`` (the
    (mem, regs) of the program without the split) a split must be strictly cheaper to win; ``reuse``: the
    (engine, state) of that program, which an epilogue split's run may start from."""
    from .result import Attempt
    tried, best, best_cost = [], None, base
    for split in splits:
        attempt = Attempt(-1, split.op_index, split.description)
        least = register_lower_bound(graph, split.buffer)
        if least > budget:
            # no layout of the split program fits: running its search would only confirm it
            attempt.error = (f"at least {least} registers per thread (every fragment spread over all "
                             f"{graph.thread_extent} threads), over the budget of {budget}")
            tried.append(attempt)
            continue
        try:
            rewritten, _, replaced = split_fragment(func, graph, split)
            reusing = reuse is not None and REUSE_UNSPLIT_RUN
            # the split program's op graph from the unsplit one's where that is exact (``graph_after_split``)
            known = graph_after_split(graph, rewritten, split.op_index, replaced) if reusing else None
            # a graph made that way keeps every gemm op, and the store it replaces touched one fragment, the one
            # the conversion now reads: the gemms' chains, hence their plans, are the unsplit program's
            plans = dict(reuse[0].gemm_plans) if known is not None else None
            trial = engine_cls(rewritten, target, cost_model, budget, graph=known, gemm_plans=plans)
            trial_state = None
            if reusing:
                trial_state = trial.run_after_epilogue_split(*reuse, split.op_index)
            if trial_state is None:
                trial_state = trial.run()
            regs = _regs(trial, trial_state)
            if regs > budget:
                raise InferenceError(f"still {regs} registers per thread, over the budget of {budget}")
            mem, slots = _total(trial, trial_state)
        except errors as err:
            attempt.error = str(err)
            tried.append(attempt)
            continue
        attempt.mem, attempt.regs = mem, slots
        attempt.layouts = {b.name: trial_state.layouts[b.name] for b in trial.graph.fragments()
                           if b.name in trial_state.layouts}
        attempt.conversions = [_record(op, c, trial_state, trial) for op, c in
                               conversion_costs(trial.ops, trial_state, trial.graph, trial.target)]
        if base is not None:
            attempt.note = f"without it: mem={base[0]} regs={base[1]}"
        tried.append(attempt)
        if best_cost is None or (mem, slots) < best_cost:
            best, best_cost = (attempt, (rewritten, trial, trial_state)), (mem, slots)
    if best is None:
        return None, tried
    best[0].chosen = True
    return best[1], tried


def register_lower_bound(graph, extra: str | None = None) -> int:
    """32-bit registers per thread that any complete plan of ``graph`` needs, with or without a second version
    of fragment ``extra`` (as a split adds): every fragment an op uses gets a layout, which spreads its elements
    over at most the block's threads, so it holds at least ceil(size / threads) slots in some thread; the bound
    is the register peak (``register_liveness``) of those least counts, fragments of static shape only. A split
    program holds, wherever the unsplit one holds ``extra``, one of its two versions, so the unsplit peak bounds
    it too."""
    from .register_liveness import peak_of, program_points
    threads = max(1, int(graph.thread_extent))
    used = {b.name: b for op in graph.ops for b in op.buffers() if b.is_fragment}
    least = {}
    for name, buf in used.items():
        if not all(isinstance(s, int) for s in buf.shape):
            continue
        slots = -(-int(np.prod(buf.shape, dtype=np.int64)) // threads)
        least[name] = math.ceil(slots * buf.bits / 32)
    # a conversion's two versions coexist at least as little as a no-op conversion's do (one point each side)
    from types import SimpleNamespace
    apart = {op.index: SimpleNamespace(kind="noop") for op in graph.ops if isinstance(op, ConvertOp)}
    return peak_of(program_points(graph, apart), least)[0]


def _is_conflict(err) -> bool:
    """Errors a second version of a fragment can resolve: two ops demanding different layouts of one buffer
    (directly, or as the reason every free-level attempt failed)."""
    if "pinned twice" in str(err):
        return False            # contradictory pins are the user's error, not two ops' demands
    if isinstance(err, LayoutConflictError):
        return True
    text = str(err)
    return isinstance(err, InferenceError) and "every attempt failed" in text and (
        "does not hold" in text or "needs layout" in text or "needs every thread" in text)


def _record(op, cost: ConversionCost, state, engine) -> dict:
    src, dst = state.layouts[op.src.buffer.name], state.layouts[op.dst.buffer.name]
    hand = _hand_staged(op, src, dst, engine.graph, engine.target)
    return {"src": op.src.buffer.name, "dst": op.dst.buffer.name, "op": op.describe(), "kind": cost.kind,
            "cost": cost, "hand_staged": hand, "description": cost.describe()}


def _finish(engine, state, make_result, prelude=()):
    """The result, with every conversion's chosen way written into its config (what lowering reads)."""
    result = make_result(engine, state)
    records = [_record(op, c, state, engine) for op, c in
               conversion_costs(engine.ops, state, engine.graph, engine.target)]
    result.conversions = records
    result.attempts = list(prelude) + list(result.attempts)
    for rec in records:
        result.notes.append(f"conversion {rec['dst']} <- {rec['src']} ({rec['op']}): {rec['description']}; "
                            f"hand-staged through shared memory: {rec['hand_staged'].mem} B")
        if rec["kind"] == "shared":
            warn_shared(f"{rec['dst']} <- {rec['src']}: {rec['description']}")
    if records:
        result.func = _write_plans(result.func, records)
    return result


def read_conversions(func) -> list:
    """The conversions recorded in an annotated function, in program order: each its config dict (src, dst,
    kind and the cost fields inference wrote)."""
    from tilelayout.annotate import _plain
    found = []
    walk_typed(func.body, [(TilePrimitiveCall, lambda n: found.append(_plain(n.config[CONFIG_KEY]))
                                 if n.config is not None and CONFIG_KEY in n.config else None)])
    return found


def _write_plans(func, records: list):
    from ..ir_utils import mutate
    by_dst = {r["dst"]: r for r in records}

    def on_call(node, mutator):
        if node.config is None or CONFIG_KEY not in node.config:
            return node
        dst = str(node.args[0].source.name)
        rec = by_dst.get(dst)
        if rec is None:
            return node
        plan = {"src": rec["src"], "dst": dst, **rec["cost"].to_dict()}
        return TilePrimitiveCall(*as_list(node.args), op=node.op, config={CONFIG_KEY: plan})

    return func.with_body(mutate(func.body, [(TilePrimitiveCall, on_call)]))
