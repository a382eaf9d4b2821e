"""Atomic read-modify-writes (``atomicAdd(&B[i], v)`` and TVM's ``tirx.cuda.atomic_add``).

On the GPU the call is emitted as written. Lowering must keep it scalar (never inside a vector lane loop)
and, in a replicated loop, let only replica 0 perform it (like any store to memory). On the CPU, where
threads run one after another, an atomic is an ordinary update ``B[i] = B[i] op v``.
"""
from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from tilelayout.lang import atomic_of

from ..ir_utils import mapped, walk
from .loop_marks import PARTITIONED_KEY

__all__ = ["has_atomic", "atomics_as_updates", "guard_atomics", "fence_shared_atomics"]


def has_atomic(stmt: Any) -> bool:
    hits = []
    walk(stmt, [(tvm.ir.Call, lambda c: hits.append(1) if atomic_of(c) is not None or _vector_red(c) is not None
                 else None)])
    return bool(hits)


def _vector_red(call: Any):
    """(target element load, values) of a ``red.global.add.v{2,4}.f32`` (``vector_atomics.py``), else None."""
    if not (isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) and str(call.op.name).startswith("tirx.ptx.red_vec")):
        return None
    args = list(call.args)
    addr = args[0]
    values = [a for a in args[1:] if not isinstance(a, tvm.ir.StringImm)]
    mods = [str(a.value) for a in args[1:] if isinstance(a, tvm.ir.StringImm)]
    if "add" not in mods or not (isinstance(addr, tvm.ir.Call) and str(addr.op.name) == "tirx.address_of"
                                 and isinstance(addr.args[0], TensorLoad)):
        return None
    return addr.args[0], values


def _combine(kind: str, old: Any, value: Any) -> Any:
    value = value if str(value.ty) == str(old.ty) else tirx.Cast(str(old.ty), value)
    return {"add": lambda: old + value, "max": lambda: tirx.max(old, value),
            "min": lambda: tirx.min(old, value)}[kind]()


def atomics_as_updates(stmt: Any) -> Any:
    """Every ``Evaluate(atomic)`` becomes ``B[i] = B[i] op v`` (threads serialised: no other thread interleaves)."""
    def on_eval(e):
        red = _vector_red(e.value)
        if red is not None:         # consecutive elements from the target's last index on
            t, values = red
            stores = []
            for k, v in enumerate(values):
                idx = list(t.indices[:-1]) + [t.indices[-1] + k]
                stores.append(tirx.BufferStore(t.source, _combine("add", tirx.BufferLoad(t.source, idx), v), idx))
            return tirx.SeqStmt(stores)
        at = atomic_of(e.value)
        if at is None:
            return e
        t = at.target
        return tirx.BufferStore(t.source, _combine(at.kind, tirx.BufferLoad(t.source, list(t.indices)), at.value),
                                list(t.indices))
    return mapped(stmt, [(tirx.Evaluate, on_eval)])


def guard_atomics(stmt: Any, cond: Any) -> Any:
    """``if cond: atomic`` for every atomic statement (replica 0 performs the side effect)."""
    def on_eval(e):
        return tirx.IfThenElse(cond, e, None) if atomic_of(e.value) is not None else e
    return mapped(stmt, [(tirx.Evaluate, on_eval)])


def _shared_atomic(stmt: Any) -> bool:
    hits = []

    def on_call(c):
        at = atomic_of(c)
        if at is not None and str(at.target.source.scope()).startswith("shared"):
            hits.append(1)
    walk(stmt, [(tvm.ir.Call, on_call)])
    return bool(hits)


def fence_shared_atomics(func: Any) -> Any:
    """A barrier before and after every partitioned nest doing atomics on shared memory: TVM's own barrier
    insertion does not see an atomic through ``address_of`` as an access, so the writes before it (e.g. a
    zero fill) and the reads after it would race with it."""
    def sync():
        return tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))

    def on_for(f):
        if PARTITIONED_KEY in f.annotations and _shared_atomic(f):
            return tirx.SeqStmt([sync(), f, sync()])
        return f
    return func.with_body(mapped(func.body, [(tirx.For, on_for)]))
