"""CPU emulation of ``cp.async`` with the hardware's freedom, so a wrong pipeline schedule gives wrong values.

On the GPU a ``cp.async`` lands in shared memory at some moment between its issue and the
``cp.async.wait_group N`` that leaves at most ``N`` of the issuing thread's groups pending; other threads see
it after a barrier following that wait. The emulation takes the latest legal moment and makes the window
visible:

- issue: the destination elements are poisoned (NaN for floats, the type's extreme for integers) and the
  source values are parked in an in-flight copy of the tile, tagged with the issuing thread and its open
  group (a ring of ``RING`` groups; an overflow stops the kernel with an error); the src-size form parks
  zeros past ``src_size`` bytes and never reads the source there;
- ``commit_group`` closes the thread's open group; ``wait_group N`` marks its groups up to
  ``committed - N`` complete;
- a barrier lands, for each thread in turn, its completed groups in commit order, then synchronises.

A read of a stage before its group is waited for and a barrier has passed sees poison: a too-small wait count,
a missing wait or a missing barrier gives wrong CPU results. Runs on the flattened kernel, before
``serialize_threads``; emulation blocks are marked ``tilelayout.per_thread`` so serialisation runs each as one
per-thread phase.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from tilelayout.errors import LoweringError

from ..ir_utils import int_value, mutate, walk

__all__ = ["emulate_async_copies", "PER_THREAD_KEY", "RING"]

#: groups in flight per thread the emulation can hold
RING = 16
#: AttrStmt key: the body is one per-thread phase for ``serialize_threads``
PER_THREAD_KEY = "tilelayout.per_thread"

_COPY = ("tirx.ptx.cp_async_cg", "tirx.ptx.cp_async_ca", "tirx.ptx.cp_async_cg_src_size",
         "tirx.ptx.cp_async_ca_src_size")
_COMMIT = "tirx.ptx.cp_async_commit_group"
_WAIT = "tirx.ptx.cp_async_wait_group"


def _name(c) -> str:
    return str(c.op.name) if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op) else ""


def _per_thread(stmt):
    return tirx.AttrStmt(tirx.const(0, "int32"), PER_THREAD_KEY, tirx.const(1, "int32"), stmt)


def _pointee(ptr, what: str):
    """The BufferLoad under ``cvta_generic_to_shared(address_of(B[i]))`` / ``address_of(B[i])``."""
    node = ptr
    while isinstance(node, tvm.ir.Call):
        if _name(node) == "tirx.address_of":
            load = node.args[0]
            if isinstance(load, TensorLoad):
                return load
            break
        if not node.args:
            break
        node = node.args[0]
    raise LoweringError(f"cannot emulate {what}: its address {ptr} is not address_of(buffer[index])")


def _poison(dtype: str):
    if "float" in dtype:
        return tirx.const(float("nan"), dtype)
    return tirx.min_value(dtype) if not dtype.startswith("uint") else tirx.max_value(dtype)


def emulate_async_copies(func):
    """``func`` (flattened, threads still bound) with cp.async / commit / wait emulated (module docstring)."""
    calls = []
    walk(func.body, [(tvm.ir.Call, lambda c: calls.append(c) if _name(c) in _COPY + (_COMMIT, _WAIT) else None)])
    if not calls:
        return func
    tid, _ = _thread_id(func)
    one = [tirx.const(0, "int32")]
    committed, complete, landed = (tirx.decl_buffer([1], "int32", name=f"cp_async_{n}", scope="local")
                                   for n in ("committed", "complete", "landed"))
    shadows: dict = {}      # dst buffer -> (buffer, inflight, owner)

    def shadow(buf):
        for b, entry in shadows.items():
            if b.same_as(buf):
                return entry
        if len(buf.shape) != 1 or int_value(buf.shape[0]) is None:
            raise LoweringError(f"cannot emulate cp.async into {buf.name}: expected a flattened constant-size tile")
        n = int_value(buf.shape[0])
        entry = (buf, tirx.decl_buffer([RING, n], buf.dtype, name=f"{buf.name}_inflight", scope="shared"),
                 tirx.decl_buffer([RING, n], "int32", name=f"{buf.name}_owner", scope="shared"))
        shadows[buf] = entry
        return entry

    def issue(c):
        nbytes = int_value(c.args[2])
        sized = _name(c).endswith("_src_size")
        if len(c.args) != (11 if sized else 10) or nbytes is None:
            raise LoweringError(f"cannot emulate {c}: only the plain and the src-size cp.async forms (no @p "
                                f"predicate) are emulated")
        src_size = c.args[3] if sized else None
        dst, src = _pointee(c.args[0], "cp.async"), _pointee(c.args[1], "cp.async")
        buf, inflight, owner = shadow(dst.source)
        dtype = str(buf.dtype)
        if str(src.source.dtype) != dtype:
            raise LoweringError(f"cannot emulate cp.async {src.source.name} -> {buf.name}: element types differ")
        count = nbytes * 8 // tvm.DataType(dtype).bits
        e = tirx.Var("e", "int32")
        slot = tirx.floormod(tirx.BufferLoad(committed, one), RING)
        base = dst.indices[0].base if isinstance(dst.indices[0], tirx.Ramp) else dst.indices[0]
        at = base + e
        src_idx = list(src.indices[:-1]) + [src.indices[-1] + e]
        body = tirx.SeqStmt([
            tirx.AssertStmt(tirx.BufferLoad(owner, [slot, at]) == 0, tvm.ir.StringImm("RuntimeError"),
                            [tvm.ir.StringImm(f"cp.async emulation: more than {RING} groups in flight")]),
            # src-size form: bytes past src_size are zero-filled and never read
            tirx.BufferStore(inflight, tirx.BufferLoad(src.source, src_idx) if src_size is None else tirx.if_then_else(
                tirx.Cast("int32", src_size) > e * (tvm.DataType(dtype).bits // 8), tirx.BufferLoad(src.source, src_idx),
                tirx.const(0, dtype)), [slot, at]),
            tirx.BufferStore(owner, tid + 1, [slot, at]),
            tirx.BufferStore(buf, _poison(dtype), [at]),
        ])
        return _per_thread(tirx.For(e, 0, count, tirx.ForKind.SERIAL, body))

    def land():
        g = tirx.Var("g", "int32")
        parts = []
        for buf, inflight, owner in shadows.values():
            e = tirx.Var("e", "int32")
            slot = tirx.floormod(g, RING)
            mine = tirx.BufferLoad(owner, [slot, e]) == tid + 1
            put = tirx.IfThenElse(mine, tirx.SeqStmt([
                tirx.BufferStore(buf, tirx.BufferLoad(inflight, [slot, e]), [e]),
                tirx.BufferStore(owner, tirx.const(0, "int32"), [slot, e])]), None)
            parts.append(tirx.For(e, 0, int_value(buf.shape[0]), tirx.ForKind.SERIAL, put))
        lo = tirx.BufferLoad(landed, one)
        loop = tirx.For(g, lo, tirx.BufferLoad(complete, one) - lo, tirx.ForKind.SERIAL,
                        tirx.SeqStmt(parts) if len(parts) > 1 else parts[0])
        return _per_thread(tirx.SeqStmt([loop, tirx.BufferStore(landed, tirx.BufferLoad(complete, one), one)]))

    def on_eval(node, mutator):
        c = node.value
        name = _name(c)
        if name in _COPY:
            return issue(c)
        if name == _COMMIT:
            return tirx.BufferStore(committed, tirx.BufferLoad(committed, one) + 1, one)
        if name == _WAIT:
            n = int_value(c.args[0])
            if n is None:
                raise LoweringError(f"cannot emulate {c}: the wait count must be a constant")
            return tirx.BufferStore(complete, tirx.max(tirx.BufferLoad(complete, one),
                                                       tirx.BufferLoad(committed, one) - n), one)
        if name == "tirx.tvm_storage_sync":
            return tirx.SeqStmt([land(), node]) if shadows else node
        return node

    # copies first (they declare the shadows the barriers land), then barriers
    body = mutate(func.body, [(tirx.Evaluate, lambda n, m: on_eval(n, m) if _name(n.value) in _COPY + (_COMMIT, _WAIT)
                               else n)])
    body = mutate(body, [(tirx.Evaluate, on_eval)])
    zero = [tirx.BufferStore(b, tirx.const(0, "int32"), one) for b in (committed, complete, landed)]
    clear = []
    for buf, _, owner in shadows.values():
        r, e = tirx.Var("r", "int32"), tirx.Var("e", "int32")
        clear.append(tirx.For(r, 0, RING, tirx.ForKind.SERIAL, tirx.For(
            e, 0, int_value(buf.shape[0]), tirx.ForKind.SERIAL, tirx.BufferStore(owner, tirx.const(0, "int32"),
                                                                                  [r, e]))))
    init = [tirx.AllocBuffer(b) for b in (committed, complete, landed)]
    init += [tirx.AllocBuffer(x) for _, inflight, owner in shadows.values() for x in (inflight, owner)]
    init += zero + [_per_thread(tirx.IfThenElse(tid == 0, tirx.SeqStmt(clear) if len(clear) > 1 else clear[0],
                                                None))] if clear else zero
    _, launch = _thread_id(func.with_body(body))
    return func.with_body(_inside_launch(body, launch, init))


def _thread_id(func):
    """(flat thread id expression, innermost thread-launch AttrStmt)."""
    dims, last = {}, []

    def on_attr(n):
        if n.attr_key == "thread_extent" and isinstance(n.node, tirx.IterVar):
            tag = str(n.node.thread_tag)
            last.append(n)
            if tag.startswith("threadIdx."):
                dims[tag[-1]] = (n.node.var, int_value(n.value))

    walk(func.body, [(tirx.AttrStmt, on_attr)])
    if not last:
        raise LoweringError("cannot emulate cp.async: the kernel launches no threads")
    out, scale = tirx.const(0, "int32"), 1
    for axis in "xyz":
        if axis in dims:
            v, ext = dims[axis]
            out = out + v * scale
            scale *= ext or 1
    return out, last[-1]


def _inside_launch(body, launch, init: list):
    """``body`` with ``init`` placed as the first statements under the innermost launch attribute."""
    def on_attr(node, mutator):
        if node.same_as(launch):
            return tirx.AttrStmt(node.node, node.attr_key, node.value, tirx.SeqStmt(init + [node.body]))
        return mutator.default_mutate(node)
    return mutate(body, [(tirx.AttrStmt, on_attr)])
