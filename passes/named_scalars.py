"""Named integer scalars inlined into the tile ops that use them.

Kernels name their offsets, as TileLang's examples do::

    row0 = by * 64                       # TVMScript: a one-element local buffer, stored once
    m_start = offsets[g]                 # an offset read from a read-only parameter
    for k in T.serial(n, annotations={"num_stages": 2}):
        kk = k * 32
        Tx.copy(A_s, A[row0:row0 + 64, kk:kk + 32])

A tile op's region then reads ``row0[0]`` instead of ``by * 64``: inference cannot prove the copy aligned and
the software pipeline cannot issue the copy ahead of its iteration. ``inline_named_scalars`` puts the defining
expression back into the regions of every tile op (and into the conditions guarding tile ops) and drops the
definition when nothing reads it any more. A scalar (a one-element integer local buffer stored exactly once,
or a ``Bind`` variable) is inlined only where its store precedes the use in the same statement sequence (or an
enclosing one), and only when its value is *uniform*: built from constants, block ids, serial loop variables,
symbolic shape variables, other inlinable scalars, and loads of global parameters that the kernel never writes
(so the load gives the same value wherever it moves). Thread indices, parallel or vectorised loop variables
and loads of anything else keep the scalar as it is.

``uniform_value`` is the one-scalar question, kept separate so other passes can ask it.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.expr import free_vars

from .ir_utils import constant_numel, mapped, mutate, walk

__all__ = ["inline_named_scalars", "uniform_value", "read_only_params"]

#: calls allowed inside an inlined value (pure, no memory access of their own)
_PURE_CALLS = ("tirx.if_then_else", "prim.if_then_else")


def read_only_params(func) -> list:
    """Global parameter buffers of ``func`` that no statement or tile op writes."""
    params = [p for p in func.params if tirx.is_buffer_var(p)]
    written: list = []
    walk(func.body, [(tirx.BufferStore, lambda s: written.append(s.buffer)),
                     (TilePrimitiveCall, lambda c: written.extend(_tile_writes(c)))])
    return [b for b in params if not any(b.same_as(w) for w in written)]


def _tile_writes(call) -> list:
    """Buffers a tile op may write: a copy's destination (its first region), every region of any other op
    (conservative: reductions and composite ops have more than one output)."""
    regions = [arg.source for arg in call.args if isinstance(arg, TensorRegion)]
    short = str(call.op.name).rsplit(".", 1)[-1]
    return regions[:1] if short in ("copy", "copy_async") else regions


def uniform_value(value, env: dict, uniform_vars: list, readable: list, var_env: dict | None = None):
    """``value`` with the scalars of ``env`` (buffer data var -> value) and ``var_env`` (Bind var -> value)
    substituted, or None when it is not uniform (module docstring). ``uniform_vars``: the variables a uniform
    value may name besides those; ``readable``: the parameter buffers it may load from."""
    var_env = var_env or {}
    if not str(value.ty).startswith(("int", "uint")):
        return None
    failed = []

    def on_load(e):
        hit = _lookup(env, e.source)
        if hit is not None and all(_is_zero(i) for i in e.indices):
            return hit
        if any(e.source.same_as(b) for b in readable):
            return e
        failed.append(e.source.name)
        return e

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) not in _PURE_CALLS:
            failed.append(str(c.op.name))
        return c

    def on_var(v):
        hit = _lookup(var_env, v)
        return hit if hit is not None else v

    out = mapped(value, [(TensorLoad, on_load), (tvm.ir.Call, on_call)])
    out = mapped(out, [(tvm.ir.Var, on_var)])
    if failed:
        return None
    allowed = list(uniform_vars) + list(readable)
    if any(not any(v.same_as(a) for a in allowed) for v in free_vars(out)):
        return None
    return out


def _lookup(env: dict, var):
    for key, val in env.items():
        if key.same_as(var):
            return val
    return None


def _is_zero(e) -> bool:
    return isinstance(e, tirx.IntImm) and int(e.value) == 0


def _scalar_buffers(body) -> dict:
    """{data var: buffer} of one-element integer local buffers stored exactly once and used only by plain
    loads and that one store (no region, no address taken)."""
    stores: dict = {}
    candidates: dict = {}

    def on_alloc(a):
        b = a.buffer
        if constant_numel(b) == 1 and str(b.scope()) == "local" and str(b.dtype).startswith(("int", "uint")):
            candidates[b] = b

    def on_store(s):
        stores[s.buffer] = stores.get(s.buffer, 0) + 1

    escaped: list = []

    def on_region(r):
        escaped.append(r.source)

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) in ("tirx.address_of", "tirx.tvm_access_ptr"):
            walk(c, [(TensorLoad, lambda e: escaped.append(e.source))])

    walk(body, [(tirx.AllocBuffer, on_alloc), (tirx.BufferStore, on_store), (TensorRegion, on_region),
                (tvm.ir.Call, on_call)])
    return {v: b for v, b in candidates.items()
            if stores.get(v, 0) == 1 and not any(v.same_as(e) for e in escaped)}


def _uniform_loop_vars(body) -> list:
    """Variables whose value every thread of the block shares: block ids and serial / unrolled loop vars."""
    out = []

    def on_attr(n):
        if n.attr_key == "thread_extent" and isinstance(n.node, tirx.IterVar) and \
                str(n.node.thread_tag).startswith("blockIdx."):
            out.append(n.node.var)

    def on_for(f):
        if f.kind in (tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED):
            out.append(f.loop_var)
        elif f.kind == tirx.ForKind.THREAD_BINDING and f.thread_binding is not None and \
                str(f.thread_binding.thread_tag).startswith("blockIdx."):
            out.append(f.loop_var)
    walk(body, [(tirx.AttrStmt, on_attr), (tirx.For, on_for)])
    return out


def inline_named_scalars(func):
    """``func`` with uniform named scalars inlined into its tile ops (module docstring)."""
    scalars = _scalar_buffers(func.body)
    bind_vars: list = []
    walk(func.body, [(tirx.Bind, lambda b: bind_vars.append(b.var))])
    if not scalars and not bind_vars:
        return func
    uniform = _uniform_loop_vars(func.body) + [v for v in func.params if not tirx.is_buffer_var(v)]
    for buf in func.params:
        for s in (buf.shape if tirx.is_buffer_var(buf) else []):
            uniform.extend(free_vars(s) if not isinstance(s, tirx.IntImm) else [])
    readable = read_only_params(func)
    env: dict = {}          # scalar buffer data var -> value
    var_env: dict = {}      # Bind var -> value
    used: list = []

    def inline(node):
        def on_load(e):
            hit = _lookup(env, e.source)
            if hit is not None and all(_is_zero(i) for i in e.indices):
                used.append(e.source)
                return hit
            return e

        def on_var(v):
            hit = _lookup(var_env, v)
            return hit if hit is not None else v
        out = mapped(node, [(TensorLoad, on_load)])
        return mapped(out, [(tvm.ir.Var, on_var)]) if var_env else out

    def define(stmt):
        if isinstance(stmt, tirx.BufferStore) and _lookup(scalars, stmt.buffer) is not None:
            value = uniform_value(stmt.value, env, uniform, readable, var_env)
            if value is not None:
                env[stmt.buffer] = value
        elif isinstance(stmt, tirx.Bind):
            value = uniform_value(stmt.value, env, uniform, readable, var_env)
            if value is not None:
                var_env[stmt.var] = value

    def on_seq(seq, m):
        saved, saved_vars = dict(env), dict(var_env)
        out = []
        for item in seq.seq:
            out.append(m.mutate(item))
            define(item)
        env.clear()
        env.update(saved)
        var_env.clear()
        var_env.update(saved_vars)
        return tirx.SeqStmt(out)

    def on_tile(call, m):
        return inline(call) if env or var_env else call

    def on_if(node, m):
        then = m.mutate(node.then_case)
        other = m.mutate(node.else_case) if node.else_case is not None else None
        cond = node.condition
        if (env or var_env) and _has_tile_op(node):
            cond = inline(cond)
        return tirx.IfThenElse(cond, then, other)

    body = mutate(func.body, [(tirx.SeqStmt, on_seq), (TilePrimitiveCall, on_tile), (tirx.IfThenElse, on_if)])
    if body.same_as(func.body):
        return func
    return func.with_body(_drop_dead(body, _dedup(used)))


def _dedup(items: list) -> list:
    out: list = []
    for x in items:
        if not any(x.same_as(y) for y in out):
            out.append(x)
    return out


def _has_tile_op(stmt) -> bool:
    hits = []
    walk(stmt, [(TilePrimitiveCall, lambda c: hits.append(1))])
    return bool(hits)


def _drop_dead(body, inlined: list):
    """Definitions of inlined scalar buffers that nothing reads any more are removed (allocation and store);
    ``Bind`` definitions stay (a dead one costs nothing after TVM's simplification)."""
    read: list = []
    walk(body, [(TensorLoad, lambda e: read.append(e.source))])
    dead = [v for v in inlined if not any(v.same_as(r) for r in read)]
    if not dead:
        return body

    def gone(stmt) -> bool:
        if isinstance(stmt, tirx.AllocBuffer):
            return any(stmt.buffer.same_as(d) for d in dead)
        if isinstance(stmt, tirx.BufferStore):
            return any(stmt.buffer.same_as(d) for d in dead)
        return False

    def on_seq(seq):
        keep = [s for s in seq.seq if not gone(s)]
        if not keep:
            return tirx.Evaluate(tirx.const(0, "int32"))
        return keep[0] if len(keep) == 1 else tirx.SeqStmt(keep)
    return mapped(body, [(tirx.SeqStmt, on_seq)])

