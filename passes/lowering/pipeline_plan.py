"""Decide how each software-pipelined loop is lowered, once, before any tile op is lowered.

A serial loop annotated ``num_stages = s`` (TileLang's ``T.Pipelined(n, num_stages=s)``; in TIRx
``T.serial(n, annotations={"num_stages": s})``) is pipelined when ``s >= 2`` (``s = 1``: the copies still
go by cp.async, issued and waited for within their iteration): every shared tile a
global -> shared copy of the loop body writes gets ``s`` copies (a leading stage dimension, the same layout in
each stage), and the copy of iteration ``k + s - 1`` is issued while iteration ``k`` computes. This pass checks
that the loop can be pipelined as written and records the decision on the loop as the annotation
``tilelayout.pipeline`` = ``{"stages": s, "buffers": "A_s,B_s", "mode": "tma" | "cp.async" | "synchronous",
"note": why}`` (``"tma"``: one entry per copy, ``tma_plan``; sm_90a); ``software_pipeline.py`` reads it after vectorisation and never re-derives it.

Refused (``PipelineError`` naming the loop and the buffer or op):
- a pipelined tile written inside the loop by anything but a global -> shared copy, or used outside the loop;
- a pipelined copy that is not a direct statement of the loop body (under a nested loop or condition), or that
  comes after a read of its tile in the same iteration (the overlap would change what that read sees);
- a copy source written inside the loop;
- a loop under a thread-dependent condition (its barrier must be reached by the whole block);
- a loop that is not serial, an annotation that is not a constant integer, a loop with no global -> shared
  copy, or multi-buffered tiles over the target's shared-memory limit.

Targets without ``cp.async`` (before sm_80) keep the loop as written (synchronous copies, one buffer): the
decision says so (``mode = "synchronous"``) and the ``tilelayout.pipelines`` report of the lowered function
repeats it. The loop extent may be anything, also below ``s`` or symbolic: the schedule guards every issue.
"""
from __future__ import annotations

from tvm import tirx
from tvm.ir import TensorLoad
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.errors import PipelineError
from tilelayout.expr import mentions

from ..hardware import func_target, has_tma, normalize_target, sm_version
from .from_inference import CopyOp, build_op_graph
from .from_inference import stage_stride
from ..ir_utils import constant_numel, int_value, mapped, prim_func_pass, walk

__all__ = ["PlanPipelines", "STAGES_KEY", "PIPELINE_KEY", "PIPELINE_REPORT_ATTR", "plan_pipelines", "read_plan", "stage_stride"]

#: the user's loop annotation (TileLang's spelling)
STAGES_KEY = "num_stages"
#: the decision recorded on the loop
PIPELINE_KEY = "tilelayout.pipeline"
#: function attribute of the lowered kernel: {loop: how it was pipelined}
PIPELINE_REPORT_ATTR = "tilelayout.pipelines"


def read_plan(loop: tirx.For) -> dict | None:
    """The decision recorded on ``loop`` (None when it is not pipelined)."""
    ann = loop.annotations
    if ann is None or PIPELINE_KEY not in ann:
        return None
    raw = ann[PIPELINE_KEY]
    key = str(raw["loop"]) if "loop" in raw else f"loop {loop.loop_var.name}"
    out = {"stages": int(raw["stages"]), "buffers": [b for b in str(raw["buffers"]).split(",") if b],
           "mode": str(raw["mode"]), "note": str(raw["note"]), "loop": key}
    if "tma" in raw:
        out["tma"] = [dict(e) for e in raw["tma"]]
    return out


def _label(loop: tirx.For) -> str:
    return f"loop {loop.loop_var.name} (extent {loop.extent}, {STAGES_KEY}={loop.annotations[STAGES_KEY]})"


def _stages(loop: tirx.For) -> int:
    raw = loop.annotations[STAGES_KEY]
    value = int_value(raw) if not isinstance(raw, int) else raw
    if value is None or value < 0:
        raise PipelineError(f"{_label(loop)}: {STAGES_KEY} must be a non-negative integer constant, got {raw}")
    return value


def _items(body) -> list:
    return list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]


def _guarded_items(body, guard=None) -> list:
    """(guard, statement) for the loop body's statements: the statements of an ``if`` without ``else`` that
    holds a tile op come out one by one under that ``if`` (its condition is carried into every stage)."""
    out = []
    for it in _items(body):
        if isinstance(it, tirx.IfThenElse) and it.else_case is None and _has_tile_op(it):
            out.extend(_guarded_items(it.then_case, it if guard is None else guard))
        else:
            out.append((guard, it))
    return out


def _has_tile_op(stmt) -> bool:
    hits = []
    walk(stmt, [(TilePrimitiveCall, lambda n: hits.append(1))])
    return bool(hits)


def _loaded(node) -> list:
    out = []
    walk(node, [(TensorLoad, lambda e: out.append(e.source))])
    return out


def _stores_to(stmt, var) -> bool:
    hits = []
    walk(stmt, [(tirx.BufferStore, lambda s: hits.append(1) if s.buffer.same_as(var) else None)])
    return bool(hits)


def PlanPipelines(target=None):
    """Pass: record the pipelining decision on every ``num_stages`` loop (run after layout inference)."""
    return prim_func_pass("tilelayout.PlanPipelines", lambda func: plan_pipelines(func, func_target(func, target)))


def plan_pipelines(func, target=None):
    """``func`` with every ``num_stages`` loop annotated with its pipelining decision (module docstring)."""
    if not _has_annotated_loop(func.body):
        return func
    target = normalize_target(target)
    from ..thread_dims import fold_thread_dims
    graph = build_op_graph(fold_thread_dims(func)[0])    # the op graph models the linear thread id (y/z folded)
    shared_sizes = {b.name: b for b in graph.buffers if b.is_shared}
    from ..named_scalars import _uniform_loop_vars
    uniform = _uniform_loop_vars(func.body) + [v for v in func.params if not tirx.is_buffer_var(v)]
    keys = _loop_keys(func.body)

    def on_for(loop):
        if loop.annotations is None or STAGES_KEY not in loop.annotations or PIPELINE_KEY in loop.annotations:
            return loop
        stages = _stages(loop)
        if stages < 1:
            return loop                 # no stage: the loop stays as written
        # one stage overlaps nothing across iterations, but its copies still go by cp.async (no register
        # round trip), issued together at the top of the body (software_pipeline.py)
        if loop.kind != tirx.ForKind.SERIAL:
            raise PipelineError(f"{_label(loop)}: only serial loops can be pipelined, this one is {loop.kind}")
        decision = dict(_decide(loop, stages, graph, target, shared_sizes, uniform, func), loop=keys[_loop_id(loop)])
        notes = dict(loop.annotations)
        notes[PIPELINE_KEY] = decision
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding, notes,
                        loop.step)

    return func.with_body(mapped(func.body, [(tirx.For, on_for)]))


def _loop_id(loop: tirx.For) -> tuple:
    """What tells two annotated loops apart while ``mapped`` rebuilds the tree around them (their loop
    variables are distinct objects even when their names are equal)."""
    return (loop.loop_var.name, loop.loop_var.__hash__())


def _loop_keys(body) -> dict:
    """{loop id: report key} of the ``num_stages`` loops: ``loop k``, or ``loop k#2`` (its place among the loops
    of that name, in program order) when several pipelined loops share a name, so no two reports merge."""
    found: list = []
    walk(body, [(tirx.For, lambda f: found.append(f) if f.annotations is not None and STAGES_KEY in f.annotations
                 else None)])
    names = [f.loop_var.name for f in found]
    keys, seen = {}, {}
    for f in found:
        name = f.loop_var.name
        seen[name] = seen.get(name, 0) + 1
        keys[_loop_id(f)] = f"loop {name}" if names.count(name) == 1 else f"loop {name}#{seen[name]}"
    return keys


def _has_annotated_loop(body) -> bool:
    hits = []
    walk(body, [(tirx.For, lambda f: hits.append(1) if f.annotations is not None and STAGES_KEY in f.annotations
                 else None)])
    return bool(hits)


def _inside(op, loop) -> bool:
    return any(l.var is not None and l.var.same_as(loop.loop_var) for l in op.serial_loops)


def _writes(op):
    for name in ("dst", "c"):
        region = getattr(op, name, None)
        if region is not None:
            return region.buffer
    return None


def _decide(loop, stages: int, graph, target, shared_sizes: dict, uniform: list, func=None) -> dict:
    label = _label(loop)
    guarded = _guarded_items(loop.body)
    items = [it for _, it in guarded]
    guard_of = [g for g, _ in guarded]

    def item_of(stmt) -> int | None:
        for k, it in enumerate(items):
            if it.same_as(stmt):
                return k
            found = []
            walk(it, [(TilePrimitiveCall, lambda n: found.append(1) if n.same_as(stmt) else None)])
            if found:
                return k
        return None

    inner = [op for op in graph.ops if _inside(op, loop)]
    copies = [op for op in inner if isinstance(op, CopyOp) and op.dst.buffer.is_shared and op.src.buffer.is_global]
    if not copies:
        raise PipelineError(f"{label}: nothing to pipeline -- the loop body has no global -> shared copy "
                            f"(Tx.copy(shared_tile[...], global[...])); drop the {STAGES_KEY} annotation")
    buffers = []
    for op in copies:
        if not any(b is op.dst.buffer for b in buffers):
            buffers.append(op.dst.buffer)
    for op in copies:
        if op.thread_range is not None:
            lo, ext = op.thread_range
            raise PipelineError(f"{label}: {op.describe()} runs on threads [{lo}, {lo + ext}) only; the pipeline's "
                                f"block-wide barrier needs every thread (keep the loop out of thread conditions)")
        if not any(it.same_as(op.stmt) for it in items):
            raise PipelineError(f"{label}: {op.describe()} sits under a nested loop or an if with an else branch "
                                f"in the pipelined loop; a pipelined copy must be a statement of the loop body, "
                                f"or of an if (without else) directly in it")
    for guard in _dedup([g for g in guard_of if g is not None]):
        _check_guard(label, guard, loop, uniform, graph, inner)
    for buf in buffers:
        mine = [op for op in copies if op.dst.buffer is buf]
        for op in inner:
            if _writes(op) is buf and not any(op is c for c in mine):
                raise PipelineError(f"buffer {buf.name}: {label} multi-buffers it for its global copy, but "
                                    f"{op.describe()} also writes it inside the loop; only global -> shared "
                                    f"copies may write a pipelined tile")
        last_copy = max(item_of(op.stmt) for op in mine)
        guards = _dedup([guard_of[item_of(op.stmt)] for op in mine])
        if guards != [None] and len(guards) == 1:
            for k, it in enumerate(items):
                if guard_of[k] is not guards[0] and mentions(it, [buf.var]):
                    what = next((op.describe() for op in inner if item_of(op.stmt) == k), f"statement {k} of the body")
                    raise PipelineError(f"buffer {buf.name}: {label} copies it only when "
                                        f"{guards[0].condition}, but {what} uses it outside that if; with "
                                        f"{stages} stages it would see the tile of another iteration")
        elif len(guards) > 1:
            raise PipelineError(f"buffer {buf.name}: {label} copies it under different conditions; a pipelined "
                                f"tile is copied either unconditionally or under one if")
        for k, it in enumerate(items):
            if any(it.same_as(op.stmt) for op in mine):
                continue
            what = next((op.describe() for op in inner if item_of(op.stmt) == k), f"statement {k} of the body")
            if _stores_to(it, buf.var):
                raise PipelineError(f"buffer {buf.name}: {label} multi-buffers it for its global copy, but {what} "
                                    f"stores to it inside the loop; only global -> shared copies may write a "
                                    f"pipelined tile")
            if k < last_copy and mentions(it, [buf.var]):
                raise PipelineError(f"buffer {buf.name}: {label}: {what} reads it before its copy in the same "
                                    f"iteration; move the copies to the top of the loop body")
        outside = [op for op in graph.ops if not _inside(op, loop) and any(b is buf for b in op.buffers())]
        if outside or any(b is buf for b, _ in graph.floating):
            what = outside[0].describe() if outside else "an access outside any op"
            raise PipelineError(f"buffer {buf.name}: {label} multi-buffers it, but {what} uses it outside the loop; "
                                f"give that use its own shared tile")
    for op in copies:
        src = op.src.buffer
        # a view of a parameter (T.decl_buffer(..., data=X.data)) shares its storage with X and X's other views
        group = next((g for g in getattr(graph, "aliases", None) or [] if any(b is src for b in g)), [src])
        for same in group:
            if any(_writes(o) is same for o in inner) or _stores_to(loop.body, same.var):
                raise PipelineError(f"buffer {same.name}: {label} issues {op.describe()} ahead of time, but the "
                                    f"loop also writes {same.name}{'' if same is src else f' (the storage of {src.name})'}; "
                                    f"the early copy would read stale data")
        for index_buf in _loaded(op.stmt):
            if _stores_to(loop.body, index_buf) or any(_writes(o) is not None and _writes(o).var.same_as(index_buf)
                                                       for o in inner):
                raise PipelineError(f"buffer {index_buf.name}: {label} issues {op.describe()} ahead of time, but "
                                    f"its region reads {index_buf.name}, which the loop writes; the early copy "
                                    f"would use a stale offset")
    _check_shared_budget(label, stages, buffers, shared_sizes, target)
    names = ",".join(b.name for b in buffers)
    if sm_version(target) < 80:
        return {"stages": stages, "buffers": names, "mode": "synchronous",
                "note": f"{target.attrs.get('arch', target.kind.name)} has no cp.async (sm_80+): copies stay "
                        f"synchronous and single-buffered"}
    if stages == 1:         # nothing to overlap across iterations: TMA's mbarrier ring buys nothing here
        return {"stages": 1, "buffers": names, "mode": "cp.async",
                "note": f"1 stage of {names.replace(',', ', ')}: cp.async issued at the top of each iteration, "
                        f"waited for before its body computes"}
    note = (f"{stages} stages of {names.replace(',', ', ')}: cp.async for iteration k + {stages - 1} while iteration "
            f"k computes")
    if has_tma(target) and func is not None:
        from .tma_plan import plan_tma
        tma, why = plan_tma(func, copies, any(g is not None for g in guard_of), uniform, loop)
        if tma is not None:
            rest = f"; cp.async for the others, not TMA: {why}" if why else ""
            return {"stages": stages, "buffers": names, "mode": "tma", "tma": tma,
                    "note": f"{stages} stages of {names.replace(',', ', ')}: TMA (cp.async.bulk.tensor, mbarrier "
                            f"completion) for iteration k + {stages - 1} while iteration k computes; "
                            + "; ".join(describe_tma(e) for e in tma) + rest}
        note += f"; not TMA: {why}"
    return {"stages": stages, "buffers": names, "mode": "cp.async", "note": note}



def describe_tma(entry) -> str:
    """One TMA copy of a plan, as ``show`` prints it."""
    box = "x".join(str(int(b)) for b in entry["box"])
    return (f"{entry['buffer']} <- {entry['global']} by TMA ({int(entry['swizzle'])}B swizzle, box {box}, "
            f"{int(entry['panels'])} issue(s) per stage)")


def _dedup(items: list) -> list:
    out: list = []
    for x in items:
        if not any(x is y for y in out):
            out.append(x)
    return out


def _check_guard(label: str, guard, loop, uniform: list, graph, inner: list) -> None:
    """A condition carried into every stage must have one value for the whole block (the pipeline's barrier
    and wait are unconditional) and must read nothing the loop writes (it is evaluated ahead of time)."""
    cond = guard.condition
    loaded = _loaded(cond)
    thread_vars = [v for v in free_vars_of(cond) if not any(v.same_as(u) for u in uniform + loaded)]
    if thread_vars:
        raise PipelineError(f"{label}: the if ({cond}) around a pipelined copy depends on {thread_vars[0]}, which is "
                            f"not uniform over the block; its condition must use block ids, serial loop variables "
                            f"and memory only")
    for buf in loaded:
        if str(buf.scope()) not in ("global", "local") or _stores_to(loop.body, buf) or \
                any(_writes(o) is not None and _writes(o).var.same_as(buf) for o in inner):
            raise PipelineError(f"{label}: the if ({cond}) around a pipelined copy reads {buf.name}, which the "
                                f"loop writes or which is not global memory or a register; the condition is "
                                f"evaluated stages ahead")


def free_vars_of(expr) -> list:
    from tilelayout.expr import free_vars
    return list(free_vars(expr))


def _check_shared_budget(label: str, stages: int, buffers: list, shared: dict, target) -> None:
    from .from_inference import MAX_STATIC_SHARED_BYTES, shared_memory_limit, shared_tile_bytes
    static = dynamic = 0
    for name, b in shared.items():
        nbytes = shared_tile_bytes(constant_numel(b) or 0, b.dtype, stages if any(p is b for p in buffers) else 1)
        if b.scope.endswith(".dyn"):
            dynamic += nbytes
        else:
            static += nbytes
    limit = shared_memory_limit(target)
    if static > MAX_STATIC_SHARED_BYTES or static + dynamic > limit:
        raise PipelineError(f"{label}: {stages} stages of {', '.join(b.name for b in buffers)} need "
                            f"{static + dynamic} bytes of shared memory ({static} in static arrays; limits: "
                            f"{MAX_STATIC_SHARED_BYTES} static, {limit} in all); use fewer stages or smaller tiles")
