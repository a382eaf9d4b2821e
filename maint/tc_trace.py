"""What a lowered kernel's tensor-core code does, evaluated per thread: the events ``maint/cute_oracle.py`` replays
under CuTe's definitions of the instructions.

The lowered TIR (``lower_func``'s result, before TVM's CUDA build) is walked to every innermost serial loop that
issues ``ldmatrix`` / ``mma.sync`` / ``wgmma`` (a gemm's k-step loop), and the statements of its enclosing
sequence that touch the gemm's temporary registers (operand registers, packed f16 accumulators) are run for all
threads at once with numpy: loop variables take every value, the thread index is a vector, every variable
outside (block indices, outer loops) is bound to 0 and, for an outer serial loop, to 1 as well (a pipelined
buffer's second stage). Nothing of the instructions' meaning is used here: an event only says which registers,
which shared address or which descriptor bits an instruction got, and which element a register store packed
into which bits.

Events (program order):
- ``Store(buffer, index[T], parts)``: a temporary register written from elements, ``parts`` = [(bit offset,
  source buffer, source index[T])];
- ``Unpack(buffer, index[T], source, source index[T], shift)``: a fragment element read back from a temporary;
- ``Issue(name, tokens, operands)``: one instruction; operands are ``("reg", buffer, index[T])``,
  ``("addr", buffer, element index[T])`` (ldmatrix) or ``("desc", buffer, bits[T])`` (wgmma descriptors, the
  shared address taken as the byte offset in the buffer, whose base the kernel declares aligned).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import tirx
from tvm.ir import TensorLoad

__all__ = ["Store", "Unpack", "Issue", "Region", "trace", "TraceError", "TC_OPS"]

TC_OPS = ("tirx.ptx.ldmatrix", "tirx.ptx.mma", "tirx.ptx.mma_f16acc", "tirx.ptx.mma_int", "tirx.ptx.mma_f64")


class TraceError(Exception):
    """The tensor-core code has a shape this tracer does not follow."""


@dataclass
class Store:
    buffer: object
    index: np.ndarray
    parts: list          # [(bit offset, source buffer, source index[T])]


@dataclass
class Unpack:
    buffer: object
    index: np.ndarray
    source: object
    source_index: np.ndarray
    shift: int


@dataclass
class Issue:
    name: str
    tokens: list
    operands: list


@dataclass
class Region:
    """The events of one gemm's tensor-core code under one binding of the outer variables."""

    events: list
    threads: np.ndarray          # the thread indices that run it (a guard may leave some out)
    binding: dict


def _op(call) -> str:
    return str(call.op.name) if isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) else ""


def is_tc_call(call) -> bool:
    name = _op(call)
    return name in TC_OPS or name.startswith("tirx.ptx.wgmma_") and not name.endswith(("fence", "group",
                                                                                      "wait_group"))


def _visit(node, types, fn) -> None:
    from tilelayout.passes.ir_utils import walk
    walk(node, [(types, fn)])


def _contains(node, types, pred) -> bool:
    hit = [False]

    def visit(n):
        if not hit[0] and pred(n):
            hit[0] = True
    _visit(node, types, visit)
    return hit[0]


def _has_tc(node) -> bool:
    return _contains(node, tvm.ir.Call, is_tc_call)


# ------------------------------------------------------------------ expressions

_BIN = {tirx.Add: np.add, tirx.Sub: np.subtract, tirx.Mul: np.multiply, tirx.Min: np.minimum,
        tirx.Max: np.maximum}
_CMP = {tirx.EQ: np.equal, tirx.NE: np.not_equal, tirx.LT: np.less, tirx.LE: np.less_equal,
        tirx.GT: np.greater, tirx.GE: np.greater_equal}


_BITS_NODE = {tirx.BitwiseAnd: "and", tirx.BitwiseOr: "or", tirx.BitwiseXor: "xor", tirx.LShift: "shl",
              tirx.RShift: "shr"}
_BITS_CALL = {"tirx.bitwise_and": "and", "tirx.bitwise_or": "or", "tirx.bitwise_xor": "xor",
              "tirx.shift_left": "shl", "tirx.shift_right": "shr"}


def _bitop(x):
    """(operation, a, b) of a bitwise node or call, else None."""
    kind = _BITS_NODE.get(type(x))
    if kind is not None:
        return kind, x.a, x.b
    kind = _BITS_CALL.get(_op(x))
    if kind is not None:
        return kind, x.args[0], x.args[1]
    return None


def _u64(x):
    return np.asarray(x).astype(np.uint64)


def evaluate(e, env: dict, nthreads: int):
    """``e`` for every thread: an int64 (uint64 for 64-bit unsigned expressions) array of length ``nthreads``."""
    def ev(x):
        if isinstance(x, tirx.IntImm):
            v = int(x.value)
            return np.full(nthreads, v, dtype=np.uint64 if str(x.ty) == "uint64" else np.int64) \
                if str(x.ty) == "uint64" else np.full(nthreads, v, dtype=np.int64)
        if isinstance(x, tirx.Var):
            if x not in env:
                raise TraceError(f"unbound variable {x}")
            return np.broadcast_to(np.asarray(env[x], dtype=np.int64), (nthreads,))
        if type(x) in _BIN:
            a, b = ev(x.a), ev(x.b)
            if str(x.ty) == "uint64":
                a, b = _u64(a), _u64(b)
            return _BIN[type(x)](a, b)
        if type(x) in _CMP:
            return _CMP[type(x)](ev(x.a), ev(x.b)).astype(np.int64)
        if isinstance(x, tirx.FloorDiv):
            return np.floor_divide(ev(x.a), ev(x.b))
        if isinstance(x, tirx.FloorMod):
            return np.mod(ev(x.a), ev(x.b))
        if isinstance(x, tirx.And):
            return (ev(x.a) & ev(x.b)).astype(np.int64)
        if isinstance(x, tirx.Or):
            return (ev(x.a) | ev(x.b)).astype(np.int64)
        if isinstance(x, tirx.Not):
            return (ev(x.a) == 0).astype(np.int64)
        if isinstance(x, tirx.Select):
            return np.where(ev(x.condition) != 0, ev(x.true_value), ev(x.false_value))
        if isinstance(x, tirx.Cast):
            v = ev(x.value)
            return _u64(v) if str(x.ty) == "uint64" else v.astype(np.int64)
        bit = _bitop(x)
        if bit is not None:
            kind, a, b = bit
            a, b = ev(a), ev(b)
            if str(x.ty) == "uint64":
                a, b = _u64(a), _u64(b)
            return {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "shl": np.left_shift,
                    "shr": np.right_shift}[kind](a, b)
        if isinstance(x, tvm.ir.Call):
            return call(x)
        raise TraceError(f"cannot evaluate {type(x).__name__} {x}")

    def call(c):
        name = _op(c)
        if name == "tirx.cuda.cvta_generic_to_shared":
            inner = c.args[0]
            if _op(inner) != "tirx.address_of" or not isinstance(inner.args[0], TensorLoad):
                raise TraceError(f"shared address {c} is not the address of a buffer element")
            load = inner.args[0]
            return ev(load.indices[0]) * (tvm.DataType(str(load.source.dtype)).bits // 8)
        if name == "tirx.tvm_thread_invariant":     # a marker for TVM's barrier placement: the value itself
            return ev(c.args[0])
        raise TraceError(f"cannot evaluate the call {name}")

    return ev(e)


def _parts(value) -> list:
    """[(bit offset, load)] of a register packed from elements (``lower_gemm.pack_elements``' shapes)."""
    name = _op(value)
    bit = _bitop(value)
    if isinstance(value, TensorLoad):
        return [(0, value)]
    if isinstance(value, tirx.Cast):
        return _parts(value.value)
    if name == "tirx.reinterpret":
        return _parts(value.args[0])
    if bit is not None and bit[0] == "or":
        return _parts(bit[1]) + _parts(bit[2])
    if bit is not None and bit[0] == "shl" and isinstance(bit[2], tirx.IntImm):
        return [(o + int(bit[2].value), l) for o, l in _parts(bit[1])]
    if bit is not None and bit[0] == "shr" and isinstance(bit[2], tirx.IntImm) and int(bit[2].value) == 16:
        inner = _parts(bit[1])        # bf16: the top half of the exact f32 value is the element
        if len(inner) == 1 and str(inner[0][1].source.dtype) == "bfloat16":
            return inner
    raise TraceError(f"cannot read the packed register value {value}")


def _unpack_source(value):
    """(temporary load, bit shift) an element is read back from, or None when ``value`` is not such a read."""
    shift = 0
    node = value
    while True:
        name = _op(node)
        bit = _bitop(node)
        if isinstance(node, TensorLoad):
            return node, shift
        if isinstance(node, tirx.Cast):
            node = node.value
        elif name == "tirx.reinterpret":
            node = node.args[0]
        elif bit is not None and bit[0] == "and":
            node = bit[1]
        elif bit is not None and bit[0] == "shr" and isinstance(bit[2], tirx.IntImm):
            shift += int(bit[2].value)
            node = bit[1]
        else:
            return None


# ------------------------------------------------------------------ statements

class _Runner:
    def __init__(self, temps: set, nthreads: int):
        self.temps, self.nthreads, self.events = temps, nthreads, []

    def index(self, expr, env):
        return np.asarray(evaluate(expr, env, self.nthreads), dtype=np.int64)

    def run(self, s, env):
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                self.run(x, env)
        elif isinstance(s, tirx.For):
            lo = self.index(s.min, env)
            ext = self.index(s.extent, env)
            if len(set(lo.tolist())) != 1 or len(set(ext.tolist())) != 1:
                raise TraceError(f"loop {s.loop_var} has a thread-dependent range")
            for v in range(int(lo[0]), int(lo[0]) + int(ext[0])):
                self.run(s.body, {**env, s.loop_var: v})
        elif isinstance(s, tirx.BufferStore):
            self.store(s, env)
        elif isinstance(s, tirx.Evaluate):
            if isinstance(s.value, tvm.ir.Call) and is_tc_call(s.value):
                self.issue(s.value, env)
        elif isinstance(s, tirx.LetStmt):
            self.run(s.body, {**env, s.var: evaluate(s.value, env, self.nthreads)})
        elif isinstance(s, tirx.IfThenElse):
            cond = self.index(s.condition, env)
            if len(set(cond.tolist())) != 1:
                raise TraceError(f"a thread-dependent branch inside tensor-core code: {s.condition}")
            branch = s.then_case if cond[0] else s.else_case
            if branch is not None:
                self.run(branch, env)
        elif isinstance(s, (tirx.AttrStmt, tirx.DeclBuffer)) and getattr(s, "body", None) is not None:
            self.run(s.body, env)
        elif isinstance(s, tirx.AllocBuffer):
            pass

    def store(self, s, env):
        if len(s.indices) != 1:
            return
        if any(s.buffer.same_as(t) for t in self.temps):
            parts = [(o, l.source, self.index(l.indices[0], env)) for o, l in _parts(s.value)
                     if len(l.indices) == 1]
            self.events.append(Store(s.buffer, self.index(s.indices[0], env), parts))
            return
        src = _unpack_source(s.value)
        if src is not None and any(src[0].source.same_as(t) for t in self.temps):
            load, shift = src
            self.events.append(Unpack(s.buffer, self.index(s.indices[0], env), load.source,
                                      self.index(load.indices[0], env), shift))

    def issue(self, c, env):
        operands = []
        name = _op(c)
        for a in c.args:
            if isinstance(a, tvm.ir.StringImm):
                continue
            if isinstance(a, TensorLoad) and len(a.indices) == 1:
                operands.append(("reg", a.source, self.index(a.indices[0], env)))
            elif name == "tirx.ptx.ldmatrix" and _op(a) == "tirx.cuda.cvta_generic_to_shared":
                load = a.args[0].args[0]
                operands.append(("addr", load.source, self.index(load.indices[0], env)))
            elif str(getattr(a, "ty", "")) == "uint64":
                bufs = []
                _visit(a, TensorLoad, lambda n: bufs.append(n.source))
                operands.append(("desc", bufs[0] if bufs else None, _u64(evaluate(a, env, self.nthreads))))
            elif isinstance(a, tirx.IntImm):
                operands.append(("imm", int(a.value)))
            else:
                operands.append(("value", a))
        tokens = [str(a.value) for a in c.args if isinstance(a, tvm.ir.StringImm)][:-1]
        self.events.append(Issue(name, tokens, operands))


def _temps(body, annotated: set) -> set:
    """Local buffers the tensor-core calls name that carry no layout annotation: the lowering's temporaries."""
    found: list = []

    def visit(n):
        if is_tc_call(n):
            for a in n.args:
                if isinstance(a, TensorLoad) and str(a.source.scope()).startswith("local") \
                        and str(a.source.name) not in annotated and not any(a.source.same_as(f) for f in found):
                    found.append(a.source)
    _visit(body, tvm.ir.Call, visit)
    return set(found)


def _reads_temp(node, temps) -> bool:
    return _contains(node, TensorLoad, lambda n: any(n.source.same_as(t) for t in temps)) \
        or _contains(node, tirx.BufferStore, lambda n: any(n.buffer.same_as(t) for t in temps))


def trace(func: tirx.PrimFunc) -> list:
    """Every gemm's tensor-core code of the lowered ``func`` as ``Region``s (module docstring)."""
    from tilelayout.passes.ir_utils import thread_launch
    tx, nthreads = thread_launch(func)
    annotated = set(str(k) for k in (func.attrs.get("tilelayout.layouts") or {}))
    temps = _temps(func.body, annotated)
    regions: list = []

    def visit(s, outer: list, guards: list):
        """``outer``: enclosing loop variables with their extents; ``guards``: enclosing conditions."""
        if isinstance(s, tirx.SeqStmt):
            seq = list(s.seq)
            ks = [x for x in seq if isinstance(x, tirx.For) and _is_kstep_loop(x)]
            if ks:
                picked = [x for x in seq if _has_tc(x) or _reads_temp(x, temps)]
                regions.extend(_run(picked, outer, guards))
                for x in seq:
                    if x not in picked:
                        visit(x, outer, guards)
                return
            for x in seq:
                visit(x, outer, guards)
        elif isinstance(s, tirx.For):
            if _is_kstep_loop(s):
                regions.extend(_run([s], outer, guards))
                return
            visit(s.body, outer + [(s.loop_var, s.extent, s.kind)], guards)
        elif isinstance(s, tirx.IfThenElse):
            visit(s.then_case, outer, guards + [(s.condition, True)])
            if s.else_case is not None:
                visit(s.else_case, outer, guards + [(s.condition, False)])
        elif getattr(s, "body", None) is not None and isinstance(s, (tirx.AttrStmt, tirx.LetStmt, tirx.DeclBuffer)):
            visit(s.body, outer, guards)

    def _run(stmts, outer, guards):
        out = []
        threads = np.arange(nthreads)
        for binding in _bindings(outer):
            env = {tx: threads, **binding}
            free = _free_vars(stmts + [g for g, _ in guards]) - set(env)
            env.update({v: 0 for v in free})
            active = np.ones(nthreads, dtype=bool)
            for cond, want in guards:
                try:
                    value = evaluate(cond, env, nthreads) != 0
                except TraceError:      # a block-uniform guard on memory (``block_mask[k]``): both sides traced
                    if tx in _free_vars([cond]):
                        raise
                    continue
                active &= value if want else ~value
            runner = _Runner(temps, nthreads)
            for x in stmts:
                runner.run(x, env)
            out.append(Region(runner.events, threads[active], {str(k): v for k, v in binding.items()}))
        return out

    visit(func.body, [], [])
    return regions


def _is_kstep_loop(s) -> bool:
    """A serial loop issuing tensor-core instructions with no serial loop inside that does."""
    if not isinstance(s, tirx.For) or not _program_loop(s) or not _has_tc(s.body):
        return False
    return not _contains(s.body, tirx.For, lambda n: _program_loop(n) and _has_tc(n.body))


def _program_loop(s) -> bool:
    """A serial loop of the program: serial, or unrolled by lowering's register unrolling (which marks it), as
    opposed to an instruction's own unrolled register loops."""
    from tilelayout.passes.lowering.unroll_registers import UNROLLED_KEY
    return s.kind == tirx.ForKind.SERIAL or (s.kind == tirx.ForKind.UNROLLED and s.annotations is not None
                                             and UNROLLED_KEY in s.annotations)


def _bindings(outer) -> list:
    """Outer serial loop variables at 0, then (one pass more) at 1 where the loop runs twice or more."""
    base = {v: 0 for v, _, _ in outer}
    twice = {v: 1 for v, ext, kind in outer if kind in (tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED)
             and isinstance(ext, tirx.IntImm) and int(ext.value) > 1}
    return [base] + ([{**base, **twice}] if twice else [])


def _free_vars(nodes) -> set:
    found = set()
    bound = set()
    for node in nodes:
        _visit(node, tirx.Var, found.add)
        _visit(node, tirx.For, lambda n: bound.add(n.loop_var))
        _visit(node, tirx.LetStmt, lambda n: bound.add(n.var))
    return found - bound
