"""The golden runner (maint/run.py, snapshot.py, review.py) without real inference.

Inference is replaced by a fake that returns fixed layout dicts, so these tests pin the runner's
own behaviour: snapshot io, field diffs, the spelling/mapping verdict, record/check exit codes,
hooks, the review report.
"""
from __future__ import annotations

import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint import case_loader, review, run, snapshot  # noqa: E402


def frag(thread="_i % 8 * 16 + _j // 8", index="_i // 8 * 8 + _j % 8", rep=1, shape=(128, 128), out=(128,),
         threads=128) -> dict:
    return {"kind": "Fragment", "input_shape": list(shape), "output_shape": list(out), "forward_index": [index],
            "forward_thread": thread, "replicate": rep, "threads": threads, "thread_range": [0, threads]}


# --------------------------------------------------------------------------- snapshot io and diffs

def test_dumps_sorts_keys_and_indents_by_two():
    text = snapshot.dumps({"b": 1, "a": {"d": [1, 2], "c": 0}})
    assert text == '{\n  "a": {\n    "c": 0,\n    "d": [\n      1,\n      2\n    ]\n  },\n  "b": 1\n}\n'


def test_save_reports_whether_content_changed(tmp_path):
    path = tmp_path / "x.json"
    assert snapshot.load(path) == {}
    assert snapshot.save(path, {"v": {}}) is True
    assert snapshot.save(path, {"v": {}}) is False
    assert snapshot.load(path) == {"v": {}}
    assert snapshot.save(path, {"w": {}}) is True


def test_load_rejects_broken_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        snapshot.load(path)


def test_field_diff_names_the_leaf_like_tilelang():
    old = {"buffers": {"frag": frag()}, "loops": {}}
    new = {"buffers": {"frag": frag(rep=128)}, "loops": {}}
    lines = [str(d) for d in snapshot.diff(old, new, "elementwise_copy/fp16_128x128_t128/io-aware")]
    assert lines == ["elementwise_copy/fp16_128x128_t128/io-aware/buffers/frag/replicate: expected 1, got 128"]


def test_field_diff_reports_absent_entries_with_a_summary():
    lines = [str(d) for d in snapshot.diff({"loops": {}}, {"loops": {"i[8]": frag(shape=(8,), out=(1,))}})]
    assert len(lines) == 1 and lines[0].startswith("loops/i[8]: expected <absent>, got Fragment [8] -> [1]")


def test_diff_of_equal_trees_is_empty():
    assert snapshot.diff({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "x"}]}) == []


# --------------------------------------------------------------------------- spelling versus mapping

def test_reordered_expression_is_spelling_only():
    assert snapshot.compare_mapping(frag(), frag(thread="_j // 8 + _i % 8 * 16")) == snapshot.SAME


def test_different_thread_map_is_a_mapping_change():
    other = frag(thread="_j % 16 * 8 + _i // 16", index="_i % 16 * 8 + _j // 16")
    assert snapshot.compare_mapping(frag(), other) == snapshot.CHANGED


def test_replicas_are_an_unordered_set():
    base = frag(thread="_rep * 2 + _i", index="0", rep=2, shape=(2,), out=(1,), threads=4)
    swapped = dict(base, forward_thread="(1 - _rep) * 2 + _i")
    regrouped = dict(base, forward_thread="_rep + _i * 2")
    assert snapshot.compare_mapping(base, swapped) == snapshot.SAME
    assert snapshot.compare_mapping(base, regrouped) == snapshot.CHANGED


def test_thread_range_shift_is_a_mapping_change():
    moved = dict(frag(), thread_range=[128, 128])
    assert snapshot.compare_mapping(frag(), moved) == snapshot.CHANGED


def test_unparsable_layout_gives_unknown_verdict():
    assert snapshot.compare_mapping(frag(), frag(thread="_i +* 2")).startswith("mapping unknown")


# --------------------------------------------------------------------------- check / record on a fake case dir

CASE = '''
"""A fake case for the runner tests."""
VARIANTS = {"v1": lambda: "v1", "v2": lambda: "v2"}

def check(variant, model, result):
    assert result["buffers"]["frag"]["replicate"] == 1, "frag must not be replicated"
'''


class FakeLayout:
    def __init__(self, d):
        self.d = d

    def to_dict(self):
        return dict(self.d)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A case dir, an expected dir and a controllable fake inference."""
    import tilelayout
    cases, expected = tmp_path / "cases", tmp_path / "expected"
    cases.mkdir()
    (cases / "toy.py").write_text(CASE)
    state = SimpleNamespace(layouts={"frag": frag()}, fail=None, models=["register-count"])

    def infer_layouts(func, target=None, cost_model=None):
        if state.fail:
            raise ValueError(state.fail)
        return SimpleNamespace(buffers={k: FakeLayout(v) for k, v in state.layouts.items()}, loops={})

    monkeypatch.setattr(tilelayout, "infer_layouts", infer_layouts, raising=False)
    monkeypatch.setattr(run, "available_models", lambda: list(state.models))
    case_loader._LOADED.clear()

    def invoke(*argv):
        out = io.StringIO()
        code = run.main(["--cases-dir", str(cases), "--expected-dir", str(expected), *argv], stdout=out)
        return code, out.getvalue()

    state.invoke, state.cases, state.expected = invoke, cases, expected
    return state


def test_check_without_snapshot_fails_then_record_then_match(fake):
    code, out = fake.invoke()
    assert code == 1 and "no snapshot in expected/toy.json (run --record)" in out
    code, out = fake.invoke("--record")
    assert code == 0 and "2/2 variant-model pairs recorded" in out
    data = json.loads((fake.expected / "toy.json").read_text())
    assert data["v1"]["register-count"]["buffers"]["frag"] == frag()
    code, out = fake.invoke()
    assert code == 0 and out.strip().splitlines()[-1].startswith("2/2 variant-model pairs match")


def test_mismatch_prints_field_diff_and_mapping_verdict(fake):
    fake.invoke("--record")
    fake.layouts = {"frag": frag(thread="_j // 8 + _i % 8 * 16")}
    code, out = fake.invoke()
    assert code == 1
    assert ("toy/v1/register-count/buffers/frag/forward_thread: expected \"_i % 8 * 16 + _j // 8\", "
            "got \"_j // 8 + _i % 8 * 16\"") in out
    assert "toy/v1/register-count/buffers/frag: same mapping (spelling only)" in out
    assert "0/2 variant-model pairs match" in out


def test_record_still_enforces_check_and_keeps_old_entry(fake):
    fake.invoke("--record")
    before = (fake.expected / "toy.json").read_text()
    fake.layouts = {"frag": frag(thread="_rep * 2 + _i", index="0", rep=2, shape=(2,), out=(1,), threads=4)}
    code, out = fake.invoke("--record")
    assert code == 1 and "not recorded, check failed: AssertionError: frag must not be replicated" in out
    assert (fake.expected / "toy.json").read_text() == before


def test_inference_error_is_a_failure_not_a_crash(fake):
    fake.fail = "no layout for frag"
    code, out = fake.invoke("--record")
    assert code == 1 and "toy/v1/register-count: not recorded, inference failed" in out
    assert not (fake.expected / "toy.json").exists()            # nothing recorded, no empty file
    fake.fail = None
    fake.invoke("--record")
    fake.fail = "no layout for frag"
    code, out = fake.invoke()
    assert code == 1 and "toy/v1/register-count: inference failed: ValueError: no layout for frag" in out


def test_stale_variant_in_snapshot_fails_check_and_record_removes_it(fake):
    fake.invoke("--record")
    path = fake.expected / "toy.json"
    data = json.loads(path.read_text())
    data["gone"] = data["v1"]
    path.write_text(snapshot.dumps(data))
    code, out = fake.invoke()
    assert code == 1 and "toy/gone: in expected/toy.json but not in VARIANTS" in out
    assert fake.invoke("--record")[0] == 0
    assert "gone" not in json.loads(path.read_text())


def test_case_filter_and_show(fake):
    fake.invoke("--record")
    code, out = fake.invoke("--case", "toy/v2", "--show")
    assert code == 0 and "1/1 variant-model pairs match" in out
    assert "toy/v2/register-count/buffers/frag: Fragment [128, 128] -> [128] | threads=128 rep=1" in out
    assert fake.invoke("--case", "nothing")[0] == 2


def test_unregistered_model_is_a_usage_error_and_other_models_are_kept(fake):
    assert fake.invoke("--model", "io-aware")[0] == 2
    assert fake.invoke("--model", "no-such-model")[0] == 2
    fake.models = ["register-count", "io-aware"]
    fake.invoke("--record")
    fake.models = ["register-count"]
    fake.layouts = {"frag": frag(thread="_j // 8 + _i % 8 * 16")}
    fake.invoke("--record", "--model", "register-count")
    data = json.loads((fake.expected / "toy.json").read_text())
    assert data["v1"]["io-aware"]["buffers"]["frag"] == frag()
    assert data["v1"]["register-count"]["buffers"]["frag"]["forward_thread"] == "_j // 8 + _i % 8 * 16"


def test_parallel_jobs_match_serial(fake):
    fake.invoke("--record")
    code, out = fake.invoke("-j", "2")
    assert code == 0 and "2/2 variant-model pairs match" in out


def test_broken_case_module_is_exit_2(fake, capsys):
    (fake.cases / "broken.py").write_text('"""No variants."""\n')
    assert fake.invoke()[0] == 2
    assert "broken: VARIANTS must be" in capsys.readouterr().err


EXITING_CASE = '''
"""A case whose check exits the process instead of asserting."""
import sys
VARIANTS = {"v1": lambda: "v1"}

def check(variant, model, result):
    sys.exit(0)
'''


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_check_that_calls_sys_exit_fails_its_case_in_check_and_record(fake, jobs):
    (fake.cases / "toy.py").unlink()
    (fake.cases / "exiting.py").write_text(EXITING_CASE)
    code, out = fake.invoke("--record", "-j", jobs)
    assert code == 1 and "exiting/v1/register-count: not recorded, check failed: SystemExit(0)" in out
    assert not (fake.expected / "exiting.json").exists()
    (fake.expected).mkdir(exist_ok=True)
    (fake.expected / "exiting.json").write_text(snapshot.dumps({"v1": {"register-count": {
        "buffers": {"frag": frag()}, "loops": {}}}}))
    code, out = fake.invoke("-j", jobs)
    assert code == 1 and "exiting/v1/register-count: check failed: SystemExit(0)" in out
    assert "0/1 variant-model pairs match" in out


def test_a_case_module_that_exits_on_import_is_exit_2(fake, capsys):
    (fake.cases / "quits.py").write_text('"""Quits."""\nimport sys\nsys.exit(0)\n')
    assert fake.invoke()[0] == 2
    assert "quits: cannot import" in capsys.readouterr().err


def test_bad_arguments_are_exit_2(fake):
    assert fake.invoke("--bogus")[0] == 2
    assert fake.invoke("-j", "0")[0] == 2
    assert fake.invoke("--record", "--review")[0] == 2


# --------------------------------------------------------------------------- review

def _snap(layout: dict) -> dict:
    return {"v": {"register-count": {"buffers": {"frag": layout}, "loops": {}}}}


def test_changes_between_classifies_each_layout():
    base = {"a": _snap(frag()), "b": _snap(frag()), "gone": _snap(frag())}
    head = {"a": _snap(frag(thread="_j // 8 + _i % 8 * 16")),
            "b": _snap(frag(thread="_j % 16 * 8 + _i // 16", index="_i % 16 * 8 + _j // 16")),
            "new": _snap(frag())}
    verdicts = {c.case: c.verdict for c in review.changes_between(base, head)}
    assert verdicts == {"a": snapshot.SAME, "b": snapshot.CHANGED, "gone": "removed", "new": "added"}


def test_markdown_report_lists_fields_and_pictures_of_mapping_changes(tmp_path):
    base = {"b": _snap(frag())}
    head = {"b": _snap(frag(thread="_j % 16 * 8 + _i // 16", index="_i % 16 * 8 + _j // 16"))}
    changes = review.changes_between(base, head)
    text = review.render_markdown(changes, "HEAD", tmp_path, "svg")
    assert "## `b/v/register-count`" in text and "**buffers/frag: mapping changed**" in text
    assert "| forward_thread | `\"_i % 8 * 16 + _j // 8\"` | `\"_j % 16 * 8 + _i // 16\"` |" in text
    svgs = sorted(tmp_path.glob("*.svg"))
    assert [p.name.rsplit(".", 2)[1] for p in svgs] == ["new", "old"]
    root = ET.fromstring(svgs[0].read_text())           # well-formed, small
    assert root.tag.endswith("svg") and len(svgs[0].read_text()) < 200_000
    assert 'stroke="#d00"' in svgs[0].read_text()                      # changed cells outlined


def test_spelling_only_change_gets_no_picture(tmp_path):
    changes = review.changes_between({"a": _snap(frag())}, {"a": _snap(frag(thread="_j // 8 + _i % 8 * 16"))})
    review.render_markdown(changes, "HEAD", tmp_path, "svg")
    assert not list(tmp_path.glob("*.svg"))


def test_svg_grid_of_one_dimensional_fragment_wraps_rows():
    svg = review.svg_grid(frag(thread="_i % 128", index="_i // 128", shape=(229,), out=(2,)))
    ET.fromstring(svg)
    assert "showing" not in svg and svg.count("<rect") == 229          # 8 rows of 32, all shown


def test_html_report_inlines_svg():
    changes = review.changes_between({}, {"n": _snap(frag())})
    page = review.render_html(changes, "HEAD")
    assert page.startswith("<!doctype html>") and "<svg" in page and "added" in page


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(repo)})


def test_review_against_git_base(tmp_path):
    repo, expected = tmp_path, tmp_path / "expected"
    expected.mkdir()
    _git(repo, "init", "-q")
    out = io.StringIO()
    (expected / "c.json").write_text(snapshot.dumps(_snap(frag())))
    assert review.main(repo, expected, "HEAD", None, str(tmp_path / "r0"), out) == 0   # no commits yet
    assert "no commits yet" in out.getvalue() and "added" in out.getvalue()
    _git(repo, "add", "expected/c.json")
    _git(repo, "commit", "-q", "-m", "base")
    (expected / "c.json").write_text(snapshot.dumps(_snap(frag(rep=2, thread="_rep * 64 + _i % 8 * 8 + _j // 16",
                                                                 index="_i // 8 * 16 + _j % 16", out=(256,)))))
    out = io.StringIO()
    html_path = tmp_path / "r.html"
    assert review.main(repo, expected, "HEAD", str(html_path), str(tmp_path / "r1"), out) == 0
    text = out.getvalue()
    assert "replicate | `1` | `2`" in text and "mapping changed" in text
    assert (tmp_path / "r1" / "REVIEW.md").exists() and html_path.read_text().count("<svg") == 2
    assert review.main(repo, expected, "no-such-ref", None, str(tmp_path / "r2"), io.StringIO()) == 2


def test_review_with_no_changes_says_so(tmp_path):
    changes = review.changes_between({"a": _snap(frag())}, {"a": _snap(frag())})
    assert changes == [] and "No snapshot differs" in review.render_markdown(changes, "HEAD", None, "svg")


# --------------------------------------------------------------------------- the real cases dir honours the contract

def test_every_real_case_module_loads_and_validates():
    names = run.discover(ROOT / "cases")
    assert len(names) >= 11
    for name in names:
        module = run.load_case(ROOT / "cases", name)
        assert module.VARIANTS and module.__doc__.strip()


def test_script_entry_point_exits_2_on_usage_error():
    proc = subprocess.run([sys.executable, str(ROOT / "maint" / "run.py"), "--model", "no-such-model"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown cost model" in proc.stderr


def test_progress_writes_only_to_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    run.Progress(tty)(3, 46, "reduce_broadcast/64x128_t128")
    run.Progress(pipe)(3, 46, "reduce_broadcast/64x128_t128")
    assert "[3/46] reduce_broadcast/64x128_t128" in tty.getvalue() and pipe.getvalue() == ""


def test_case_modules_are_registered_so_inspect_finds_them(tmp_path):
    """TVMScript's ``@T.prim_func`` looks up the module of every frame on the stack; a case module missing
    from ``sys.modules`` made each lookup rescan every loaded module. Two directories holding a case of the
    same name get two modules, and a case that fails to import leaves nothing behind."""
    import inspect
    dirs = [tmp_path / "a" / "cases", tmp_path / "b" / "cases"]
    for k, d in enumerate(dirs):
        d.mkdir(parents=True)
        (d / "same.py").write_text(f'"""Case {k}."""\ndef build():\n    return {k}\nVARIANTS = {{"v": build}}\n')
    a, b = (case_loader.load_case(d, "same") for d in dirs)
    assert a is not b and a.__name__ != b.__name__
    for k, module in enumerate((a, b)):
        assert sys.modules[module.__name__] is module and module.VARIANTS["v"]() == k
        code = module.build.__code__
        assert inspect.getmodule(code, code.co_filename) is module
    (dirs[0] / "broken.py").write_text('"""Broken."""\nraise RuntimeError("no")\n')
    with pytest.raises(case_loader.UsageError, match="broken: cannot import"):
        case_loader.load_case(dirs[0], "broken")
    assert not any(name.startswith("_golden_case_broken") for name in sys.modules)


def test_the_command_line_keeps_its_exit_status_and_output(tmp_path):
    """``run.py`` leaves through ``os._exit`` (no interpreter teardown): the status and every line printed must
    still arrive. An empty expected directory makes every pair a mismatch: status 1."""
    proc = subprocess.run([sys.executable, str(ROOT / "maint" / "run.py"), "--case", "elementwise_copy/fp16",
                           "--expected-dir", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("0/2 variant-model pairs match") and "no snapshot in expected" in lines[0]
