"""The runner's io-model views on the real cases: --cute parity, --explain, --show bandwidth ratios."""
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint import run  # noqa: E402


def invoke(*argv):
    out = io.StringIO()
    code = run.main(list(argv), stdout=out)
    return code, out.getvalue()


def test_cute_parity_over_golden_fragments():
    code, text = invoke("--cute", "--case", "transposed_store")
    assert code == 0, text
    assert "8/8 statements match" in text and "hit rate 8/8" in text


def test_cute_parity_reports_padded_fragments_refused_by_both_apart_from_matches():
    code, text = invoke("--cute", "--case", "ragged_extent/loop_1x229")
    assert code == 0, text       # two refusals are no disagreement, but no match either
    assert "0/4 statements match, 4 refused by both sides, 0 disagree" in text and "hit rate 0/4" in text
    assert text.count("refused by both (cute: Unconvertible") == 4


def test_explain_lists_every_root_with_costs_and_the_winner():
    code, text = invoke("--explain", "transposed_store/fp32", "--model", "io-aware")
    assert code == 0, text
    assert "mem=2162688 slots=128 regs=128 not chosen" in text
    assert "mem=786432 slots=128 regs=128 CHOSEN" in text
    assert "V=4 issue=65536 bw=524288 segments=4096" in text


def test_explain_shows_rejected_attempts_with_their_reason():
    code, text = invoke("--explain", "two_index_read/adjacent", "--model", "register-count")
    assert code == 0, text
    assert "REJECTED: buffer r:" in text and "CHOSEN" in text


def test_explain_unknown_case_is_a_usage_error():
    code, _ = invoke("--explain", "no_such_case")
    assert code == 2


def test_show_reports_bandwidth_against_the_physical_minimum():
    code, text = invoke("--show", "--case", "broadcast_read/issue1729", "--model", "io-aware")
    assert code == 0, text
    assert "Out (store): bandwidth 20480 B vs minimum 20480 B = 1.00" in text
    assert "S (load): bandwidth 1024 B vs minimum 128 B = 8.00" in text


def test_anchor_compares_emitted_and_scored_vector_lanes_with_the_case_anchor():
    code, text = invoke("--anchor", "--case", "transposed_store/fp32")
    assert code == 0, text
    assert "io-aware/A: anchor 1 lanes, emitted 1, scored 1 -> match" in text
    assert "io-aware/B: anchor 4 lanes, emitted 4, scored 4 -> match" in text
    # register-count keeps the 4-wide copy layout for transposed fp32: the store then runs scalar
    assert "register-count/B: anchor 1 lanes, emitted 1" in text


def test_anchor_reports_drift(monkeypatch):
    from maint.case_loader import load_case
    module = load_case(ROOT / "cases", "transposed_store")
    wrong = {"fp32_128x128_t128": {"io-aware": {"A": 4, "B": 4}}}
    monkeypatch.setattr(module, "VECTOR_ANCHOR", wrong)
    code, text = invoke("--anchor", "--case", "transposed_store/fp32", "--model", "io-aware")
    assert code == 1 and "io-aware/A: anchor 4 lanes, emitted 1, scored 1 -> DRIFT" in text


def test_numeric_runs_lowered_code_on_cpu_against_the_reference():
    code, text = invoke("--numeric", "--case", "reduce_broadcast/64x128", "--model", "io-aware")
    assert code == 0, text
    assert "reduce_broadcast/64x128_t128: interpreter vs sequential semantics: ok" in text
    assert "reduce_broadcast/64x128_t128/io-aware: lowered vs interpreter: ok" in text
    assert "2/2 numeric checks pass" in text


def test_numeric_checks_a_hand_written_reference_against_the_interpreter_too():
    from types import SimpleNamespace

    from maint.case_loader import load_case
    from maint.lowered_checks import numeric
    module = load_case(ROOT / "cases", "elementwise_copy")
    variant = "fp32_64x256_t256"
    good = SimpleNamespace(VARIANTS={variant: module.VARIANTS[variant]}, REFERENCE={variant: lambda d: {"B": d["A"]}})
    lines, total, passed = numeric({"good": good}, None, ["io-aware"])
    assert (total, passed) == (3, 3), lines
    assert any("interpreter vs numpy REFERENCE: ok" in l for l in lines)
    assert any("lowered vs REFERENCE: ok" in l for l in lines)
    wrong = SimpleNamespace(VARIANTS=good.VARIANTS, REFERENCE={variant: lambda d: {"B": d["A"] + 1}})
    lines, total, passed = numeric({"wrong": wrong}, None, ["io-aware"])
    assert (total, passed) == (3, 1), lines      # only the interpreter vs sequential semantics agree
    assert any("interpreter vs numpy REFERENCE: FAIL: B: 16384 of 16384 elements differ" in l for l in lines)
