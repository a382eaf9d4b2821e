"""Tensor-core code checked against NVIDIA's CuTe, compiled on the host (maint/cute_host.py).

Our mma.sync / ldmatrix / wgmma code and its CPU emulation share one reading of the PTX ISA (mma_ptx,
wgmma_desc); CuTe states the same facts independently. Here every tensor-core case variant, lowered for sm_80 and
for sm_90a, is traced per thread (maint/tc_trace.py) and replayed under CuTe's MMA atoms, ldmatrix copy atoms,
GMMA layout atoms and make_gmma_desc (maint/cute_oracle.py, cute_replay.py, cute_wgmma.py); the instruction
tables of mma_ptx are compared with CuTe's atoms directly; and planted errors (a doubled SBO, a wrong swizzle
mode, a halved K advance, swapped A registers, a dropped .trans, swapped f16 halves) must be reported.
Skipped, with the reason, where no C++ compiler, CUTLASS headers or CUDA headers exist.
"""
from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import tvm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from maint import cute_host  # noqa: E402
from maint.cute_host import Requests  # noqa: E402

pytestmark = pytest.mark.skipif(cute_host.unavailable() is not None,
                                reason=f"CuTe oracle unavailable: {cute_host.unavailable()}")

TARGETS = ("sm_80", "sm_90a")
#: N of the wgmma atoms whose tables are compared with mma_ptx besides those the cases use
TABLE_N = (8, 64, 128, 256)


def _target(arch: str):
    return tvm.target.Target({"kind": "cuda", "arch": arch})


_VARIANTS: list = []


def tensor_core_variants():
    """(label, builder, arch) of every golden case variant with a gemm, for sm_80 and sm_90a, and the f16
    accumulator gemms no case has (mma.sync and wgmma). Variants whose kernels are the same but for their target
    attribute (``sm80_x`` / ``sm90_x``) are lowered once per target."""
    if _VARIANTS:
        return _VARIANTS
    from maint.tc_cases import tensor_core_case_variants
    import kernels_mma as K
    _VARIANTS.extend((label, lambda f=func: f, arch) for label, func, arch in tensor_core_case_variants(TARGETS))
    for arch in TARGETS:
        _VARIANTS.append((f"f16_accumulator@{arch}", lambda: K.gemm(64, 64, 32, acc="float16"), arch))
        _VARIANTS.append((f"f16_accumulator_register_a@{arch}", lambda: K.gemm(64, 64, 32, acc="float16",
                                                                               a_scope="local.fragment"), arch))
    return _VARIANTS


def _lower_and_trace(label, build, arch):
    """The traced lowering, or None when the target has no tensor-core form for the case (fp8 on sm_80)."""
    from maint.cute_oracle import prepare
    from tilelayout.errors import TileLayoutError
    from tilelayout.passes.lowering.pipeline import lower_func
    func = build()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lowered = lower_func(func, _target(arch))
    except TileLayoutError as err:
        if "need" in str(err) and "sm_" in str(err):
            return None
        raise
    return prepare(label, func, lowered)


def _table_requests() -> Requests:
    from maint.cute_oracle import gmma_atom, mma_atom
    from tilelayout.passes.lowering.mma_ptx import (MMA_SIGNATURES, PTX_TYPE, WGMMA_SIGNATURES, mma_instruction,
                                                    operand_ptx)
    req = Requests()
    for sig in MMA_SIGNATURES:
        inst = mma_instruction(*sig)
        req.mma.add(mma_atom(f"m{inst.m}n{inst.n}k{inst.k}", PTX_TYPE[sig[2]], operand_ptx(sig[0]),
                             operand_ptx(sig[1]), PTX_TYPE[sig[2]]))
    for sig, k in WGMMA_SIGNATURES.items():
        for n in TABLE_N:
            req.gmma.add(gmma_atom(f"m64n{n}k{k}", PTX_TYPE[sig[2]], operand_ptx(sig[0]), operand_ptx(sig[1])))
    return req


def _planted_patches():
    """name -> (variant label, patch(monkeypatch)): the errors the oracle must report."""
    from tvm import tirx
    from tilelayout.passes.lowering import lower_gemm, lower_wgmma
    from tilelayout.passes.lowering.mma_ptx import MmaInst, WgmmaInst
    encode, descriptor, ptx, unpack = (lower_wgmma.encode_fields, lower_wgmma._descriptor, lower_gemm.ptx_call,
                                       lower_gemm.unpack_element)
    a_mma, a_wgmma = MmaInst.a_element, WgmmaInst.a_element

    def doubled_sbo(mp):
        mp.setattr(lower_wgmma, "encode_fields", lambda lay: encode(dataclasses.replace(lay, sbo=2 * lay.sbo)))

    def wrong_swizzle(mp):      # 128B -> 64B
        mp.setattr(lower_wgmma, "encode_fields", lambda lay: encode(lay) ^ (3 << 62) if lay.mode == 1 else encode(lay))

    def halved_k_advance(mp):
        def halved(operand, layout, stored_index):
            idx = list(stored_index)
            kpos = 1 if operand.k_contiguous else 0
            idx[kpos] = tirx.floordiv(idx[kpos], 2)
            return descriptor(operand, layout, idx)
        mp.setattr(lower_wgmma, "_descriptor", halved)

    def swapped_a_mma(mp):
        mp.setattr(MmaInst, "a_element", lambda self, lane, reg, part: a_mma(self, lane, (reg + 2) % 4, part))

    def swapped_a_wgmma(mp):
        mp.setattr(WgmmaInst, "a_element", lambda self, t, reg, part: a_wgmma(self, t, (reg + 2) % 4, part))

    def dropped_trans(mp):
        mp.setattr(lower_gemm, "ptx_call", lambda text, *ops: ptx(text.replace(".trans", ""), *ops))

    def swapped_b_pair(mp):     # ldmatrix.x4 of two B blocks: the blocks' registers exchanged
        def swapped(text, *ops):
            if ".x4" in text and len(ops) == 5 and "mma_b" in str(ops[0].source.name):
                ops = (ops[2], ops[3], ops[0], ops[1], ops[4])
            return ptx(text, *ops)
        mp.setattr(lower_gemm, "ptx_call", swapped)

    def swapped_halves(mp):
        def swapped(word, part, dtype):
            return unpack(word, 1 - part if dtype == "float16" else part, dtype)
        mp.setattr(lower_gemm, "unpack_element", swapped)
        mp.setattr(lower_wgmma, "unpack_element", swapped)

    fa90, reg80, reg90 = ("flash_attention/sm80_d64_b64x64_t128@sm_90a", "gemm_register_a/sm80_m64n64k32_t128@sm_80",
                          "gemm_register_a/sm80_m64n64k32_t128@sm_90a")
    return {"doubled_sbo": (fa90, doubled_sbo), "wrong_swizzle": (fa90, wrong_swizzle),
            "halved_k_advance": (fa90, halved_k_advance), "swapped_a_mma": (reg80, swapped_a_mma),
            "swapped_a_wgmma": (reg90, swapped_a_wgmma),
            "dropped_trans": ("gemm_pipelined/sm80_s2_k128@sm_80", dropped_trans),
            "swapped_b_pair_trans": ("gemm_pipelined/sm80_s2_k128@sm_80", swapped_b_pair),
            "swapped_b_pair": ("flash_attention/sm80_d64_b64x64_t128@sm_80", swapped_b_pair),
            "swapped_halves_mma": ("f16_accumulator@sm_80", swapped_halves),
            "swapped_halves_wgmma": ("f16_accumulator@sm_90a", swapped_halves)}


@pytest.fixture(scope="module")
def suite():
    """Every tensor-core variant traced, the planted errors traced, and CuTe evaluated once for all of them
    (one compile, cached by its source)."""
    from maint.cute_oracle import requests_for
    variants = {v[0]: v for v in tensor_core_variants()}
    traces = [t for t in (_lower_and_trace(*v) for v in variants.values()) if t is not None]
    planted = {}
    for name, (label, patch) in _planted_patches().items():
        with pytest.MonkeyPatch.context() as mp:
            patch(mp)
            planted[name] = _lower_and_trace(*variants[label])
    cute = cute_host.evaluate(requests_for(traces + list(planted.values()), _table_requests()))
    return traces, cute, planted


def _check(trace, cute) -> list:
    from maint.cute_oracle import check
    return check([trace], cute)


# ------------------------------------------------------------------ the cases

def test_every_tensor_core_case_agrees_with_cute(suite):
    traces, cute, _ = suite
    issued = {"mma": 0, "wgmma": 0, "ldmatrix": 0}
    problems = []
    for trace in traces:
        problems += _check(trace, cute)
        for region in trace.regions:
            for ev in region.events:
                name = getattr(ev, "name", "")
                for kind in issued:
                    if name.startswith(f"tirx.ptx.{kind}"):
                        issued[kind] += 1
    assert not problems, "\n".join(problems[:40])
    # the suite really covers both instruction families and both targets
    assert all(v > 0 for v in issued.values()), issued
    archs = {t.label.rsplit("@", 1)[1] for t in traces}
    assert archs == set(TARGETS)
    names = {t.label.split("/")[0] for t in traces}
    for case in ("gemm_tile", "gemm_pipelined", "gemm_register_a", "gemm_chain", "flash_attention", "dequant_gemm",
                 "gemm_fp8"):
        assert case in names


def test_b_operands_load_two_blocks_per_ldmatrix(suite):
    """Adjacent 8-column B blocks share one ldmatrix.x4 (plain and .trans), and the replay above checked them:
    no mma.sync variant with two or more B blocks per warp loads B by .x2 alone."""
    traces, _, _ = suite
    seen = {"plain": 0, "trans": 0}
    for trace in traces:
        b_loads = [ev for region in trace.regions for ev in region.events
                   if getattr(ev, "name", "") == "tirx.ptx.ldmatrix"
                   and any(o[0] == "reg" and "mma_b" in str(o[1].name) for o in ev.operands)]
        for ev in b_loads:
            if "x4" in ev.tokens:
                seen["trans" if "trans" in ev.tokens else "plain"] += 1
    assert all(v > 0 for v in seen.values()), seen


def test_f16_accumulators_are_packed_in_cutes_register_order(suite):
    """mma.sync and wgmma with f16 accumulators: CuTe's recast order decides, both ways."""
    traces, cute, _ = suite
    assert int(cute["f16_pack"][0]) == 0x22221111 and int(cute["f16_unpack"][0]) == 0x4567
    f16 = [t for t in traces if t.label.startswith("f16_accumulator")]
    assert len(f16) == 4
    for trace in f16:
        unpacks = [ev for r in trace.regions for ev in r.events if type(ev).__name__ == "Unpack"]
        assert unpacks, trace.label
        assert not _check(trace, cute)


# ------------------------------------------------------------------ the instruction tables

def test_mma_sync_tables_are_cutes_atoms(suite):
    """mma_ptx's A, B and C maps of every mma.sync signature equal CuTe's MMA_Traits layouts."""
    from maint.cute_oracle import mma_atom
    from tilelayout.passes.lowering.mma_ptx import MMA_SIGNATURES, PTX_TYPE, mma_instruction, operand_ptx
    _, cute, _ = suite
    for sig in MMA_SIGNATURES:
        inst = mma_instruction(*sig)
        name = mma_atom(f"m{inst.m}n{inst.n}k{inst.k}", PTX_TYPE[sig[2]], operand_ptx(sig[0]), operand_ptx(sig[1]),
                        PTX_TYPE[sig[2]])
        atom = cute["mma"][name]
        M, N, K = atom["shape"]
        assert (M, N, K) == (inst.m, inst.n, inst.k), name
        for lane in range(32):
            for v, flat in enumerate(atom["A"][lane]):
                assert inst.a_element(lane, v // inst.pack, v % inst.pack) == (flat % M, flat // M), (name, lane, v)
            for v, flat in enumerate(atom["B"][lane]):
                assert inst.b_element(lane, v // inst.pack, v % inst.pack) == (flat // N, flat % N), (name, lane, v)
            for v, flat in enumerate(atom["C"][lane]):
                assert inst.c_element(lane, v) == (flat % M, flat // M), (name, lane, v)


def test_wgmma_tables_are_cutes_atoms(suite):
    """mma_ptx's wgmma accumulator and register-A maps equal CuTe's GMMA traits, for every signature and N."""
    from maint.cute_oracle import _json_key, gmma_atom
    from tilelayout.passes.lowering.mma_ptx import PTX_TYPE, WGMMA_SIGNATURES, operand_ptx, wgmma_instruction
    _, cute, _ = suite
    for sig, k in WGMMA_SIGNATURES.items():
        for n in TABLE_N:
            inst = wgmma_instruction(n, *sig)
            atom = cute["gmma"][_json_key(gmma_atom(f"m64n{n}k{k}", PTX_TYPE[sig[2]], operand_ptx(sig[0]),
                                                    operand_ptx(sig[1])))]
            C, A = np.asarray(atom["C"]), np.asarray(atom["A"])
            t, v = np.meshgrid(np.arange(128), np.arange(C.shape[1]), indexing="ij")
            row, col = inst.c_element(t, v)
            assert np.array_equal(row, C % 64) and np.array_equal(col, C // 64), (sig, n)
            t, v = np.meshgrid(np.arange(128), np.arange(A.shape[1]), indexing="ij")
            row, kk = inst.a_element(t, v // inst.pack, v % inst.pack)
            assert np.array_equal(row, A % 64) and np.array_equal(kk, A // 64), (sig, n)


def test_ldmatrix_table_is_cutes_copy_atoms(suite):
    """mma_ptx's ldmatrix map (which row each lane addresses, which cells each register gets) is CuTe's LDSM."""
    from tilelayout.passes.lowering.mma_ptx import ldmatrix_element, ldmatrix_lane_row
    _, cute, _ = suite
    for trans, name in ((False, "SM75_U32x4_LDSM_N"), (True, "SM75_U16x8_LDSM_T")):
        src, dst = np.asarray(cute["ldsm"][name]["src"]), np.asarray(cute["ldsm"][name]["dst"])
        for lane in range(32):
            assert src[lane, 0] // 128 == 8 * ldmatrix_lane_row(lane)[0] + ldmatrix_lane_row(lane)[1]
            for reg in range(4):
                bits = [int(dst[lane, 32 * reg + 16 * h]) for h in range(2)]      # source bit of each half
                cells = [(b % 1024 // 128, b % 128 // 16) for b in bits]            # (row, 16-bit column)
                assert all(b // 1024 == reg for b in bits)                          # matrix = register
                if trans:
                    assert cells == list(ldmatrix_element(lane, True)), (name, lane, reg)
                else:
                    row, col = ldmatrix_element(lane, False)
                    assert cells == [(row, col), (row, col + 1)], (name, lane, reg)


# ------------------------------------------------------------------ planted errors are caught

def test_clean_variants_of_the_planted_errors_agree(suite):
    traces, cute, _ = suite
    labels = {label for label, _ in _planted_patches().values()}
    for trace in traces:
        if trace.label in labels:
            assert _check(trace, cute) == [], trace.label


@pytest.mark.parametrize("name, needle", [
    ("doubled_sbo", "stride byte offset"),
    ("wrong_swizzle", "SW64 atom"),
    ("halved_k_advance", "block of CuTe's tile"),
    ("swapped_a_mma", " A: warp(group)"),
    ("swapped_a_wgmma", " A: warp(group)"),
    ("dropped_trans", " B: warp(group)"),
    ("swapped_b_pair_trans", "B block at (0, 8)"),
    ("swapped_b_pair", "B block at (0, 8)"),
    ("swapped_halves_mma", "unpacked wrongly"),
    ("swapped_halves_wgmma", "unpacked wrongly"),
])
def test_planted_error_is_reported(suite, name, needle):
    _, cute, planted = suite
    found = _check(planted[name], cute)
    assert any(needle in p for p in found), "\n".join(found[:10])


# ------------------------------------------------------------------ the fragment builders

def _owners(frag) -> np.ndarray:
    """thread[i, j, replica] of a fragment, counted from thread 0 of the block."""
    return np.asarray(frag.thread_table(), dtype=np.int64) + (frag.thread_range or (0, 0))[0]


def _check_atoms(owners, table, rows: int, block: tuple, group: int, what: str) -> None:
    """Every (block-row, block-col) atom of ``owners`` is held by one group of ``group`` threads, thread ``t`` of
    the group holding CuTe's element ``table[t]`` (coordinate ``m + rows * n``)."""
    m, n = owners.shape[:2]
    bm, bn = block
    t, v = np.meshgrid(np.arange(table.shape[0]), np.arange(table.shape[1]), indexing="ij")
    mm, nn = table % rows, table // rows
    for r0 in range(0, m, bm):
        for c0 in range(0, n, bn):
            held = owners[r0 + mm, c0 + nn]                         # (threads, values, replicas)
            assert np.array_equal(held % group, np.broadcast_to(t[..., None], held.shape)), (what, r0, c0)
            assert len(np.unique(held[..., 0] // group)) == 1, (what, r0, c0)


@pytest.mark.parametrize("m, n, threads, part", [(64, 64, 128, (2, 2)), (128, 128, 256, (4, 2)),
                                                 (64, 128, 128, (1, 4)), (128, 64, 128, (4, 1))])
def test_mma_fragment_builders_give_cutes_lanes(suite, m, n, threads, part):
    """gemm_layouts' mma.sync accumulator and A/B operand fragments put every element of every 16x8(x16) atom in
    the lane CuTe's SM80_16x8x16 atom gives it, one warp per atom."""
    from tilelayout.gemm_layouts import make_gemm_fragment_a, make_gemm_fragment_b, make_mma_accumulator_fragment
    _, cute, _ = suite
    atom = cute["mma"]["SM80_16x8x16_F32F16F16F32_TN"]
    acc = make_mma_accumulator_fragment(m, n, threads, warp_partition=part)
    _check_atoms(_owners(acc), np.asarray(atom["C"]), 16, (16, 8), 32, "C")
    a = make_gemm_fragment_a(m, n, 32, threads, warp_partition=part)
    _check_atoms(_owners(a), np.asarray(atom["A"]), 16, (16, 16), 32, "A")
    b = make_gemm_fragment_b(m, n, 32, threads, warp_partition=part)      # stored [K, N]: CuTe's B is (n, k)
    _check_atoms(np.swapaxes(_owners(b), 0, 1), np.asarray(atom["B"]), 8, (8, 16), 32, "B")


@pytest.mark.parametrize("m, n, threads, part", [(64, 64, 128, (4, 1)), (128, 128, 256, (8, 1)),
                                                 (64, 128, 256, (4, 2)), (128, 64, 256, (8, 1))])
def test_wgmma_fragment_builders_give_cutes_threads(suite, m, n, threads, part):
    """gemm_layouts' wgmma accumulator and register-A fragments hold every 64xN block the way CuTe's GMMA atom
    for the warpgroup's N does, one warpgroup per block."""
    from maint.cute_oracle import _json_key, gmma_atom
    from tilelayout.gemm_layouts import make_wgmma_accumulator_fragment, make_wgmma_fragment_a
    _, cute, _ = suite
    wn = n // part[1]
    atom = cute["gmma"][_json_key(gmma_atom(f"m64n{wn}k16", "f32", "f16", "f16"))]
    acc = make_wgmma_accumulator_fragment(m, n, threads, warp_partition=part)
    _check_atoms(_owners(acc), np.asarray(atom["C"]), 64, (64, wn), 128, "C")
    a = make_wgmma_fragment_a(m, 32, threads, warp_partition=part)
    _check_atoms(_owners(a), np.asarray(atom["A"]), 64, (64, 16), 128, "A")
