"""Our tensor-core code, replayed under CuTe's definitions of the instructions, element by element.

``maint/tc_trace.py`` says what each instruction of a lowered kernel got (registers and what was packed into
them, ldmatrix row addresses, descriptor bits); this module gives those events CuTe's meaning
(``maint/cute_host.py``) and checks that every instruction computes a block of the gemm the kernel states:

- ldmatrix (``SM75_U32x{1,2,4}_LDSM_N``, ``SM75_U16x{2,4,8}_LDSM_T``): which shared element lands in which
  register half, from CuTe's source/destination layouts;
- mma.sync (``SM80_16x8x16_F32F16F16F32_TN``, ...) and wgmma (``SM90_64xNx16_..._RS``): for every thread and
  value of CuTe's A, B and C layouts, the register must hold element (row0 + m, k0 + k) of A, (k0 + k, col0 + n)
  of B and (row0 + m, col0 + n) of the accumulator, with one (row0, col0, k0) per warp (warpgroup) and
  instruction, and every accumulator block must see each K step exactly once;
- f16 accumulators: packed into and unpacked from 32-bit registers in CuTe's order (``recast<uint32_t>`` of
  ``half_t``);
- wgmma descriptors: the tile a descriptor names must be the CuTe GMMA layout atom its swizzle mode claims
  (``Layout_K_SW128_Atom<T>`` ...) tiled over the stored tile, at every element, and the descriptor (start
  address and its advance per K step, LBO, SBO, base offset, layout type) must equal ``make_gmma_desc`` of the
  same block of that CuTe tile.

A mismatch is a line of text naming the case, the instruction and what differs; none means CuTe agrees.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from maint.cute_host import Requests, TileRequest
from maint.tc_trace import Issue, trace

__all__ = ["CaseTrace", "prepare", "requests_for", "check", "mma_atom", "gmma_atom", "ldsm_atom", "MODE_ATOM"]

_TYPE = {"f32": "F32", "f16": "F16", "bf16": "BF16", "tf32": "TF32", "s8": "S8", "u8": "U8", "s32": "S32",
         "f64": "F64", "e4m3": "E4M3", "e5m2": "E5M2"}
_BITS = {"f32": 32, "f16": 16, "bf16": 16, "tf32": 32, "s8": 8, "u8": 8, "s32": 32, "f64": 64, "e4m3": 8, "e5m2": 8}
#: descriptor layout-type code -> CuTe GMMA atom
MODE_ATOM = {1: "SW128", 2: "SW64", 3: "SW32", 0: "INTER"}
_WIDTH = {"SW128": 128, "SW64": 64, "SW32": 32, "INTER": 16}


def mma_atom(shape: str, d: str, a: str, b: str, c: str) -> str:
    """CuTe's op name of ``mma.sync.aligned.<shape>.row.col.<d>.<a>.<b>.<c>``."""
    m, n, k = (int(x) for x in re.findall(r"\d+", shape))
    arch = "SM89" if a in ("e4m3", "e5m2") else "SM80"
    return f"{arch}_{m}x{n}x{k}_{_TYPE[d]}{_TYPE[a]}{_TYPE[b]}{_TYPE[c]}_TN"


def gmma_atom(shape: str, d: str, a: str, b: str) -> str:
    """CuTe's register-A (RS) op of ``wgmma.mma_async.<shape>.<d>.<a>.<b>`` (its C layout is the SS form's)."""
    m, n, k = (int(x) for x in re.findall(r"\d+", shape))
    name = f"SM90_{m}x{n}x{k}_{_TYPE[d]}{_TYPE[a]}{_TYPE[b]}_RS"
    return name + ("<GMMA::Major::K,GMMA::Major::K>" if _BITS[a] == 16 else "_TN<>")


def ldsm_atom(tokens: list) -> str:
    count = {"x1": 1, "x2": 2, "x4": 4}[next(t for t in tokens if t in ("x1", "x2", "x4"))]
    return f"SM75_U16x{2 * count}_LDSM_T" if "trans" in tokens else f"SM75_U32x{count}_LDSM_N"


def _json_key(name: str) -> str:
    return name.replace("GMMA::Major::", "").replace("<>", "")


# ------------------------------------------------------------------ the kernel's buffers

class _Buffers:
    """Stored coordinates of physical elements: shared tiles through their layout (one stage = one layout
    tile), fragments through (thread, register)."""

    def __init__(self, lowered):
        from tilelayout import Fragment, layout_from_dict
        self.names: list = []
        self.layouts: dict = {}
        self.inverse: dict = {}
        self.tile: dict = {}
        self.phys: dict = {}
        for name, d in (lowered.attrs.get("tilelayout.layouts") or {}).items():
            lay = layout_from_dict({str(k): _plain(v) for k, v in d.items()})
            name = str(name)
            self.layouts[name] = lay
            shape = [int(s) for s in lay.input_shape]
            if isinstance(lay, Fragment):
                threads = np.asarray(lay.thread_table(), dtype=np.int64) + (lay.thread_range or (0, 0))[0]
                slots = _flat_index(lay)
                if slots.ndim == len(shape):
                    slots = np.broadcast_to(slots[..., None], threads.shape)
                nthreads = int(threads.max()) + 1
                inv = np.full((nthreads, int(slots.max()) + 1), -1, dtype=np.int64)
                cells = np.arange(int(np.prod(shape))).reshape(shape)
                for rep in range(threads.shape[-1]):
                    inv[threads[..., rep].ravel(), slots[..., rep].ravel()] = cells.ravel()
                self.inverse[name] = inv
            else:
                phys = _flat_index(lay)
                self.phys[name] = phys
                size = int(np.prod([int(s) for s in lay.output_shape]))
                inv = np.full(size, -1, dtype=np.int64)
                inv[phys.ravel()] = np.arange(phys.size)
                self.inverse[name] = inv
                self.tile[name] = size

        # a pipelined loop's staged tiles in one allocation (``stage_arena``): each member's range of it
        self.arenas: dict = {str(k): [(str(m["tile"]), int(m["base"]), int(m["stride"])) for m in v]
                             for k, v in (lowered.attrs.get("tilelayout.stage_arenas") or {}).items()}

    def member(self, name: str, elem: int) -> tuple:
        """(tile, base element) of element ``elem`` of buffer ``name``: the arena member it lies in, or the buffer
        itself at base 0."""
        inside = [(tile, base) for tile, base, _ in self.arenas.get(name, []) if elem >= base]
        return inside[-1] if inside else (name, 0)

    def ordinal(self, name: str) -> int:
        if name not in self.names:
            self.names.append(name)
        return self.names.index(name)

    def tags(self, buf, index: np.ndarray, threads: np.ndarray) -> np.ndarray:
        """Tag (ordinal, stage, stored row, stored col) of element ``index`` of ``buf`` read by ``threads``."""
        name = str(buf.name)
        if name in self.arenas:
            out = np.full(index.shape, -1, dtype=np.int64)
            for tile, base, stride in self.arenas[name]:
                mine = index >= base
                out = np.where(mine, self._staged_tags(tile, index - base, stride), out)
            return out
        if name not in self.inverse or len(self.layouts[name].input_shape) != 2:
            return np.full(index.shape, -1, dtype=np.int64)
        cols = int(self.layouts[name].input_shape[1])
        if name in self.tile:
            stage, local = np.divmod(index, self.tile[name])
            cell = self.inverse[name][np.clip(local, 0, self.tile[name] - 1)]
        else:
            inv = self.inverse[name]
            ok = (threads < inv.shape[0]) & (index < inv.shape[1]) & (index >= 0)
            cell = np.where(ok, inv[np.clip(threads, 0, inv.shape[0] - 1), np.clip(index, 0, inv.shape[1] - 1)], -1)
            stage = np.zeros_like(index)
        return self._tag(name, stage, cell, cols)

    def _staged_tags(self, name: str, local: np.ndarray, stride: int) -> np.ndarray:
        if name not in self.tile:
            return np.full(local.shape, -1, dtype=np.int64)
        stage, within = np.divmod(local, stride)
        cell = np.where(within < self.tile[name], self.inverse[name][np.clip(within, 0, self.tile[name] - 1)], -1)
        return self._tag(name, stage, cell, int(self.layouts[name].input_shape[1]))

    def _tag(self, name: str, stage, cell, cols: int) -> np.ndarray:
        r, c = np.divmod(cell, cols)
        tag = (self.ordinal(name) << 48) | (stage << 40) | (r << 20) | c
        return np.where(cell >= 0, tag, -1)


def _plain(v):
    """An FFI value of a layout dict as plain Python."""
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if hasattr(v, "items"):
        return {str(k): _plain(x) for k, x in v.items()}
    if hasattr(v, "__iter__"):
        return [_plain(x) for x in v]
    return int(v) if hasattr(v, "value") else v


def _flat_index(lay) -> np.ndarray:
    table = np.asarray(lay.table(), dtype=np.int64)
    out = [int(s) for s in lay.output_shape]
    flat = np.zeros(table.shape[:-1], dtype=np.int64)
    for k, extent in enumerate(out):
        flat = flat * extent + table[..., k]
    return flat


def _untag(tag: np.ndarray):
    return tag >> 48, (tag >> 40) & 0xFF, (tag >> 20) & 0xFFFFF, tag & 0xFFFFF


# ------------------------------------------------------------------ the gemms

@dataclass
class _Gemm:
    a: str
    b: str
    c: str
    ta: bool
    tb: bool
    off_a: tuple
    off_b: tuple
    off_c: tuple
    k: int


def _gemms(func) -> list:
    from tilelayout.passes.inference.frontend import GemmOp, build_op_graph
    out = []
    for op in build_op_graph(func).ops:
        if not isinstance(op, GemmOp):
            continue

        def offs(region):
            return tuple(int(o) if isinstance(o, int) else int(getattr(o, "value", 0)) for o in region.offsets)
        a_sq = op.a.squeezed_extents()
        out.append(_Gemm(str(op.a.buffer.name), str(op.b.buffer.name), str(op.c.buffer.name), bool(op.transpose_a),
                         bool(op.transpose_b), offs(op.a), offs(op.b), offs(op.c),
                         int(a_sq[0] if op.transpose_a else a_sq[1])))
    return out


@dataclass
class CaseTrace:
    """One lowered variant, traced: what ``check`` compares with CuTe."""

    label: str
    lowered: object
    gemms: list
    regions: list
    buffers: _Buffers = None
    tiles: dict = field(default_factory=dict)     # (buffer, mode, which) -> list of TileRequest candidates


def prepare(label: str, func, lowered) -> CaseTrace:
    ct = CaseTrace(label, lowered, _gemms(func), trace(lowered))
    ct.buffers = _Buffers(lowered)
    return ct


def _tile_candidates(bufs: _Buffers, name: str, bits: int, k_major: bool, slice_mn: int, slice_k: int,
                     atoms=tuple(_WIDTH)) -> list:
    """CuTe tile requests for a stored tile read by descriptors: the atom kinds ``atoms`` where they tile it,
    atoms placed along MN first (CuTe's default) and, where both directions repeat, along K first."""
    lay = bufs.layouts.get(name)
    if lay is None or len(lay.input_shape) != 2:
        return []
    rows, cols = (int(s) for s in lay.input_shape)
    mn, k = (rows, cols) if k_major else (cols, rows)
    out = []
    for atom in atoms:
        width = _WIDTH[atom]
        per = width * 8 // bits            # elements along the atom's contiguous dimension
        amn, ak = (8, per) if k_major else (per, 8)
        if mn % amn or k % ak or mn % slice_mn or k % slice_k:
            continue
        orders = ["MN", "K"] if mn > amn and k > ak else ["MN"]
        for order in orders:
            out.append(TileRequest(bits, "K" if k_major else "MN", atom, mn, k, order, slice_mn, slice_k))
    return out


def requests_for(traces: list, extra: Requests | None = None) -> Requests:
    """Everything CuTe must evaluate to check ``traces`` (and ``extra``)."""
    req = extra or Requests()
    for ct in traces:
        for region in ct.regions:
            for ev in region.events:
                if not isinstance(ev, Issue) or ev.name == "tirx.ptx.ldmatrix":
                    continue
                shape, types = _shape_types(ev)
                if ev.name.startswith("tirx.ptx.mma"):
                    req.mma.add(mma_atom(shape, *types))
                elif ev.name.startswith("tirx.ptx.wgmma"):
                    req.gmma.add(gmma_atom(shape, *types))
                    gemm = _gemm_of_wgmma(ct, ev, region.threads)
                    if gemm is None:
                        continue
                    n, k = (int(x) for x in re.findall(r"\d+", shape)[1:])
                    for which, op in (("A", _desc_operand(ev, 0)), ("B", _desc_operand(ev, 1))):
                        if op is None:
                            continue
                        bits = _BITS[types[1] if which == "A" else types[2]]
                        name = desc_member(ct.buffers, op, bits, region.threads)[0]
                        k_major = (not gemm.ta) if which == "A" else gemm.tb
                        atom = MODE_ATOM[int(op[2][0]) >> 62]      # the atom the descriptor claims
                        cands = _tile_candidates(ct.buffers, name, bits, k_major, 64 if which == "A" else n, k,
                                                 (atom,))
                        ct.tiles.setdefault((name, which, shape), [])
                        ct.tiles[(name, which, shape)] += [c for c in cands if c not in ct.tiles[(name, which, shape)]]
                        req.tiles.update(cands)
    return req


def _shape_types(ev: Issue):
    shape = next(t for t in ev.tokens if re.fullmatch(r"m\d+n\d+k\d+", t))
    if ev.name.startswith("tirx.ptx.mma"):
        col = ev.tokens.index("col")
        return shape, [t for t in ev.tokens[col + 1:] if t and t != "satfinite"][:4]
    rest = ev.tokens[ev.tokens.index(shape) + 1:]
    return shape, [t for t in rest if t][:3]


def desc_member(bufs: _Buffers, op, bits: int, threads) -> tuple:
    """(tile, base element) a descriptor operand reads: its buffer, or the member of an arena (``stage_arena``)
    the start address of the first of ``threads`` lies in."""
    _, buf, values = op
    name = str(buf.name)
    if name not in bufs.arenas or not len(threads):
        return name, 0
    start = (int(values[threads[0]]) & ((1 << 14) - 1)) << 4
    return bufs.member(name, start // (bits // 8))


def _desc_operand(ev: Issue, which: int):
    descs = [o for o in ev.operands if o[0] == "desc"]
    if ev.name.endswith("_rs"):
        return descs[0] if which == 1 and descs else None
    return descs[which] if len(descs) > which else None


def _gemm_of_wgmma(ct: CaseTrace, ev: Issue, threads):
    b = _desc_operand(ev, 1)
    if b is None:
        return None
    shape, types = _shape_types(ev)
    names = [g for g in ct.gemms if g.b == desc_member(ct.buffers, b, _BITS[types[2]], threads)[0]]
    if ev.name.endswith("_ss"):
        a = _desc_operand(ev, 0)
        names = [g for g in names if g.a == desc_member(ct.buffers, a, _BITS[types[1]], threads)[0]]
    return names[0] if len(names) == 1 else None


def check(traces: list, cute: dict) -> list:
    """Every mismatch between ``traces`` and CuTe's facts ``cute`` (``maint/cute_replay.py``)."""
    from maint.cute_replay import check as replay
    return replay(traces, cute)
