#!/usr/bin/env python3
"""Differential fuzzer: random small TIRx kernels, checked end to end under every cost model.

    python maint/fuzz.py --seed 1 --count 200          generate and check 200 kernels
    python maint/fuzz.py --seed 1 --count 200 --steps 10   longer op chains (default at most 5 ops)
    python maint/fuzz.py --seed 1 --only 17 --show     print (and check) kernel 17 of seed 1 only
    python maint/fuzz.py --seed 1 --only 17 --reduce   shrink kernel 17 keeping its outcome, print it
    python maint/fuzz.py --seed 1 --count 50 --save /tmp/fz   also write every non-OK kernel's text there
    python maint/fuzz.py ... -v                        print every refusal in full (one line each)
    python maint/fuzz.py --seeds 1000-1009 --count 200 -j 2   ten seeds, kernels in two child processes
    python maint/fuzz.py ... --cross-check             also compare the numpy interpreter with the compiled
                                                       sequential semantics (oracle self-check)

Kernel ``k`` of seed ``S`` depends only on ``(S, k)`` (and ``--steps``), so a finding replays with ``--only``.
Each kernel is TVMScript text (parsed with ``tvm.script.from_source``): a random thread count (32..256,
non-powers of two included; tiny and odd ones, 1..65, in 15% of kernels), random 1-D / 2-D fragments (extents that are not multiples of the thread
count, fragments smaller than the thread count), float16/float32, and a chain of ops among copies global
<-> fragment (whole, offset and per-block regions, unit-dim rows, through shared memory, into/out of part
of a fragment), fragment -> fragment copies, fills (whole and partial), sum/max/min reductions over an
axis or all axes (also accumulating), Tx elementwise tile ops and casts, and ``T.parallel`` nests doing
elementwise math with broadcast rows/columns, constant-index, reversed, shifted, strided
(``f[i // 2]``, ``f[2 * i + 1]``), transposed and partial-extent accesses, guarded stores and
``T.if_then_else``, serial inner loops, software-pipelined (``num_stages``) copy loops, fp8 quantisation
(a fragment scaled and cast to e4m3 / e5m2, then stored or decoded for later steps), and ops under ``if fl[k]``
on a local copy of a global mask (block-sparse attention's pattern), and global regions and nest accesses
that run past their buffer (safe memory: a partial last tile, or a row offset read per block from an int32
parameter, which starts regions before the buffer and runs them past it), nests reading at named indices
(``n0 = T.bind(i)``). Steps are drawn by weight (``Gen.STEPS``); the classes that
found silent miscompiles have their own steps: ops under ``if tx < c:`` (and ``else:``), partial visits at an
offset (``f[i + c, j + d]``, read or written), copies into/out of interior boxes of a fragment, reversed
indices in one or both dimensions and diagonals (``f[i, i]``, read or updated), one fragment read at several
index forms in one nest, reductions followed by permuted reads of their result, and in 12% of kernels a
pin through ``tl.annotate_layouts`` (``VALID_PINS``, which must be kept and run correctly, or
``INVALID_PINS``: thread ids out of range or negative, not injective, wrong shape, a plain Layout, an
unknown buffer, two different pins of one buffer, which inference must refuse with a typed error).
The numeric check's own bug classes (``CHECK_CLASSES``, drawn from a stream of their own so that other kernels
keep their text) append a per-thread ``scope="local"`` accumulation in a serial loop, a ``lang.cumsum`` of a
shared tile, a ``num_stages`` loop over fp8 tiles, or launch the block as threadIdx.x/y.
In 6% of kernels (a stream of their own, ``maint/fuzz_races.py``) a racy class instead: parallel
accumulation or a write race into global or shared memory (must be refused by name or reported by the race
check; passing is ``accepted-bad``), or a hand-written lowered kernel (shared exchanges with and without their
barrier, threads sharing a global element, atomics, shifted out-of-bounds stores, warp-shuffle exchanges
with a lane's store after the shuffle) whose race the detector
must report exactly when the index maps say there is one.

Per kernel and cost model: ``tl.infer_layouts``; every fragment layout and every loop layout (user
nests and the element loops of copy/fill/elementwise ops) is checked by exact enumeration (valid: the
packed (coords, rep) -> (slot, thread) map is injective inside the thread range; a loop layout covers its
loop; every thread running an iteration holds what it touches there, and a write reaches every holder);
then ``check_numeric`` runs the lowered kernel on the CPU (after the GPU pipeline's index rewriting)
against the numpy interpreter of the unlowered program (``tilelayout.reference``, no code shared with
the passes). Each kernel is checked in a child process, so a kernel that corrupts memory or hangs is
reported as a crash. Outcomes:

    ok           inference, validation and numbers all fine
    unsupported  a TileLayoutError (clear refusal; the message, prefixed pin:/infer:/lower:, is kept)
    crash        any other exception, TVM failing to compile what the lowering produced (the lowering must
                 refuse by name what TVM cannot build), or the checking process died / timed out (a bug)
    invalid      a layout failed the enumeration checks (a serious bug)
    mismatch     the CPU run disagrees with the reference (a serious bug)
    accepted-bad inference accepted an invalid pin, or a program that indexes out of bounds (a bug)
    oracle       the numpy interpreter refused the kernel or disagreed with the sequential semantics
    generator    the text did not parse (a bug of this script)

Exit status 0 when every kernel is ok or unsupported, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COST_MODELS = ("register-count", "io-aware")
THREADS = (32, 64, 96, 128, 160, 192, 224, 256, 32, 64, 128, 256, 48, 100)
TINY_THREADS = (1, 2, 3, 5, 7, 13, 17, 31, 33, 65)
#: pins: layouts a valid pin may have, and the invalid ones inference must refuse (typed)
VALID_PINS = ("cyclic", "blocked", "replicated")
INVALID_PINS = ("thread-out-of-range", "negative-thread", "not-injective", "wrong-shape", "plain-layout",
                "unknown-buffer", "pinned-twice")
DIMS = (1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 33, 48, 64, 96, 100, 128)
MAX_ELEMS = 4096
#: how far a data-dependent offset (``data_offset``) can move a region: the random int32 inputs
#: (``pipeline.random_inputs``) hold -8 .. 7
DATA_OFFSET_SPAN = 16
#: how ``LoweringError`` begins when TVM's build refused a lowered kernel: a bug, not a refusal by name
TVM_BUILD_FAILED = "TVM could not compile the lowered kernel"
#: outcome kinds, best first; all but ok and unsupported are bugs
KINDS = ("ok", "unsupported", "generator", "oracle", "crash", "invalid", "accepted-bad", "mismatch")
BAD = ("crash", "invalid", "mismatch", "generator", "oracle", "accepted-bad")


# ----------------------------------------------------------------------------------------- generator

@dataclass
class Buf:
    name: str
    shape: tuple
    dtype: str
    scope: str          # "param" | "local.fragment" | "shared"


@dataclass
class Kernel:
    text: str
    threads: int
    notes: list = field(default_factory=list)     # which features the kernel uses
    has_sum: bool = False
    sum_extent: int = 1
    pins: list = field(default_factory=list)      # [(buffer name, kind, shape)] applied with tl.annotate_layouts


def _dtname(dtype: str) -> str:
    return {"float32": "float32", "float16": "float16"}[dtype]


def _const(dtype: str, value: float) -> str:
    return f"T.{_dtname(dtype)}({value!r})"


def _cast(expr: str, src: str, dst: str) -> str:
    return expr if src == dst else f'T.Cast("{dst}", {expr})'


def _nest_lines(shape, body_fn, extents=None) -> list[str]:
    """Lines of a ``T.parallel`` nest over ``shape`` (loop variables i, j, k) whose body ``body_fn(ivars)`` gives."""
    extents = list(extents or shape)
    ivars = ["i", "j", "k"][:len(shape)]
    lines, pad = [], ""
    for v, e in zip(ivars, extents):
        lines.append(f"{pad}for {v} in T.parallel({e}):")
        pad += "    "
    return lines + [pad + stmt for stmt in body_fn(ivars)]


def _region(shape, offsets=None) -> str:
    offsets = offsets or ["0"] * len(shape)
    parts = []
    for o, e in zip(offsets, shape):
        parts.append(f"{o}:{e}" if o == "0" else f"{o}:{o} + {e}")
    return ", ".join(parts)


class Gen:
    """Builds one kernel from a private ``random.Random``; every choice goes through ``self.rng``."""

    def __init__(self, rng: random.Random, max_steps: int = 5, safe: random.Random | None = None):
        self.rng = rng
        #: the safe-memory class draws from a stream of its own, so every other choice (and a kernel that does
        #: not draw the class) stays what earlier runs generated
        self.safe = safe or random.Random(0)
        self.max_steps = max_steps
        self.params: list[Buf] = []
        self.allocs: list[Buf] = []
        self.hidden: list[Buf] = []      # allocations no random step may pick (dtypes the steps do not handle)
        self._dynamic_shared: bool | None = None     # decided at the kernel's first shared tile
        self.body: list[str] = []
        self.defined: set[str] = set()
        self.counter = Counter()
        self.notes: list[str] = []
        self.has_sum = False
        self.sum_extent = 1
        self.pins: list = []
        self.threads = rng.choice(TINY_THREADS) if rng.random() < 0.15 else rng.choice(THREADS)
        self.nblocks = 2 if rng.random() < 0.15 else 1
        self.dtype = rng.choice(("float32", "float32", "float16"))
        self.mixed = rng.random() < 0.15
        m, n = self._dims()
        self.M, self.N = m, n
        self.one_d = rng.random() < 0.25

    # -- shapes and buffers
    def _dims(self):
        while True:
            m, n = self.rng.choice(DIMS), self.rng.choice(DIMS)
            if m * n <= MAX_ELEMS and m * n >= 2:
                return m, n

    def fresh(self, prefix: str) -> str:
        self.counter[prefix] += 1
        return f"{prefix}{self.counter[prefix] - 1}"

    def frag_dtype(self) -> str:
        if self.mixed and self.rng.random() < 0.4:
            return "float32" if self.dtype == "float16" else "float16"
        return self.dtype

    def new_frag(self, shape, dtype=None) -> Buf:
        b = Buf(self.fresh("f"), tuple(shape), dtype or self.frag_dtype(), "local.fragment")
        self.allocs.append(b)
        return b

    def shared_scope(self) -> str:
        """Scope of every shared tile of the kernel: dynamic shared memory (TileLang's ``T.alloc_shared``) in a
        third of the kernels. Bug class: TVM merges dynamic tiles and reused the bytes of tiles that ldmatrix /
        cp.async reach through ``address_of`` (``check`` runs TVM's CUDA pipeline up to that merge)."""
        if self._dynamic_shared is None:
            self._dynamic_shared = self.rng.random() < 0.33
        return "shared.dyn" if self._dynamic_shared else "shared"

    def frags(self, shape=None, defined=True) -> list[Buf]:
        return [b for b in self.allocs if b.scope == "local.fragment" and (shape is None or b.shape == tuple(shape))
                and (not defined or b.name in self.defined)]

    def pick_frag(self, keep: Callable[[Buf], bool]) -> Buf | None:
        """A random defined fragment for which ``keep`` holds (one draw of the rng), None when there is none."""
        cands = [b for b in self.frags() if keep(b)]
        return self.rng.choice(cands) if cands else None

    def main_shape(self):
        return (self.N,) if self.one_d else (self.M, self.N)

    def shapes(self):
        """Fragment shapes this kernel may use: the main one and, for 2-D kernels, its row/column vectors."""
        if self.one_d:
            return [(self.N,)]
        return [(self.M, self.N), (self.M, self.N), (self.M,), (self.N,)]

    def global_region(self, shape, dtype, role: str, offset_ok: bool = False):
        """A new parameter and the region of it that covers ``shape``: whole, offset inside a larger buffer,
        per-block tile (blockIdx offsets) or a row of a 2-D buffer for a 1-D shape."""
        rng = self.rng
        name = self.fresh("A" if role == "in" else "O")
        gshape, offs = list(shape), ["0"] * len(shape)
        kind = rng.random()
        if kind < 0.3:
            for d in range(len(shape)):
                pad = rng.choice((0, 1, 3, 8))
                c = rng.randint(0, pad)
                gshape[d] = shape[d] + pad
                offs[d] = str(c)
            self.notes.append("offset-region")
        region_shape = list(shape)
        if len(shape) == 1 and rng.random() < 0.2:
            rows = rng.choice((2, 3))
            r = rng.randint(0, rows - 1)
            gshape, offs, region_shape = [rows] + gshape, [str(r)] + offs, [1] + region_shape
            self.notes.append("unit-dim-region")
        data = offset_ok and self.safe.random() < 0.04
        if self.nblocks > 1:
            tile = gshape[0]
            # a store at a data-dependent offset: the blocks' tiles lie further apart than the offsets can move
            # them, so no two blocks write one element whatever the offsets (a grouped gemm's groups are disjoint
            # too); with the tiles adjacent, the random offsets made the blocks' stores overlap (a real race)
            if data and role == "out":
                tile += DATA_OFFSET_SPAN
            gshape[0] = tile * self.nblocks
            offs[0] = f"bx * {tile}" if offs[0] == "0" else f"bx * {tile} + {offs[0]}"
        if data:
            offs[0] = f"{self.data_offset()} + {offs[0]}"
        self.past_the_end(gshape, region_shape)
        self.params.append(Buf(name, tuple(gshape), dtype, "param"))
        return name, _region(region_shape, offs)

    def past_the_end(self, gshape: list, extents: list) -> None:
        """Safe-memory class, sometimes: shrink one dimension of a new global buffer so that its region (the last
        block's, with several blocks) runs past its end: a partial tile whose loads read 0 and whose stores are
        dropped (the guards of ``bounds_guards``; the numpy interpreter models them on its own)."""
        if self.safe.random() >= 0.03:
            return
        dims = [d for d in range(len(gshape)) if extents[d] > 1]
        if not dims:
            return
        d = self.safe.choice(dims)
        cut = self.safe.randint(1, extents[d] - 1)
        if gshape[d] - cut >= 1:
            gshape[d] -= cut
            self.notes.append("safe-partial-tile")

    def data_offset(self) -> str:
        """Safe-memory class: a row offset read from an int32 parameter per block (a grouped gemm's
        ``m_start = offsets[g]``); the random inputs hold -8 .. 7, so regions start before and run past the
        buffer."""
        table = self.fresh("G")
        self.params.append(Buf(table, (self.nblocks,), "int32", "param"))
        var = self.fresh("m_start")
        self.body.append(f"{var} = {table}[bx]")
        self.notes.append("safe-data-offset")
        return var

    # -- ops
    def load(self, frag: Buf) -> None:
        self._move(frag, "in")
        self.defined.add(frag.name)

    def store(self, frag: Buf) -> None:
        self._move(frag, "out")

    def _move(self, frag: Buf, way: str) -> None:
        """Copy a global region into ``frag`` (``way`` "in") or ``frag`` out to one ("out"); a quarter of the time
        through a shared tile of the same shape."""
        g, reg = self.global_region(frag.shape, frag.dtype, way, offset_ok=True)
        full = _region(frag.shape)
        src, dst = (f"{g}[{reg}]", f"{frag.name}[{full}]") if way == "in" else (f"{frag.name}[{full}]", f"{g}[{reg}]")
        if self.rng.random() < 0.25:
            s = Buf(self.fresh("s"), frag.shape, frag.dtype, self.shared_scope())
            self.allocs.append(s)
            self.body.append(f"Tx.copy({s.name}[{full}], {src})")
            self.body.append(f"Tx.copy({dst}, {s.name}[{full}])")
            self.notes.append("shared-load" if way == "in" else "shared-store")
        else:
            self.body.append(f"Tx.copy({dst}, {src})")

    def fill(self, frag: Buf) -> None:
        value = self.rng.choice((0.0, 1.0, -2.5, 0.5))
        if frag.name in self.defined and self.rng.random() < 0.3 and frag.shape[-1] > 1:
            k = self.rng.randint(1, frag.shape[-1] - 1)
            shape = list(frag.shape[:-1]) + [k]
            self.body.append(f"Tx.fill({frag.name}[{_region(shape)}], {_const(frag.dtype, value)})")
            self.notes.append("partial-fill")
            return
        self.body.append(f"Tx.fill({frag.name}[{_region(frag.shape)}], {_const(frag.dtype, value)})")
        self.defined.add(frag.name)

    def copy_frag(self, src: Buf) -> None:
        dst = self.rng.choice([b for b in self.frags(src.shape, defined=False) if b is not src and b.dtype == src.dtype]
                              or [self.new_frag(src.shape, src.dtype)])
        full = _region(src.shape)
        self.body.append(f"Tx.copy({dst.name}[{full}], {src.name}[{full}])")
        self.defined.add(dst.name)
        self.notes.append("frag-copy")

    def tile_elementwise(self) -> None:
        """``Tx.add/sub/mul/maximum/minimum(dst, a, b)`` over whole fragments (an operand may be a global
        region or a constant), or ``Tx.cast`` between dtypes."""
        rng = self.rng
        shape = rng.choice(self.shapes())
        full = _region(shape)
        srcs = self.frags(shape)
        if not srcs:
            return self.elementwise()
        a = rng.choice(srcs)
        if self.mixed and rng.random() < 0.4:
            dst = self.new_frag(shape, "float32" if a.dtype == "float16" else "float16")
            self.body.append(f"Tx.cast({dst.name}[{full}], {a.name}[{full}])")
            self.notes.append("tile-cast")
            self.defined.add(dst.name)
            return
        same = [b for b in srcs if b.dtype == a.dtype]
        cands = [b for b in self.frags(shape, defined=False) if b.dtype == a.dtype]
        dst = rng.choice(cands) if cands and rng.random() < 0.6 else self.new_frag(shape, a.dtype)
        kind = rng.random()
        if kind < 0.5:
            other = f"{rng.choice(same).name}[{full}]"
        elif kind < 0.75:
            g, reg = self.global_region(shape, a.dtype, "in")
            other = f"{g}[{reg}]"
        else:
            other = _const(a.dtype, rng.choice((0.5, 2.0, -1.0)))
        name = rng.choice(("add", "sub", "mul", "maximum", "minimum"))
        self.body.append(f"Tx.{name}({dst.name}[{full}], {a.name}[{full}], {other})")
        self.notes.append(f"tile-{name}")
        self.defined.add(dst.name)

    def partial_copy(self) -> None:
        """A copy into or out of the head of a defined fragment (a region smaller than the fragment)."""
        rng = self.rng
        cands = [b for b in self.frags() if b.shape[-1] > 1]
        if not cands:
            return self.elementwise()
        b = rng.choice(cands)
        k = rng.randint(1, b.shape[-1] - 1)
        shape = list(b.shape[:-1]) + [k]
        self.copy_region(b, _region(shape), tuple(shape), "partial-copy")

    def copy_region(self, b: Buf, box: str, extents: tuple, note: str) -> None:
        """A copy of a fresh global region of ``extents`` into ``b[box]`` or of ``b[box]`` out to one, drawn half
        and half (noted ``note``-in / ``note``-out)."""
        if self.rng.random() < 0.5:
            g, reg = self.global_region(extents, b.dtype, "in")
            self.body.append(f"Tx.copy({b.name}[{box}], {g}[{reg}])")
            self.notes.append(f"{note}-in")
        else:
            g, reg = self.global_region(extents, b.dtype, "out")
            self.body.append(f"Tx.copy({g}[{reg}], {b.name}[{box}])")
            self.notes.append(f"{note}-out")

    def reduce(self, src: Buf) -> None:
        rng = self.rng
        if len(src.shape) == 2:
            axes = rng.choice(([1], [1], [0], [0, 1]))
        else:
            axes = [0]
        kept = [e for d, e in enumerate(src.shape) if d not in axes] or [1]
        reducer = rng.choice(("max", "min", "sum")) if src.dtype == "float32" else rng.choice(("max", "min"))
        cands = [b for b in self.frags(tuple(kept), defined=False) if b.dtype == src.dtype and b is not src]
        dst = rng.choice(cands) if cands and rng.random() < 0.5 else self.new_frag(tuple(kept), src.dtype)
        accum = dst.name in self.defined and rng.random() < 0.3
        if reducer == "sum":
            self.has_sum = True
            self.sum_extent = max(self.sum_extent, int(np.prod([src.shape[a] for a in axes])))
        extra = ", accum=True" if accum else ""
        self.body.append(f"Tx.{reducer}({dst.name}[{_region(dst.shape)}], {src.name}[{_region(src.shape)}], "
                         f"axes={axes}{extra})")
        self.defined.add(dst.name)
        self.notes.append(f"reduce-{reducer}{'-accum' if accum else ''}")

    def term(self, shape, dtype: str, ivars: list, written: str | None = None) -> str:
        """One operand of an elementwise expression over a nest with loop variables ``ivars``; the fragment
        ``written`` by the nest is read only at the written index (other reads would race across iterations)."""
        rng = self.rng
        options = []
        for b in self.frags():
            if b.name == written and b.shape != tuple(shape):
                continue
            if b.shape == tuple(shape):
                options += [("frag", b)] * 3
            elif len(shape) == 2 and b.shape == (shape[0],):
                options.append(("row", b))
            elif len(shape) == 2 and b.shape == (shape[1],):
                options.append(("col", b))
            elif len(b.shape) == 1 and b.shape[0] <= 4:
                options.append(("const", b))
            elif len(shape) == 1 and len(b.shape) == 2 and b.shape[1] == shape[0]:
                options.append(("fixed-row", b))
            elif len(shape) == 1 and len(b.shape) == 1 and b.shape[0] == shape[0] + 1:
                options.append(("shifted", b))
        options += [("global", None), ("constant", None)]
        if len(shape) == 2:
            options.append(("global-t", None))
        if len(shape) == 1:
            options += [("reversed", None), ("strided", None)]
        kind, b = rng.choice(options)
        if kind == "frag":
            return _cast(f"{b.name}[{', '.join(ivars)}]", b.dtype, dtype)
        reads = {       # kind -> (note, the index of b it reads; drawn only when that kind was picked)
            "row": ("broadcast-row", lambda: ivars[0]),
            "col": ("broadcast-col", lambda: ivars[1]),
            "const": ("const-index", lambda: rng.randrange(b.shape[0])),
            "fixed-row": ("fixed-row", lambda: f"{rng.randrange(b.shape[0])}, {ivars[0]}"),
            "shifted": ("shifted", lambda: f"{ivars[0]} + 1"),
        }
        if kind in reads:
            note, index = reads[kind]
            self.notes.append(note)
            return _cast(f"{b.name}[{index()}]", b.dtype, dtype)
        if kind == "strided":
            # f[i // 2] (each element read by two iterations), f[2 * i] / f[2 * i + 1] (every other element)
            n = shape[0]
            form = rng.choice(("half", "even", "odd"))
            size = (n + 1) // 2 if form == "half" else 2 * n
            src = self.new_frag((size,), dtype)
            self.load(src)
            self.notes.append(f"strided-{form}")
            index = {"half": f"{ivars[0]} // 2", "even": f"{ivars[0]} * 2", "odd": f"{ivars[0]} * 2 + 1"}[form]
            return f"{src.name}[{index}]"
        if kind == "reversed":
            frags = [b for b in self.frags(shape) if b.name != written]
            if frags:
                b = rng.choice(frags)
                self.notes.append("reversed")
                return _cast(f"{b.name}[{shape[0] - 1} - {ivars[0]}]", b.dtype, dtype)
            kind = "constant"
        if kind == "global":
            return self.global_read(shape, dtype, ivars)
        if kind == "global-t":
            g = self.fresh("A")
            self.params.append(Buf(g, (shape[1], shape[0]), dtype, "param"))
            self.notes.append("transposed-read")
            return f"{g}[{ivars[1]}, {ivars[0]}]"
        return _const(dtype, rng.choice((1.5, 2.0, -0.75, 3.0)))

    def global_read(self, shape, dtype: str, ivars: list) -> str:
        """``A[i + c0, j + c1]`` from a new parameter (per-block tile when there are several blocks)."""
        rng = self.rng
        name = self.fresh("A")
        gshape, idx = [], []
        for d, (e, v) in enumerate(zip(shape, ivars)):
            pad = rng.choice((0, 0, 2))
            off = rng.randint(0, pad)
            tile = e + pad
            base = f"bx * {tile} + " if d == 0 and self.nblocks > 1 else ""
            gshape.append(tile * (self.nblocks if d == 0 else 1))
            idx.append(f"{base}{v}" + (f" + {off}" if off else ""))
        self.past_the_end(gshape, list(shape))
        self.params.append(Buf(name, tuple(gshape), dtype, "param"))
        return f"{name}[{', '.join(idx)}]"

    def global_write(self, shape, dtype: str, ivars: list, transposed: bool) -> str:
        """``O[i, j]`` (or ``O[j, i]``) of a new output parameter, one tile per block."""
        name = self.fresh("O")
        dims, idx = list(shape), list(ivars)
        if transposed:
            dims, idx = dims[::-1], idx[::-1]
        if self.nblocks > 1:
            idx[0] = f"bx * {dims[0]} + {idx[0]}"
            dims[0] *= self.nblocks
        self.past_the_end(dims, list(shape[::-1] if transposed else shape))
        self.params.append(Buf(name, tuple(dims), dtype, "param"))
        return f"{name}[{', '.join(idx)}]"

    def expression(self, shape, dtype: str, ivars: list, written: str | None = None) -> str:
        rng = self.rng
        n = rng.choice((1, 2, 2, 3))
        expr = self.term(shape, dtype, ivars, written)
        for _ in range(n - 1):
            t = self.term(shape, dtype, ivars, written)
            op = rng.choice(("+", "-", "*", "max", "min"))
            expr = f"T.{op}({expr}, {t})" if op in ("max", "min") else f"({expr} {op} {t})"
        return expr

    def nest(self, shape, body_fn, extents=None) -> None:
        self.body.append("\n".join(_nest_lines(shape, body_fn, extents)))

    def elementwise(self) -> None:
        """``dst[i, j] = expr`` over a fragment (new or existing), sometimes also storing to global."""
        rng = self.rng
        shape = rng.choice(self.shapes())
        cands = self.frags(shape, defined=False)
        dst = rng.choice(cands) if cands and rng.random() < 0.5 else self.new_frag(shape)
        also_store = rng.random() < 0.15
        if also_store:
            self.notes.append("nest-writes-frag-and-global")

        def body(ivars):
            idx = ", ".join(ivars)
            stmts = [f"{dst.name}[{idx}] = {self.expression(shape, dst.dtype, ivars, dst.name)}"]
            if also_store:
                stmts.append(f"{self.global_write(shape, dst.dtype, ivars, False)} = {dst.name}[{idx}]")
            return stmts
        self.nest(shape, body)
        self.defined.add(dst.name)

    def transposed_frag(self) -> None:
        """``g[j, i] = f[i, j]`` (a fragment written through a permutation of the loop variables)."""
        if self.one_d or self.M == self.N and self.rng.random() < 0.5:
            return self.elementwise()
        srcs = self.frags((self.M, self.N))
        if not srcs:
            return self.elementwise()
        src = self.rng.choice(srcs)
        dst = self.new_frag((self.N, self.M), src.dtype)
        self.body.append(f"for i in T.parallel({self.M}):\n    for j in T.parallel({self.N}):\n"
                         f"        {dst.name}[j, i] = {src.name}[i, j] * {_const(src.dtype, 2.0)}")
        self.defined.add(dst.name)
        self.notes.append("transposed-frag-write")
        if self.rng.random() < 0.7:
            self.store(dst)

    def guarded_store(self) -> None:
        """A nest storing to global under a condition on its loop variables (some iterations do nothing),
        or choosing its value with ``T.if_then_else``."""
        rng = self.rng
        shape = rng.choice(self.shapes())
        ivars = ["i", "j"][:len(shape)]
        v = rng.randrange(len(shape))
        cut = rng.randint(1, max(1, shape[v] - 1))
        cond = f"{ivars[v]} < {cut}" if rng.random() < 0.5 else f"{ivars[v]} % 2 == 1"
        value = self.expression(shape, self.dtype, ivars)
        target = self.global_write(shape, self.dtype, ivars, False)
        lines, pad = [], ""
        for iv, e in zip(ivars, shape):
            lines.append(f"{pad}for {iv} in T.parallel({e}):")
            pad += "    "
        if rng.random() < 0.5:
            lines += [f"{pad}if {cond}:", f"{pad}    {target} = {value}"]
            self.notes.append("guarded-store")
        else:
            other = self.expression(shape, self.dtype, ivars)
            lines.append(f"{pad}{target} = T.if_then_else({cond}, {value}, {other})")
            self.notes.append("if-then-else")
        self.body.append("\n".join(lines))

    def partial(self) -> None:
        """A loop over only the head of an already defined fragment (#2957 family)."""
        rng = self.rng
        dst = self.pick_frag(lambda b: b.shape[0] > 1)
        if dst is None:
            return self.elementwise()
        k = rng.randint(1, dst.shape[0] - 1)
        extents = [k] + list(dst.shape[1:])
        self.notes.append("partial-loop")

        def body(ivars):
            idx = ", ".join(ivars)
            terms = [t for t in (self._same_shape_read(dst, ivars),) if t]
            expr = terms[0] if terms and rng.random() < 0.6 else _const(dst.dtype, 7.0)
            return [f"{dst.name}[{idx}] = {expr}"]
        self.nest(dst.shape, body, extents)

    def _same_shape_read(self, dst: Buf, ivars) -> str | None:
        cands = self.frags(dst.shape)
        if not cands:
            return None
        b = self.rng.choice(cands)
        return _cast(f"{b.name}[{', '.join(ivars)}]", b.dtype, dst.dtype) + f" + {_const(dst.dtype, 1.0)}"

    def global_store_nest(self) -> None:
        """``O[i, j] = expr`` (or the transposed ``O[j, i]``): a loop that writes no fragment."""
        rng = self.rng
        shape = rng.choice(self.shapes())
        transposed = len(shape) == 2 and rng.random() < 0.5
        if transposed:
            self.notes.append("transposed-store")

        def body(ivars):
            value = self.expression(shape, self.dtype, ivars)
            return [f"{self.global_write(shape, self.dtype, ivars, transposed)} = {value}"]
        self.nest(shape, body)

    def named_index(self) -> None:
        """Indices named before use (``n0 = T.bind(i + c)``; a global read at the names): substituted as if
        written inline. Bug class: named indices hid contiguity (scalar code); the substitution must never change
        what is read. (A name written as ``n0: T.int32 = i`` is a one-element local buffer, which the numpy
        reference shares between parallel iterations; ``tests/test_index_binds.py`` checks that form.)"""
        rng = self.rng
        shape = rng.choice(self.shapes())
        dst = self.new_frag(shape)
        self.notes.append("named-index")

        def body(ivars):
            names = [self.fresh("n") for _ in ivars]
            lines = [f"{n} = T.bind({v})" for n, v in zip(names, ivars)]
            read = self.global_read(shape, dst.dtype, names)
            lines.append(f"{dst.name}[{', '.join(ivars)}] = {read} * {_const(dst.dtype, 2.0)}")
            return lines
        self.nest(shape, body)

    def small_const_frag(self) -> None:
        """A tiny fragment (fewer elements than threads) loaded for constant-index reads."""
        n = self.rng.choice((1, 2, 3, 4))
        b = self.new_frag((n,), self.dtype)
        self.load(b)

    def serial_inner(self) -> None:
        """``for i in T.parallel(M): for j in T.serial(N): f[i, j] = ...`` (a serial loop inside a nest)."""
        if self.one_d:
            return self.elementwise()
        shape = (self.M, self.N)
        srcs = self.frags(shape)
        dst = self.new_frag(shape, self.dtype)
        src = self.rng.choice(srcs) if srcs else None
        read = _cast(f"{src.name}[i, j]", src.dtype, self.dtype) if src else _const(self.dtype, 2.0)
        form = self.rng.random()
        if form < 0.4 or self.N < 2:
            self.body.append(f"for i in T.parallel({self.M}):\n    for j in T.serial({self.N}):\n"
                             f"        {dst.name}[i, j] = {read} * {_const(self.dtype, 2.0)}")
            self.notes.append("serial-inner")
        elif form < 0.7:
            # a running sum along the serial axis (scan): the row must stay in one thread
            self.body.append(f"for i in T.parallel({self.M}):\n    for j in T.serial({self.N}):\n"
                             f"        {dst.name}[i, j] = {read}\n"
                             f"    for j in T.serial(1, {self.N}):\n"
                             f"        {dst.name}[i, j] = {dst.name}[i, j] + {dst.name}[i, j - 1]")
            self.notes.append("serial-scan")
        else:
            # several parallel iterations update one element (TileLang #1374): acc[i, j // g] += ...
            g = self.rng.choice([d for d in (2, 3, 4, 8, 32) if self.N % d == 0] or [1])
            acc = self.new_frag((self.M, self.N // g), self.dtype)
            self.body.append(f"Tx.fill({acc.name}[{_region(acc.shape)}], {_const(self.dtype, 0.0)})")
            self.body.append(f"for i in T.parallel({self.M}):\n    for j in T.parallel({self.N}):\n"
                             f"        {acc.name}[i, j // {g}] = {acc.name}[i, j // {g}] + {read}")
            self.defined.add(acc.name)
            self.notes.append("grouped-accumulation")
            return
        self.defined.add(dst.name)


    def memory_update(self) -> None:
        """A parallel nest storing one global or shared element from several iterations: ``O[i] = O[i] + x[i, j]``
        or ``max``, grouped (``O[i, j // g]``), from a global read or a fragment, into a global output or a shared
        row vector copied out; or a plain write race ``O[i] = x[i, j]``, which inference must refuse
        (``WriteRaceError``). Bug class: 16 threads read, add and store one element at once on a GPU while the
        serialised CPU check sums correctly; the loop must keep every element's iterations in one thread."""
        rng = self.rng
        if self.one_d or self.N < 2:
            return self.elementwise()
        m, n = self.M, self.N
        groups = [g for g in (n, 2, 4, 8) if n % g == 0 and g <= n]
        g = rng.choice(groups)
        cols = n // g
        frags = self.frags((m, n))
        fdt = self.dtype
        if frags and rng.random() < 0.5:
            src = rng.choice(frags)
            term = lambda iv: _cast(f"{src.name}[{iv[0]}, {iv[1]}]", src.dtype, fdt)   # noqa: E731
            self.notes.append("memory-update-fragment-source")
        else:
            term = lambda iv: self.global_read((m, n), fdt, iv)    # noqa: E731
        racy = rng.random() < 0.15
        op = rng.choice(("add", "max"))
        into_shared = not racy and rng.random() < 0.35
        out = self.fresh("O")
        oshape = (m,) if cols == 1 else (m, cols)
        # one output tile per block: blocks never share an element (that race no thread layout can avoid)
        self.params.append(Buf(out, (oshape[0] * self.nblocks,) + oshape[1:], fdt, "param"))
        row = "bx * %d + " % m if self.nblocks > 1 else ""
        col = "" if cols == 1 else ", j // %d" % g
        if into_shared:
            s = Buf(self.fresh("s"), oshape, fdt, self.shared_scope())
            self.allocs.append(s)
            dst = s.name
            init = _const(fdt, 0.0) if op == "add" else _const(fdt, -1e4)
            self.body += ["\n".join(_nest_lines(oshape, lambda iv: [f"{dst}[{', '.join(iv)}] = {init}"]))]
        else:
            dst = out

        def body(iv):
            at = f"{dst}[{'' if into_shared else row}{iv[0]}{col}]"
            if racy:
                return [f"{at} = {term(iv)}"]
            if op == "add":
                return [f"{at} = {at} + {term(iv)}"]
            return [f"{at} = T.max({at}, {term(iv)})"]
        self.nest((m, n), body)
        if into_shared:
            self.body += ["\n".join(_nest_lines(oshape, lambda iv: [f"{out}[{row}{', '.join(iv)}] = {dst}[{', '.join(iv)}]"]))]
        if op == "add" and not racy:
            self.has_sum = True
            self.sum_extent = max(self.sum_extent, g)
        self.notes.append("write-race" if racy else f"memory-update-{op}-{'shared' if into_shared else 'global'}"
                          + ("-grouped" if cols > 1 else ""))

    # -- classes that found silent miscompiles (thread regions, offsets, reversals, permuted reads, pins)
    def _capture(self, fn) -> list:
        """The statements ``fn`` appends, taken out of the body."""
        saved, self.body = self.body, []
        fn()
        out, self.body = self.body, saved
        return out

    def thread_region(self) -> None:
        """``if tx < c:`` (maybe ``else:``) around a few ops: the warp-specialised producer/consumer shape.
        Every branch is reached by some thread, so the ops in it run."""
        rng = self.rng
        if self.threads < 2:
            return self.elementwise()
        c = rng.randint(1, self.threads - 1)
        cond = rng.choice((f"tx < {c}", f"tx >= {c}", f"tx < {c}"))
        ops = (self.region_load, self.elementwise, self.region_store, self.region_reduce)

        def block():
            for _ in range(rng.randint(1, 2)):
                rng.choice(ops)()
        lines = [f"if {cond}:"] + ["    " + l for st in self._capture(block) for l in st.split("\n")]
        if rng.random() < 0.4:
            lines += ["else:"] + ["    " + l for st in self._capture(block) for l in st.split("\n")]
        self.body.append("\n".join(lines))
        self.notes.append("thread-region")

    def region_load(self) -> None:
        b = self.new_frag(self.rng.choice(self.shapes()))
        self.load(b)

    def region_store(self) -> None:
        self.store(self.rng.choice(self.frags()))

    def region_reduce(self) -> None:
        cands = [b for b in self.frags() if b.shape != (1,)]
        return self.reduce(self.rng.choice(cands)) if cands else self.region_load()

    def offset_visit(self) -> None:
        """A nest over part of a defined fragment at an offset: ``f[i + c, j] = A[i, j]`` or ``O[i, j] = f[i + c, j]``."""
        rng = self.rng
        b = self.pick_frag(lambda f: f.shape[0] > 1)
        if b is None:
            return self.elementwise()
        extents, offs = [], []
        for d, e in enumerate(b.shape):
            k = rng.randint(1, e - 1) if e > 1 and (d == 0 or rng.random() < 0.5) else e
            extents.append(k)
            offs.append(rng.randint(0, e - k))
        if extents == list(b.shape):
            return self.elementwise()
        ivars = ["i", "j"][:len(b.shape)]
        idx = ", ".join(f"{v} + {o}" if o else v for v, o in zip(ivars, offs))
        if rng.random() < 0.5:
            value = self.global_read(extents, b.dtype, ivars) if rng.random() < 0.7 else _const(b.dtype, 3.0)
            self.nest(extents, lambda iv: [f"{b.name}[{idx}] = {value}"])
            self.notes.append("offset-write")
        else:
            target = self.global_write(extents, b.dtype, ivars, False)
            self.nest(extents, lambda iv: [f"{target} = {b.name}[{idx}] * {_const(b.dtype, 2.0)}"])
            self.notes.append("offset-read")

    def sub_region_copy(self) -> None:
        """A copy into or out of an interior box of a defined fragment: ``Tx.copy(f[r:r+h, c:c+w], A[...])``."""
        rng = self.rng
        b = self.pick_frag(lambda f: max(f.shape) > 1)
        if b is None:
            return self.partial_copy()
        extents, offs = [], []
        for e in b.shape:
            k = rng.randint(1, e - 1) if e > 1 and rng.random() < 0.7 else e
            extents.append(k)
            offs.append(str(rng.randint(0, e - k)))
        self.copy_region(b, _region(extents, offs), tuple(extents), "sub-region-copy")

    def reversed_read(self) -> None:
        """Reversed indices in one or both dimensions (``f[M - 1 - i, N - 1 - j]``), stored to global or into a
        new fragment; or the diagonal of a square fragment, read (``O[i] = f[i, i]``) or updated in place."""
        rng = self.rng
        if rng.random() < 0.35:
            return self.diagonal()
        cands = self.frags()
        b = rng.choice(cands)
        ivars = ["i", "j"][:len(b.shape)]
        flips = [rng.random() < 0.6 for _ in b.shape]
        if not any(flips):
            flips[-1] = True
        idx = ", ".join(f"{e - 1} - {v}" if f else v for v, e, f in zip(ivars, b.shape, flips))
        if rng.random() < 0.5:
            target = self.global_write(list(b.shape), b.dtype, ivars, False)
            self.nest(b.shape, lambda iv: [f"{target} = {b.name}[{idx}]"])
        else:
            g = self.new_frag(b.shape, b.dtype)
            self.nest(b.shape, lambda iv: [f"{g.name}[{', '.join(iv)}] = {b.name}[{idx}] + {_const(b.dtype, 1.0)}"])
            self.defined.add(g.name)
        self.notes.append("reversed-" + "".join("r" if f else "-" for f in flips))

    def diagonal(self) -> None:
        rng = self.rng
        squares = [b for b in self.frags() if len(b.shape) == 2 and b.shape[0] == b.shape[1] and b.shape[0] > 1]
        if squares:
            b = rng.choice(squares)
        else:
            n = rng.choice((4, 8, 16, 32))
            b = self.new_frag((n, n), self.dtype)
            self.load(b)
        n = b.shape[0]
        if rng.random() < 0.5:
            self.body.append(f"for i in T.parallel({n}):\n    {b.name}[i, i] = {b.name}[i, i] + {_const(b.dtype, 1.0)}")
            self.notes.append("diagonal-update")
        else:
            target = self.global_write([n], b.dtype, ["i"], False)
            self.body.append(f"for i in T.parallel({n}):\n    {target} = {b.name}[i, i]")
            self.notes.append("diagonal-read")

    def multi_index_read(self) -> None:
        """One fragment read at several index forms in one nest: ``f[i, j] + f[M - 1 - i, j] + f[i, 0]``."""
        rng = self.rng
        b = rng.choice(self.frags())
        ivars = ["i", "j"][:len(b.shape)]
        forms = [", ".join(ivars),
                 ", ".join(f"{b.shape[0] - 1} - {v}" if d == 0 else v for d, v in enumerate(ivars)),
                 ", ".join("0" if d == len(ivars) - 1 else v for d, v in enumerate(ivars)),
                 ", ".join(f"({v} + 1) % {e}" if d == 0 else v for d, (v, e) in enumerate(zip(ivars, b.shape)))]
        picked = rng.sample(forms, rng.randint(2, 3))
        expr = " + ".join(f"{b.name}[{f}]" for f in picked)
        target = self.global_write(list(b.shape), b.dtype, ivars, False)
        self.nest(b.shape, lambda iv: [f"{target} = {expr}"])
        self.notes.append("multi-index-read")

    def reduce_permuted(self) -> None:
        """A row reduction then reads of its result at permuted indices: ``g[i] = max(r[M - 1 - i], r[i])``,
        ``O[i, j] = f[i, j] - r[(i + k) % M]``."""
        rng = self.rng
        srcs = [b for b in self.frags() if len(b.shape) == 2]
        if not srcs:
            return self.reversed_read()
        f = rng.choice(srcs)
        m = f.shape[0]
        r = self.new_frag((m,), f.dtype)
        reducer = rng.choice(("max", "min"))
        self.body.append(f"Tx.{reducer}({r.name}[0:{m}], {f.name}[{_region(f.shape)}], axes=[1])")
        self.defined.add(r.name)
        k = rng.randint(1, max(1, m - 1))
        form = rng.choice((f"{m - 1} - i", f"(i + {k}) % {m}", f"{m - 1} - i"))
        if rng.random() < 0.5:
            g = self.new_frag((m,), f.dtype)
            self.body.append(f"for i in T.parallel({m}):\n    {g.name}[i] = T.max({r.name}[{form}], {r.name}[i])")
            self.defined.add(g.name)
            self.store(g)
        else:
            target = self.global_write(list(f.shape), f.dtype, ["i", "j"], False)
            self.nest(f.shape, lambda iv: [f"{target} = {f.name}[i, j] - {r.name}[{form}]"])
        self.notes.append("reduce-permuted-read")

    def pin(self) -> None:
        """A layout pinned on a fragment with ``tl.annotate_layouts``: valid (inference must keep it and the
        numbers must match) or invalid (inference must refuse it with a typed error)."""
        rng = self.rng
        cands = [b for b in self.allocs if b.scope == "local.fragment"]
        b = rng.choice(cands)
        kind = rng.choice(VALID_PINS * 2 + INVALID_PINS)
        if kind in ("not-injective", "pinned-twice") and int(np.prod(b.shape)) < 2:
            kind = "cyclic"
        self.pins.append((b.name, kind, tuple(b.shape)))
        self.notes.append(f"pin-{kind}")

    # -- whole kernel
    def build(self, extra: str | None = None, extra_rng: random.Random | None = None) -> Kernel:
        """The kernel; ``extra`` (a ``CHECK_CLASSES`` step) is appended after its stores, its choices drawn from
        ``extra_rng``, so that the rest of the kernel is the one ``self.rng`` alone gives."""
        kernel = self._build()
        if extra is None:
            return kernel
        self.rng = extra_rng
        getattr(self, extra.replace("-", "_"))()
        return Kernel(self.render(), self.threads, sorted(set(self.notes)), self.has_sum, self.sum_extent, self.pins)

    def _build(self) -> Kernel:
        rng = self.rng
        first = self.new_frag(self.main_shape(), self.dtype)
        self.load(first) if rng.random() < 0.85 else self.fill(first)
        steps = rng.randint(1, self.max_steps)
        for _ in range(steps):
            step = _pick(rng, self.STEPS)
            getattr(self, step)()
        if rng.random() < 0.12:
            self.pin()
        outs = [b for b in self.frags() if rng.random() < 0.7] or [self.frags()[-1]]
        for b in outs:
            self.store(b)
        return Kernel(self.render(), self.threads, sorted(set(self.notes)), self.has_sum, self.sum_extent, self.pins)

    # step name -> weight (relative); each is a method taking no argument
    STEPS = {"elementwise": 20, "step_reduce": 10, "step_load": 8, "global_store_nest": 6, "small_const_frag": 4,
             "partial": 6, "step_fill": 4, "step_copy_frag": 3, "serial_inner": 1, "partial_copy": 3,
             "tile_elementwise": 3, "transposed_frag": 2, "guarded_store": 2, "step_store": 2,
             "thread_region": 5, "offset_visit": 5, "sub_region_copy": 4, "reversed_read": 5,
             "multi_index_read": 3, "reduce_permuted": 4, "gemm": 3, "pipelined": 3, "cumsum": 3, "quantize": 3,
             "flagged": 3, "unpack_nibbles": 3, "memory_update": 4, "named_index": 3}

    #: gemm operand dtype -> (weight, accumulator, K choices); fp8 (e4m3 / e5m2 codes through byte storage and
    #: bit decoding on the CPU), tf32 (f32 operands read truncated) and f64 (m8n8k4) exercise the bug classes of
    #: the CPU fp8 path and of float64 taken for float6
    GEMM_DTYPES = {"float16": (6, "float32", (16, 32)), "float8_e4m3fn": (1, "float32", (32, 64)),
                   "float8_e5m2": (1, "float32", (32, 64)), "float32": (1, "float32", (8, 16, 32)),
                   "float64": (1, "float64", (4, 8, 16))}

    def gemm(self) -> None:
        """A tensor-core gemm (shared operands: fp16 mostly, fp8, f32 as tf32 or f64; f32/f64 accumulator),
        sometimes chained attention-style (fp16): the accumulator cast to an fp16 fragment that is the register A
        operand of a second gemm, or a register A loaded from global. Random warp policy; shapes the instruction
        fits (others are refused cleanly, which the fuzzer accepts as a refusal). Bug classes: chained gemms
        planned apart (instruction or warp partition mismatch between S, P and O); fp8 codes mis-decoded or
        mis-stored on the CPU; float64 buffers mistaken for a narrow float."""
        rng = self.rng
        if self.threads % 32 or self.threads > 256:
            return self.elementwise()
        warps = self.threads // 32
        dt = _pick(rng, {d: w for d, (w, _, _) in self.GEMM_DTYPES.items()})
        _, acc_dt, ks = self.GEMM_DTYPES[dt]
        m = 16 * warps * rng.choice((1, 1, 2)) if rng.random() < 0.8 else rng.choice((16, 32, 64))
        n, k = rng.choice((8, 16, 32, 64)), rng.choice(ks)
        policy = rng.choice((None, None, "full_row", "square", "full_col"))
        kw = f', warp_policy="{policy}"' if policy else ""
        chained, reg_a = rng.random() < 0.5 and dt == "float16", rng.random() < 0.25 and dt != "float64"
        if reg_a and dt == "float16":
            a = self.new_frag((m, k), "float16")
            self.load(a)
        elif reg_a:     # kept out of the other steps, which do arithmetic in the kernel's own dtypes only
            a = Buf(self.fresh("r"), (m, k), dt, "local.fragment")
            self.hidden.append(a)
            g, reg = self.global_region((m, k), dt, "in")
            self.body.append(f"Tx.copy({a.name}[{_region(a.shape)}], {g}[{reg}])")
        else:
            a = Buf(self.fresh("s"), (m, k), dt, self.shared_scope())
            self.allocs.append(a)
            g, reg = self.global_region((m, k), dt, "in")
            self.body.append(f"Tx.copy({a.name}[{_region(a.shape)}], {g}[{reg}])")
        trans_b = rng.random() < 0.5
        b = Buf(self.fresh("s"), (n, k) if trans_b else (k, n), dt, self.shared_scope())
        self.allocs.append(b)
        g, reg = self.global_region(b.shape, dt, "in")
        self.body.append(f"Tx.copy({b.name}[{_region(b.shape)}], {g}[{reg}])")
        if dt != "float16":
            self.notes.append(f"gemm-{dt}")
        if acc_dt != "float32":       # a f64 accumulator stays out of the other steps too
            acc = Buf(self.fresh("r"), (m, n), acc_dt, "local.fragment")
            self.hidden.append(acc)
            self.body.append(f"Tx.gemm({acc.name}[{_region(acc.shape)}], {a.name}[{_region(a.shape)}], "
                             f"{b.name}[{_region(b.shape)}], {acc.name}[{_region(acc.shape)}], False, {trans_b}, "
                             f"T.float64(1), T.float64(0){kw})")
            g, reg = self.global_region(acc.shape, acc_dt, "out")
            self.body.append(f"Tx.copy({g}[{reg}], {acc.name}[{_region(acc.shape)}])")
            self.has_sum = True
            self.sum_extent = max(self.sum_extent, k)
            return
        acc = self.new_frag((m, n), "float32")
        self.body.append(f"Tx.gemm({acc.name}[{_region(acc.shape)}], {a.name}[{_region(a.shape)}], "
                         f"{b.name}[{_region(b.shape)}], {acc.name}[{_region(acc.shape)}], False, {trans_b}, "
                         f"T.float32(1), T.float32(0){kw})")
        self.defined.add(acc.name)
        self.has_sum = True
        self.sum_extent = max(self.sum_extent, k)
        self.notes.append("gemm-register-a" if reg_a else "gemm")
        if chained and n % 16 == 0:
            p = self.new_frag((m, n), "float16")
            self.body.append(f"Tx.copy({p.name}[{_region(p.shape)}], {acc.name}[{_region(acc.shape)}])")
            d = rng.choice((8, 16, 32))
            c = Buf(self.fresh("s"), (n, d), "float16", self.shared_scope())
            self.allocs.append(c)
            g, reg = self.global_region(c.shape, "float16", "in")
            self.body.append(f"Tx.copy({c.name}[{_region(c.shape)}], {g}[{reg}])")
            o = self.new_frag((m, d), "float32")
            self.body.append(f"Tx.gemm({o.name}[{_region(o.shape)}], {p.name}[{_region(p.shape)}], "
                             f"{c.name}[{_region(c.shape)}], {o.name}[{_region(o.shape)}], False, False, "
                             f"T.float32(1), T.float32(0){kw})")
            self.defined.update((p.name, o.name))
            self.sum_extent = max(self.sum_extent, n)
            self.notes.append("gemm-chain")
        # a staged fp16 epilogue (TileLang's examples/gemm): on sm_90+ stored by stmatrix. Whether to stage is
        # drawn from its own stream, so an earlier seed's kernel that does not stage is drawn as before. Bug
        # classes: stmatrix lanes, register halves and the barriers around it (``lower_stmatrix``).
        staged = random.Random(f"tilelayout-fuzz-staged:{m}:{n}:{k}:{dt}:{len(self.body)}:{self.threads}")
        if staged.random() < 0.3:
            cs = Buf(self.fresh("s"), (m, n), "float16", self.shared_scope())
            self.allocs.append(cs)
            self.body.append(f"Tx.copy({cs.name}[{_region(cs.shape)}], {acc.name}[{_region(acc.shape)}])")
            g, reg = self.global_region(cs.shape, "float16", "out")
            self.body.append(f"Tx.copy({g}[{reg}], {cs.name}[{_region(cs.shape)}])")
            self.notes.append("gemm-staged-fp16")

    def flagged(self) -> None:
        """Block-sparse style: a local array copied from a global int mask (``fl[v] = M[v]``, block-uniform) and
        a fragment accumulated under ``if fl[k] > 0`` in a serial loop, sometimes through shared memory (barriers
        inside the branch); in one kernel of ten the copy adds the thread index, which must be refused by name.
        Bug classes: conditions on per-thread data in the front end (``uniform_locals``) and an ``if`` around
        barriers on per-thread values in the CPU serialisation."""
        rng = self.rng
        srcs = self.frags()
        if not srcs:
            return self.elementwise()
        src = rng.choice(srcs)
        shape, full = src.shape, _region(src.shape)
        n = rng.choice((2, 3, 4))
        mask = Buf(self.fresh("M"), (n,), "int32", "param")
        self.params.append(mask)
        flags = Buf(self.fresh("fl"), (n,), "int32", "local")
        self.hidden.append(flags)          # no other step reads or writes it
        acc = self.new_frag(shape, src.dtype)
        varying = rng.random() < 0.1
        lines = [f"for v in T.serial({n}):", f"    {flags.name}[v] = {mask.name}[v]{' + tx' if varying else ''}",
                 f"Tx.fill({acc.name}[{full}], {_const(src.dtype, 0.0)})",
                 f"for k in T.serial({n}):", f"    if {flags.name}[k] > 0:"]
        read = src
        if rng.random() < 0.5:
            read = Buf(self.fresh("s"), shape, src.dtype, self.shared_scope())
            self.allocs.append(read)
            lines.append(f"        Tx.copy({read.name}[{full}], {src.name}[{full}])")
            self.notes.append("flag-shared")

        def accumulate(ivars):
            idx = ", ".join(ivars)
            return [f'{acc.name}[{idx}] = {acc.name}[{idx}] + {read.name}[{idx}] * T.Cast("{src.dtype}", k + 1)']
        lines += ["        " + line for line in _nest_lines(shape, accumulate)]
        self.body.append("\n".join(lines))
        self.defined.add(acc.name)
        self.notes.append("flag-varying" if varying else "flag-uniform")
        if rng.random() < 0.6:
            self.store(acc)

    def quantize(self) -> None:
        """fp8 quantisation as per-token cast kernels write it: a fragment loaded fresh from global (exact values:
        one fp8 rounding turns any earlier rounding difference into a 12-25% error) is scaled by a power of two
        (exact in float16 and float32 alike) and cast to an fp8 fragment, in a parallel nest or by ``Tx.cast``;
        large scales push elements past the format's largest finite value. The fp8 fragment is then stored to
        global, or decoded into a fragment of the kernel's dtype that later steps use. Bug classes: a float ->
        fp8 conversion into an allocated fp8 fragment that the CPU build did not compile, and overflow read
        as ml_dtypes' NaN / infinity where CUDA saturates to the largest finite value."""
        rng = self.rng
        shape = rng.choice(self.shapes())
        a = self.new_frag(shape)
        self.load(a)
        fp8 = rng.choice(("float8_e4m3fn", "float8_e5m2"))
        q = Buf(self.fresh("q"), a.shape, fp8, "local.fragment")
        self.hidden.append(q)          # no other step does arithmetic in fp8
        full = _region(shape)
        scale = rng.choice((1.0, 1.0, 16.0, 512.0, 4096.0))
        if scale == 1.0 and rng.random() < 0.5:
            self.body.append(f"Tx.cast({q.name}[{full}], {a.name}[{full}])")
            self.notes.append("fp8-tile-cast")
        else:
            self.nest(shape, lambda iv: [f'{q.name}[{", ".join(iv)}] = T.Cast("{fp8}", '
                                         f'{a.name}[{", ".join(iv)}] * {_const(a.dtype, scale)})'])
            self.notes.append("fp8-quantize")
        if rng.random() < 0.3:
            g, reg = self.global_region(shape, fp8, "out")
            self.body.append(f"Tx.copy({g}[{reg}], {q.name}[{full}])")
            self.notes.append("fp8-store")
            return
        r = self.new_frag(shape, a.dtype)
        self.nest(shape, lambda iv: [f'{r.name}[{", ".join(iv)}] = T.Cast("{a.dtype}", {q.name}[{", ".join(iv)}])'])
        self.defined.add(r.name)

    def unpack_nibbles(self) -> None:
        """int4 values packed two per int8 byte (TileLang's dequantising gemms): a packed fragment loaded from
        global, half as wide as the unpacked one, and a parallel nest writing element ``j`` from nibble ``j % 2``
        of byte ``j // 2``, unsigned (``(b >> 4 * (j % 2)) & 15``) or sign-extended (``(b << 4 * (1 - j % 2)) >>
        4``, whose ``<<`` wraps the byte), cast to a float fragment that later steps use. Bug classes: two
        iterations reading one element (the packed fragment's layout comes from the nest through ``j // 2``),
        shifts and masks of signed bytes lowered for the CPU and CUDA and judged with C's semantics."""
        rng = self.rng
        shape = rng.choice([s for s in self.shapes() if s[-1] % 2 == 0] or [None])
        if shape is None:
            return
        packed = Buf(self.fresh("p"), tuple(shape[:-1]) + (shape[-1] // 2,), "int8", "local.fragment")
        self.hidden.append(packed)     # no other step does arithmetic on the packed bytes
        self.load(packed)
        out = self.new_frag(shape)
        signed = rng.random() < 0.4

        def body(iv):
            *lead, j = iv
            byte = f'{packed.name}[{", ".join(lead + [f"{j} // 2"])}]'
            if signed:
                nibble = (f'T.shift_right(T.shift_left({byte}, T.Cast("int8", 4 - {j} % 2 * 4)), T.int8(4))')
            else:
                nibble = f'T.bitwise_and(T.shift_right({byte}, T.Cast("int8", {j} % 2 * 4)), T.int8(15))'
            return [f'{out.name}[{", ".join(iv)}] = T.Cast("{out.dtype}", {nibble})']

        self.nest(shape, body)
        self.defined.add(out.name)
        self.notes.append("unpack-signed" if signed else "unpack-unsigned")

    def pipelined(self) -> None:
        """A serial loop annotated ``num_stages`` (2..4) over 1..5 tiles of a global buffer: each iteration
        copies a tile into shared memory and a parallel nest folds it into a fragment (``+`` or max); offsets
        sometimes named (``row0 = bx * span`` before the loop, ``koff = ko * w`` in it), the copy and fold
        sometimes under a block-uniform ``if``. Bug class: software pipelining (stage indexing, cp.async wait
        counts and barriers, extents below the stage count, cp.async widths from 4 to 16 bytes, named offsets
        substituted wrongly, a condition not carried into the stage that issues or reads)."""
        rng = self.rng
        shape = rng.choice(self.shapes())
        dtype = self.frag_dtype()
        stages, steps = rng.choice((2, 2, 3, 4)), rng.choice((1, 2, 3, 4, 5))
        named, guarded = rng.random() < 0.4, rng.random() < 0.3
        acc = self.new_frag(shape, dtype)
        tile = Buf(self.fresh("s"), shape, dtype, self.shared_scope())
        self.allocs.append(tile)
        last = shape[-1]
        gshape = list(shape[:-1]) + [last * steps]
        koff, row0 = self.fresh("koff"), self.fresh("row0")
        offs = ["0"] * (len(shape) - 1) + [koff if named else f"ko * {last}"]
        lines = []
        if self.nblocks > 1:
            span = gshape[0]
            gshape[0] = span * self.nblocks
            if named:
                lines.append(f"{row0} = bx * {span}")
            base = row0 if named else f"bx * {span}"
            offs[0] = base if offs[0] == "0" else f"{base} + {offs[0]}"
        name = self.fresh("A")
        self.params.append(Buf(name, tuple(gshape), dtype, "param"))
        full = _region(shape)
        idx = ", ".join(["i", "j"][:len(shape)])
        fold = f"{acc.name}[{idx}] + {tile.name}[{idx}]" if rng.random() < 0.5 else \
            f"T.max({acc.name}[{idx}], {tile.name}[{idx}])"
        lines += [f"Tx.fill({acc.name}[{full}], {_const(dtype, 0.0)})",
                  f'for ko in T.serial({steps}, annotations={{"num_stages": {stages}}}):']
        pad = "    "
        if named:
            lines.append(f"{pad}{koff} = ko * {last}")
        if guarded:
            lines.append(f"{pad}if ko % 2 == {rng.choice((0, 1))}:")
            pad += "    "
        lines.append(f"{pad}Tx.copy({tile.name}[{full}], {name}[{_region(shape, offs)}])")
        for v, e in zip(["i", "j"], shape):
            lines.append(f"{pad}for {v} in T.parallel({e}):")
            pad += "    "
        lines.append(f"{pad}{acc.name}[{idx}] = {fold}")
        self.body.append("\n".join(lines))
        self.defined.add(acc.name)
        self.notes.append(f"pipelined-s{stages}-n{steps}" + ("-named" if named else "") + ("-guarded" if guarded else ""))

    def cumsum(self) -> None:
        """``lang.cumsum`` of a written fragment in place, along a random dimension, forwards or reversed. Bug
        classes: the lane-split scan (a row over 2^k lanes of a warp, chunk scans plus a shuffle scan of the
        chunk totals) taking a wrong prefix, the wrong direction or a row that leaves its warp; serial axes
        split across threads."""
        cands = [b for b in self.frags() if all(e > 1 for e in b.shape)]
        if not cands:
            return self.elementwise()
        f = self.rng.choice(cands)
        dim = self.rng.randrange(len(f.shape))
        reverse = self.rng.random() < 0.5
        self.body.append(f"lang.cumsum({f.name}, dim={dim}, reverse={reverse})")
        self.has_sum = True
        self.sum_extent = max(self.sum_extent, f.shape[dim])
        self.notes.append("cumsum-reverse" if reverse else "cumsum")

    def step_reduce(self) -> None:
        cands = [b for b in self.frags() if b.shape != (1,)]
        return self.reduce(self.rng.choice(cands)) if cands else self.elementwise()

    def step_load(self) -> None:
        shape = self.rng.choice(self.shapes())
        self.load(self.rng.choice(self.frags(shape, defined=False) or [self.new_frag(shape)]))

    def step_fill(self) -> None:
        self.fill(self.rng.choice(self.frags(defined=False)))

    def step_copy_frag(self) -> None:
        self.copy_frag(self.rng.choice(self.frags()))

    def step_store(self) -> None:
        self.store(self.rng.choice(self.frags()))

    # -- the numeric check's own bug classes (``CHECK_CLASSES``), appended after the kernel's stores

    def local_accumulate(self) -> None:
        """Each thread sums a row of a global buffer into its own ``scope="local"`` accumulator in a serial loop
        and stores it. Bug classes: the numpy interpreter sharing one local array between all threads (a correct
        kernel reported wrong); a serial float sum compared exactly."""
        k = self.rng.choice((1, 3, 8, 33))
        dt = self.dtype
        rows = self.threads * self.nblocks
        a, o = self.fresh("A"), self.fresh("O")
        self.params += [Buf(a, (rows, k), dt, "param"), Buf(o, (rows,), dt, "param")]
        acc = Buf(self.fresh("loc"), (1,), dt, "local")
        self.hidden.append(acc)
        row = f"bx * {self.threads} + tx" if self.nblocks > 1 else "tx"
        self.body.append("\n".join([
            f"{acc.name}[0] = {_const(dt, 0.0)}",
            f"for k in T.serial({k}):",
            f"    {acc.name}[0] = {acc.name}[0] + {a}[{row}, k]",
            f"{o}[{row}] = {acc.name}[0]"]))
        self.has_sum = True
        self.sum_extent = max(self.sum_extent, k)
        self.notes.append("local-accumulate")

    def shared_cumsum(self) -> None:
        """``lang.cumsum`` of a shared tile (a written fragment copied in, the scan copied out): with fewer lines
        than threads the scan runs under a thread guard. Bug class: CUDA generation refusing the guarded scan
        (TVM's barrier inside the condition) that the CPU check had passed."""
        cands = [b for b in self.frags() if all(e > 1 for e in b.shape)]
        if not cands:
            return
        f = self.rng.choice(cands)
        tile = Buf(self.fresh("s"), f.shape, f.dtype, self.shared_scope())
        self.allocs.append(tile)
        full = _region(f.shape)
        dim, reverse = self.rng.randrange(len(f.shape)), self.rng.random() < 0.5
        self.body += [f"Tx.copy({tile.name}[{full}], {f.name}[{full}])",
                      f"lang.cumsum({tile.name}, dim={dim}, reverse={reverse})",
                      f"Tx.copy({f.name}[{full}], {tile.name}[{full}])"]
        self.has_sum = True
        self.sum_extent = max(self.sum_extent, f.shape[dim])
        self.store(f)
        self.notes.append("shared-cumsum")

    #: dtype -> (constant whose spacing rounds a value near 1, factor that overflows most values to infinity)
    FLOAT_IDENTITY = {"float16": (1000.0, 6e4), "float32": (1e7, 3e38)}

    def float_identity(self) -> None:
        """A float expression apache-tvm's simplifier would cancel, written into a new fragment and stored:
        ``(c + x) - c`` (rounds ``x`` to the spacing near ``c``), ``(x + y * c) - y' * c`` and ``x * big - x' * big``
        (infinity minus infinity is NaN, not 0), where ``x'`` is ``x`` itself or the same element through an index
        that only simplifies to it (``(i + n) % n``). Bug class: float identities applied by TVM in both builds
        (seed 17001, kernel 100)."""
        rng = self.rng
        cands = [b for b in self.frags() if b.dtype in self.FLOAT_IDENTITY]
        if not cands:
            return
        f = rng.choice(cands)
        big, overflow = self.FLOAT_IDENTITY[f.dtype]
        dst = self.new_frag(f.shape, f.dtype)
        form, alias = rng.choice(("constant", "scaled", "overflow")), rng.random() < 0.5

        def body(ivars):
            idx = ", ".join(ivars)
            same = ", ".join(f"({v} + {e}) % {e}" for v, e in zip(ivars, f.shape)) if alias else idx
            x, x2 = f"{f.name}[{idx}]", f"{f.name}[{same}]"
            c, o = _const(f.dtype, big), _const(f.dtype, overflow)
            expr = {"constant": f"({c} + {x}) - {c}",
                    "scaled": f"({x} + {x} * {c}) - {x2} * {c}",
                    "overflow": f"{x} * {o} - {x2} * {o}"}[form]
            return [f"{dst.name}[{idx}] = {expr}"]
        self.nest(f.shape, body)
        self.defined.add(dst.name)
        self.store(dst)
        self.notes += ["float-identity", f"float-identity-{form}"] + (["float-identity-alias"] if alias else [])

    def staged_fp8(self) -> None:
        """A ``num_stages`` loop copying fp8 tiles (e4m3 / e5m2) into shared memory and folding them, decoded, into
        a float32 fragment. Bug class: the cp.async emulation's NaN poison of a staged fp8 tile, which the CPU
        build could not store."""
        rng = self.rng
        dt = rng.choice(("float8_e4m3fn", "float8_e5m2"))
        shape = rng.choice(self.shapes())
        stages, steps = rng.choice((2, 3)), rng.choice((1, 2, 3, 4))
        acc = Buf(self.fresh("r"), shape, "float32", "local.fragment")
        tile = Buf(self.fresh("s"), shape, dt, self.shared_scope())
        self.hidden += [acc, tile]
        gshape = list(shape[:-1]) + [shape[-1] * steps]
        offs = ["0"] * (len(shape) - 1) + [f"ko * {shape[-1]}"]
        if self.nblocks > 1:
            span = gshape[0]
            gshape[0] = span * self.nblocks
            offs[0] = f"bx * {span}" if offs[0] == "0" else f"bx * {span} + {offs[0]}"
        name = self.fresh("A")
        self.params.append(Buf(name, tuple(gshape), dt, "param"))
        full = _region(shape)
        idx = ", ".join(["i", "j"][:len(shape)])
        lines = [f"Tx.fill({acc.name}[{full}], T.float32(0))",
                 f'for ko in T.serial({steps}, annotations={{"num_stages": {stages}}}):',
                 f"    Tx.copy({tile.name}[{full}], {name}[{_region(shape, offs)}])"]
        pad = "    "
        for v, e in zip(["i", "j"], shape):
            lines.append(f"{pad}for {v} in T.parallel({e}):")
            pad += "    "
        lines.append(f'{pad}{acc.name}[{idx}] = T.max({acc.name}[{idx}], T.Cast("float32", {tile.name}[{idx}]))')
        self.body.append("\n".join(lines))
        g, reg = self.global_region(shape, "float32", "out")
        self.body.append(f"Tx.copy({g}[{reg}], {acc.name}[{full}])")
        self.notes.append(f"staged-{dt}")

    def render(self) -> str:
        params = ", ".join(f'{p.name}: T.Buffer({p.shape!r}, "{p.dtype}")' for p in self.params)
        lines = ["@T.prim_func", f"def main({params}):",
                 f'    bx = T.launch_thread("blockIdx.x", {self.nblocks})',
                 f'    tx = T.launch_thread("threadIdx.x", {self.threads})']
        for b in self.allocs + self.hidden:
            lines.append(f'    {b.name} = T.alloc_buffer({b.shape!r}, "{b.dtype}", scope="{b.scope}")')
        for stmt in self.body:
            lines += ["    " + line for line in stmt.split("\n")]
        return "\n".join(lines) + "\n"


def _pick(rng: random.Random, weights: dict) -> str:
    """A key of ``weights`` drawn with probability proportional to its weight (deterministic order)."""
    total = sum(weights.values())
    x = rng.random() * total
    for key, w in weights.items():
        x -= w
        if x < 0:
            return key
    return key


#: target of a generated kernel -> weight; sm_90 (no attribute, the library's default) keeps the kernels of
#: earlier runs unchanged. Bug classes: mma.sync against wgmma gemms (sm_80, sm_90a), the 256-bit vectors of
#: pure global statements from sm_100 on (an 8-lane float32 multiply nvcc rejected)
ARCHS = {"sm_90": 6, "sm_80": 2, "sm_90a": 1, "sm_100": 1}


#: the numeric check's own bug classes -> weight, drawn from a stream of their own and appended to the kernel
#: (``none``: the kernel as earlier runs generated it); ``threads-xy`` launches the block as threadIdx.x/y (bug
#: class: the check's exactness decision built the 1-D op graph before the thread dimensions were folded)
CHECK_CLASSES = {"none": 24, "local-accumulate": 2, "shared-cumsum": 2, "staged-fp8": 1, "threads-xy": 2}

#: share of the kernels without a check class that get a ``Gen.float_identity`` statement appended, drawn from a
#: stream of its own so that every other kernel stays what earlier runs generated
FLOAT_IDENTITY_RATE = 0.08


def _two_dimensional_launch(kernel: Kernel, rng: random.Random) -> None:
    """Launch the block as threadIdx.x = X, threadIdx.y = Y (X * Y threads) when the kernel never reads ``tx``."""
    launch = f'    tx = T.launch_thread("threadIdx.x", {kernel.threads})'
    ys = [y for y in (2, 4) if kernel.threads % y == 0 and kernel.threads // y >= 1]
    if not ys or kernel.text.count("tx") != 1 or launch not in kernel.text:
        return
    y = rng.choice(ys)
    kernel.text = kernel.text.replace(launch, f'    tx = T.launch_thread("threadIdx.x", {kernel.threads // y})\n'
                                              f'    ty = T.launch_thread("threadIdx.y", {y})')
    kernel.notes = sorted(set(kernel.notes) | {"threads-xy"})


def generate(seed: int, index: int, max_steps: int = 5) -> Kernel:
    """Kernel ``index`` of ``seed`` (independent of every other kernel). Its target and its check class are drawn
    from streams of their own, so the kernel's text is the one earlier runs generated, with a target attribute
    added off sm_90 and, for a drawn check class, statements appended."""
    from maint.fuzz_races import racy_kernel
    racy = racy_kernel(seed, index)         # racy classes, from a stream of their own (``fuzz_races``)
    if racy is not None:
        return racy
    from maint.fuzz_reducers import reducer_kernel
    reducer = reducer_kernel(seed, index)   # reducer kernels, from a stream of their own (``fuzz_reducers``)
    if reducer is not None:
        return reducer
    extra_rng = random.Random(f"tilelayout-fuzz-check:{seed}:{index}")
    extra = _pick(extra_rng, CHECK_CLASSES)
    gen = Gen(random.Random(f"tilelayout-fuzz:{seed}:{index}"), max_steps,
              random.Random(f"tilelayout-fuzz-safe:{seed}:{index}"))
    float_rng = random.Random(f"tilelayout-fuzz-float:{seed}:{index}")
    if extra == "none" and float_rng.random() < FLOAT_IDENTITY_RATE:
        kernel = gen.build("float-identity", float_rng)
    else:
        kernel = gen.build(extra if extra not in ("none", "threads-xy") else None, extra_rng)
    if extra == "threads-xy":
        _two_dimensional_launch(kernel, extra_rng)
    arch = _pick(random.Random(f"tilelayout-fuzz-arch:{seed}:{index}"), ARCHS)
    if arch != "sm_90":
        head, _, rest = kernel.text.partition("\n    bx = ")
        attr = f'    T.func_attr({{"target": T.target({{"kind": "cuda", "arch": "{arch}"}})}})'
        kernel.text = f"{head}\n{attr}\n    bx = {rest}"
        kernel.notes = sorted(set(kernel.notes) | {f"arch-{arch}"})
    return kernel


# ----------------------------------------------------------------------------------------- checker

@dataclass
class Outcome:
    kind: str               # ok | unsupported | crash | invalid | mismatch | generator
    model: str
    detail: str = ""


def parse(text: str):
    import tvm
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    from tilelayout import lang
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx, "lang": lang})


def _index_fn(nest, access):
    from tilelayout.evaluate import evaluate

    def index(*grids):
        env = dict(zip(nest.loop_vars, grids))
        return tuple(np.broadcast_to(np.asarray(evaluate(e, env), dtype=np.int64), grids[0].shape if grids else ())
                     for e in access.indices)
    return index


def _cached_facts_problems(name: str, lay) -> list[str]:
    """Facts a Fragment caches (holders, thread extent, slot count) against a fresh copy rebuilt from its dict:
    a copy rebound to another thread range once kept the holder table of the old range."""
    import tilelayout as tl
    from tilelayout import fragment as fragment_module
    if not lay.is_static or lay.size * lay.replicate_size > 1 << 20:
        return []
    fragment_module.clear_caches()          # the rebuilt copy must not be served from the interning table
    fresh = tl.layout_from_dict(lay.to_dict())
    lo = (lay.thread_range or (0, 0))[0]
    holders = np.sort(np.asarray(lay.thread_table()).reshape(lay.size, -1) + lo, axis=1)
    out = []
    if not np.array_equal(lay.holder_table(), holders):
        out.append(f"fragment {name}: its cached holder table is not its threads (+{lo}) ({lay!r})")
    if (lay.thread_extent, lay.output_shape) != (fresh.thread_extent, fresh.output_shape):
        out.append(f"fragment {name}: cached thread extent / slots {lay.thread_extent}, {lay.output_shape} differ from "
                   f"a fresh copy's {fresh.thread_extent}, {fresh.output_shape}")
    if not (lay.contains(fresh) and fresh.contains(lay)):
        out.append(f"fragment {name}: does not contain a fresh copy of itself (stale cached holders)")
    return out


def _packed_inverse_problems(name: str, lay) -> list[str]:
    """The cell -> (element, replica) maps the io-aware scorer and conversion pricing read without enumerating:
    a constructor's recorded cell digits, and the CuTe packed inverse (from those digits or TVM's iter-map
    rewrite, which once dropped an offset under a division: ``(n + 1) % 32`` read as ``n % 32``). Each must
    send every cell to the (element, replica) the fragment's own tables put there."""
    from tilelayout.passes.inference.cost_models import statement_score
    if not lay.is_static or lay.size * lay.replicate_size > 1 << 16:
        return []
    table = statement_score.flat_packed_table(lay)
    cells = int(lay.thread_extent) * int(np.prod([int(s) for s in lay.output_shape]))
    out = []
    digits = lay.cell_digits()
    if digits is not None:
        c, n, lower = np.arange(cells), np.zeros(cells, dtype=np.int64), 1
        for ext, stride in digits:
            n += (c // lower) % ext * stride
            lower *= ext
        if table.size != cells or not np.array_equal(table[n], c):
            out.append(f"{name}: recorded cell digits {digits} do not read {lay!r} backwards")
    if table.size == cells:
        inv = statement_score.packed_inverse(lay, cells)
        if not isinstance(inv, statement_score.Unconvertible):
            from tilelayout import cute
            back = np.asarray(cute.algebra.values(inv, np.arange(cells)), dtype=np.int64)
            if not np.array_equal(table[back], np.arange(cells)):
                out.append(f"{name}: the CuTe packed inverse {inv} is not the inverse of {lay!r}")
    return out


def _separable_grid_problems(name: str, lay) -> list[str]:
    """The separable cell grid conversion pricing reads (memoised by mapping): the memo must give what deriving
    it afresh gives (it once answered a planned layout with the None of an equal user-built mapping, which has
    no recorded digits), a grid must list the fragment's own (element, thread, slot) cells, and the holders
    read off its digits (``digit_holders``) must be its own."""
    from tilelayout.passes.inference import separable_cells as sc
    if not lay.is_static or lay.size * lay.replicate_size > 1 << 16:
        return []
    memo, fresh = sc.separable_cells(lay), sc._derive(lay)
    if (memo is None) != (fresh is None):
        return [f"{name}: the memoised separable grid is {'missing' if memo is None else 'present'} but deriving "
                f"it afresh gives {'none' if fresh is None else 'one'} ({lay!r})"]
    held = sc.digit_holders(lay, np.arange(lay.size, dtype=np.int64))
    if fresh is None and held is None:
        return []
    elem, thread, slot = enumerated_cells(lay)
    if held is not None:        # who holds each element, read off the digits (the conversion tests' sample)
        if not np.array_equal(held, enumerated_holders(lay, (elem, thread, slot))):
            return [f"{name}: the holders its cell digits give are not its own ({lay!r})"]
    if fresh is None:
        return []
    if not (np.array_equal(fresh.elements(), elem) and np.array_equal(fresh.threads_of_cells(), thread)
            and np.array_equal(fresh.slots_of_cells(), slot)):
        return [f"{name}: its separable grid does not list its own cells ({lay!r})"]
    return []


def enumerated_holders(frag, cells: tuple | None = None) -> np.ndarray:
    """The thread holding each flat element of a one-replica fragment (threads counted from the block's thread
    0), from its enumerated cells (``cells``: ``enumerated_cells(frag)`` when the caller has them)."""
    elem, thread, _ = cells if cells is not None else enumerated_cells(frag)
    out = np.full(int(np.prod(frag.input_shape)), -1, dtype=np.int64)
    out[elem] = thread
    return out


def enumerated_cells(frag) -> tuple:
    """(element, thread, slot) of every (element, replica) cell of ``frag``, sorted by (thread, slot), read off
    its tables (threads counted from the block's thread 0, slots row-major over the output shape)."""
    size = int(np.prod(frag.input_shape))
    lo = (frag.thread_range or (0, 0))[0]
    threads = np.asarray(frag.thread_table()).reshape(size, -1) + lo
    tab = np.asarray(frag.table()).reshape(size, -1)
    slot = np.zeros(size, dtype=np.int64)
    for k, ext in enumerate(frag.output_shape):
        slot = slot * int(ext) + tab[:, k]
    reps = threads.shape[1]
    elem = np.repeat(np.arange(size), reps)
    thread, slot = threads.reshape(-1), np.repeat(slot, reps)
    order = np.lexsort((slot, thread))
    return elem[order], thread[order], slot[order]


def _inverse_problems(name: str, lay) -> list[str]:
    """The closed-form inverse lowering walks a fragment (or loop) by: every (slot..., thread) cell of the box
    it reads must give a point outside the domain or the (element, replica) the fragment puts in that cell,
    and every (element, replica) must be reached. TVM's iter map once dropped a thread offset
    (``(_i + 2) // 4`` read as ``_i // 4``) and the inverse ran every iteration on thread 0. Judged here by
    enumeration of the fragment's own tables; a fragment without a closed-form inverse is not judged."""
    from tilelayout.errors import TileLayoutError
    if not lay.is_static or lay.size * lay.replicate_size > 1 << 16:
        return []
    try:
        inv, _ = lay.inverse_with_info(allow_padding=True)
    except TileLayoutError:
        return []
    box = [int(s) for s in inv.input_shape]
    if int(np.prod(box)) > 1 << 18:
        return []
    cells = np.indices(box).reshape(len(box), -1).T                             # (cells, slots + thread)
    coords = np.asarray(inv.table(), dtype=np.int64).reshape(cells.shape[0], -1)  # (cells, dims + rep)
    shape = [int(s) for s in lay.input_shape] + [int(lay.replicate_size)]
    inside = ((coords >= 0) & (coords < np.asarray(shape))).all(axis=1)
    slots = np.asarray(lay.table(), dtype=np.int64)                              # (*shape, outputs)
    threads = np.asarray(lay.thread_table(), dtype=np.int64)                     # (*shape, rep)
    at = coords[inside]
    got = np.concatenate([slots[tuple(at[:, :-1].T)], threads[tuple(at.T)][:, None]], axis=1)
    wrong = ~(got == cells[inside]).all(axis=1)
    if wrong.any():
        cell = cells[inside][int(np.argmax(wrong))].tolist()
        return [f"{name}: its inverse sends (slot..., thread) cell {cell} to {at[int(np.argmax(wrong))].tolist()}, "
                f"which the layout puts at {got[int(np.argmax(wrong))].tolist()} ({lay!r})"]
    if int(inside.sum()) != lay.size * lay.replicate_size:
        return [f"{name}: its inverse reaches {int(inside.sum())} of {lay.size * lay.replicate_size} (element, "
                f"replica) points over the box {box} ({lay!r})"]
    return []


def _conditioned_write_problems(op, layouts: dict) -> list[str]:
    """An op with its own rule (a reduction, a gemm) under a thread-dependent condition writes a fragment:
    every holder of it must be a thread that runs the op, or it keeps a stale value (fuzz seed 1920). Read
    off the fragment's own thread table."""
    from cases import _support
    from tilelayout.fragment import Fragment
    if getattr(op, "thread_range", None) is None:
        return []
    lo, ext = op.thread_range
    out = []
    for region in [getattr(op, "dst", None), getattr(op, "c", None)]:     # a reduction's, a gemm's output
        buf = getattr(region, "buffer", None)
        lay = layouts.get(buf.name) if buf is not None else None
        if buf is None or not buf.is_fragment or not isinstance(lay, Fragment) or not lay.is_static:
            continue
        threads = _support.block_threads(lay.to_dict())
        outside = sorted({int(t) for t in np.unique(threads) if not lo <= t < lo + ext})
        if outside:
            out.append(f"{op.describe()} runs on threads [{lo}, {lo + ext}) but writes fragment {buf.name}, "
                       f"held also by threads {outside[:4]}{'...' if len(outside) > 4 else ''}")
    return out


def validate(result) -> list[str]:
    """Every violated invariant of an inference result, judged by exact enumeration (empty: valid)."""
    from cases import _support
    from tilelayout.fragment import Fragment
    from tilelayout.passes.inference.loop_nest import nest_of
    problems = []
    graph = result.graph
    for buf in graph.fragments():
        lay = result.buffers.get(buf.name)
        if lay is None:
            if buf.name in {b.name for op in graph.ops for b in op.buffers()}:
                problems.append(f"fragment {buf.name} has no layout")
            continue
        if not isinstance(lay, Fragment):
            problems.append(f"fragment {buf.name} got a non-Fragment layout {lay!r}")
            continue
        d = lay.to_dict()
        if [int(s) for s in d["input_shape"]] != [int(s) for s in buf.shape]:
            problems.append(f"fragment {buf.name}: layout domain {d['input_shape']} != shape {list(buf.shape)}")
            continue
        try:
            _support.assert_valid_fragment(buf.name, d)
        except AssertionError as err:
            problems.append(str(err))
        problems += _cached_facts_problems(buf.name, lay)
        problems += _inverse_problems(f"fragment {buf.name}", lay)
        problems += _packed_inverse_problems(f"fragment {buf.name}", lay)
        problems += _separable_grid_problems(f"fragment {buf.name}", lay)
    for op in graph.ops:
        nest = nest_of(op)
        if nest is None:
            problems += _conditioned_write_problems(op, result.buffers)
            continue
        decision = result.op_loops.get(op.index)
        if decision is None:
            problems.append(f"{op.describe()}: no loop layout")
            continue
        loop = decision.layout.to_dict()
        key = f"{','.join(v.name for v in nest.loop_vars)}[{'x'.join(str(e) for e in nest.extents)}]"
        if [int(s) for s in loop["input_shape"]] != [int(e) for e in nest.extents]:
            problems.append(f"{op.describe()}: loop layout domain {loop['input_shape']} does not cover {nest.extents}")
            continue
        try:
            _support.assert_valid_fragment(f"loop of {op.describe()}", loop)
        except AssertionError as err:
            problems.append(str(err))
        problems += _inverse_problems(f"loop of {op.describe()}", decision.layout)
        problems += _packed_inverse_problems(f"loop of {op.describe()}", decision.layout)
        problems += _separable_grid_problems(f"loop of {op.describe()}", decision.layout)
        inner = [v.name for v in nest.inner_vars]
        for a in nest.fragment_accesses():
            if inner and any(n in str(e) for e in a.indices for n in inner):
                continue      # indices that use a serial inner variable cannot be enumerated over the nest
            frag = result.buffers.get(a.buffer.name)
            if frag is None:
                continue
            try:
                _support.assert_owned(key, loop, a.buffer.name, frag.to_dict(), _index_fn(nest, a), write=a.is_write)
            except AssertionError as err:
                problems.append(f"{op.describe()}: {err}")
    return problems


def _short(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).strip()}"


def _tolerance(kernel: Kernel, func):
    if not kernel.has_sum:
        return None
    # float sums in a different association order: error grows with the summed extent
    atol = 2e-5 * max(16.0, float(kernel.sum_extent))
    if "gemm-chain" in kernel.notes:
        # the first product is rounded to float16 before the second gemm: a different summation order may
        # round one element to the neighbouring float16 value (2^-10 relative), and the second gemm carries
        # that step times an operand; with standard-normal inputs a product element stays below
        # 4 sqrt(K) and an operand below 4, so one such step moves an output by at most 2^-6 sqrt(K)
        atol = max(atol, 2.0 ** -6 * float(kernel.sum_extent) ** 0.5)
    return (1e-3, atol)


def _cross_tolerance(kernel: Kernel, func):
    """Tolerance between the two references (``--cross-check``). They agree exactly except for an f32 gemm: the
    interpreter reads its operands as tf32, as the tensor cores (and so the lowered kernel) do, while the
    compiled sequential semantics multiply in full f32. Truncating both operands to tf32's 10 mantissa bits
    moves a product by at most 2^-9 of its size; with standard-normal inputs (operands below 4) the sum of K
    products moves by at most about K * 2^-8 (seeds 2158 and 2165, both K = 8: first differences 0.0021 and 0.0018)."""
    tol = _tolerance(kernel, func)
    if "gemm-float32" not in kernel.notes:
        return tol
    rtol, atol = tol if tol is not None else (1e-3, 0.0)
    return (rtol, max(atol, 2.0 ** -8 * float(kernel.sum_extent)))


def pin_layout(kind: str, shape: tuple, threads: int):
    """The layout a pin of ``kind`` puts on a fragment of ``shape`` (see ``VALID_PINS`` / ``INVALID_PINS``)."""
    import tilelayout as tl
    size = int(np.prod(shape))
    dims = list(shape)

    def flat(*c):
        out = c[0]
        for x, e in zip(c[1:], dims[1:]):
            out = out * e + x
        return out
    per = -(-size // threads)
    if kind == "replicated":
        return tl.fully_replicated(dims, threads)
    if kind == "blocked":
        return tl.Fragment(dims, lambda *c: flat(*c) // per, lambda *c: flat(*c) % per)
    if kind == "thread-out-of-range":
        return tl.Fragment(dims, lambda *c: flat(*c) % threads + threads, lambda *c: flat(*c) // threads)
    if kind == "negative-thread":
        return tl.Fragment(dims, lambda *c: flat(*c) % threads - 1, lambda *c: flat(*c) // threads)
    if kind == "not-injective":
        return tl.Fragment(dims, lambda *c: c[0] * 0, lambda *c: c[0] * 0)
    if kind == "wrong-shape":
        return pin_layout("cyclic", (shape[0] + 1,) + tuple(shape[1:]), threads)
    if kind == "plain-layout":
        return tl.Layout(dims, lambda *c: flat(*c))
    if kind == "reversed":          # cyclic over the reversed order: differs from cyclic whenever size > 1
        return tl.Fragment(dims, lambda *c: (size - 1 - flat(*c)) % threads, lambda *c: (size - 1 - flat(*c)) // threads)
    return tl.Fragment(dims, lambda *c: flat(*c) % threads, lambda *c: flat(*c) // threads)     # cyclic


def apply_pins(func, pins: list, threads: int):
    """``func`` with the kernel's pins attached through ``tl.annotate_layouts``."""
    import tilelayout as tl
    for name, kind, shape in pins:
        if kind == "unknown-buffer":
            func = tl.annotate_layouts(func, {"no_such_buffer": pin_layout("cyclic", shape, threads)})
        elif kind == "pinned-twice":   # one call naming the buffer twice (by object and by name), differently
            from tilelayout.annotate import function_buffers
            buf = next(b for b in function_buffers(func) if str(b.name) == name)
            func = tl.annotate_layouts(func, {buf: pin_layout("cyclic", shape, threads),
                                              name: pin_layout("reversed", shape, threads)})
        else:
            func = tl.annotate_layouts(func, {name: pin_layout(kind, shape, threads)})
    return func


def check(kernel: Kernel, models=COST_MODELS, numeric: bool = True, cross: bool = False) -> list[Outcome]:
    """Outcome per model. The numeric reference is the numpy interpreter (``tilelayout.reference``); with
    ``cross`` it is also compared with the TVM-compiled sequential semantics (kind ``oracle`` on a difference)."""
    from tilelayout.errors import TileLayoutError
    from tilelayout.passes.inference.layout_inference import infer_layouts
    from tilelayout.passes.lowering.pipeline import check_numeric, compare_outputs, lower, reference_outputs, \
        sequential_outputs
    from tilelayout.passes.lowering.race_report import build_race_checked
    from tilelayout.passes.lowering.shared_liveness import merge_overlap
    from tilelayout.reference import ReferenceOutOfBounds, UnsupportedByReference
    try:
        func = parse(kernel.text)
    except Exception as err:       # noqa: BLE001 - a generator bug, reported as such
        return [Outcome("generator", m, _short(err)) for m in models]
    if any(n.startswith("lowered:") for n in kernel.notes):
        from maint.fuzz_races import check_lowered
        try:
            kind, detail = check_lowered(kernel, func)
        except Exception as err:   # noqa: BLE001
            kind, detail = "crash", "race check: " + _short(err) + "\n" + traceback.format_exc(limit=-3)
        return [Outcome(kind, m, detail) for m in models]
    racy = next((n[len("racy:"):] for n in kernel.notes if n.startswith("racy:")), None)
    invalid_pin = [k for _, k, _ in kernel.pins if k in INVALID_PINS]
    if kernel.pins:
        try:
            func = apply_pins(func, kernel.pins, kernel.threads)
        except TileLayoutError as err:
            return [Outcome("unsupported", m, "pin: " + _short(err)) for m in models]
        except Exception as err:   # noqa: BLE001
            return [Outcome("crash", m, "pin: " + _short(err) + "\n" + traceback.format_exc(limit=-3)) for m in models]
    expected = None
    out = []
    for model in models:
        try:
            result = infer_layouts(func, cost_model=model)
        except TileLayoutError as err:
            out.append(Outcome("unsupported", model, "infer: " + _short(err)))
            continue
        except Exception as err:   # noqa: BLE001
            out.append(Outcome("crash", model, "infer: " + _short(err) + "\n" + traceback.format_exc(limit=-3)))
            continue
        if invalid_pin:
            out.append(Outcome("accepted-bad", model, f"inference accepted an invalid pin ({', '.join(invalid_pin)})"))
            continue
        if "write-race" in kernel.notes:
            out.append(Outcome("accepted-bad", model, "inference accepted a plain store of one global element from "
                                                      "several parallel iterations (a write race)"))
            continue
        try:
            problems = validate(result)
        except Exception as err:   # noqa: BLE001
            problems = [f"validator raised {_short(err)}\n{traceback.format_exc(limit=-3)}"]
        if problems:
            out.append(Outcome("invalid", model, "; ".join(problems[:3])))
            continue
        if not numeric:
            out.append(Outcome("ok", model))
            continue
        if racy is not None:        # no reference values: the race check (or a refusal) must speak
            from maint.fuzz_races import check_racy
            kind, detail = check_racy(func, model, racy)
            out.append(Outcome(kind, model, detail))
            continue
        if expected is None:
            try:
                expected = reference_outputs(func)
            except ReferenceOutOfBounds as err:
                return out + [Outcome("accepted-bad", m, f"inference accepted an out-of-bounds program: {err}")
                              for m in models[len(out):]]
            except UnsupportedByReference as err:
                return out + [Outcome("oracle", m, f"the numpy reference refused: {err}") for m in models[len(out):]]
            if cross:
                try:
                    problems, _ = compare_outputs(expected, sequential_outputs(func), expected.exact,
                                                  None if expected.exact else _cross_tolerance(kernel, func))
                except TileLayoutError:
                    problems = []          # the sequential semantics do not model it (threadIdx reads)
                if problems:
                    return out + [Outcome("oracle", m, "interpreter vs sequential semantics: " + "; ".join(problems))
                                  for m in models[len(out):]]
        try:
            lowered = lower(func, cost_model=model)          # one lowering: the CPU run and the CUDA check
            res = check_numeric(func, cost_model=model, expected=expected, tolerance=_tolerance(kernel, func),
                                kernel=build_race_checked(lowered[list(lowered.functions)[0]]))
        except TileLayoutError as err:
            kind = "crash" if TVM_BUILD_FAILED in str(err) else "unsupported"
            out.append(Outcome(kind, model, "lower: " + _short(err)))
            continue
        except Exception as err:   # noqa: BLE001
            out.append(Outcome("crash", model, "lower: " + _short(err) + "\n" + traceback.format_exc(limit=-3)))
            continue
        if res.ok:
            # what the CPU check cannot see: TVM's CUDA pipeline, run up to its merge of dynamic shared tiles,
            # failing (its barrier insertion inside a condition, the merge itself) or merging tiles onto shared
            # bytes (``shared_liveness.merge_overlap``)
            problem = merge_overlap(lowered)
            if problem is not None:
                out.append(Outcome("mismatch", model, problem))
                continue
            problem = _nvcc_problem(lowered) if os.environ.get(NVCC_ENV) else None
            if problem is not None:
                out.append(Outcome("crash", model, problem))
                continue
        out.append(Outcome("ok" if res.ok else "mismatch", model, "" if res.ok else res.message[:400]))
    return out


#: set (by ``--nvcc``) to compile every lowered kernel's CUDA to PTX; the environment reaches the forked workers
NVCC_ENV = "TILELAYOUT_FUZZ_NVCC"


def _nvcc_problem(lowered) -> str | None:
    """Why the CUDA build of a lowered kernel fails past the point ``merge_overlap`` checks, or None: TVM's own
    build stopping (LowerIntrin on a marker renamed onto a buffer of another dtype, on an 8-bit vector shift),
    or nvcc rejecting what TVM printed (8-lane index vectors as ``make_longlong4`` with eight arguments, 8-lane
    float8 conversions as C casts between storage vectors). Neither the CPU run nor the merge check sees them.
    Also a wgmma descriptor whose shared buffer the source declares less aligned than the descriptor assumes
    (``maint/cuda_alignment.py``: TVM's merged buffer is ``__align__(64)`` unless the build declares more)."""
    import shutil
    from maint.cuda_alignment import problems as alignment_problems
    from tilelayout.errors import LoweringError
    from tilelayout.passes.lowering.pipeline import compile_ptx, lowered_cuda_source
    if shutil.which("nvcc") is None:
        return None
    target = lowered[list(lowered.functions)[0]].attrs["target"]
    try:
        source = lowered_cuda_source(lowered, target)
    except LoweringError as err:  # TVM's complaint is the finding
        return "TVM's CUDA build failed: " + str(err).rsplit("}: ", 1)[-1][:300]   # after the printed target
    misaligned = alignment_problems(source)
    if misaligned:
        return "wgmma descriptor on an under-aligned shared buffer: " + misaligned[0]
    try:
        compile_ptx(source, target)
    except Exception as err:  # noqa: BLE001 -- nvcc's complaint is the finding
        text = str(err).splitlines()
        lines = [line.split("): ", 1)[-1] for line in text if ": error" in line] or text or ["?"]
        return "nvcc rejects the generated CUDA: " + lines[0].strip()[:300]
    return None


# ----------------------------------------------------------------------------------------- driver

class Worker:
    """Checks kernels in a child process, so a kernel that corrupts memory or hangs (the lowered code runs
    natively) is reported as a crash of that kernel instead of ending the run."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.proc = None
        self.conn = None

    def _start(self) -> None:
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True)
        self.proc.start()

    def check(self, kernel: Kernel, models, numeric: bool, cross: bool = False) -> list[Outcome]:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send((kernel, models, numeric, cross))
        if self.conn.poll(self.timeout):
            try:
                return self.conn.recv()
            except EOFError:
                self.proc.join(10)
        why = f"timed out after {self.timeout:.0f} s" if self.proc.is_alive() else \
            f"died (exit code {self.proc.exitcode}: the lowered kernel may write out of bounds)"
        self.close()
        return [Outcome("crash", m, f"the checking process {why}") for m in models]

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join()
        self.proc = self.conn = None


def _serve(conn) -> None:
    import faulthandler
    faulthandler.disable()      # a kernel that corrupts memory is reported by the parent, not by a stack dump
    import warnings
    # a forked child inherits the caller's warning filters (pytest makes resource warnings errors); kernels are
    # judged by their outcome, and a drawn kernel may be oversized by design, so warnings never decide it here
    warnings.resetwarnings()
    warnings.simplefilter("ignore")
    while True:
        try:
            kernel, models, numeric, cross = conn.recv()
        except EOFError:
            return
        conn.send(check(kernel, models, numeric, cross))


def _seeds(text: str) -> list[int]:
    """``"1000-1009"`` or ``"3,5,7"`` or ``"4"``."""
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def cute_cpp_parity(seeds: list, per_op: int) -> int:
    """The differential test of tl.cute against C++ CuTe (tests/test_cute_cpp_parity.py) on other seeds and more
    static cases; prints every difference. Exit 0 clean, 1 on a difference, 2 without a compiler or headers."""
    sys.path.insert(0, str(ROOT / "tests"))
    import cute_cpp_oracle as oracle
    import test_cute_cpp_parity as parity
    if oracle.skip_reason():
        print(f"cute-cpp: skipped, {oracle.skip_reason()}")
        return 2
    failed = 0
    for seed in seeds:
        static = parity.static_sample(parity.build_cases(seed), per_op)
        dynamic = parity.dynamic_cases(seed + 1, 1000) + parity.symbolic_cases(seed + 2, 100)
        bad = parity.differences(static, dynamic)
        failed += bool(bad)
        print(f"cute-cpp seed {seed}: {len(static)} static and {len(dynamic)} runtime-int cases, {len(bad)} differ")
        for line in bad[:50]:
            print(line)
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", help="several seeds, e.g. 1000-1009 (overrides --seed); --count kernels each")
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--start", type=int, default=0, help="first kernel index")
    ap.add_argument("--reduce", action="store_true", help="with --only: shrink the kernel keeping its outcome, print it")
    ap.add_argument("--steps", type=int, default=5, help="most ops between the first load and the stores")
    ap.add_argument("--only", type=int, help="check kernel ONLY of the seed alone")
    ap.add_argument("--show", action="store_true", help="print each kernel's text")
    ap.add_argument("--model", choices=COST_MODELS, help="one cost model only")
    ap.add_argument("--no-numeric", action="store_true", help="inference and enumeration checks only")
    ap.add_argument("--cross-check", action="store_true",
                    help="also compare the numpy interpreter with the TVM-compiled sequential semantics")
    ap.add_argument("--save", type=Path, help="write the text of every non-OK kernel into this folder")
    ap.add_argument("--time-limit", type=float, default=540.0, help="stop starting new kernels after this many seconds")
    ap.add_argument("--kernel-timeout", type=float, default=120.0, help="seconds one kernel may take")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="kernels checked in this many child processes")
    ap.add_argument("--in-process", action="store_true", help="check in this process (for debugging)")
    ap.add_argument("--progress", action="store_true", help="print each kernel index before checking it")
    ap.add_argument("-v", "--verbose", action="store_true", help="print unsupported messages in full")
    ap.add_argument("--nvcc", action="store_true",
                    help="also compile every lowered kernel's CUDA to PTX with nvcc (when it is on PATH; ~1 s each)")
    ap.add_argument("--register-budget", type=int,
                    help="plan for this many registers per thread: whole-tile replicas become layout conversions")
    ap.add_argument("--cute-cpp", action="store_true",
                    help="instead of kernels: compare tl.cute with C++ CuTe (CUTLASS headers compiled by g++) on each "
                         "seed's random algebra cases, --count static cases per operation")
    args = ap.parse_args(argv)
    if args.cute_cpp:
        return cute_cpp_parity(_seeds(args.seeds) if args.seeds else [args.seed], args.count)
    if args.register_budget:       # the environment reaches the forked checking processes
        os.environ["TILELAYOUT_REGISTER_BUDGET"] = str(args.register_budget)
    if args.nvcc:
        os.environ[NVCC_ENV] = "1"
    models = (args.model,) if args.model else COST_MODELS
    numeric, cross = not args.no_numeric, args.cross_check
    seeds = _seeds(args.seeds) if args.seeds else [args.seed]
    if args.only is not None:
        tasks = [(seeds[0], args.only)]
    else:
        tasks = [(sd, k) for sd in seeds for k in range(args.start, args.start + args.count)]
    if args.reduce:
        if args.only is None:
            ap.error("--reduce needs --only K")
        worker = None if args.in_process else Worker(args.kernel_timeout)
        small = reduce_kernel(generate(seeds[0], args.only, args.steps), models, numeric, worker)
        print(small.text)
        if small.pins:
            print(f"# pins: {small.pins}")
        for o in (worker.check(small, models, numeric) if worker else check(small, models, numeric)):
            print(f"[{o.kind}] {o.model}: {o.detail.replace(chr(10), ' | ')[:3000]}")
        if worker:
            worker.close()
        return 0
    t0 = time.perf_counter()
    counts: Counter = Counter()
    kernels: Counter = Counter()
    reasons: Counter = Counter()
    by_class: Counter = Counter()
    done = 0

    def run_one(task, worker):
        sd, k = task
        kernel = generate(sd, k, args.steps)
        if time.perf_counter() - t0 > args.time_limit:
            return sd, k, kernel, None
        return sd, k, kernel, (worker.check(kernel, models, numeric, cross) if worker else
                               check(kernel, models, numeric, cross))

    def results():
        if args.in_process or args.jobs <= 1:
            worker = None if args.in_process else Worker(args.kernel_timeout)
            try:
                for task in tasks:
                    yield run_one(task, worker)
            finally:
                if worker:
                    worker.close()
            return
        import queue
        from concurrent.futures import ThreadPoolExecutor
        pool_workers = queue.Queue()
        for _ in range(args.jobs):
            pool_workers.put(Worker(args.kernel_timeout))

        def job(task):
            w = pool_workers.get()
            try:
                return run_one(task, w)
            finally:
                pool_workers.put(w)
        with ThreadPoolExecutor(args.jobs) as pool:
            yield from pool.map(job, tasks)          # in task order
        while not pool_workers.empty():
            pool_workers.get().close()

    stopped = False
    for sd, k, kernel, outcomes in results():
        if outcomes is None:
            stopped = True
            continue
        if args.progress:
            print(f"... seed {sd} kernel {k}", flush=True)
        if args.show:
            print(f"# ---- seed {sd} kernel {k} (threads {kernel.threads}; {', '.join(kernel.notes)})")
            print(kernel.text + (f"# pins: {kernel.pins}\n" if kernel.pins else ""))
        done += 1
        worst = max(outcomes, key=lambda o: KINDS.index(o.kind))
        kernels[worst.kind] += 1
        if worst.kind in BAD:
            for note in kernel.notes:
                by_class[(worst.kind, note)] += 1
        for o in outcomes:
            counts[o.kind] += 1
            if o.kind == "unsupported":
                reasons[o.detail.split(":")[0] + ": " + _reason_key(o.detail)] += 1
            if o.kind != "ok" and (o.kind in BAD or args.verbose):
                text = o.detail.replace("\n", " | ") if args.verbose else o.detail[:600]
                print(f"[{o.kind}] seed {sd} kernel {k} {o.model}: {text[:4000]}", flush=True)
        if args.save and worst.kind != "ok":
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"s{sd}_k{k}_{worst.kind}.py").write_text(
                f"# seed {sd} kernel {k}: {worst.kind} ({worst.model}): "
                f"{worst.detail.splitlines()[0] if worst.detail else ''}\n" + kernel.text
                + (f"# pins: {kernel.pins}\n" if kernel.pins else ""))
    if stopped:
        print(f"time limit reached after {done} kernels")
    wall = time.perf_counter() - t0
    print(f"kernels: {done} in {wall:.1f} s; per kernel (worst over models): "
          + ", ".join(f"{k} {kernels[k]}" for k in KINDS))
    print("kernel-model pairs: " + ", ".join(f"{k} {counts[k]}" for k in KINDS))
    if reasons:
        print("unsupported, by reason:")
        for r, n in reasons.most_common():
            print(f"  {n:4d}  {r}")
    if by_class:
        print("bad kernels by feature they use (one kernel counts under each of its features):")
        for (kind, note), n in sorted(by_class.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {n:4d}  {kind:12s} {note}")
    return 1 if any(kernels[k] for k in BAD) else 0


def _signature(outcomes: list) -> tuple:
    """What a reduction must preserve: the worst outcome kind per model and, for refusals, the reason; for
    mismatches, which outputs differ and whether the reference expected NaN there (a reduction that deleted
    an output's initialisation turns a wrong-lane mismatch into an uninitialised read, seed 1567)."""
    def key(o):
        if o.kind == "unsupported":
            return _reason_key(o.detail)
        if o.kind == "mismatch":
            return _mismatch_key(o.detail)
        return ""
    return tuple((o.model, o.kind, key(o)) for o in outcomes)


def _mismatch_key(detail: str) -> tuple:
    """(output, reference NaN?) for each output a mismatch names (``compare_outputs``: ``"O0: 3 of 8 elements
    differ (first at [..]: got .., expected ..)"``, joined by ``"; "``)."""
    out = []
    for part in detail.split("; "):
        name = part.split(":", 1)[0].strip()
        out.append((name, "expected np.float64(nan)" in part or "expected nan" in part))
    return tuple(sorted(out))


def reduce_kernel(kernel: Kernel, models, numeric: bool, worker) -> Kernel:
    """Greedy one-statement-at-a-time deletion keeping the outcome signature (kind and refusal reason per
    model); allocations and parameters nothing mentions any more are dropped at the end."""
    import re
    head, body = [], []
    for line in kernel.text.splitlines():
        if line.startswith("    ") and not line.startswith("     ") and "launch_thread" not in line \
                and "alloc_buffer" not in line:
            body.append([line])
        elif line.startswith("     ") and body:
            body[-1].append(line)
        else:
            head.append(line)

    def text_of(stmts):
        return "\n".join(head + [l for st in stmts for l in st]) + "\n"

    def run(stmts):
        k = Kernel(text_of(stmts), kernel.threads, kernel.notes, kernel.has_sum, kernel.sum_extent)
        return _signature(worker.check(k, models, numeric) if worker else check(k, models, numeric))

    want = run(body)
    i = 0
    while i < len(body):
        trial = body[:i] + body[i + 1:]
        if trial and run(trial) == want:
            body = trial
        else:
            i += 1
    text = text_of(body)
    used = set(re.findall(r"\b\w+\b", "\n".join(l for st in body for l in st)))
    keep = []
    for line in text.splitlines():
        m = re.match(r"\s+(\w+) = T.alloc_buffer", line)
        if m and m.group(1) not in used:
            continue
        keep.append(line)
    text = "\n".join(keep) + "\n"
    m = re.search(r"def main\((.*)\):", text)
    if m:
        params = [p.strip() for p in re.split(r",\s*(?=\w+: T.Buffer)", m.group(1))]
        params = [p for p in params if p.split(":")[0] in used]
        text = text.replace(m.group(0), f"def main({', '.join(params)}):")
    out = Kernel(text, kernel.threads, kernel.notes, kernel.has_sum, kernel.sum_extent)
    got = worker.check(out, models, numeric) if worker else check(out, models, numeric)
    return out if _signature(got) == want else Kernel(text_of(body), kernel.threads, kernel.notes,
                                                      kernel.has_sum, kernel.sum_extent)


def _reason_key(detail: str) -> str:
    """A coarse key for grouping refusal messages (the error type and its wording without numbers); for a
    failed free-level search, the first attempt's reason."""
    import re
    lines = detail.splitlines()
    body = lines[1].split(": ", 1)[1] if len(lines) > 1 and lines[1].startswith("  root ") else \
        (detail.split(": ", 1)[1] if ": " in detail else detail)
    body = re.sub(r"\[[^\]]*\]|\([^)]*\)|`[^`]*`|\d+", "#", body)
    return body[:110]


if __name__ == "__main__":
    sys.exit(main())
