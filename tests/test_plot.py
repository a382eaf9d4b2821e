"""tl.plot_layout: what each cell says (checked against numpy enumeration), files written, paging, errors."""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import tilelayout as tl
from tilelayout.plot import colour_hex, grid_shape, layout_cells

pytest.importorskip("matplotlib")


def test_fragment_cells_list_every_replica_thread_and_the_slot():
    # 16x8 over 64 threads, two replicas: replica r of (i, j) lives in thread 32 r + 2 i + j // 4, slot j % 4
    frag = tl.Fragment([16, 8], lambda i, j, r: r * 32 + i * 2 + j // 4, lambda i, j: [j % 4], replicate=2)
    cells = layout_cells(frag)
    i, j = np.meshgrid(np.arange(16), np.arange(8), indexing="ij")
    want_threads = np.stack([2 * i + j // 4, 32 + 2 * i + j // 4], axis=-1).reshape(-1, 2)
    np.testing.assert_array_equal(cells.threads, want_threads)
    np.testing.assert_array_equal(cells.slots, (j % 4).reshape(-1))
    assert cells.label(8 * 3 + 5) == ("T7,39", "s1")


def test_fragment_threads_are_absolute_after_bind_thread_range():
    frag = tl.Fragment([4, 32], lambda i, j: j, lambda i, j: [i]).bind_thread_range(64, 32)
    cells = layout_cells(frag)
    assert cells.threads.min() == 64 and cells.threads.max() == 95


def test_shared_layout_cells_give_address_and_bank_of_a_swizzle():
    lay = tl.make_swizzled_layout([8, 64], "float16", tl.SwizzleMode.SWIZZLE_128B)
    cells = layout_cells(lay, "float16")
    # independent model of the 128-byte swizzle: 16-byte chunk index XOR row % 8 within each 128-byte row
    r, c = np.meshgrid(np.arange(8), np.arange(64), indexing="ij")
    addr = r * 64 + ((c // 8) ^ (r % 8)) * 8 + c % 8
    np.testing.assert_array_equal(cells.slots, addr.reshape(-1))
    np.testing.assert_array_equal(cells.banks, (addr * 2 // 4 % 32).reshape(-1))
    assert cells.swizzle == "SWIZZLE_128B"
    # the point of the swizzle: the 8 rows of one 16-byte column chunk land in 8 different bank groups
    assert len({int(b) // 4 for b in cells.banks.reshape(8, 64)[:, 0]}) == 8


def test_colours_are_hex_and_distinct_for_a_warp():
    colours = [colour_hex(n) for n in range(32)]
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colours)
    assert len(set(colours)) == 32


def test_grid_shape_wraps_one_dimensional_layouts():
    assert grid_shape([229]) == (8, 32)
    assert grid_shape([4, 8, 16]) == (32, 16)


def test_plot_writes_png_svg_and_pdf(tmp_path):
    frag = tl.make_mma_accumulator_fragment(16, 16, 32)
    for suffix, magic in ((".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")):
        paths = tl.plot_layout(frag, tmp_path / f"acc{suffix}")
        assert paths == [tmp_path / f"acc{suffix}"]
        data = paths[0].read_bytes()
        assert data.startswith(magic) and len(data) > 2000
    svg = (tmp_path / "acc.svg").read_text()
    assert "hsl(" not in svg                                          # colours every viewer renders


def test_large_grids_are_paged_so_every_cell_is_drawn(tmp_path):
    lay = tl.make_swizzled_layout([16, 64], "float16", tl.SwizzleMode.SWIZZLE_64B)
    paths = tl.plot_layout(lay, tmp_path / "s.png", max_rows=8, max_cols=32)
    assert [p.name for p in paths] == ["s.png", "s-2.png", "s-3.png", "s-4.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    pdf = tl.plot_layout(lay, tmp_path / "s.pdf", max_rows=8, max_cols=32)
    assert pdf == [tmp_path / "s.pdf"]
    assert len(re.findall(rb"/Type\s*/Page\b", pdf[0].read_bytes())) == 4


def test_without_a_path_the_figures_come_back():
    figs = tl.plot_layout(tl.make_gemm_fragment_8x8())
    assert len(figs) == 1 and figs[0].axes


def test_missing_matplotlib_is_a_clear_tilelayout_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(tl.TileLayoutError, match=r"pip install 'tilelayout\[plot\]'"):
        tl.plot_layout(tl.make_gemm_fragment_8x8())


def test_bad_inputs_are_plot_errors():
    with pytest.raises(tl.PlotError, match="needs a tilelayout Layout"):
        tl.plot_layout("not a layout")
    with pytest.raises(tl.PlotError, match="positive"):
        tl.plot_layout(tl.make_gemm_fragment_8x8(), max_rows=0)


def _tile_label_rows(fig) -> list[list[str]]:
    """The label lines of an overview, each split into its tiles' labels."""
    texts = sorted(((t.get_position()[1], t.get_text()) for t in fig.axes[0].texts), key=lambda yt: yt[0])
    return [text.split() for _, text in texts]


def test_a_large_fragment_is_one_small_overview_page_with_true_tile_labels(tmp_path):
    frag = tl.make_mma_accumulator_fragment(128, 256, 256)
    sizes = {}
    for suffix in (".png", ".svg", ".pdf"):
        paths = tl.plot_layout(frag, tmp_path / f"acc{suffix}")
        assert paths == [tmp_path / f"acc{suffix}"]            # one page, not one per 64x64 cells
        sizes[suffix] = paths[0].stat().st_size
    assert all(5_000 < size < 120_000 for size in sizes.values()), sizes
    assert (tmp_path / "acc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every tile's label against the thread table: 16x16 tiles of 8x16 cells, first-last thread and slot
    fig = tl.plot_layout(frag)[0]
    rows = _tile_label_rows(fig)
    threads = np.asarray(frag.thread_table()).reshape(128, 256)
    slots = np.asarray(frag.table()).reshape(128, 256)
    assert len(rows) == 2 * 16
    for ty in range(16):
        t_line, s_line = rows[2 * ty], rows[2 * ty + 1]
        assert len(t_line) == len(s_line) == 16
        for tx in range(16):
            tile = np.s_[ty * 8:(ty + 1) * 8, tx * 16:(tx + 1) * 16]
            assert t_line[tx] == f"T{threads[tile].min()}-{threads[tile].max()}"
            assert s_line[tx] == f"s{slots[tile].min()}-{slots[tile].max()}"


def test_detail_draws_every_cell_of_a_large_grid_in_pages_and_small_grids_stay_detailed(tmp_path):
    frag = tl.make_mma_accumulator_fragment(64, 128, 128)
    assert len(tl.plot_layout(frag, detail=True)) == 2                 # 64x64 cells per page
    assert len(tl.plot_layout(frag)) == 1                              # 8192 cells: overview
    small = tl.make_mma_accumulator_fragment(16, 16, 32)
    lines = _tile_label_rows(tl.plot_layout(small)[0])
    assert len(lines) == 32 and all(len(line) == 16 for line in lines) # a label in each of 16x16 cells
