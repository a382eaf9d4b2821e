"""Tensor Memory layouts and the register fragments of tcgen05.ld (python/tilelayout/tmem.py).

Judged two ways: exact enumeration of the PTX ISA's fragment descriptions (written out here as loops over
threads and registers, sharing nothing with tmem.py's formulas), and CuTe's SM100_TMEM_LOAD copy atoms compiled
on the host (maint/cute_sm100.py; skipped with the reason when no compiler / headers exist).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tilelayout import tmem  # noqa: E402
from tilelayout.errors import LayoutError, TileLayoutError  # noqa: E402

SHAPES = ("32x32b", "16x64b", "16x128b", "16x256b")


def ptx_cells(shape: str, num: int) -> dict:
    """{(thread, register): (lane, column)} of one warp's tcgen05.ld, spelled as the PTX ISA's figures draw
    them: 32x32b: thread t owns lane t, register j column j. 16x64b: each lane's 64 bits per repetition are
    two columns, lane i of the first 8 and lane 8 + i sit in threads 4i and 4i + 1, the second column two
    threads later. 16x128b: four threads per lane over four columns; lanes 0-7 in the even register of a
    pair, 8-15 in the odd. 16x256b: four threads per lane, each two adjacent columns (two registers) of the
    eight, lanes 0-7 in registers {0, 1} of each group of four, lanes 8-15 in {2, 3}."""
    out = {}
    for rep in range(num):
        if shape == "32x32b":
            for t in range(32):
                out[(t, rep)] = (t, rep)
        elif shape == "16x64b":
            for lane in range(16):
                for c in range(2):
                    t = 4 * (lane % 8) + (1 if lane >= 8 else 0) + 2 * c
                    out[(t, rep)] = (lane, 2 * rep + c)
        elif shape == "16x128b":
            for lane in range(16):
                for c in range(4):
                    out[(4 * (lane % 8) + c, 2 * rep + (lane >= 8))] = (lane, 4 * rep + c)
        else:
            for lane in range(16):
                for c in range(8):
                    t = 4 * (lane % 8) + c // 2
                    reg = 4 * rep + 2 * (lane >= 8) + c % 2
                    out[(t, reg)] = (lane, 8 * rep + c)
    return out


@pytest.mark.parametrize("shape", SHAPES)
def test_ld_cell_is_the_ptx_figure_at_every_repetition(shape):
    for num in tmem.LD_NUMS[shape]:
        want = ptx_cells(shape, num)
        regs = tmem.ld_registers(shape, num)
        assert len(want) == 32 * regs          # every register of every thread, each cell once
        for (t, r), cell in want.items():
            assert tmem.ld_cell(shape, t, r) == cell
            assert tmem.ld_thread_reg(shape, *cell) == (t, r)


def test_repetitions_are_the_ptx_table():
    assert tmem.LD_NUMS["32x32b"][-1] == 128 and tmem.LD_NUMS["16x128b"][-1] == 64
    assert tmem.LD_NUMS["16x256b"][-1] == 32
    for shape in SHAPES:
        assert max(tmem.ld_registers(shape, n) for n in tmem.LD_NUMS[shape]) == 128
    with pytest.raises(LayoutError, match="x64"):
        tmem.ld_registers("16x256b", 64)
    with pytest.raises(LayoutError, match="no shape"):
        tmem.check_ld_shape("16x32bx2")


def _frag_table(frag):
    rows, cols = frag.input_shape
    th = np.asarray(frag.thread_table()).reshape(rows, cols)
    sl = np.asarray(frag.table()).reshape(rows, cols)
    return th, sl


def expected_fragment(shape, rows, cols, warpgroups=1, blocks=1):
    """(thread, slot) of every tile element by enumerating the instructions a warpgroup issues: for each
    block, warpgroup, warp, lane window (0 and 16 for a 16-lane shape over a 128-row tile) and issue of at most
    the largest repetition, the PTX cells of ``ptx_cells``."""
    lanes, per_rep = tmem.LD_SHAPES[shape]
    width = cols // warpgroups
    th = -np.ones((blocks * rows, cols), dtype=np.int64)
    sl = -np.ones((blocks * rows, cols), dtype=np.int64)
    rows_per_warp = rows // 4
    for b in range(blocks):
        slot0 = 0
        for window in range(rows_per_warp // lanes):
            for g in range(warpgroups):
                for w in range(4):
                    col0, base = 0, 0
                    while col0 < width:
                        num = max(n for n in tmem.LD_NUMS[shape] if n * per_rep <= width - col0
                                  and (width - col0) % (n * per_rep) == 0)
                        for (t, r), (lane, c) in ptx_cells(shape, num).items():
                            row = b * rows + w * rows_per_warp + window * lanes + lane
                            col = g * width + col0 + c
                            assert th[row, col] < 0
                            th[row, col] = g * 128 + 32 * w + t
                            sl[row, col] = b * (rows_per_warp // lanes) * lanes * width // 32 + slot0 + base + r
                        base += tmem.ld_registers(shape, num)
                        col0 += num * per_rep
            slot0 += lanes * width // 32
    assert (th >= 0).all()
    return th, sl


@pytest.mark.parametrize("shape,rows,cols,warpgroups,blocks", [
    ("32x32b", 128, 64, 1, 1), ("32x32b", 128, 256, 2, 1), ("32x32b", 128, 48, 1, 2),
    ("16x64b", 64, 32, 1, 1), ("16x64b", 128, 16, 1, 1), ("16x128b", 64, 64, 2, 1),
    ("16x128b", 128, 32, 1, 2), ("16x256b", 64, 64, 1, 1), ("16x256b", 64, 128, 1, 3),
    ("16x256b", 128, 256, 1, 1), ("16x256b", 64, 80, 1, 1)])
def test_ld_fragment_matches_enumeration(shape, rows, cols, warpgroups, blocks):
    frag = tmem.tmem_ld_fragment(shape, rows, cols, warpgroups, blocks)
    th, sl = _frag_table(frag)
    want_th, want_sl = expected_fragment(shape, rows, cols, warpgroups, blocks)
    np.testing.assert_array_equal(th, want_th)
    np.testing.assert_array_equal(sl, want_sl)
    assert frag.is_injective()


def test_m64_ld_fragment_is_the_wgmma_accumulator():
    """Why M=64 accumulators are read with 16x256b: its fragment is the m64nN wgmma / mma.sync accumulator
    layout, so the epilogues and reductions written for Hopper fragments carry over."""
    from tilelayout.gemm_layouts import make_wgmma_accumulator_fragment
    ours = tmem.tmem_ld_fragment("16x256b", 64, 64)
    assert ours.is_equal(make_wgmma_accumulator_fragment(64, 64, 128))


def test_tile_layouts_full_and_half_subpartitions():
    full = tmem.tmem_tile_layout(128, 64, col_offset=96)
    np.testing.assert_array_equal(np.asarray(full.map(37, 5)), [37, 101])
    for half in (0, 1):
        lay = tmem.tmem_tile_layout(64, 32, col_offset=7, half=half)
        cells = {tuple(int(v) for v in lay.map(r, c)) for r in range(64) for c in range(32)}
        assert len(cells) == 64 * 32
        lanes = sorted({lane for lane, _ in cells})
        assert lanes == [32 * w + 16 * half + i for w in range(4) for i in range(16)]
        assert {c for _, c in cells} == set(range(7, 39))
    with pytest.raises(LayoutError, match="512"):
        tmem.tmem_tile_layout(128, 64, col_offset=480)
    with pytest.raises(LayoutError, match="half"):
        tmem.tmem_tile_layout(128, 64, half=1)


def test_accumulator_blocks_interleave_m64_halves():
    blocks = tmem.accumulator_blocks(192, 64, 64)
    assert [(b.row0, b.col_offset, b.half) for b in blocks] == [(0, 0, 0), (64, 0, 1), (128, 64, 0)]
    assert [(b.row0, b.col_offset) for b in tmem.accumulator_blocks(256, 128, 128)] == [(0, 0), (128, 128)]
    with pytest.raises(LayoutError, match="512"):
        tmem.accumulator_blocks(256, 512, 128)
    assert [tmem.alloc_columns(n) for n in (1, 32, 33, 200, 512)] == [32, 32, 64, 256, 512]


def test_bad_reads_are_refused():
    with pytest.raises(TileLayoutError, match="16-lane shape"):
        tmem.tmem_ld_fragment("32x32b", 64, 32)
    with pytest.raises(TileLayoutError, match="multiple"):
        tmem.tmem_ld_fragment("16x256b", 64, 12)
    with pytest.raises(TileLayoutError, match="warpgroup"):
        tmem.tmem_ld_fragment("32x32b", 128, 33, warpgroups=2)


# ------------------------------------------------------------------------------------------- CuTe

def _cute():
    from maint import cute_host
    why = cute_host.unavailable()
    if why:
        pytest.skip(f"CuTe oracle unavailable: {why}")
    from maint import cute_sm100
    return cute_sm100.evaluate()


def test_ld_cells_agree_with_cute_tmem_load_atoms():
    """Every thread and register of every SM100_TMEM_LOAD_{32dp32b,16dp64b,16dp128b,16dp256b}<N>x atom reads the
    (datapath, column) ld_cell names, as one contiguous 32-bit cell."""
    facts = _cute()["tmem_load"]
    from maint.cute_sm100 import TMEM_ATOMS
    checked = 0
    for shape, _, reps in TMEM_ATOMS:
        for num in reps:
            cells = facts[f"{shape}.x{num}"]["cells"]
            assert len(cells) == 32 and all(len(c) == tmem.ld_registers(shape, num) for c in cells)
            for t, regs in enumerate(cells):
                for r, (dp, col, contiguous) in enumerate(regs):
                    assert contiguous == 1
                    assert tmem.ld_cell(shape, t, r) == (dp, col), (shape, num, t, r)
                    checked += 1
    assert checked == 32 * sum(tmem.ld_registers(s, n) for s, _, reps in TMEM_ATOMS for n in reps)


def test_cute_comparison_catches_a_wrong_table():
    """The comparison can fail: 16x64b with its two lane halves swapped disagrees with CuTe."""
    cells = _cute()["tmem_load"]["16x64b.x1"]["cells"]
    wrong = {t: ((t // 4 + 8 * (1 - t % 2)), (t // 2) % 2) for t in range(32)}
    assert any(tuple(cells[t][0][:2]) != wrong[t] for t in range(32))
