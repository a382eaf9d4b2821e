"""Atomic read-modify-writes (``atomicAdd(&B[i], v)`` and TVM's ``tirx.cuda.atomic_add``).

On the GPU the call is emitted as written. Lowering must keep it scalar (never inside a vector lane loop)
and, in a replicated loop, let only replica 0 perform it (like any store to memory). On the CPU, where
threads run one after another, an atomic is an ordinary update ``B[i] = B[i] op v``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from tilelayout.lang import ATOMIC_EXTERNS

from .loop_partition import mapped, walk

__all__ = ["Atomic", "atomic_of", "has_atomic", "atomics_as_updates", "guard_atomics"]


@dataclass(frozen=True)
class Atomic:
    kind: str              # "add", "max", "min"
    target: Any            # the TensorLoad of the element updated
    value: Any


def atomic_of(call: Any) -> Atomic | None:
    """The atomic a call performs, or None for any other call."""
    if not isinstance(call, tvm.ir.Call) or not isinstance(call.op, tvm.ir.Op):
        return None
    name = str(call.op.name)
    if name == "tirx.cuda.atomic_add" and len(call.args) == 2:
        kind, addr, value = "add", call.args[0], call.args[1]
    elif name == "tirx.call_extern" and len(call.args) == 3 and isinstance(call.args[0], tirx.StringImm) \
            and str(call.args[0].value) in ATOMIC_EXTERNS:
        kind, addr, value = ATOMIC_EXTERNS[str(call.args[0].value)], call.args[1], call.args[2]
    else:
        return None
    if isinstance(addr, tvm.ir.Call) and str(addr.op.name) == "tirx.address_of" and len(addr.args) == 1 \
            and isinstance(addr.args[0], TensorLoad):
        return Atomic(kind, addr.args[0], value)
    return None


def is_atomic_call(call: Any) -> bool:
    """The call is an atomic (well formed or not): used to refuse malformed ones clearly."""
    if not isinstance(call, tvm.ir.Call) or not isinstance(call.op, tvm.ir.Op):
        return False
    name = str(call.op.name)
    return name == "tirx.cuda.atomic_add" or (
        name == "tirx.call_extern" and len(call.args) >= 1 and isinstance(call.args[0], tirx.StringImm)
        and str(call.args[0].value) in ATOMIC_EXTERNS)


def has_atomic(stmt: Any) -> bool:
    hits = []
    walk(stmt, [(tvm.ir.Call, lambda c: hits.append(1) if atomic_of(c) is not None else None)])
    return bool(hits)


def _combine(kind: str, old: Any, value: Any) -> Any:
    value = value if str(value.ty) == str(old.ty) else tirx.Cast(str(old.ty), value)
    return {"add": lambda: old + value, "max": lambda: tirx.max(old, value),
            "min": lambda: tirx.min(old, value)}[kind]()


def atomics_as_updates(stmt: Any) -> Any:
    """Every ``Evaluate(atomic)`` becomes ``B[i] = B[i] op v`` (threads serialised: no other thread interleaves)."""
    def on_eval(e):
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
