"""Layout inference: give every fragment, shared tile and parallel loop nest of a TIRx PrimFunc a layout.

Three levels, as in TileLang: STRICT takes what is forced (user pins, MMA layouts, constant-index and
floating fragment uses), COMMON propagates from known layouts breadth-first in program order, FREE
searches each connected component (ops sharing a fragment) by trying every member as the root on a
copy of the state and keeps the cheapest attempt by the cost model (ties: earliest root).

Size (about 580 lines): the engine (attempt state, levels, free-level search, result); the search
certificate, conversions and cost models live in their own modules.
"""
from __future__ import annotations

from collections import deque

import numpy as np
import tvm

from tilelayout.errors import InferenceError, LayoutConflictError, LayoutError, WriteRaceError
from tilelayout.fragment import Fragment, fully_replicated
from tilelayout.layout import Layout

from .conversion import register_count32
from .register_liveness import plan_registers
from .conversion_plan import conversion_costs
from .cost_models import ScoringContext, get_cost_model
from .ownership import ownership_error
from .frontend import ConvertOp, build_op_graph
from .gemm_plan import plan_gemms
from ..hardware import check_block_threads, func_target, normalize_target
from ..ir_utils import prim_func_pass
from .loop_nest import nest_of
from .op_rules import COMMON, FREE, STRICT, LoopDecision, check_cells_invertible, infer_op
from .result import Attempt, InferenceResult  # noqa: F401  (re-exported: they were defined here)
from .search_certificate import certify as _certify, copy_outcome as _copy_outcome
from ..thread_dims import fold_thread_dims, unfold_thread_dims
from .uninitialized import check_uninitialized_reads

__all__ = ["Attempt", "InferenceResult", "infer_layouts", "LayoutInference", "clear_caches"]

_SEARCH_ERRORS = (LayoutConflictError, InferenceError, LayoutError)


def _register_error_types() -> None:
    """A Pass runs ``infer_layouts`` inside a TVM FFI callback; exception types unknown to the FFI come
    back to the caller as RuntimeError. Registering ours (under qualified names) keeps them typed."""
    import tvm_ffi
    from tilelayout import errors
    from .frontend import FrontendError
    for cls in (errors.TileLayoutError, errors.LayoutError, errors.EvaluationError, errors.LayoutConflictError,
                errors.InferenceError, FrontendError):
        tvm_ffi.register_error(f"tilelayout.{cls.__name__}", cls)


_register_error_types()


class _State:
    """Layouts of one attempt (or of the committed result) and the BFS queue that feeds on them; the
    ``RuleState`` the per-op rules are handed (``rule_state.py`` declares what they may use)."""

    def __init__(self, engine: "_Engine"):
        self.engine = engine
        self.layouts: dict = {}
        self.setters: dict = {}
        self.loops: dict = {}
        self.strict: set = set()
        self.notes: list = []
        self.queue: deque = deque()
        self.queued: set = set()
        self.current = None

    def copy(self) -> "_State":
        out = _State(self.engine)
        out.layouts, out.setters, out.loops = dict(self.layouts), dict(self.setters), dict(self.loops)
        out.strict = set(self.strict)
        return out

    # -- facts the rules read
    @property
    def thread_range(self) -> tuple:
        """(min, extent) of the threads running the op being inferred (the whole block outside any op)."""
        graph = self.engine.graph
        return graph.op_thread_range(self.current) if self.current is not None else (0, graph.thread_extent)

    @property
    def threads(self) -> int:
        """How many threads run the op being inferred."""
        return self.thread_range[1]

    @property
    def block_threads(self) -> int:
        return self.engine.graph.thread_extent

    @property
    def target(self):
        return self.engine.target

    @property
    def thread_name(self) -> str:
        var = self.engine.graph.thread_var
        return var.name if var is not None else "threadIdx.x"

    def layout(self, buf):
        return self.layouts.get(buf.name)

    def setter(self, buf) -> str:
        op = self.setters.get(buf.name)
        return "a pinned layout" if op is None else op.describe()

    def loop(self, nest):
        return self.loops.get(nest.index)

    def set_loop(self, nest, decision: LoopDecision) -> None:
        self.loops[nest.index] = decision

    def pinned_loop(self, nest):
        return self.engine.pinned_loops.get(nest.index)

    def gemm_plan(self, op):
        return self.engine.gemm_plans[op.index]

    def note(self, text: str) -> None:
        self.notes.append(text)

    def memo(self, key: tuple, compute):
        """Reuse work across free-level attempts: rule results depend only on the op and layout keys."""
        cache = self.engine.memo
        if key in cache:
            hit = cache[key]
        else:
            try:
                hit = (True, compute())
            except _SEARCH_ERRORS as err:
                hit = (False, err)
            cache[key] = hit
        if not hit[0]:
            raise hit[1]
        return hit[1]

    # -- the one place layouts change
    def propose(self, buf, layout, op, level: int) -> None:
        name = buf.name
        if isinstance(layout, Fragment) and layout.thread_range is None:
            layout = layout.bind_thread_range(*self.thread_range)
        old = self.layouts.get(name)
        if old is None:
            self._set(buf, layout, op)
            return
        if old.is_equal(layout):
            return
        if buf.is_fragment and level != STRICT and name not in self.strict and isinstance(layout, Fragment) \
                and isinstance(old, Fragment) and layout.contains(old):
            self._set(buf, layout, op)      # upgrade to a superset of owners (e.g. more replicated)
            return
        if not buf.is_fragment:
            merged = _merge_swizzles(old, layout, buf)
            if merged is not None:
                self.layouts[name] = merged
                return
        raise LayoutConflictError(
            f"buffer {name}: {op.describe()} needs layout {layout!r}, but {self.setter(buf)} already gave it "
            f"{old!r}; pin one of them (tl.annotate_layouts) or stage the data through shared memory")

    def _set(self, buf, layout, op) -> None:
        self.layouts[buf.name] = layout
        self.setters[buf.name] = op
        for user in self.engine.users.get(buf.name, ()):
            if op is not None and user == op.index:
                continue
            if user not in self.queued:
                self.queued.add(user)
                self.queue.append(user)


def _merge_swizzles(a, b, buf):
    """The finer of two bank swizzles of one shared buffer, or None when they are not two swizzles of it
    (the caller then reports the two demands as a conflict)."""
    from tilelayout.swizzle import merge_swizzle_layouts
    try:
        return merge_swizzle_layouts(a, b, buf.dtype)
    except LayoutError:
        return None


class _Engine:
    def __init__(self, func, target, cost_model, budget: int | None = None, policy_override: dict | None = None,
                 graph=None, gemm_plans: dict | None = None):
        self.func = func
        self.budget = budget            # per-thread 32-bit registers; attempts over it lose (None: no limit)
        self.target = normalize_target(func_target(func, target))
        self.model = get_cost_model(cost_model)
        self.graph = graph if graph is not None else build_op_graph(func)      # ``graph``: func's, made already
        check_block_threads(self.graph.thread_extent, self.target, self.graph.func_name)
        names = [b.name for b in self.graph.buffers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InferenceError(f"buffers must have distinct names for layout inference; duplicated: {', '.join(dup)}")
        self.ops = list(self.graph.ops)
        self.nests = {op.index: nest_of(op) for op in self.ops}
        self.users = {}
        for op in self.ops:
            for b in op.buffers():
                self.users.setdefault(b.name, []).append(op.index)
        self.pinned_loops = self._pinned_loops()
        # ``gemm_plans``: the plans of a program whose gemms are these (an epilogue split's, see ``_try_splits``)
        self.gemm_plans = gemm_plans if gemm_plans is not None else plan_gemms(
            self.ops, self.graph.thread_extent, self.target, self.graph.op_thread_range, policy_override)
        self.attempts: list = []
        self.memo: dict = {}
        self.descriptions: dict = {}
        self.common: _State | None = None     # the state the free level started from (set by run)

    def describe(self, index: int) -> str:
        text = self.descriptions.get(index)
        if text is None:
            text = self.descriptions[index] = self.ops[index].describe()
        return text

    def _pinned_loops(self) -> dict:
        out = {}
        for op in self.ops:
            ann = getattr(op, "annotations", None) or {}
            raw = ann.get("tilelayout.loop_layout") if hasattr(ann, "get") else None
            if raw is not None:
                from tilelayout.annotate import decode_layout
                out[op.index] = decode_layout(raw)
        return out

    # ------------------------------------------------------------------ driver
    def run(self) -> _State:
        state = _State(self)
        self._pins(state)
        threads = self.graph.thread_extent
        for buf, _ in self.graph.floating:
            if state.layout(buf) is None:
                state.propose(buf, fully_replicated(buf.shape, threads), None, STRICT)
        for op in self.ops:
            self._step(state, op.index, STRICT)
        state.strict = set(state.layouts)
        state.queue.clear()
        state.queued.clear()
        self._drain_all(state, COMMON)
        self.common = state.copy()      # what the free level started from (``epilogue_reuse`` reads it)
        state = self._free(state)
        self._check_complete(state)
        return state

    def run_after_epilogue_split(self, prev: "_Engine", prev_state: _State, reader: int) -> _State | None:
        """``run()`` of this engine, whose function is ``prev``'s with the store ``reader`` converted first
        (an epilogue split), computed from ``prev``'s run: the same final state and attempts, or None when
        ``epilogue_reuse`` cannot show they are the same (the caller then runs in full)."""
        from .epilogue_reuse import later_attempts, only_split_changed, reuse_state, split_attempts
        start = reuse_state(self, prev, prev_state, reader)
        if start is None:
            return None
        begin, cid, before, after = start
        state = self._free(begin)           # only the split component is unsettled
        if not only_split_changed(self, begin, state, reader):
            self.attempts = []
            return None
        self.attempts = before + split_attempts(self, prev, prev_state, cid, self.attempts) + \
            later_attempts(after, begin, state, lambda n: self.graph.buffer(n).bits)
        # no _check_complete: every other op passed it in ``prev`` on the same layouts and loops, and the
        # search kept only an attempt whose component passed _check_component (the same checks, per op)
        return state

    def _pins(self, state: _State) -> None:
        """User pins (non-default TIRx layouts and tilelayout annotations) are strict-level facts."""
        from tilelayout.annotate import get_pinned_layouts
        # the front end found the buffers whose TIRx layout is not the default (``BufferInfo.pinned_layout``)
        tirx_layouts = [(b.var, b.pinned_layout) for b in self.graph.buffers if b.pinned_layout is not None]
        for name, layout in get_pinned_layouts(self.func, tirx_layouts).items():
            try:
                buf = self.graph.buffer(name)
            except KeyError:
                known = ", ".join(b.name for b in self.graph.buffers) or "none"
                raise InferenceError(f"a layout is pinned to buffer {name!r}, but {self.graph.func_name} has no such "
                                     f"buffer (buffers: {known})") from None
            validate_pin(buf, layout, self.graph.thread_extent)
            state.propose(buf, layout, None, STRICT)

    def _step(self, state: _State, index: int, level: int) -> None:
        op = self.ops[index]
        state.current = op
        infer_op(op, self.nests[index], level, state)

    def _drain_all(self, state: _State, level: int) -> None:
        for op in self.ops:
            state.queue.append(op.index)
            state.queued.add(op.index)
        self._drain(state, level)

    def _drain(self, state: _State, level: int) -> None:
        while state.queue:
            index = state.queue.popleft()
            state.queued.discard(index)
            self._step(state, index, level)

    # ------------------------------------------------------------------ free level
    def components(self) -> list:
        parent = list(range(len(self.ops)))

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for buf in self.graph.buffers:
            if not buf.is_fragment:
                continue
            group = self.users.get(buf.name, [])
            for other in group[1:]:
                a, b = find(group[0]), find(other)
                if a != b:
                    parent[max(a, b)] = min(a, b)
        comps: dict = {}
        for op in self.ops:
            comps.setdefault(find(op.index), []).append(op.index)
        return [comps[k] for k in sorted(comps)]

    def _settled(self, state: _State, members: list) -> bool:
        for i in members:
            op = self.ops[i]
            if self.nests[i] is not None and i not in state.loops:
                return False
            for buf in op.buffers():
                if buf.is_fragment and state.layout(buf) is None:
                    return False
        return True

    def _free(self, state: _State) -> _State:
        for cid, members in enumerate(self.components()):
            if self._settled(state, members):
                continue
            best, best_state, tried, certified, race = None, None, [], None, None
            for n, root in enumerate(members):
                if isinstance(self.ops[root], ConvertOp):
                    continue        # a conversion has no rule: rooting there repeats another attempt
                attempt = Attempt(cid, root, self.describe(root))
                if certified is not None:
                    # every attempt from this component's starting state ends in the certified one (see _certify):
                    # the same layouts and cost, so it ties and the earlier root keeps the win
                    _copy_outcome(attempt, certified)
                    attempt.note, attempt.conversions = certified.note, list(certified.conversions)
                    tried.append(attempt)
                    continue
                trial = state.copy()
                try:
                    self._step(trial, root, FREE)
                    self._drain(trial, FREE)
                    for m in members:
                        if m != root:
                            self._step(trial, m, FREE)
                            self._drain(trial, FREE)
                    self._check_component(trial, members)
                    cost = self.model.score([self.ops[m] for m in members], dict(trial.layouts),
                                            ScoringContext(self.graph, self.target,
                                                           {i: d.layout for i, d in trial.loops.items()}))
                    converts = conversion_costs([self.ops[m] for m in members], trial, self.graph, self.target)
                except _SEARCH_ERRORS as err:
                    attempt.error = str(err)
                    race = race or (err if isinstance(err, WriteRaceError) else None)
                    tried.append(attempt)
                    continue
                attempt.mem, attempt.regs, attempt.details = cost.mem, cost.regs, tuple(cost.details)
                attempt.registers = register_count32(
                    {n: l for n, l in trial.layouts.items() if isinstance(l, Fragment)},
                    lambda n: self.graph.buffer(n).bits)
                attempt.mem += sum(c.mem for _, c in converts)
                attempt.conversions = [{"src": op.src.buffer.name, "dst": op.dst.buffer.name, "op": op.describe(),
                                        "kind": c.kind, "cost": c} for op, c in converts]
                attempt.layouts = {b.name: trial.layouts[b.name] for m in members
                                   for b in self.ops[m].buffers() if b.name in trial.layouts}
                attempt.loops = {self.describe(m): trial.loops[m].layout for m in members if m in trial.loops}
                over = self._over_budget(trial.layouts, converts)
                if over is not None:
                    attempt.note = over
                tried.append(attempt)
                rank = (attempt.note is not None, attempt.mem, attempt.regs)
                if best is None or rank < (best.note is not None, best.mem, best.regs):
                    best, best_state = attempt, trial
                remaining = len(members) - n - 1
                # a certificate step meets new partial states (memo misses) while the remaining roots mostly
                # repeat memoised rule results: certify only when its steps are fewer than those roots' steps
                if remaining and _certify(self, state, trial, members, budget=remaining * len(members)):
                    certified = attempt
            self.attempts.extend(tried)
            if best is None and race is not None:
                raise WriteRaceError(str(race))      # no root avoids the race: the typed reason, as it was raised
            if best is None:
                reasons = "\n".join(f"  root {a.root_description}: {a.error}" for a in tried)
                raise InferenceError(f"no valid layout for the ops {', '.join(self.ops[m].describe() for m in members)}; "
                                     f"every attempt failed:\n{reasons}")
            best.chosen = True
            state = best_state
            state.queue.clear()
            state.queued.clear()
        return state

    def _over_budget(self, layouts: dict, converts=()) -> str | None:
        """Why an attempt's plan exceeds the register budget (it then loses to any attempt within it): the
        register peak of every fragment laid out so far (``register_liveness``), not their sum."""
        if self.budget is None:
            return None
        peak = plan_registers(self.graph, layouts, converts, self.gemm_plans, self.target)
        if peak.registers <= self.budget:
            return None
        return (f"over the register budget: a peak of {peak.registers} registers per thread > {self.budget} "
                f"(at {peak.point})")

    def _check_component(self, state: _State, members: list) -> None:
        for i in members:
            op = self.ops[i]
            if self.nests[i] is not None and i not in state.loops:
                raise InferenceError(f"{op.describe()}: no loop layout could be chosen")
            for buf in op.buffers():
                if buf.is_fragment and state.layout(buf) is None:
                    raise InferenceError(f"fragment {buf.name}: {op.describe()} left it without a layout")
        # a layout upgraded after a loop was decided (more replicas for a reduction) can leave that loop's
        # writes short of the new holders: such an attempt fails here, so the search keeps a valid one
        for i in members:
            if self.nests[i] is not None:
                self._check_ownership(state, i)
            else:
                check_cells_invertible(self.ops[i], state)

    def _check_ownership(self, state: _State, i: int) -> None:
        nest = self.nests[i]
        layout = state.loops[i].layout
        for k, a in enumerate(nest.accesses):
            if not a.buffer.is_fragment:
                continue
            frag = state.layout(a.buffer)
            err = state.memo(("own", i, k, layout.key, frag.key), lambda: ownership_error(nest, layout, a, frag))
            if err is not None:
                raise InferenceError(f"buffer {a.buffer.name}: final layouts are inconsistent in "
                                     f"{nest.describe()}: {err}")

    def _check_complete(self, state: _State) -> None:
        for buf in self.graph.fragments():
            if buf.name in self.users and state.layout(buf) is None:
                raise InferenceError(f"the layout of fragment {buf.name} cannot be inferred: no op determines it")
        for i, nest in self.nests.items():
            if nest is None:
                continue
            if i not in state.loops:
                raise InferenceError(f"{nest.describe()}: no loop layout could be chosen")
            self._check_ownership(state, i)
        for op in self.ops:
            if self.nests[op.index] is None:
                check_cells_invertible(op, state)


def validate_pin(buf, layout, threads: int) -> None:
    """A pinned layout must fit its buffer: the same shape, a Fragment for a register fragment (a Layout for a
    shared tile), thread ids inside the launched block, and no two elements in one (thread, slot) register."""
    what = _PinText(buf, layout)        # printed only for an error (printing a layout costs more than checking it)
    if not isinstance(layout, Layout):
        raise InferenceError(f"{what} is a {type(layout).__name__}, not a tilelayout Layout or Fragment")
    shape = [int(s) if isinstance(s, int) else s for s in layout.input_shape]
    if len(shape) != len(buf.shape) or any(isinstance(a, int) and isinstance(b, int) and a != b
                                           for a, b in zip(shape, buf.shape)):
        raise InferenceError(f"{what} covers shape {shape}, but the buffer has shape {list(buf.shape)}")
    if buf.is_fragment and not isinstance(layout, Fragment):
        raise InferenceError(f"{what} is a plain Layout; a register fragment needs a tl.Fragment (which thread holds "
                             f"each element)")
    if not buf.is_fragment and isinstance(layout, Fragment):
        raise InferenceError(f"{what} is a Fragment; only register fragments (scope local.fragment) take one, a "
                             f"{buf.scope} buffer takes a tl.Layout")
    if not layout.is_static:
        return
    if isinstance(layout, Fragment):
        table = layout.thread_table()
        lo, ext = layout.thread_range or (0, threads)
        low, high = int(table.min()), int(table.max())
        if low < 0 or lo + high >= threads or high >= ext:
            raise InferenceError(f"{what} gives threads {lo + low}..{lo + high}, outside the {threads} threads the "
                                 f"kernel launches (threadIdx.x in [0, {threads}))"
                                 + (f" or its thread range [{lo}, {lo + ext})" if layout.thread_range else ""))
        if _has_negative(layout):
            raise InferenceError(f"{what} gives negative register slots")
    elif _has_negative(layout):
        raise InferenceError(f"{what} gives negative addresses")
    err = layout.injectivity_error()
    if err is not None:
        raise InferenceError(f"{what} puts two elements in one place: {err}")


class _PinText:
    """How pin errors name the pin: formatted when an error message is built."""

    def __init__(self, buf, layout):
        self.buf, self.layout = buf, layout

    def __format__(self, spec: str) -> str:
        return format(f"the layout pinned to {self.buf.scope} buffer {self.buf.name} ({self.layout!r})", spec)


def _has_negative(layout) -> bool:
    table = np.asarray(layout.table())
    return bool(table.size) and int(table.min()) < 0


def clear_caches() -> None:
    """Forget every process-wide memo inference keeps (shared plans, containment answers): the next run is cold."""
    from tilelayout import fragment, tile_layout_interop
    from . import conversion, loop_plan
    from .cost_models import statement_score
    conversion.clear_caches()
    fragment.clear_caches()
    tile_layout_interop.clear_caches()
    loop_plan.clear_caches()
    statement_score.clear_caches()


def infer_layouts(func, target=None, cost_model=None, conflicts=None) -> InferenceResult:
    """Infer layouts of every fragment, shared tile and parallel loop of ``func`` (a TIRx PrimFunc, or an
    IRModule holding one).

    ``conflicts``: ``"convert"`` (default) resolves a layout conflict, or a plan over the register budget,
    by inserting the cheapest layout conversion (see ``conversion_plan``); ``"strict"`` keeps the behaviour
    without conversions (a conflict raises ``LayoutConflictError``). Also ``layout_config(conflicts=...)``
    and $TILELAYOUT_CONFLICTS."""
    func = _as_prim_func(func)
    if isinstance(func, tvm.tirx.PrimFunc):
        from ..float_cancellation import keep_ieee_semantics
        func = keep_ieee_semantics(func)    # before anything simplifies ``x != x`` or ``(3 + x) - 3`` away
        from ..named_scalars import inline_named_scalars
        func = inline_named_scalars(func)   # ``row0 = by * 64`` read by a tile op: its regions see ``by * 64``
        from ..index_binds import inline_index_binds
        func = inline_index_binds(func)     # a named index is inferred like the same expression inline
    folded, dims = fold_thread_dims(func) if isinstance(func, tvm.tirx.PrimFunc) else (func, None)
    if dims is not None:   # a multi-dimensional block: infer over the linear thread id, annotate the original
        result = infer_layouts(folded, target, cost_model, conflicts)
        result.func = unfold_thread_dims(result.func, dims)
        return result
    from .conversion_plan import infer_with_conversions
    try:
        if not isinstance(func, tvm.tirx.PrimFunc):
            return infer_with_conversions(func, target, cost_model, conflicts, _Engine, _SEARCH_ERRORS, _result)
        import warnings
        with warnings.catch_warnings(record=True) as first_warnings:
            warnings.simplefilter("always")
            result = infer_with_conversions(func, target, cost_model, conflicts, _Engine, _SEARCH_ERRORS, _result)
        from .auto_reducers import split_over_budget   # the plain gemv: rows over the register budget
        split = split_over_budget(func, result, lambda f: infer_with_conversions(
            f, target, cost_model, conflicts, _Engine, _SEARCH_ERRORS, _result))
        if split is result:          # the first inference stands: so do its warnings
            for w in first_warnings:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return split
    except LayoutConflictError as err:
        from .policy_hint import warp_policy_hint
        hint = warp_policy_hint(func, target, cost_model, conflicts, err, _Engine, _SEARCH_ERRORS, _result)
        if hint is None:
            raise
        raise hint from err


def _result(engine: _Engine, state: _State) -> InferenceResult:
    check_uninitialized_reads(engine.graph)
    func = engine.func
    buffers = {b.name: state.layouts[b.name] for b in engine.graph.buffers if b.name in state.layouts}
    loops, info, op_loops = {}, {}, {}
    for i, nest in engine.nests.items():
        if nest is None:
            continue
        op_loops[i] = state.loops[i]
        if nest.is_user_loop:
            loops[nest.key] = state.loops[i].layout
            info[nest.key] = state.loops[i]
    result = InferenceResult(buffers, loops, engine.attempts, func, engine.model.name, engine.target, info,
                             engine.graph, op_loops, dict(engine.gemm_plans))
    result.register_peak = plan_registers(engine.graph, buffers, conversion_costs(engine.ops, state, engine.graph,
                                                                                  engine.target), engine.gemm_plans,
                                          engine.target)
    from .annotations import annotate_result
    result.func = annotate_result(func, result)
    from .resources import warn_resources
    warn_resources(result)
    return result


def _as_prim_func(func):
    if isinstance(func, tvm.IRModule):
        funcs = [f for _, f in sorted(func.functions.items(), key=lambda kv: str(kv[0]))
                 if isinstance(f, tvm.tirx.PrimFunc)]
        if len(funcs) == 1:
            return funcs[0]
    return func


def LayoutInference(cost_model=None, target=None, conflicts=None):
    """A PrimFunc pass that annotates every function with its inferred layouts (see ``infer_layouts``)."""
    return prim_func_pass("tilelayout.LayoutInference",
                          lambda func: infer_layouts(func, func_target(func, target), cost_model, conflicts).func)
