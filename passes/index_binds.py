"""Named index expressions stay expressions: ``y = by * 64 + i`` is substituted into every use.

A kernel that names an index (``y = by * 64 + i; C[y, x] = A[y, x] + B[y, x]``) means the same as one that
writes it inline, and must be inferred, partitioned and vectorised the same way. TVMScript turns such a
name inside a loop into a one-element local buffer (``y: T.int32 = ...``, an allocation and one store),
elsewhere into a ``Bind``. Either way the name is opaque to the access analysis: layout inference cannot
see which loop axis walks a buffer's contiguous dimension, the vectorizer cannot prove the lanes
contiguous, and the kernel comes out scalar.

A name qualifies when its value is integer arithmetic over variables, constants and other qualifying
names (no memory read, no call) and it is written once: a ``Bind``, or a one-element ``local`` buffer whose
only write is an unconditional store right in the statement list that allocates it, read only after that
store, never aliased, never handed to a tile op or an intrinsic by address. Such a name has one value
wherever it is read, so replacing it by that value changes nothing but what the passes can see. Anything
else (a loaded value, a float, a scalar updated in a loop) is left alone.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion

from tilelayout.expr import substitute

from .ir_utils import constant_numel, int_value, mapped, walk

__all__ = ["inline_index_binds", "is_index_expression"]

_SCALAR_SCOPES = ("local", "local.var")
_MAX_ROUNDS = 16          # names defined from names: each round inlines one more level


def is_index_expression(value) -> bool:
    """Integer arithmetic of variables and constants only: no memory read and no call."""
    if not str(value.ty).startswith(("int", "uint")):
        return False
    impure: list = []
    walk(value, [(TensorLoad, impure.append), (tvm.ir.Call, impure.append)])
    return not impure


def inline_index_binds(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every named index expression substituted into its uses and its definition removed."""
    body = func.body
    for _ in range(_MAX_ROUNDS):
        new = _inline_round(body)
        if new.same_as(body):
            break
        body = new
    return func if body.same_as(func.body) else func.with_body(body)


def _inline_round(body):
    binds = _pure_binds(body)
    scalars = _pure_scalars(body)
    if not binds and not scalars:
        return body
    if scalars:
        def on_seq(seq):
            kept = [s for s in seq.seq if not _defines(s, scalars)]
            return seq if len(kept) == len(seq.seq) else _seq(kept)

        def on_load(load):
            if tirx.is_buffer_var(load.source) and _key(load.source) in scalars:
                return scalars[_key(load.source)][1]
            return load
        body = mapped(body, [(tirx.SeqStmt, on_seq)])
        body = mapped(body, [(TensorLoad, on_load)])
    if binds:
        body = mapped(body, [(tirx.SeqStmt, lambda seq: _without_binds(seq, binds))])
        body = substitute(body, binds)
    return body


def _defines(stmt, scalars: dict) -> bool:
    """``stmt`` allocates one of ``scalars`` or is its one store."""
    if isinstance(stmt, tirx.AllocBuffer):
        return _key(stmt.buffer) in scalars
    return isinstance(stmt, tirx.BufferStore) and _key(stmt.buffer) in scalars and stmt.same_as(
        scalars[_key(stmt.buffer)][0])


def _key(buf) -> int:
    """Identity of a buffer (handle identity: the same buffer object wherever it is used)."""
    return hash(buf)


def _seq(stmts: list):
    if not stmts:
        return tirx.Evaluate(tirx.const(0, "int32"))
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _without_binds(seq, binds: dict):
    kept = [s for s in seq.seq if not (isinstance(s, tirx.Bind) and s.var in binds)]
    return seq if len(kept) == len(seq.seq) else _seq(kept)


def _pure_binds(body) -> dict:
    """{var: value} of the ``Bind`` statements that are index expressions and sit in a statement list."""
    found: dict = {}

    def on_seq(seq):
        for s in seq.seq:
            if isinstance(s, tirx.Bind) and is_index_expression(s.value):
                found[s.var] = s.value
    walk(body, [(tirx.SeqStmt, on_seq)])
    return found


def _pure_scalars(body) -> dict:
    """{storage key: (its one store, value)} of the one-element local buffers that name an index expression."""
    writes: dict = {}
    reads: dict = {}
    opaque: set = set()

    def on_store(s):
        writes.setdefault(_key(s.buffer), []).append(s)

    def on_load(n):
        if tirx.is_buffer_var(n.source):
            reads.setdefault(_key(n.source), []).append(n)

    def on_region(r):
        if tirx.is_buffer_var(r.source):
            opaque.add(_key(r.source))

    def on_decl(d):
        opaque.add(_key(d.buffer))

    def on_call(c):          # a buffer handed over by address: the value may change behind our back
        if str(getattr(c.op, "name", "")).endswith(("address_of", "access_ptr")):
            for a in c.args:
                walk(a, [(TensorLoad, lambda n: opaque.add(_key(n.source)) if tirx.is_buffer_var(n.source)
                          else None)])
    walk(body, [(tirx.BufferStore, on_store), (TensorLoad, on_load), (TensorRegion, on_region),
                (tirx.DeclBuffer, on_decl), (tvm.ir.Call, on_call)])
    found: dict = {}

    def on_seq(seq):
        items = list(seq.seq)
        for i, s in enumerate(items):
            if not isinstance(s, tirx.AllocBuffer) or not _is_scalar(s.buffer):
                continue
            key = _key(s.buffer)
            stores = writes.get(key, [])
            if key in opaque or len(stores) != 1:
                continue
            store = stores[0]
            at = next((j for j in range(i + 1, len(items)) if items[j].same_as(store)), None)
            if at is None or not is_index_expression(store.value) or any(
                    int_value(x) != 0 for x in store.indices):
                continue
            if any(_reads(items[j], key) for j in range(i + 1, at)):
                continue        # read before its value is set: not a name for the expression
            found[key] = (store, store.value)
    walk(body, [(tirx.SeqStmt, on_seq)])
    return found


def _is_scalar(buf) -> bool:
    return str(buf.scope()) in _SCALAR_SCOPES and constant_numel(buf) == 1


def _reads(stmt, key: int) -> bool:
    hits: list = []
    walk(stmt, [(TensorLoad, lambda n: hits.append(1) if tirx.is_buffer_var(n.source)
                 and _key(n.source) == key else None)])
    return bool(hits)
