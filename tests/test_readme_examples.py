"""The README's examples run as written: its kernel is the shipped ``examples/row_softmax.py``, its Python
blocks run and print what the text says, every command of its command-line block runs on ``examples/``
unchanged, and its install-and-test commands are the ones ``.ci/run`` runs."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def _cli_block() -> str:
    blocks = [b for b in _blocks("bash") if b.lstrip().startswith("tilelayout ")]
    assert len(blocks) == 1, "the README has one command-line block of tilelayout commands"
    return blocks[0]


def _cli_lines() -> list[str]:
    return [line.split("  #")[0].strip() for line in _cli_block().splitlines() if line.strip()]


def _env_with_the_command(tmp_path: Path) -> dict:
    """The environment a user has after ``pip install``: this interpreter's scripts first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["MPLBACKEND"] = "Agg"
    env["MPLCONFIGDIR"] = str(tmp_path / "mpl")
    return env


def test_the_readme_kernel_is_the_shipped_example():
    kernel = _blocks("python")[0]
    assert "@T.prim_func" in kernel
    assert kernel.strip() in (ROOT / "examples" / "row_softmax.py").read_text()


def test_the_readme_python_blocks_run_and_print_what_the_text_says(tmp_path):
    script = tmp_path / "readme_example.py"           # TVMScript needs a real source file
    script.write_text("\n".join(_blocks("python")))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env=_env_with_the_command(tmp_path))
    assert out.returncode == 0, out.stderr[-4000:]
    stated = re.search(r"`x` prints as `(.*?), \.\.\.\)`", README, re.S)
    assert stated, "the README states how x prints"
    assert " ".join(stated.group(1).split()) in out.stdout
    assert "match" in out.stdout and "mismatch" not in out.stdout
    for picture in ("row_max.png", "acc.png", "swz.png"):
        assert (tmp_path / picture).stat().st_size > 0, picture


def test_every_readme_command_line_runs_on_the_examples_as_written(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    env = _env_with_the_command(tmp_path)
    if shutil.which("tilelayout", path=env["PATH"]) is None:
        pytest.fail("the tilelayout command is not installed next to this Python (pip install -e .)")
    lines = _cli_lines()
    assert len(lines) >= 6
    for line in lines:
        out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
        assert out.returncode == 0, f"{line}\n{out.stderr[-4000:]}"
        words = shlex.split(line)
        if ">" in words:
            written = (tmp_path / words[words.index(">") + 1]).read_text()
            assert written.strip(), line
        else:
            assert out.stdout.strip(), line
        if words[1] == "check":
            assert out.stdout.startswith("ok:"), line
    assert sorted(p.suffix for p in (tmp_path / "pics").iterdir()) and all(
        p.stat().st_size > 0 for p in (tmp_path / "pics").iterdir())
    assert "mma.sync" in (tmp_path / "gemm_sm80.cu").read_text()
    assert "wgmma" in (tmp_path / "gemm_sm90a.tir").read_text()


def test_every_shipped_example_is_run_by_the_readme():
    block = _cli_block()
    examples = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
    assert examples
    for name in examples:
        assert f"examples/{name}:" in block, f"examples/{name} is not exercised by the README's command-line block"


def _normalise(command: str) -> list[str]:
    """One shell command, as a list of ``&&``-joined steps, with spelling that does not change what runs."""
    steps = []
    for step in command.split("&&"):
        words = shlex.split(step)
        words = ["python" if w in ("python3", "python") else w for w in words]
        if words[1:4] == ["-m", "pip", "install"]:
            words = [w for w in words if w != "-q"]
        steps.append(" ".join(words))
    return steps


def test_the_readme_main_job_and_test_command_are_what_ci_runs():
    quickstart = next(b for b in _blocks("bash") if "maint/run.py" in b)
    commands = [line for line in quickstart.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2, commands
    main_job, tests = (_normalise(c) for c in commands)
    assert main_job[-1] == "python maint/run.py -j 2"
    assert tests[-1].startswith("python -m pytest")

    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    ci_test = _normalise(ci[ci.index("# README test command") + 1])
    ci_main = _normalise(ci[ci.index(next(line for line in ci if line.startswith("# README main job"))) + 1])
    assert tests == ci_test
    # CI installs once, for the tests, then runs the main job in the same environment
    assert main_job[:-1] == ci_test[:len(main_job) - 1] and main_job[-1:] == ci_main
