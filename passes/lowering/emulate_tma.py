"""CPU emulation of TMA loads and mbarriers, so a wrong TMA schedule gives wrong values (or stops).

On the GPU a ``cp.async.bulk.tensor`` load lands in shared memory at some moment before the mbarrier phase it
completes on ends; a thread may use the bytes after its ``mbarrier.try_wait.parity`` on that phase returns. The
emulation takes the latest legal moment, reading everything from the final program (the tensor map's encoding on
the host and each instruction's operands), never from the lowering's plan:

- host: each ``tensormap_encode_tiled`` is read (global parameter, dimensions, byte strides, box, swizzle) and
  removed with its ``tvm_stack_alloca``;
- ``mbarrier.init``: the barrier's arrival count, phase 0; ``arrive.expect_tx`` adds the bytes the phase waits
  for and arrives once; ``arrive`` arrives;
- a TMA load: every element of the box is read from the global (zero outside it, as TMA fills), parked in an
  in-flight copy tagged with the barrier, and its shared destination -- the box's row-major byte offset,
  XOR-swizzled on the address bits as the tensor map's swizzle mode says -- is poisoned (NaN, or the type's
  extreme); the box's bytes count towards the barrier's transaction;
- a wait on parity ``p``: when the barrier's current phase has parity ``p`` the thread must see it complete: the
  copies tagged with the barrier land, the phase must then have all its arrivals and exactly its expected bytes
  (otherwise the wait would never return on the GPU: the emulation stops with that message), and the phase
  advances; a wait on the other parity returns at once (it names the previous phase, complete already), as the
  hardware does. Each thread keeps, per barrier, the number of phases it has seen complete (``tma_seen``), which
  the race check compares against the phase that landed an element (``race_check``).

- a TMA store (``cp.async.bulk.tensor ... global.shared::cta.bulk_group``) runs at the
  ``cp.async.bulk.wait_group`` that follows it in its block, the latest moment the hardware may read the tile:
  the box is read from the tile through the tensor map's swizzle and written to the global where it lies
  inside it; a store with no wait after it is refused.

So a wrong box, a missing expect_tx or one with the wrong byte count, a wait on the wrong parity and a read
before the wait all give poison, a stop, or a race report. Runs on the flattened kernel after
``emulate_async_copy`` and before ``serialize_threads``; its blocks are per-thread phases.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from tilelayout.errors import LoweringError

from ..ir_utils import int_value, mapped, walk
from .emulate_async_copy import PER_THREAD_KEY, _inside_launch, _poison, _thread_id

__all__ = ["emulate_tma", "TMA_ISSUE_KEY", "TMA_ISSUED", "TMA_LANDING_KEY", "TMA_SEEN", "TMA_SLOTS", "TMA_THREAD"]

#: AttrStmt key around an emulated TMA issue (the race check names its stores after it)
TMA_ISSUE_KEY = "tilelayout.tma_issue"
#: AttrStmt key around a landing: node = the barrier's slot, value = the phase count after it completes
TMA_LANDING_KEY = "tilelayout.tma_landing"
#: per-thread array: per barrier slot, the phases this thread has seen complete
TMA_SEEN = "tma_seen"
#: the race check's record thread of an element landed through barrier slot ``b`` completing its ``p``-th phase:
#: ``TMA_THREAD - (p * TMA_SLOTS + b)``
TMA_THREAD = -3
#: mbarrier slots the emulation tells apart
TMA_SLOTS = 64
#: the race check's record thread of an element a TMA load issued by thread ``t`` is in flight into:
#: ``TMA_ISSUED - t`` (below every landing code)
TMA_ISSUED = -(1 << 30)

_INIT = "tirx.ptx.mbarrier_init"
_EXPECT = "tirx.ptx.mbarrier_arrive_expect_tx"
_ARRIVE = ("tirx.ptx.mbarrier_arrive", "tirx.ptx.mbarrier_arrive_nocount")
_WAIT = "tirx.cuda.mbarrier_wait"
_LOAD = "tirx.ptx.cp_async_bulk_tensor_g2s_cluster"
_STORE = "tirx.ptx.cp_async_bulk_tensor_s2g"
_BULK_COMMIT = "tirx.ptx.cp_async_bulk_commit_group"
_BULK_WAIT = "tirx.ptx.cp_async_bulk_wait_group"
_FENCE = "tirx.ptx.fence_mbarrier_init"
_ENCODE = "tirx.tensormap_encode_tiled"
#: mbarrier state fields: arrival count, pending arrivals, expected bytes, arrived bytes, completed phases
_COUNT, _PENDING, _EXPECTED, _ARRIVED, _PHASES = range(5)


def _name(c) -> str:
    return str(c.op.name) if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op) else ""


def _calls(func) -> list:
    out = []
    walk(func.body, [(tvm.ir.Call, lambda c: out.append(c) if _name(c) in
                      (_INIT, _EXPECT, _WAIT, _LOAD, _STORE, _ENCODE) + _ARRIVE else None)])
    return out


def _all_calls(func) -> list:
    out = []
    walk(func.body, [(tvm.ir.Call, out.append)])
    return out


def _pointee(ptr):
    node = ptr
    while isinstance(node, tvm.ir.Call):
        if _name(node) == "tirx.address_of":
            inner = node.args[0]
            return inner if isinstance(inner, TensorLoad) else inner
        if not node.args:
            break
        node = node.args[0]
    raise LoweringError(f"cannot emulate TMA: the address {ptr} is not address_of(...)")


def _per_thread(stmt):
    return tirx.AttrStmt(tirx.const(0, "int32"), PER_THREAD_KEY, tirx.const(1, "int32"), stmt)


def _seq(stmts: list):
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _swizzle(byte, mode: int):
    """TMA's shared-memory swizzle of a byte offset (mode 1, 2, 3: 32, 64, 128 bytes): bits [4, 4 + m) XOR
    bits [7, 7 + m)."""
    if mode == 0:
        return byte
    mask = tirx.const(((1 << mode) - 1) << 4, "int32")
    return tirx.bitwise_xor(byte, tirx.bitwise_and(tirx.shift_right(byte, tirx.const(3, "int32")), mask))


def emulate_tma(func):
    """``func`` (flattened, threads bound) with TMA loads, tensor maps and mbarriers emulated (module docstring)."""
    calls = _calls(func)
    if not any(_name(c) in (_LOAD, _STORE, _ENCODE) for c in calls):
        return func     # mbarriers without TMA loads (tcgen05's commit barrier) are emulated with their owner
    if any(_name(c).startswith("tirx.ptx.tcgen05") for c in _all_calls(func)):
        raise LoweringError("cannot emulate TMA loads and tcgen05 in one kernel: both would claim its mbarriers")
    maps = _tensor_maps(func)
    slots, nslots = _barrier_slots(calls)
    if nslots > TMA_SLOTS:
        raise LoweringError(f"cannot emulate {nslots} mbarriers (at most {TMA_SLOTS})")
    state = tirx.decl_buffer([max(nslots, 1), 5], "int32", name="tma_mbarrier", scope="shared")
    seen = tirx.decl_buffer([max(nslots, 1)], "int32", name=TMA_SEEN, scope="local")
    tid, _ = _thread_id(func)
    views, shadows = {}, {}

    def slot_of(ptr):
        load = _pointee(ptr)
        if not isinstance(load, TensorLoad):
            raise LoweringError(f"cannot emulate an mbarrier at {ptr}")
        for buf, base in slots:
            if buf.same_as(load.source):
                return base + load.indices[0], f"{buf.name}[{load.indices[0]}]"
        raise LoweringError(f"cannot emulate a wait on {load.source.name}: no mbarrier.init names it")

    def field(s, f):
        return tirx.BufferLoad(state, [s, tirx.const(f, "int32")])

    def put(s, f, v):
        return tirx.BufferStore(state, v, [s, tirx.const(f, "int32")])

    def shadow(buf):
        for b, entry in shadows.items():
            if b.same_as(buf):
                return entry
        n = int_value(buf.shape[0]) if len(buf.shape) == 1 else None
        if n is None:
            raise LoweringError(f"cannot emulate TMA into {buf.name}: expected a flattened constant-size tile")
        entry = (tirx.decl_buffer([n], buf.dtype, name=f"{buf.name}_tma_inflight", scope="shared"),
                 tirx.decl_buffer([n], "int32", name=f"{buf.name}_tma_tag", scope="shared"), n)
        shadows[buf] = entry
        return entry

    def view(info):
        key = info["param"]
        if key not in views:
            p = info["param"]
            n = 1
            for x in p.shape:
                n *= int_value(x)
            views[key] = (tirx.decl_buffer([n], p.dtype, name=f"{p.name}_tma_view"), p.data)
        return views[key][0]

    def load(c):
        tm = _pointee(c.args[1])
        info = next((v for k, v in maps.items() if k.same_as(tm)), None)
        if info is None:
            raise LoweringError(f"cannot emulate TMA: its tensor map {tm} is not encoded on the host")
        rank = info["rank"]
        dst = _pointee(c.args[0])
        coords = list(c.args[2:2 + rank])
        s, _ = slot_of(c.args[2 + rank])
        buf = dst.source
        if str(buf.dtype) != info["dtype"]:
            raise LoweringError(f"cannot emulate TMA into {buf.name}: the tensor map is {info['dtype']}")
        inflight, tag, n = shadow(buf)
        src = view(info)
        bvars, inside, flat, at = _box(info, coords, dst.indices[0])
        body = tirx.SeqStmt([
            tirx.AssertStmt(tirx.And(at >= 0, at < n), tvm.ir.StringImm("RuntimeError"),
                            [tvm.ir.StringImm(f"TMA emulation: a load into {buf.name} leaves the tile")]),
            tirx.AssertStmt(tirx.BufferLoad(tag, [at]) == 0, tvm.ir.StringImm("RuntimeError"),
                            [tvm.ir.StringImm(f"TMA emulation: two TMA loads in flight into one element of "
                                              f"{buf.name}")]),
            tirx.BufferStore(inflight, tirx.if_then_else(inside, tirx.BufferLoad(src, [tirx.Select(inside, flat, 0)]),
                                                         tirx.const(0, info["dtype"])), [at]),
            tirx.BufferStore(tag, s + 1, [at]),
            tirx.BufferStore(buf, _poison(info["dtype"]), [at]),
        ])
        for d in range(rank):
            body = tirx.For(bvars[d], 0, info["box"][d], tirx.ForKind.SERIAL, body)
        total = tvm.DataType(info["dtype"]).bits // 8
        for b in info["box"]:
            total *= b
        issue = tirx.SeqStmt([body, put(s, _ARRIVED, field(s, _ARRIVED) + total)])
        return _per_thread(tirx.AttrStmt(tirx.const(0, "int32"), TMA_ISSUE_KEY, tirx.const(1, "int32"), issue))

    def landing(s):
        parts = []
        for buf, (inflight, tag, n) in shadows.items():
            e = tirx.Var("e", "int32")
            mine = tirx.BufferLoad(tag, [e]) == s + 1
            parts.append(tirx.For(e, 0, n, tirx.ForKind.SERIAL, tirx.IfThenElse(mine, tirx.SeqStmt([
                tirx.BufferStore(buf, tirx.BufferLoad(inflight, [e]), [e]),
                tirx.BufferStore(tag, tirx.const(0, "int32"), [e])]), None)))
        return parts

    def wait(c):
        s, what = slot_of(c.args[0])
        parity = c.args[1]
        done = tirx.And(field(s, _PENDING) <= 0, field(s, _EXPECTED) == field(s, _ARRIVED))
        complete = landing(s)
        if complete:
            complete = [tirx.AttrStmt(s, TMA_LANDING_KEY, field(s, _PHASES) + 1, _seq(complete))]
        complete += [
            tirx.AssertStmt(done, tvm.ir.StringImm("RuntimeError"), [tvm.ir.StringImm(
                f"mbarrier emulation: a wait on {what} would never return: its phase lacks arrivals or "
                f"transaction bytes (expect_tx does not match the TMA boxes' bytes, or no arrive)")]),
            put(s, _PHASES, field(s, _PHASES) + 1), put(s, _PENDING, field(s, _COUNT)),
            put(s, _EXPECTED, tirx.const(0, "int32")), put(s, _ARRIVED, tirx.const(0, "int32"))]
        current = tirx.floormod(field(s, _PHASES), 2) == tirx.Cast("int32", parity)
        return _per_thread(tirx.SeqStmt([
            tirx.IfThenElse(current, _seq(complete), None),
            tirx.BufferStore(seen, tirx.max(tirx.BufferLoad(seen, [s]), field(s, _PHASES)), [s])]))

    def store(c):
        """The TMA store's copy, shared -> global: every element of the box inside the global, read from the
        tile where the tensor map's swizzle puts it (run where the thread waits for the store to read the tile)."""
        tm = _pointee(c.args[0])
        info = next((v for k, v in maps.items() if k.same_as(tm)), None)
        if info is None:
            raise LoweringError(f"cannot emulate TMA: its tensor map {tm} is not encoded on the host")
        rank = info["rank"]
        coords = list(c.args[1:1 + rank])
        src = _pointee(c.args[1 + rank])
        buf = src.source
        if str(buf.dtype) != info["dtype"]:
            raise LoweringError(f"cannot emulate a TMA store from {buf.name}: the tensor map is {info['dtype']}")
        n = int_value(buf.shape[0]) if len(buf.shape) == 1 else None
        if n is None:
            raise LoweringError(f"cannot emulate a TMA store from {buf.name}: expected a flattened constant-size tile")
        dst = view(info)
        bvars, inside, flat, at = _box(info, coords, src.indices[0])
        body = tirx.SeqStmt([
            tirx.AssertStmt(tirx.And(at >= 0, at < n), tvm.ir.StringImm("RuntimeError"),
                            [tvm.ir.StringImm(f"TMA emulation: a store from {buf.name} reads outside the tile")]),
            tirx.IfThenElse(inside, tirx.BufferStore(dst, tirx.BufferLoad(buf, [at]), [flat]), None)])
        for d in range(rank):
            body = tirx.For(bvars[d], 0, info["box"][d], tirx.ForKind.SERIAL, body)
        return _per_thread(body)

    def on_seq(s):
        """TMA stores run at the ``cp.async.bulk.wait_group`` after them in their sequence (the latest moment the
        hardware may read the tile: a write of the tile before the wait changes what is stored, a missing wait
        stores nothing and is refused)."""
        out, pending = [], []
        for st in s.seq:
            c = st.value if isinstance(st, tirx.Evaluate) else None
            name = _name(c)
            if name == _STORE:
                pending.append(store(c))
                continue
            if name == _BULK_COMMIT:
                continue
            if name == _BULK_WAIT:
                if int_value(c.args[0]) != 0:
                    raise LoweringError("cannot emulate cp.async.bulk.wait_group with a count other than 0")
                out += pending
                pending = []
                continue
            out.append(st)
        if pending:
            raise LoweringError("TMA emulation: a TMA store is never waited for (no cp.async.bulk.wait_group after it "
                                "in its block): the kernel could exit or reuse the tile before the store read it")
        return _seq(out) if out else tirx.Evaluate(0)

    def on_eval(node):
        c = node.value
        name = _name(c)
        if name in (_STORE, _BULK_WAIT):
            raise LoweringError(f"cannot emulate {name} outside a statement sequence with its wait")
        if name == _ENCODE or name == _FENCE:
            return tirx.Evaluate(0)
        if name == _INIT:
            s, _ = slot_of(c.args[0])
            cnt = tirx.Cast("int32", c.args[1])
            return _per_thread(_seq([put(s, _COUNT, cnt), put(s, _PENDING, cnt), put(s, _PHASES, tirx.const(0, "int32")),
                                     put(s, _EXPECTED, tirx.const(0, "int32")), put(s, _ARRIVED, tirx.const(0, "int32"))]))
        if name == _EXPECT:
            s, _ = slot_of(c.args[0])
            return _per_thread(_seq([put(s, _EXPECTED, field(s, _EXPECTED) + tirx.Cast("int32", c.args[1])),
                                     put(s, _PENDING, field(s, _PENDING) - 1)]))
        if name in _ARRIVE:
            addr = c.args[1] if len(c.args) > 1 and not isinstance(c.args[0], tvm.ir.Call) else c.args[0]
            s, _ = slot_of(addr)
            count = tirx.const(1, "int32") if name.endswith("nocount") else tirx.Cast("int32", c.args[2])
            return _per_thread(put(s, _PENDING, field(s, _PENDING) - count))
        if name == _LOAD:
            return load(c)
        if name == _WAIT:
            return wait(c)
        return node

    def on_bind(b):
        v = b.value
        if _name(v) == "tirx.tvm_stack_alloca" and any(m.same_as(b.var) for m in maps):
            return tirx.Evaluate(0)
        return b

    body = mapped(func.body, [(tirx.SeqStmt, on_seq)])
    body = mapped(body, [(tirx.Evaluate, on_eval), (tirx.Bind, on_bind)])
    zero = tirx.const(0, "int32")
    init = [tirx.AllocBuffer(state), tirx.AllocBuffer(seen)]
    init += [tirx.AllocBuffer(x) for inflight, tag, _ in shadows.values() for x in (inflight, tag)]
    i, f = tirx.Var("i", "int32"), tirx.Var("f", "int32")
    clear = [tirx.For(i, 0, max(nslots, 1), tirx.ForKind.SERIAL, tirx.For(
        f, 0, 5, tirx.ForKind.SERIAL, tirx.BufferStore(state, zero, [i, f])))]
    for inflight, tag, n in shadows.values():
        e = tirx.Var("e", "int32")
        clear.append(tirx.For(e, 0, n, tirx.ForKind.SERIAL, tirx.BufferStore(tag, zero, [e])))
    j = tirx.Var("j", "int32")
    init += [_per_thread(tirx.IfThenElse(tid == 0, _seq(clear), None)),
             tirx.For(j, 0, max(nslots, 1), tirx.ForKind.SERIAL, tirx.BufferStore(seen, zero, [j]))]
    _, launch = _thread_id(func.with_body(body))
    body = _inside_launch(body, launch, init)
    decls = [tirx.DeclBuffer(v, data=data) for v, data in views.values()]
    return func.with_body(tirx.SeqStmt(decls + [body]) if decls else body)


def _box(info: dict, coords: list, tile_start) -> tuple:
    """(box loop variables, whether the box element lies inside the global, its global element index, its element
    index in the tile -- from ``tile_start``, through the tensor map's swizzle) of a TMA box at ``coords``."""
    rank = info["rank"]
    ebytes = tvm.DataType(info["dtype"]).bits // 8
    bvars = [tirx.Var(f"b{d}", "int32") for d in range(rank)]
    g = [coords[d] + bvars[d] for d in range(rank)]
    inside = None
    for d in range(rank):
        ok = tirx.And(g[d] >= 0, g[d] < info["dims"][d])
        inside = ok if inside is None else tirx.And(inside, ok)
    flat = g[0]
    for d in range(1, rank):
        flat = flat + g[d] * (info["strides"][d - 1] // ebytes)
    lin = tirx.const(0, "int32")
    for d in reversed(range(rank)):
        lin = lin * info["box"][d] + bvars[d]
    at = tirx.floordiv(_swizzle(tile_start * ebytes + lin * ebytes, info["swizzle"]), ebytes)
    return bvars, inside, flat, at


def _tensor_maps(func) -> dict:
    """{tensor-map var: encoding} from the host's ``tensormap_encode_tiled`` calls."""
    out = {}

    def on_call(c):
        if _name(c) != _ENCODE:
            return
        a = c.attrs
        rank = int(a.rank)
        args = list(c.args)
        base = args[1]
        if _name(base) != "tirx.buffer_data":
            raise LoweringError(f"cannot emulate the tensor map {args[0]}: its base {base} is not a parameter's data")
        ints = [int_value(x) for x in args[2:]]
        if any(x is None for x in ints):
            raise LoweringError(f"cannot emulate the tensor map {args[0]}: symbolic dimensions or strides")
        if int(a.interleave) != 0:
            raise LoweringError(f"cannot emulate the tensor map {args[0]}: interleaved layouts are not emulated")
        dims, rest = ints[:rank], ints[rank:]
        strides, rest = rest[:rank - 1], rest[rank - 1:]
        box, elem = rest[:rank], rest[rank:]
        if any(e != 1 for e in elem):
            raise LoweringError(f"cannot emulate the tensor map {args[0]}: element strides other than 1")
        out[args[0]] = {"param": base.args[0], "rank": rank, "dims": dims, "strides": strides, "box": box,
                        "swizzle": int(a.swizzle), "dtype": str(a.descriptor_dtype)}

    walk(func.body, [(tvm.ir.Call, on_call)])
    return out


def _barrier_slots(calls: list) -> tuple:
    """([(mbarrier buffer, first slot)], slot count) of the buffers ``mbarrier.init`` names."""
    out, n = [], 0
    for c in calls:
        if _name(c) != _INIT:
            continue
        load = _pointee(c.args[0])
        if not isinstance(load, TensorLoad):
            continue
        buf = load.source
        if any(b.same_as(buf) for b, _ in out):
            continue
        size = int_value(buf.shape[0]) if len(buf.shape) == 1 else None
        if size is None:
            raise LoweringError(f"cannot emulate the mbarriers {buf.name}: expected a constant 1-D array")
        out.append((buf, n))
        n += size
    return out, n
