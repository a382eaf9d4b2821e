"""The repository stands alone: every public name documented, no reference to files outside it, the docs'
code runs, and the packaging metadata is complete."""
from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tilelayout as tl
import tilelayout.passes as passes

ROOT = Path(__file__).resolve().parent.parent


def _undocumented(module) -> list[str]:
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.ismodule(obj) or not (inspect.isclass(obj) or callable(obj)):
            continue
        own_doc = obj.__doc__ if not inspect.isclass(obj) else vars(obj).get("__doc__")
        if not (own_doc or "").strip() or (inspect.isclass(obj) and own_doc.startswith(f"{obj.__name__}(")):
            missing.append(f"{module.__name__}.{name}")
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                member = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                if (isinstance(member, property) or inspect.isfunction(member)) and not (member.__doc__ or "").strip():
                    missing.append(f"{module.__name__}.{name}.{attr}")
    return missing


def test_every_public_name_has_a_docstring():
    assert _undocumented(tl) + _undocumented(passes) == []


def _tracked_lines_matching(pattern: re.Pattern) -> list:
    """``file:line: text`` of every line of a tracked source or text file (not the snapshots, not this file)
    that ``pattern`` finds."""
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    offenders = []
    for rel in tracked.stdout.split():
        path = ROOT / rel
        if path.suffix not in (".py", ".md", ".toml", ".txt", "") or rel.startswith("expected/") or not path.is_file():
            continue
        if rel == "tests/test_docs_and_packaging.py":
            continue
        for k, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{rel}:{k}: {line.strip()}")
    return offenders


def test_no_reference_to_files_outside_the_repository():
    assert _tracked_lines_matching(re.compile(r"DESIGN\.md|STYLE\.md|shared/(peer|seeds|reference)|/work/")) == []


def test_docs_cost_model_example_runs_and_prints_what_it_says(tmp_path):
    text = (ROOT / "docs" / "cost-models.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    script = tmp_path / "example.py"                       # TVMScript needs a real source file
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    promised = [line[2:] for line in code.splitlines() if line.startswith("# [")]
    assert out.stdout.splitlines()[0] == promised[0]
    assert out.stdout.splitlines()[1] == "32"


def test_docs_pages_link_to_each_other_and_exist():
    index = (ROOT / "docs" / "README.md").read_text()
    for page in re.findall(r"\]\(([a-z-]+\.md)\)", index):
        assert (ROOT / "docs" / page).is_file(), page


def test_readme_is_a_short_user_guide():
    """The README is the package's long description and a newcomer's first screen: a guide, not a log."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    headings = re.findall(r"^## (.+)$", text, re.M)
    for section in ("Install", "Your first kernel", "Current figures", "Tests and the golden runner", "Documentation"):
        assert section in headings, section
    assert headings.index("Your first kernel") < headings.index("Tests and the golden runner")
    for page in ("benchmarks.md", "limits.md", "architecture.md", "tools.md"):
        assert f"](docs/{page})" in text, page


def test_every_relative_link_in_the_readme_and_docs_exists():
    broken = []
    for page in [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_repository_speaks_of_the_project_not_of_how_it_was_developed():
    assert _tracked_lines_matching(re.compile(r"\b(sessions?|sittings?)\b", re.I)) == []


def test_packaging_metadata_is_complete():
    tomllib = pytest.importorskip("tomllib")              # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = meta["project"]
    assert project["license"] == "Apache-2.0" and (ROOT / "LICENSE").read_text().count("Apache License") >= 1
    assert project["authors"] and project["classifiers"] and "version" in project["dynamic"]
    assert project["scripts"]["tilelayout"] == "tilelayout.cli:main_entry"
    assert "matplotlib>=3.5" in project["optional-dependencies"]["plot"]
    assert "matplotlib>=3.5" in project["optional-dependencies"]["test"]
    assert (ROOT / "python" / "tilelayout" / "py.typed").exists()
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["tilelayout"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {tl.__version__}" in changelog


def test_no_dependency_caps_ml_dtypes_and_tilelayout_imports_without_it():
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ml = [d for d in deps if d.replace("-", "_").startswith("ml_dtypes")]
    assert ml and not any("<" in d for d in ml), ml       # the user's environment picks the version
    # our own use is lazy: with ml_dtypes unimportable, import and inference still work
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import tilelayout as tl\n"
            f"sys.path.insert(0, {str(ROOT / 'tests' / 'data' / 'cli')!r})\n"
            "import my_kernels\n"
            "print(sorted(tl.infer_layouts(my_kernels.row_softmax_shift).buffers))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['frag', 'mx']"


def test_installed_version_matches_the_package():
    from importlib.metadata import version
    assert version("tilelayout") == tl.__version__


def test_lowering_is_imported_on_first_use_only():
    """``import tilelayout`` and inference leave the lowering modules unloaded; every lowering name of the
    public API still resolves (to the very object its module defines) the first time it is asked for."""
    script = (
        "import sys, tilelayout as tl\n"
        "loaded = lambda: sorted(m for m in sys.modules if m.startswith('tilelayout.passes.lowering'))\n"
        "assert loaded() == [], loaded()\n"
        "from tilelayout.passes.lowering import pipeline\n"
        "assert tl.lower is pipeline.lower and tl.cuda_source is pipeline.cuda_source\n"
        "assert tl.build_cpu is pipeline.build_cpu and tl.passes.check_numeric is pipeline.check_numeric\n"
        "from tilelayout.passes import LowerTileOps, SerializeThreads\n"
        "from tilelayout.passes.lowering.lower_tile_ops import LowerTileOps as direct\n"
        "assert LowerTileOps is direct and callable(SerializeThreads)\n"
        "for name in tl.passes.__all__: getattr(tl.passes, name)\n"
        "try:\n"
        "    tl.passes.no_such_pass\n"
        "except AttributeError as err:\n"
        "    assert 'no_such_pass' in str(err)\n"
        "else:\n"
        "    raise SystemExit('an unknown name resolved')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
