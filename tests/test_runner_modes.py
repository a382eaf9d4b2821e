"""Every documented mode of the golden runner (``maint/run.py --help``) over every case, so that a mode cannot
break on a kind of case the narrower tests do not pick (``--cute`` once did on every layout conversion).

Check mode with ``-j 2`` runs in CI after the tests (``.ci/run``); ``--numeric`` runs variant by variant in
``tests/test_cpu_numeric.py`` (``test_every_case_variant_matches_its_reference`` calls the mode's own
``numeric_variant``), where its cost (about 2 minutes on 2 cores, nearly all of it LLVM building the lowered
kernels) is paid once. The modes here read or infer layouts only: a few seconds each.
"""
from __future__ import annotations

import io
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint import run  # noqa: E402
from maint.case_loader import discover, load_case  # noqa: E402
from maint.lowered_checks import anchor_table  # noqa: E402

MODELS = ("register-count", "io-aware")


from conftest import kernel_warnings  # noqa: E402


def invoke(*argv):
    out = io.StringIO()
    with kernel_warnings():      # golden kernels warn by design (resources, conversions)
        code = run.main(list(argv), stdout=out)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def modules():
    return {name: load_case(ROOT / "cases", name) for name in discover(ROOT / "cases")}


def _pairs(modules) -> list:
    return [f"{case}/{variant}/{model}" for case, m in modules.items() for variant in m.VARIANTS for model in MODELS]


def test_show_prints_every_variants_layouts_and_matches(modules):
    code, text = invoke("--show")
    pairs = _pairs(modules)
    assert code == 0, text
    assert f"{len(pairs)}/{len(pairs)} variant-model pairs match" in text
    shown = {"/".join(line.split("/")[:3]) for line in text.splitlines() if re.search(r"/(buffers|loops)/", line)}
    assert shown == set(pairs)


def test_explain_explains_every_variant(modules):
    code, text = invoke("--explain", "/")
    assert code == 0
    headers = re.findall(r"^== (\S+)$", text, re.M)
    assert headers == _pairs(modules)
    assert "inference failed" not in text


def test_cute_scores_every_golden_fragment_conversions_included(modules):
    code, text = invoke("--cute")
    assert code == 0, text
    m = re.search(r"(\d+)/(\d+) statements match, (\d+) refused by both sides, 0 disagree", text)
    assert m is not None, text
    # a layout conversion's second version of a fragment (acc_cv) is scored with its source's element size
    code, text = invoke("--cute", "--case", "conversion_transposed")
    assert code == 0 and "0 disagree" in text, text


def test_anchor_checks_every_anchored_variant(modules):
    code, text = invoke("--anchor")
    want = sum(len(anchor_table(m, v, model)) for m in modules.values()
               for v in (getattr(m, "VECTOR_ANCHOR", None) or {}) for model in MODELS)
    assert code == 0, text
    assert f"{want}/{want} vector anchors match" in text


def test_record_over_every_case_rewrites_nothing(tmp_path):
    expected = tmp_path / "expected"
    shutil.copytree(ROOT / "expected", expected)
    code, text = invoke("--record", "--expected-dir", str(expected))
    assert code == 0, text
    assert "wrote" not in text
    assert "recorded" in text.splitlines()[-1]


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="--review compares with a git revision")
def test_review_reads_every_snapshot(tmp_path):
    out = tmp_path / "review"
    code, text = invoke("--review", "--out", str(out), "--html", str(tmp_path / "review.html"))
    assert code == 0, text
    assert (out / "REVIEW.md").exists() and (tmp_path / "review.html").exists()
