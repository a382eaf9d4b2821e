"""Snapshot review: what a reviewer reads instead of raw JSON diffs of ``expected/``.

Compares every snapshot in the working tree with the same file at a git base revision and reports,
per case / variant / model / layout, each changed field (old -> new), whether the mapping changed or
only its spelling, and a small thread/slot grid picture of both sides where a layout changed.
Markdown (SVG pictures beside it) and, on request, one self-contained HTML page. No dependencies
beyond the standard library and numpy.
"""
from __future__ import annotations

import html
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from maint import snapshot

MAX_ROWS, MAX_COLS, WRAP_1D = 16, 32, 32
CELL_W, CELL_H = 22, 15


class ReviewError(ValueError):
    """The base revision or a snapshot cannot be read."""


# --------------------------------------------------------------------------- gathering changes

@dataclass
class Change:
    case: str
    variant: str
    model: str
    section: str
    name: str
    old: dict | None
    new: dict | None
    fields: list = field(default_factory=list)      # FieldDiff with paths relative to the layout
    verdict: str = ""

    @property
    def where(self) -> str:
        return f"{self.case}/{self.variant}/{self.model}"


def changes_between(base: dict, head: dict) -> list[Change]:
    """Every layout that differs between two ``{case: snapshot}`` maps, in sorted order."""
    out = []
    for case in sorted(set(base) | set(head)):
        old_case, new_case = base.get(case, {}), head.get(case, {})
        for variant in sorted(set(old_case) | set(new_case)):
            old_v, new_v = old_case.get(variant, {}), new_case.get(variant, {})
            for model in sorted(set(old_v) | set(new_v)):
                old_e = {(s, n): l for s, n, l in snapshot.layout_entries(old_v.get(model))}
                new_e = {(s, n): l for s, n, l in snapshot.layout_entries(new_v.get(model))}
                for section, name in sorted(set(old_e) | set(new_e)):
                    old, new = old_e.get((section, name)), new_e.get((section, name))
                    if old == new:
                        continue
                    change = Change(case, variant, model, section, name, old, new)
                    if old is None or new is None:
                        change.verdict = "added" if old is None else "removed"
                    else:
                        change.fields = snapshot.diff(old, new)
                        change.verdict = snapshot.compare_mapping(old, new)
                    out.append(change)
    return out


def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ReviewError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout


def base_snapshots(root: Path, expected_dir: Path, ref: str) -> tuple[dict, str]:
    """``({case: snapshot}, label)`` of ``expected_dir`` at git revision ``ref``.

    A repository without commits has an empty base when ``ref`` is HEAD (every snapshot is new).
    """
    try:
        commit = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    except ReviewError:
        if ref == "HEAD" and subprocess.run(["git", "-C", str(root), "rev-parse", "--git-dir"],
                                            capture_output=True).returncode == 0:
            return {}, "HEAD (no commits yet: every snapshot is new)"
        raise ReviewError(f"unknown git revision {ref!r}") from None
    rel = expected_dir.resolve().relative_to(root.resolve()).as_posix()
    listing = _git(root, "ls-tree", "--name-only", commit, f"{rel}/").split()
    out = {}
    for path in sorted(p for p in listing if p.endswith(".json")):
        try:
            out[Path(path).stem] = json.loads(_git(root, "show", f"{commit}:{path}"))
        except json.JSONDecodeError as err:
            raise ReviewError(f"{ref}:{path} is not valid JSON ({err})") from None
    return out, f"{ref} ({commit[:10]})"


def head_snapshots(expected_dir: Path) -> dict:
    return {p.stem: snapshot.load(p) for p in sorted(Path(expected_dir).glob("*.json"))}


# --------------------------------------------------------------------------- pictures

def _cells(d: dict) -> tuple[np.ndarray, np.ndarray, int]:
    """Per point (flattened): the label number (thread, or index for a Layout), slot, and replica count."""
    sig = snapshot.signature(d)
    if d["kind"] != "Fragment":
        flat = _mixed_radix(sig.reshape(-1, sig.shape[-1]), d.get("output_shape"))
        return flat, flat, 1
    rows = sig.reshape(sig.shape[0], sig.shape[1], -1)
    slots = _mixed_radix(rows[:, 0, 1:], d.get("output_shape"))
    return rows[:, 0, 0], slots, rows.shape[1]


def _mixed_radix(index: np.ndarray, extents) -> np.ndarray:
    extents = [int(e) for e in (extents or [])] if extents and len(extents) == index.shape[-1] else None
    flat = np.zeros(index.shape[0], dtype=np.int64)
    for k in range(index.shape[-1]):
        flat = flat * (extents[k] if extents else int(index[:, k].max()) + 1) + index[:, k]
    return flat


def _grid_shape(shape: list[int]) -> tuple[int, int]:
    if len(shape) == 1:
        cols = min(shape[0], WRAP_1D)
        return -(-shape[0] // cols), cols
    return int(np.prod(shape[:-1])), shape[-1]


def _colour(n: int) -> str:
    return f"hsl({(n * 137.508) % 360:.0f},65%,74%)"


def svg_grid(d: dict, other: dict | None = None) -> str:
    """A small SVG of ``d``'s top-left corner: colour and number = thread (index for a Layout).

    Cells whose (thread, slot) set differs from ``other`` at the same point get a red outline.
    """
    shape = [int(s) for s in d["input_shape"]]
    label, slot, reps = _cells(d)
    differs = np.zeros(label.shape, dtype=bool)
    if other is not None and other.get("input_shape") == d["input_shape"]:
        try:
            a, b = snapshot.signature(d), snapshot.signature(other)
            if a.shape == b.shape:
                differs = (a != b).reshape(label.size, -1).any(axis=1)
            else:
                differs[:] = True
        except Exception:  # noqa: BLE001 -- no outline is better than no picture
            pass
    rows, cols = _grid_shape(shape)
    vr, vc = min(rows, MAX_ROWS), min(cols, MAX_COLS)
    top = 14
    width, height = vc * CELL_W + 1, vr * CELL_H + top + 1
    what = "thread" if d["kind"] == "Fragment" else "index"
    shown = "" if (vr, vc) == (rows, cols) else f", showing {vr}x{vc} of {rows}x{cols}"
    rep = f", rep {reps}" if reps > 1 else ""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="monospace" font-size="7">',
             f'<text x="0" y="10" font-size="9">{d["kind"]} {shape}: colour/number = {what}{rep}{shown}</text>']
    for r in range(vr):
        for c in range(vc):
            k = r * cols + c
            if k >= label.size:
                continue
            x, y = c * CELL_W, top + r * CELL_H
            outline = 'stroke="#d00" stroke-width="2"' if differs[k] else 'stroke="#fff" stroke-width="0.5"'
            coord = np.unravel_index(k, shape)
            title = f"{tuple(int(v) for v in coord)}: {what} {label[k]}, slot {slot[k]}"
            parts.append(f'<g><title>{html.escape(title)}</title><rect x="{x}" y="{y}" width="{CELL_W}" '
                         f'height="{CELL_H}" fill="{_colour(int(label[k]))}" {outline}/>'
                         f'<text x="{x + 2}" y="{y + 10}">{label[k]}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------- rendering

def _summary(changes: list[Change]) -> str:
    if not changes:
        return "No snapshot differs from the base."
    counts: dict[str, int] = {}
    for c in changes:
        key = c.verdict if not c.verdict.startswith("mapping unknown") else "mapping unknown"
        counts[key] = counts.get(key, 0) + 1
    cases = len({c.case for c in changes})
    detail = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    return f"{len(changes)} layout(s) differ in {cases} case(s): {detail}."


def _groups(changes: list[Change]):
    group: list[Change] = []
    for change in changes:
        if group and group[0].where != change.where:
            yield group
            group = []
        group.append(change)
    if group:
        yield group


def _pictures(change: Change) -> tuple[str | None, str | None]:
    """SVGs of old and new where a layout's mapping changed (or it appeared / disappeared)."""
    if change.verdict == snapshot.SAME:
        return None, None
    try:
        old = svg_grid(change.old, change.new) if change.old else None
        new = svg_grid(change.new, change.old) if change.new else None
    except Exception:  # noqa: BLE001 -- a layout we cannot enumerate is reported without a picture
        return None, None
    return old, new


def _cell(value) -> str:
    text = snapshot.short(value)
    return "`" + text.replace("|", "\\|") + "`"


def render_markdown(changes: list[Change], base_label: str, image_dir: Path | None, image_rel: str) -> str:
    """The Markdown report; pictures are written into ``image_dir`` (skipped when None)."""
    lines = ["# Layout snapshot review", "", f"Base: `{base_label}`. {_summary(changes)}", ""]
    used: set[str] = set()
    for group in _groups(changes):
        lines += [f"## `{group[0].where}`", ""]
        for change in group:
            lines.append(f"**{change.section}/{change.name}: {change.verdict}**")
            lines.append("")
            if change.fields:
                lines += ["| field | old | new |", "|---|---|---|"]
                lines += [f"| {f.path} | {_cell(f.expected)} | {_cell(f.got)} |" for f in change.fields]
            else:
                lines.append(f"{'old' if change.old else 'new'}: {_cell(change.old or change.new)}")
            old_svg, new_svg = _pictures(change)
            if image_dir is not None and (old_svg or new_svg):
                stem = _unique(re.sub(r"[^A-Za-z0-9_.-]+", "_",
                                      f"{change.where}_{change.section}_{change.name}"), used)
                cells = []
                for side, svg in (("old", old_svg), ("new", new_svg)):
                    if svg:
                        (image_dir / f"{stem}.{side}.svg").write_text(svg)
                        cells.append(f"![{side}]({image_rel}/{stem}.{side}.svg)")
                    else:
                        cells.append("(none)")
                lines += ["", "| old | new |", "|---|---|", f"| {cells[0]} | {cells[1]} |"]
            lines.append("")
    return "\n".join(lines)


def _unique(stem: str, used: set[str]) -> str:
    candidate, k = stem, 2
    while candidate in used:
        candidate, k = f"{stem}_{k}", k + 1
    used.add(candidate)
    return candidate


def render_html(changes: list[Change], base_label: str) -> str:
    """One self-contained page: the same content with the SVGs inline."""
    esc = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>Layout snapshot review</title>",
           "<style>body{font-family:sans-serif;margin:2em}code{font-size:90%}td,th{border:1px solid #ccc;"
           "padding:2px 6px;vertical-align:top}table{border-collapse:collapse;margin:.5em 0}"
           ".changed{color:#b00}.same{color:#070}</style></head><body>",
           "<h1>Layout snapshot review</h1>", f"<p>Base: <code>{esc(base_label)}</code>. {esc(_summary(changes))}</p>"]
    for group in _groups(changes):
        out.append(f"<h2><code>{esc(group[0].where)}</code></h2>")
        for change in group:
            cls = "same" if change.verdict == snapshot.SAME else "changed"
            out.append(f"<h3>{esc(change.section)}/{esc(change.name)}: <span class='{cls}'>{esc(change.verdict)}</span></h3>")
            if change.fields:
                out.append("<table><tr><th>field</th><th>old</th><th>new</th></tr>")
                out += [f"<tr><td>{esc(f.path)}</td><td><code>{esc(snapshot.short(f.expected))}</code></td>"
                        f"<td><code>{esc(snapshot.short(f.got))}</code></td></tr>" for f in change.fields]
                out.append("</table>")
            else:
                out.append(f"<p><code>{esc(snapshot.short(change.old or change.new))}</code></p>")
            old_svg, new_svg = _pictures(change)
            if old_svg or new_svg:
                out.append("<table><tr><th>old</th><th>new</th></tr><tr>"
                           f"<td>{old_svg or '(none)'}</td><td>{new_svg or '(none)'}</td></tr></table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- entry point

def main(root: Path, expected_dir: Path, base: str, html_path: str | None, out_dir: str | None, stdout) -> int:
    """``run.py --review``: write ``review/REVIEW.md`` (+ pictures, + HTML when asked), print the Markdown."""
    import sys
    try:
        base_snaps, label = base_snapshots(root, expected_dir, base)
        head = head_snapshots(expected_dir)
    except (ReviewError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    changes = changes_between(base_snaps, head)
    out = Path(out_dir) if out_dir else root / "review"
    images = out / "svg"
    images.mkdir(parents=True, exist_ok=True)
    for old in images.glob("*.svg"):
        old.unlink()
    markdown = render_markdown(changes, label, images, "svg")
    (out / "REVIEW.md").write_text(markdown)
    print(markdown, file=stdout)
    print(f"review written to {out / 'REVIEW.md'}", file=stdout)
    if html_path:
        Path(html_path).write_text(render_html(changes, label))
        print(f"HTML review written to {html_path}", file=stdout)
    return 0
