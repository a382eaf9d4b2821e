"""Compare TileLang's own output (``tilelang_output.txt``) with the reference goldens and our snapshots.

    python maint/peer/compare.py            # goldens vs TileLang, and expected/ vs TileLang as mappings

``tilelang_output.txt`` holds one block per (arch, cost model), each a header line
``=== ... --arch ARCH ... --cost-model NAME ===`` followed by ``tilelang_peer.py``'s JSON: every case on
sm_90, and the GEMM case again on sm_80 (where TileLang keeps mma.sync instead of wgmma). Regenerate it
with the peer venv (README.md here gives the sm_90 loop; the sm_80 blocks come from the same loop with
``--arch sm_80 --only gemm_tile/m64n64k64_t128 gemm_tile/m128n128k32_t128``, that text in the header
before ``--cost-model``); nothing in the project's tests runs TileLang itself.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = Path(__file__).resolve().parent / "tilelang_output.txt"
_HEADER = re.compile(r"^=== .*--cost-model (?P<model>\S+) ===$")
_ARCH = re.compile(r"--arch (?P<arch>\S+)")
BUG_CASES = ("mixed_extents", "two_index_read", "ragged_extent")  # TileLang is wrong or fails there


def load_peer_output(path: Path = OUTPUT, arch: str = "sm_90") -> dict:
    """``{model: {"case/variant": {"buffers": ..., "loops": ...} or {"error": text}}}`` for one target."""
    blocks: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in Path(path).read_text().splitlines():
        m = _HEADER.match(line)
        if m:
            a = _ARCH.search(line)
            lines = blocks.setdefault(m.group("model"), []) if (a.group("arch") if a else "sm_90") == arch else None
        elif lines is not None:
            lines.append(line)
    return {model: json.loads("\n".join(text)) for model, text in blocks.items()}


def peer_archs(path: Path = OUTPUT) -> list[str]:
    """The targets ``tilelang_output.txt`` has blocks for, in file order."""
    out: list[str] = []
    for line in Path(path).read_text().splitlines():
        if _HEADER.match(line):
            a = _ARCH.search(line)
            arch = a.group("arch") if a else "sm_90"
            out += [arch] if arch not in out else []
    return out


def flat_offsets(d: dict) -> np.ndarray:
    """A shared Layout's row-major offset into its output buffer at every point.

    TileLang prints a swizzled tile with a structured output ([panels, row groups, offset]) where we print
    one flat offset; both describe the same placement when these tables agree.
    """
    from tilelayout import layout_from_dict
    table = np.asarray(layout_from_dict(d).table(), dtype=np.int64)
    out = [int(s) for s in d["output_shape"]]
    strides = np.cumprod([1] + out[::-1])[:-1][::-1]
    return (table * strides).sum(axis=-1)


def mapping_verdict(theirs: dict, mine: dict) -> str:
    """``snapshot.compare_mapping``, except Layouts of one input shape compare by flat offset."""
    from maint import snapshot
    if theirs.get("kind") == mine.get("kind") == "Layout" and theirs.get("input_shape") == mine.get("input_shape"):
        try:
            same = np.array_equal(flat_offsets(theirs), flat_offsets(mine))
        except Exception as err:  # noqa: BLE001 -- any failure to enumerate only weakens the verdict
            return f"mapping unknown: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        return snapshot.SAME if same else snapshot.CHANGED
    return snapshot.compare_mapping(theirs, mine)


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


def variant_arch(variant: str) -> str | None:
    """``"sm_80"`` for a variant named ``sm80_...`` (``"sm_90a"`` for ``sm90a_...``: the kernel carries that
    target), else None (any block)."""
    m = re.match(r"sm(\d+a?)_", variant)
    return f"sm_{m.group(1)}" if m else None


def snapshot_differences(peer: dict, expected_dir: Path = ROOT / "expected", arch: str = "sm_90") -> list[str]:
    """Where our recorded snapshots differ from TileLang as mappings (shared Layouts by flat offset).

    The bug cases are left out: there TileLang is wrong or fails, and their checks judge us instead; a variant
    named for a target (``sm80_...``) is compared only in that target's block.
    """
    from maint import snapshot
    out = []
    for model, results in peer.items():
        for key, got in sorted(results.items()):
            case, variant = key.split("/", 1)
            if case in BUG_CASES or variant_arch(variant) not in (None, arch):
                continue
            ours = snapshot.load(expected_dir / f"{case}.json").get(variant, {}).get(model)
            if ours is None or "error" in got:
                continue
            for section in snapshot.SECTIONS:
                for name, theirs in sorted(got[section].items()):
                    mine = ours.get(section, {}).get(name)
                    verdict = "missing in ours" if mine is None else mapping_verdict(theirs, mine)
                    if verdict != snapshot.SAME and not (mine is not None and theirs == mine):
                        out.append(f"{key}/{model}/{section}/{name}: {verdict}")
    return out


def main() -> int:
    sys.path.insert(0, str(ROOT))
    peer = load_peer_output()
    gold = golden_differences(peer)
    print("\n".join(gold) if gold else "TileLang output equals the reference goldens (all entries).")
    for arch in peer_archs():
        ours = snapshot_differences(load_peer_output(arch=arch), arch=arch)
        print("\n".join(f"[{arch}] {line}" for line in ours) if ours else
              f"[{arch}] Recorded snapshots equal TileLang wherever TileLang succeeds (or none recorded yet).")
    return 1 if gold else 0


if __name__ == "__main__":
    sys.exit(main())
