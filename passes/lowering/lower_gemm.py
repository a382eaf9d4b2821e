"""Lower ``Tx.gemm`` to tensor-core instructions, from the layouts inference wrote into the IR.

The accumulator's annotated Fragment decides the instruction's warp tiling: lowering recognises which
warp owns each 16x8 block (a Wm x Wn grid of contiguous warp tiles, mma.sync's family, or the 16-row
strips per warp of wgmma's accumulator) and checks by enumeration that every element sits in the lane
PTX puts it (``mma_ptx``). Then, per k-step of the instruction:

- A and B are loaded into 32-bit registers: ``ldmatrix`` (``.trans`` where the operand is stored
  MN-contiguous) from shared memory when every 16-byte row segment the instruction reads is contiguous
  and aligned under the buffer's (swizzled) layout, else one load per element and lane; an A operand in
  registers (``local.fragment``) is read from the fragment, whose layout must hold each element in the
  lane that feeds it;
- ``mma.sync.aligned.m16n8k16`` (``k32`` for 8-bit inputs, int8 and fp8; ``k8`` for tf32, i.e. f32 operands;
  ``m8n8k4`` for f64) accumulates into the accumulator fragment's own registers (f16 accumulators through
  packed f16x2 temporaries).

On sm_90 a gemm whose accumulator has the wgmma layout and whose operands fit the wgmma shared-memory
canonical layouts issues ``wgmma.mma_async`` (see ``lower_wgmma``); otherwise mma.sync realises the same
accumulator layout warp by warp.

Nothing falls back silently: a gemm that no instruction fits raises a ``LoweringError`` naming the gemm,
the operand and what would work. The function attribute ``tilelayout.gemm_fallback = "scalar"`` opts in to
the per-thread scalar k-loop; every gemm's lowering is reported in the ``tilelayout.gemm_instructions``
attribute of the lowered function.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import tirx

from tilelayout.fragment import Fragment

from ..hardware import sm_version
from ..ir_utils import int_value
from .loop_partition import LoweringError
from .mma_ptx import MMA_MIN_SM, MMA_SIGNATURES, MmaInst, dtype_bits, mma_instruction

__all__ = ["GEMM_FALLBACK_ATTR", "GEMM_REPORT_ATTR", "WarpTiling", "match_tiling", "lower_gemm_mma",
           "GemmContext", "pack_elements", "ptx_call"]

#: function attribute opting in to the scalar per-thread gemm ("scalar"); anything else is refused
GEMM_FALLBACK_ATTR = "tilelayout.gemm_fallback"
#: function attribute of the lowered kernel: {gemm description: how it was lowered}
GEMM_REPORT_ATTR = "tilelayout.gemm_instructions"

WARP = 32


def ptx_call(text: str, *operands) -> tirx.Stmt:
    """One ``T.ptx[...]`` instruction statement (apache-tvm's table-driven PTX dialect)."""
    from tvm.backend.cuda.ptx import PTXNamespace
    return tirx.Evaluate(PTXNamespace()[text](*operands))


def pack_elements(values: list, dtype: str):
    """A uint32 register holding ``values`` of ``dtype``, first value in the low bits."""
    bits = dtype_bits(dtype)
    out = None
    for p, v in enumerate(values):
        if dtype == "bfloat16":   # bf16 bits = the top half of the (exact) f32 value; LLVM legalises bf16 to f32
            word = tirx.shift_right(tirx.reinterpret("uint32", tirx.Cast("float32", v)), tirx.const(16, "uint32"))
        else:
            raw = v if dtype == f"uint{bits}" else tirx.reinterpret(f"uint{bits}", v)
            word = tirx.Cast("uint32", raw)
        if p:
            word = tirx.shift_left(word, tirx.const(p * bits, "uint32"))
        out = word if out is None else tirx.bitwise_or(out, word)
    return out


def _register(values: list, inst: MmaInst, which: str = "A"):
    """One multiplicand register of ``inst`` holding ``values``: packed into a b32, or the f64 value itself."""
    if inst.reg_dtype == "float64":
        return values[0]
    return pack_elements(values, inst.a_dtype if which == "A" else inst.b_dtype)


def unpack_element(word, part: int, dtype: str):
    bits = dtype_bits(dtype)
    w = tirx.shift_right(word, tirx.const(part * bits, "uint32")) if part else word
    raw = tirx.Cast(f"uint{bits}", tirx.bitwise_and(w, tirx.const((1 << bits) - 1, "uint32")))
    return tirx.reinterpret(dtype, raw)


# --------------------------------------------------------------------------------------- warp tiling

@dataclass(frozen=True)
class WarpTiling:
    """Which warp computes which 16x8 accumulator blocks (``wm x wn`` warps along M and N).

    ``grid`` (mma.sync's accumulator): warp ``w`` = (w % wm, w // wm) owns a contiguous (M/wm) x (N/wn) tile.
    ``strips`` (wgmma's accumulator): warpgroups (four warps along M each) form a (wm/4) x wn grid, numbered
    M-block fastest; warp ``q`` of a warpgroup owns rows 16q..16q+15 of every 64-row block of its group's
    contiguous (M/(wm/4)) x (N/wn) tile."""

    kind: str
    m: int
    n: int
    warps: int
    wm: int = 1
    wn: int = 1
    bm: int = 16            # rows of one instruction block (8 for f64's m8n8k4)

    @property
    def groups_m(self) -> int:
        return self.wm // 4

    @property
    def na(self) -> int:
        """Instruction row blocks (16 rows; 8 for m8n8k4) per warp."""
        return self.m // self.wm // self.bm if self.kind == "grid" else self.m // self.groups_m // 64

    @property
    def nb(self) -> int:
        """8-column blocks per warp."""
        return self.n // self.wn // 8

    def row0(self, warp, a):
        if self.kind == "grid":
            return (warp % self.wm) * (self.m // self.wm) + self.bm * a
        return ((warp // 4) % self.groups_m) * (self.m // self.groups_m) + (warp % 4) * 16 + 64 * a

    def col0(self, warp, b):
        if self.kind == "grid":
            return (warp // self.wm) * (self.n // self.wn) + 8 * b
        return ((warp // 4) // self.groups_m) * (self.n // self.wn) + 8 * b

    def describe(self) -> str:
        per = f"{self.m // self.wm}x{self.n // self.wn}" if self.kind == "grid" else \
            f"{self.m // self.groups_m}x{self.n // self.wn} per warpgroup"
        return f"{self.wm}x{self.wn} warps, {per}" + (" per warp" if self.kind == "grid" else "")

    def owner_table(self, inst: MmaInst) -> np.ndarray:
        """thread[i, j] that holds accumulator element (i, j) under this tiling and the PTX C fragment."""
        out = np.full((self.m, self.n), -1, dtype=np.int64)
        rows, cols = np.meshgrid(np.arange(inst.m), np.arange(8), indexing="ij")
        lane, _ = inst.c_owner(rows, cols)
        for w in range(self.warps):
            for a in range(self.na):
                for b in range(self.nb):
                    r0, c0 = self.row0(w, a), self.col0(w, b)
                    out[r0:r0 + inst.m, c0:c0 + 8] = WARP * w + lane
        return out


def tiling_of_plan(plan) -> WarpTiling:
    """The warp tiling a recorded gemm plan (``passes.inference.gemm_plan.GemmPlan``) prescribes."""
    kind = "strips" if plan.instruction == "wgmma" else "grid"
    bm = plan.instr_m if kind == "grid" else 16
    return WarpTiling(kind, plan.m, plan.n, plan.threads // WARP, plan.warp_m, plan.warp_n, bm)


def _candidates(m: int, n: int, warps: int, bm: int = 16) -> list:
    out = []
    for wm in range(1, warps + 1):
        if warps % wm:
            continue
        wn = warps // wm
        if m % (16 * wm) == 0 and n % (8 * wn) == 0:
            out.append(WarpTiling("grid", m, n, warps, wm, wn, bm))
        if wm % 4 == 0 and m % (64 * (wm // 4)) == 0 and n % (8 * wn) == 0:
            out.append(WarpTiling("strips", m, n, warps, wm, wn))
    return out


def match_tiling(acc: Fragment, m: int, n: int, threads: int, inst: MmaInst,
                 candidates: list | None = None) -> WarpTiling | None:
    """The warp tiling (among ``candidates``, default: every grid and strip partition) under which ``acc``
    puts every element in the lane PTX's C fragment gives it."""
    if threads % WARP or acc.replicate_size != 1:
        return None
    have = acc.thread_table()[..., 0]          # counted from the fragment's thread range, as warps are
    for tiling in candidates if candidates is not None else _candidates(m, n, threads // WARP, inst.m):
        if np.array_equal(tiling.owner_table(inst), have):
            return tiling
    return None


# --------------------------------------------------------------------------------------- operands

@dataclass
class GemmContext:
    """What the gemm lowering needs from the tile-op lowering pass."""

    tx: object
    threads: int
    target: object
    layouts: dict          # buffer name -> Layout | Fragment (annotated)
    fresh: object          # fresh(base) -> unique name
    thread_base: int = 0   # first thread of the range running the gemm (``if tx >= 64``: 64), a warp multiple

    @property
    def rel_tx(self):
        """The thread index counted from the gemm's thread range: warps and lanes are numbered from it."""
        return self.tx - self.thread_base if self.thread_base else self.tx


def _region_index(region, coords: list) -> list:
    """Buffer indices of ``region`` at squeezed (non-unit-dim) coordinates ``coords``."""
    it = iter(coords)
    out = []
    for off, ext in zip(region.offsets, region.extents):
        if isinstance(ext, int) and ext == 1:
            out.append(off if not isinstance(off, int) else tirx.const(off, "int32"))
        else:
            c = next(it)
            out.append(c if isinstance(off, int) and off == 0 else off + c)
    return out


def constant_offsets(region) -> list | None:
    """The region's offsets as Python ints, None when one is symbolic (shared-memory checks enumerate them)."""
    offsets = [int_value(off) for off in region.offsets]
    return None if None in offsets else offsets


def physical_offsets(buf, layout) -> np.ndarray:
    """Flat element offset of every element of a memory buffer under its layout (row-major without one)."""
    shape = [int(s) for s in buf.shape]
    if layout is None:
        return np.arange(int(np.prod(shape))).reshape(shape)
    return layout._linear_table()


class _Operand:
    """One multiplicand as the instruction sees it: logical (row, k) for A, (k, col) for B."""

    def __init__(self, op, region, which: str, transposed: bool, ctx: GemmContext):
        self.op, self.region, self.which, self.transposed, self.ctx = op, region, which, transposed, ctx
        self.buf = region.buffer
        self.dtype = str(self.buf.dtype)

    def storage_index(self, r, c) -> list:
        """Stored (buffer-order) coordinates of logical element (r, c) (A: r = m, c = k; B: r = k, c = n)."""
        return [c, r] if self.transposed else [r, c]

    def load(self, r, c):
        """Element (r, c) of the logical operand."""
        return tirx.BufferLoad(self.buf.var, _region_index(self.region, self.storage_index(r, c)))

    @property
    def k_contiguous(self) -> bool:
        """The stored operand's last (contiguous) dimension is K."""
        return (not self.transposed) if self.which == "A" else self.transposed


def _ldmatrix_ok(operand: _Operand, ctx: GemmContext, starts: list, seg_elems: int) -> bool:
    """Every 16-byte segment ldmatrix reads (``starts``: stored (row, col) of each segment, the segment
    running along the last stored dimension) is contiguous and 16-byte aligned in shared memory."""
    if not operand.buf.is_shared:
        return False
    offsets = constant_offsets(operand.region)
    if offsets is None or len(operand.buf.shape) != 2 or len(operand.region.squeezed_extents()) != 2:
        return False
    phys = physical_offsets(operand.buf, ctx.layouts.get(operand.buf.name))
    rows = np.array([s[0] for s in starts]) + offsets[0]
    cols = np.array([s[1] for s in starts]) + offsets[1]
    if (cols + seg_elems > phys.shape[1]).any():
        return False
    first = phys[rows, cols]
    if (first % seg_elems).any():
        return False
    for e in range(1, seg_elems):
        if (phys[rows, cols + e] != first + e).any():
            return False
    return True


# --------------------------------------------------------------------------------------- mma.sync

def check_register_operand(op, region, layout: Fragment, need: np.ndarray, name: str) -> None:
    """``need[r, c]`` = the thread that must hold stored element (r, c) of a register operand (-1: none)."""
    holds = layout.thread_table() + (layout.thread_range or (0, 0))[0]       # (*shape, R)
    for idx in zip(*np.nonzero(need >= 0)):
        t = int(need[idx])
        if t not in holds[idx]:
            raise LoweringError(
                f"buffer {region.buffer.name}: {op.describe()}: operand {name} is in registers but its layout cannot "
                f"feed the instruction: thread {t} needs {name}{list(int(x) for x in idx)} in its registers, held by "
                f"thread(s) {sorted(set(int(x) for x in holds[idx]))}; give {region.buffer.name} the instruction's "
                f"operand fragment layout or stage it in shared memory")


def lower_gemm_mma(op, acc: Fragment, tiling: WarpTiling, inst: MmaInst, ctx: GemmContext,
                   verify: bool = True) -> tuple[tirx.Stmt, str]:
    """The mma.sync lowering of ``op`` (statement, one-line report)."""
    m, n = tiling.m, tiling.n
    a_sq = op.a.squeezed_extents()
    k = int(a_sq[0] if op.transpose_a else a_sq[1])
    if k % inst.k:
        raise LoweringError(f"{op.describe()}: K = {k} is not a multiple of the {inst.name} K step {inst.k}; "
                            f"pad K to a multiple of {inst.k}")
    ksteps = k // inst.k
    tx = ctx.rel_tx
    warp = tirx.floordiv(tx, WARP)
    lane = tirx.floormod(tx, WARP)
    A = _Operand(op, op.a, "A", op.transpose_a, ctx)
    B = _Operand(op, op.b, "B", op.transpose_b, ctx)
    if B.buf.is_fragment:
        raise LoweringError(f"buffer {B.buf.name}: {op.describe()}: operand B is in registers (local.fragment); "
                            f"tensor-core instructions read B from shared memory: stage {B.buf.name} in shared memory")
    kp = inst.pack
    per16 = 16 // dtype_bits(inst.a_dtype) if dtype_bits(inst.a_dtype) <= 16 else 0
    seg = 8 * per16 if per16 else 0              # elements in one 16-byte ldmatrix row

    # ---------------- where each operand comes from
    def enumerate_a():
        for w in range(tiling.warps):
            for a in range(tiling.na):
                for ks in range(ksteps):
                    yield w, tiling.row0(w, a), ks * inst.k

    def enumerate_b():
        for w in range(tiling.warps):
            for b in range(tiling.nb):
                for ks in range(ksteps):
                    yield w, tiling.col0(w, b), ks * inst.k

    a_mode = "registers" if A.buf.is_fragment else "lanes"
    if A.buf.is_fragment:
        lay = ctx.layouts.get(A.buf.name)
        if lay is None:
            raise LoweringError(f"fragment {A.buf.name}: {op.describe()} needs its layout but it has no layout "
                                f"annotation; run layout inference first")
        if not op.a.is_full:
            raise LoweringError(f"{op.describe()}: a register operand A ({A.buf.name}) must be used whole")
        if verify:
            need = np.full([int(s) for s in A.buf.shape], -1, dtype=np.int64)
            for w, r0, k0 in enumerate_a():
                for ln in range(WARP):
                    for r in range(inst.a_regs):
                        for p in range(kp):
                            rr, kk = inst.a_element(ln, r, p)
                            idx = (k0 + kk, r0 + rr) if op.transpose_a else (r0 + rr, k0 + kk)
                            need[idx] = WARP * w + ln
            check_register_operand(op, op.a, lay, need, "A")
    elif per16 and A.buf.is_shared and (A.k_contiguous or per16 == 1):
        if A.k_contiguous:      # rows along M, 16-byte segments along K
            starts = [(r0 + i, k0 + c) for _, r0, k0 in enumerate_a() for i in range(16) for c in range(0, inst.k, seg)]
        else:                   # stored [K, M]: segments along M
            starts = [(k0 + i, r0 + c) for _, r0, k0 in enumerate_a() for i in range(inst.k) for c in (0, 8)]
        if _ldmatrix_ok(A, ctx, starts, seg):
            a_mode = "ldmatrix"
    b_mode = "lanes"
    if per16 and B.buf.is_shared and (B.k_contiguous or per16 == 1):
        if B.k_contiguous:      # stored [N, K]
            starts = [(c0 + i, k0 + c) for _, c0, k0 in enumerate_b() for i in range(8) for c in range(0, inst.k, seg)]
        else:                   # stored [K, N]
            starts = [(k0 + i, c0) for _, c0, k0 in enumerate_b() for i in range(inst.k)]
        if _ldmatrix_ok(B, ctx, starts, seg):
            b_mode = "ldmatrix"

    # ---------------- registers
    na, nb = tiling.na, tiling.nb
    ra, rb = inst.a_regs, inst.b_regs
    a_regs = tirx.decl_buffer([na * ra], inst.reg_dtype, name=ctx.fresh("mma_a"), scope="local")
    b_regs = tirx.decl_buffer([nb * rb], inst.reg_dtype, name=ctx.fresh("mma_b"), scope="local")
    ks_var = tirx.Var(ctx.fresh("ks"), "int32")
    k0 = ks_var * inst.k
    stmts: list = []

    def unroll(name, extent, body_fn):
        v = tirx.Var(ctx.fresh(name), "int32")
        return tirx.For(v, 0, extent, tirx.ForKind.UNROLLED, body_fn(v))

    def lane_loads(regs, block, count: int, element, load, which: str):
        """Registers ``block * count ..`` of ``regs`` filled element by element: ``element(lane, reg, part)`` is
        where the instruction's table puts each element in the block, ``load`` reads it from the operand."""
        out = []
        for r in range(count):
            vals = [load(*element(lane, r, p)) for p in range(kp)]
            out.append(tirx.BufferStore(regs, _register(vals, inst, which), [block * count + r]))
        return tirx.SeqStmt(out) if len(out) > 1 else out[0]

    def load_a(a):
        r0 = tiling.row0(warp, a)
        if a_mode == "ldmatrix":
            if A.k_contiguous:
                addr = A.storage_index(r0 + lane % 8 + 8 * ((lane // 8) % 2), k0 + 4 * kp * (lane // 16))
                text = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
            else:
                addr = A.storage_index(r0 + 8 * ((lane // 8) % 2), k0 + 8 * (lane // 16) + lane % 8)
                text = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
            ptr = tirx.address_of(tirx.BufferLoad(A.buf.var, _region_index(A.region, addr)))
            return ptx_call(text, *[tirx.BufferLoad(a_regs, [a * 4 + r]) for r in range(4)], ptr)
        return lane_loads(a_regs, a, ra, inst.a_element, lambda rr, kk: A.load(r0 + rr, k0 + kk), "A")

    def ldmatrix_b(b, tiles: int):
        """``tiles`` (1 or 2) adjacent 8-column B blocks from ``b`` on in one ldmatrix (.x2 / .x4): lanes
        16t..16t+15 address block ``b + t``, its matrices landing in registers 2t and 2t + 1."""
        sub = lane % 16
        c0 = tiling.col0(warp, b) + (8 * (lane // 16) if tiles == 2 else 0)
        if B.k_contiguous:     # stored [N, K]: plain ldmatrix, rows along N
            addr = B.storage_index(k0 + 4 * kp * (sub // 8), c0 + sub % 8)
        else:                  # stored [K, N]: transposed load, rows along K
            addr = B.storage_index(k0 + 8 * (sub // 8) + sub % 8, c0)
        text = (f"ldmatrix.sync.aligned.m8n8.x{2 * tiles}" + ("" if B.k_contiguous else ".trans")
                + ".shared.b16")
        ptr = tirx.address_of(tirx.BufferLoad(B.buf.var, _region_index(B.region, addr)))
        return ptx_call(text, *[tirx.BufferLoad(b_regs, [b * 2 + r]) for r in range(2 * tiles)], ptr)

    def load_b(b):
        c0 = tiling.col0(warp, b)
        if b_mode == "ldmatrix":
            return ldmatrix_b(b, 1)
        return lane_loads(b_regs, b, rb, inst.b_element, lambda kk, cc: B.load(k0 + kk, c0 + cc), "B")

    def load_all_b():
        """Every B block of the K step: adjacent pairs by ldmatrix.x4 (half the instructions of .x2), an odd
        last block by .x2; element loads block by block."""
        if b_mode != "ldmatrix" or nb < 2:
            return unroll("nb", nb, load_b)
        pairs = unroll("nbp", nb // 2, lambda p: ldmatrix_b(2 * p, 2))
        return pairs if nb % 2 == 0 else tirx.SeqStmt([pairs, load_b(nb - 1)])

    d_buf = op.c.buffer.var
    # f32 accumulators bind directly; f16 pairs (f16x2) and s32 values travel in u32 registers
    direct = inst.acc_dtype in ("float32", "float64")
    nc = inst.c_elems
    nregs = nc // inst.c_pack
    c_tmp = None if direct else tirx.decl_buffer([nregs], "uint32", name=ctx.fresh("mma_c"), scope="local")

    def acc_ref(a, b, e):
        rr, cc = inst.c_element(lane, e)
        return tirx.BufferLoad(d_buf, _region_index(op.c, [tiling.row0(warp, a) + rr, tiling.col0(warp, b) + cc]))

    def issue(a, b):
        regs_a = [tirx.BufferLoad(a_regs, [a * ra + r]) for r in range(ra)]
        regs_b = [tirx.BufferLoad(b_regs, [b * rb + r]) for r in range(rb)]
        if direct:
            d = [acc_ref(a, b, e) for e in range(nc)]
            return ptx_call(inst.ptx, *d, *regs_a, *regs_b, *d)
        if inst.c_pack == 2:
            pack = [tirx.BufferStore(c_tmp, pack_elements([acc_ref(a, b, 2 * r), acc_ref(a, b, 2 * r + 1)],
                                                          "float16"), [r]) for r in range(nregs)]
            unpack = [tirx.BufferStore(d_buf, unpack_element(tirx.BufferLoad(c_tmp, [e // 2]), e % 2, "float16"),
                                       list(acc_ref(a, b, e).indices)) for e in range(4)]
        else:
            pack = [tirx.BufferStore(c_tmp, tirx.reinterpret("uint32", acc_ref(a, b, e)), [e]) for e in range(4)]
            unpack = [tirx.BufferStore(d_buf, tirx.reinterpret(inst.acc_dtype, tirx.BufferLoad(c_tmp, [e])),
                                       list(acc_ref(a, b, e).indices)) for e in range(4)]
        d = [tirx.BufferLoad(c_tmp, [r]) for r in range(nregs)]
        return tirx.SeqStmt(pack + [ptx_call(inst.ptx, *d, *regs_a, *regs_b, *d)] + unpack)

    body = tirx.SeqStmt([
        unroll("ma", na, load_a),
        load_all_b(),
        unroll("ma", na, lambda a: unroll("nb", nb, lambda b: issue(a, b))),
    ])
    stmts += [tirx.AllocBuffer(a_regs), tirx.AllocBuffer(b_regs)]
    if c_tmp is not None:
        stmts.append(tirx.AllocBuffer(c_tmp))
    stmts.append(tirx.For(ks_var, 0, ksteps, tirx.ForKind.SERIAL, body))
    b_how = "ldmatrix.x4" if b_mode == "ldmatrix" and nb >= 2 else b_mode
    report = (f"{inst.name} x{ksteps * na * nb} per warp ({tiling.describe()}); A: {a_mode}, B: {b_how}")
    return tirx.SeqStmt(stmts), report


def accumulator_cells(tiling: WarpTiling, inst: MmaInst, op, ctx: GemmContext, body_fn) -> tirx.Stmt:
    """``body_fn(index)`` for every accumulator element this thread holds (index: buffer indices)."""
    warp = tirx.floordiv(ctx.rel_tx, WARP)
    lane = tirx.floormod(ctx.rel_tx, WARP)
    a = tirx.Var(ctx.fresh("ca"), "int32")
    b = tirx.Var(ctx.fresh("cb"), "int32")
    e = tirx.Var(ctx.fresh("ce"), "int32")
    rr, cc = inst.c_element(lane, e)
    idx = _region_index(op.c, [tiling.row0(warp, a) + rr, tiling.col0(warp, b) + cc])
    body = body_fn(idx, (a, b, e))
    body = tirx.For(e, 0, inst.c_elems, tirx.ForKind.UNROLLED, body)
    body = tirx.For(b, 0, tiling.nb, tirx.ForKind.UNROLLED, body)
    return tirx.For(a, 0, tiling.na, tirx.ForKind.UNROLLED, body)


def choose_instruction(op, target) -> MmaInst:
    """The mma.sync instruction for the gemm's dtypes, or a LoweringError listing what works."""
    sig = (str(op.a.buffer.dtype), str(op.b.buffer.dtype), str(op.c.buffer.dtype))
    inst = mma_instruction(*sig)
    if inst is None:
        valid = ", ".join(f"{a} x {b} -> {c}" for a, b, c in MMA_SIGNATURES)
        raise LoweringError(f"{op.describe()}: no tensor-core instruction multiplies {sig[0]} x {sig[1]} into a "
                            f"{sig[2]} accumulator; supported: {valid} (cast the operands, or opt in to the scalar "
                            f"gemm with the function attribute {GEMM_FALLBACK_ATTR}=\"scalar\")")
    if sm_version(target) < 80:
        raise LoweringError(f"{op.describe()}: tensor-core lowering needs sm_80 or newer (target {target}); opt in to "
                            f"the scalar gemm with the function attribute {GEMM_FALLBACK_ATTR}=\"scalar\"")
    need = max(MMA_MIN_SM.get(sig[0], 80), MMA_MIN_SM.get(sig[1], 80))
    if sm_version(target) < need:
        raise LoweringError(f"{op.describe()}: mma.sync with {sig[0]} x {sig[1]} operands needs sm_{need} or newer "
                            f"(target {target}); target sm_{need}+ or cast the operands to float16")
    return inst
