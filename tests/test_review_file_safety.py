"""``run.py --review`` never deletes or replaces a file it did not write (the --html README.md accident, and
--out DIR wiping every DIR/svg/*.svg), and .ci/run cleans up its temporary virtual environment."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint import review, run, snapshot  # noqa: E402


def _frag(thread: str) -> dict:
    return {"kind": "Fragment", "input_shape": [16, 16], "output_shape": [2], "forward_index": ["_j % 2"],
            "forward_thread": thread, "replicate": 1, "threads": 128, "thread_range": [0, 128]}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(repo)})


def _repo_with_a_change(tmp_path: Path) -> tuple[Path, Path]:
    repo, expected = tmp_path / "repo", tmp_path / "repo" / "expected"
    expected.mkdir(parents=True)
    _git(repo, "init", "-q")
    snap = {"v": {"register-count": {"buffers": {"frag": _frag("_i * 8 + _j // 2")}, "loops": {}}}}
    (expected / "c.json").write_text(snapshot.dumps(snap))
    _git(repo, "add", "expected/c.json")
    _git(repo, "commit", "-q", "-m", "base")
    snap["v"]["register-count"]["buffers"]["frag"] = _frag("_j // 2 * 16 + _i")
    (expected / "c.json").write_text(snapshot.dumps(snap))
    return repo, expected


def _review(repo, expected, html=None, out=None, force=False):
    err = io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        code = review.main(repo, expected, "HEAD", html, out, io.StringIO(), force=force)
    finally:
        sys.stderr = old
    return code, err.getvalue()


def test_html_refuses_to_replace_a_readme(tmp_path):
    repo, expected = _repo_with_a_change(tmp_path)
    readme = repo / "README.md"
    readme.write_text("# my project\n")
    code, err = _review(repo, expected, html=str(readme), out=str(tmp_path / "r"))
    assert code == 2 and "refusing to replace" in err
    assert readme.read_text() == "# my project\n"
    assert _review(repo, expected, html=str(readme), out=str(tmp_path / "r"), force=True)[0] == 0
    assert "<svg" in readme.read_text()


def test_html_replaces_its_own_previous_page(tmp_path):
    repo, expected = _repo_with_a_change(tmp_path)
    page = tmp_path / "review.html"
    assert _review(repo, expected, html=str(page), out=str(tmp_path / "r"))[0] == 0
    assert _review(repo, expected, html=str(page), out=str(tmp_path / "r"))[0] == 0


def test_out_dir_keeps_files_the_review_did_not_write(tmp_path):
    repo, expected = _repo_with_a_change(tmp_path)
    out = tmp_path / "mine"
    (out / "svg").mkdir(parents=True)
    keep = out / "svg" / "diagram.svg"
    keep.write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    notes = out / "notes.txt"
    notes.write_text("keep me")
    assert _review(repo, expected, out=str(out))[0] == 0
    generated = sorted(p.name for p in (out / "svg").glob("*.svg") if p != keep)
    assert generated and keep.exists() and notes.read_text() == "keep me"
    # a second run replaces exactly its own pictures and still leaves the others alone
    assert _review(repo, expected, out=str(out))[0] == 0
    assert sorted(p.name for p in (out / "svg").glob("*.svg") if p != keep) == generated and keep.exists()


def test_out_dir_refuses_to_replace_a_foreign_review_md(tmp_path):
    repo, expected = _repo_with_a_change(tmp_path)
    out = tmp_path / "docs"
    out.mkdir()
    (out / "REVIEW.md").write_text("hand-written review notes\n")
    code, err = _review(repo, expected, out=str(out))
    assert code == 2 and "REVIEW.md exists" in err
    assert (out / "REVIEW.md").read_text() == "hand-written review notes\n"


def test_force_only_applies_to_review():
    assert run.main(["--force"], stdout=io.StringIO()) == 2


def test_ci_script_removes_its_virtual_environment_on_exit():
    text = (ROOT / ".ci" / "run").read_text()
    assert "trap" in text and "rm -rf" in text and "EXIT" in text
    trap_line = next(line for line in text.splitlines() if line.strip().startswith("trap"))
    assert text.index(trap_line) < text.index("python3 -m venv")          # armed before anything is created
