"""Which register fragments are live at each program point, and the register peak that follows.

A thread does not hold every fragment of a kernel at once: an attention kernel's score tile is dead once its
probabilities are built, an epilogue's accumulator once it is staged to shared memory. The register figure
that decides budgets (and that ptxas allocates) is the largest sum over the fragments live at one point, not
the sum over all fragments. This module computes it from the op graph alone; layouts only weigh the names.

The program is the op graph in program order, serial loops (``TileOp.serial_loops``) adding a back edge from
their last op to their first. Each op reads some fragments (``gen``) and may overwrite a whole fragment
without reading it first (``kill``: an unconditional full copy, fill, clearing gemm or reduction, or a
parallel nest that writes every element and reads none); classic backward liveness over that graph gives
the fragments live into and out of every op. A loop therefore keeps alive whatever an iteration reads that
an earlier iteration (or the code before the loop) wrote, and nothing else. The fragments live *at* an op
are those live into or out of it plus those it touches (a result nobody reads still needs its registers
while it is written).

A layout conversion through shared memory (``conversion_costs`` kind ``shared``) is two points: its source
is stored to shared memory before its destination is loaded, so the two coexist only when the source is
read later; staged in several rounds, one round of the destination is counted beside the larger of the two
(an estimate: rounds are balanced when every thread holds as many rows of the round on both sides). A no-op
conversion moves registers within a thread and is counted the same way; a shuffle conversion holds both.

What the fragments do not show is added as a documented estimate (``overhead_estimate``): the thread and
block indices, 64-bit global pointers, shared-memory addresses of pipelined stages and wgmma descriptors,
and the index registers of unrolled loops. See docs/cost-models.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

from .ops import ConvertOp, CopyOp, ElementwiseOp, FillOp, GemmOp, OpGraph, ParallelOp, ReduceOp, TileOp

__all__ = ["OpLiveness", "ProgramPoint", "RegisterPeak", "op_effects", "liveness", "program_points", "register_peak",
           "plan_registers", "peak_of", "thread_roles", "fragment_weights", "slot_weights", "overhead_estimate",
           "issues_wgmma", "gemm_operand_registers", "pipeline_stages", "pipelined_buffers", "BASE_REGISTERS", "POINTER_REGISTERS",
           "GEMM_DESCRIPTOR_REGISTERS", "PIPELINE_STAGE_REGISTERS", "INDEX_REGISTERS", "OPERAND_STEPS_IN_FLIGHT"]

#: thread index, block indices and the loop counter of the outermost serial loop (every kernel has them)
BASE_REGISTERS = 4
#: a global buffer's base address is a 64-bit pointer: two 32-bit registers
POINTER_REGISTERS = 2
#: a wgmma keeps two 64-bit shared-memory descriptors (A and B) live while it issues: four registers
GEMM_DESCRIPTOR_REGISTERS = 4
#: each stage of a software-pipelined loop keeps a shared-memory address (and its barrier's) in a register
PIPELINE_STAGE_REGISTERS = 2
#: address and index arithmetic of the unrolled loops of one op (offsets hoisted by ptxas)
INDEX_REGISTERS = 4


@dataclass(frozen=True)
class OpLiveness:
    """What op ``op_index`` reads and writes of the fragments, and which are live around it."""

    op_index: int
    reads: frozenset
    writes: frozenset
    kills: frozenset
    live_in: frozenset
    live_out: frozenset


@dataclass(frozen=True)
class ProgramPoint:
    """One point of the program: the fragments live there. ``rounds`` = (src, dst, chunks) marks the middle of a
    conversion staged through shared memory in rounds: src and dst then count as the larger of the two plus
    one round of the destination (``peak_of``). ``stream``: an element-wise op whose inputs die and whose outputs
    are born element by element (each step frees one input register and fills one output register), so the two
    groups count as the larger of them."""

    op_index: int
    label: str
    live: frozenset
    rounds: tuple | None = None
    stream: tuple | None = None      # (fragments the op reads last, fragments it writes first), element by element
    extra: int = 0                   # registers the op itself needs beyond fragments (``gemm_operand_registers``)


@dataclass
class RegisterPeak:
    """The register peak of a plan: at which point, which fragments are live there and what they take."""

    registers: int                       # fragments at the peak + the overhead estimate
    fragments: int                       # 32-bit registers of the fragments live at the peak
    overhead: int                        # ``overhead_estimate``
    op_index: int | None                 # the op where the peak occurs (None: no fragment is ever live)
    point: str                           # the op's description (with the phase of a staged conversion)
    live: dict = field(default_factory=dict)     # fragment name -> registers, live at the peak
    overhead_parts: dict = field(default_factory=dict)
    note: str = ""                               # how overlapping fragments were counted there
    roles: dict = field(default_factory=dict)    # "lo..hi" (threads) -> registers, where warps are specialised

    def line(self, limit: int) -> str:
        """One line, as ``tilelayout show`` and ``explain`` print it."""
        live = ", ".join(f"{n} {r}" for n, r in sorted(self.live.items(), key=lambda kv: (-kv[1], kv[0])))
        parts = ", ".join(f"{k} {v}" for k, v in self.overhead_parts.items())
        where = f"at {self.point}" if self.op_index is not None else "no fragment is live anywhere"
        note = f" ({self.note})" if self.note else ""
        roles = ("; per thread range: " + ", ".join(f"threads {r} {n}" for r, n in self.roles.items())
                 if self.roles else "")
        return (f"register peak per thread: {self.registers} x 32-bit (limit {limit}) {where}: live "
                f"{live or 'nothing'} = {self.fragments}{note}, plus an estimated {self.overhead} ({parts}){roles}")

    def to_dict(self) -> dict:
        return {"registers": self.registers, "fragments": self.fragments, "overhead": self.overhead,
                "overhead_parts": dict(self.overhead_parts), "op_index": self.op_index, "point": self.point,
                "live": dict(self.live), "note": self.note, "roles": dict(self.roles)}


# ------------------------------------------------------------------------------------------ per-op effects

def _full(region) -> bool:
    try:
        return bool(region.is_full)
    except Exception:  # noqa: BLE001 -- a symbolic extent that cannot be compared is not provably full
        return False


def _frag(region) -> str | None:
    return region.buffer.name if region is not None and region.buffer.is_fragment else None


def _parallel_kills(op: ParallelOp) -> set:
    """Fragments a parallel nest overwrites whole without reading: every write of the buffer indexes it by
    distinct nest variables that run over its shape from 0, and no access of the nest reads it, and the body
    holds no ``if`` (which could skip an element) nor inner loop."""
    from tvm import tirx
    from ..ir_utils import walk
    if op.inner_loops or any(not isinstance(m, int) or m != 0 for m in (_int(m) for m in op.mins)):
        return set()
    branches = []
    walk(op.body, [(tirx.IfThenElse, branches.append)])
    if branches:
        return set()
    extents = {v: _int(e) for v, e in zip(op.loop_vars, op.extents)}
    out = set()
    for buf in op.buffers():
        if not buf.is_fragment:
            continue
        accesses = op.accesses_of(buf)
        if any(a.is_read for a in accesses) or not any(a.is_write for a in accesses):
            continue
        if all(_covers(a, buf, extents) for a in accesses):
            out.add(buf.name)
    return out


def _int(e):
    try:
        return int(e)
    except (TypeError, ValueError):
        return None


def _covers(access, buf, extents: dict) -> bool:
    if len(access.indices) != len(buf.shape):
        return False
    seen = []
    for index, size in zip(access.indices, buf.shape):
        var = next((v for v in extents if index.same_as(v)), None)
        if var is None or any(var.same_as(s) for s in seen) or extents[var] is None or extents[var] != _int(size):
            return False
        seen.append(var)
    return True


def op_effects(op: TileOp) -> tuple:
    """(reads, writes, kills) of ``op``, as sets of fragment names. Ops of a kind this module does not know
    read and write every fragment they touch and kill none (the safe side: longer live ranges)."""
    reads, writes, kills = set(), set(), set()
    conditional = bool(op.conditions) or op.thread_range is not None

    def write(region, read_too: bool) -> None:
        name = _frag(region)
        if name is None:
            return
        writes.add(name)
        if read_too:
            reads.add(name)
        elif _full(region):
            kills.add(name)

    if isinstance(op, (CopyOp, ConvertOp)):
        if _frag(op.src):
            reads.add(_frag(op.src))
        write(op.dst, _frag(op.dst) == _frag(op.src))
    elif isinstance(op, FillOp):
        write(op.dst, False)
    elif isinstance(op, ReduceOp):
        if _frag(op.src):
            reads.add(_frag(op.src))
        write(op.dst, op.accum or _frag(op.dst) == _frag(op.src))
    elif isinstance(op, GemmOp):
        inputs = [op.a, op.b] + ([op.bias] if op.bias is not None and not op.clear else [])
        names = {_frag(r) for r in inputs} - {None}
        reads |= names
        write(op.c, _frag(op.c) in names or not op.clear)
    elif isinstance(op, ElementwiseOp):
        names = {_frag(r) for r in op.srcs if hasattr(r, "buffer")} - {None}
        reads |= names
        write(op.dst, _frag(op.dst) in names)
    elif isinstance(op, ParallelOp):
        for a in op.accesses:
            if a.buffer.is_fragment and a.is_read:
                reads.add(a.buffer.name)
            if a.buffer.is_fragment and a.is_write:
                writes.add(a.buffer.name)
        kills = _parallel_kills(op)
    else:
        names = {b.name for b in op.buffers() if b.is_fragment}
        reads |= names
        writes |= names
    if conditional:
        kills = set()                  # the op may not run in this thread: the old value survives it
    return reads, writes, kills


# ------------------------------------------------------------------------------------------ the dataflow

def _loops(ops: list) -> dict:
    """{id(loop): (first op, last op)} of every serial loop around some op (ops of a loop are contiguous)."""
    spans: dict = {}
    for op in ops:
        for loop in op.serial_loops:
            first, _ = spans.get(id(loop), (op.index, op.index))
            spans[id(loop)] = (first, op.index)
    return spans


def _floating_reads(graph: OpGraph) -> dict:
    """{op index: fragment names} of fragment accesses outside any op, charged to the op that follows them
    (``registered_before`` says how many had been met as each op began); all ops when that is not known."""
    out: dict = {}
    floating = [(b.name, k) for k, (b, _) in enumerate(graph.floating) if b.is_fragment]
    if not floating:
        return out
    marks = list(graph.registered_before)
    for name, k in floating:
        if len(marks) != len(graph.ops):
            for op in graph.ops:
                out.setdefault(op.index, set()).add(name)
            continue
        at = next((i for i, (_, seen) in enumerate(marks) if seen > k), len(graph.ops) - 1)
        out.setdefault(at, set()).add(name)
    return out


def liveness(graph: OpGraph) -> list:
    """``OpLiveness`` of every op of ``graph`` in program order (memoised on the graph)."""
    ops = list(graph.ops)
    cached = graph.__dict__.get("_register_liveness")
    if cached is not None and cached[0] == len(ops):
        return cached[1]
    effects = [op_effects(op) for op in ops]
    for at, names in _floating_reads(graph).items():
        effects[at][0].update(names)
    succ = [[i + 1] if i + 1 < len(ops) else [] for i in range(len(ops))]
    for first, last in _loops(ops).values():
        if first not in succ[last]:
            succ[last].append(first)
    live_in = [frozenset()] * len(ops)
    live_out = [frozenset()] * len(ops)
    changed = True
    while changed:                     # backward, to a fixed point (each loop adds one more sweep at most)
        changed = False
        for i in reversed(range(len(ops))):
            out = frozenset().union(*(live_in[s] for s in succ[i])) if succ[i] else frozenset()
            reads, _, kills = effects[i]
            inn = frozenset(reads) | (out - frozenset(kills))
            if out != live_out[i] or inn != live_in[i]:
                live_out[i], live_in[i], changed = out, inn, True
    # a fragment is live only once some write (or, read uninitialised, a read) can have reached the point:
    # a partial write kills nothing, so backward liveness alone would reach back to the kernel's start
    preds = [[] for _ in ops]
    for i, nexts in enumerate(succ):
        for s in nexts:
            preds[s].append(i)
    defined_out = [frozenset()] * len(ops)
    changed = True
    while changed:
        changed = False
        for i in range(len(ops)):
            inn = frozenset().union(*(defined_out[p] for p in preds[i])) if preds[i] else frozenset()
            out = inn | frozenset(effects[i][0]) | frozenset(effects[i][1])
            if out != defined_out[i]:
                defined_out[i], changed = out, True
    result = []
    for i, (op, (r, w, k)) in enumerate(zip(ops, effects)):
        inn = frozenset().union(*(defined_out[p] for p in preds[i])) if preds[i] else frozenset()
        result.append(OpLiveness(op.index, frozenset(r), frozenset(w), frozenset(k),
                                 live_in[i] & (inn | frozenset(r)), live_out[i] & defined_out[i]))
    graph.__dict__["_register_liveness"] = (len(ops), result)
    return result


def program_points(graph: OpGraph, conversions: dict | None = None, gemm_plans: dict | None = None,
                   target=None) -> list:
    """Every ``ProgramPoint`` of ``graph``; ``conversions``: {op index: ConversionCost} of its conversions
    (without one, a conversion holds both versions at once); ``gemm_plans``: {op index: GemmPlan} (an mma.sync
    gemm's point holds its operand fragments, ``gemm_operand_registers``)."""
    conversions = conversions or {}
    gemm_plans = gemm_plans or {}
    # every attempt of a search asks again: the points depend only on the conversions' ways, the gemms' operand
    # estimates and the graph, so they are memoised on the graph by those
    key = (len(graph.ops), tuple(sorted((i, getattr(c, "kind", None), int(getattr(c, "chunks", 1) or 1))
                                        for i, c in conversions.items())),
           tuple(sorted((i, gemm_operand_registers(p, target)) for i, p in gemm_plans.items())))
    memo = graph.__dict__.setdefault("_program_points", {})
    if key in memo:
        return memo[key]
    if len(memo) > 64:
        memo.clear()
    memo[key] = points = []
    for op, lv in zip(graph.ops, liveness(graph)):
        here = lv.live_in | lv.live_out | lv.reads | lv.writes
        cost = conversions.get(op.index)
        kind = getattr(cost, "kind", None)
        if isinstance(op, ConvertOp) and kind in ("shared", "noop") and _frag(op.src) and _frag(op.dst) \
                and _frag(op.src) != _frag(op.dst):
            src, dst = _frag(op.src), _frag(op.dst)
            before = (lv.live_in | lv.live_out) - {dst}
            after = lv.live_out | {dst} | (lv.live_in - ({src} if src not in lv.live_out else set()))
            verb = "stores" if kind == "shared" else "moves"
            points.append(ProgramPoint(op.index, f"{op.describe()}, before it {verb} {src}", frozenset(before)))
            chunks = int(getattr(cost, "chunks", 1) or 1)
            if kind == "shared" and chunks > 1 and src not in lv.live_out:
                points.append(ProgramPoint(op.index, f"{op.describe()}, in {chunks} rounds through shared memory",
                                           frozenset(before | after), (src, dst, chunks)))
            points.append(ProgramPoint(op.index, f"{op.describe()}, once it holds {dst}", frozenset(after)))
            continue
        extra = gemm_operand_registers(gemm_plans[op.index], target) if op.index in gemm_plans else 0
        points.append(ProgramPoint(op.index, op.describe(), frozenset(here), stream=_stream(op, lv), extra=extra))
    return points


def _stream(op: TileOp, lv: OpLiveness) -> tuple | None:
    """(dying inputs, born outputs) of an element-wise op that visits every element of each once, in the same
    order on both sides (a parallel nest indexing them by its loop variables, a full element-wise tile op or
    fragment-to-fragment copy); None otherwise or when nothing dies or nothing is born there."""
    dying = lv.reads - lv.live_out - lv.writes
    born = lv.writes - lv.live_in - lv.reads
    if not dying or not born:
        return None
    if isinstance(op, ParallelOp):
        if op.inner_loops:
            return None
        extents = {v: _int(e) for v, e in zip(op.loop_vars, op.extents)}
        if any(_int(m) != 0 for m in op.mins):
            return None
        for a in op.accesses:
            if a.buffer.name in dying | born and not _covers(a, a.buffer, extents):
                return None
    elif isinstance(op, (ElementwiseOp, CopyOp)):
        regions = [r for r in op.regions() if getattr(r, "buffer", None) is not None and r.buffer.is_fragment]
        if any(not _full(r) for r in regions) or len({tuple(map(str, r.buffer.shape)) for r in regions}) != 1:
            return None
    else:
        return None
    return frozenset(dying), frozenset(born)


#: k-steps of operand fragments an mma.sync gemm needs at once: the one it multiplies. ptxas hoists the next
#: step's ldmatrix above the current mma when registers are free (then it holds two); the budget counts the need
OPERAND_STEPS_IN_FLIGHT = 1


def issues_wgmma(plan, target=None) -> bool:
    """The gemm runs as wgmma: planned so, on an sm_90a target (elsewhere lowering realises a wgmma plan warp by
    warp with mma.sync; without a target, the plan is taken at its word)."""
    if getattr(plan, "instruction", None) != "wgmma":
        return False
    return target is None or str(target.attrs.get("arch", "")) == "sm_90a"


def gemm_operand_registers(plan, target=None) -> int:
    """Registers per thread the operands of one mma.sync gemm take while it runs (wgmma reads them from shared
    memory through descriptors; an operand already in a register fragment is counted as that fragment):
    ``OPERAND_STEPS_IN_FLIGHT`` k-steps of the warp's A rows and B columns."""
    import tvm
    if getattr(plan, "instruction", None) not in ("mma_sync", "wgmma") or issues_wgmma(plan, target):
        return 0
    total = 0
    k = int(plan.instr_k)
    if not plan.a_in_registers:
        total += math.ceil(plan.rows_per_warp * k * tvm.DataType(plan.a_dtype).bits / (32 * 32))
    total += math.ceil(plan.cols_per_warp * k * tvm.DataType(plan.b_dtype).bits / (32 * 32))
    return OPERAND_STEPS_IN_FLIGHT * total


# ------------------------------------------------------------------------------------------ the peak

def peak_of(points: list, weights: dict) -> tuple:
    """(registers, point) of the heaviest point; ``weights``: fragment name -> registers (names without a
    weight count 0: a fragment without a layout yet). Ties: the earliest point."""
    best, where = 0, None
    for p in points:
        total = sum(weights.get(n, 0) for n in p.live)
        if p.rounds is not None:
            src, dst, chunks = p.rounds
            s, d = weights.get(src, 0), weights.get(dst, 0)
            total += max(s, d) + math.ceil(d / chunks) - s - d
        if p.stream is not None:
            dying, born = (sum(weights.get(n, 0) for n in group) for group in p.stream)
            total += max(dying, born) - dying - born
        total += p.extra
        if where is None or total > best:
            best, where = total, p
    return best, where


def pipeline_stages(graph: OpGraph) -> dict:
    """{shared tile: stages} of the tiles that copies inside a software-pipelined loop (a serial loop annotated
    ``num_stages`` >= 2) fill: each is multi-buffered and keeps its stage address in registers."""
    from tvm import tirx
    from ..ir_utils import walk
    loops = []

    def on_for(node) -> None:
        stages = node.annotations.get("num_stages") if node.annotations is not None else None
        try:
            if stages is not None and int(stages) >= 2:
                loops.append((node.loop_var, int(stages)))
        except (TypeError, ValueError):
            pass
    body = getattr(getattr(graph, "func", None), "body", None)
    if body is None:
        return {}
    walk(body, [(tirx.For, on_for)])
    out: dict = {}
    for op in graph.ops:
        if not (isinstance(op, CopyOp) and op.dst.buffer.is_shared):
            continue
        for var, stages in loops:
            if any(loop.var is not None and loop.var.same_as(var) for loop in op.serial_loops):
                out[op.dst.buffer.name] = max(out.get(op.dst.buffer.name, 1), stages)
    return out


def pipelined_buffers(graph: OpGraph) -> int:
    """How many shared tiles pipelined loops multi-buffer (``pipeline_stages``)."""
    return len(pipeline_stages(graph))


def overhead_estimate(graph: OpGraph, gemm_plans: dict | None = None, target=None) -> dict:
    """{what: registers} the fragments do not show, as documented estimates (the constants above):
    ``gemm_plans`` {op index: GemmPlan} (a wgmma adds its descriptors); the shared tiles of pipelined loops
    (``pipelined_buffers``) add their stage addresses."""
    parts = {"indices": BASE_REGISTERS + INDEX_REGISTERS,
             "pointers": sum(1 for b in graph.buffers if b.is_global) * POINTER_REGISTERS}
    if any(issues_wgmma(p, target) for p in (gemm_plans or {}).values()):
        parts["wgmma descriptors"] = GEMM_DESCRIPTOR_REGISTERS
    staged = pipelined_buffers(graph)
    if staged:
        parts["pipeline addresses"] = staged * PIPELINE_STAGE_REGISTERS
    return parts


def register_peak(graph: OpGraph, layouts: dict, bits_of: Callable | None = None, conversions: dict | None = None,
                  overhead: dict | None = None, gemm_plans: dict | None = None, target=None) -> RegisterPeak:
    """The peak of ``layouts`` (fragment name -> Fragment; others ignored) over ``graph``'s program points, in
    32-bit registers (elements narrower than 32 bits packed, ``bits_of(name)`` their width, default the graph's)."""
    if bits_of is None:
        bits_of = lambda n: graph.buffer(n).bits  # noqa: E731
    weights = fragment_weights(layouts, bits_of)
    points = program_points(graph, conversions, gemm_plans, target)
    total, point = peak_of(points, weights)
    role_peaks = _role_peaks(graph, layouts, weights, points)
    parts = dict(overhead) if overhead is not None else {}
    base = sum(parts.values())          # the estimate alone: a range's gemm operands are in its own peak
    fragments = total - (point.extra if point is not None else 0)
    if point is not None and point.extra:
        parts["gemm operands"] = point.extra
    extra = sum(parts.values())
    if point is None or not fragments:
        live = {}
    else:
        live = {n: weights[n] for n in sorted(point.live) if weights.get(n)}
    note = ""
    if live and point.stream is not None and any(n in live for g in point.stream for n in g):
        dying, born = (", ".join(sorted(n for n in g if n in live)) for g in point.stream)
        note = f"{dying} read for the last time as {born} is written, element by element: the larger counts"
    elif live and point.rounds is not None:
        note = f"{point.rounds[0]} and {point.rounds[1]}: the larger, plus one round of {point.rounds[1]}"
    return RegisterPeak(fragments + extra, fragments, extra, point.op_index if point is not None and live else None,
                        point.label if point is not None and live else "", live, parts, note,
                        {r: n + base for r, n in role_peaks.items()})


def _role_peaks(graph: OpGraph, layouts: dict, weights: dict, points: list) -> dict:
    """{"lo..hi": fragment registers} of each thread range that holds its own fragments (``thread_roles``; empty
    when there is one). Threads of a range hold only the fragments bound to threads among them and need a
    gemm's operand registers only where they run it. The kernel's figure stays the peak over every fragment:
    registers are allocated per kernel, and ptxas cannot tell that two ranges' fragments never meet in one
    thread, so a range's figure is what ``setmaxnreg`` could give it, not what ptxas allocates."""
    roles = thread_roles(graph, layouts)
    out = {}
    for lo, hi in (roles if len(roles) > 1 else ()):
        mine = {n: w for n, w in weights.items() if _held_by(layouts[n], lo, hi, graph.thread_extent)}
        here = [p if not p.extra or _runs(graph, p.op_index, lo, hi) else replace(p, extra=0) for p in points]
        out[f"{lo}..{hi - 1}"] = peak_of(here, mine)[0]
    return out


def thread_roles(graph: OpGraph, layouts: dict) -> list:
    """The thread ranges [lo, hi) that hold different sets of fragments: the block cut at every bound of an op's
    thread range (``if tx < 128``: warp-specialised regions) and of a fragment's. One range when nothing is bound
    to part of the block."""
    threads = int(graph.thread_extent)
    cuts = {0, threads}
    for rng in [op.thread_range for op in graph.ops] + [getattr(lay, "thread_range", None) for lay in layouts.values()]:
        if rng is not None:
            lo, ext = int(rng[0]), int(rng[1])
            cuts.update(c for c in (lo, lo + ext) if 0 <= c <= threads)
    bounds = sorted(cuts)
    return list(zip(bounds, bounds[1:]))


def _held_by(layout, lo: int, hi: int, threads: int) -> bool:
    """Whether a thread of [lo, hi) holds elements of a fragment laid out as ``layout``."""
    rng = getattr(layout, "thread_range", None)
    start, ext = (int(rng[0]), int(rng[1])) if rng is not None else (0, int(threads))
    return start < hi and lo < start + ext


def _runs(graph: OpGraph, op_index: int, lo: int, hi: int) -> bool:
    """Whether a thread of [lo, hi) runs op ``op_index``."""
    start, ext = graph.op_thread_range(graph.ops[op_index])
    return start < hi and lo < start + ext


def fragment_weights(layouts: dict, bits_of: Callable) -> dict:
    """{fragment name: 32-bit registers per thread} of the fragments of static shape in ``layouts``."""
    out = {}
    for name, lay in layouts.items():
        shape = getattr(lay, "output_shape", None) if hasattr(lay, "forward_thread") else None
        if shape is not None and all(isinstance(s, int) for s in shape):
            out[name] = math.ceil(math.prod(shape) * bits_of(name) / 32)
    return out


def slot_weights(layouts: dict) -> dict:
    """{fragment name: register slots per thread} (elements whatever their width: the cost models' figure)."""
    out = {}
    for name, lay in layouts.items():
        shape = getattr(lay, "output_shape", None) if hasattr(lay, "forward_thread") else None
        if shape is not None:
            if not all(isinstance(s, int) for s in shape):
                raise ValueError(f"fragment {name!r} has a symbolic slot count {shape}; registers cannot be counted")
            out[name] = math.prod(shape)
    return out


def plan_registers(graph: OpGraph, layouts: dict, converts=(), gemm_plans: dict | None = None,
                   target=None) -> RegisterPeak:
    """The register peak a plan is budgeted on: ``layouts`` (every fragment laid out so far), ``converts``
    [(ConvertOp, ConversionCost)] of its conversions, ``gemm_plans`` for the wgmma estimate."""
    frags = {n: lay for n, lay in layouts.items() if hasattr(lay, "forward_thread")}
    return register_peak(graph, frags, conversions={op.index: cost for op, cost in converts},
                         overhead=overhead_estimate(graph, gemm_plans, target), gemm_plans=gemm_plans, target=target)
