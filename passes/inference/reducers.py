"""Reducers (``tilelayout.lang.alloc_reducer``): which fragments are reducers, and whether the kernel keeps to
their protocol.

A reducer lives in epochs: ``Tx.fill`` opens one, updates inside ``T.parallel`` nests accumulate
(``R[i] = R[i] + v`` for ``"sum"``, ``R[i] = T.max(R[i], v)`` / ``T.min`` for ``"max"`` / ``"min"``), and
``finalize_reducer(R)`` closes it. Between the fill and the finalize a ``replication="all"`` reducer holds
partials, one per thread running updates of an element, so any other read or write would see a partial value:
such a kernel is refused here, before inference, naming the reducer. After the finalize the fragment is an
ordinary one (every holder has the combined value) until the next fill.

The walk follows program order; a serial loop's body is walked twice, so an epoch opened outside a loop and
closed inside it (a second iteration would update a closed reducer) is refused too. The front end then marks
the updates of ``"all"`` reducers as ``Access.reducer_update`` (``reducer_accesses``).
"""
from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.errors import ReducerError
from tilelayout.ffi_array import as_list
from tilelayout.lang import FINALIZE_REDUCER, REDUCER_ATTR, REDUCER_OPS, REDUCER_REPLICATION

from ..ir_utils import walk

__all__ = ["reducer_spec", "finalized_buffer", "check_reducers", "is_update", "has_reducer_updates",
           "replicated_reducer_updates"]

_FRESH, _OPEN, _CLOSED = "fresh", "open", "closed"


def reducer_spec(alloc: Any) -> tuple[str, str] | None:
    """(op, replication) of an ``AllocBuffer`` that ``alloc_reducer`` emitted, else None."""
    ann = getattr(alloc, "annotations", None)
    if not isinstance(alloc, tirx.AllocBuffer) or ann is None or REDUCER_ATTR not in ann:
        return None
    text = str(ann[REDUCER_ATTR])
    op, _, rep = text.partition(":")
    if op not in REDUCER_OPS or rep not in REDUCER_REPLICATION:
        raise ReducerError(f"reducer {alloc.buffer.name}: annotation {REDUCER_ATTR}={text!r} is not op:replication "
                           f"with op in {REDUCER_OPS} and replication in {REDUCER_REPLICATION}")
    return op, rep


def finalized_buffer(stmt: Any) -> Any:
    """The buffer ``finalize_reducer`` names in ``stmt`` (an ``Evaluate``), else None."""
    if not isinstance(stmt, tirx.Evaluate):
        return None
    call = stmt.value
    if not (isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) and str(call.op.name) == "tirx.call_extern"
            and len(call.args) >= 1 and isinstance(call.args[0], tvm.ir.StringImm)
            and str(call.args[0].value) == FINALIZE_REDUCER):
        return None
    if len(call.args) != 2 or not tirx.is_buffer_var(call.args[1]):
        raise ReducerError(f"{FINALIZE_REDUCER} takes one reducer buffer, got {call}")
    return call.args[1]


def is_update(store: Any, op: str) -> bool:
    """``R[idx] = R[idx] (+|max|min) v`` (either operand order) where ``v`` does not read ``R``."""
    buf, idx = store.buffer, as_list(store.indices)

    def self_load(e: Any) -> bool:
        return isinstance(e, TensorLoad) and e.source.same_as(buf) and len(as_list(e.indices)) == len(idx) and all(
            tvm_ffi.structural_equal(a, b) for a, b in zip(as_list(e.indices), idx))

    value = store.value
    kinds = {"sum": tirx.Add, "max": tirx.Max, "min": tirx.Min}
    if not isinstance(value, kinds[op]):
        return False
    a, b = value.a, value.b
    other = b if self_load(a) else a if self_load(b) else None
    return other is not None and not _reads(other, buf)


def _reads(node: Any, buf: Any) -> bool:
    hits: list = []
    walk(node, [(TensorLoad, lambda n: hits.append(1) if n.source.same_as(buf) else None)])
    return bool(hits)


def _touched(node: Any, reducers: dict) -> list:
    """The reducers a statement (without its nested statements' structure) loads, stores or names in a region."""
    found: list = []

    def note(buf: Any) -> None:
        for r in reducers:
            if r.same_as(buf) and r not in found:
                found.append(r)
    walk(node, [(TensorLoad, lambda n: note(n.source)), (tirx.BufferStore, lambda n: note(n.buffer)),
                (TensorRegion, lambda n: note(n.source))])
    return found


class _Walk:
    def __init__(self) -> None:
        self.reducers: dict = {}       # buffer var -> (op, replication)
        self.state: dict = {}          # buffer var -> fresh | open | closed
        self.update_nests: list = []   # roots of T.parallel nests updating an open replication="all" reducer
        self.conditional = 0           # how many `if`s enclose the statement walked

    def refuse(self, buf: Any, why: str) -> None:
        op, rep = self.reducers[buf]
        raise ReducerError(f"reducer {buf.name} ({op}, replication \"{rep}\"): {why}")

    def stmt(self, s: Any) -> None:
        if isinstance(s, tirx.SeqStmt):
            for c in as_list(s.seq):
                self.stmt(c)
        elif isinstance(s, tirx.AllocBuffer):
            spec = reducer_spec(s)
            if spec is not None:
                self.reducers[s.buffer] = spec
                self.state[s.buffer] = _FRESH
        elif isinstance(s, tirx.For) and int(s.kind) == int(tirx.ForKind.PARALLEL):
            self.parallel(s)
        elif isinstance(s, tirx.For) or isinstance(s, tirx.While):
            self.scan(s.min if isinstance(s, tirx.For) else s.condition)
            if isinstance(s, tirx.For):
                self.scan(s.extent)
            self.stmt(s.body)
            self.stmt(s.body)      # a second iteration starts where the first ended
        elif isinstance(s, tirx.IfThenElse):
            self.scan(s.condition)
            before = dict(self.state)
            self.conditional += 1
            self.stmt(s.then_case)
            after_then = dict(self.state)
            self.state = dict(before)
            if s.else_case is not None:
                self.stmt(s.else_case)
            self.conditional -= 1
            for buf in self.reducers:
                if after_then[buf] != self.state[buf]:
                    self.refuse(buf, "its accumulation is opened or finalized under an `if` on one branch only; "
                                     "fill and finalize it unconditionally")
        elif isinstance(s, tirx.AttrStmt):
            self.scan(s.value)
            self.stmt(s.body)
        elif isinstance(s, tirx.Bind):        # a flat binding (the host's tensor maps): no body of its own
            self.scan(s.value)
        elif isinstance(s, tirx.LetStmt):
            self.scan(s.value)
            self.stmt(s.body)
        elif isinstance(s, TilePrimitiveCall):
            self.tile(s)
        elif finalized_buffer(s) is not None:
            self.finalize(finalized_buffer(s))
        elif isinstance(s, tirx.Stmt) and not isinstance(s, (tirx.BufferStore, tirx.Evaluate, tirx.Bind,
                                                               tirx.DeclBuffer, tirx.AssertStmt)):
            nested: list = []
            tvm_ffi.structural_visit(s, [(tirx.Stmt, lambda n, v: (v.default_visit(n) if n is s else nested.append(n)))])
            for n in nested:
                self.stmt(n)
        else:
            self.scan(s)

    def scan(self, node: Any) -> None:
        """A statement or expression outside any nest and tile op: only a closed reducer may be touched."""
        if node is None:
            return
        for buf in _touched(node, self.reducers):
            if self.state[buf] != _CLOSED:
                self.refuse(buf, f"accessed outside a T.parallel nest {self._when(buf)}; between Tx.fill and "
                                 f"finalize_reducer only T.parallel updates may touch it")

    def _when(self, buf: Any) -> str:
        return "before Tx.fill starts its accumulation" if self.state[buf] == _FRESH else \
            "during its accumulation (the threads hold partials until finalize_reducer)"

    def tile(self, call: Any) -> None:
        name = str(call.op.name)
        args = as_list(call.args)
        for buf in _touched(call, self.reducers):
            target = args[0] if args else None
            if name == "tirx.tile.fill" and isinstance(target, TensorRegion) and target.source.same_as(buf) \
                    and not any(_touched(a, {buf: None}) for a in args[1:] if a is not None):
                self.fill(buf, call, target, args[1])
            elif self.state[buf] != _CLOSED:
                self.refuse(buf, f"used by {name} {self._when(buf)}; only Tx.fill, T.parallel updates and "
                                 f"finalize_reducer may touch it until it is finalized")

    def fill(self, buf: Any, call: Any, region: Any, value: Any) -> None:
        op, rep = self.reducers[buf]
        if self.state[buf] == _OPEN:
            self.refuse(buf, "filled again before finalize_reducer closed its accumulation")
        full = all(int(r.min) == 0 if isinstance(r.min, tirx.IntImm) else False for r in as_list(region.region)) and \
            all(isinstance(r.extent, tirx.IntImm) and int(r.extent) == int(s)
                for r, s in zip(as_list(region.region), as_list(buf.shape)))
        if not full:
            self.refuse(buf, f"Tx.fill must start the accumulation of the whole reducer, not {region}")
        if op == "sum" and rep == "all" and not (isinstance(value, (tirx.IntImm, tirx.FloatImm)) and
                                                 float(value.value) == 0.0):
            self.refuse(buf, f"a sum reducer with replication \"all\" starts at 0 in every thread holding a partial, "
                             f"so Tx.fill must give 0 (got {value}); add a start value after finalize_reducer")
        self.state[buf] = _OPEN

    def finalize(self, buf: Any) -> None:
        if buf not in self.reducers:
            raise ReducerError(f"finalize_reducer({buf.name}): {buf.name} was not allocated by alloc_reducer")
        if self.conditional:
            self.refuse(buf, "finalize_reducer under an `if`: combining the partials needs every thread of the block "
                             "(warp shuffles, barriers); call it unconditionally")
        if self.state[buf] != _OPEN:
            self.refuse(buf, "finalize_reducer without an open accumulation (Tx.fill the reducer first, and finalize "
                             "it once)")
        self.state[buf] = _CLOSED

    def parallel(self, root: Any) -> None:
        for e in (root.min, root.extent):
            self.scan(e)
        for buf in _touched(root, self.reducers):
            state = self.state[buf]
            if state == _CLOSED:
                continue
            if state == _FRESH:
                self.refuse(buf, f"updated in the T.parallel nest over {root.loop_var.name} before Tx.fill starts "
                                 f"its accumulation")
            op = self.reducers[buf][0]
            stores: list = []
            loads: list = []
            walk(root, [(tirx.BufferStore, lambda n: stores.append(n) if n.buffer.same_as(buf) else None),
                        (TensorLoad, lambda n: loads.append(n) if n.source.same_as(buf) else None)])
            bad = [st for st in stores if not is_update(st, op)]
            if bad or len(loads) != len(stores):
                shown = bad[0] if bad else root
                form = {"sum": f"{buf.name}[i] = {buf.name}[i] + v", "max": f"{buf.name}[i] = T.max({buf.name}[i], v)",
                        "min": f"{buf.name}[i] = T.min({buf.name}[i], v)"}[op]
                self.refuse(buf, f"the T.parallel nest over {root.loop_var.name} must only update it as `{form}` "
                                 f"during its accumulation, not:\n{shown}")
            if self.reducers[buf][1] == "all" and not any(r.same_as(root) for r in self.update_nests):
                self.update_nests.append(root)


def check_reducers(func: Any) -> list:
    """Refuse a kernel that breaks a reducer's protocol; the roots of the T.parallel nests that update a
    replication="all" reducer during its accumulation."""
    w = _Walk()
    w.stmt(func.body)
    for buf, state in w.state.items():
        if state == _OPEN:
            w.refuse(buf, "its accumulation is never finalized (call finalize_reducer before reading it)")
    return w.update_nests


def has_reducer_updates(nest) -> bool:
    """Whether a loop nest updates a reducer (its iterations must each run in one thread)."""
    return any(a.reducer_update for a in nest.fragment_accesses())


def replicated_reducer_updates(nest, layout) -> str | None:
    """A loop layout running an iteration in several threads would add its reducer update once per thread."""
    if layout.replicate_size == 1:
        return None
    names = sorted({a.buffer.name for a in nest.fragment_accesses() if a.reducer_update})
    if not names:
        return None
    return (f"its loop layout runs every iteration in {layout.replicate_size} threads, which would count each update "
            f"of reducer {', '.join(names)} {layout.replicate_size} times")
