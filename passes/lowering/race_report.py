"""The race-checked CPU build: a lowered kernel instrumented by ``race_check``, run with its shadow arrays,
and its log turned into ``Race`` records and a ``RaceError``.

The kernel checked is the one the GPU runs: after TVM's buffer flattening and index simplification and
after TVM's barrier insertion (``ThreadSync``, which the CUDA build runs), with cp.async emulated.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import tirx

from tilelayout.errors import RaceError

from ..ir_utils import walk
from .cpu_build import _cpu_compile, _name, cpu_index_guard, device_index_rewrites
from .race_check import _visit, KINDS, LOG_ENTRIES, LOG_FIELDS, SEVERAL, SHADOW_FIELDS, instrument_races

__all__ = ["Race", "RaceCheckedKernel", "build_race_checked", "gpu_barriers", "describe_races", "race_llvm",
           "race_program"]


#: LLVM options of the race-checked build: its shadow updates multiply the code LLVM optimises, and the run is
#: short (``maint/race_cost.py`` measures the build against the plain check's)
RACE_LLVM = {"kind": "llvm", "opt-level": 1}
#: a serialised program with more thread loops than this (phases: one per barrier interval, shuffle and
#: exchange) builds at -O0: LLVM's -O1 time grows with the program, and such programs are long lists of short
#: phases that run fast either way (a 31-thread kernel whose reversed-column conversion takes 312 shuffles:
#: 2,357 phases, 46 s to build at -O1, 16 s at -O0; fuzz seed 15003, kernel 37). The golden kernels have at
#: most 339 phases.
RACE_LARGE_PHASES = 1000
RACE_LLVM_LARGE = {"kind": "llvm", "opt-level": 0}
#: TVM passes the race-checked build skips: optimisations whose time grows with the nested conditions of the
#: shadow updates (three times the rest of the build on a pipelined gemm); the code means the same without them.
#: Common-subexpression elimination is skipped too: it moves the value of a protected index's ``Let`` (the one
#: ``cpu_index_guard`` writes) into a binding of its own, after which TVM's intrinsic lowering finds that ``Let``
#: bound to two orderings of one sum and stops (fuzz seed 13008, kernel 24); LLVM eliminates common terms itself
RACE_SKIPPED_PASSES = ("s_tir.HoistIfThenElse", "tirx.RemoveNoOp", "tirx.StmtSimplify", "s_tir.StmtSimplify",
                       "tirx.CommonSubexprElim")


@dataclass(frozen=True)
class Race:
    """One conflicting pair of accesses (or one out-of-bounds access: ``other_*`` are None)."""
    kind: str
    buffer: str
    scope: str
    element: tuple
    statement: str
    block: int
    thread: int
    epoch: int
    other_statement: str | None = None
    other_block: int | None = None
    other_thread: int | None = None

    def describe(self) -> str:
        where = f"{self.scope} buffer {self.buffer}, element {list(self.element)}"
        me = f"{_who(self.thread)} of block {self.block} at `{self.statement}`"
        if self.other_statement is None:
            return f"{self.kind} of {where} by {me}"
        other = f"{_who(self.other_thread)} of block {self.other_block} at `{self.other_statement}`"
        interval = "with no barrier between them" if self.other_block == self.block else "(blocks never synchronise)"
        return f"race on {where}: {self.kind} -- {me}, and {other}, {interval}"


def _who(thread) -> str:
    from .emulate_tma import TMA_ISSUED, TMA_SLOTS, TMA_THREAD
    if thread is not None and thread <= TMA_ISSUED:
        return f"the TMA load issued by thread {TMA_ISSUED - thread}, in flight"
    if thread is not None and thread <= TMA_THREAD:
        code = TMA_THREAD - thread
        return f"the TMA load landing at phase {code // TMA_SLOTS} of mbarrier slot {code % TMA_SLOTS}"
    return "several threads (a collective or multi-thread access)" if thread == SEVERAL else f"thread {thread}"


def gpu_barriers(func) -> tirx.PrimFunc:
    """``func`` with the barriers TVM's CUDA build inserts (``ThreadSync`` for shared memory): the kernel the GPU
    runs has them, so the check must too."""
    from tvm import s_tir
    mod = tvm.IRModule({"main": func})
    mod = tvm.transform.Sequential([tirx.transform.CommonSubexprElim(), s_tir.transform.ThreadSync("shared"),
                                    s_tir.transform.ThreadSync("shared.dyn")])(mod)
    return _inline_common_terms(mod["main"])


def _inline_common_terms(func) -> tirx.PrimFunc:
    """``func`` with the bindings common-subexpression elimination made (``cse_v*``) substituted back: they
    are pure, and the serialised CPU program cannot carry a per-thread binding across a barrier."""
    from tilelayout.layout import substitute
    from ..ir_utils import mutate
    bound: dict = {}

    def note(node):
        if str(node.var.name).startswith("cse_v"):
            bound[node.var] = node.value
    walk(func.body, [((tirx.Bind, tirx.Let), note)])
    if not bound:
        return func
    for _ in range(len(bound)):                 # values may name earlier bindings
        resolved = {v: substitute(e, bound) for v, e in bound.items()}
        if all(resolved[v].same_as(bound[v]) for v in bound):
            break
        bound = resolved

    def is_cse(var) -> bool:
        return any(var.same_as(v) for v in bound)

    def on_seq(node, mutator):
        node = mutator.default_mutate(node)
        if not isinstance(node, tirx.SeqStmt):
            return node
        kept = [c for c in node.seq if not (isinstance(c, tirx.Bind) and is_cse(c.var))]   # a Bind scopes to its SeqStmt
        return tirx.SeqStmt(kept) if len(kept) > 1 else (kept[0] if kept else tirx.Evaluate(0))

    def on_let(node, mutator):
        node = mutator.default_mutate(node)
        return node.body if isinstance(node, tirx.Let) and is_cse(node.var) else node
    body = mutate(func.body, [(tirx.SeqStmt, on_seq), (tirx.Let, on_let)])
    return func.with_body(substitute(body, bound))


def _memory_buffers(func) -> list:
    out = [p for p in func.params if tirx.is_buffer_var(p)]

    def visit(n):
        if isinstance(n, tirx.AllocBuffer):
            scope = str(n.buffer.scope())
            if scope in ("global", "") or scope.startswith("shared"):
                out.append(n.buffer)
    _visit(func.body, visit)
    return out


class RaceCheckedKernel:
    """A lowered kernel compiled for the CPU with race shadows. ``run`` returns the races of one call (the
    arrays are updated in place as by ``CpuKernel``); calling it raises ``RaceError`` when there are any."""

    def __init__(self, kernel, inst, nparams: int, name: str):
        self._kernel, self._inst, self.name = kernel, inst, name
        self.params = kernel.params[:nparams]

    def run(self, *arrays) -> list:
        if len(arrays) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arrays ({', '.join(n for n, _, _ in self.params)}), "
                            f"got {len(arrays)}")
        nparam = len(self.params)
        shadows = []
        for k, (_, _, shape) in enumerate(self._inst.buffers):
            numel = int(np.prod(arrays[k].shape)) if k < nparam else int(np.prod(shape))
            shadows.append(np.full((numel, SHADOW_FIELDS), -1, dtype=np.int32))
        log = np.zeros(1 + LOG_ENTRIES * LOG_FIELDS, dtype=np.int32)
        self._kernel(*arrays, *shadows, log)
        return self._decode(log, arrays)

    def __call__(self, *arrays):
        races = self.run(*arrays)
        if races:
            raise RaceError(describe_races(races, self.total), races)
        return arrays

    def _decode(self, log, arrays) -> list:
        self.total = int(log[0])
        out = []
        for n in range(min(self.total, LOG_ENTRIES)):
            code, site, k, elem, block, thread, epoch, osite, oblock, othread = \
                (int(x) for x in log[1 + n * LOG_FIELDS: 1 + (n + 1) * LOG_FIELDS])
            name, scope, shape = self._inst.buffers[k]
            if k < len(self.params):
                shape = list(arrays[k].shape)
            element = tuple(int(x) for x in np.unravel_index(elem, shape)) \
                if all(isinstance(s, int) for s in shape) and 0 <= elem < int(np.prod(shape)) else (elem,)
            other = self._inst.sites[osite].text if osite >= 0 else None
            out.append(Race(KINDS[code], name, scope, element, self._inst.sites[site].text, block, thread, epoch,
                            other, oblock if osite >= 0 else None, othread if osite >= 0 else None))
        return out


def describe_races(races: list, total: int | None = None) -> str:
    total = len(races) if total is None else total
    head = races[0].describe()
    more = f" ({total} conflicting accesses in all)" if total > 1 else ""
    return head + more


def build_race_checked(lowered, name: str | None = None, tvm_barriers: bool = True) -> RaceCheckedKernel:
    """An already lowered PrimFunc (``lower_func``'s result) as a race-checked CPU kernel. ``tvm_barriers=False``
    checks the barriers as written, without the ones TVM's CUDA build would add (for hand-written kernels)."""
    inst, serial = race_program(lowered, tvm_barriers)
    nparams = sum(1 for p in lowered.params if tirx.is_buffer_var(p))
    name = name or _name(lowered)
    kernel = _cpu_compile(cpu_index_guard(serial), name, race_llvm(serial), RACE_SKIPPED_PASSES)
    return RaceCheckedKernel(kernel, inst, nparams, name)


def race_program(lowered, tvm_barriers: bool = True) -> tuple:
    """(the instrumentation, the serialised program) the race-checked build compiles for ``lowered``."""
    from .emulate_async_copy import emulate_async_copies
    from .emulate_tma import emulate_tma
    from .serialize_threads import serialize_threads
    flat = device_index_rewrites(lowered)
    synced = gpu_barriers(flat) if tvm_barriers else flat
    inst = instrument_races(emulate_tma(emulate_async_copies(synced)), _memory_buffers(synced))
    return inst, serialize_threads(inst.func)


def race_llvm(serial) -> dict:
    """The LLVM options of a serialised, instrumented kernel: ``RACE_LLVM``, or ``RACE_LLVM_LARGE`` above
    ``RACE_LARGE_PHASES`` thread loops."""
    loops = []
    walk(serial.body, [(tirx.For, loops.append)])
    return RACE_LLVM_LARGE if len(loops) > RACE_LARGE_PHASES else RACE_LLVM
