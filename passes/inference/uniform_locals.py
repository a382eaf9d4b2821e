"""Which per-thread (``local``) buffers hold the same values in every thread of the block.

A condition that reads a per-thread value normally leaves the threads that run an op unknown, and the front end
refuses it. Kernels as users write them keep block-uniform data there too: TileLang's block-sparse attention
copies its row of the block mask into a local array (``block_mask[j] = Mask[b, h, bx, j]``) and runs the whole
attention step under ``if block_mask[k]``. Every thread then takes the same branch, so the op runs on every
thread, as under a condition on ``blockIdx``.

A local buffer is uniform when every store to it (anywhere in the function, so order does not matter) has a
value and indices that read no thread index, no variable bound to one, no fragment element (one holder's value,
not every thread's) and no non-uniform local buffer, and sits under conditions and loop bounds of the same kind
and outside parallel and thread-bound loops (whose iterations are split over the threads); a tile op writing it
makes it varying (its per-thread values are not followed). Decided by a fixed point over all stores: a buffer
found varying can make others varying.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tvm_ffi
from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.ffi_array import as_list

from ..ir_utils import walk

__all__ = ["UniformLocals", "uniform_local_buffers"]

_LOCAL = ("local", "local.var")


@dataclass
class _Store:
    buffer: str
    reads: list = field(default_factory=list)      # expressions whose uniformity decides the store's (value,
    split: bool = False                            # indices, conditions, loop bounds); inside a split loop
    opaque: str = ""                               # why the store is varying whatever it reads (a tile op)


class _Collector:
    """Stores to local buffers with their context, thread index variables and ``Bind`` values, in one walk."""

    def __init__(self):
        self.stores: list[_Store] = []
        self.thread_vars: list = []
        self.binds: dict = {}
        self.context: list = []        # conditions and loop bounds around the statement being visited
        self.split = 0                 # depth of enclosing parallel / thread-bound loops

    def stmt(self, s: Any) -> None:
        if isinstance(s, tirx.SeqStmt):
            for c in as_list(s.seq):
                self.stmt(c)
        elif isinstance(s, tirx.AttrStmt):
            if s.attr_key == "thread_extent" and str(s.node.thread_tag).startswith("threadIdx"):
                self.thread_vars.append(s.node.var)
            self.stmt(s.body)
        elif isinstance(s, tirx.For):
            split = int(s.kind) in (int(tirx.ForKind.PARALLEL), int(tirx.ForKind.THREAD_BINDING))
            if split and s.thread_binding is not None and str(s.thread_binding.thread_tag).startswith("threadIdx"):
                self.thread_vars.append(s.loop_var)
            self.context += [s.min, s.extent]
            self.split += split
            self.stmt(s.body)
            self.split -= split
            del self.context[-2:]
        elif isinstance(s, tirx.IfThenElse):
            self.context.append(s.condition)
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
            self.context.pop()
        elif isinstance(s, tirx.BufferStore):
            if str(s.buffer.scope()) in _LOCAL:
                self.stores.append(_Store(str(s.buffer.name), [s.value, *s.indices, *self.context],
                                          self.split > 0))
        elif isinstance(s, tirx.Bind):
            self.binds[s.var] = s.value
        elif isinstance(s, TilePrimitiveCall):
            dst = s.args[0] if s.args else None
            if isinstance(dst, TensorRegion) and str(dst.source.scope()) in _LOCAL:
                self.stores.append(_Store(str(dst.source.name), [], True, f"tile op {s.op.name} writes it"))
        elif isinstance(s, tirx.While):       # its trip count may differ between threads, as a condition's value
            self.context.append(s.condition)
            self.stmt(s.body)
            self.context.pop()
        elif isinstance(s, tirx.Stmt):
            for child in _child_stmts(s):
                self.stmt(child)


def _child_stmts(s: Any) -> list:
    """The statements directly inside ``s`` (any statement kind without a rule above)."""
    found: list = []

    def visit(node: Any, visitor: Any) -> None:
        if node.same_as(s):
            visitor.default_visit(node)
        elif isinstance(node, tirx.Stmt):
            found.append(node)

    tvm_ffi.structural_visit(s, [(tirx.Stmt, visit)])
    return found


def _reads(expr: Any) -> tuple[list, list]:
    """(variables, (buffer name, scope) of every load) that ``expr`` reads."""
    variables: list = []
    loads: list = []
    walk(expr, [(tirx.Var, variables.append),
                (TensorLoad, lambda n: loads.append((str(n.source.name), str(n.source.scope()))))])
    return variables, loads


@dataclass(frozen=True)
class UniformLocals:
    """The local buffers equal in every thread (``uniform``) and, for each other stored one, why not."""

    uniform: frozenset = frozenset()
    why: tuple = ()          # ((buffer name, reason), ...) in the order they were found varying
    thread_vars: tuple = ()  # the block's thread index variables (``threadIdx`` launches and bound loops)

    def __contains__(self, name: str) -> bool:
        return name in self.uniform

    def reason(self, name: str) -> str | None:
        return dict(self.why).get(name)


def uniform_local_buffers(body: Any) -> UniformLocals:
    """The local buffers whose every store is block-uniform (module docstring), with the reason for the rest."""
    c = _Collector()
    c.stmt(body)
    if not c.stores:
        return UniformLocals(thread_vars=tuple(c.thread_vars))
    varying_vars = list(c.thread_vars)
    why: dict = {}

    def varying_read(expr: Any) -> str | None:
        variables, loads = _reads(expr)
        for v in variables:
            if any(v.same_as(w) for w in varying_vars):
                return f"reads {v.name}, which differs between threads"
        for name, scope in loads:
            if scope == "local.fragment":
                return f"reads fragment {name}, whose elements only their holders have"
            if scope in _LOCAL and name in why:
                return f"reads {name}, which differs between threads"
        return None

    changed = True
    while changed:
        changed = False
        for var, value in c.binds.items():
            if not any(var.same_as(w) for w in varying_vars) and varying_read(value) is not None:
                varying_vars.append(var)
                changed = True
        for st in c.stores:
            if st.buffer in why:
                continue
            reason = st.opaque or ("a store to it runs inside a parallel or thread-bound loop" if st.split else next(
                (f"a store to it {r}" for r in map(varying_read, st.reads) if r is not None), None))
            if reason is not None:
                why[st.buffer] = reason
                changed = True
    stored = {st.buffer for st in c.stores}
    return UniformLocals(frozenset(stored - set(why)), tuple(why.items()), tuple(c.thread_vars))
