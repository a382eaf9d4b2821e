"""TIRx PrimFunc -> op graph: the buffers, tile ops and parallel nests layout inference reasons about.

Kernels are ordinary TVMScript TIRx functions (the README's "Use it as a pass"). This module
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
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, Iterable

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.errors import LayoutError, TileLayoutError
from tilelayout.tile_layout_interop import is_default_tile_layout

from ..ir_utils import walk

__all__ = [
    "FrontendError", "BufferInfo", "Region", "Access", "Loop", "TileOp", "CopyOp", "FillOp",
    "ReduceOp", "GemmOp", "ElementwiseOp", "ParallelOp", "ConvertOp", "OpGraph", "build_op_graph",
]


class FrontendError(LayoutError):
    """The kernel uses something the front end cannot model (message names it and shows its text)."""


# ----------------------------------------------------------------------------------------------
# small helpers

def _const(e: Any) -> Any:
    """A Python int for constant integer expressions, the expression itself otherwise."""
    if isinstance(e, bool):
        return e
    if isinstance(e, int):
        return e
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    return e


def _simplify(e: Any) -> Any:
    return tvm.sym.Analyzer().simplify(e)


def _is_int(e: Any) -> bool:
    return isinstance(e, int) and not isinstance(e, bool)


def _same(a: Any, b: Any) -> bool:
    """Provably equal extents: equal ints, or structurally equal expressions."""
    a, b = _const(a), _const(b)
    if _is_int(a) or _is_int(b):
        return a == b if _is_int(a) and _is_int(b) else False
    return bool(tvm_ffi.structural_equal(a, b))


def _text(e: Any) -> str:
    """Short printed form of an expression or value."""
    if isinstance(e, tirx.IntImm):
        return str(int(e.value))
    if isinstance(e, tirx.FloatImm):
        return repr(float(e.value))
    return str(e)


_DECL_LINE = re.compile(r"^\w+(: [\w.]+)? = T\.\w+\(.*\)$|^\w+: T\.\w+$")


def _stmt_text(stmt: Any) -> str:
    """The statement as TVMScript, without the free-variable declarations the printer adds."""
    try:
        lines = [l for l in stmt.script().splitlines() if l.strip() and not l.startswith("#")]
    except Exception:  # printing must never hide the real error
        return repr(stmt)
    while len(lines) > 1 and _DECL_LINE.match(lines[0]):
        lines.pop(0)
    where = f"line {_line(stmt)}: " if _line(stmt) is not None else ""
    text = "\n    ".join(lines[:6]) + ("\n    ..." if len(lines) > 6 else "")
    return f"    {where}{text}"


def _line(node: Any) -> int | None:
    span = getattr(node, "span", None)
    return int(span.line) if span is not None else None


_KIND_NAMES = {
    int(tirx.ForKind.SERIAL): "serial",
    int(tirx.ForKind.PARALLEL): "parallel",
    int(tirx.ForKind.VECTORIZED): "vectorized",
    int(tirx.ForKind.UNROLLED): "unrolled",
    int(tirx.ForKind.THREAD_BINDING): "thread_binding",
}


# ----------------------------------------------------------------------------------------------
# data model

@dataclass(frozen=True, eq=False)
class BufferInfo:
    """One buffer of the kernel; identity is the TVM buffer Var (one BufferInfo per Var)."""

    var: Any
    name: str
    scope: str
    shape: list
    dtype: str
    bits: int
    pinned_layout: Any = None

    @property
    def is_fragment(self) -> bool:
        return self.scope == "local.fragment"

    @property
    def is_shared(self) -> bool:
        return self.scope.startswith("shared")

    @property
    def is_global(self) -> bool:
        return self.scope == "global"

    @property
    def is_local(self) -> bool:
        return self.scope in ("local", "local.var")

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        shape = ", ".join(_text(s) for s in self.shape)
        pin = " pinned" if self.pinned_layout is not None else ""
        return f"BufferInfo({self.name}: {self.dtype}[{shape}] {self.scope}{pin})"


@dataclass(frozen=True, eq=False)
class Region:
    """A rectangular box of a buffer: `offsets[d] : offsets[d] + extents[d]` per dimension."""

    buffer: BufferInfo
    offsets: list
    extents: list

    @property
    def is_full(self) -> bool:
        """The region is the whole buffer (provably: constant offsets 0, extents = shape)."""
        return all(_const(o) == 0 for o in self.offsets if _is_int(_const(o))) and all(
            _is_int(_const(o)) for o in self.offsets) and all(
            _same(e, s) for e, s in zip(self.extents, self.buffer.shape))

    @property
    def rank(self) -> int:
        return len(self.extents)

    def squeezed_extents(self) -> list:
        """Extents without the unit dimensions (TIRx matches tile-op regions this way)."""
        return [e for e in self.extents if not (_is_int(e) and e == 1)]

    def __str__(self) -> str:
        parts = []
        for o, e in zip(self.offsets, self.extents):
            oc = _const(o)
            if _is_int(oc) and _is_int(e):
                parts.append(f"{oc}:{oc + e}")
            else:
                parts.append(f"{_text(o)}:{_text(_simplify(o + e))}")
        return f"{self.buffer.name}[{', '.join(parts)}]"

    __repr__ = __str__


@dataclass(frozen=True, eq=False)
class Access:
    """One buffer access (load and/or store) at one index tuple."""

    buffer: BufferInfo
    indices: list
    is_read: bool
    is_write: bool

    @property
    def is_constant(self) -> bool:
        """All indices are integer constants (e.g. `s[0]`)."""
        return all(_is_int(_const(i)) for i in self.indices)

    def __str__(self) -> str:
        rw = ("r" if self.is_read else "") + ("w" if self.is_write else "")
        return f"{self.buffer.name}[{', '.join(_text(i) for i in self.indices)}]:{rw}"

    __repr__ = __str__


@dataclass(frozen=True, eq=False)
class Loop:
    """A loop met on the way (serial loop around an op, or a non-nest loop inside a nest)."""

    var: Any
    min: Any
    extent: Any        # int, PrimExpr, or None for a `while`
    kind: str          # "serial", "unrolled", "vectorized", "parallel", "while"

    def __repr__(self) -> str:
        return f"Loop({self.var.name if self.var is not None else '-'}, {self.kind}, {_text(self.extent)})"


@dataclass(frozen=True, eq=False)
class TileOp:
    """Base of every op: program-order `index`, IR node `stmt`, context it sits in."""

    kind: ClassVar[str] = "op"
    _: KW_ONLY
    index: int = 0
    stmt: Any = None
    serial_loops: tuple = ()     # enclosing non-parallel loops, outermost first
    conditions: tuple = ()       # enclosing `if` conditions (negated for else branches)
    thread_range: tuple | None = None   # (min, extent) of the threads the conditions let run it; None: all

    @property
    def serial_repeat(self) -> int | None:
        """How often the op runs per launch: product of constant trip counts of enclosing loops."""
        n = 1
        for loop in self.serial_loops:
            if not _is_int(loop.extent):
                return None
            n *= loop.extent
        return n

    @property
    def line(self) -> int | None:
        """Source line of the op, when the parser recorded one."""
        return _line(self.stmt)

    def regions(self) -> list[Region]:
        return []

    def buffers(self) -> list[BufferInfo]:
        return _unique(r.buffer for r in self.regions())

    def _describe(self) -> str:
        return self.kind

    def describe(self) -> str:
        return f"{self._describe()} (op #{self.index})"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


def _unique(bufs: Iterable[BufferInfo]) -> list[BufferInfo]:
    out: list[BufferInfo] = []
    for b in bufs:
        if not any(b is o for o in out):
            out.append(b)
    return out


@dataclass(frozen=True, eq=False, repr=False)
class CopyOp(TileOp):
    kind: ClassVar[str] = "copy"
    dst: Region
    src: Region
    is_async: bool = False

    def regions(self) -> list[Region]:
        return [self.dst, self.src]

    def _describe(self) -> str:
        return f"{'copy_async' if self.is_async else 'copy'} {self.dst} <- {self.src}"


@dataclass(frozen=True, eq=False, repr=False)
class ConvertOp(TileOp):
    """A layout conversion inference inserted (``T.tile.copy`` carrying a ``tilelayout_conversion`` config):
    ``dst`` is a second version of the fragment ``src`` with its own layout; no layout rule links the two."""

    kind: ClassVar[str] = "convert"
    dst: Region
    src: Region
    plan: dict = field(default_factory=dict)

    def regions(self) -> list[Region]:
        return [self.dst, self.src]

    def _describe(self) -> str:
        return f"convert {self.dst} <- {self.src}"


@dataclass(frozen=True, eq=False, repr=False)
class FillOp(TileOp):
    kind: ClassVar[str] = "fill"
    dst: Region
    value: Any

    def regions(self) -> list[Region]:
        return [self.dst]

    def _describe(self) -> str:
        return f"fill {self.dst} = {_text(self.value)}"


@dataclass(frozen=True, eq=False, repr=False)
class ReduceOp(TileOp):
    """`dst = reduce(src, axes)`; `clear` is TileLang's flag (TIRx's `accum` is its negation)."""

    kind: ClassVar[str] = "reduce"
    reducer: str
    dst: Region
    src: Region
    axes: list = field(default_factory=list)
    clear: bool = True

    @property
    def accum(self) -> bool:
        return not self.clear

    def regions(self) -> list[Region]:
        return [self.dst, self.src]

    def _describe(self) -> str:
        acc = " accum" if self.accum else ""
        return f"{self.reducer} {self.dst} <- {self.src} axes={list(self.axes)}{acc}"


@dataclass(frozen=True, eq=False, repr=False)
class GemmOp(TileOp):
    """`c = a @ b * alpha + bias * beta` (TIRx `tile.gemm(D, A, B, C, tA, tB, alpha, beta)`)."""

    kind: ClassVar[str] = "gemm"
    c: Region
    a: Region
    b: Region
    transpose_a: bool = False
    transpose_b: bool = False
    bias: Region | None = None
    alpha: Any = 1.0
    beta: Any = 0.0
    policy: str | None = None      # warp policy the user gave (`Tx.gemm(..., warp_policy="full_row")`)

    @property
    def clear(self) -> bool:
        """True when the old accumulator/bias is not read (beta is the constant 0)."""
        return isinstance(self.beta, (tirx.FloatImm, tirx.IntImm)) and float(self.beta.value) == 0.0

    @property
    def accumulate(self) -> bool:
        """True for the usual `C += A @ B`: bias is the accumulator's own region and beta != 0."""
        return (not self.clear and self.bias is not None and self.bias.buffer is self.c.buffer)

    def regions(self) -> list[Region]:
        rs = [self.c, self.a, self.b]
        return rs + ([self.bias] if self.bias is not None and not self.clear else [])

    def _describe(self) -> str:
        ta = "^T" if self.transpose_a else ""
        tb = "^T" if self.transpose_b else ""
        text = f"gemm {self.c} <- {self.a}{ta} @ {self.b}{tb}"
        if not self.clear:
            text += f" + {self.bias}" if self.bias is not None else ""
        return text


@dataclass(frozen=True, eq=False, repr=False)
class ElementwiseOp(TileOp):
    """Simple elementwise tile op (`add`, `exp`, `cast`, ...): dst[x] = f(srcs[x], params)."""

    kind: ClassVar[str] = "elementwise"
    name: str
    dst: Region
    srcs: list = field(default_factory=list)
    params: list = field(default_factory=list)   # non-region arguments (scalars, None)

    def regions(self) -> list[Region]:
        return [self.dst, *self.srcs]

    def _describe(self) -> str:
        args = [str(s) for s in self.srcs] + [_text(p) for p in self.params if p is not None]
        return f"{self.name} {self.dst} <- {', '.join(args)}"


@dataclass(frozen=True, eq=False, repr=False)
class ParallelOp(TileOp):
    """A nest of directly nested `T.parallel` loops; `root` is the outermost."""

    kind: ClassVar[str] = "parallel"
    root: Any
    loop_vars: list = field(default_factory=list)
    extents: list = field(default_factory=list)
    mins: list = field(default_factory=list)
    accesses: list = field(default_factory=list)     # list[Access], first-appearance order
    inner_loops: list = field(default_factory=list)  # list[Loop] inside the nest body
    key: str = ""
    annotations: dict = field(default_factory=dict)

    def buffers(self) -> list[BufferInfo]:
        return _unique(a.buffer for a in self.accesses)

    def accesses_of(self, buffer: BufferInfo) -> list[Access]:
        return [a for a in self.accesses if a.buffer is buffer]

    @property
    def body(self) -> Any:
        """The innermost nest loop's body."""
        loop = self.root
        for _ in range(len(self.loop_vars) - 1):
            loop = loop.body
        return loop.body

    def _describe(self) -> str:
        return f"parallel {self.key}"


def _check_int32_indexable(var: Any, shape: list) -> None:
    """A buffer whose shape is int32 gets int32 index arithmetic all the way to the CUDA source; past 2^31
    elements its flat indices wrap around and the kernel would touch the wrong addresses. Refuse it."""
    if not all(_is_int(s) for s in shape) or any(str(getattr(s, "ty", "")) == "int64" for s in var.shape):
        return
    elements = 1
    for s in shape:
        elements *= int(s)
    if elements > 2**31 - 1:
        raise FrontendError(f"buffer {var.name} has {elements} elements, more than int32 indices can address "
                            f"(2^31 - 1); declare its shape with int64 extents (T.int64(...)) or split it")


# ----------------------------------------------------------------------------------------------
# the graph

@dataclass(eq=False)
class OpGraph:
    """What layout inference needs of one kernel; every list is in program order."""

    func: Any
    thread_var: Any = None
    thread_extent: int = 1
    block_vars: dict = field(default_factory=dict)      # {"blockIdx.x": Var}
    block_extents: dict = field(default_factory=dict)   # {"blockIdx.x": int | PrimExpr}
    buffers: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    floating: list = field(default_factory=list)        # [(BufferInfo, Access)]
    aliases: list = field(default_factory=list)         # [[BufferInfo, ...]] sharing data

    def fragments(self) -> list[BufferInfo]:
        return [b for b in self.buffers if b.is_fragment]

    def buffer(self, name_or_var: Any) -> BufferInfo:
        """Look a buffer up by name (first match) or by its TVM Var."""
        for b in self.buffers:
            if (b.name == name_or_var) if isinstance(name_or_var, str) else b.var.same_as(name_or_var):
                return b
        raise KeyError(f"no buffer {name_or_var!r} in {self.func_name}; buffers: "
                       f"{', '.join(b.name for b in self.buffers)}")

    def users(self, buffer: Any) -> list[int]:
        """Indices (program order) of the ops touching `buffer` (BufferInfo, name or Var)."""
        info = buffer if isinstance(buffer, BufferInfo) else self.buffer(buffer)
        return [op.index for op in self.ops if any(b is info for b in op.buffers())]

    def alias_group(self, buffer: BufferInfo) -> list[BufferInfo]:
        for group in self.aliases:
            if any(b is buffer for b in group):
                return group
        return [buffer]

    def op_thread_range(self, op: TileOp) -> tuple:
        """(min, extent) of the threads that run ``op`` (the whole block unless a condition narrows it)."""
        return op.thread_range if op.thread_range is not None else (0, self.thread_extent)

    def parallel_ops(self) -> list[ParallelOp]:
        return [op for op in self.ops if isinstance(op, ParallelOp)]

    @property
    def func_name(self) -> str:
        attrs = getattr(self.func, "attrs", None)
        if attrs is not None and "global_symbol" in attrs:
            return str(attrs["global_symbol"])
        return "kernel"

    def describe(self) -> str:
        """Multi-line summary (buffers, ops) for debugging and error reports."""
        lines = [f"threads={self.thread_extent} blocks={ {k: _text(v) for k, v in self.block_extents.items()} }"]
        lines += [f"  {b!r}" for b in self.buffers]
        lines += [f"  {op.describe()}" for op in self.ops]
        lines += [f"  floating {a}" for _, a in self.floating]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# building

_REDUCERS = {"tirx.tile.sum": "sum", "tirx.tile.max": "max", "tirx.tile.min": "min"}
_ELEMENTWISE = {
    "zero", "add", "sub", "mul", "fdiv", "maximum", "minimum", "cast",
    "exp", "exp2", "log2", "sqrt", "reciprocal", "silu", "fma",
}


class _Builder:
    """One pass over the statement tree in program order, with the loop/if context at hand."""

    def __init__(self, func: Any):
        self.func = func
        self.graph = OpGraph(func=func)
        self.infos: dict = {}          # buffer Var -> BufferInfo (Vars hash by identity)
        self.data_of: dict = {}        # buffer Var -> buffer Var whose storage it declares over
        self.loops: list[Loop] = []
        self.conds: list = []
        self.keys: dict[str, int] = {}
        self.thread_extents: dict[str, Any] = {}
        self.bound: dict = {}          # Var bound by a `Bind` statement -> its value (for thread conditions)

    # -- buffers ---------------------------------------------------------------------------
    def info(self, var: Any) -> BufferInfo:
        found = self.infos.get(var)
        if found is not None:
            return found
        shape = [_const(s) for s in var.shape]
        dtype = str(var.dtype)
        _check_int32_indexable(var, shape)
        layout = var.layout
        pinned = None if is_default_tile_layout(layout, var.shape) else layout
        dt = tvm.DataType(dtype)
        info = BufferInfo(var=var, name=str(var.name), scope=str(var.scope()) or "global",
                          shape=shape, dtype=dtype, bits=int(dt.bits) * int(dt.lanes),
                          pinned_layout=pinned)
        self.infos[var] = info
        self.graph.buffers.append(info)
        return info

    def declare(self, node: Any) -> None:
        info = self.info(node.buffer)
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
                out.append(Access(self.info(n.source), list(n.indices), True, False))

        def on_store(n: Any) -> None:
            out.append(Access(self.info(n.buffer), list(n.indices), False, True))

        def on_tile(n: Any) -> None:
            raise FrontendError(
                f"tile op {n.op.name} inside a T.parallel nest is not supported "
                f"(move it out of the loop):\n{_stmt_text(n)}")

        walk(node, order="post", entries=[
            (TensorLoad, on_load), (tirx.BufferStore, on_store), (TilePrimitiveCall, on_tile),
            ((tirx.AllocBuffer, tirx.DeclBuffer), self.declare),
        ])
        return out

    def float_scan(self, *nodes: Any) -> None:
        """Record fragment accesses made outside any op."""
        for node in nodes:
            if node is None or isinstance(node, (int, float, str, bool)):
                continue
            for acc in self.accesses(node):
                if acc.buffer.is_fragment:
                    self.graph.floating.append((acc.buffer, acc))

    # -- statements ------------------------------------------------------------------------
    def stmt(self, s: Any) -> None:
        if isinstance(s, tirx.SeqStmt):
            for c in s.seq:
                self.stmt(c)
        elif isinstance(s, TilePrimitiveCall):
            self.tile_op(s)
        elif isinstance(s, tirx.For):
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
                f"{tag} = {ext}: layout inference models a 1-D thread block (threadIdx.x only); "
                f"fold the thread dimensions into threadIdx.x")

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
        rng = thread_range_of(op, self.graph.thread_var, self.graph.thread_extent, self.bound)
        if rng is not None:
            op = dataclasses.replace(op, thread_range=rng)
        self.graph.ops.append(op)

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
        ranges = list(arg.region)
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
            if _is_int(off) and _is_int(ext) and _is_int(dim) and (off < 0 or off + ext > dim):
                raise FrontendError(
                    f"{call.op.name}: {what} region {region} lies outside buffer `{info.name}` (dimension {d} has "
                    f"extent {dim}, the region covers [{off}, {off + ext})):\n{_stmt_text(call)}")
        return region

    def tile_op(self, call: Any) -> None:
        name = str(call.op.name)
        args = list(call.args)
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
        else:
            raise FrontendError(
                f"tile op {name} is not supported by layout inference (supported: copy, "
                f"copy_async, fill, sum, max, min, gemm, {', '.join(sorted(_ELEMENTWISE))}):\n"
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


def thread_range_of(op: TileOp, thread_var: Any, threads: int, bound: dict | None = None) -> tuple | None:
    """(min, extent) of the threads that run ``op`` under its enclosing conditions, None when every thread does.

    A condition that does not read the thread index is uniform across the block and leaves the range alone;
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
            private = _per_thread_loads(part)
            if private:
                raise FrontendError(
                    f"{op.describe()}: its condition `{_text(part)}` reads the per-thread value(s) "
                    f"{', '.join(private)}, so the threads that run it cannot be told; guard tile ops and parallel "
                    f"loops with a condition on {thread_var.name} alone (`{thread_var.name} < 64`)")
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


def _match(call: Any, what: str, regions: list[Region]) -> None:
    """Tile-op regions must describe the same box once unit dimensions are dropped."""
    shapes = [r.squeezed_extents() for r in regions]
    first = shapes[0]
    for r, s in zip(regions[1:], shapes[1:]):
        bad = len(s) != len(first) or any(
            _is_int(x) and _is_int(y) and x != y for x, y in zip(s, first))
        if bad:
            raise FrontendError(
                f"{call.op.name}: regions {regions[0]} and {r} do not match (extents "
                f"{[_text(x) for x in first]} vs {[_text(x) for x in s]} without unit dims):\n"
                f"{_stmt_text(call)}")


def _reduce_axes(call: Any, raw: Any, src: Region, dst: Region) -> list[int]:
    items = list(raw) if not isinstance(raw, (int, tirx.IntImm)) else [raw]
    axes: list[int] = []
    for a in items:
        a = _const(a)
        if not _is_int(a) or not -src.rank <= a < src.rank:
            raise FrontendError(f"{call.op.name}: axis {_text(a)} out of range for source "
                                f"{src} of rank {src.rank}:\n{_stmt_text(call)}")
        axes.append(a % src.rank)
    axes = sorted(set(axes))
    kept = [e for d, e in enumerate(src.extents) if d not in axes]
    kept = [e for e in kept if not (_is_int(e) and e == 1)]
    got = dst.squeezed_extents()
    if len(got) != len(kept) or any(_is_int(x) and _is_int(y) and x != y for x, y in zip(got, kept)):
        raise FrontendError(
            f"{call.op.name}: destination {dst} does not match source {src} reduced over axes "
            f"{axes} (extents {[_text(x) for x in got]} vs {[_text(x) for x in kept]} without "
            f"unit dims):\n{_stmt_text(call)}")
    return axes


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
    if isinstance(func, tvm.IRModule):
        funcs = [f for _, f in sorted(func.functions.items(), key=lambda kv: str(kv[0]))
                 if isinstance(f, tirx.PrimFunc)]
        if len(funcs) != 1:
            raise FrontendError(f"expected an IRModule with one PrimFunc, got {len(funcs)}")
        func = funcs[0]
    if not isinstance(func, tirx.PrimFunc):
        raise FrontendError(f"build_op_graph expects a tvm.tirx.PrimFunc, got {type(func).__name__}")
    b = _Builder(func)
    for p in func.params:
        if tirx.is_buffer_var(p):
            b.info(p)
    b.stmt(func.body)
    b.graph.aliases = b.alias_groups()
    return b.graph
