"""Golden snapshots: reading and writing them, field-level diffs, spelling versus behaviour.

A snapshot file is ``{variant: {model: {"buffers": {name: layout}, "loops": {key: layout}}}}`` with
layouts in ``to_dict`` form, written as JSON with sorted keys and an indent of 2. Fields compare as
strings; when a layout's fields differ, ``compare_mapping`` enumerates both sides to say whether
only the spelling moved (a printer change) or the mapping itself (a behaviour change).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from tilelayout.report import describe_layout as describe  # one line per layout, as ``show`` prints it

SECTIONS = ("buffers", "loops")


class _Absent:
    """Marks a key present on one side of a diff only."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()


# --------------------------------------------------------------------------- file io

def dumps(snapshot: dict) -> str:
    return json.dumps(snapshot, indent=2, sort_keys=True) + "\n"


def load(path: Path) -> dict:
    """The snapshot at ``path``, or ``{}`` when there is none yet."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a snapshot must be a JSON object, got {type(data).__name__}")
    return data


def save(path: Path, snapshot: dict) -> bool:
    """Write ``snapshot``; return whether the file's content changed."""
    path = Path(path)
    text = dumps(snapshot)
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def result_to_snapshot(result) -> dict:
    """The snapshot form of an ``InferenceResult`` (its ``buffers`` and ``loops`` as dicts)."""
    return {section: {name: layout.to_dict() for name, layout in sorted(getattr(result, section).items())}
            for section in SECTIONS}


# --------------------------------------------------------------------------- field diffs

@dataclass(frozen=True)
class FieldDiff:
    path: str
    expected: Any
    got: Any

    def __str__(self) -> str:
        return f"{self.path}: expected {short(self.expected)}, got {short(self.got)}"


def short(value: Any) -> str:
    """A value as one readable line: layouts summarised, scalars as JSON."""
    if value is ABSENT:
        return "<absent>"
    if isinstance(value, dict) and "kind" in value and "forward_index" in value:
        return describe(value)
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(value)) + "}" if value else "{}"
    return json.dumps(value)


def diff(expected: Any, got: Any, path: str = "") -> list[FieldDiff]:
    """Leaf-level differences between two snapshot trees, in sorted key order."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(expected) | set(got)):
            sub = f"{path}/{key}" if path else str(key)
            out += diff(expected.get(key, ABSENT), got.get(key, ABSENT), sub)
        return out
    if (isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got)
            and any(isinstance(x, (dict, list)) for x in expected + got)):
        out = []
        for k, (a, b) in enumerate(zip(expected, got)):
            out += diff(a, b, f"{path}/{k}")
        return out
    return [] if expected == got else [FieldDiff(path, expected, got)]


def layout_entries(model_snapshot: dict | None) -> Iterator[tuple[str, str, dict]]:
    """(section, name, layout) for every layout in one model's snapshot, sorted."""
    for section in SECTIONS:
        for name, layout in sorted(((model_snapshot or {}).get(section) or {}).items()):
            yield section, name, layout


# --------------------------------------------------------------------------- same mapping?

SAME, CHANGED = "same mapping (spelling only)", "mapping changed"


def compare_mapping(old: dict, new: dict) -> str:
    """``SAME`` or ``CHANGED`` by exact enumeration, or ``"mapping unknown: <why>"``."""
    if old.get("kind") != new.get("kind") or old.get("input_shape") != new.get("input_shape"):
        return CHANGED
    if old.get("kind") == "Fragment" and (old.get("replicate") != new.get("replicate")):
        return CHANGED
    try:
        a, b = signature(old), signature(new)
    except Exception as err:  # noqa: BLE001 -- any failure to enumerate only weakens the verdict
        return f"mapping unknown: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return SAME if a.shape == b.shape and np.array_equal(a, b) else CHANGED


def signature(d: dict) -> np.ndarray:
    """A canonical table of a layout's mapping, independent of how its expressions are written.

    Layout: the forward index at every point. Fragment: per point, its (thread, slot...) rows over all
    replicas, sorted, threads absolute (range minimum added) -- replicas are an unordered set.
    """
    from tilelayout import layout_from_dict
    lay = layout_from_dict(d)
    shape = [int(s) for s in d["input_shape"]]
    index = np.asarray(lay.table(), dtype=np.int64)
    if d["kind"] != "Fragment":
        return index
    threads = np.asarray(lay.thread_table(), dtype=np.int64)
    threads = threads + (int(d["thread_range"][0]) if d.get("thread_range") else 0)
    reps = threads.shape[-1]
    if index.ndim == len(shape) + 1:
        index = np.broadcast_to(index[..., None, :], (*shape, reps, index.shape[-1]))
    rows = np.concatenate([threads[..., None], index], axis=-1).reshape(-1, reps, index.shape[-1] + 1)
    order = np.lexsort(rows.transpose(2, 0, 1)[::-1], axis=-1)
    return np.take_along_axis(rows, order[..., None], axis=1)
