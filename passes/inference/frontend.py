"""TIRx PrimFunc -> op graph: the buffers, tile ops and parallel nests layout inference reasons about.

Kernels are ordinary TVMScript TIRx functions (the README's "Your first kernel"). This module
only *reads* them: it walks the statement tree once, in program order, and records

- every buffer (parameters first, then allocations/declarations in order of appearance), with
  its scope, element width and the layout the user pinned (the TIRx default layout counts as none);
- every tile primitive it can model (`tirx.tile.copy/fill/sum/max/min/gemm` and the simple
  elementwise ones) with its regions, and every nest of `T.parallel` loops with each buffer
  access inside it;
- fragment accesses outside any op ("floating": they need the value in every thread);
- the launch geometry (`threadIdx.x` extent, `blockIdx.*` variables) and buffer alias groups.

Anything else (serial loops, `if`, binds, attributes) is walked through; a tile primitive that
cannot be modelled raises `FrontendError` naming it.

Size (over 700 lines): the statement walker alone, one visitor whose cases share the walk's state; the op data model is in ops.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.errors import ScopeError, TileLayoutError
from tilelayout.ffi_array import as_list
from tilelayout.lang import atomic_of, is_atomic_call
from tilelayout.tile_layout_interop import is_default_tile_layout

from .ops import (  # noqa: F401  (re-exported: the data model used to live here)
    Access, BufferInfo, ConvertOp, CopyOp, ElementwiseOp, FillOp, FrontendError, GemmOp, Loop, OpGraph,
    ParallelOp, ReduceOp, Region, TileOp, _KIND_NAMES, _const, _is_int, _line, _same, _simplify,
    _stmt_text, _text,
)
from ..ir_utils import module_func, walk
from ..safe_memory import safe_memory_enabled
from .composite_ops import COMPOSITE_OPS, expand_composite
from .reducers import check_reducers, finalized_buffer, reducer_spec
from .region_checks import match_regions as _match, reduce_axes as _reduce_axes
from .uniform_locals import UniformLocals, uniform_local_buffers

__all__ = [
    "FrontendError", "BufferInfo", "Region", "Access", "Loop", "TileOp", "CopyOp", "FillOp",
    "ReduceOp", "GemmOp", "ElementwiseOp", "ParallelOp", "ConvertOp", "OpGraph", "build_op_graph",
]

#: storage scopes a kernel may declare: TVM's global, shared (static and dynamic: ``shared.dyn``), per-thread
#: ``local`` / ``local.var``, Blackwell tensor memory ``tmem``, and the register fragments layout inference
#: distributes (``local.fragment``). Any other spelling is refused: TVM would accept a tagged scope such as
#: ``shared.dynamic`` and emit a per-thread array for it, and ``fragment`` would not be distributed at all.
VALID_SCOPES = ("global", "shared", "shared.dyn", "local", "local.var", "local.fragment", "tmem")


def check_scope(name: str, scope: str) -> None:
    """Refuse an unknown storage scope, naming the buffer and the closest valid spelling."""
    if scope in VALID_SCOPES:
        return
    import difflib
    close = difflib.get_close_matches(scope, VALID_SCOPES, n=1, cutoff=0.4)
    hint = f"did you mean \"{close[0]}\"? " if close else ""
    raise ScopeError(f"buffer {name} is declared with the unknown storage scope \"{scope}\"; {hint}valid scopes: "
                     f"{', '.join(VALID_SCOPES)} (register fragments: \"local.fragment\"; dynamic shared memory: "
                     f"\"shared.dyn\")")


def _check_int32_indexable(var: Any, shape: list) -> None:
    """A buffer whose shape is int32 gets int32 index arithmetic all the way to the CUDA source; past 2^31
    elements its flat indices wrap around and the kernel would touch the wrong addresses. Refuse it."""
    if not all(_is_int(s) for s in shape) or any(str(getattr(s, "ty", "")) == "int64" for s in as_list(var.shape)):
        return
    elements = 1
    for s in shape:
        elements *= int(s)
    if elements > 2**31 - 1:
        raise FrontendError(f"buffer {var.name} has {elements} elements, more than int32 indices can address "
                            f"(2^31 - 1); declare its shape with int64 extents (T.int64(...)) or split it")


# ----------------------------------------------------------------------------------------------
# building

_REDUCERS = {"tirx.tile.sum": "sum", "tirx.tile.max": "max", "tirx.tile.min": "min"}
_ELEMENTWISE = {
    "zero", "add", "sub", "mul", "fdiv", "maximum", "minimum", "cast",
    "exp", "exp2", "log2", "sqrt", "reciprocal", "silu", "fma",
}


#: expressions that contain no load: a scan of them would find nothing
_LEAVES = (int, float, str, bool, tirx.IntImm, tirx.FloatImm, tvm.ir.StringImm, tirx.Var)


class _Builder:
    """One pass over the statement tree in program order, with the loop/if context at hand."""

    def __init__(self, func: Any):
        self.func = func
        self.safe_memory = safe_memory_enabled(func)
        self.graph = OpGraph(func=func)
        self.infos: dict = {}          # buffer Var -> BufferInfo (Vars hash by identity)
        self.data_of: dict = {}        # buffer Var -> buffer Var whose storage it declares over
        self.loops: list[Loop] = []
        self.conds: list = []
        self.keys: dict[str, int] = {}
        self.thread_extents: dict[str, Any] = {}
        self.bound: dict = {}          # Var bound by a `Bind` statement -> its value (for thread conditions)
        self.uniform = uniform_local_buffers(func.body)     # local buffers equal in every thread
        self.entry = (0, 0)            # ``registered()`` as the statement of the op being built began
        self.reducer_nests: list = []  # T.parallel roots updating a replication="all" reducer (reducers.py)

    @classmethod
    def continuing(cls, prev: OpGraph, func: Any, index: int) -> "_Builder":
        """A builder for ``func`` standing where ``prev``'s walk stood as the statement of its unconditional op
        ``index`` began: ``prev``'s buffers, floating accesses and earlier ops, inside that op's serial loops
        (``graph_after_split``). Bindings and uniform locals only serve conditions, so they start empty."""
        op = prev.ops[index]
        b = cls.__new__(cls)
        b.func = func
        b.safe_memory = safe_memory_enabled(func)
        b.graph = OpGraph(func=func, thread_var=prev.thread_var, thread_extent=prev.thread_extent,
                          block_vars=dict(prev.block_vars), block_extents=dict(prev.block_extents),
                          buffers=list(prev.buffers), ops=list(prev.ops[:index]), floating=list(prev.floating),
                          aliases=list(prev.aliases), registered_before=list(prev.registered_before[:index]))
        b.infos = {info.var: info for info in prev.buffers}
        b.data_of, b.keys, b.thread_extents, b.bound = {}, {}, {}, {}
        b.loops, b.conds = list(op.serial_loops), []
        b.uniform = UniformLocals()
        b.entry = b.registered()
        b.reducer_nests = list(prev.reducer_nests)
        return b

    # -- buffers ---------------------------------------------------------------------------
    def info(self, var: Any) -> BufferInfo:
        found = self.infos.get(var)
        if found is not None:
            return found
        shape = [_const(s) for s in as_list(var.shape)]
        dtype = str(var.dtype)
        _check_int32_indexable(var, shape)
        layout = var.layout
        pinned = None if is_default_tile_layout(layout, var.shape) else layout
        dt = tvm.DataType(dtype)
        check_scope(str(var.name), str(var.scope()) or "global")
        info = BufferInfo(var=var, name=str(var.name), scope=str(var.scope()) or "global",
                          shape=shape, dtype=dtype, bits=int(dt.bits) * int(dt.lanes),
                          pinned_layout=pinned)
        self.infos[var] = info
        self.graph.buffers.append(info)
        return info

    def declare(self, node: Any) -> None:
        info = self.info(node.buffer)
        spec = reducer_spec(node)
        if spec is not None:
            object.__setattr__(info, "reducer", spec)
        if isinstance(node, tirx.DeclBuffer):
            data = node.data
            if isinstance(data, tvm.ir.Call) and str(data.op.name) == "tirx.buffer_data" \
                    and len(data.args) == 1 and tirx.is_buffer_var(data.args[0]):
                parent = self.info(data.args[0])
                if parent is not info:
                    self.data_of[info.var] = parent.var

    # -- expressions -----------------------------------------------------------------------
    def accesses(self, node: Any) -> list[Access]:
        """Every load/store under `node`, in evaluation order (post-order: operands first)."""
        out: list[Access] = []

        def on_load(n: Any) -> None:
            if tirx.is_buffer_var(n.source):
                out.append(Access(self.info(n.source), as_list(n.indices), True, False))

        def on_store(n: Any) -> None:
            out.append(Access(self.info(n.buffer), as_list(n.indices), False, True))

        def on_tile(n: Any) -> None:
            raise FrontendError(
                f"tile op {n.op.name} inside a T.parallel nest is not supported "
                f"(move it out of the loop):\n{_stmt_text(n)}")

        walk(node, order="post", entries=[
            (TensorLoad, on_load), (tirx.BufferStore, on_store), (TilePrimitiveCall, on_tile),
            ((tirx.AllocBuffer, tirx.DeclBuffer), self.declare),
            (tvm.ir.Call, lambda n: _mark_atomic(n, out)),
        ])
        return out

    def float_scan(self, *nodes: Any) -> None:
        """Record fragment accesses made outside any op."""
        for node in nodes:
            if node is None or isinstance(node, _LEAVES):
                continue        # nothing to load inside (region bounds and extents are mostly these)
            for acc in self.accesses(node):
                if acc.buffer.is_fragment:
                    self.graph.floating.append((acc.buffer, acc))

    # -- statements ------------------------------------------------------------------------
    def stmt(self, s: Any) -> None:
        if isinstance(s, tirx.SeqStmt):
            for c in as_list(s.seq):
                self.stmt(c)
        elif isinstance(s, TilePrimitiveCall):
            self.entry = self.registered()
            self.tile_op(s)
        elif isinstance(s, tirx.For):
            if _KIND_NAMES.get(int(s.kind), "serial") == "parallel":
                self.entry = self.registered()
            self.for_loop(s)
        elif isinstance(s, tirx.AttrStmt):
            self.attr(s)
        elif isinstance(s, tirx.IfThenElse):
            self.float_scan(s.condition)
            self.conds.append(s.condition)
            self.stmt(s.then_case)
            self.conds.pop()
            if s.else_case is not None:
                self.conds.append(tirx.Not(s.condition))
                self.stmt(s.else_case)
                self.conds.pop()
        elif isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)):
            self.declare(s)
        elif isinstance(s, tirx.BufferStore):
            self.float_scan(s)
            if str(s.buffer.scope()) in ("local", "local.var"):
                # a per-thread scalar (``t: T.int32 = tx``): remembered so a condition reading it is understood;
                # a store under a loop or an `if` makes its value unknown
                simple = not self.loops and not self.conds and all(_is_int(_const(i)) for i in s.indices)
                self.bound[s.buffer] = s.value if simple else None
        elif isinstance(s, tirx.Bind):
            self.float_scan(s.value)
            self.bound[s.var] = s.value
        elif isinstance(s, tirx.Evaluate):
            if finalized_buffer(s) is None:      # finalize_reducer names its buffer; lowering combines it
                self.float_scan(s.value)
        elif isinstance(s, tirx.AssertStmt):
            self.float_scan(s.condition)
        elif isinstance(s, tirx.While):
            self.float_scan(s.condition)
            self.loops.append(Loop(None, 0, None, "while"))
            self.stmt(s.body)
            self.loops.pop()
        else:
            self.generic(s)

    def generic(self, s: Any) -> None:
        """Statements without a dedicated rule: recurse into nested statements, scan the rest."""
        failure: list[BaseException] = []

        def visit(node: Any, visitor: Any) -> None:
            if failure:
                return
            try:
                if node is s:
                    visitor.default_visit(node)
                elif isinstance(node, tirx.Stmt):
                    self.stmt(node)
                else:
                    self.float_scan(node)
            except Exception as exc:  # re-raised below (the FFI would wrap it)
                failure.append(exc)

        tvm_ffi.structural_visit(s, [((tirx.Stmt, TensorLoad), visit)])
        if failure:
            raise failure[0]

    def attr(self, s: Any) -> None:
        if s.attr_key == "thread_extent" and isinstance(s.node, tirx.IterVar):
            self.launch(str(s.node.thread_tag), s.node.var, s.value, s)
        else:
            self.float_scan(s.value)
        self.stmt(s.body)

    def launch(self, tag: str, var: Any, extent: Any, node: Any) -> None:
        ext = _const(extent)
        if tag.startswith("blockIdx."):
            self.graph.block_vars.setdefault(tag, var)
            self.graph.block_extents.setdefault(tag, ext)
            return
        if not tag.startswith("threadIdx."):
            return
        if not _is_int(ext):
            raise FrontendError(
                f"{tag} extent must be a constant to infer layouts, got `{_text(extent)}` "
                f"(thread variable `{var.name}`, line {_line(node)})")
        if ext < 1:
            raise FrontendError(f"{tag} extent {ext} launches no thread (thread variable `{var.name}`, line "
                                f"{_line(node)}); a block needs at least one")
        prev = self.thread_extents.setdefault(tag, ext)
        if prev != ext:
            raise FrontendError(f"{tag} is launched twice with different extents ({prev} and {ext})")
        if tag == "threadIdx.x":
            self.graph.thread_var = var
            self.graph.thread_extent = ext
        elif ext != 1:
            raise FrontendError(
                f"{tag} = {ext}: the op graph models a 1-D thread block (threadIdx.x only); "
                f"tl.infer_layouts and tl.lower fold the thread dimensions into the linear thread id "
                f"(passes/thread_dims.py) before building it")

    def for_loop(self, s: Any) -> None:
        kind = _KIND_NAMES.get(int(s.kind), "serial")
        if kind == "parallel":
            self.parallel(s)
            return
        self.float_scan(s.min, s.extent)
        if kind == "thread_binding":
            binding = s.thread_binding
            if binding is not None:
                self.launch(str(binding.thread_tag), s.loop_var, s.extent, s)
            self.stmt(s.body)
            return
        self.loops.append(Loop(s.loop_var, _const(s.min), _const(s.extent), kind))
        self.stmt(s.body)
        self.loops.pop()

    # -- ops -------------------------------------------------------------------------------
    def add(self, cls: type, stmt: Any, **fields: Any) -> None:
        op = cls(index=len(self.graph.ops), stmt=stmt, serial_loops=tuple(self.loops),
                 conditions=tuple(self.conds), **fields)
        rng = thread_range_of(op, self.graph.thread_var, self.graph.thread_extent, self.bound, self.uniform)
        if rng is not None:
            op = dataclasses.replace(op, thread_range=rng)
        self.graph.ops.append(op)
        self.graph.registered_before.append(self.entry)

    def registered(self) -> tuple:
        """How many buffers and floating accesses the walk has recorded so far."""
        return len(self.graph.buffers), len(self.graph.floating)

    def parallel(self, root: Any) -> None:
        nest = [root]
        while isinstance(nest[-1].body, tirx.For) and int(nest[-1].body.kind) == int(tirx.ForKind.PARALLEL):
            nest.append(nest[-1].body)
        self.float_scan(*[x for l in nest for x in (l.min, l.extent)])
        body = nest[-1].body
        tv = self.graph.thread_var
        if tv is not None and any(v.same_as(tv) for v in _free_vars(body)):
            raise FrontendError(
                f"the T.parallel nest over {', '.join(l.loop_var.name for l in nest)} reads the thread index "
                f"{tv.name}; which thread runs an iteration is decided by its layout, so the result would depend on "
                f"it (use the loop variables, or move the thread-dependent part out of the nest):\n{_stmt_text(root)}")
        merged: list[Access] = []
        for acc in self.accesses(body):
            for k, seen in enumerate(merged):
                if seen.buffer is acc.buffer and len(seen.indices) == len(acc.indices) and all(
                        tvm_ffi.structural_equal(x, y) for x, y in zip(seen.indices, acc.indices)):
                    merged[k] = Access(seen.buffer, seen.indices, seen.is_read or acc.is_read,
                                       seen.is_write or acc.is_write)
                    break
            else:
                merged.append(acc)
        if any(r.same_as(root) for r in self.reducer_nests):
            # partial updates of a replication="all" reducer: each running thread accumulates into its own copy
            merged = [Access(a.buffer, a.indices, True, False, True)
                      if a.buffer.reducer is not None and a.buffer.reducer[1] == "all" else a for a in merged]
        inner: list[Loop] = []

        def on_for(n: Any) -> None:
            inner.append(Loop(n.loop_var, _const(n.min), _const(n.extent),
                              _KIND_NAMES.get(int(n.kind), "serial")))
        walk(body, [(tirx.For, on_for)], order="pre")
        extents = [_const(l.extent) for l in nest]
        key = (",".join(str(l.loop_var.name) for l in nest) + "["
               + "x".join(_text(e) for e in extents) + "]")
        seen_count = self.keys.get(key, 0) + 1
        self.keys[key] = seen_count
        if seen_count > 1:
            key = f"{key}#{seen_count}"
        annotations = {str(k): root.annotations[k] for k in sorted(str(k) for k in root.annotations)}
        self.add(ParallelOp, root, root=root, loop_vars=[l.loop_var for l in nest],
                 extents=extents, mins=[_const(l.min) for l in nest], accesses=merged,
                 inner_loops=inner, key=key, annotations=annotations)

    def region(self, arg: Any, call: Any, what: str) -> Region:
        if not isinstance(arg, TensorRegion) or not tirx.is_buffer_var(arg.source):
            raise FrontendError(f"{call.op.name}: {what} must be a buffer region, got "
                                f"`{_text(arg)}`:\n{_stmt_text(call)}")
        info = self.info(arg.source)
        ranges = as_list(arg.region)
        if len(ranges) != info.rank:
            raise FrontendError(
                f"{call.op.name}: {what} region {_text(arg)} has rank {len(ranges)} but buffer "
                f"`{info.name}` has rank {info.rank}:\n{_stmt_text(call)}")
        self.float_scan(*[x for r in ranges for x in (r.min, r.extent)])
        region = Region(info, [r.min for r in ranges], [_const(r.extent) for r in ranges])
        for d, (off, ext, dim) in enumerate(zip(region.offsets, region.extents, info.shape)):
            off = _const(off)
            if _is_int(ext) and ext < 1:
                raise FrontendError(f"{call.op.name}: {what} region {region} has extent {ext} in dimension {d}:\n"
                                    f"{_stmt_text(call)}")
            if _is_int(off) and _is_int(ext) and _is_int(dim) and (off < 0 or off + ext > dim) and \
                    not (info.is_global and self.safe_memory and off < dim and off + ext > 0):
                # a global region running partly past the buffer is a partial tile: safe memory guards it
                raise FrontendError(
                    f"{call.op.name}: {what} region {region} lies outside buffer `{info.name}` (dimension {d} has "
                    f"extent {dim}, the region covers [{off}, {off + ext})):\n{_stmt_text(call)}")
        return region


    def tile_op(self, call: Any) -> None:
        name = str(call.op.name)
        args = as_list(call.args)
        short = name.rsplit(".", 1)[-1]
        if name in ("tirx.tile.copy", "tirx.tile.copy_async"):
            self._arity(call, args, 2)
            dst, src = self.region(args[0], call, "destination"), self.region(args[1], call, "source")
            _match(call, "copy", [dst, src])
            plan = _conversion_plan(call)
            if plan is not None:
                self.add(ConvertOp, call, dst=dst, src=src, plan=plan)
            else:
                self.add(CopyOp, call, dst=dst, src=src, is_async=short == "copy_async")
        elif name == "tirx.tile.fill":
            self._arity(call, args, 2)
            dst = self.region(args[0], call, "destination")
            self.float_scan(args[1])
            self.add(FillOp, call, dst=dst, value=args[1])
        elif name in _REDUCERS:
            self._arity(call, args, 4)
            dst, src = self.region(args[0], call, "destination"), self.region(args[1], call, "source")
            axes = _reduce_axes(call, args[2], src, dst)
            self.add(ReduceOp, call, reducer=_REDUCERS[name], dst=dst, src=src, axes=axes,
                     clear=not bool(_const(args[3])))
        elif name == "tirx.tile.gemm":
            self._arity(call, args, 8)
            c, a, b = (self.region(args[k], call, w) for k, w in ((0, "D"), (1, "A"), (2, "B")))
            bias = self.region(args[3], call, "C") if args[3] is not None else None
            ta, tb = bool(_const(args[4])), bool(_const(args[5]))
            self.float_scan(args[6], args[7])
            _check_gemm(call, c, a, b, bias, ta, tb)
            self.add(GemmOp, call, c=c, a=a, b=b, transpose_a=ta, transpose_b=tb, bias=bias,
                     alpha=args[6], beta=args[7], policy=_gemm_policy(call))
        elif name.startswith("tirx.tile.") and short in _ELEMENTWISE:
            dst = self.region(args[0], call, "destination")
            srcs, params = [], []
            for k, a in enumerate(args[1:], 1):
                if isinstance(a, TensorRegion):
                    srcs.append(self.region(a, call, f"argument {k}"))
                else:
                    self.float_scan(a)
                    params.append(a)
            self.add(ElementwiseOp, call, name=short, dst=dst, srcs=srcs, params=params)
        elif name.startswith("tirx.tile.") and short in COMPOSITE_OPS:
            expand_composite(self, call, short, args)
        else:
            raise FrontendError(
                f"tile op {name} is not supported by layout inference (supported: copy, "
                f"copy_async, fill, sum, max, min, gemm, {', '.join(sorted(_ELEMENTWISE))}, "
                f"{', '.join(c for c in COMPOSITE_OPS if c != 'permute_layout')}):\n"
                f"{_stmt_text(call)}")

    @staticmethod
    def _arity(call: Any, args: list, n: int) -> None:
        if len(args) != n:
            raise FrontendError(f"{call.op.name}: expected {n} arguments, got {len(args)}:\n"
                                f"{_stmt_text(call)}")

    # -- finish ----------------------------------------------------------------------------
    def alias_groups(self) -> list[list[BufferInfo]]:
        def root(v: Any) -> Any:
            while v in self.data_of:
                v = self.data_of[v]
            return v
        groups: dict = {}
        order: list = []
        for info in self.graph.buffers:
            r = root(info.var)
            if r not in groups:
                groups[r] = []
                order.append(r)
            groups[r].append(info)
        return [groups[r] for r in order if len(groups[r]) > 1]


def _conversion_plan(call: Any) -> dict | None:
    """The decision dict of a conversion copy, None for an ordinary copy."""
    from .conversion import CONFIG_KEY
    config = call.config
    if config is None or CONFIG_KEY not in config:
        return None
    from tilelayout.annotate import _plain
    return _plain(config[CONFIG_KEY])


def _conjuncts(cond: Any) -> list:
    if isinstance(cond, tirx.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _free_vars(expr: Any) -> list:
    found: list = []

    def on_var(v: Any) -> None:
        if not any(v.same_as(w) for w in found):
            found.append(v)
    walk(expr, [(tvm.ir.Var, on_var)])
    return found


def _inline_bound(expr: Any, bound: dict) -> Any:
    """``expr`` with variables bound by ``Bind`` statements and loads of per-thread scalars replaced by their
    values (transitively); a scalar whose value is unknown stays a load."""
    from tilelayout.layout import substitute
    for _ in range(len(bound) + 1):
        vmap = {v: bound[v] for v in _free_vars(expr) if v in bound and bound[v] is not None
                and not tirx.is_buffer_var(v)}
        loads: list = []
        walk(expr, [(TensorLoad, lambda n: loads.append(n) if tirx.is_buffer_var(n.source) and
                      bound.get(n.source) is not None else None)])
        if not vmap and not loads:
            return expr
        if vmap:
            expr = substitute(expr, vmap)
        if loads:
            expr = tvm_ffi.structural_map(expr, (TensorLoad, lambda n: bound[n.source] if tirx.is_buffer_var(
                n.source) and bound.get(n.source) is not None else n))
    return expr


def _per_thread_loads(expr: Any) -> list:
    """Names of per-thread buffers ``expr`` reads (local scalars; a fragment element is one value in every holder)."""
    found: list = []
    walk(expr, [(TensorLoad, lambda n: found.append(str(n.source.name)) if tirx.is_buffer_var(n.source) and str(
        n.source.scope()) in ("local", "local.var") else None)])
    return sorted(set(found))


def thread_range_of(op: TileOp, thread_var: Any, threads: int, bound: dict | None = None,
                    uniform: UniformLocals = UniformLocals()) -> tuple | None:
    """(min, extent) of the threads that run ``op`` under its enclosing conditions, None when every thread does.

    A condition that does not read the thread index (nor a per-thread value other than the ``uniform`` local
    buffers, see ``uniform_locals``) is uniform across the block and leaves the range alone;
    one that reads only the thread index is decided by enumerating every launched thread and must select a
    non-empty contiguous range (``tx < 64``, ``64 <= tx < 128``); anything else (``tx % 2 == 0``, the thread
    index mixed with other values) is refused: the op's layouts could not be bound to the threads that run it.
    """
    if thread_var is None or not op.conditions:
        return None
    import numpy as np
    from tilelayout.evaluate import evaluate
    mask = np.ones(threads, dtype=bool)
    for cond in op.conditions:
        for part in _conjuncts(_inline_bound(cond, bound or {})):
            private = [name for name in _per_thread_loads(part) if name not in uniform]
            if private:
                reasons = "".join(f" ({name}: {uniform.reason(name)})" for name in private if uniform.reason(name))
                raise FrontendError(
                    f"{op.describe()}: its condition `{_text(part)}` reads the per-thread value(s) "
                    f"{', '.join(private)}{reasons}, so the threads that run it cannot be told; guard tile ops and "
                    f"parallel loops with a condition on {thread_var.name} alone (`{thread_var.name} < 64`), or on a "
                    f"local copy of block-uniform data (`flags[k] = Mask[bx, k]`)")
            free = _free_vars(part)
            if not any(v.same_as(thread_var) for v in free):
                continue
            others = [v.name for v in free if not v.same_as(thread_var)]
            if others:
                raise FrontendError(
                    f"{op.describe()}: its condition `{_text(part)}` mixes the thread index {thread_var.name} with "
                    f"{', '.join(others)}; an op under a thread-dependent `if` must be guarded by a condition on "
                    f"{thread_var.name} alone (a contiguous range such as `{thread_var.name} < 64`)")
            try:
                hit = np.broadcast_to(evaluate(part, {thread_var: np.arange(threads, dtype=np.int64)}), (threads,))
            except TileLayoutError as err:
                raise FrontendError(f"{op.describe()}: cannot decide which threads its condition `{_text(part)}` "
                                    f"selects: {err}") from None
            mask &= hit.astype(bool)
    if mask.all():
        return None
    on = np.nonzero(mask)[0]
    if on.size == 0:
        raise FrontendError(f"{op.describe()}: its conditions {' and '.join(_text(c) for c in op.conditions)} "
                            f"select no thread of the {threads} launched; remove the dead op")
    lo, hi = int(on[0]), int(on[-1]) + 1
    if on.size != hi - lo:
        raise FrontendError(
            f"{op.describe()}: its conditions {' and '.join(_text(c) for c in op.conditions)} select threads that "
            f"are not one contiguous range ({on.size} of {threads}, first {lo}, last {hi - 1}); layouts are bound "
            f"to a thread range, so guard tile ops and parallel loops with `lo <= {thread_var.name} < hi`")
    return lo, hi - lo


def _mark_atomic(call: Any, out: list[Access]) -> None:
    """An atomic read-modify-write (`atomicAdd(&B[i], v)`): its target, already recorded as a read
    (post-order), becomes a read and a write. Atomics update global or shared memory only."""
    if not is_atomic_call(call):
        return
    at = atomic_of(call)
    if at is None:
        raise FrontendError(f"atomic {call}: the destination must be the address of one buffer element, "
                            f"`T.address_of(B[i])` (or use tilelayout.lang.atomic_add(B[i], value))")
    for k in range(len(out) - 1, -1, -1):
        a = out[k]
        if a.buffer.var.same_as(at.target.source) and a.is_read and not a.is_write and len(a.indices) == len(
                at.target.indices) and all(tvm_ffi.structural_equal(x, y) for x, y in zip(a.indices, at.target.indices)):
            if not (a.buffer.is_global or a.buffer.is_shared):
                raise FrontendError(
                    f"atomic {at.kind} on {a.buffer.name} ({a.buffer.scope}): atomics update global or shared "
                    f"memory; a {a.buffer.scope} buffer is private to a thread, so write `{a.buffer.name}[...] = ...` "
                    f"(or reduce with Tx.sum/Tx.max/Tx.min)")
            out[k] = Access(a.buffer, a.indices, True, True)
            return


def _gemm_policy(call: Any) -> str | None:
    """The ``warp_policy`` (or ``policy``) keyword of a ``Tx.gemm`` call, kept as written (None if absent)."""
    config = getattr(call, "config", None) or {}
    for key in ("warp_policy", "policy"):
        if key in config:
            return str(config[key])
    return None


def _check_gemm(call: Any, c: Region, a: Region, b: Region, bias: Region | None,
                ta: bool, tb: bool) -> None:
    mats = {"D": c, "A": a, "B": b} | ({"C": bias} if bias is not None else {})
    dims = {}
    for name, r in mats.items():
        s = r.squeezed_extents()
        if len(s) != 2:
            raise FrontendError(f"{call.op.name}: operand {name} = {r} must be a 2-D tile "
                                f"(unit dims aside), got extents {[_text(x) for x in r.extents]}:\n"
                                f"{_stmt_text(call)}")
        dims[name] = s
    m, k = dims["A"][::-1] if ta else dims["A"]
    k2, n = dims["B"][::-1] if tb else dims["B"]
    checks = [("K", [k], [k2]), ("D", dims["D"], [m, n])]
    if bias is not None:
        checks.append(("C", dims["C"], [m, n]))
    for name, got, exp in checks:
        if any(_is_int(x) and _is_int(y) and x != y for x, y in zip(got, exp)):
            raise FrontendError(
                f"{call.op.name}: shapes do not agree ({name}: {[_text(x) for x in got]} vs "
                f"{[_text(x) for x in exp]}); A={a}{'^T' if ta else ''}, B={b}{'^T' if tb else ''}, "
                f"D={c}:\n{_stmt_text(call)}")


def build_op_graph(func: Any) -> OpGraph:
    """Read a TIRx PrimFunc (or a one-function IRModule) into an `OpGraph`."""
    func = module_func(func, FrontendError)
    if not isinstance(func, tirx.PrimFunc):
        raise FrontendError(f"build_op_graph expects a tvm.tirx.PrimFunc, got {type(func).__name__}")
    b = _Builder(func)
    b.reducer_nests = check_reducers(func)
    for p in as_list(func.params):
        if tirx.is_buffer_var(p):
            b.info(p)
    b.stmt(func.body)
    b.graph.aliases = b.alias_groups()
    b.graph.reducer_nests = b.reducer_nests
    b.graph.registered_at_end = b.registered()
    _check_region_handoffs(b.graph)
    return b.graph


def graph_after_split(prev: OpGraph, func: Any, reader: int, replacement: Any) -> OpGraph | None:
    """The op graph of ``func``: ``prev.func`` with the statement of its op ``reader`` replaced by
    ``replacement`` (an epilogue split's allocation, conversion and redirected store), made from ``prev``
    instead of walking the whole function again; None when that is not shown to be what a full build gives.

    It is when the reader is the last op, an unconditional copy made by a statement of its own, and the walk
    recorded nothing (no buffer, no floating access) from the start of its statement to the end: then a full
    build of ``func`` records everything ``prev`` recorded before that statement, then exactly what the
    replacement records, then nothing; the ops before the reader are the same statements, so ``prev``'s op
    objects stand for them.
    """
    op = prev.ops[reader] if 0 <= reader < len(prev.ops) else None
    if not isinstance(op, CopyOp) or reader != len(prev.ops) - 1 or op.conditions \
            or prev.registered_before[reader] != prev.registered_at_end:
        return None
    if any(other.stmt.same_as(op.stmt) for other in prev.ops[:reader]):
        return None             # one statement made several ops (a composite): rebuilt, it would make them again
    b = _Builder.continuing(prev, func, reader)
    b.stmt(replacement)
    b.graph.registered_at_end = b.registered()
    # no _check_region_handoffs: it passed on prev's ops, and the new ops run on the whole block
    return b.graph


def _region_key(op: TileOp) -> tuple:
    """Identity of the ``if`` block an op sits in: its condition nodes (an else branch by its negated ``if``)."""
    out = []
    for c in op.conditions:
        node = c.a if isinstance(c, tirx.Not) else c
        out.append((isinstance(c, tirx.Not), node.__chandle__()))     # the node itself, not its value
    return tuple(out)


def _written_and_read(op: TileOp) -> tuple[list, list]:
    if isinstance(op, ParallelOp):
        return ([a.buffer for a in op.accesses if a.is_write], [a.buffer for a in op.accesses if not a.is_write])
    regions = op.regions()
    return [regions[0].buffer], [r.buffer for r in regions[1:]]


def _check_region_handoffs(graph: OpGraph) -> None:
    """Refuse a shared buffer written and then read inside one thread-conditioned region (``if tx < 88``):
    other threads of the region may produce what a thread reads, which needs a barrier between the two ops,
    and ``__syncthreads`` cannot run where only part of the block is (a named barrier needs whole warps and
    is not inserted here). Ending the region, synchronising outside it and starting a new one is the fix."""
    writers: dict = {}
    for op in graph.ops:
        if op.thread_range is None:
            writers.clear()            # whole-block code between regions: the user's barrier can sit there
            continue
        key = _region_key(op)
        written, read = _written_and_read(op)
        for buf in read:
            hit = writers.get((key, buf.name))
            if buf.is_shared and hit is not None:
                lo, ext = op.thread_range
                raise FrontendError(
                    f"{op.describe()} reads shared buffer {buf.name} that {hit.describe()} wrote in the same "
                    f"thread-conditioned region (threads [{lo}, {lo + ext})): another thread of the region may have "
                    f"written what it reads, which needs a barrier between them, and __syncthreads cannot run inside "
                    f"the condition; end the region after the write, call T.tvm_storage_sync(\"shared\") outside it, "
                    f"and read in a new region")
        for buf in written:
            if buf.is_shared:
                writers[(key, buf.name)] = op
