"""Whether a kernel's results are defined only up to rounding: the numeric check's exact-or-tolerance decision
when the reference is a hand-written numpy function (the numpy interpreter decides for itself).

A float result depends on the order of its additions whenever several values are summed into one: a ``sum``
tile op, a gemm, a float atomic add (the hardware orders the updates), and any float store whose value adds a
value read from the same buffer: ``acc[0] = acc[0] + A[tx, k]`` in a serial loop, a prefix sum
``d[j] = d[j - 1] + s[j]``. numpy sums pairwise, the kernel in its own order, so the last bit may differ.
Transcendental functions (``exp``, ``log``, ...) differ between libraries by an ulp too.

It reads the TIR statement tree itself, not the op graph, so it needs no folding of ``threadIdx.y``/``z``.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import TensorLoad
from tvm.tirx.tile_primitive import TilePrimitiveCall

from tilelayout.lang import atomic_of

__all__ = ["rounded_result"]

#: tile ops whose float result is a sum of several products or terms
_SUMMING_TILE_OPS = ("tirx.tile.sum", "tirx.tile.gemm")
#: tile ops and intrinsics computed by a library whose last bit is not specified
_TRANSCENDENTAL = ("exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "pow", "fmod",
                   "sin", "cos", "tan", "erf")


def _is_float(dtype) -> bool:
    return "float" in str(dtype)


def _dtype(e) -> str:
    """An expression's dtype (apache-tvm 0.27 names it ``ty`` on PrimExprs)."""
    ty = getattr(e, "ty", None)
    return str(ty) if ty is not None else str(getattr(e, "dtype", "") or "")


def _short_name(op) -> str:
    name = str(op.name) if isinstance(op, tvm.ir.Op) else str(op)
    return name.rsplit(".", 1)[-1]


def _adds_own_buffer(store: tirx.BufferStore) -> bool:
    """The store's value is a float Add/Sub one of whose operands reads the buffer stored to."""
    found: list = []

    def reads_target(e) -> bool:
        hits: list = []

        def on_load(load):
            if load.source.same_as(store.buffer):
                hits.append(1)
        tvm_ffi.structural_walk(e, [(TensorLoad, on_load)])
        return bool(hits)

    def on_add(e):
        if _is_float(_dtype(e)) and (reads_target(e.a) or reads_target(e.b)):
            found.append(1)
    tvm_ffi.structural_walk(store.value, [(tirx.Add, on_add), (tirx.Sub, on_add)])
    return bool(found)


def rounded_result(func: tirx.PrimFunc) -> bool:
    """True when some result of ``func`` is only defined up to rounding (compare it with a tolerance)."""
    hits: list = []

    def on_tile(call):
        name = str(call.op.name)
        if name in _SUMMING_TILE_OPS or name.startswith("tirx.tile.") and _short_name(call.op) in _TRANSCENDENTAL:
            dst = call.args[0]
            source = getattr(dst, "source", None)
            if name == "tirx.tile.gemm" or source is None or _is_float(source.dtype):
                hits.append(name)

    def on_call(call):
        atomic = atomic_of(call)
        if atomic is not None:
            if atomic.kind == "add" and _is_float(atomic.target.source.dtype):
                hits.append("float atomic add")
        elif isinstance(call.op, tvm.ir.Op) and _short_name(call.op) in _TRANSCENDENTAL and _is_float(_dtype(call)):
            hits.append(str(call.op.name))

    def on_store(store):
        if _is_float(store.buffer.dtype) and _adds_own_buffer(store):
            hits.append(f"accumulation into {store.buffer.name}")

    tvm_ffi.structural_walk(func.body, [(TilePrimitiveCall, on_tile), (tvm.ir.Call, on_call),
                                        (tirx.BufferStore, on_store)])
    return bool(hits)
