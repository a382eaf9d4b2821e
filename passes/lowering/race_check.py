"""Instrument a lowered kernel so that its CPU run reports data races and out-of-bounds accesses.

The CPU build runs threads one after another (``serialize_threads``), so a missing barrier or two threads
writing one element give no wrong value there. The instrumented kernel keeps, next to every global and
shared buffer, a shadow record per element: the last write, the reads and the atomic updates since, each as
(block, thread, epoch, statement). A thread's epoch counts the barriers it has passed (``tvm_storage_sync``
and named barriers, as the GPU program has them after TVM's own barrier insertion); the serialiser's phases
play no part. An access conflicts with a record when both are in one block and epoch but come from different
threads, or, for global memory, come from different blocks (blocks never synchronise). The first conflicts
go to a log array the Python side turns into a ``RaceError`` (``race_report``).

Accesses as the hardware makes them: a vector access is one access per lane; a load under
``if_then_else`` / ``&&`` / ``||`` only when its condition holds; ``address_of`` is no access; an atomic is
checked against plain accesses but not against other atomics; ``ldmatrix`` and ``wgmma`` read shared memory
for all their threads (``race_collectives``); the cp.async emulation's issue (poison) and landing writes are
writes by the issuing thread, the copy in flight in between. A global buffer no statement writes is only
checked for bounds. Per-thread arrays (``local``), warp shuffles and the emulations' own buffers are not
memory and are not recorded; a shuffle over the whole warp orders that warp's lanes (``race_shuffles``). Shares no code with the lowering's decisions: it reads only the final program.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from tilelayout.lang import atomic_of

from ..ir_utils import int_value, walk
from .emulate_async_copy import PER_THREAD_KEY
from .emulate_tma import TMA_ISSUE_KEY, TMA_ISSUED, TMA_LANDING_KEY, TMA_SEEN, TMA_SLOTS, TMA_THREAD
from .race_fields import SEVERAL
from .race_shuffles import full_warp_check, shuffle_count_init, shuffle_count_step, syncing_shuffle, warp_of

__all__ = ["instrument_races", "Instrumented", "Site", "LOG_ENTRIES", "LOG_FIELDS", "SHADOW_FIELDS", "KINDS"]

#: races kept in the log (the count of all of them is kept too)
LOG_ENTRIES = 16
#: per log entry: kind, site, buffer, element, block, thread, epoch, other site, other block, other thread
LOG_FIELDS = 10
#: per shadow element: (block, thread, epoch, site, warp, shuffle count) of the last write, of the reads, of the
#: atomics
SHADOW_FIELDS = 18
_W, _R, _A = 0, 6, 12

KINDS = {1: "written by two threads", 2: "read by one thread and written by another",
         3: "written after another thread read it", 4: "out-of-bounds read", 5: "out-of-bounds write",
         6: "an atomic update and a plain access by different threads",
         7: "read by one thread while an asynchronous copy (cp.async, or a TMA load before its mbarrier wait) into "
            "it was in flight",
         8: "used by a thread before its mbarrier wait on the phase that completes the TMA load into it"}

_SYNCS = ("tirx.tvm_storage_sync", "tirx.ptx.bar_sync_count")
_LDMATRIX = "tirx.ptx.ldmatrix"
_WGMMA = re.compile(r"tirx\.ptx\.wgmma_\w+_(ss|rs)$")


@dataclass
class Site:
    """One instrumented access: the statement as printed in the lowered program."""
    index: int
    buffer: str
    access: str          # read, write, atomic, collective read
    text: str


@dataclass
class Instrumented:
    """The instrumented kernel and what its log refers to."""
    func: tirx.PrimFunc
    sites: list = field(default_factory=list)
    #: per memory buffer (in log buffer-index order): (name, scope, shape of the buffer as declared)
    buffers: list = field(default_factory=list)
    #: extra parameters in order: one shadow per memory buffer, then the log
    shadow_params: list = field(default_factory=list)
    log_param: object = None


def _op(call) -> str:
    return str(call.op.name) if isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) else ""


def _i32(v):
    return tirx.const(v, "int32") if isinstance(v, int) else (v if str(v.ty) == "int32" else tirx.Cast("int32", v))


def _seq(stmts: list):
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _and(a, b):
    return b if a is None else tirx.And(a, b)


def _text(node, limit: int = 160) -> str:
    if isinstance(node, tirx.BufferStore):
        s = f"{node.buffer.name}[{', '.join(str(i) for i in node.indices)}] = {node.value}"
    else:       # the statement itself: the printer puts the buffers it mentions first
        lines = [l for l in str(node).strip().splitlines() if l.strip() and not l.lstrip().startswith("#")]
        s = lines[-1] if lines else type(node).__name__
    s = " ".join(s.split())
    return s if len(s) <= limit else s[:limit - 3] + "..."


class _Instrumenter:
    """Rewrites statements, adding the shadow check and update before every access of a memory buffer."""

    def __init__(self, memory: list, tid, bid, epoch, log):
        self.memory = memory              # [(buffer, name, scope, element count, shadow)]
        self.tid, self.bid, self.epoch, self.log = tid, bid, epoch, log
        self.sites: list = []
        self.views: list = []             # (declared buffer, buffer whose data it views)
        self.at = tirx.decl_buffer([1], "int32", name="race_at", scope="local")
        self.hit = tirx.decl_buffer([1], "int32", name="race_hit", scope="local")
        self.stored: list = []            # buffers some statement writes (stores, atomics)
        self._written: set | None = None  # their memory-buffer indices
        self.emulating = False            # inside an emulation block (``emulate_async_copy``)
        self.tma = None                   # inside an emulated TMA issue ("issue") or landing ((slot, phase count))
        self.seen = None                  # per-thread phases seen complete per mbarrier (``emulate_tma``)
        self.shfl = None                  # per-thread count of warp-synchronising shuffles (``race_shuffles``)
        self.counts = None                # every thread's count, for the lanes of its warp to compare
        self.full = None                  # whether every lane of the warp executed the last shuffle
        self.nthreads = 0

    # ------------------------------------------------------------------ buffers and sites
    def entry(self, buf):
        root = self.root(buf)
        for k, (d, name, scope, numel, shadow) in enumerate(self.memory):
            if d.same_as(root):
                return k, scope, numel, shadow
        return None

    def root(self, buf):
        """The parameter or allocation whose memory ``buf`` views (``T.decl_buffer(..., data=A.data)``)."""
        for view, base in self.views:
            if view.same_as(buf):
                return self.root(base)
        return buf

    def site(self, buf, access: str, stmt) -> int:
        self.sites.append(Site(len(self.sites), str(buf.name), access, _text(stmt)))
        return len(self.sites) - 1

    # ------------------------------------------------------------------ expressions: the loads they make
    def loads(self, e, cond=None) -> list:
        """[(load, condition under which it executes)] of expression ``e``, inner loads first."""
        if e is None or isinstance(e, (tirx.Var, tirx.IntImm, tirx.FloatImm, tvm.ir.StringImm)):
            return []
        if isinstance(e, TensorLoad):
            out = []
            for i in e.indices:
                out += self.loads(i, cond)
            return out + [(e, cond)]
        if isinstance(e, tvm.ir.Call):
            name = _op(e)
            if name == "tirx.address_of":
                return [x for i in e.args[0].indices for x in self.loads(i, cond)] \
                    if isinstance(e.args[0], TensorLoad) else []
            if name.endswith("if_then_else"):
                c, a, b = e.args
                return self.loads(c, cond) + self.loads(a, _and(cond, c)) + self.loads(b, _and(cond, tirx.Not(c)))
            return [x for a in e.args for x in self.loads(a, cond)]
        if isinstance(e, tirx.And):
            return self.loads(e.a, cond) + self.loads(e.b, _and(cond, e.a))
        if isinstance(e, tirx.Or):
            return self.loads(e.a, cond) + self.loads(e.b, _and(cond, tirx.Not(e.a)))
        if isinstance(e, tirx.Let):
            from tilelayout.layout import substitute
            inner = self.loads(e.body, cond)
            sub = {e.var: e.value}
            return self.loads(e.value, cond) + [(substitute(l, sub), None if c is None else substitute(c, sub))
                                                for l, c in inner]
        out = []
        for attr in ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride"):
            if hasattr(e, attr):
                out += self.loads(getattr(e, attr), cond)
        for attr in ("vectors", "indices"):
            if hasattr(e, attr) and not isinstance(e, TensorLoad):
                for x in getattr(e, attr):
                    out += self.loads(x, cond)
        return out

    def read_checks(self, exprs: list, stmt) -> list:
        out = []
        for e in exprs:
            for load, cond in self.loads(e):
                ent = self.entry(load.source)
                if ent is None:
                    continue
                s = self.access(ent, load.indices, "read", self.site(load.source, "read", stmt))
                out.append(s if cond is None else tirx.IfThenElse(cond, s, None))
        return out

    def landing(self, store) -> bool:
        """A store of the cp.async emulation that lands a copy: inside an emulation block, its value read from a
        shared buffer that is none of the kernel's own (the emulation's in-flight ring)."""
        v = store.value
        return self.emulating and isinstance(v, TensorLoad) and self.entry(v.source) is None \
            and str(v.source.scope()).startswith("shared")

    def written(self, ent) -> bool:
        """Whether any statement writes the buffer of ``ent`` (through any view of it)."""
        if self._written is None:
            self._written = {e[0] for e in (self.entry(b) for b in self.stored) if e is not None}
        return ent[0] in self._written

    def inside(self, ent, index):
        """Every lane of ``index`` lies in the buffer of ``ent``."""
        numel = ent[2]
        if isinstance(index, tirx.Ramp):
            last = index.base + index.stride * (int_value(index.lanes) - 1)
            return tirx.And(tirx.And(index.base >= 0, last >= 0), tirx.And(index.base < numel, last < numel))
        if isinstance(index, tirx.Broadcast):
            index = index.value
        return tirx.And(index >= 0, index < numel)

    def clamped(self, s):
        """Statement ``s`` with every scalar load of a memory buffer kept inside the buffer (an out-of-bounds read
        is reported; the CPU reads element 0 instead of a wild address)."""
        def on_load(e):
            ent = self.entry(e.source)
            if ent is None or len(e.indices) != 1 or isinstance(e.indices[0], (tirx.Ramp, tirx.Broadcast)):
                return e
            i = e.indices[0]
            return tirx.BufferLoad(e.source, [tirx.Select(self.inside(ent, i), i, tirx.const(0, str(i.ty)))])
        from ..ir_utils import mapped
        return mapped(s, [(TensorLoad, on_load)])

    # ------------------------------------------------------------------ the shadow update of one access
    def access(self, ent, indices, kind: str, site: int, thread=None):
        """Statements checking and recording one (possibly vector) access of buffer entry ``ent``."""
        if len(indices) != 1:
            raise tvm.error.TVMError("race check: expected flattened buffers")
        index = indices[0]
        if isinstance(index, tirx.Ramp):
            lanes = int_value(index.lanes)
            lane = tirx.Var("race_lane", "int32")
            return tirx.For(lane, 0, lanes, tirx.ForKind.SERIAL,
                            self.element(ent, index.base + lane * index.stride, kind, site, thread))
        if isinstance(index, tirx.Broadcast):
            index = index.value
        return self.element(ent, index, kind, site, thread)

    def element(self, ent, index, kind: str, site: int, thread=None):
        k, scope, numel, shadow = ent
        glob = not scope.startswith("shared")
        zero = [tirx.const(0, "int32")]
        i = tirx.BufferLoad(self.at, zero)     # the element, held in a per-thread scalar (no new variable)
        tid = self.tid if thread is None else tirx.const(thread, "int32")
        bid, ep = self.bid, tirx.BufferLoad(self.epoch, [tirx.const(0, "int32")])
        # the warp and its count of warp-synchronising shuffles: lanes of one warp whose counts differ have a
        # shuffle between their accesses (a collective access belongs to no single warp)
        warp = warp_of(tid) if thread is None else tirx.const(SEVERAL, "int32")
        count = self.shuffles()

        def f(base, j):
            return tirx.BufferLoad(shadow, [i, tirx.const(base + j, "int32")])

        def conflict(base):
            sb, st, se = f(base, 0), f(base, 1), f(base, 2)
            unordered = tirx.And(tirx.And(se == ep, st != tid), tirx.Or(f(base, 4) != warp, f(base, 5) >= count))
            same = tirx.And(sb == bid, unordered)
            return tirx.And(sb != -1, tirx.Or(sb != bid, unordered)) if glob else same

        def setrec(base, values):
            return [tirx.BufferStore(shadow, _i32(v), [i, tirx.const(base + j, "int32")]) for j, v in enumerate(values)]

        tma = []
        if self.seen is not None and not glob and kind in ("read", "write"):
            # an element a TMA load landed in (record thread TMA_THREAD - (phases * TMA_SLOTS + slot), epoch of the
            # thread whose wait landed it): a thread may use it once it has seen that phase of that barrier
            # complete (its own mbarrier wait), or after a barrier following the landing
            # -- and an element whose TMA load is still in flight (record thread TMA_ISSUED - issuer) may not be
            # used at all, whatever the barriers: the load lands only at the wait completing its phase
            flying = f(_W, 1) <= TMA_ISSUED
            landed = tirx.And(f(_W, 1) <= TMA_THREAD, tirx.Not(flying))
            code = tirx.Select(landed, tirx.const(TMA_THREAD, "int32") - f(_W, 1), tirx.const(0, "int32"))
            slot, phases = tirx.floormod(code, TMA_SLOTS), tirx.floordiv(code, TMA_SLOTS)
            unseen = tirx.BufferLoad(self.seen, [slot]) < phases
            tma = [(tirx.And(flying, f(_W, 0) == bid), 7, _W),
                   (tirx.And(landed, tirx.And(tirx.And(f(_W, 0) == bid, f(_W, 2) == ep), unseen)), 8, _W)]
            plain = conflict

            def conflict(base, plain=plain, tma_record=f(_W, 1) <= TMA_THREAD):
                return tirx.And(tirx.Not(tma_record), plain(base)) if base == _W else plain(base)
        if kind == "read" and glob and not self.written(ent):
            checks, update = [], []      # a global buffer nothing writes: only its bounds can be wrong
        elif kind == "write":
            checks = tma + [(conflict(_W), 1, _W), (tirx.Or(f(_R, 0) == SEVERAL, conflict(_R)) if glob else
                                                    conflict(_R), 3, _R), (conflict(_A), 6, _A)]
            # a TMA issue marks the element in flight (every use until the landing is reported, above); its
            # records name no warp, so no shuffle orders a use against them
            if self.tma == "issue":
                update = setrec(_W, [bid, tirx.const(TMA_ISSUED, "int32") - tid, ep, site,
                                     tirx.const(SEVERAL, "int32"), count])
            else:
                update = setrec(_W, [bid, tid, ep, site, warp, count])
        elif kind == "tma_landing":
            # a TMA load lands at the wait completing its phase; uses while it was in flight were reported then
            slot, phases = self.tma
            checks = []
            update = setrec(_W, [bid, tirx.const(TMA_THREAD, "int32") - (phases * TMA_SLOTS + slot), ep, site,
                                 tirx.const(SEVERAL, "int32"), count])
        elif kind == "atomic":
            checks = [(conflict(_W), 6, _W), (tirx.Or(f(_R, 0) == SEVERAL, conflict(_R)) if glob else conflict(_R),
                       6, _R)]
            update = self.merge(f, setrec, _A, (bid, tid, ep, site, warp, count), glob)
        elif kind == "landing":
            # an async copy lands: it was in flight since its issue (the poison write of this thread, or now),
            # so a read by another thread of this block in any epoch since then raced with it
            mine = tirx.And(f(_W, 0) == bid, f(_W, 1) == tid)
            issued = tirx.Select(mine, f(_W, 2), ep)
            flight = tirx.And(f(_R, 0) == bid, tirx.And(f(_R, 2) >= issued, f(_R, 1) != tid))
            checks = [(tirx.And(tirx.Not(mine), conflict(_W)), 1, _W), (flight, 7, _R)]
            update = setrec(_W, [bid, tid, ep, site, warp, count])
        else:
            checks = tma + [(conflict(_W), 2, _W), (conflict(_A), 6, _A)]
            update = self.merge(f, setrec, _R, (bid, tid, ep, site, warp, count), glob)
        body = []
        if checks:
            # the first conflict, as kind * 16 + record (0: none), logged by one block of code per access
            hit = tirx.const(0, "int32")
            for cond, code, base in reversed(checks):
                hit = tirx.Select(cond, tirx.const(code * 16 + base, "int32"), hit)
            h = tirx.BufferLoad(self.hit, zero)
            rec = tirx.floormod(h, 16)
            other = [tirx.BufferLoad(shadow, [i, rec + j]) for j in (3, 0, 1)]
            body = [tirx.BufferStore(self.hit, hit, zero),
                    tirx.IfThenElse(h != 0, self.log_race(tirx.floordiv(h, 16), site, k, i, tid, ep, *other), None)]
        body += update
        oob = self.log_race(5 if kind in ("write", "landing", "tma_landing") else 4, site, k, i, tid, ep, -1, -1, -1)
        inside = tirx.And(i >= 0, i < numel)
        # a Bind would split the serialiser's phases, and a one-iteration loop upsets TVM's simplifier
        check = tirx.IfThenElse(inside, _seq(body), oob) if body else tirx.IfThenElse(tirx.Not(inside), oob, None)
        return tirx.SeqStmt([tirx.BufferStore(self.at, _i32(index), zero), check])

    def shuffles(self):
        """This thread's count of warp-synchronising shuffles (0 in a kernel without them)."""
        return tirx.const(0, "int32") if self.shfl is None else tirx.BufferLoad(self.shfl, [tirx.const(0, "int32")])

    @staticmethod
    def merge(f, setrec, base, record: tuple, glob: bool) -> list:
        """Fold one more reader (or atomic updater) into the record at ``base``: several threads, the warp while
        they all share one, and the highest shuffle count (a later access is ordered after all of them only if
        its count is higher)."""
        bid, tid, ep, site, warp, count = record
        sb, st, se = f(base, 0), f(base, 1), f(base, 2)
        fresh = _seq(setrec(base, list(record)))
        more = tirx.IfThenElse(st != tid, _seq(setrec(base + 1, [SEVERAL]) + setrec(base + 4, [
            tirx.Select(f(base, 4) == warp, warp, tirx.const(SEVERAL, "int32")),
            tirx.Max(f(base, 5), count)])), fresh)
        same_block = tirx.IfThenElse(se != ep, fresh, more)
        if glob:
            # a record of another block (or of several blocks) stays "several blocks"
            return [tirx.IfThenElse(sb == -1, fresh, tirx.IfThenElse(
                sb == bid, same_block, _seq(setrec(base, [SEVERAL]))))]
        # shared memory: a record left by another block is stale (each block has its own shared memory)
        return [tirx.IfThenElse(sb != bid, fresh, same_block)]

    def log_race(self, code: int, site: int, k: int, i, tid, ep, osite, oblock, othread):
        zero = [tirx.const(0, "int32")]
        n = tirx.BufferLoad(self.log, zero)
        values = [code, site, k, i, self.bid, tid, ep, osite, oblock, othread]
        stores = [tirx.BufferStore(self.log, _i32(v), [1 + n * LOG_FIELDS + j]) for j, v in enumerate(values)]
        return tirx.SeqStmt([tirx.IfThenElse(n < LOG_ENTRIES, _seq(stores), None),
                             tirx.BufferStore(self.log, n + 1, zero)])

    # ------------------------------------------------------------------ statements
    def stmts(self, s) -> list:
        """``s`` instrumented, as a list of statements (a Bind's variable stays in scope for its followers)."""
        if isinstance(s, tirx.SeqStmt):
            return [x for c in s.seq for x in self.stmts(c)]
        if isinstance(s, tirx.BufferStore):
            s0, s = s, self.clamped(s)
            pre = self.read_checks([s0.value] + list(s0.indices), s0)
            if self.shfl is not None and syncing_shuffle(s0.value, self.nthreads):
                # the shuffle orders this warp's reads above before its accesses from here on
                pre += shuffle_count_step(self.shfl, self.counts, self.tid)
                after = full_warp_check(self.shfl, self.counts, self.full, self.tid, self.nthreads)
            else:
                after = []
            ent = self.entry(s.buffer)
            if ent is None:
                return pre + [s] + after
            kind = "landing" if self.landing(s0) else "write"
            if kind == "landing" and isinstance(self.tma, tuple):
                kind = "tma_landing"
            site = self.site(s.buffer, kind, s0)
            if self.tma is not None:    # the TMA emulation's statements: name the load they stand for
                self.sites[site].text = (f"TMA load into {s.buffer.name}, landing (at the mbarrier wait completing "
                                         f"its phase)" if kind == "tma_landing" else f"TMA load into {s.buffer.name}, issued")
            elif self.emulating:      # the emulation's own statements: name the copy they stand for
                self.sites[site].text = (f"cp.async into {s.buffer.name}, landing (after its wait_group, at a barrier)"
                                         if kind == "landing" else f"cp.async into {s.buffer.name}, issued")
            check = self.access(ent, s0.indices, kind, site)
            # an out-of-bounds store is reported and not made (it would corrupt the CPU process)
            store = tirx.IfThenElse(self.inside(ent, s0.indices[0]), s, None)
            # a shuffle's own store is recorded once its count is settled (a shuffle part of the warp skipped
            # is taken back first)
            return pre + [store] + after + [check] if after else pre + [check, store]
        if isinstance(s, tirx.Evaluate):
            return self.evaluate(s)
        if isinstance(s, tirx.For):
            pre = self.read_checks([s.min, s.extent], s)
            # unrolled and vector loops run as serial ones (the same iterations in the same order): unrolled,
            # the shadow updates of their bodies would multiply the code LLVM has to build
            kind = tirx.ForKind.SERIAL if s.kind in (tirx.ForKind.UNROLLED, tirx.ForKind.VECTORIZED) else s.kind
            return pre + [tirx.For(s.loop_var, s.min, s.extent, kind, self.block(s.body), s.thread_binding,
                                   s.annotations, s.step)]
        if isinstance(s, tirx.IfThenElse):
            pre = self.read_checks([s.condition], s)
            other = self.block(s.else_case) if s.else_case is not None else None
            return pre + [tirx.IfThenElse(s.condition, self.block(s.then_case), other)]
        if isinstance(s, tirx.AttrStmt):
            outer, self.emulating = self.emulating, self.emulating or s.attr_key == PER_THREAD_KEY
            tma = self.tma
            if s.attr_key == TMA_ISSUE_KEY:
                self.tma = "issue"
            elif s.attr_key == TMA_LANDING_KEY:
                self.tma = (s.node, s.value)
            body = self.block(s.body)
            self.emulating, self.tma = outer, tma
            return [tirx.AttrStmt(s.node, s.attr_key, s.value, body)]
        if isinstance(s, tirx.Bind):
            return self.read_checks([s.value], s) + [s]
        if isinstance(s, tirx.AssertStmt):
            return self.read_checks([s.condition], s) + [s]
        if isinstance(s, tirx.While):
            return [tirx.While(s.condition, self.block(s.body))]
        return [s]

    def block(self, s):
        out = self.stmts(s)
        return out[0] if len(out) == 1 else tirx.SeqStmt(out)

    def evaluate(self, s) -> list:
        call = s.value
        name = _op(call)
        one = [tirx.const(0, "int32")]
        if name in _SYNCS:       # the thread passes a barrier: its next accesses are in a new epoch
            return [s, tirx.BufferStore(self.epoch, tirx.BufferLoad(self.epoch, one) + 1, one)]
        at = atomic_of(call)
        if at is not None:
            pre = self.read_checks([at.value] + list(at.target.indices), s)
            ent = self.entry(at.target.source)
            if ent is None:
                return pre + [s]
            return pre + [self.access(ent, at.target.indices, "atomic", self.site(at.target.source, "atomic", s)), s]
        if name in (_LDMATRIX, "tirx.ptx.stmatrix") or _WGMMA.match(name) or name == "tirx.ptx.tcgen05_mma_ss":
            from .race_collectives import collective_reads
            return collective_reads(self, call, s) + [s]
        if not isinstance(call, tvm.ir.Call):
            return [s]
        return self.read_checks(list(call.args), s) + [s]


def _visit(node, fn) -> None:
    """Call ``fn`` on every statement of the kinds it looks at (launch attributes, allocations) under ``node``."""
    walk(node, [((tirx.AttrStmt, tirx.AllocBuffer), fn)])


def _views(func) -> list:
    """(buffer, viewed buffer) of every ``DeclBuffer`` over another buffer's data."""
    out = []

    def on_decl(d):
        data = d.data
        if isinstance(data, tvm.ir.Call) and _op(data) == "tirx.buffer_data" and data.args:
            out.append((d.buffer, data.args[0]))
    walk(func.body, [(tirx.DeclBuffer, on_decl)])
    return out


def _stored(func) -> list:
    """Buffers a statement of ``func`` writes: stores and atomic targets."""
    out = []

    def on_store(st):
        out.append(st.buffer)

    def on_call(c):
        at = atomic_of(c)
        if at is not None:
            out.append(at.target.source)
    walk(func.body, [(tirx.BufferStore, on_store), (tvm.ir.Call, on_call)])
    return out


def _launch_ids(func):
    """(flat thread id, flat block id, innermost launch attr) from the launch attributes."""
    threads, blocks, last = {}, {}, []

    def visit(s):
        if isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent" and isinstance(s.node, tirx.IterVar):
            tag = str(s.node.thread_tag)
            (threads if tag.startswith("threadIdx") else blocks)[tag[-1]] = (s.node.var, s.value)
            last.append(s)

    _visit(func.body, visit)

    def flat(dims):
        out, scale = tirx.const(0, "int32"), tirx.const(1, "int32")
        for axis in "xyz":
            if axis in dims:
                v, ext = dims[axis]
                out = out + _i32(v) * scale
                scale = scale * _i32(ext)
        return out

    return flat(threads), flat(blocks), (last[0] if last else None)


def instrument_races(func, memory_buffers: list) -> Instrumented:
    """``func`` (flattened, barriers as the GPU has them, cp.async emulated) with race shadows; only accesses
    of ``memory_buffers`` (the kernel's own global and shared buffers) are recorded."""
    tid, bid, _ = _launch_ids(func)
    memory, buffers, params = [], [], []
    for k, buf in enumerate(memory_buffers):
        scope = str(buf.scope()) or "global"
        numel = tirx.const(1, "int32")
        for s in buf.shape:
            numel = numel * _i32(s)
        n = tirx.Var(f"race_n{k}", "int32")
        shadow = tirx.decl_buffer([n, SHADOW_FIELDS], "int32", name=f"race_shadow_{buf.name}")
        memory.append((buf, str(buf.name), scope, numel, shadow))
        buffers.append((str(buf.name), scope, [int_value(s) if int_value(s) is not None else str(s) for s in buf.shape]))
        params.append(shadow)
    log = tirx.decl_buffer([1 + LOG_ENTRIES * LOG_FIELDS], "int32", name="race_log")
    epoch = tirx.decl_buffer([1], "int32", name="race_epoch", scope="local")
    ins = _Instrumenter(memory, tid, bid, epoch, log)
    ins.views = _views(func)
    ins.stored = _stored(func)
    _visit(func.body, lambda n: setattr(ins, "seen", n.buffer) if isinstance(n, tirx.AllocBuffer)
           and str(n.buffer.name) == TMA_SEEN else None)
    ins.nthreads = _thread_count(func)
    init = []
    if ins.nthreads and syncing_shuffle(func.body, ins.nthreads):
        ins.shfl = tirx.decl_buffer([1], "int32", name="race_shfl", scope="local")
        ins.counts = tirx.decl_buffer([ins.nthreads], "int32", name="race_warp_counts", scope="shared")
        ins.full = tirx.decl_buffer([1], "int32", name="race_full_warp", scope="local")
        init = [tirx.AllocBuffer(ins.shfl), tirx.AllocBuffer(ins.counts), tirx.AllocBuffer(ins.full)] + \
            shuffle_count_init(ins.shfl, ins.counts, tid)
    body = ins.block(func.body)
    body = _inside_launch(body, [tirx.AllocBuffer(epoch), tirx.AllocBuffer(ins.at), tirx.AllocBuffer(ins.hit),
                                 tirx.BufferStore(epoch, tirx.const(0, "int32"), [tirx.const(0, "int32")])] + init)
    out = tirx.PrimFunc(list(func.params) + params + [log], body, func.ret_type, func.attrs)
    return Instrumented(out, ins.sites, buffers, params, log)


def _thread_count(func) -> int:
    """Threads per block, from the launch attributes (1 where they are not constants: no shuffle is then
    taken as synchronising more than its own lane)."""
    n = 1
    def visit(s):
        nonlocal n
        if isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent" and isinstance(s.node, tirx.IterVar) \
                and str(s.node.thread_tag).startswith("threadIdx"):
            ext = int_value(s.value)
            n = n * ext if ext is not None and n else 0
    _visit(func.body, visit)
    return n


def _inside_launch(body, init: list):
    """``init`` as the first statements under the innermost launch attribute (where every id is bound)."""
    def go(s):
        if isinstance(s, tirx.AttrStmt):
            inner = go(s.body) if _has_launch(s.body) else None
            if s.attr_key == "thread_extent" and inner is None:
                return tirx.AttrStmt(s.node, s.attr_key, s.value, tirx.SeqStmt(init + [s.body]))
            return tirx.AttrStmt(s.node, s.attr_key, s.value, inner if inner is not None else s.body)
        if isinstance(s, tirx.SeqStmt):
            return tirx.SeqStmt([go(c) if _has_launch(c) else c for c in s.seq])
        return s
    if not _has_launch(body):
        return tirx.SeqStmt(init + [body])
    return go(body)


def _has_launch(s) -> bool:
    hits = []
    _visit(s, lambda n: hits.append(1) if isinstance(n, tirx.AttrStmt)
                                       and n.attr_key == "thread_extent" else None)
    return bool(hits)
