"""What each op contributes at each inference level (TileLang's per-op InferLayout, defects fixed).

A rule reads the attempt's state and proposes layouts through ``state.propose``; it never decides
conflicts itself. Levels: STRICT (pinned/forced facts only), COMMON (propagate from known layouts),
FREE (may invent a layout when nothing constrains it).

One rule per op kind, kept together because they share the loop-decision helpers; fragment helpers are in
fragment_rules.py, the layouts a reduction implies in reduce_layouts.py, gemm plans in gemm_plan.py.

Size (about 610 lines): the loop-decision helpers (planning, validation, ownership, races) serve every op
kind's rule; split apart, each rule would import most of the others' private helpers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tilelayout.errors import InferenceError, LayoutConflictError, LayoutError, ReducerError, WriteRaceError
from tilelayout.fragment import Fragment

from .fragment_rules import (PartialCoverage, complete_fragment, dynamic_slot_accesses, everyone,
                             loop_from_fragment, ownership_error, reaches_partly)
from .ops import GemmOp, ReduceOp
from .reducers import has_reducer_updates, replicated_reducer_updates
from ..hardware import max_vector_load_bits
from .loop_nest import LoopNest
from .memory_writes import grouped_update_layout, memory_race, memory_update
from .rule_state import RuleState  # noqa: F401  (the state every rule here is handed)
from .loop_plan import plan_loop_layout, plan_vector_width, select_min_padding_width
from .reduce_layouts import combining_layout, reduced_layout, slot_count
from .scan_split import scan_of, split_lanes, split_loop_layout

STRICT, COMMON, FREE = 2, 1, 0
LEVEL_NAMES = {STRICT: "strict", COMMON: "common", FREE: "free"}

__all__ = ["STRICT", "COMMON", "FREE", "LEVEL_NAMES", "LoopDecision", "infer_op", "decide_loop",
           "check_conditioned_reduction", "check_cells_invertible"]


@dataclass(frozen=True)
class Derived:
    """How a loop layout came from a fragment: formatted only when someone reads it (the search builds
    thousands of decisions, and printing an access calls TVM's script printer)."""

    buffer: str
    access_key: int
    access: object = field(compare=False, hash=False)

    def __str__(self) -> str:
        return f"derived from {self.buffer} ({self.access})"


@dataclass(frozen=True)
class LoopDecision:
    """A loop nest's layout and the guards partitioning needs."""

    layout: Fragment
    predicate: str | None          # condition on the thread index, None when always true
    padding_guard: bool            # (slot, thread) cells beyond the loop domain exist
    replica_guard: bool            # stores to shared/global must be done by replica 0 only
    source: object                 # how it was chosen, for explanations: "planned", Derived(...), ...


def infer_op(op, nest: LoopNest | None, level: int, state: "RuleState") -> None:
    """Apply the rule of ``op`` at ``level`` (``state``: see ``rule_state.RuleState``)."""
    if nest is not None:
        _infer_nest(nest, level, state)
    elif isinstance(op, ReduceOp):
        _infer_reduce(op, level, state)
    elif isinstance(op, GemmOp):
        _infer_gemm(op, level, state)


# ------------------------------------------------------------------------------------------ loops

def _access_key(nest: LoopNest, access) -> int:
    return next(k for k, a in enumerate(nest.accesses) if a is access)


def _from_fragment(nest: LoopNest, access, frag: Fragment, state) -> Fragment:
    key = ("from", nest.index, _access_key(nest, access), frag.key)
    return state.memo(key, lambda: loop_from_fragment(nest, access, frag, state.thread_range))


def _ownership(nest: LoopNest, loop: Fragment, access, frag: Fragment, state):
    key = ("own", nest.index, _access_key(nest, access), loop.key, frag.key)
    return state.memo(key, lambda: ownership_error(nest, loop, access, frag))


def _complete(nest: LoopNest, loop: Fragment, access, state, read_only: bool) -> Fragment:
    key = ("complete", nest.index, _access_key(nest, access), loop.key, read_only)
    return state.memo(key, lambda: complete_fragment(nest, loop, access, state.thread_range, read_only))


def _infer_nest(nest: LoopNest, level: int, state) -> None:
    if level == STRICT:
        memory_update(nest)       # a store no layout can make race-free is refused before any search
        for buf in nest.fragments():
            accesses = nest.accesses_of(buf)
            if state.layout(buf) is None and any(a.is_constant for a in accesses):
                # constant-index accesses (s[0], s[1]) need the value in every thread (TileLang: only s[0])
                state.propose(buf, everyone(buf.shape, state.thread_range), nest.op, level)
        pinned = state.pinned_loop(nest)
        if pinned is not None and state.loop(nest) is None:
            _commit_loop(nest, pinned, "pinned by annotation", level, state)
        return
    if state.loop(nest) is not None:
        if state.pinned_loop(nest) is None and _writes_short_of_holders(nest, state.loop(nest).layout, state):
            # a fragment it writes gained holders after the loop was decided (replicated for a read elsewhere):
            # derive the loop again from the written fragment, or its writes would leave replicas stale
            del state.loops[nest.index]
        else:
            _complete_fragments(nest, state.loop(nest).layout, level, state)
            return
    candidates = _candidates(nest, level, state)
    if not candidates:
        return
    layout, source = _choose(nest, candidates, state)
    _commit_loop(nest, layout, source, level, state)


def _writes_short_of_holders(nest: LoopNest, loop: Fragment, state) -> bool:
    for a in nest.fragment_accesses():
        frag = state.layout(a.buffer)
        if a.is_write and not a.is_constant and frag is not None and _ownership(nest, loop, a, frag, state):
            return True
    return False


def _source_access(nest: LoopNest, state):
    """TileLang's choice: the last written fragment with a layout, else the first read non-replicated one."""
    written = [a for a in nest.fragment_accesses() if a.is_write and not a.is_constant and state.layout(a.buffer)]
    if written:
        return written[-1]
    for a in nest.fragment_accesses():
        lay = state.layout(a.buffer)
        if a.is_read and not a.is_constant and not a.reducer_update and lay is not None and lay.replicate_size == 1:
            return a
    return None


def _read_source_access(nest: LoopNest, state):
    best = None
    for a in nest.fragment_accesses():
        if a.is_read and not a.is_constant and not a.reducer_update and state.layout(a.buffer) is not None:
            if best is None or len(a.indices) > len(best.indices):
                best = a
    return best


def _candidates(nest: LoopNest, level: int, state) -> list:
    """(layout, source) candidates in preference order; empty when the op must wait for a later level."""
    update = memory_update(nest)
    if update is not None:
        return _update_candidates(nest, update, level, state)
    src = _source_access(nest, state)
    out = []
    if src is not None:
        out.append((_from_fragment(nest, src, state.layout(src.buffer), state), _derived(nest, src)))
        return out
    if level != FREE:
        return out
    read_src = _read_source_access(nest, state)
    if read_src is not None:
        try:
            out.append((_from_fragment(nest, read_src, state.layout(read_src.buffer), state),
                        _derived(nest, read_src)))
        except (LayoutError, InferenceError) as err:
            state.note(f"{nest.describe()}: no candidate from {read_src.buffer.name}: {err}")
    out.append((_plan(nest, state), "planned"))
    return out


def _update_candidates(nest: LoopNest, update, level: int, state) -> list:
    """An accumulation into memory from several iterations per element (``memory_writes``): the loop layout
    derived from a fragment when it already keeps each element's iterations in one thread, else (at the free
    level) the grouped plan, which does by construction; fragments then follow the loop or must serve it."""
    src = _source_access(nest, state)
    if src is not None:
        derived = _from_fragment(nest, src, state.layout(src.buffer), state)
        race = state.memo(("race", nest.index, derived.key), lambda: memory_race(nest, derived))
        if race is None:
            return [(derived, _derived(nest, src))]
        if src.is_write:
            raise WriteRaceError(f"{nest.describe()}: {update.statement} accumulates into {update.buffer} from "
                                 f"several iterations per element, but the loop must follow the layout of fragment "
                                 f"{src.buffer.name}, which it writes, and that layout spreads one element's "
                                 f"iterations over threads ({race}); split the nest so the memory update has a loop "
                                 f"of its own, or accumulate in a fragment and store it once")
    if level != FREE:
        return []
    layout = state.memo(("grouped", nest.index), lambda: grouped_update_layout(update, nest.extents, state.thread_range))
    return [(layout, f"one thread per element of {update.buffer}")]


def _derived(nest: LoopNest, access) -> Derived:
    return Derived(access.buffer.name, _access_key(nest, access), access)


def _plan(nest: LoopNest, state) -> Fragment:
    """A fresh loop layout; fragments the loop reaches only partly are planned over their whole shape."""
    partial = _partial_fragment_plan(nest, state)
    if partial is not None:
        return partial
    lanes = _scan_lanes(nest, state)
    if lanes > 1:          # a lang.cumsum row split over warp lanes: n / lanes registers instead of n
        return state.memo(("split-scan", nest.index, lanes), lambda: split_loop_layout(
            list(nest.extents), lanes, tuple(state.thread_range)))
    def plan():
        width = _vector_width(nest, state)
        if not nest.touches_fragment:
            width = select_min_padding_width(width, nest.size, state.threads)
        threads = state.threads
        layout = plan_loop_layout(nest.extents, threads, width, nest.touches_fragment, state.thread_range[0])
        while layout.replicate_size > 1 and threads > 1 and has_reducer_updates(nest):
            # fewer iterations than threads: a reducer update must run once, so leave the surplus threads idle
            threads //= 2
            layout = plan_loop_layout(nest.extents, threads, width, nest.touches_fragment, state.thread_range[0])
        return layout
    return state.memo(("plan", nest.index), plan)


def _scan_lanes(nest: LoopNest, state) -> int:
    """Lanes per row a lang.cumsum scan can be split over (1: keep the row in one thread); only while the
    scanned fragment has no layout yet."""
    scan = scan_of(nest.op)
    if scan is None or any(a.buffer.var.same_as(scan.dst) and state.layout(a.buffer) is not None
                           for a in nest.fragment_accesses()):
        return 1
    from ..hardware import warp_size
    return split_lanes(scan, list(nest.extents), state.threads, warp_size(state.target), tuple(state.thread_range),
                       state.block_threads, nest.op.conditions)


def _vector_width(nest: LoopNest, state, extents=None) -> int:
    max_bits = max_vector_load_bits(state.target, global_only=not nest.touches_shared and not nest.touches_fragment)
    accesses = [(a.buffer, a.indices, a.is_write) for a in nest.accesses if not a.is_constant]
    return plan_vector_width(nest.loop_vars, extents or nest.extents, accesses, max_bits, nest.value_lane_cap)


def _partial_fragment_plan(nest: LoopNest, state):
    """#2957: when the loop covers only part of a fragment with no layout yet, give the fragment a layout
    over its whole shape first (as a loop over the fragment would) and derive the loop from it."""
    for a in nest.fragment_accesses():
        if a.is_constant or a.reducer_update or state.layout(a.buffer) is not None:
            continue
        if len([b for b in nest.accesses_of(a.buffer) if not b.is_constant]) > 1:
            continue  # read at several indices: completion replicates it instead
        # exactly when completing the fragment through this access would raise PartialCoverage
        if state.memo(("probe", nest.index, _access_key(nest, a)), lambda: reaches_partly(nest, a)):
            buf = a.buffer
            frag = plan_loop_layout(list(buf.shape), state.threads, _fragment_width(buf, state), True,
                                    state.thread_range[0])
            state.propose(buf, frag, nest.op, FREE)
            return _from_fragment(nest, a, state.layout(buf), state)
    return None


def _fragment_width(buf, state) -> int:
    w = max(1, 128 // buf.bits)
    last = buf.shape[-1] if isinstance(buf.shape[-1], int) else 1
    while w > 1 and last % w:
        w //= 2
    return w


def _choose(nest: LoopNest, candidates: list, state):
    """Valid candidates only; fewer replicas first; among equals the one contained in the other."""
    if len(candidates) == 1:
        return candidates[0]
    valid, errors = [], []
    for layout, source in candidates:
        err = _validation_error(nest, layout, state)
        (valid if err is None else errors).append((layout, source) if err is None else err)
    if not valid:
        return candidates[0]
    if len(valid) == 1:
        return valid[0]
    buf_l, plan_l = valid[0][0], valid[-1][0]
    if nest.stores_memory:
        buf_spill, plan_spill = _thread_indexed(nest, buf_l, state), _thread_indexed(nest, plan_l, state)
        if buf_spill != plan_spill:
            return valid[-1] if buf_spill else valid[0]
    if buf_l.replicate_size != plan_l.replicate_size:
        return valid[0] if buf_l.replicate_size < plan_l.replicate_size else valid[-1]
    buf_has, plan_has = buf_l.contains(plan_l), plan_l.contains(buf_l)
    if buf_has and not plan_has:
        return valid[-1]
    if plan_has and not buf_has:
        return valid[0]
    return valid[-1]


def _thread_indexed(nest: LoopNest, loop: Fragment, state) -> bool:
    """Would some fragment's slot index depend on the thread under this loop layout (a local-memory spill)?"""
    return bool(dynamic_slot_accesses(nest, loop, state.layouts))


def _validation_error(nest: LoopNest, layout: Fragment, state) -> str | None:
    if not layout.is_injective():
        return f"loop layout {layout!r} is not injective"
    if replicated_reducer_updates(nest, layout):
        return replicated_reducer_updates(nest, layout)
    race = _race(nest, layout, state)
    if race is not None:
        return race
    for a in nest.fragment_accesses():
        frag = state.layout(a.buffer)
        if frag is not None:
            err = _ownership(nest, layout, a, frag, state)
            if err is not None:
                return err
    return None


def _checked_decision(nest: LoopNest, layout: Fragment, source: str, state, level: int | None = None) -> LoopDecision:
    """Validate ``layout`` for ``nest`` against the known fragment layouts and attach its guards. During
    inference (``level`` given) a fragment the nest only reads, whose layout does not serve the loop, is
    upgraded to full replication when nothing pinned it and the loop layout was not derived from it (a
    fragment read at ``i`` in one loop and at ``32 - i`` in another needs both holders); loops already
    decided that write it are derived again (see ``_infer_nest``)."""
    err = None if layout.is_injective() else layout.injectivity_error()
    if err is not None:
        raise InferenceError(f"{nest.describe()}: loop layout is not injective: {err}")
    check_runs_in_range(nest.op, layout, lambda: f"its loop layout ({source})", state)
    replicated = replicated_reducer_updates(nest, layout)
    if replicated is not None:
        raise ReducerError(f"{nest.describe()}: {replicated}")
    race = _race(nest, layout, state)
    if race is not None:
        raise WriteRaceError(f"{nest.describe()}: its loop layout ({source}) makes a data race: {race}; give every "
                             f"element one thread (drop the pinned layout), or accumulate in a register fragment "
                             f"and store it once, or use tilelayout.lang.atomic_add")
    update = memory_update(nest)
    if update is not None:
        try:
            return _checked_fragments(nest, layout, source, state, level)
        except LayoutConflictError as err:
            raise WriteRaceError(f"{nest.describe()}: {update.statement} accumulates into {update.buffer} from "
                                 f"several iterations per element, which must run in one thread, but a fragment the "
                                 f"nest touches is laid out otherwise: {err}. Accumulate in a register fragment "
                                 f"(Tx.sum(acc, F, axes=[1]) or `acc[i] = acc[i] + F[i, j]`) and store it once, or "
                                 f"use tilelayout.lang.atomic_add") from None
    return _checked_fragments(nest, layout, source, state, level)


def _race(nest: LoopNest, layout: Fragment, state) -> str | None:
    """Two threads of ``layout`` storing one memory element of ``nest`` (``memory_writes.memory_race``)."""
    if not nest.stores_memory:
        return None
    return state.memo(("race", nest.index, layout.key), lambda: memory_race(nest, layout))


def _checked_fragments(nest: LoopNest, layout: Fragment, source, state, level: int | None) -> LoopDecision:
    for a in nest.fragment_accesses():
        frag = state.layout(a.buffer)
        if frag is not None:
            err = _ownership(nest, layout, a, frag, state)
            if err is not None and level is not None and level != STRICT and a.buffer.name not in state.strict \
                    and not (isinstance(source, Derived) and source.buffer == a.buffer.name) \
                    and not any(b.is_write for b in nest.accesses_of(a.buffer)):
                all_hold = everyone(a.buffer.shape, state.thread_range)
                if all_hold.contains(frag.bind_thread_range(*state.thread_range) if frag.thread_range is None else frag):
                    state.propose(a.buffer, all_hold, nest.op, level)
                    frag = state.layout(a.buffer)
                    err = _ownership(nest, layout, a, frag, state)
            if err is not None:
                raise LayoutConflictError(f"buffer {a.buffer.name}: {nest.describe()} cannot use its loop layout "
                                          f"({source}) with the layout of {a.buffer.name} (set by {state.setter(a.buffer)}): "
                                          f"{err}")
    written = tuple(state.layout(a.buffer).key for a in nest.fragment_accesses()
                    if a.is_write and state.layout(a.buffer) is not None)
    return state.memo(("decision", nest.index, layout.key, source, written), lambda: LoopDecision(
        layout, _predicate(layout, state), _padding(layout, nest), _needs_replica_guard(nest, layout, state), source))


def _commit_loop(nest: LoopNest, layout: Fragment, source: str, level: int, state) -> None:
    state.set_loop(nest, _checked_decision(nest, layout, source, state, level))
    _complete_fragments(nest, layout, level, state)


def decide_loop(nest: LoopNest, state) -> LoopDecision:
    """The loop layout inference chooses for ``nest`` when every fragment it touches already has its layout
    in ``state`` (lowering uses this to rebuild the element loops of copy/fill tile ops from the annotated
    buffer layouts, with the very rules inference applied)."""
    candidates = _candidates(nest, FREE, state)
    if not candidates:
        raise InferenceError(f"{nest.describe()}: no loop layout can be derived from the given layouts")
    layout, source = _choose(nest, candidates, state)
    return _checked_decision(nest, layout, source, state)


def _predicate(layout: Fragment, state) -> str | None:
    ext = layout.thread_extent
    lo = (layout.thread_range or (0, state.block_threads))[0]
    if lo == 0 and ext >= state.block_threads:
        return None
    parts = []
    if lo > 0:
        parts.append(f"{lo} <= {state.thread_name}")
    parts.append(f"{state.thread_name} < {lo + ext}")
    return " and ".join(parts)


def _padding(layout: Fragment, nest: LoopNest) -> bool:
    cells = layout.thread_extent
    for s in layout.output_shape:
        cells *= s
    return cells != nest.size * layout.replicate_size


def _needs_replica_guard(nest: LoopNest, layout: Fragment, state) -> bool:
    """Replicated loops that store to shared/global let replica 0 do the side effect (once per element)."""
    if layout.replicate_size == 1 or not nest.stores_memory:
        return False
    frag_writes = [a for a in nest.fragment_accesses() if a.is_write]
    if frag_writes:
        for a in frag_writes:
            frag = state.layout(a.buffer)
            if frag is not None and frag.replicate_size != layout.replicate_size and not a.is_constant:
                raise InferenceError(f"{nest.describe()}: a replicated loop layout ({layout.replicate_size} replicas) "
                                     f"both stores to shared/global memory and writes fragment {a.buffer.name} "
                                     f"with {frag.replicate_size} replicas; split the loop")
    return True


def _complete_fragments(nest: LoopNest, layout: Fragment, level: int, state) -> None:
    for buf in nest.fragments():
        if state.layout(buf) is not None:
            continue
        accesses = [a for a in nest.accesses_of(buf) if not a.is_constant]
        if not accesses:
            continue
        writes = [a for a in accesses if a.is_write]
        access = writes[0] if writes else accesses[0]
        if not writes and len(accesses) > 1:
            # read at several indices (#3005): every running thread needs several elements; replicate
            state.propose(buf, everyone(buf.shape, state.thread_range), nest.op, level)
            continue
        try:
            frag = _complete(nest, layout, access, state, read_only=not writes)
        except PartialCoverage:
            if level != FREE:
                continue
            frag = plan_loop_layout(list(buf.shape), state.threads, _fragment_width(buf, state), True,
                                    state.thread_range[0])
            if not writes and any(_ownership(nest, layout, a, frag, state) for a in accesses):
                # only read here, by a loop the planned layout does not serve (a replicated loop reading
                # every other element): every thread holding everything always does
                frag = everyone(buf.shape, state.thread_range)
            state.propose(buf, frag, nest.op, level)
            frag = state.layout(buf)
            for a in accesses:
                err = _ownership(nest, layout, a, frag, state)
                if err is not None:
                    raise LayoutConflictError(f"buffer {buf.name}: {err}")
            continue
        for a in accesses:
            if a is not access:
                err = _ownership(nest, layout, a, frag, state)
                if err is not None:
                    raise LayoutConflictError(f"buffer {buf.name}: {nest.describe()} accesses it at two indices that "
                                              f"no single layout serves: {err}")
        state.propose(buf, frag, nest.op, level)


def check_runs_in_range(op, layout: Fragment, what, state) -> None:
    """Refuse a layout that puts work of ``op`` on threads its enclosing conditions do not let run it (a loop
    derived from a fragment held by all 128 threads, inside ``if tx < 64``: half of it would never run).
    ``what`` names the layout: a string, or a callable giving it (formatted only for the error)."""
    lo, ext = state.thread_range
    first = (layout.thread_range or (lo, ext))[0]
    last = first + min((layout.thread_range or (lo, ext))[1], int(layout.thread_extent))
    if first < lo or last > lo + ext:
        what = what() if callable(what) else what
        raise LayoutConflictError(
            f"{op.describe()} runs on threads [{lo}, {lo + ext}) (its enclosing conditions), but {what} puts work "
            f"on threads [{first}, {last}): {layout!r}; give the fragments it touches layouts bound to that thread "
            f"range (use them only inside the same `if`), or move the op out of the condition")


# ------------------------------------------------------------------------------------------ reduce

def _infer_reduce(op: ReduceOp, level: int, state) -> None:
    if level == STRICT:
        return
    src, dst = op.src.buffer, op.dst.buffer
    if not src.is_fragment:
        if dst.is_fragment and state.layout(dst) is None and level == FREE:
            layout = plan_loop_layout(list(dst.shape), state.threads, 1, True, state.thread_range[0])
            state.propose(dst, layout, op, level)
        return
    if not op.src.is_full or (dst.is_fragment and not op.dst.is_full):
        raise InferenceError(f"{op.describe()}: reductions over part of a fragment are not supported; "
                             f"reduce the whole fragment")
    src_layout = state.layout(src)
    if src_layout is None:
        return
    check_runs_in_range(op, src_layout, f"the layout of its source {src.name}", state)
    if not dst.is_fragment:
        return
    out = state.memo(("reduce", op.index, src_layout.key), lambda: reduced_layout(src_layout, op.axes))
    if list(out.input_shape) != list(dst.shape):
        raise InferenceError(f"{op.describe()}: destination shape {list(dst.shape)} does not match the reduced "
                             f"shape {out.input_shape}")
    old = state.layout(dst)
    if old is not None and old.contains(out):
        return      # every holder of a source row already holds its result (extra holders get it too)
    if isinstance(old, Fragment) and slot_count(old) < slot_count(out) and out.contains(old):
        # a consumer gave the destination fewer registers and only threads that hold a source row: after the
        # cross-thread combine every holder of the row has the result, and these owners keep it
        return
    try:
        state.propose(dst, out, op, level)  # new, or an upgrade of a layout with fewer holders
    except LayoutConflictError:
        raise LayoutConflictError(
            f"buffer {dst.name}: {op.describe()} needs every thread that holds a source row to hold its result "
            f"({out!r}), but {state.setter(dst)} gave it {old!r}") from None


def check_cells_invertible(op, state) -> None:
    """Reductions and gemms are lowered by walking, in each thread, the register slots a fragment gives it, which
    needs the fragment's inverse in closed form; refuse a layout without one here, not in lowering.

    A layout whose constructor proved the inverse exists (``Fragment.inverse_known_to_exist``: a gemm's own
    accumulator and register operands, a planned loop's layout) is not inverted again: checking one took a fifth
    of a pipelined sm_90 gemm's inference."""
    if not isinstance(op, (ReduceOp, GemmOp)):
        return
    for region in op.regions():
        buf = region.buffer
        lay = state.layout(buf) if buf.is_fragment else None
        if lay is None:
            continue
        if isinstance(lay, Fragment) and lay.inverse_known_to_exist():
            continue
        try:
            lay.inverse_with_info(allow_padding=True)
        except LayoutError as err:
            raise InferenceError(f"buffer {buf.name}: {op.describe()} walks the registers of its layout {lay!r}, "
                                 f"which has no closed-form inverse: {err}") from None
    if isinstance(op, ReduceOp):
        check_conditioned_reduction(op, state)


def check_conditioned_reduction(op: ReduceOp, state) -> None:
    """A reduction under a thread-dependent condition may combine partials only with warp shuffles: the
    shared-memory exchange needs a block-wide barrier that threads outside the condition never reach. Nor
    may its result have holders outside the condition: they never run the reduction and would keep a stale
    value (fuzz seed 1920: a one-element destination upgraded to every thread by a later store, after the
    reduction under ``if tx >= 26`` had given it threads 26-29)."""
    if op.thread_range is None or not op.src.buffer.is_fragment or state.layout(op.src.buffer) is None:
        return
    from ..hardware import warp_size
    from ..all_reduce import needs_barrier
    dst = state.layout(op.dst.buffer) if op.dst.buffer.is_fragment else None
    work = combining_layout(reduced_layout(state.layout(op.src.buffer), op.axes), dst)
    if work is None or not work.is_static:
        return
    lo, ext = op.thread_range
    holders = work.holder_table()
    if holders.size and (int(holders.min()) < lo or int(holders.max()) >= lo + ext):
        raise LayoutConflictError(
            f"buffer {op.dst.buffer.name}: {op.describe()} runs on threads [{lo}, {lo + ext}) (its enclosing "
            f"conditions) and needs every thread that holds its result to run it, but {state.setter(op.dst.buffer)} "
            f"gave {op.dst.buffer.name} holders outside them ({work!r}), which would keep a stale value; read the "
            f"result through a copy made after the condition, or reduce outside it")
    if needs_barrier(work, state.block_threads, warp_size(state.target)):
        raise InferenceError(
            f"{op.describe()} runs under a thread-dependent condition (threads [{lo}, {lo + ext})), but the holders of "
            f"a result element ({work!r}) span warps, so combining them needs a block-wide barrier that the other "
            f"threads never reach; make the range whole warps holding whole rows, or reduce outside the condition")


# ------------------------------------------------------------------------------------------ gemm

def _infer_gemm(op: GemmOp, level: int, state) -> None:
    """The gemm's plan (decided once for the kernel, see ``gemm_plan``) fixes its accumulator and, for a
    register A operand, the A fragment; shared operands get the widest bank swizzle the tile allows."""
    if level != STRICT:
        return
    from tilelayout import swizzle
    plan = state.gemm_plan(op)
    # the MMA instruction fixes these layouts: propose them even over a pin, so a pin that disagrees is
    # reported as a conflict (and two bank swizzles of a shared operand merge to the finer one)
    thread_range = getattr(state, "thread_range", None)

    def bound(frag):
        return frag.bind_thread_range(*thread_range) if thread_range is not None else frag
    if op.c.buffer.is_fragment:
        _propose_operand(op, "accumulator", op.c.buffer, bound(plan.accumulator_fragment()), plan, level, state)
    if op.a.buffer.is_fragment:
        if not op.a.is_full:
            raise InferenceError(f"{op.describe()}: the register A operand must be the whole fragment "
                                 f"{op.a.buffer.name} (its layout is the instruction's A fragment)")
        _propose_operand(op, "operand A", op.a.buffer, bound(plan.a_fragment()), plan, level, state)
    for region in (op.a, op.b):
        buf = region.buffer
        if buf.is_shared and region.is_full:
            # MMA operands staged in shared memory get the widest bank swizzle the tile allows
            state.propose(buf, swizzle.make_swizzled_layout(list(buf.shape), buf.dtype, None), op, level)


def _propose_operand(op: GemmOp, role: str, buf, layout: Fragment, plan, level: int, state) -> None:
    """Propose the instruction's register layout for a gemm fragment; a clash names the gemm, the operand, the
    layout the instruction needs and what would work instead."""
    try:
        state.propose(buf, layout, op, level)
    except LayoutConflictError:
        old = state.layout(buf)
        fix = ("stage A in shared memory, or copy it into a fresh fragment first (`Tx.copy(P, S)`: the copy "
               "re-lays it out)" if role == "operand A" else
               "accumulate into a fragment of its own and copy the result where it is needed")
        raise LayoutConflictError(
            f"buffer {buf.name}: {op.describe()}: {role} {buf.name} must have the {plan.describe()} register "
            f"layout {layout!r} to feed the instruction, but {state.setter(buf)} gave it {old!r}; {fix}") from None
