"""What a TIRx tile program means, computed with numpy: the judge of every numeric check.

``run_reference(func, inputs)`` interprets the *unlowered* PrimFunc statement by statement and returns
the final value of every buffer parameter. It shares no code with the passes (neither the front end
nor lowering): it reads the TVM statement tree itself, so a misreading there cannot hide the same
misreading in lowering. Semantics, written from the ops' definitions:

- tile ops (``copy``, ``fill``, ``sum``/``max``/``min`` with axes and ``accum``, ``gemm`` with
  transposes, alpha/beta, and the elementwise ones) act on whole regions at once; regions match once
  unit dimensions are dropped; values are converted to the destination's dtype first;
- a ``T.parallel`` loop runs all its iterations at once: every statement of its body is evaluated
  with numpy over the whole iteration domain (guards and ``if_then_else`` select the iterations they
  apply to, serial loops inside run in order); two iterations storing different values to one
  element is a race and refused;
- threads: a tile op or parallel nest under a condition on ``threadIdx`` runs once, collectively,
  when some thread satisfies the condition; a plain store that reads ``threadIdx`` runs once per
  thread; ``blockIdx`` runs the body once per block, with fresh allocations;
- ``scope="local"`` buffers are per thread: each thread has its own copy, a statement touching one runs once
  per thread on that thread's copy, a branch on one selects the threads whose copy satisfies it, and where the
  threads act together (a tile op, a parallel nest, a loop bound) their copies must agree or it is refused;
- arithmetic keeps TIR's dtypes (float16 rounds after every operation, as the hardware does; float8
  goes through ml_dtypes, saturating to the largest finite value as CUDA's conversion does); reductions, gemm and transcendental functions are computed in float64
  and rounded once (``ReferenceRun.exact`` is False then: compare with a tolerance); a gemm of two
  float32 operands reads them as tensor cores do (tf32: the low 13 mantissa bits dropped);
- allocated float buffers start as NaN, so a value read before it is written shows as NaN.

Anything else is refused with ``UnsupportedByReference`` naming the construct: the oracle never
guesses. An index outside its buffer raises ``ReferenceOutOfBounds``, except on a parameter under safe memory
(the default; function attribute ``tilelayout.safe_memory``): a read outside it gives the pad (0, or its entry of
``tilelayout.safe_memory_pad``) and a write outside it is dropped.

Size (under 1000 lines): one interpreter whose parts (expressions, statements, tile ops) share one evaluation
context; it may import nothing from the passes, so it cannot lean on their helpers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion
from tvm.tirx.tile_primitive import TilePrimitiveCall

__all__ = ["UnsupportedByReference", "ReferenceOutOfBounds", "ReferenceRun", "run_reference", "numpy_dtype"]


class UnsupportedByReference(Exception):
    """The program uses a construct the numpy reference does not model (the message names it)."""


class ReferenceOutOfBounds(UnsupportedByReference):
    """The program indexes a buffer outside its shape (the message names the buffer and index)."""


@dataclass
class ReferenceRun:
    outputs: dict            # parameter name -> final array
    exact: bool              # False when a float reduction, gemm or transcendental was evaluated


def _narrow(values: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``values`` converted to ``dt``; into float8 as CUDA converts (``cvt.rn.satfinite``, the
    ``__nv_fp8_*`` constructors): magnitudes past the largest finite value, infinities included, become that
    value, where ml_dtypes gives NaN (e4m3) or infinity (e5m2). Rounding is to nearest even either way."""
    if dt.name.startswith("float8"):
        import ml_dtypes
        top = float(ml_dtypes.finfo(dt).max)
        values = np.clip(np.asarray(values, dtype=np.float64), -top, top)     # NaN stays NaN
    return np.asarray(values).astype(dt)


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a TVM dtype string (float8/bfloat16 through ml_dtypes)."""
    dtype = str(dtype)
    if dtype.startswith(("float8_", "bfloat16", "float4_", "float6_")):
        import ml_dtypes
        if not hasattr(ml_dtypes, dtype):
            raise UnsupportedByReference(f"dtype {dtype} has no numpy equivalent")
        return np.dtype(getattr(ml_dtypes, dtype))
    if dtype == "bool":
        return np.dtype(bool)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise UnsupportedByReference(f"dtype {dtype} has no numpy equivalent") from None


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt.kind == "V" or "float" in dt.name


def _wide(dt: np.dtype) -> np.dtype:
    """Exact accumulation type: float64 for floats, int64 for integers."""
    return np.dtype(np.float64) if _is_float(dt) else np.dtype(np.int64)


def _text(node) -> str:
    try:
        text = node.script() if hasattr(node, "script") else str(node)
    except Exception:  # printing must not hide the refusal
        text = repr(node)
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith("#")]
    return " | ".join(lines[-3:])[:200]


class _Ctx:
    """Lanes being evaluated together: ``env`` maps Vars to arrays of length ``n``; ``threads`` are the
    thread ids that reach the current statement (tile ops and nests run when it is non-empty); ``tid`` is the
    thread of each lane when the lanes are threads (a per-thread statement), None when they are shared by every
    thread in ``threads`` (a tile op, a parallel nest, a statement that reads nothing per-thread)."""

    def __init__(self, n: int, env: dict, threads: np.ndarray, tid: np.ndarray | None = None):
        self.n, self.env, self.threads, self.tid = n, env, threads, tid

    def restrict(self, mask: np.ndarray) -> "_Ctx":
        return _Ctx(int(mask.sum()), {v: a[mask] for v, a in self.env.items()}, self.threads,
                    None if self.tid is None else self.tid[mask])

    def extend(self, var, values: np.ndarray) -> "_Ctx":
        """Every lane times every value of ``var`` (a parallel loop)."""
        k = len(values)
        env = {v: np.repeat(a, k) for v, a in self.env.items()}
        env[var] = np.tile(values, self.n)
        return _Ctx(self.n * k, env, self.threads, None if self.tid is None else np.repeat(self.tid, k))

    def bind(self, var, value: np.ndarray) -> "_Ctx":
        env = dict(self.env)
        env[var] = value
        return _Ctx(self.n, env, self.threads, self.tid)


#: intrinsics by short name (apache-tvm 0.27 registers some as ``tirx.NAME``, others as ``prim.NAME``)
_UNARY = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt, "fabs": np.abs,
          "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil, "rsqrt": lambda x: 1.0 / np.sqrt(x),
          "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x))}
_EXACT_UNARY = ("fabs", "floor", "ceil")


#: tilelayout.lang.finalize_reducer's extern: combining per-thread partials, which this interpreter never splits
_FINALIZE_REDUCER = "tilelayout_finalize_reducer"

#: CUDA's atomic functions as TIR spells them (``call_extern``) and the update each performs
_ATOMIC_EXTERNS = {"atomicAdd": "add", "atomicMax": "max", "atomicMin": "min"}


def _atomic_update(call):
    """(kind, element load, value) of an atomic call (``T.call_extern(t, "atomicAdd", T.address_of(B[i]), v)``
    or ``T.cuda.atomic_add(T.address_of(B[i]), v)``), or None."""
    if not isinstance(call, tvm.ir.Call) or not isinstance(call.op, tvm.ir.Op):
        return None
    name, args = str(call.op.name), list(call.args)
    if name == "tirx.cuda.atomic_add" and len(args) == 2:
        kind, addr, value = "add", args[0], args[1]
    elif name == "tirx.call_extern" and len(args) == 3 and isinstance(args[0], tvm.ir.StringImm) \
            and str(args[0].value) in _ATOMIC_EXTERNS:
        kind, addr, value = _ATOMIC_EXTERNS[str(args[0].value)], args[1], args[2]
    else:
        return None
    if isinstance(addr, tvm.ir.Call) and isinstance(addr.op, tvm.ir.Op) and str(addr.op.name) == "tirx.address_of" \
            and len(addr.args) == 1 and isinstance(addr.args[0], TensorLoad):
        return kind, addr.args[0], value
    return None


@dataclass(frozen=True)
class _Box:
    """A region as two matching slice tuples: ``inside`` the buffer, ``within`` the region's own extents."""
    inside: tuple
    within: tuple


class _Interpreter:
    def __init__(self, func):
        self.func = func
        self.arrays: dict = {}           # buffer Var -> numpy array
        self.names: dict = {}            # buffer Var -> name
        self.thread_dims: dict = {}      # "x"/"y"/"z" -> (threadIdx Var, extent); thread ids are linear, x fastest
        self.exact = True
        self.padded: dict = {}           # parameter -> pad: safe memory, reads past its end give the pad
        # ``scope="local"`` buffers: one copy per thread, stored as one array with the thread as a leading index
        self.private: set = set()
        self.active: np.ndarray = np.arange(1)   # the threads running the current tile op

    # ------------------------------------------------------------------ helpers
    def refuse(self, what: str, node=None):
        where = f": {_text(node)}" if node is not None else ""
        raise UnsupportedByReference(f"the numpy reference does not model {what}{where}")

    def array(self, buf, node=None) -> np.ndarray:
        arr = self.arrays.get(buf)
        if arr is None:
            self.refuse(f"buffer {getattr(buf, 'name', buf)} (not a parameter or allocation it has seen)", node)
        return arr

    def is_thread_var(self, v) -> bool:
        return any(v.same_as(var) for var, _ in self.thread_dims.values())

    def uses_thread(self, node) -> bool:
        if not self.thread_dims:
            return False
        hits = []

        def on_var(v):
            if self.is_thread_var(v):
                hits.append(v)
        import tvm_ffi
        tvm_ffi.structural_walk(node, [(tirx.Var, on_var)])
        return bool(hits)

    def reads_private(self, node) -> bool:
        """Whether ``node`` loads a per-thread (``scope="local"``) buffer."""
        if not self.private:
            return False
        hits = []

        def on_load(e):
            if e.source in self.private:
                hits.append(e)
        tvm_ffi.structural_walk(node, [(TensorLoad, on_load)])
        return bool(hits)

    def per_thread(self, node, target, ctx: _Ctx) -> _Ctx:
        """The lanes a statement writing ``target`` runs on: once per thread when it reads ``threadIdx`` (outside
        parallel loops) or writes a per-thread buffer (every lane times every thread reaching it: each thread
        updates its own copy), else ``ctx`` itself (per-thread values it reads must then agree, ``agreed``)."""
        if ctx.tid is not None:
            return ctx
        if ctx.n == 1 and self.uses_thread(node):
            return self.thread_lanes(ctx)
        if target in self.private:
            return self.expand_threads(ctx)
        return ctx

    def expand_threads(self, ctx: _Ctx) -> _Ctx:
        """Every lane of ``ctx`` once for each thread in ``ctx.threads`` (lanes of one thread adjacent)."""
        k = len(ctx.threads)
        env = {v: np.tile(a, k) for v, a in ctx.env.items()}
        tid = np.repeat(ctx.threads, ctx.n)
        return _Ctx(ctx.n * k, env, ctx.threads, tid)

    # ------------------------------------------------------------------ expressions
    def ev(self, e, ctx: _Ctx) -> np.ndarray:
        """Value of ``e`` at every lane: an array of length ``ctx.n`` with the expression's dtype."""
        if isinstance(e, bool):
            return np.full(ctx.n, e, dtype=bool)
        if isinstance(e, int):
            return np.full(ctx.n, e, dtype=np.int64)
        if isinstance(e, float):
            return np.full(ctx.n, e, dtype=np.float64)
        if isinstance(e, (tirx.IntImm, tirx.FloatImm)):
            dt = numpy_dtype(_dtype_of(e))
            return np.full(ctx.n, e.value, dtype=np.float64).astype(dt) if _is_float(dt) else \
                np.full(ctx.n, e.value, dtype=dt)
        if isinstance(e, tirx.Var):
            val = ctx.env.get(e)
            if val is None:
                if self.is_thread_var(e):
                    self.refuse("threadIdx read inside a parallel nest or a tile op", e)
                self.refuse(f"the free variable {e.name}", e)
            return val
        dt = numpy_dtype(_dtype_of(e)) if _dtype_of(e) else None
        with np.errstate(all="ignore"):
            if isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul, tirx.Min, tirx.Max)):
                a, b = self.ev(e.a, ctx), self.ev(e.b, ctx)
                if dt is not None and _is_float(dt) and isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul)):
                    # compilers may contract (fma) or fold ((1.5 + x) - 1.5 -> x) float arithmetic: one
                    # rounding more or less is not a layout error, so compare with a tolerance
                    self.exact = False
                f = {tirx.Add: np.add, tirx.Sub: np.subtract, tirx.Mul: np.multiply, tirx.Min: np.minimum,
                     tirx.Max: np.maximum}[type(e)]
                return self._in(dt, f, a, b)
            if isinstance(e, (tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod)):
                return self.division(e, dt, ctx)
            if isinstance(e, (tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE)):
                a, b = self.ev(e.a, ctx), self.ev(e.b, ctx)
                f = {tirx.EQ: np.equal, tirx.NE: np.not_equal, tirx.LT: np.less, tirx.LE: np.less_equal,
                     tirx.GT: np.greater, tirx.GE: np.greater_equal}[type(e)]
                return f(a, b)
            if isinstance(e, (tirx.And, tirx.Or)):
                a, b = self.ev(e.a, ctx).astype(bool), self.ev(e.b, ctx).astype(bool)
                return (a & b) if isinstance(e, tirx.And) else (a | b)
            if isinstance(e, tirx.Not):
                return ~self.ev(e.a, ctx).astype(bool)
            if isinstance(e, (tirx.BitwiseAnd, tirx.BitwiseOr, tirx.BitwiseXor, tirx.BitwiseNot, tirx.LShift,
                              tirx.RShift)):
                return self.bitwise(e, dt, ctx)
            if isinstance(e, tirx.Cast):
                return self.convert(self.ev(e.value, ctx), dt)
            if isinstance(e, tirx.Select):
                return self.choose(e.condition, e.true_value, e.false_value, dt, ctx)
            if isinstance(e, TensorLoad):
                return self.load(e, ctx)
            if isinstance(e, tirx.Let):
                return self.ev(e.body, ctx.bind(e.var, self.ev(e.value, ctx)))
            if isinstance(e, tvm.ir.Call):
                return self.call(e, dt, ctx)
        self.refuse(f"the expression node {type(e).__name__}", e)

    def _in(self, dt, f, *args) -> np.ndarray:
        """``f`` computed in TIR's dtype ``dt`` (numpy rounds float16 after the operation, as TIR does)."""
        if dt is None:
            return f(*args)
        if _is_float(dt) and dt.itemsize < 2 or dt.name == "bfloat16":
            # ml_dtypes floats: compute wide, round once per operation
            return _narrow(f(*[a.astype(np.float32) for a in args]), dt)
        return f(*[a.astype(dt, copy=False) for a in args]).astype(dt, copy=False)

    def convert(self, value: np.ndarray, dt: np.dtype) -> np.ndarray:
        if value.dtype == dt:
            return value
        if dt == np.dtype(bool):
            return value != 0
        if not _is_float(dt) and _is_float(value.dtype):
            v = value.astype(np.float64)
            if not np.isfinite(v).all():
                self.refuse("a conversion of a non-finite float to an integer")
            return np.trunc(v).astype(dt)
        if _is_float(dt) and (_is_float(value.dtype) and value.dtype.itemsize < 2 or value.dtype.name == "bfloat16"):
            return _narrow(value.astype(np.float32), dt)
        return _narrow(value, dt)

    def division(self, e, dt, ctx) -> np.ndarray:
        a, b = self.ev(e.a, ctx), self.ev(e.b, ctx)
        if _is_float(dt):
            if isinstance(e, tirx.Div):
                return self._in(dt, np.true_divide, a, b)
            if isinstance(e, tirx.FloorDiv):
                return self._in(dt, lambda x, y: np.floor(x / y), a, b)
            self.refuse(f"floating {type(e).__name__}", e)
        if (b == 0).any():
            self.refuse("an integer division by zero", e)
        a, b = a.astype(np.int64), b.astype(np.int64)
        if isinstance(e, tirx.FloorDiv):
            out = np.floor_divide(a, b)
        elif isinstance(e, tirx.FloorMod):
            out = np.mod(a, b)
        elif isinstance(e, tirx.Mod):           # truncated: the sign of the dividend
            out = np.fmod(a, b)
        else:                                   # truncated division
            out = (a - np.fmod(a, b)) // b
        return out.astype(dt)

    def bitwise(self, e, dt, ctx) -> np.ndarray:
        """``&``, ``|``, ``^``, ``~``, ``<<`` and ``>>`` of integers in the expression's dtype, as C computes them
        (weights unpacked from packed bytes): ``>>`` of a signed value shifts its sign in, ``<<`` wraps to the
        dtype; a shift by a negative amount or by the width or more is undefined in C, so it is refused."""
        logical = dt == np.dtype(bool) and isinstance(e, (tirx.BitwiseAnd, tirx.BitwiseOr, tirx.BitwiseXor))
        if dt is None or _is_float(dt) or (dt == np.dtype(bool) and not logical):
            # TVM builds no float bitwise node; ``~`` and shifts of a bool promote it to int in C
            self.refuse(f"{type(e).__name__} of {dt if dt is not None else 'an untyped value'} (integers only)", e)
        if isinstance(e, tirx.BitwiseNot):
            return np.invert(self.ev(e.a, ctx).astype(dt))
        a, b = self.ev(e.a, ctx).astype(dt), self.ev(e.b, ctx)
        if isinstance(e, (tirx.LShift, tirx.RShift)):
            amount = b.astype(np.int64)
            bits = 8 * dt.itemsize
            if amount.size and (amount.min() < 0 or amount.max() >= bits):
                bad = int(amount[(amount < 0) | (amount >= bits)][0])
                self.refuse(f"a shift by {bad} of a {bits}-bit value (undefined in C)", e)
            if isinstance(e, tirx.RShift):
                return np.right_shift(a, amount.astype(dt))
            return np.left_shift(a.astype(np.int64), amount).astype(dt)
        f = {tirx.BitwiseAnd: np.bitwise_and, tirx.BitwiseOr: np.bitwise_or, tirx.BitwiseXor: np.bitwise_xor}[type(e)]
        return f(a, b.astype(dt))

    def choose(self, cond, then, other, dt, ctx) -> np.ndarray:
        """``cond ? then : other``, each side evaluated only where it is selected (no spurious bounds errors)."""
        c = self.ev(cond, ctx).astype(bool)
        out = np.empty(ctx.n, dtype=dt)
        if c.any():
            out[c] = self.convert(self.ev(then, ctx.restrict(c)), dt)
        if (~c).any():
            out[~c] = self.convert(self.ev(other, ctx.restrict(~c)), dt)
        return out

    def call(self, e, dt, ctx) -> np.ndarray:
        full = str(e.op.name) if isinstance(e.op, tvm.ir.Op) else str(e.op)
        name = full.split(".", 1)[1] if full.startswith(("tirx.", "prim.")) else full
        args = list(e.args)
        if name == "if_then_else":
            return self.choose(args[0], args[1], args[2], dt, ctx)
        if name in _UNARY and len(args) == 1:
            x = self.ev(args[0], ctx)
            if name not in _EXACT_UNARY:
                self.exact = False
            return self.convert(_UNARY[name](x.astype(np.float64)), dt)
        if name in ("pow", "fmod") and len(args) == 2:
            self.exact = False
            a, b = (self.ev(x, ctx).astype(np.float64) for x in args)
            return self.convert(np.power(a, b) if name == "pow" else np.fmod(a, b), dt)
        self.refuse(f"the call {full}", e)

    def indices(self, buf, idx_exprs, ctx, node, partial: bool = False) -> tuple:
        """Index arrays of an access; with ``partial`` (a parameter under safe memory), lanes outside it
        are allowed and the in-range mask is returned as the last item."""
        arr = self.array(buf, node)
        private = buf in self.private
        shape = arr.shape[1:] if private else arr.shape
        if len(idx_exprs) != len(shape):
            self.refuse(f"an access of rank {len(idx_exprs)} to {self.names[buf]} of rank {len(shape)}", node)
        idx, keep = [], np.ones(ctx.n, dtype=bool)
        if private and ctx.tid is not None:
            idx.append(ctx.tid)          # this lane's thread's copy
        for d, x in enumerate(idx_exprs):
            if isinstance(x, (tirx.Ramp, tirx.Broadcast)):
                self.refuse("vector (Ramp/Broadcast) indices", node)
            v = self.ev(x, ctx).astype(np.int64)
            bad = (v < 0) | (v >= shape[d])
            if partial:
                keep = keep & ~bad
                idx.append(np.where(bad, 0, v))
                continue
            if bad.any():
                k = int(np.argmax(bad))
                raise ReferenceOutOfBounds(
                    f"{_text(node)}: index {int(v[k])} of dimension {d} is outside buffer "
                    f"{self.names[buf]} of shape {list(shape)}")
            idx.append(v)
        if partial:
            return (*idx, keep)
        return tuple(idx)

    def load(self, e, ctx) -> np.ndarray:
        if not tirx.is_buffer_var(e.source):
            self.refuse("a load from something that is not a buffer", e)
        if e.source in self.padded:          # outside the buffer a load reads the pad
            *idx, keep = self.indices(e.source, list(e.indices), ctx, e, partial=True)
            vals = self.array(e.source)[tuple(idx)]
            return np.where(keep, vals, np.asarray(self.padded[e.source]).astype(vals.dtype))
        idx = self.indices(e.source, list(e.indices), ctx, e)
        if e.source in self.private and ctx.tid is None:
            # a statement every thread runs alike reads its own copy: they must all hold one value
            return self.agreed(self.array(e.source)[ctx.threads][(slice(None), *idx)], e.source, e)
        return self.array(e.source)[idx]

    def agreed(self, copies: np.ndarray, buf, node) -> np.ndarray:
        """The value of per-thread copies (threads on the first axis) that every thread must hold alike."""
        if copies.shape[0] == 0:         # no thread reaches the statement: its value is never used
            return np.zeros(copies.shape[1:], dtype=copies.dtype)
        first = copies[0]
        same = (copies == first) | (_isnan(copies) & _isnan(np.broadcast_to(first, copies.shape)))
        if not same.all():
            self.refuse(f"a per-thread value of {self.names[buf]} (scope local) read where the threads run together "
                        f"(a tile op, a parallel loop, a loop bound or binding); the threads hold different values",
                        node)
        return first

    # ------------------------------------------------------------------ statements
    def run(self, s, ctx: _Ctx) -> _Ctx:
        """Execute ``s``; returns the context for the statements after it (``Bind`` extends it)."""
        if isinstance(s, tirx.SeqStmt):
            for c in s.seq:
                ctx = self.run(c, ctx)
            return ctx
        if isinstance(s, TilePrimitiveCall):
            self.tile_op(s, ctx)
        elif isinstance(s, tirx.For):
            self.loop(s, ctx)
        elif isinstance(s, tirx.AttrStmt):
            self.attr(s, ctx)
        elif isinstance(s, tirx.IfThenElse):
            self.branch(s, ctx)
        elif isinstance(s, tirx.BufferStore):
            self.store(s, ctx)
        elif isinstance(s, tirx.AllocBuffer):
            self.allocate(s.buffer)
        elif isinstance(s, tirx.DeclBuffer):
            self.declare(s)
        elif isinstance(s, tirx.Bind):
            if ctx.n == 1 and self.uses_thread(s.value):
                self.refuse("a scalar binding that reads threadIdx", s)
            return ctx.bind(s.var, self.ev(s.value, ctx))
        elif isinstance(s, tirx.LetStmt):
            self.run(s.body, ctx.bind(s.var, self.ev(s.value, ctx)))
        elif isinstance(s, tirx.Evaluate):
            self.evaluate(s, ctx)
        elif isinstance(s, tirx.AssertStmt):
            if not self.ev(s.condition, ctx).astype(bool).all():
                self.refuse("a failing assertion", s)
        else:
            self.refuse(f"the statement {type(s).__name__}", s)
        return ctx

    def evaluate(self, s, ctx) -> None:
        v = s.value
        if isinstance(v, (tirx.IntImm, int)):
            return
        if isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and str(v.op.name) == "tirx.tvm_storage_sync":
            return                       # a barrier: statements already run in program order
        atomic = _atomic_update(v)
        if atomic is not None:
            self.atomic(*atomic, s, ctx)
            return
        if isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and str(v.op.name) == "tirx.call_extern" \
                and len(v.args) == 2 and isinstance(v.args[0], tvm.ir.StringImm) \
                and str(v.args[0].value) == _FINALIZE_REDUCER:
            return       # lang.finalize_reducer: here every update already landed in the one copy of the reducer
        self.refuse("an evaluated call with side effects", s)

    def atomic(self, kind: str, target, value, node, ctx) -> None:
        """An atomic read-modify-write by every lane (iteration or thread) reaching it, lanes in order: the
        updates of lanes that hit one element all land (unlike a plain store, where that is a race)."""
        if len(ctx.threads) == 0 or ctx.n == 0:
            return
        ctx = self.per_thread(node, target.source, ctx)
        buf = target.source
        arr = self.array(buf, node)
        if buf in self.padded:
            *_, keep = self.indices(buf, list(target.indices), ctx, node, partial=True)
            ctx = ctx.restrict(keep)
            if ctx.n == 0:
                return
        idx = self.indices(buf, list(target.indices), ctx, node)
        vals = self.convert(self.ev(value, ctx), arr.dtype)
        if kind == "add":
            if _is_float(arr.dtype):
                self.exact = False       # the hardware's order of the additions is not the lanes' order
            wide = arr.astype(_wide(arr.dtype))
            np.add.at(wide, idx, vals.astype(wide.dtype))
            arr[...] = self.convert(wide, arr.dtype)
        else:
            (np.maximum if kind == "max" else np.minimum).at(arr, idx, vals)

    def allocate(self, buf) -> None:
        dt = numpy_dtype(buf.dtype)
        shape = []
        for x in buf.shape:
            if not isinstance(x, (int, tirx.IntImm)):
                self.refuse(f"the symbolic shape of buffer {buf.name}")
            shape.append(int(x))
        if str(buf.scope()) in ("local", "local.var") and self.thread_dims:
            shape = [self.thread_count()] + shape    # each thread its own copy
            self.private.add(buf)
        self.arrays[buf] = np.full(shape, np.nan, dtype=np.float64).astype(dt) if _is_float(dt) else \
            np.zeros(shape, dtype=dt)
        self.names[buf] = str(buf.name)

    def declare(self, s) -> None:
        buf = s.buffer
        if buf in self.arrays:
            return
        view = self._reshaped_view(buf, s.data)
        if view is None:
            self.refuse(f"buffer {buf.name} declared over other storage (DeclBuffer) other than a reshape of a "
                        f"buffer of the same element type and size", s)
        self.arrays[buf] = view
        self.names[buf] = str(buf.name)

    def _reshaped_view(self, buf, data):
        """A numpy view of the buffer whose data ``buf`` declares over (``T.decl_buffer(shape, dtype,
        data=X.data)``), when it is a plain reshape of ``X``: same element type and element count."""
        if not (isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op)
                and str(data.op.name) == "tirx.buffer_data" and len(data.args) == 1):
            return None
        base = self.arrays.get(data.args[0])
        shape = [int(x) if isinstance(x, (int, tirx.IntImm)) else None for x in buf.shape]
        if base is None or None in shape or str(numpy_dtype(buf.dtype)) != str(base.dtype) \
                or int(np.prod(shape)) != base.size or not base.flags.c_contiguous:
            return None
        return base.reshape(shape)

    def attr(self, s, ctx) -> None:
        if s.attr_key == "thread_extent" and isinstance(s.node, tirx.IterVar):
            self.launch(str(s.node.thread_tag), s.node.var, s.value, s.body, ctx)
            return
        self.run(s.body, ctx)

    def launch(self, tag: str, var, extent, body, ctx) -> None:
        if tag.startswith("blockIdx.") and not isinstance(extent, (int, tirx.IntImm)):
            ext = self.uniform(extent, ctx, f"extent of {tag}", None)     # a grid over a dynamic shape
        elif not isinstance(extent, (int, tirx.IntImm)):
            self.refuse(f"the non-constant extent of {tag}")
        else:
            ext = int(extent)
        if ext < 1:
            self.refuse(f"{tag} = {ext} (no thread or block runs)")
        if tag.startswith("blockIdx."):
            if ctx.n != 1:
                self.refuse(f"{tag} launched inside a loop")
            for b in range(ext):
                self.run(body, ctx.bind(var, np.full(1, b, dtype=np.int32)))
            return
        if tag in ("threadIdx.x", "threadIdx.y", "threadIdx.z"):
            dim = tag[-1]
            known = self.thread_dims.get(dim)
            if known is not None and not (known[0].same_as(var) and known[1] == ext):
                self.refuse(f"{tag} launched twice")           # (relaunched per block is fine)
            self.thread_dims[dim] = (var, ext)
            # a block of X*Y*Z threads, linear id t = x + X * (y + Y * z) (the fragment thread index)
            self.run(body, _Ctx(ctx.n, ctx.env, np.arange(self.thread_count())))
            return
        self.refuse(f"the launch of {tag}")

    def thread_count(self) -> int:
        return int(np.prod([ext for _, ext in self.thread_dims.values()], dtype=np.int64)) if self.thread_dims else 1

    def thread_lanes(self, ctx: _Ctx) -> _Ctx:
        """One lane per thread reaching this point (for statements that read threadIdx); each thread
        dimension's variable takes its component of the linear thread id."""
        if ctx.n != 1:
            self.refuse("threadIdx read inside a parallel loop")
        k = len(ctx.threads)
        env = {v: np.repeat(a, k) for v, a in ctx.env.items()}
        stride = 1
        for dim in ("x", "y", "z"):
            if dim in self.thread_dims:
                var, ext = self.thread_dims[dim]
                env[var] = ((ctx.threads // stride) % ext).astype(np.int32)
                stride *= ext
        return _Ctx(k, env, ctx.threads, ctx.threads)

    def branch(self, s, ctx) -> None:
        lanes = None
        if ctx.n == 1 and self.reads_private(s.condition) and not self.uses_thread(s.condition):
            # a condition on per-thread data selects the threads whose copy satisfies it
            lanes = self.expand_threads(ctx)
        elif self.uses_thread(s.condition):
            # a condition on the thread index selects which threads go where
            lanes = self.thread_lanes(ctx)
        if lanes is not None:
            c = self.ev(s.condition, lanes).astype(bool)
            self.run(s.then_case, _Ctx(ctx.n, ctx.env, ctx.threads[c]))
            if s.else_case is not None:
                self.run(s.else_case, _Ctx(ctx.n, ctx.env, ctx.threads[~c]))
            return
        c = self.ev(s.condition, ctx).astype(bool)
        if c.any():
            self.run(s.then_case, ctx.restrict(c))
        if s.else_case is not None and (~c).any():
            self.run(s.else_case, ctx.restrict(~c))

    def uniform(self, e, ctx, what: str, node) -> int:
        v = self.ev(e, ctx)
        if v.size == 0:
            return 0
        if (v != v[0]).any():
            self.refuse(f"a {what} that differs between parallel iterations", node)
        return int(v[0])

    def loop(self, s, ctx) -> None:
        kind = int(s.kind)
        if kind == int(tirx.ForKind.THREAD_BINDING):
            binding = s.thread_binding
            if binding is None or s.min is not None and not (isinstance(s.min, tirx.IntImm) and int(s.min) == 0):
                self.refuse("a thread-bound loop without a zero-based binding", s)
            self.launch(str(binding.thread_tag), s.loop_var, s.extent, s.body, ctx)
            return
        if ctx.n == 0 or len(ctx.threads) == 0:
            return
        if self.uses_thread(s) and kind == int(tirx.ForKind.PARALLEL):
            self.refuse("a parallel loop that reads threadIdx", s)
        lo = self.uniform(s.min, ctx, "loop start", s)
        ext = self.uniform(s.extent, ctx, "loop extent", s)
        step = getattr(s, "step", None)
        if step is not None and not (isinstance(step, (int, tirx.IntImm)) and int(step) == 1):
            self.refuse("a loop with a step", s)
        dt = numpy_dtype(_dtype_of(s.loop_var))
        if kind == int(tirx.ForKind.PARALLEL):
            if ext > 0:
                self.run(s.body, ctx.extend(s.loop_var, np.arange(lo, lo + ext, dtype=dt)))
            return
        if kind not in (int(tirx.ForKind.SERIAL), int(tirx.ForKind.UNROLLED), int(tirx.ForKind.VECTORIZED)):
            self.refuse(f"loop kind {s.kind}", s)
        for k in range(lo, lo + ext):        # serial: in order
            self.run(s.body, ctx.bind(s.loop_var, np.full(ctx.n, k, dtype=dt)))

    def store(self, s, ctx) -> None:
        if len(ctx.threads) == 0 or ctx.n == 0:
            return
        ctx = self.per_thread(s, s.buffer, ctx)      # a per-thread statement: once per thread
        arr = self.array(s.buffer, s)
        if s.buffer in self.padded:          # outside the buffer a store is dropped
            *_, keep = self.indices(s.buffer, list(s.indices), ctx, s, partial=True)
            if not keep.all():
                ctx = ctx.restrict(keep)
                if ctx.n == 0:
                    return
        idx = self.indices(s.buffer, list(s.indices), ctx, s)
        if ctx.n > 1 and self._accumulates(s) and \
                len(np.unique(np.ravel_multi_index(idx, arr.shape))) < ctx.n:
            # ``f[i, j // 4] = f[i, j // 4] + g[i, j]``: several iterations update one element (TileLang's
            # #1374); it means the updates in iteration order, which is what the lowering keeps in one thread
            for k in range(ctx.n):
                lane = ctx.restrict(np.arange(ctx.n) == k)
                arr[self.indices(s.buffer, list(s.indices), lane, s)] = self.convert(self.ev(s.value, lane), arr.dtype)
            return
        value = self.convert(self.ev(s.value, ctx), arr.dtype)
        if ctx.n > 1:
            flat = np.ravel_multi_index(idx, arr.shape)
            order = np.argsort(flat, kind="stable")
            same = flat[order][1:] == flat[order][:-1]
            if same.any():
                va, vb = value[order][1:][same], value[order][:-1][same]
                differ = ~((va == vb) | (_isnan(va) & _isnan(vb)))
                if differ.any():
                    self.refuse(f"a race: several parallel iterations (or threads) store different values to one "
                                f"element of {self.names[s.buffer]}", s)
        arr[idx] = value

    def _accumulates(self, s) -> bool:
        """Whether the store's value reads the very element it writes (a read-modify-write update)."""
        hits: list = []

        def visit(e):
            if isinstance(e, TensorLoad) and e.source.same_as(s.buffer) and len(e.indices) == len(s.indices) \
                    and all(tvm_ffi.structural_equal(a, b) for a, b in zip(e.indices, s.indices)):
                hits.append(1)
        tvm_ffi.structural_walk(s.value, (TensorLoad, visit))
        return bool(hits)

    # ------------------------------------------------------------------ tile ops
    def region(self, arg, ctx, call) -> tuple:
        """(buffer var, box, extents) of a TensorRegion. Under safe memory a region of a parameter may run
        past its ends (the last, partial tile; a data-dependent offset): such reads give the pad and such
        writes are dropped, the meaning TileLang's safe-memory legalisation gives them. Any other region must
        fit."""
        if not isinstance(arg, TensorRegion) or not tirx.is_buffer_var(arg.source):
            self.refuse("a tile-op operand that is not a buffer region", call)
        arr = self.array(arg.source, call)
        shape = arr.shape[1:] if arg.source in self.private else arr.shape
        ranges = list(arg.region)
        if len(ranges) != len(shape):
            self.refuse(f"a region of rank {len(ranges)} of {self.names[arg.source]} (rank {len(shape)})", call)
        partial = arg.source in self.padded
        inside, within, ext = [], [], []
        for d, r in enumerate(ranges):
            lo = self.uniform(r.min, ctx, "region offset", call)
            n = self.uniform(r.extent, ctx, "region extent", call)
            if n < 0 or (not partial and (lo < 0 or lo + n > shape[d])):
                raise ReferenceOutOfBounds(
                    f"{_text(call)}: region {lo}:{lo + n} of dimension {d} is outside buffer "
                    f"{self.names[arg.source]} of shape {list(shape)}")
            a, b = min(max(lo, 0), shape[d]), max(min(lo + n, shape[d]), 0)
            b = max(a, b)
            inside.append(slice(a, b))
            within.append(slice(a - lo, b - lo))
            ext.append(n)
        return arg.source, _Box(tuple(inside), tuple(within)), ext

    def block(self, arg, ctx, call) -> np.ndarray:
        buf, box, ext = self.region(arg, ctx, call)
        return self.read_box(buf, box, ext)

    def read_box(self, buf, box: "_Box", ext: list) -> np.ndarray:
        """The region's values, the pad where it runs past the buffer."""
        arr = self.arrays[buf]
        out = np.full(ext, self.padded.get(buf, 0)).astype(arr.dtype)
        if buf in self.private:          # a tile op runs on every thread alike: their copies must agree
            out[box.within] = self.agreed(arr[self.active][(slice(None), *box.inside)], buf, None)
        else:
            out[box.within] = arr[box.inside]
        return out

    def write_box(self, buf, box: "_Box", value) -> None:
        """Store the region's values; the part past the buffer is dropped."""
        if buf in self.private:          # every running thread writes its own copy
            for t in self.active:
                self.arrays[buf][t][box.inside] = np.asarray(value)[box.within]
            return
        self.arrays[buf][box.inside] = np.asarray(value)[box.within]

    @staticmethod
    def squeezed(ext: list) -> list:
        return [e for e in ext if e != 1]

    def matched(self, value: np.ndarray, dst_ext: list, call, what: str) -> np.ndarray:
        """``value`` (a region's block) reshaped to the destination box; regions match without unit dims."""
        if self.squeezed(list(value.shape)) != self.squeezed(dst_ext):
            self.refuse(f"{what} regions of different extents ({list(value.shape)} vs {dst_ext})", call)
        return value.reshape(dst_ext)

    def tile_op(self, call, ctx) -> None:
        if ctx.n != 1:
            self.refuse("a tile op inside a parallel loop", call)
        if len(ctx.threads) == 0:
            return                           # no thread reaches it
        if self.uses_thread(call):
            self.refuse("a tile op whose operands depend on threadIdx", call)
        self.active = ctx.threads
        name = str(call.op.name)
        short = name.rsplit(".", 1)[-1]
        args = list(call.args)
        if name in ("tirx.tile.copy", "tirx.tile.copy_async"):
            buf, sl, ext = self.region(args[0], ctx, call)
            src = self.block(args[1], ctx, call)
            self.write_box(buf, sl, self.convert(self.matched(src, ext, call, "copy"), self.arrays[buf].dtype))
        elif name == "tirx.tile.fill":
            buf, sl, ext = self.region(args[0], ctx, call)
            self.write_box(buf, sl, np.full(ext, self.convert(self.ev(args[1], ctx), self.arrays[buf].dtype)[0]))
        elif short in ("sum", "max", "min") and name == f"tirx.tile.{short}":
            self.reduce(short, args, ctx, call)
        elif name == "tirx.tile.gemm":
            self.gemm(args, ctx, call)
        elif name.startswith("tirx.tile.") and short in _ELEMENTWISE:
            self.elementwise(short, args, ctx, call)
        else:
            self.refuse(f"the tile op {name}", call)

    def reduce(self, reducer: str, args, ctx, call) -> None:
        if len(args) != 4:
            self.refuse(f"a {reducer} with {len(args)} arguments", call)
        buf, sl, ext = self.region(args[0], ctx, call)
        src = self.block(args[1], ctx, call)
        raw = args[2]
        axes = [int(a) for a in (list(raw) if not isinstance(raw, (int, tirx.IntImm)) else [raw])]
        if any(not -src.ndim <= a < src.ndim for a in axes):
            self.refuse(f"reduction axes {axes} for a source of rank {src.ndim}", call)
        axes = sorted({a % src.ndim for a in axes})
        dst = self.arrays[buf]
        dt = dst.dtype
        vals = self.convert(src, dt)
        if reducer == "sum":
            if _is_float(dt):
                self.exact = False
            r = vals.astype(_wide(dt)).sum(axis=tuple(axes))
        else:
            w = vals.astype(np.float64) if _is_float(dt) else vals
            r = (w.max if reducer == "max" else w.min)(axis=tuple(axes))
        r = self.matched(np.asarray(r), ext, call, reducer)
        if bool(int(args[3])):               # accum: combine with the destination's old value
            old = self.read_box(buf, sl, ext).astype(_wide(dt))
            r = {"sum": np.add, "max": np.maximum, "min": np.minimum}[reducer](old, r)
        self.write_box(buf, sl, self.convert(np.asarray(r), dt))

    def gemm(self, args, ctx, call) -> None:
        if len(args) != 8:
            self.refuse(f"a gemm with {len(args)} arguments", call)
        buf, sl, ext = self.region(args[0], ctx, call)
        dt = self.arrays[buf].dtype
        w = _wide(dt)

        def mat(arg, what, tf32=False):
            m = self.block(arg, ctx, call)
            s = self.squeezed(list(m.shape))
            if len(s) != 2:
                self.refuse(f"gemm operand {what} of extents {list(m.shape)} (a 2-D tile is needed)", call)
            m = m.reshape(s)
            if tf32:   # float32 multiplicands are read at tf32 precision: the low 13 mantissa bits dropped
                m = (np.ascontiguousarray(m).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
            return self.convert(m, dt).astype(w)

        operands = [self.block(args[k], ctx, call) for k in (1, 2)]
        tf32 = all(o.dtype == np.float32 for o in operands)
        a, b = mat(args[1], "A", tf32), mat(args[2], "B", tf32)
        if bool(args[4]):
            a = a.T
        if bool(args[5]):
            b = b.T
        if a.shape[1] != b.shape[0]:
            self.refuse(f"a gemm whose K extents differ ({a.shape} @ {b.shape})", call)
        alpha, beta = self.ev(args[6], ctx).astype(w)[0], args[7]
        d = (a @ b) * alpha
        beta_zero = isinstance(beta, (tirx.IntImm, tirx.FloatImm)) and float(beta.value) == 0.0
        if args[3] is not None and not beta_zero:
            d = d + mat(args[3], "C") * self.ev(beta, ctx).astype(w)[0]
        if _is_float(dt):
            self.exact = False
        self.write_box(buf, sl, self.convert(self.matched(d, ext, call, "gemm"), dt))

    def elementwise(self, name: str, args, ctx, call) -> None:
        buf, sl, ext = self.region(args[0], ctx, call)
        dst = self.arrays[buf]
        dt = dst.dtype
        shape = [e for e in ext]

        def operand(k):
            if k >= len(args) or args[k] is None:
                return None
            a = args[k]
            if isinstance(a, TensorRegion):
                return self.convert(self.matched(self.block(a, ctx, call), shape, call, name), dt)
            return np.broadcast_to(self.convert(self.ev(a, ctx), dt)[0], shape)

        def src_or_dst(k):
            v = operand(k)
            return self.read_box(buf, sl, ext) if v is None else v

        def affine(x, bias, scale):      # ``src * scale + bias``, rounded per operation
            if scale is not None:
                x = self._in(dt, np.multiply, x, scale)
            if bias is not None:
                x = self._in(dt, np.add, x, bias)
            return x

        with np.errstate(all="ignore"):
            if name == "zero":
                out = np.zeros(shape, dtype=dt)
            elif name in ("add", "sub", "mul", "fdiv", "maximum", "minimum"):
                f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "fdiv": np.true_divide,
                     "maximum": np.maximum, "minimum": np.minimum}[name]
                a, b = operand(1), operand(2)
                if a is None or b is None:
                    self.refuse(f"{name} without two operands", call)
                out = self._in(dt, f, a, b)
            elif name == "cast":
                out = src_or_dst(1)
            elif name == "fma":
                x, scale, bias = operand(1), operand(2), operand(3)
                if x is None or scale is None or bias is None:
                    self.refuse("fma without source, scale and bias", call)
                out = affine(x, bias, scale)
            elif name in ("exp", "exp2", "log2", "sqrt"):
                x = affine(src_or_dst(1), operand(2), operand(3))
                self.exact = False
                f = {"exp": np.exp, "exp2": np.exp2, "log2": np.log2, "sqrt": np.sqrt}[name]
                out = self.convert(f(x.astype(np.float64)), dt)
            elif name == "reciprocal":
                out = self._in(dt, np.true_divide, np.ones(shape, dtype=dt), src_or_dst(1))
            elif name == "silu":
                self.exact = False
                x = src_or_dst(1).astype(np.float64)
                out = self.convert(x / (1.0 + np.exp(-x)), dt)
            else:
                self.refuse(f"the elementwise tile op {name}", call)
        self.write_box(buf, sl, self.convert(np.asarray(out), dt).reshape(shape))


_ELEMENTWISE = ("zero", "add", "sub", "mul", "fdiv", "maximum", "minimum", "cast", "exp", "exp2", "log2", "sqrt",
                "reciprocal", "silu", "fma")


def _dtype_of(e) -> str:
    """TIR's dtype of an expression ("" when it has none)."""
    ty = getattr(e, "ty", None)
    return str(ty) if ty is not None else str(getattr(e, "dtype", "") or "")


def _isnan(a: np.ndarray) -> np.ndarray:
    return np.isnan(a.astype(np.float64)) if _is_float(a.dtype) else np.zeros(a.shape, dtype=bool)


def _safe_memory(func) -> tuple:
    """(guarded, {parameter name: pad}) from the function attributes ``tilelayout.safe_memory`` (default on)
    and ``tilelayout.safe_memory_pad`` (default 0): what reading and writing outside a parameter means."""
    attrs = func.attrs
    on = attrs is None or "tilelayout.safe_memory" not in attrs or bool(int(attrs["tilelayout.safe_memory"]))
    pads = {}
    if on and attrs is not None and "tilelayout.safe_memory_pad" in attrs:
        for name, pad in attrs["tilelayout.safe_memory_pad"].items():
            pads[str(name)] = float(pad.value if hasattr(pad, "value") else pad)
    return on, pads


def run_reference(func, inputs: dict) -> ReferenceRun:
    """Interpret ``func`` (a PrimFunc or one-function IRModule) on copies of ``inputs`` (parameter name ->
    array); the final value of every buffer parameter, and whether the result is exact."""
    if isinstance(func, tvm.IRModule):
        funcs = [f for _, f in sorted(func.functions.items(), key=lambda kv: str(kv[0]))
                 if isinstance(f, tirx.PrimFunc)]
        if len(funcs) != 1:
            raise UnsupportedByReference(f"expected an IRModule with one PrimFunc, got {len(funcs)}")
        func = funcs[0]
    interp = _Interpreter(func)
    safe, pads = _safe_memory(func)
    names = []
    extents: dict = {}                   # symbolic extent Var -> its value, read from the input arrays
    for p in func.params:
        if not tirx.is_buffer_var(p):
            raise UnsupportedByReference(f"the scalar parameter {p.name}")
        name = str(p.name)
        if name not in inputs:
            raise UnsupportedByReference(f"no input given for parameter {name}")
        arr = np.array(inputs[name], dtype=numpy_dtype(p.dtype), copy=True)
        if arr.ndim != len(p.shape):
            raise UnsupportedByReference(f"input {name} has shape {list(arr.shape)}, the parameter {list(p.shape)}")
        for d, s in enumerate(p.shape):
            if isinstance(s, (int, tirx.IntImm)):
                if int(s) != arr.shape[d]:
                    raise UnsupportedByReference(f"input {name} has shape {list(arr.shape)}, the parameter "
                                                 f"{list(p.shape)}")
            elif isinstance(s, tirx.Var):
                if extents.setdefault(s, arr.shape[d]) != arr.shape[d]:
                    raise UnsupportedByReference(f"input {name} gives {s.name} = {arr.shape[d]}, another input "
                                                 f"{extents[s]}")
            else:
                raise UnsupportedByReference(f"the extent {s} of parameter {name} (only constants and plain "
                                             f"variables)")
        interp.arrays[p] = arr
        interp.names[p] = name
        if safe:
            interp.padded[p] = pads.get(name, 0.0)
        names.append((name, p))
    env = {v: np.full(1, n, dtype=np.int32) for v, n in extents.items()}
    interp.run(func.body, _Ctx(1, env, np.arange(1)))
    return ReferenceRun({n: interp.arrays[p] for n, p in names}, interp.exact)
