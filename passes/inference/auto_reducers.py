"""Splitting an accumulation across threads on its own when keeping each row in one thread is over the
register budget (the plain gemv: ``acc[i] = acc[i] + a[i, j] * x[j]`` over a 128 x 256 tile).

An ordinary fragment accumulated this way keeps every element's iterations in the element's thread(s), so a
thread holds whole rows of the operands. When the inferred fragments need more than
``MAX_REGISTERS_PER_THREAD`` registers per thread, each fragment that is filled, then only updated by
``T.parallel`` nests (``F[i] = F[i] + v``, ``T.max``, ``T.min``) and only read afterwards, is turned into a
``replication="all"`` reducer (``lang.alloc_reducer``): its allocation is annotated and ``finalize_reducer``
is inserted after the last statement of the fill's sequence that updates it. The rewritten kernel must keep
the reducer protocol (``reducers.check_reducers``: a sum filled with 0, no read before the finalize, ...) and
infer with fewer registers; otherwise the first result stands. The numeric references run the kernel as
written (one accumulation in program order), which is what the split kernel computes.
"""
from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.errors import TileLayoutError
from tilelayout.ffi_array import as_list
from tilelayout.fragment import Fragment
from tilelayout.lang import REDUCER_ATTR, finalize_reducer

from ..ir_utils import mutate, walk
from .reducers import check_reducers, reducer_spec
from .cost_models.base import register_count32
from .resources import MAX_REGISTERS_PER_THREAD

__all__ = ["split_over_budget"]

_OPS = {tirx.Add: "sum", tirx.Max: "max", tirx.Min: "min"}


def _fragment_registers(result) -> int:
    """The figure the register budget is checked on: the plan's register peak (``register_liveness``), else
    the fragments' sum for a result that has none."""
    peak = getattr(result, "register_peak", None)
    if peak is not None:
        return int(peak.registers)
    frags = {n: l for n, l in result.buffers.items() if isinstance(l, Fragment)}
    return register_count32(frags, lambda n: result.graph.buffer(n).bits)


def split_over_budget(func: Any, result, rerun) -> Any:
    """``result``, or the result of ``rerun`` on ``func`` with its accumulators split when that brings the
    fragments from over the register budget to fewer registers."""
    before = _fragment_registers(result)
    if before <= MAX_REGISTERS_PER_THREAD:
        return result
    rewritten, names = _with_reducers(func)
    if not names:
        return result
    try:
        check_reducers(rewritten)
        split = rerun(rewritten)
    except TileLayoutError:
        return result
    after = _fragment_registers(split)
    if after >= before:
        return result
    split.notes.append(f"accumulators {', '.join(names)} split across threads as reducers: {before} fragment "
                       f"registers per thread keeping each element's updates in one thread, over the "
                       f"{MAX_REGISTERS_PER_THREAD} budget; {after} with partials combined at the end")
    return split


def _update_op(store: Any) -> str | None:
    """The reducer op of ``F[idx] = F[idx] (+|max|min) v``, else None."""
    value = store.value
    op = _OPS.get(type(value))
    if op is None:
        return None
    for side in (value.a, value.b):
        if isinstance(side, TensorLoad) and side.source.same_as(store.buffer):
            return op
    return None


def _candidates(func: Any) -> dict:
    """{buffer var: op} of ordinary fragments some T.parallel nest updates as an accumulation."""
    allocated: list = []
    walk(func.body, [(tirx.AllocBuffer, lambda n: allocated.append(n.buffer) if str(n.buffer.scope()) ==
                      "local.fragment" and reducer_spec(n) is None else None)])
    ops: dict = {}

    def on_for(loop: Any) -> None:
        if int(loop.kind) != int(tirx.ForKind.PARALLEL):
            return
        stores: list = []
        walk(loop.body, [(tirx.BufferStore, stores.append)])
        for st in stores:
            buf = next((b for b in allocated if b.same_as(st.buffer)), None)
            op = _update_op(st) if buf is not None else None
            if op is not None:
                ops.setdefault(buf, op)
    walk(func.body, [(tirx.For, on_for)])
    return ops


def _is_fill_of(stmt: Any, buf: Any) -> bool:
    if not isinstance(stmt, TilePrimitiveCall) or str(stmt.op.name) != "tirx.tile.fill":
        return False
    dst = as_list(stmt.args)[0]
    return isinstance(dst, TensorRegion) and dst.source.same_as(buf)


def _updates(stmt: Any, buf: Any) -> bool:
    hits: list = []
    walk(stmt, [(tirx.BufferStore, lambda n: hits.append(1) if n.buffer.same_as(buf) else None)])
    return bool(hits)


def _with_reducers(func: Any) -> tuple:
    """(func with every candidate accumulator made a reducer and finalized, their names)."""
    ops = _candidates(func)
    done: list = []

    def on_seq(seq: Any, mutator: Any) -> Any:
        seq = mutator.default_mutate(seq)
        if not isinstance(seq, tirx.SeqStmt):
            return seq
        items = list(as_list(seq.seq))
        for buf, op in ops.items():
            fill = next((k for k, s in enumerate(items) if _is_fill_of(s, buf)), None)
            if fill is None:
                continue
            last = max((k for k in range(fill + 1, len(items)) if _updates(items[k], buf)), default=None)
            if last is None:
                continue
            items.insert(last + 1, tirx.Evaluate(finalize_reducer(buf)))
            done.append(buf)
        return tirx.SeqStmt(items)

    body = mutate(func.body, [(tirx.SeqStmt, on_seq)])
    if not done:
        return func, []

    def on_alloc(node: Any, mutator: Any) -> Any:
        if any(b.same_as(node.buffer) for b in done):
            ann = dict(node.annotations) if node.annotations is not None else {}
            ann[REDUCER_ATTR] = f"{ops[next(b for b in done if b.same_as(node.buffer))]}:all"
            return tirx.AllocBuffer(node.buffer, ann)
        return node

    body = mutate(body, [(tirx.AllocBuffer, on_alloc)])
    return func.with_body(body), [str(b.name) for b in done]
