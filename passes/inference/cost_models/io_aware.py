"""io-aware: charge each attempt the global-memory traffic its layouts imply (TileLang's IOAwareCostModel).

Statements modelled: fragment <-> global copies and parallel nests that touch global memory directly.
Each costs max(issue bytes, bandwidth bytes) per global access (see statement_score.py). Statements the
model does not cover (shared staging, register moves, reductions, gemm) cost 0; covered statements that
cannot be scored (symbolic or non-affine addresses, sub-byte types, non-bijective layouts) cost the
worst case, every element its own segment, so opacity never pays.

Beyond TileLang (whose documentation claims, but whose code lacks, a spill term): when a loop layout
makes a fragment's register slot depend on the thread index, or on a serial loop variable, the fragment
cannot live in registers and is spilled to local memory; every such access is charged as local-memory
traffic (one load or store of the element per executed access, at segment granularity per warp).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..fragment_rules import dynamic_slot_accesses
from ..ops import CopyOp, ParallelOp
from ...hardware import max_vector_load_bits, vector_lanes_limit, warp_size, widening_load_bits
from ..loop_nest import nest_of
from .affine_address import affine_address
from .base import AttemptCost, ScoringContext, count_register_slots
from .statement_score import SEGMENT_BYTES, STATEMENT_COSTS, GlobalAccess, Unconvertible, score_cute

__all__ = ["IOAwareModel", "Statement", "component_statements", "score_statement"]


@dataclass
class Statement:
    """One modelled statement: a fragment (or loop) layout over a domain and its global accesses."""

    op_index: int
    description: str
    frag: object
    accesses: list = field(default_factory=list)       # list[GlobalAccess]
    repeat: int | None = 1
    global_only: bool = True
    worst_elements: int = 0
    unscorable: str | None = None
    spill_accesses: list = field(default_factory=list)  # (buffer name, elem_bytes) spilled fragment accesses
    global_count: int = 1                                # every global access, scorable or not (worst case)
    element_bits: tuple = ()                             # bits of every element the statement moves (lane cap)
    widening_from: int | None = None                     # memory bits of a converting load into wider registers


@dataclass(frozen=True)
class StatementCost:
    statement: str
    cost: int
    scores: tuple = ()
    note: str = ""


def component_statements(ops, layouts: dict, loops: dict, graph) -> list:
    """The statements of ``ops`` the model covers, under the attempt's buffer and loop layouts."""
    out = []
    for op in ops:
        nest = nest_of(op) if isinstance(op, (CopyOp, ParallelOp)) else None
        st = op_statement(op, nest, layouts, loops, graph) if nest is not None else None
        if st is not None:
            out.append(st)
    return out


def statement_key(op, nest, layouts: dict, loops: dict):
    """What a statement's cost depends on: the op, its fragment or loop layout, and (for the spill term)
    the layouts of the fragments it touches. None when the op makes no statement under these layouts."""
    if isinstance(op, CopyOp):
        frags = nest.fragment_accesses()
        frag = layouts.get(frags[0].buffer.name) if frags else None
        return None if frag is None else (op.index, frag.key)
    loop = loops.get(op.index)
    if loop is None:
        return None
    touched = tuple(layouts[b.name].key if b.name in layouts else None for b in nest.fragments())
    return (op.index, loop.key, touched)


def op_statement(op, nest, layouts: dict, loops: dict, graph) -> Statement | None:
    """The modelled statement of one copy or parallel nest, or None when it is outside the model."""
    globals_ = [a for a in nest.accesses if a.buffer.is_global]
    if not globals_:
        # a register-only loop moves no global memory, but a spilled fragment still costs local traffic
        loop = loops.get(op.index) if isinstance(op, ParallelOp) else None
        spilled = _spilled_accesses(nest, loop, layouts) if loop is not None else []
        if spilled:
            return Statement(op.index, op.describe(), loop, repeat=op.serial_repeat, worst_elements=nest.size,
                             global_count=0, spill_accesses=spilled)
        return None
    if isinstance(op, CopyOp):
        frags = nest.fragment_accesses()
        if not frags:
            return None  # global <-> shared staging is outside the model
        frag = layouts.get(frags[0].buffer.name)
        region = op.dst if frags[0].is_write else op.src
        unscorable = None
        if frag is None or not hasattr(frag, "forward_thread"):
            return None
        if not region.is_full or list(frag.input_shape) != list(nest.extents):
            unscorable = "copy does not cover the whole fragment"
    else:
        frag = loops.get(op.index)
        if frag is None:
            return None
        unscorable = None
    st = Statement(op.index, op.describe(), frag, repeat=op.serial_repeat,
                   global_only=not nest.touches_shared, worst_elements=nest.size, global_count=len(globals_),
                   element_bits=tuple(sorted({a.buffer.bits for a in nest.accesses})),
                   widening_from=widening_load_bits([(a.buffer.bits, a.buffer.is_fragment or a.buffer.is_local,
                                                      a.is_write, a.buffer.dtype) for a in nest.accesses]))
    if st.repeat is None:
        unscorable = "symbolic serial repeat"
    for a in globals_:
        bits = a.buffer.bits
        if bits < 8 or bits % 8:
            unscorable = unscorable or f"sub-byte element type of {a.buffer.name}"
            continue
        affine = affine_address(a, nest, graph)
        if affine is None:
            unscorable = unscorable or f"non-affine address of {a}"
            continue
        strides, base = affine
        st.accesses.append(GlobalAccess(a.buffer.name, strides, base, bits // 8, a.is_write))
    if isinstance(op, ParallelOp):
        st.spill_accesses = _spilled_accesses(nest, frag, layouts)
    st.unscorable = unscorable
    return st


def _spilled_accesses(nest, loop, layouts: dict) -> list:
    return [(a.buffer.name, max(1, a.buffer.bits // 8)) for a in dynamic_slot_accesses(nest, loop, layouts)]


def worst_case_bytes(st: Statement) -> int:
    """Every executed element access its own segment: replicas execute too, so a replicated statement is
    charged per (element, replica) -- never less than any score the statement could have had."""
    replicas = int(getattr(st.frag, "replicate_size", 1) or 1)
    return max(1, st.global_count) * st.worst_elements * replicas * (st.repeat or 1) * SEGMENT_BYTES


def spill_bytes(st: Statement, warp: int) -> int:
    """Local-memory traffic of spilled fragment accesses: each executed access moves its element; a warp's
    32 lanes hit 32 distinct local addresses, i.e. one segment per lane group of 128/elem bytes."""
    if not st.spill_accesses:
        return 0
    frag = st.frag
    executed = int(frag.thread_extent) * int(math.prod(frag.output_shape))
    total = 0
    for _, elem_bytes in st.spill_accesses:
        total += (st.repeat or 1) * executed * max(elem_bytes, SEGMENT_BYTES // warp)
    return total


def score_statement(st: Statement, target) -> StatementCost:
    """Cost of one statement: sum over its global accesses of max(issue, bandwidth), plus spill traffic.
    Scored once per content (layout, accesses, geometry): the same statement recurs across attempts, across
    the trial runs of conversion planning and across ops (a fragment loaded and stored through equal strides)."""
    warp = warp_size(target)
    vector_bits = max_vector_load_bits(target, st.global_only)
    lanes = vector_lanes_limit(target, st.element_bits, st.global_only, st.widening_from) if st.element_bits else None
    key = (st.frag.key, tuple((a.strides, a.base, a.elem_bytes, a.is_store) for a in st.accesses), st.repeat,
           st.unscorable, tuple(st.spill_accesses), st.global_count, st.worst_elements, warp, vector_bits, lanes)
    hit = STATEMENT_COSTS.get(key)
    if hit is None:
        if len(STATEMENT_COSTS) > 4096:
            STATEMENT_COSTS.clear()
        hit = STATEMENT_COSTS[key] = _score(st, warp, vector_bits, lanes)
    return StatementCost(st.description, *hit)


def _score(st: Statement, warp: int, vector_bits: int, lanes) -> tuple:
    """(cost, scores, note) of ``score_statement``."""
    spill = spill_bytes(st, warp)
    if not st.global_count:
        return spill, (), f"spill {spill}"
    if st.unscorable is not None:
        return worst_case_bytes(st) + spill, (), f"worst case: {st.unscorable}"
    scores = score_cute(st.frag, st.accesses, st.repeat or 1, vector_bits, warp, max_lanes=lanes)
    if isinstance(scores, Unconvertible):
        return worst_case_bytes(st) + spill, (), f"worst case: {scores.reason}"
    note = f"spill {spill}" if spill else ""
    return sum(s.cost for s in scores) + spill, tuple(scores), note


class IOAwareModel:
    """Attempt cost = sum of statement costs. One instance serves one inference run, so statement costs
    are cached by what they depend on (op, layout keys): attempts that agree on a statement score it once."""

    name = "io-aware"

    def __init__(self):
        self._costs: dict = {}

    def score(self, component, candidate_layouts: dict, context: ScoringContext) -> AttemptCost:
        if context.graph is not getattr(self, "_graph", None):  # a reused instance: new kernel, new caches
            self._graph, self._target = context.graph, context.target
            self._costs = {}
        costs = []
        for op in component:
            if not isinstance(op, (CopyOp, ParallelOp)):
                continue
            nest = nest_of(op)          # kept on the op (``loop_nest.nest_of``)
            key = statement_key(op, nest, candidate_layouts, context.loop_layouts)
            if key is None:
                continue
            if key not in self._costs:
                st = op_statement(op, nest, candidate_layouts, context.loop_layouts, context.graph)
                self._costs[key] = None if st is None else score_statement(st, context.target)
            if self._costs[key] is not None:
                costs.append(self._costs[key])
        return AttemptCost(mem=sum(c.cost for c in costs), regs=count_register_slots(candidate_layouts),
                           details=tuple(costs))
