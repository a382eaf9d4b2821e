"""The replay of ``maint/cute_oracle.py``: a traced kernel's tensor-core events given CuTe's meaning."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from maint.cute_oracle import _BITS, CaseTrace, _shape_types, _untag, ldsm_atom, mma_atom
from maint.tc_trace import Issue, Store, Unpack

__all__ = ["check"]


class _Replay:
    def __init__(self, ct: CaseTrace, cute: dict, region):
        self.ct, self.cute, self.region = ct, cute, region
        self.bufs = ct.buffers
        self.n = max(int(region.threads.max()) + 1 if len(region.threads) else 0, 1)
        self.threads = np.arange(self.n)
        self.state: dict = {}
        self.problems: list = []
        self.ksteps: dict = defaultdict(list)
        self.k_of: dict = {}
        pack = cute["f16_pack"]
        # CuTe's order of two 16-bit elements in a 32-bit register: element 0 in the low half or the high half
        self.low_first = int(pack[0]) & 0xFFFF == 0x1111
        unpack = cute["f16_unpack"]
        if (int(unpack[0]) == 0x4567) != self.low_first:
            self.problems.append("CuTe's recast of half_t <-> uint32_t is not one order both ways")

    def fail(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(f"{self.ct.label} {self.region.binding}: {text}")

    def regs(self, buf) -> np.ndarray:
        name = str(buf.name)
        if name not in self.state:
            self.state[name] = np.full((self.n, int(buf.shape[0]), 8), -1, dtype=np.int64)
        return self.state[name]

    # ---------------------------------------------------------------- events
    def run(self) -> list:
        for ev in self.region.events:
            if isinstance(ev, Store):
                self.store(ev)
            elif isinstance(ev, Unpack):
                self.unpack(ev)
            elif ev.name == "tirx.ptx.ldmatrix":
                self.ldmatrix(ev)
            elif ev.name.startswith("tirx.ptx.mma"):
                self.mma(ev)
            else:
                self.wgmma(ev)
        for (c, group, origin), ks in sorted(self.ksteps.items(), key=lambda kv: str(kv[0])):
            gemm_k, step = self.k_of[c]
            if sorted(ks) != list(range(0, gemm_k, step)):
                self.fail(f"accumulator {c} block {origin} of warp(group) {group}: K steps {sorted(ks)} instead of "
                          f"each of {list(range(0, gemm_k, step))} once")
        return self.problems

    def store(self, ev: Store) -> None:
        regs = self.regs(ev.buffer)
        for offset, src, index in ev.parts:
            bits = _dtype_bits(src)
            part = offset // bits if bits < 32 else 0
            regs[self.threads, ev.index[:self.n], part] = self.bufs.tags(src, index[:self.n], self.threads)

    def unpack(self, ev: Unpack) -> None:
        regs = self.regs(ev.source)
        half = ev.shift // 16
        part = half if self.low_first else 1 - half
        have = regs[self.threads, ev.source_index[:self.n], part]
        want = self.bufs.tags(ev.buffer, ev.index[:self.n], self.threads)
        bad = (have != want)[self.region.threads]
        if bad.any():
            t = int(self.region.threads[np.argmax(bad)])
            self.fail(f"f16 accumulator unpacked wrongly: thread {t} writes {_show(self.bufs, want[t])} from half "
                      f"{half} of {ev.source.name}, which holds {_show(self.bufs, have[t])} in CuTe's order")

    def ldmatrix(self, ev: Issue) -> None:
        atom = self.cute["ldsm"][ldsm_atom(ev.tokens)]
        src, dst = np.asarray(atom["src"]), np.asarray(atom["dst"])
        regs = [o for o in ev.operands if o[0] == "reg"]
        _, buf, addr = next(o for o in ev.operands if o[0] == "addr")
        per16 = 16 // _dtype_bits(buf)
        row_thread = {}
        for t in range(src.shape[0]):
            row_thread.setdefault(int(src[t, 0]) // 128, t)
        warp_base = (self.threads // 32) * 32
        lane = self.threads % 32
        for v in range(0, dst.shape[1], 16):
            s = dst[lane, v]
            row, elem = s // 128, (s % 128) // 16
            owner = warp_base + np.vectorize(row_thread.get)(row)
            reg, half = v // 32, (v % 32) // 16
            if reg >= len(regs):
                self.fail(f"{ldsm_atom(ev.tokens)} fills {dst.shape[1] // 32} registers, the call names {len(regs)}")
                return
            _, rbuf, ridx = regs[reg]
            target = self.regs(rbuf)
            for q in range(per16):
                element = addr[owner] + elem * per16 + q
                target[self.threads, ridx[:self.n], half * per16 + q] = self.bufs.tags(buf, element, self.threads)

    # ---------------------------------------------------------------- operands
    def operand_tags(self, ops: list, table: np.ndarray, pack: int, lanes: np.ndarray) -> np.ndarray:
        """tags[thread, value] of CuTe value ``v`` = register ``v // pack``, element ``v % pack``."""
        out = np.full((self.n, table.shape[1]), -1, dtype=np.int64)
        for v in range(table.shape[1]):
            reg, part = divmod(v, pack)
            if pack == 2 and not self.low_first:
                part = 1 - part
            kind, buf, idx = ops[reg]
            if str(buf.name) in self.bufs.layouts:       # the fragment register itself
                out[:, v] = self.bufs.tags(buf, idx[:self.n], self.threads)
            else:
                out[:, v] = self.regs(buf)[self.threads, idx[:self.n], part]
        return out

    def origin(self, tags, table, rows: int, which: str, gemm, group: np.ndarray, what: str):
        """(row0, col0) of the block each group of threads holds, or None (a mismatch reported)."""
        names, _, r, c = _untag(tags)
        active = self.region.threads
        if (tags[active] < 0).any():
            t = int(active[np.argmax((tags[active] < 0).any(axis=1))])
            self.fail(f"{what}: thread {t} has a register CuTe reads that holds no traced element")
            return None
        stored = {"A": gemm.a, "B": gemm.b, "C": gemm.c}[which]
        want = self.bufs.ordinal(stored)
        if (names[active] != want).any():
            held = sorted(set(self.bufs.names[int(x)] for x in names[active].ravel()))
            self.fail(f"{what}: registers hold elements of {held}, not of {stored}")
            return None
        off = {"A": gemm.off_a, "B": gemm.off_b, "C": gemm.off_c}[which]
        r, c = r - off[0], c - off[1]
        transposed = {"A": gemm.ta, "B": gemm.tb, "C": False}[which]
        if transposed:
            r, c = c, r
        # logical (row, col) of the gemm operand: A (m, k), B (k, n), C (m, n); CuTe's coordinate of value v
        lo, hi = table % rows, table // rows
        if which == "B":
            lo, hi = hi, lo                      # CuTe's B is (n, k): (k, n) = (hi, lo)
        d0 = r - lo[self.threads % table.shape[0]]
        d1 = c - hi[self.threads % table.shape[0]]
        out = {}
        for g in np.unique(group[active]):
            members = active[group[active] == g]
            o0, o1 = np.unique(d0[members]), np.unique(d1[members])
            if len(o0) != 1 or len(o1) != 1:
                t = int(members[0])
                self.fail(f"{what}: warp(group) {int(g)} holds no single block in CuTe's {which} layout "
                          f"(thread {t} value 0 holds {_show(self.bufs, tags[t, 0])}; offsets {o0[:4]} x {o1[:4]})")
                return None
            out[int(g)] = (int(o0[0]), int(o1[0]))
        return out

    def gemm_for(self, names: dict):
        for g in self.ct.gemms:
            if all(getattr(g, k) == v for k, v in names.items() if v is not None):
                return g
        return None

    def first_name(self, tags) -> str | None:
        active = tags[self.region.threads]
        ok = active[active >= 0]
        return self.bufs.names[int(ok[0] >> 48)] if len(ok) else None

    # ---------------------------------------------------------------- instructions
    def mma(self, ev: Issue) -> None:
        shape, types = _shape_types(ev)
        name = mma_atom(shape, *types)
        atom = self.cute["mma"].get(name)
        if atom is None:
            self.fail(f"CuTe has no atom {name}")
            return
        M, N, K = atom["shape"]
        A, B, C = (np.asarray(atom[x]) for x in "ABC")
        d_t, a_t, b_t = types[0], types[1], types[2]
        pa, pb = max(1, 32 // _BITS[a_t]), max(1, 32 // _BITS[b_t])
        pc = 2 if d_t == "f16" else 1
        nd, ra, rb = C.shape[1] // pc, A.shape[1] // pa, B.shape[1] // pb
        regs = [o for o in ev.operands if o[0] == "reg"]
        if len(regs) != 2 * nd + ra + rb:
            self.fail(f"{name}: {len(regs)} register operands, CuTe's atom has {2 * nd + ra + rb}")
            return
        d, a, b, c = regs[:nd], regs[nd:nd + ra], regs[nd + ra:nd + ra + rb], regs[nd + ra + rb:]
        if any(str(x[1].name) != str(y[1].name) or not np.array_equal(x[2], y[2]) for x, y in zip(d, c)):
            self.fail(f"{name}: the accumulator read (C) and written (D) are different registers")
        lanes = self.threads % 32
        ta, tb, tc = (self.operand_tags(a, A, pa, lanes), self.operand_tags(b, B, pb, lanes),
                      self.operand_tags(d, C, pc, lanes))
        group = self.threads // 32
        gemm = self.gemm_for({"c": self.first_name(tc), "a": self.first_name(ta), "b": self.first_name(tb)})
        if gemm is None:
            self.fail(f"{name}: its registers belong to no gemm of the kernel (C {self.first_name(tc)}, "
                      f"A {self.first_name(ta)}, B {self.first_name(tb)})")
            return
        oc = self.origin(tc, C, M, "C", gemm, group, f"{name} accumulator")
        oa = self.origin(ta, A, M, "A", gemm, group, f"{name} A")
        ob = self.origin(tb, B, N, "B", gemm, group, f"{name} B")
        self.block(name, gemm, oc, oa, ob, K)

    def block(self, name, gemm, oc, oa, ob, K) -> None:
        """One instruction per group: C, A and B blocks must meet, and the K step is recorded."""
        if oc is None or oa is None or ob is None:
            return
        self.k_of[gemm.c] = (gemm.k, K)
        for g, (row0, col0) in oc.items():
            if g not in oa or g not in ob:
                self.fail(f"{name} warp(group) {g}: no A or B block")
                continue
            (ar, ak), (bk, bc) = oa[g], ob[g]
            if ar != row0 or bc != col0 or ak != bk:
                self.fail(f"{name} warp(group) {g}: C block at ({row0}, {col0}) but A block at ({ar}, {ak}) and B "
                          f"block at ({bk}, {bc}) (CuTe's layouts)")
                continue
            self.ksteps[(gemm.c, g, (row0, col0))].append(ak)

    def wgmma(self, ev: Issue) -> None:
        from maint.cute_wgmma import wgmma_issue
        wgmma_issue(self, ev)


def _dtype_bits(buf) -> int:
    import tvm
    return tvm.DataType(str(buf.dtype)).bits


def _show(bufs, tag) -> str:
    tag = int(tag)
    if tag < 0:
        return "nothing"
    o, s, r, c = (int(x) for x in _untag(np.int64(tag)))
    return f"{bufs.names[o]}[{r}, {c}]" + (f" (stage {s})" if s else "")


def check(traces: list, cute: dict) -> list:
    """Every mismatch between the traced kernels and CuTe (empty: CuTe agrees everywhere)."""
    out = []
    for ct in traces:
        for region in ct.regions:
            out += _Replay(ct, cute, region).run()
    return out
