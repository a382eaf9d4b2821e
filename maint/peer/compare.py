"""Compare TileLang's own output (``tilelang_output.txt``) with the reference goldens and our snapshots.

    python maint/peer/compare.py            # goldens vs TileLang, and expected/ vs TileLang as mappings

``tilelang_output.txt`` holds one block per cost model, each a header line
``=== ... --cost-model NAME ===`` followed by ``tilelang_peer.py``'s JSON. Regenerate it with the
peer venv (see README.md here); nothing in the project's tests runs TileLang itself.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = Path(__file__).resolve().parent / "tilelang_output.txt"
_HEADER = re.compile(r"^=== .*--cost-model (?P<model>\S+) ===$")


def load_peer_output(path: Path = OUTPUT) -> dict:
    """``{model: {"case/variant": {"buffers": ..., "loops": ...} or {"error": text}}}``."""
    blocks: dict[str, list[str]] = {}
    model = None
    for line in Path(path).read_text().splitlines():
        m = _HEADER.match(line)
        if m:
            model = m.group("model")
            blocks[model] = []
        elif model is not None:
            blocks[model].append(line)
    return {model: json.loads("\n".join(lines)) for model, lines in blocks.items()}


def golden_differences(peer: dict) -> list[str]:
    """Where TileLang's output and ``maint/tilelang_goldens.py`` disagree (as strings)."""
    from maint.tilelang_goldens import GOLDENS, THREADS
    out = []
    for case, variants in GOLDENS.items():
        for variant, models in variants.items():
            for model, entries in models.items():
                got = peer[model][f"{case}/{variant}"]
                if "error" in got:
                    out.append(f"{case}/{variant}/{model}: TileLang failed: {got['error']}")
                    continue
                layouts = {**got["buffers"], **got["loops"]}
                if sorted(layouts) != sorted(entries):
                    out.append(f"{case}/{variant}/{model}: TileLang has {sorted(layouts)}, goldens {sorted(entries)}")
                for name, (thread, index, rep) in sorted(entries.items()):
                    d = layouts.get(name)
                    want = (thread, [index], rep, [0, THREADS[case][variant]])
                    if d and (d["forward_thread"], d["forward_index"], d["replicate"], d["thread_range"]) != want:
                        out.append(f"{case}/{variant}/{model}/{name}: TileLang {d['forward_thread']} | "
                                   f"{d['forward_index']} | {d['replicate']}, goldens {thread} | {index} | {rep}")
    return out


def snapshot_differences(peer: dict, expected_dir: Path = ROOT / "expected") -> list[str]:
    """Where our recorded snapshots of the seed's cases differ from TileLang as mappings.

    The bug cases are left out: there TileLang is wrong or fails, and their checks judge us instead.
    """
    from maint import snapshot
    from maint.tilelang_goldens import GOLDENS
    out = []
    for model, results in peer.items():
        for key, got in sorted(results.items()):
            case, variant = key.split("/", 1)
            if case not in GOLDENS:
                continue
            ours = snapshot.load(expected_dir / f"{case}.json").get(variant, {}).get(model)
            if ours is None or "error" in got:
                continue
            for section in snapshot.SECTIONS:
                for name, theirs in sorted(got[section].items()):
                    mine = ours.get(section, {}).get(name)
                    verdict = "missing in ours" if mine is None else snapshot.compare_mapping(theirs, mine)
                    if verdict != snapshot.SAME and not (mine is not None and theirs == mine):
                        out.append(f"{key}/{model}/{section}/{name}: {verdict}")
    return out


def main() -> int:
    sys.path.insert(0, str(ROOT))
    peer = load_peer_output()
    gold = golden_differences(peer)
    print("\n".join(gold) if gold else "TileLang output equals the reference goldens (all entries).")
    ours = snapshot_differences(peer)
    print("\n".join(ours) if ours else "Recorded snapshots equal TileLang wherever TileLang succeeds "
                                       "(or none recorded yet).")
    return 1 if gold else 0


if __name__ == "__main__":
    sys.exit(main())
