"""wgmma under CuTe's meaning (part of ``maint/cute_replay.py``): accumulator and register-A layouts of CuTe's
GMMA atoms, and every shared-memory descriptor against CuTe's GMMA layout atoms and ``make_gmma_desc``."""
from __future__ import annotations

import numpy as np

from maint.cute_oracle import _BITS, MODE_ATOM, _json_key, _shape_types, desc_member, gmma_atom

__all__ = ["wgmma_issue", "FIELDS", "fields"]

#: descriptor fields as the PTX ISA places them: name -> (shift, bits)
FIELDS = {"start address": (0, 14), "leading byte offset": (16, 14), "stride byte offset": (32, 14),
          "base offset": (49, 3), "layout type": (62, 2)}


def fields(desc: int) -> dict:
    return {k: (desc >> s) & ((1 << b) - 1) for k, (s, b) in FIELDS.items()}


def wgmma_issue(rp, ev) -> None:
    shape, types = _shape_types(ev)
    name = gmma_atom(shape, *types)
    atom = rp.cute["gmma"].get(_json_key(name))
    if atom is None:
        rp.fail(f"CuTe has no atom {name}")
        return
    M, N, K = atom["shape"]
    A, C = np.asarray(atom["A"]), np.asarray(atom["C"])
    d_t, a_t, b_t = types
    pc = 2 if d_t == "f16" else 1
    pa = 32 // _BITS[a_t]
    nd = C.shape[1] // pc
    rs = ev.name.endswith("_rs")
    regs = [o for o in ev.operands if o[0] == "reg"]
    descs = [o for o in ev.operands if o[0] == "desc"]
    imms = [o[1] for o in ev.operands if o[0] == "imm"]
    if len(regs) != nd + (A.shape[1] // pa if rs else 0) or len(descs) != (1 if rs else 2):
        rp.fail(f"{name}: {len(regs)} registers and {len(descs)} descriptors do not match CuTe's atom")
        return
    group = rp.threads // 128
    lanes = rp.threads % 128
    tc = rp.operand_tags(regs[:nd], C, pc, lanes)
    ta = rp.operand_tags(regs[nd:], A, pa, lanes) if rs else None
    names = {"c": rp.first_name(tc), "b": _desc_member(rp, descs[-1], _BITS[b_t])[0],
             "a": rp.first_name(ta) if rs else _desc_member(rp, descs[0], _BITS[a_t])[0]}
    gemm = rp.gemm_for(names)
    if gemm is None:
        rp.fail(f"{name}: its operands belong to no gemm of the kernel ({names})")
        return
    transposable = _BITS[a_t] == 16
    tnsp = imms[-2:] if transposable and not rs else imms[-1:] if transposable else []
    oc = rp.origin(tc, C, M, "C", gemm, group, f"{name} accumulator")
    if rs:
        oa = rp.origin(ta, A, M, "A", gemm, group, f"{name} A")
        if transposable and tnsp and tnsp[-1] != int(not gemm.tb):
            rp.fail(f"{name}: transpose-B immediate {tnsp[-1]}, but {gemm.b} is stored "
                    f"{'K' if gemm.tb else 'N'}-major")
    else:
        oa = _descriptor(rp, gemm, "A", descs[0], group, shape, M, K, _BITS[a_t],
                         tnsp[0] if transposable else None)
    ob = _descriptor(rp, gemm, "B", descs[-1], group, shape, N, K, _BITS[b_t],
                     tnsp[-1] if transposable else None)
    rp.block(name, gemm, oc, oa, ob, K)


def _desc_member(rp, op, bits: int) -> tuple:
    return desc_member(rp.bufs, op, bits, rp.region.threads)


def _descriptor(rp, gemm, which: str, op, group, shape: str, slice_mn: int, slice_k: int, bits: int, tnsp):
    """{group: block origin} of a descriptor operand after checking its tile and bits against CuTe."""
    _, buf, values = op
    name, base = _desc_member(rp, op, bits)
    k_major = (not gemm.ta) if which == "A" else gemm.tb
    what = f"wgmma {shape} {which} descriptor of {name}"
    if tnsp is not None and tnsp != int(not k_major):
        rp.fail(f"{what}: transpose immediate {tnsp}, but {name} is stored {'K' if k_major else 'MN'}-major")
    if name not in rp.bufs.phys:
        rp.fail(f"{what}: {name} has no layout to compare")
        return None
    phys = rp.bufs.phys[name]
    rows, cols = phys.shape
    tile_elems = rp.bufs.tile[name]
    nbytes = bits // 8
    out = {}
    active = rp.region.threads
    for g in np.unique(group[active]):
        members = active[group[active] == g]
        seen = np.unique(values[members])
        if len(seen) != 1:
            rp.fail(f"{what}: threads of warpgroup {int(g)} disagree on the descriptor")
            return None
        desc = int(seen[0])
        ours = fields(desc)
        atom = MODE_ATOM[ours["layout type"]]
        cute_tile = _matching_tile(rp, name, which, shape, atom, phys, k_major, what)
        if cute_tile is None:
            return None
        req, tile = cute_tile
        start = (ours["start address"] << 4) - base * (bits // 8)      # from the tile's first element
        stage, local = divmod(start // nbytes, tile_elems)
        cell = int(rp.bufs.inverse[name][local]) if start % nbytes == 0 else -1
        if cell < 0:
            rp.fail(f"{what}: start address {start} is no element of {name}")
            return None
        r, c = divmod(cell, cols)
        mn, k = (r, c) if k_major else (c, r)
        if mn % slice_mn or k % slice_k:
            rp.fail(f"{what}: start address {start} is element ({r}, {c}), not the first of a {slice_mn} x {slice_k} "
                    f"block of CuTe's tile")
            return None
        want = fields(int(tile["descriptors"][mn // slice_mn][k // slice_k]))
        got = dict(ours, **{"start address": ours["start address"] - ((stage * tile_elems + base) * nbytes >> 4)})
        diff = [f"{key} {_show(key, got[key])} (CuTe {_show(key, want[key])})" for key in FIELDS
                if got[key] != want[key]]
        if diff:
            rp.fail(f"{what} (block {mn // slice_mn}, K step {k // slice_k}, {req.key}): " + ", ".join(diff))
            return None
        off = gemm.off_a if which == "A" else gemm.off_b
        r0, c0 = r - off[0], c - off[1]
        transposed = gemm.ta if which == "A" else gemm.tb
        out[int(g)] = (c0, r0) if transposed else (r0, c0)
    return out


def _show(key: str, value: int) -> str:
    """A field as a person reads it: addresses and offsets in bytes (the descriptor holds 16-byte units)."""
    if key in ("start address", "leading byte offset", "stride byte offset"):
        return f"{value * 16} B"
    return f"{value} ({MODE_ATOM[value]})" if key == "layout type" else str(value)


def _matching_tile(rp, name: str, which: str, shape: str, atom: str, phys: np.ndarray, k_major: bool, what: str):
    """(request, CuTe tile) of the atom ``atom`` whose element offsets are the buffer's, else None (reported)."""
    key = (name, which, atom)
    cache = rp.ct.__dict__.setdefault("_tile_match", {})
    if key in cache:
        return cache[key]
    ours = phys if k_major else phys.T
    found = None
    cands = [r for r in rp.ct.tiles.get((name, which, shape), []) if r.atom == atom]
    for req in cands:
        tile = rp.cute["tiles"][req.key]
        if np.array_equal(np.asarray(tile["offsets"]), ours):
            found = (req, tile)
            break
    if found is None:
        tried = ", ".join(r.key for r in cands) or "none tiles it"
        rp.fail(f"{what}: the tile is not CuTe's GMMA {'K' if k_major else 'MN'}-major {atom} atom tiled over "
                f"{ours.shape[0]} x {ours.shape[1]} (tried {tried})")
    cache[key] = found
    return found
