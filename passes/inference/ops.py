"""The op graph: the data model the front end builds and layout inference reads.

Buffers (`BufferInfo`), regions and accesses, the tile ops and parallel nests (`TileOp` and its
subclasses), and `OpGraph`, which holds them in program order with the launch geometry. Kept apart
from the builder (`frontend.py`) so rules, cost models and lowering depend on the data only.
"""

from __future__ import annotations

import re
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, Iterable

import tvm
import tvm_ffi
from tvm import tirx

from tilelayout.errors import LayoutError
from tilelayout.expr import expr_text

from ..ir_utils import int_value

__all__ = [
    "FrontendError", "BufferInfo", "Region", "Access", "Loop", "TileOp", "CopyOp", "FillOp",
    "ReduceOp", "GemmOp", "ElementwiseOp", "ParallelOp", "ConvertOp", "OpGraph",
]

class FrontendError(LayoutError):
    """The kernel uses something the front end cannot model (message names it and shows its text)."""


# ----------------------------------------------------------------------------------------------
# small helpers

def _const(e: Any) -> Any:
    """A Python int for constant integer expressions, the expression itself otherwise."""
    value = int_value(e)
    return e if value is None else value


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
    return expr_text(e)


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
    reducer: Any = None          # (op, replication) of a tilelayout.lang.alloc_reducer fragment, else None

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
    #: a partial update of a replication="all" reducer (``R[i] = R[i] + v``): recorded as a read, since every
    #: thread running the iteration must hold the element and each holder keeps its own partial
    reducer_update: bool = False

    @property
    def is_constant(self) -> bool:
        """All indices are integer constants (e.g. `s[0]`)."""
        hit = self.__dict__.get("_is_constant")
        if hit is None:        # the rules ask on every step; an access never changes
            hit = all(_is_int(_const(i)) for i in self.indices)
            object.__setattr__(self, "_is_constant", hit)
        return hit

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

    def _touches(self) -> list:
        """What the op reads and writes, each with its ``buffer``: its regions (a nest: its accesses)."""
        return self.regions()

    def buffers(self) -> list[BufferInfo]:
        found = self.__dict__.get("_buffers")
        if found is None:      # asked on every step and every propose; an op never changes
            found = _unique(t.buffer for t in self._touches())
            object.__setattr__(self, "_buffers", found)
        return list(found)

    def _describe(self) -> str:
        return self.kind

    def describe(self) -> str:
        # formatted once per op (printing regions calls TVM's script printer); ops are immutable
        text = self.__dict__.get("_description")
        if text is None:
            text = f"{self._describe()} (op #{self.index})"
            object.__setattr__(self, "_description", text)
        return text

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
    # positional operands after dst (Region or scalar/None) when the op was expanded from a composite tile
    # primitive (unary_reduce, binary_chain, ...) whose call arguments are not in elementwise order
    operands: tuple | None = None

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

    def _touches(self) -> list:
        return self.accesses

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
    # (buffers, floating accesses) the walk had recorded as each op's statement began, and at its end
    registered_before: list = field(default_factory=list)
    registered_at_end: tuple = (0, 0)
    reducer_nests: list = field(default_factory=list)   # T.parallel roots updating a replication="all" reducer

    def fragments(self) -> list[BufferInfo]:
        return [b for b in self.buffers if b.is_fragment]

    def buffer(self, name_or_var: Any) -> BufferInfo:
        """Look a buffer up by name (first match) or by its TVM Var."""
        if isinstance(name_or_var, str):
            # by name through an index of the first of each name, rebuilt when the walk has added buffers
            # (every attempt's register count asks for each fragment's width)
            index = self.__dict__.get("_by_name")
            if index is None or index[0] != len(self.buffers):
                names: dict = {}
                for b in self.buffers:
                    names.setdefault(b.name, b)
                index = self.__dict__["_by_name"] = (len(self.buffers), names)
            hit = index[1].get(name_or_var)
            if hit is not None:
                return hit
        else:
            for b in self.buffers:
                if b.var.same_as(name_or_var):
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
