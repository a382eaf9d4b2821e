"""Kernel-side spellings for constructs TIRx has no tile primitive for.

Call these inside an ordinary ``@T.prim_func``; each emits plain TIRx statements (parallel nests, serial
loops, CUDA atomic calls) into the function being parsed, so the front end, layout inference and both
back ends see nothing new:

- ``cumsum(src, dst=None, dim=0, reverse=False)``: inclusive prefix sum along ``dim`` (TileLang's
  ``T.cumsum``), over fragments or shared tiles: a parallel nest over the other dimensions around a
  serial loop along ``dim``, which layout inference keeps within one thread, or splits over the lanes of a
  warp when every thread can take an equal part of a row (chunk scans joined by warp shuffles).
- ``atomic_add(dst, value)``, ``atomic_max``, ``atomic_min``: TileLang's ``T.atomic_add(dst, value)`` on
  global or shared memory (``dst`` is an element such as ``B[i]``). CUDA has floating-point atomicAdd;
  atomicMax/atomicMin exist for 32/64-bit integers only, so those refuse floating-point elements.
- ``atomic_add(dst_region, src_region)``: the tile form (attention backward accumulates dQ this way): every
  element of ``src`` (a fragment or a shared tile) is added atomically to the matching element of ``dst``
  (global or shared memory). The extents must agree once unit dimensions are dropped (``dQ[b, r0:r0 + 64, h,
  0:128]`` against a ``[64, 128]`` fragment); it becomes a ``T.parallel`` nest over ``src`` whose layout
  inference takes from the fragment, one atomic per element.
- ``alloc_reducer(shape, dtype, op="sum", replication="all")`` and ``finalize_reducer(buf)``: TileLang's
  reducer. ``alloc_reducer`` allocates a register fragment marked as a reducer (``op``: ``"sum"``, ``"max"`` or
  ``"min"``); ``Tx.fill`` starts an accumulation (with the identity for ``"sum"``), ``T.parallel`` nests update it
  (``R[i] = R[i] + v``, ``R[i] = T.max(R[i], v)``), and ``finalize_reducer`` ends it. With ``replication="all"``
  the threads running one element's updates each keep a partial (inference decides which threads they are, from
  the nest's loop layout) and ``finalize_reducer`` combines them by warp shuffles (shared memory across warps);
  with ``"none"`` every holder of an element runs all of its updates and there is nothing to combine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm

from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion
from tvm.tirx.script.builder import ir as IB

from tilelayout.errors import LayoutError

__all__ = ["cumsum", "alloc_reducer", "finalize_reducer", "REDUCER_ATTR", "FINALIZE_REDUCER", "atomic_add", "atomic_max", "atomic_min", "ATOMIC_EXTERNS", "Atomic", "atomic_of", "is_atomic_call"]

#: AllocBuffer annotation marking a reducer fragment: ``"op:replication"`` (``"sum:all"``)
REDUCER_ATTR = "tilelayout.reducer"
#: the extern ``finalize_reducer`` evaluates (its argument: the reducer's buffer); lowering replaces it
FINALIZE_REDUCER = "tilelayout_finalize_reducer"
REDUCER_OPS = ("sum", "max", "min")
REDUCER_REPLICATION = ("all", "none")

#: CUDA function called for each atomic; the front end and the CPU path recognise exactly these
ATOMIC_EXTERNS = {"atomicAdd": "add", "atomicMax": "max", "atomicMin": "min"}


class LangError(LayoutError):
    """A tilelayout.lang construct was called with arguments it cannot express."""


def _region(arg: Any, what: str) -> tuple[Any, list, list]:
    """(buffer, offsets, extents) of a whole buffer or a ``buf[a:b, ...]`` region."""
    if isinstance(arg, TensorRegion):
        return arg.source, [r.min for r in arg.region], [r.extent for r in arg.region]
    if tirx.is_buffer_var(arg):
        return arg, [0] * len(arg.shape), list(arg.shape)
    raise LangError(f"cumsum: {what} must be a buffer or a buffer region, got {arg!r}")


def _int(e: Any) -> int | None:
    if isinstance(e, int):
        return e
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    return None


def cumsum(src: Any, dst: Any = None, dim: int = 0, reverse: bool = False) -> None:
    """Inclusive prefix sum of ``src`` along ``dim`` into ``dst`` (``src`` itself when omitted)."""
    sbuf, soff, sext = _region(src, "src")
    dbuf, doff, dext = _region(dst if dst is not None else src, "dst")
    if [_int(e) for e in sext] != [_int(e) for e in dext] or any(_int(e) is None for e in sext):
        raise LangError(f"cumsum: src {sbuf.name} extents {sext} and dst {dbuf.name} extents {dext} must be equal "
                        f"constants")
    rank = len(sext)
    if not -rank <= dim < rank:
        raise LangError(f"cumsum: dim {dim} out of range for a rank-{rank} region of {sbuf.name}")
    dim %= rank
    n = _int(sext[dim])
    other = [d for d in range(rank) if d != dim]

    def body(par_vars: list) -> None:
        # the mark lets layout inference split a row over lanes (passes/inference/scan_split.py)
        with IB.serial(0, n, annotations={"tilelayout.cumsum": int(bool(reverse))}) as k:
            pos = (n - 1 - k) if reverse else k
            prev = (pos + 1) if reverse else (pos - 1)
            prev = tirx.max(tirx.min(prev, n - 1), 0)   # clamped: read only when k > 0

            def at(offs, d_idx):
                idx, p = [], 0
                for d in range(rank):
                    if d == dim:
                        idx.append(offs[d] + d_idx)
                    else:
                        idx.append(offs[d] + par_vars[p])
                        p += 1
                return idx
            cur = tirx.BufferLoad(sbuf, at(soff, pos))
            before = tirx.BufferLoad(dbuf, at(doff, prev))
            zero = tirx.const(0, str(dbuf.dtype))
            value = cur + tirx.if_then_else(k > 0, before, zero)
            IB.buffer_store(dbuf, value, at(doff, pos))

    def nest(level: int, par_vars: list) -> None:
        if level == len(other):
            body(par_vars)
            return
        with IB.parallel(0, _int(sext[other[level]])) as v:
            nest(level + 1, par_vars + [v])

    if other:
        nest(0, [])
    else:                      # a 1-D region: one parallel iteration around the serial loop
        with IB.parallel(0, 1):
            body([])


def alloc_reducer(shape: Any, dtype: str = "float32", op: str = "sum", replication: str = "all") -> Any:
    """A register fragment several threads accumulate partial results of one element into (TileLang's
    ``T.alloc_reducer``); see the module docstring."""
    if op not in REDUCER_OPS:
        raise LangError(f"alloc_reducer: op {op!r} is not one of {', '.join(REDUCER_OPS)}")
    if replication not in REDUCER_REPLICATION:
        raise LangError(f"alloc_reducer: replication {replication!r} is not one of {', '.join(REDUCER_REPLICATION)}")
    shape = [shape] if isinstance(shape, (int, tirx.IntImm)) else list(shape)
    return IB.alloc_buffer(shape, dtype, scope="local.fragment",
                           annotations={REDUCER_ATTR: f"{op}:{replication}"})


def finalize_reducer(buf: Any) -> Any:
    """End the reducer's accumulation: afterwards every holder of an element has its combined value."""
    if not tirx.is_buffer_var(buf):
        raise LangError(f"finalize_reducer: expected the buffer alloc_reducer returned, got {buf!r}")
    return tirx.call_extern("int32", FINALIZE_REDUCER, buf)


def _atomic(kind: str, dst: Any, value: Any) -> Any:
    if not isinstance(dst, TensorLoad) or not tirx.is_buffer_var(dst.source):
        raise LangError(f"atomic_{kind}: the destination must be one buffer element such as B[i], got {dst!r}")
    dtype = str(dst.source.dtype)
    if kind != "add" and not dtype.startswith(("int", "uint")):
        raise LangError(f"atomic_{kind} on {dst.source.name} ({dtype}): CUDA has atomicMax/atomicMin for integer "
                        f"elements only; use an integer buffer or a reduction")
    value = tirx.Cast(dtype, value) if str(getattr(value, "dtype", dtype)) != dtype else value
    name = {"add": "atomicAdd", "max": "atomicMax", "min": "atomicMin"}[kind]
    return tirx.call_extern(dtype, name, tirx.address_of(dst), value)


def atomic_add(dst: Any, value: Any) -> Any:
    """``dst += value`` atomically (global or shared memory): one element, or a region plus a tile."""
    if isinstance(dst, TensorRegion) or tirx.is_buffer_var(dst):
        return _atomic_tile("add", dst, value)
    return _atomic("add", dst, value)


def _atomic_tile(kind: str, dst: Any, src: Any) -> None:
    """A parallel nest over ``src`` doing one element atomic into the matching element of ``dst``."""
    dbuf, doff, dext = _region(dst, "dst")
    if not (isinstance(src, TensorRegion) or tirx.is_buffer_var(src)):
        raise LangError(f"atomic_{kind}: with a region destination ({dbuf.name}) the value must be a buffer or a "
                        f"region of the same shape, got {src!r}")
    sbuf, soff, sext = _region(src, "src")
    if any(_int(e) is None for e in list(sext) + list(dext)):
        raise LangError(f"atomic_{kind}: region extents must be constants, got {dbuf.name} {list(dext)} and "
                        f"{sbuf.name} {list(sext)}")
    dkeep = [d for d, e in enumerate(dext) if _int(e) != 1]
    skeep = [d for d, e in enumerate(sext) if _int(e) != 1]
    if [_int(dext[d]) for d in dkeep] != [_int(sext[d]) for d in skeep]:
        raise LangError(f"atomic_{kind}: destination {dbuf.name} extents {[_int(e) for e in dext]} and value "
                        f"{sbuf.name} extents {[_int(e) for e in sext]} differ (unit dimensions aside)")
    if str(dbuf.dtype) != str(sbuf.dtype) and kind != "add":
        raise LangError(f"atomic_{kind}: {dbuf.name} ({dbuf.dtype}) and {sbuf.name} ({sbuf.dtype}) differ")

    def nest(level: int, coords: list) -> None:
        if level == len(skeep):
            s_idx = [soff[d] + (coords[skeep.index(d)] if d in skeep else 0) for d in range(len(sext))]
            d_idx = [doff[d] + (coords[dkeep.index(d)] if d in dkeep else 0) for d in range(len(dext))]
            IB.evaluate(_atomic(kind, tirx.BufferLoad(dbuf, d_idx), tirx.BufferLoad(sbuf, s_idx)))
            return
        with IB.parallel(0, _int(sext[skeep[level]])) as v:
            nest(level + 1, coords + [v])

    if skeep:
        nest(0, [])
    else:
        with IB.parallel(0, 1):
            nest(0, [])


def atomic_max(dst: Any, value: Any) -> Any:
    """``dst = max(dst, value)`` atomically (integer elements)."""
    return _atomic("max", dst, value)


def atomic_min(dst: Any, value: Any) -> Any:
    """``dst = min(dst, value)`` atomically (integer elements)."""
    return _atomic("min", dst, value)


# ------------------------------------------------------------------ recognising atomics in the IR

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
    elif name == "tirx.call_extern" and len(call.args) == 3 and isinstance(call.args[0], tvm.ir.StringImm) \
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
        name == "tirx.call_extern" and len(call.args) >= 1 and isinstance(call.args[0], tvm.ir.StringImm)
        and str(call.args[0].value) in ATOMIC_EXTERNS)
