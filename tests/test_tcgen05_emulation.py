"""tcgen05 on the CPU: descriptors (passes/lowering/tcgen05_desc.py) run through the emulation
(passes/lowering/emulate_tcgen05.py) against numpy, the accumulator read back through the plan's tcgen05.ld
fragment; planted errors in descriptors and TMEM layouts are caught; encoders compared with CuTe's."""
from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tilelayout import tmem  # noqa: E402
from tilelayout.passes.lowering import tcgen05_desc as D  # noqa: E402
from tilelayout.passes.lowering.emulate_tcgen05 import EmulationError, TensorMemory  # noqa: E402
from tilelayout.passes.lowering.wgmma_desc import DescriptorLayout, solve  # noqa: E402
from tilelayout.swizzle import make_swizzled_layout, SwizzleMode  # noqa: E402

E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"
_NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, E4M3: ml_dtypes.float8_e4m3fn,
       E5M2: ml_dtypes.float8_e5m2}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _values(rng, shape, dtype):
    """Small multiples of 1/4: exact in every operand type, so products and float32 sums are exact."""
    return (rng.integers(-6, 7, size=shape) / 4).astype(_NP[dtype])


def _offsets(shape, dtype, mode):
    """Element offset of every stored element under our swizzled shared layout (what inference gives), or, for
    ``mode="interleaved"``, in 8-row x 16-byte core matrices (K-chunks of a row group adjacent)."""
    if mode == "interleaved":
        nbytes = np.dtype(_NP[dtype]).itemsize
        r, c = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]) * nbytes, indexing="ij")
        row_bytes = shape[1] * nbytes
        return ((r // 8) * row_bytes * 8 + (c // 16) * 128 + (r % 8) * 16 + c % 16) // nbytes
    lay = make_swizzled_layout(list(shape), dtype, mode)
    tab = np.asarray(lay.table(), dtype=np.int64)
    flat = np.zeros(tab.shape[:-1], dtype=np.int64)
    for k, s in enumerate(lay.output_shape):
        flat = flat * int(s) + tab[..., k]
    return flat


class Gemm:
    """One M x N x K SS gemm staged in an emulated shared memory: A at byte ``A_BASE``, B at ``B_BASE``."""

    A_BASE, B_BASE = 0, 1 << 16

    def __init__(self, m, n, k, a_dtype="float16", b_dtype=None, a_mn=False, b_mn=False, mode=None, seed=0):
        b_dtype = b_dtype or a_dtype
        rng = np.random.default_rng(seed)
        self.m, self.n, self.k, self.a_dtype, self.b_dtype, self.a_mn, self.b_mn = m, n, k, a_dtype, b_dtype, a_mn, b_mn
        self.a, self.b = _values(rng, (m, k), a_dtype), _values(rng, (n, k), b_dtype)
        self.smem = np.zeros(1 << 17, dtype=np.uint8)
        self.kind = D.KIND_OF[a_dtype]
        self.k_step = D.K_OF_KIND[self.kind]
        self.layouts = {}
        for name, vals, base, mn_major in (("A", self.a, self.A_BASE, a_mn), ("B", self.b, self.B_BASE, b_mn)):
            stored = vals.T if mn_major else vals          # K-major: [rows, K]; MN-major: [K, rows]
            dtype = a_dtype if name == "A" else b_dtype
            nbytes = np.dtype(_NP[dtype]).itemsize
            phys = _offsets(stored.shape, dtype, mode) * nbytes
            bits = np.ascontiguousarray(stored).view(_UINT[nbytes])
            for byte in range(nbytes):
                self.smem[base + phys + byte] = ((bits >> (8 * byte)) & 0xFF).astype(np.uint8)
            rows = vals.shape[0]
            tiles = [(ks, 0) if mn_major else (0, ks) for ks in range(0, k, self.k_step)]
            shape = (self.k_step, rows) if mn_major else (rows, self.k_step)
            layout = solve(phys, tiles, *shape, not mn_major, nbytes)
            assert layout is not None, f"no descriptor for {name}"
            self.layouts[name] = (layout, [base + int(phys[t]) for t in tiles])

    def descriptors(self, which):
        layout, starts = self.layouts[which]
        return [D.smem_descriptor(s, layout) for s in starts]

    def idesc(self, **change):
        args = dict(a_dtype=self.a_dtype, b_dtype=self.b_dtype, d_dtype="float32", m=self.m, n=self.n,
                    a_mn_major=self.a_mn, b_mn_major=self.b_mn)
        args.update(change)
        return D.instr_descriptor(**args)

    def reference(self):
        a = self.a.astype(np.float64)
        b = self.b.astype(np.float64)
        return a @ b.T

    def run(self, tm=None, a_desc=None, b_desc=None, idesc=None, half=0):
        """Issue every K step into a fresh allocation; return (tm, taddr)."""
        tm = tm or TensorMemory()
        col = tm.alloc(tmem.alloc_columns(self.n))
        taddr = (16 * half) << 16 | col
        a_desc = a_desc or self.descriptors("A")
        b_desc = b_desc or self.descriptors("B")
        for step, (ad, bd) in enumerate(zip(a_desc, b_desc)):
            tm.mma(self.kind, taddr, self.smem, ad, bd, idesc if idesc is not None else self.idesc(), step > 0)
        return tm, taddr


def read_fragment(tm, taddr, shape, rows, cols, half=0):
    """The registers of 128 threads after the tcgen05.ld sequence a warpgroup issues for a rows x cols tile at
    ``taddr`` (rows 128: every subpartition, two lane windows for a 16-lane shape; rows 64: the ``half``
    window): (128, slots) uint32, registers numbered as tmem_ld_fragment numbers them."""
    lanes, per_rep = tmem.LD_SHAPES[shape]
    windows = [0] if rows == 64 or lanes == 32 else [0, 16]
    regs = []
    for w in range(4):
        chunks = []
        for window in windows:
            lane = 32 * w + (16 * half if rows == 64 else window)
            col = 0
            while col < cols:
                num = max(n for n in tmem.LD_NUMS[shape] if n * per_rep <= cols - col)      # 48 = 32 + 16
                chunks.append(tm.ld(w, shape, num, (lane << 16) | ((taddr & 0xFFFF) + col)))
                col += num * per_rep
        regs.append(np.concatenate(chunks, axis=1))
    return np.concatenate(regs, axis=0)


def accumulator(tm, taddr, g: Gemm, shape=None, frag_shape=None, half=0):
    """D read back through tcgen05.ld and mapped to (row, col) by the plan's accumulator fragment."""
    rows = g.m
    shape = shape or tmem.accumulator_ld_shape(rows)
    regs = read_fragment(tm, taddr, shape, rows, g.n, half).view(np.float32)
    frag = tmem.tmem_ld_fragment(frag_shape or tmem.accumulator_ld_shape(rows), rows, g.n)
    th = np.asarray(frag.thread_table()).reshape(rows, g.n)
    sl = np.asarray(frag.table()).reshape(rows, g.n)
    return regs[th, sl]


CASES = [
    dict(m=128, n=64, k=64, a_dtype="float16"),
    dict(m=128, n=256, k=32, a_dtype="bfloat16"),
    dict(m=64, n=64, k=32, a_dtype="float16"),
    dict(m=64, n=40, k=32, a_dtype="float16", mode="interleaved"),
    dict(m=128, n=32, k=32, a_dtype="float16", a_mn=True, b_mn=True),
    dict(m=128, n=64, k=64, a_dtype="bfloat16", b_mn=True, mode=SwizzleMode.SWIZZLE_64B),
    dict(m=128, n=32, k=32, a_dtype="float32"),
    dict(m=64, n=32, k=16, a_dtype="float32", mode=SwizzleMode.SWIZZLE_32B),
    dict(m=128, n=64, k=128, a_dtype=E4M3),
    dict(m=128, n=48, k=64, a_dtype=E4M3, b_dtype=E5M2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_emulated_mma_read_through_the_plan_fragment_matches_numpy(case):
    g = Gemm(**case)
    tm, taddr = g.run()
    np.testing.assert_array_equal(accumulator(tm, taddr, g), g.reference())


def test_m64_upper_half_subpartitions():
    """An M=64 accumulator in the upper 16 lanes of each subpartition (a second M-block's place)."""
    g = Gemm(64, 32, 32)
    tm, taddr = g.run(half=1)
    np.testing.assert_array_equal(accumulator(tm, taddr, g, half=1), g.reference())
    lower = read_fragment(tm, taddr & 0xFFFF, "16x256b", 64, 32, half=0)
    assert not lower.any()                      # nothing written to the lower half


def test_accumulate_on_existing_d_and_column_offsets():
    g = Gemm(128, 32, 16, seed=3)
    tm = TensorMemory()
    tm.alloc(64)                                # the accumulator lands at column 64: an arbitrary offset
    tm, taddr = g.run(tm)
    assert taddr & 0xFFFF == 64
    for ad, bd in zip(g.descriptors("A"), g.descriptors("B")):     # enable_input_d: D += A B^T
        tm.mma(g.kind, taddr, g.smem, ad, bd, g.idesc(), True)
    np.testing.assert_array_equal(accumulator(tm, taddr, g), 2 * g.reference())


def test_tf32_operands_are_truncated():
    g = Gemm(128, 16, 8, "float32")
    g.a[:] = 0
    g.b[:] = 0
    one_plus = np.float32(1 + 0.75 * 2.0 ** -10)
    g.smem[:] = 0
    # element (0, 0) of both operands: K-major 128B swizzle puts it at the tile start
    g.smem[g.A_BASE:g.A_BASE + 4] = np.frombuffer(one_plus.tobytes(), dtype=np.uint8)
    g.smem[g.B_BASE:g.B_BASE + 4] = np.frombuffer(np.float32(3).tobytes(), dtype=np.uint8)
    tm, taddr = g.run()
    assert accumulator(tm, taddr, g)[0, 0] == 3.0       # 1 + 0.75 * 2^-10 enters as 1.0


# ------------------------------------------------------------------------------------------ planted errors

def _differs(g, **run):
    try:
        tm, taddr = g.run(**run)
    except EmulationError:
        return True
    return not np.array_equal(accumulator(tm, taddr, g), g.reference())


def test_wrong_descriptors_are_caught():
    g = Gemm(128, 64, 64, "float16")
    layout, starts = g.layouts["A"]
    assert layout.mode == 1                             # 128B swizzle
    bad = [
        [D.smem_descriptor(s, DescriptorLayout(layout.mode, layout.lbo, 2 * layout.sbo, True)) for s in starts],
        [D.smem_descriptor(s, DescriptorLayout(2, layout.lbo, layout.sbo, True)) for s in starts],     # 64B
        [D.smem_descriptor(s, DescriptorLayout(0, layout.lbo, layout.sbo, True)) for s in starts],     # none
        [D.smem_descriptor(s + 16, layout) for s in starts],                                             # K advance
        [D.smem_descriptor(starts[0], layout)] * len(starts),                                           # no advance
    ]
    for desc in bad:
        assert _differs(g, a_desc=desc)
    with pytest.raises(EmulationError, match="version"):
        g.run(a_desc=[d & ~(1 << 46) for d in g.descriptors("A")])  # a wgmma-encoded descriptor
    with pytest.raises(EmulationError, match="layout type"):
        g.run(b_desc=[d | 1 << 61 for d in g.descriptors("B")])      # 128B with 32-byte atoms: not this layout


def test_wrong_instruction_descriptors_are_caught():
    g = Gemm(128, 64, 32, "float16", a_mn=False)
    assert _differs(g, idesc=g.idesc(a_mn_major=True))
    assert _differs(g, idesc=g.idesc(b_dtype="bfloat16", a_dtype="bfloat16"))      # formats read as bf16
    assert _differs(g, idesc=g.idesc(n=32))
    with pytest.raises(EmulationError, match="D format"):
        g.run(idesc=g.idesc() & ~(3 << 4))
    with pytest.raises(EmulationError, match="shape"):
        g.run(idesc=(g.idesc() & ~(0x1F << 24)) | (96 >> 4) << 24)
    # M=64 written where the plan reads an M=128 accumulator: lanes 16-31 of each subpartition never written
    h = Gemm(128, 64, 32, "float16")
    tm, taddr = h.run(idesc=h.idesc(m=64))
    assert not np.array_equal(accumulator(tm, taddr, h), h.reference())


def test_wrong_tmem_layouts_are_caught():
    g = Gemm(128, 64, 32, "float16")
    tm, taddr = g.run()
    right = accumulator(tm, taddr, g)
    np.testing.assert_array_equal(right, g.reference())
    # the registers of a 16x256b read interpreted through the 32x32b fragment, and the other way round
    assert not np.array_equal(accumulator(tm, taddr, g, shape="16x256b", frag_shape="32x32b"), g.reference())
    h = Gemm(64, 64, 32, "float16")
    tm, taddr = h.run()
    assert not np.array_equal(accumulator(tm, taddr, h, shape="16x64b", frag_shape="16x256b"), h.reference())
    np.testing.assert_array_equal(accumulator(tm, taddr, h, shape="16x64b", frag_shape="16x64b"), h.reference())


def test_illegal_tmem_accesses_are_refused():
    tm = TensorMemory()
    col = tm.alloc(32)
    with pytest.raises(EmulationError, match="subpartition"):
        tm.ld(1, "32x32b", 1, col)                     # warp 1 reading lanes 0-31
    with pytest.raises(EmulationError, match="subpartition"):
        tm.ld(0, "32x32b", 1, 16 << 16 | col)          # 32x32b starts at the subpartition's first lane
    with pytest.raises(EmulationError, match="allocation"):
        tm.ld(0, "32x32b", 64, col)                    # 64 columns of a 32-column allocation
    with pytest.raises(EmulationError, match="power of two"):
        tm.alloc(48)
    with pytest.raises(EmulationError, match="no such allocation"):
        tm.dealloc(col + 32, 32)
    tm.dealloc(col, 32)
    tm.relinquish_alloc_permit()
    with pytest.raises(EmulationError, match="relinquish"):
        tm.alloc(32)
    g = Gemm(64, 32, 16)
    other = TensorMemory()
    col = other.alloc(32)
    with pytest.raises(EmulationError, match="M=64"):            # an M=64 D starts at lane 0 or 16, not 8
        other.mma(g.kind, 8 << 16 | col, g.smem, g.descriptors("A")[0], g.descriptors("B")[0], g.idesc(), False)


@pytest.mark.parametrize("shape", ["32x32b", "16x64b", "16x128b", "16x256b"])
def test_st_then_ld_round_trips_and_places_cells_as_ld_cell(shape):
    rng = np.random.default_rng(1)
    for num in tmem.LD_NUMS[shape]:
        tm = TensorMemory()
        col = tm.alloc(512)
        regs = rng.integers(0, 2 ** 32, size=(32, tmem.ld_registers(shape, num)), dtype=np.uint64).astype(np.uint32)
        lane0 = 32 * 2 + (16 if shape != "32x32b" else 0)
        tm.st(2, shape, num, lane0 << 16 | (col + 3), regs)
        np.testing.assert_array_equal(tm.ld(2, shape, num, lane0 << 16 | (col + 3)), regs)
        for t in range(32):
            for r in range(regs.shape[1]):
                lane, c = tmem.ld_cell(shape, t, r)
                assert tm.cells[lane0 + lane, col + 3 + c] == regs[t, r]
        assert np.count_nonzero(tm.cells) <= regs.size


# ------------------------------------------------------------------------------------------ CuTe

def _cute():
    from maint import cute_host
    why = cute_host.unavailable()
    if why:
        pytest.skip(f"CuTe oracle unavailable: {why}")
    from maint import cute_sm100
    return cute_sm100.evaluate()


_OURS = {"tfloat32": "float32"}


def test_instruction_descriptors_equal_cutes():
    from maint.cute_sm100 import STANDARD_IDESCS
    facts = _cute()["idesc"]
    assert len(facts) == len(STANDARD_IDESCS)
    for r in STANDARD_IDESCS:
        ours = D.instr_descriptor(_OURS.get(r.a, r.a), _OURS.get(r.b, r.b), r.c, r.m, r.n, r.a_mn_major, r.b_mn_major)
        assert ours == int(facts[r.key]), r.key


def test_smem_descriptors_equal_cutes_make_umma_desc():
    """Our descriptor (wgmma_desc.solve on CuTe's own UMMA atom tiled over the tile, encoded for sm_100) of every
    block equals make_umma_desc's, field for field."""
    from maint.cute_sm100 import STANDARD_TILES
    facts = _cute()["tiles"]
    for req in STANDARD_TILES:
        tile = facts[req.key]
        nbytes = req.bits // 8
        offs = np.asarray(tile["offsets"], dtype=np.int64) * nbytes            # [mn][k] byte offsets
        k_major = req.major == "K"
        phys = offs if k_major else offs.T
        blocks = [(i * req.slice_mn, s * req.slice_k) for i in range(req.mn // req.slice_mn)
                  for s in range(req.k // req.slice_k)]
        tiles = [(mn, k) if k_major else (k, mn) for mn, k in blocks]
        shape = (req.slice_mn, req.slice_k) if k_major else (req.slice_k, req.slice_mn)
        layout = solve(phys, tiles, *shape, k_major, nbytes)
        assert layout is not None, req.key
        for (mn, k), t in zip(blocks, tiles):
            ours = D.smem_descriptor(int(phys[t]), layout)
            want = int(tile["descriptors"][mn // req.slice_mn][k // req.slice_k])
            assert ours == want, (req.key, mn, k, hex(ours), hex(want))
