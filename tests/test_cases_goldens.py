"""Our recorded snapshots of the eight original cases equal TileLang's goldens as mappings.

The goldens (maint/tilelang_goldens.py) are TileLang's published summary, itself checked here against
TileLang's saved output. Snapshot comparisons skip until ``expected/<case>.json`` is recorded.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint import snapshot  # noqa: E402
from maint.peer.compare import golden_differences, load_peer_output  # noqa: E402
from maint.tilelang_goldens import GOLDENS, THREADS, golden_dict  # noqa: E402

MODELS = ("register-count", "io-aware")
ENTRIES = [(case, variant, model, name)
           for case, variants in GOLDENS.items() for variant, models in variants.items()
           for model, names in models.items() for name in names]


def test_goldens_transcribe_tilelang_exactly():
    assert golden_differences(load_peer_output()) == []


def test_goldens_cover_every_seed_variant_under_both_models():
    assert len(GOLDENS) == 8 and len(ENTRIES) == 60
    for case, variants in GOLDENS.items():
        assert list(variants) == list(importlib.import_module(f"cases.{case}").VARIANTS)
        assert list(variants) == list(THREADS[case])
        assert all(sorted(models) == sorted(MODELS) for models in variants.values())


def test_broadcast_read_goldens_are_the_two_models_disagreeing():
    v = GOLDENS["broadcast_read"]["issue1729_2x2560_t256"]
    assert v["io-aware"]["s_frag"][2] == 256 and v["register-count"]["s_frag"][2] == 128


def _our_entry(case, variant, model, name):
    data = snapshot.load(ROOT / "expected" / f"{case}.json")
    ours = data.get(variant, {}).get(model)
    if ours is None:
        pytest.skip(f"expected/{case}.json has no {variant}/{model} yet (run maint/run.py --record)")
    section = "loops" if "[" in name else "buffers"
    return ours, ours[section].get(name)


@pytest.mark.parametrize("case,variant,model,name", ENTRIES, ids=["/".join(e) for e in ENTRIES])
def test_recorded_layout_equals_tilelang_as_mapping(case, variant, model, name):
    ours, entry = _our_entry(case, variant, model, name)
    assert entry is not None, f"{name} missing from our snapshot"
    want = golden_dict(case, variant, model, name, entry["input_shape"])
    assert snapshot.compare_mapping(want, entry) == snapshot.SAME, (want, entry)


@pytest.mark.parametrize("case,variant,model", sorted({e[:3] for e in ENTRIES}))
def test_recorded_fragments_and_loops_are_exactly_tilelangs(case, variant, model):
    """No extra fragment or loop (a shared tile's Layout entry is ours to add)."""
    ours, _ = _our_entry(case, variant, model, next(iter(GOLDENS[case][variant][model])))
    names = {n for s in snapshot.SECTIONS for n, d in ours[s].items() if d["kind"] == "Fragment"}
    assert names == set(GOLDENS[case][variant][model])


def test_golden_layouts_are_valid_fragments():
    from tilelayout import layout_from_dict
    peer = load_peer_output()
    for case, variant, model, name in ENTRIES:
        got = peer[model][f"{case}/{variant}"]
        shape = {**got["buffers"], **got["loops"]}[name]["input_shape"]
        lay = layout_from_dict(golden_dict(case, variant, model, name, shape))
        threads = np.asarray(lay.thread_table())
        assert threads.min() >= 0 and threads.max() < THREADS[case][variant]
