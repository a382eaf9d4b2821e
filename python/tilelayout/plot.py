"""Pictures of layouts: ``plot_layout`` draws a Fragment's thread/slot grid or a Layout's address/bank map.

The logical coordinates become a 2-D grid (rows = all dimensions but the last flattened, columns = the last
dimension; a 1-D shape wraps into rows of 32). A fragment cell shows the thread holding the element (every
replica's thread when replicated) and its register slot, coloured by thread; a layout cell shows the physical
address (the flattened forward index) and its shared-memory bank, coloured by bank. Grids larger than one
page are split into pages, so every cell is drawn.

Colours are ``#rrggbb`` hex strings (``colour_hex``), which every image viewer renders; the golden runner's
review pictures use the same function. matplotlib is an optional dependency (``pip install
'tilelayout[plot]'``); only ``plot_layout`` needs it.
"""
from __future__ import annotations

import colorsys
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import LayoutError, TileLayoutError

__all__ = ["plot_layout", "layout_cells", "LayoutCells", "colour_hex", "grid_shape", "PlotError", "BANKS",
           "BANK_BYTES", "WRAP_1D", "DETAIL_CELLS"]

#: shared memory has 32 banks of 4 bytes on every NVIDIA architecture this project targets
BANKS, BANK_BYTES = 32, 4
#: a 1-D layout is drawn in rows of this many elements
WRAP_1D = 32
#: advance width of a DejaVu Sans Mono glyph (matplotlib's bundled monospace font), in em
_MONO_ADVANCE = 0.602


class PlotError(TileLayoutError):
    """A picture cannot be drawn: matplotlib is missing, the layout cannot be enumerated, or a bad argument."""


def colour_hex(n: int) -> str:
    """A light ``#rrggbb`` colour for the integer ``n``; consecutive integers get well-separated hues
    (golden-angle steps), and three lightness bands keep colours apart when more than a dozen are in use."""
    hue = (int(n) * 0.381966) % 1.0
    light = (0.80, 0.70, 0.88)[(int(n) // 11) % 3]
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.65)
    return "#{:02x}{:02x}{:02x}".format(round(r * 255), round(g * 255), round(b * 255))


def grid_shape(shape) -> tuple[int, int]:
    """(rows, cols) of the picture of a layout with input ``shape``."""
    shape = [int(s) for s in shape]
    if len(shape) == 1:
        cols = min(shape[0], WRAP_1D)
        return -(-shape[0] // cols), cols
    return int(np.prod(shape[:-1])), shape[-1]


@dataclass
class LayoutCells:
    """What each grid cell shows, flattened in row-major order of the logical coordinates."""

    kind: str                   # "Fragment" or "Layout"
    shape: list                 # logical input shape
    threads: np.ndarray | None  # (points, replicas) absolute thread ids, fragments only
    slots: np.ndarray           # (points,) flattened register slot (fragment) or physical address (layout)
    banks: np.ndarray | None    # (points,) shared-memory bank, layouts with a dtype only
    replicate: int = 1
    swizzle: str | None = None  # detected swizzle mode name of a shared layout

    @property
    def colour_keys(self) -> np.ndarray:
        """The integer each cell is coloured by: thread of replica 0, bank, or address."""
        if self.threads is not None:
            return self.threads[:, 0]
        return self.banks if self.banks is not None else self.slots

    def label(self, k: int) -> tuple[str, str]:
        """The two text lines of cell ``k``: thread(s) and slot, or address and bank."""
        if self.threads is not None:
            ts = [int(t) for t in self.threads[k]]
            who = ",".join(str(t) for t in ts) if len(ts) <= 2 else f"{ts[0]}+{len(ts) - 1}"
            return f"T{who}", f"s{int(self.slots[k])}"
        bank = f"b{int(self.banks[k])}" if self.banks is not None else ""
        return str(int(self.slots[k])), bank


def _flat(index: np.ndarray, extents) -> np.ndarray:
    """Mixed-radix flattening of output coordinates (last one fastest)."""
    out = np.zeros(index.shape[0], dtype=np.int64)
    for k in range(index.shape[-1]):
        extent = int(extents[k]) if extents is not None else int(index[:, k].max()) + 1
        out = out * extent + index[:, k]
    return out


def layout_cells(layout, dtype: str | None = "float16") -> LayoutCells:
    """Enumerate ``layout`` (a ``Layout`` or ``Fragment``) into the values ``plot_layout`` draws.

    ``dtype`` (layouts only) sets the element size for banks (``bank = address * bytes // 4 % 32``) and the
    swizzle detection; ``None`` draws addresses without banks."""
    from .fragment import Fragment
    from .layout import Layout
    if not isinstance(layout, Layout):
        raise PlotError(f"plot_layout needs a tilelayout Layout or Fragment, got {type(layout).__name__}")
    try:
        shape = [int(s) for s in layout.input_shape]
        out_shape = [int(s) for s in layout.output_shape]
    except (TypeError, ValueError):
        raise PlotError(f"cannot draw a layout with a symbolic shape: {layout!r}") from None
    try:
        index = np.asarray(layout.table(), dtype=np.int64)
    except (LayoutError, TileLayoutError) as err:
        raise PlotError(f"cannot enumerate {layout!r}: {err}") from None
    points = int(np.prod(shape)) if shape else 1
    if isinstance(layout, Fragment):
        reps = layout.replicate_size
        base = int(layout.thread_range[0]) if layout.thread_range is not None else 0
        threads = np.asarray(layout.thread_table(), dtype=np.int64).reshape(points, reps) + base
        index = index.reshape(points, -1) if index.ndim == len(shape) + 1 else index.reshape(points * reps, -1)[::reps]
        return LayoutCells("Fragment", shape, threads, _flat(index, out_shape), None, reps)
    flat = _flat(index.reshape(points, -1), out_shape)
    banks, swizzle = None, None
    if dtype is not None:
        nbytes = _dtype_bytes(dtype)
        banks = (flat * nbytes // BANK_BYTES) % BANKS
        swizzle = _swizzle_name(layout, dtype)
    return LayoutCells("Layout", shape, None, flat, banks, 1, swizzle)


def _dtype_bytes(dtype: str) -> float:
    import tvm
    try:
        t = tvm.DataType(str(dtype))
    except Exception:  # noqa: BLE001 -- TVM's own error text is not useful here
        raise PlotError(f"unknown dtype {dtype!r}") from None
    return t.bits * t.lanes / 8


def _swizzle_name(layout, dtype: str) -> str | None:
    from .swizzle import SwizzleMode, detect_swizzle_mode
    try:
        mode = detect_swizzle_mode(layout, dtype)
    except TileLayoutError:
        return None
    if mode is None or mode == SwizzleMode.NONE:
        return None
    return mode.name


# --------------------------------------------------------------------------- drawing

def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise PlotError(f"plot_layout needs matplotlib ({err}); install it with: pip install 'tilelayout[plot]'") \
            from None
    return plt


# the heading of each (detail, picture) template; an overview's ``{tiles}`` is filled in later with the tile size
_HEADINGS = {
    (True, "fragment"): "Fragment {shape}: T = thread, s = register slot; colour = thread{note}",
    (True, "address"): "Layout {shape}: physical address",
    (True, "bank"): "Layout {shape} ({dtype}): address and b = bank; colour = bank{note}",
    (False, "fragment"): "Fragment {shape}, {{tiles}} cells per tile: T = first-last thread, s = first-last register "
                         "slot of the tile; colour = warp{note}; detail=True labels every cell",
    (False, "address"): "Layout {shape}, {{tiles}} cells per tile: first-last physical address",
    (False, "bank"): "Layout {shape} ({dtype}), {{tiles}} cells per tile: first-last address, b = first-last bank; "
                     "colour = bank{note}; detail=True labels every cell",
}
#: how a cell's T reads for a replicated fragment: one thread per replica, or the range over all of them
_REPLICA_THREADS = {True: "T lists each replica's thread", False: "T counts every replica's thread"}


def _heading(cells: LayoutCells, title: str | None, dtype: str | None, detail: bool) -> str:
    """The figure's heading: ``title``, else what the picture shows (a page of cells or a tiled overview)."""
    if title:
        return title
    detail = bool(detail)
    if cells.kind == "Fragment":
        picture = "fragment"
        note = f", replicated {cells.replicate}x ({_REPLICA_THREADS[detail]})" if cells.replicate > 1 else ""
    elif cells.banks is None:
        picture, note = "address", ""
    else:
        picture, note = "bank", f", swizzle {cells.swizzle}" if cells.swizzle else ""
    return _HEADINGS[detail, picture].format(shape="x".join(str(s) for s in cells.shape), dtype=dtype, note=note)


def _pages(rows: int, cols: int, max_rows: int, max_cols: int) -> list[tuple[int, int, int, int]]:
    return [(r, min(r + max_rows, rows), c, min(c + max_cols, cols))
            for r in range(0, rows, max_rows) for c in range(0, cols, max_cols)]


def _rgb(hex_colour: str) -> tuple:
    return tuple(int(hex_colour[k:k + 2], 16) / 255 for k in (1, 3, 5))


def _draw_page(plt, cells: LayoutCells, page, rows: int, cols: int, heading: str):
    r0, r1, c0, c1 = page
    nr, nc = r1 - r0, c1 - c0
    cell_w, cell_h, left, top, bottom = 0.42, 0.34, 0.5, 0.75, 0.1
    fig = plt.figure(figsize=(max(3.0, cell_w * nc + left + 0.2), cell_h * nr + top + bottom))
    width, height = fig.get_figwidth(), fig.get_figheight()
    ax = fig.add_axes((left / width, bottom / height, cell_w * nc / width, cell_h * nr / height))
    keys = cells.colour_keys
    total = keys.shape[0]
    image = np.ones((nr, nc, 3))
    palette: dict = {}
    labels = [[cells.label(r * cols + c) if r * cols + c < total else ("", "") for c in range(c0, c1)]
              for r in range(r0, r1)]
    for r in range(r0, r1):
        for c in range(c0, c1):
            k = r * cols + c
            if k < total:
                key = int(keys[k])
                if key not in palette:
                    palette[key] = _rgb(colour_hex(key))
                image[r - r0, c - c0] = palette[key]
    # one monospaced text per row and line (not one per cell: thousands of text artists take minutes to
    # render); each label is centred in a field exactly one cell wide
    field = max([len(line) for row in labels for cell in row for line in cell] + [1]) + 1
    field = max(field, math.ceil(cell_w * 72 / (_MONO_ADVANCE * 6.0)))     # at most 6 pt
    size = cell_w * 72 / (_MONO_ADVANCE * field)
    for y, row in enumerate(labels):
        for line, dy in ((0, -0.2), (1, 0.22)):
            text = "".join(cell[line].center(field) for cell in row)
            if text.strip():
                ax.text(-0.5, y + dy, text, ha="left", va="center", fontsize=size, family="DejaVu Sans Mono",
                        color="#111111")
    ax.pcolormesh(np.arange(nc + 1) - 0.5, np.arange(nr + 1) - 0.5, image, edgecolors="#ffffff", linewidth=0.6)
    ax.set_xlim(-0.5, nc - 0.5)
    ax.set_ylim(nr - 0.5, -0.5)
    ax.set_xticks(range(nc), [str(c0 + i) for i in range(nc)], fontsize=5)
    ax.set_yticks(range(nr), [_row_label(cells.shape, r0 + i) for i in range(nr)], fontsize=5)
    ax.tick_params(length=0)
    ax.xaxis.tick_top()
    for spine in ax.spines.values():
        spine.set_visible(False)
    part = "" if (nr, nc) == (rows, cols) else f" (rows {r0}-{r1 - 1}, columns {c0}-{c1 - 1} of {rows}x{cols})"
    width_chars = max(30, int(width * 15))
    fig.suptitle("\n".join(textwrap.wrap(heading + part, width_chars)), fontsize=7,
                 y=1 - 0.05 / height, va="top")
    return fig


#: grids with more cells than this are drawn as an overview (``plot_layout``'s ``detail=None``)
DETAIL_CELLS = 2048
#: most tiles an overview labels along one axis
OVERVIEW_TILES = 16
#: threads per warp, for colouring an overview by warp
_WARP = 32


def _tile_size(extent: int, most: int) -> int:
    """The smallest power of two ``t`` with ``ceil(extent / t) <= most``."""
    t = 1
    while -(-extent // t) > most:
        t *= 2
    return t


def _range_text(prefix: str, values: np.ndarray) -> str:
    lo, hi = int(values.min()), int(values.max())
    return f"{prefix}{lo}" if lo == hi else f"{prefix}{lo}-{hi}"


def _overview_labels(cells: LayoutCells, grid: np.ndarray, tr: int, tc: int) -> list[list[tuple[str, str]]]:
    """Per tile of ``tr`` x ``tc`` cells: (threads, slots) of a fragment, (addresses, banks) of a layout."""
    rows, cols = grid.shape
    out = []
    for r in range(0, rows, tr):
        line = []
        for c in range(0, cols, tc):
            idx = grid[r:r + tr, c:c + tc].reshape(-1)
            idx = idx[idx >= 0]
            if idx.size == 0:
                line.append(("", ""))
            elif cells.threads is not None:
                line.append((_range_text("T", cells.threads[idx]), _range_text("s", cells.slots[idx])))
            else:
                banks = _range_text("b", cells.banks[idx]) if cells.banks is not None else ""
                line.append((_range_text("", cells.slots[idx]), banks))
        out.append(line)
    return out


def _draw_overview(plt, cells: LayoutCells, rows: int, cols: int, heading: str):
    """The whole grid on one page: every cell a pixel block coloured by warp (fragments) or bank (layouts),
    a white grid every ``tr`` x ``tc`` cells, and per tile the range of threads and slots (addresses and banks)
    it holds. One raster image and one text per tile row, so the file stays small whatever the grid size."""
    total = cells.slots.shape[0]
    grid = np.full(rows * cols, -1, dtype=np.int64)
    grid[:total] = np.arange(total)
    grid = grid.reshape(rows, cols)
    tr, tc = _tile_size(rows, OVERVIEW_TILES), _tile_size(cols, OVERVIEW_TILES)
    nr, nc = -(-rows // tr), -(-cols // tc)
    labels = _overview_labels(cells, grid, tr, tc)
    field = max([len(line) for row in labels for cell in row for line in cell] + [1]) + 1
    tile_w = max(0.42, field * _MONO_ADVANCE * 5.0 / 72)          # room for the label at 5 pt
    tile_h, left, top, bottom = 0.3, 0.6, 0.75, 0.1
    fig = plt.figure(figsize=(max(3.0, tile_w * nc + left + 0.2), tile_h * nr + top + bottom))
    width, height = fig.get_figwidth(), fig.get_figheight()
    ax = fig.add_axes((left / width, bottom / height, tile_w * nc / width, tile_h * nr / height))
    keys = cells.threads[:, 0] // _WARP if cells.threads is not None else cells.colour_keys
    palette = {int(k): _rgb(colour_hex(int(k))) for k in np.unique(keys)}
    image = np.ones((rows, cols, 3))
    flat = image.reshape(-1, 3)
    flat[:total] = np.array([palette[int(k)] for k in keys])
    if cells.threads is None:
        image = 0.55 + 0.45 * image          # banks change every few cells: paler, so the labels stay legible
    # the cells are pixels of one image, tiles are spanned in tile units: x in [0, nc), y in [0, nr)
    ax.imshow(image, extent=(0, cols / tc, rows / tr, 0), interpolation="nearest", aspect="auto", rasterized=True)
    for x in range(1, nc):
        ax.axvline(x, color="#ffffff", linewidth=0.6)
    for y in range(1, nr):
        ax.axhline(y, color="#ffffff", linewidth=0.6)
    size = tile_w * 72 / (_MONO_ADVANCE * field)
    for y, row in enumerate(labels):
        for line, dy in ((0, 0.3), (1, 0.72)):
            text = "".join(cell[line].center(field) for cell in row)
            if text.strip():
                ax.text(0, y + dy, text, ha="left", va="center", fontsize=size, family="DejaVu Sans Mono",
                        color="#111111")
    ax.set_xlim(0, nc)
    ax.set_ylim(nr, 0)
    ax.set_xticks([x + 0.5 for x in range(nc)], [str(x * tc) for x in range(nc)], fontsize=5)
    ax.set_yticks([y + 0.5 for y in range(nr)], [_row_label(cells.shape, y * tr) for y in range(nr)], fontsize=5)
    ax.tick_params(length=0)
    ax.xaxis.tick_top()
    for spine in ax.spines.values():
        spine.set_visible(False)
    fig.suptitle("\n".join(textwrap.wrap(heading.format(tiles=f"{tr}x{tc}"), max(30, int(width * 15)))),
                 fontsize=7, y=1 - 0.05 / height, va="top")
    return fig


def _row_label(shape, row: int) -> str:
    if len(shape) <= 1:
        return str(row * WRAP_1D)
    coords = np.unravel_index(row, [int(s) for s in shape[:-1]])
    return ",".join(str(int(c)) for c in coords)


def _page_path(path: Path, k: int) -> Path:
    return path if k == 0 else path.with_name(f"{path.stem}-{k + 1}{path.suffix}")


def plot_layout(layout, path=None, *, dtype: str | None = "float16", title: str | None = None,
                max_rows: int = 64, max_cols: int = 64, dpi: int = 120, detail: bool | None = None):
    """Draw ``layout`` (a ``tl.Layout`` or ``tl.Fragment``) with matplotlib.

    A Fragment: one cell per logical element, labelled ``T<thread>`` (each replica's thread when replicated)
    and ``s<slot>`` (flattened register slot), coloured by thread. A Layout: the physical address of each
    element and its bank for ``dtype`` elements (``None``: no banks), coloured by bank, with the swizzle mode
    in the title when ``tl.detect_swizzle_mode`` recognises one.

    ``detail``: True labels every cell, a grid larger than ``max_rows`` x ``max_cols`` cells split into pages;
    False draws one overview page (cells as coloured pixels, colour = warp for a fragment, a white grid of
    tiles, each tile labelled with the range of threads and slots, or addresses and banks, it holds), which
    stays tens of kilobytes for any grid; None (default): detail up to ``DETAIL_CELLS`` cells, else overview. With
    ``path`` (any suffix matplotlib writes: .png, .svg, .pdf) the pages are written -- a PDF holds every page,
    other formats write ``path`` and then ``stem-2.suffix``, ``stem-3.suffix``, ... -- and the list of written
    paths is returned. Without ``path`` the list of matplotlib Figures is returned.

    Raises ``PlotError`` (a ``tl.TileLayoutError``) when matplotlib is not installed or the layout cannot be
    enumerated.
    """
    if max_rows < 1 or max_cols < 1:
        raise PlotError(f"max_rows and max_cols must be positive, got {max_rows} and {max_cols}")
    cells = layout_cells(layout, dtype)
    plt = _pyplot()
    rows, cols = grid_shape(cells.shape)
    if detail is None:
        detail = rows * cols <= DETAIL_CELLS
    heading = _heading(cells, title, dtype, detail)
    import matplotlib
    # unhinted glyphs advance exactly 0.602 em, so each row's monospaced label line stays aligned with its cells
    with matplotlib.rc_context(_RC):
        if detail:
            figures = [_draw_page(plt, cells, page, rows, cols, heading)
                       for page in _pages(rows, cols, max_rows, max_cols)]
        else:
            figures = [_draw_overview(plt, cells, rows, cols, heading)]
        if path is None:
            return figures
        return _save(plt, figures, Path(path), dpi, palette=not detail)


# SVG keeps its text as text (a glyph outline per character is what made a page megabytes)
_RC = {"text.hinting": "none", "svg.fonttype": "none"}


#: colours of an overview PNG: its warps or banks (at most 32) and the shades of anti-aliased text
_PNG_COLOURS = 64


def _save_png_palette(fig, target: Path, dpi: int) -> None:
    """``fig`` as an indexed-colour PNG: a few flat colours and text need no 32-bit pixels (a tenth the size)."""
    import io

    from PIL import Image
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format="png")
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=_PNG_COLOURS).save(target, format="png", optimize=True)


def _save(plt, figures: list, path: Path, dpi: int, palette: bool = False) -> list:
    written = []
    try:
        if path.suffix.lower() == ".pdf":
            from matplotlib.backends.backend_pdf import PdfPages
            with PdfPages(path) as pdf:
                for fig in figures:
                    pdf.savefig(fig, dpi=dpi)
            written.append(path)
        else:
            for k, fig in enumerate(figures):
                target = _page_path(path, k)
                if palette and path.suffix.lower() == ".png":
                    _save_png_palette(fig, target, dpi)
                else:
                    fig.savefig(target, dpi=dpi)
                written.append(target)
    except (OSError, ValueError) as err:
        raise PlotError(f"cannot write {path}: {err}") from None
    finally:
        for fig in figures:
            plt.close(fig)
    return written
