"""The ``tilelayout`` command end to end on a kernel file outside cases/ (tests/data/cli/my_kernels.py).

A few runs go through the installed console script (and ``python -m tilelayout``) in a subprocess, as a
user would; the rest call ``tilelayout.cli.main`` in-process, which is the same code without the start-up.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tilelayout as tl
from tilelayout import cli
from tilelayout.kernel_file import KernelLoadError, load_kernel, split_spec

DATA = Path(__file__).resolve().parent / "data" / "cli"
KERNELS = DATA / "my_kernels.py"
SHIFT = f"{KERNELS}:row_softmax_shift"


def _console() -> list[str]:
    """The installed ``tilelayout`` script (beside this interpreter), else ``python -m tilelayout``."""
    script = Path(sys.executable).with_name("tilelayout")
    if script.exists():
        return [str(script)]
    found = shutil.which("tilelayout")
    return [found] if found else [sys.executable, "-m", "tilelayout"]


def run_console(*args, cwd=None, module=False):
    cmd = [sys.executable, "-m", "tilelayout"] if module else _console()
    env = dict(os.environ, PYTHONWARNINGS="default")
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def invoke(*args):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([str(a) for a in args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _held_per_thread(d: dict) -> int:
    """Most elements (counting replicas) any thread holds, by enumerating the thread table."""
    frag = tl.layout_from_dict(d)
    threads = np.asarray(frag.thread_table()).reshape(-1)
    return int(np.bincount(threads).max())


# --------------------------------------------------------------------------- the console script

def test_console_show_json_reports_layouts_io_and_registers(tmp_path):
    proc = run_console("show", SHIFT, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data["buffers"]) == {"frag", "mx"} and list(data["loops"]) == ["i,j[64x128]"]
    # registers per thread against an independent count of the elements each thread holds (fp32: one each)
    regs = data["resources"]["fragment_registers"]
    assert regs == {name: _held_per_thread(d) for name, d in data["buffers"].items()}
    assert data["resources"]["registers"] == sum(regs.values()) and data["resources"]["threads"] == 128
    # row_softmax_shift's two fragments are live together from the maximum on: the peak holds both
    peak = data["resources"]["register_peak"]
    assert peak["live"] == regs and peak["fragments"] == sum(regs.values())
    assert peak["registers"] == peak["fragments"] + peak["overhead"] and "(op #" in peak["point"]
    assert {row["buffer"] for row in data["io"]} == {"A", "B"} and all(row["ratio"] >= 1 for row in data["io"])
    assert data["warnings"] == []


def test_module_explain_json_collapses_identical_attempts_and_states_the_tie_break(tmp_path):
    proc = run_console("explain", SHIFT, "--json", "--cost-model", "io-aware", cwd=tmp_path, module=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert "earliest root" in data["tie_break"] and data["cost_model"] == "io-aware"
    groups = data["attempts"]
    assert sum(g["count"] for g in groups) == 4                       # four ops, each tried as root once
    assert [g["chosen"] for g in groups].count(True) == 1
    for g in groups:
        assert g["count"] == len(g["roots"])


def test_console_plot_writes_non_empty_images(tmp_path):
    proc = run_console("plot", f"{KERNELS}:build_staged", "--out", tmp_path / "pics", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    images = sorted((tmp_path / "pics").glob("*.png"))
    assert [p.name for p in images] == ["buffer_frag.png"]
    assert images[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and images[0].stat().st_size > 10_000


def test_console_check_against_a_wrong_reference_exits_1(tmp_path):
    proc = run_console("check", SHIFT, "--reference", f"{KERNELS}:wrong_reference", "--quiet", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("FAILED: B:")


def test_console_kernel_error_exits_2_without_a_traceback(tmp_path):
    proc = run_console("show", f"{KERNELS}:loop_past_fragment", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: no valid layout") and "frag" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


# --------------------------------------------------------------------------- in-process

def test_check_against_semantics_and_reference_passes():
    code, out, _ = invoke("check", SHIFT)
    # float arithmetic is compared within a tolerance (a compiler may contract or fold it); here it is exact anyway
    assert code == 0 and out.startswith("ok: match (within tolerance) against the numpy interpreter of the program")
    assert "max abs error 0" in out
    code, out, _ = invoke("check", SHIFT, "--reference", f"{KERNELS}:reference_shift", "--json")
    assert code == 0 and json.loads(out)["ok"] is True


def test_cuda_and_lower_print_code():
    code, out, _ = invoke("cuda", SHIFT, "--target", "sm_80")
    assert code == 0 and "__global__" in out
    code, out, _ = invoke("lower", SHIFT, "--json")
    assert code == 0 and "T.prim_func" in json.loads(out)["tir"]


def test_show_names_resource_problems_on_stderr_and_in_json():
    code, out, err = invoke("show", f"{KERNELS}:huge_fragment")
    assert code == 0
    assert "fragment registers per thread, all fragments summed: 1024 x 32-bit" in out
    assert "register peak per thread: 10" in out and "live frag 1024 = 1024" in out
    assert "warning: huge: the register peak is 10" in err
    code, out, _ = invoke("show", f"{KERNELS}:huge_fragment", "--json")
    assert any("fragment frag" in w for w in json.loads(out)["warnings"])


def test_printed_tvmscript_file_is_a_kernel(tmp_path):
    path = tmp_path / "kernel.tir"
    path.write_text(load_kernel(SHIFT).script())
    code, out, _ = invoke("show", path, "--json")
    assert code == 0 and set(json.loads(out)["buffers"]) == {"frag", "mx"}


@pytest.mark.parametrize("argv, message", [
    (["show", "no_such_file.py:k"], "no such file"),
    (["show", f"{KERNELS}:nope"], "has no attribute 'nope'"),
    (["show", f"{KERNELS}:NOT_A_KERNEL"], "expected a tvm.tirx.PrimFunc"),
    (["show", str(DATA.parent.parent / "kernels_frontend.py")], "name the kernel"),
    (["show", SHIFT, "--cost-model", "fastest"], "unknown layout cost model"),
    (["show", SHIFT, "--target", "{not json"], "not valid JSON"),
    (["check", SHIFT, "--tolerance", "x"], "RTOL,ATOL"),
    (["plot", SHIFT, "--buffer", "zz"], "no inferred layout for zz"),
])
def test_usage_and_kernel_errors_exit_2_with_one_clean_line(argv, message):
    code, out, err = invoke(*argv)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_no_command_and_bad_flags_exit_2():
    assert invoke()[0] == 2
    assert invoke("show")[0] == 2            # argparse: KERNEL missing
    assert invoke("--version")[0] == 0


def test_split_spec():
    assert split_spec("dir/k.py:fn") == (Path("dir/k.py"), "fn")
    assert split_spec("k.py") == (Path("k.py"), None)
    assert split_spec("C:/k.py") == (Path("C:/k.py"), None)
    assert split_spec("k.py:mod.fn") == (Path("k.py"), "mod.fn")


def test_a_file_with_one_primfunc_needs_no_name():
    assert load_kernel(str(KERNELS)).script() == load_kernel(SHIFT).script()


def test_load_kernel_runs_zero_argument_builders():
    func = load_kernel(f"{KERNELS}:build_staged")
    assert func.script().count("T.launch_thread") == 1
    with pytest.raises(KernelLoadError, match="zero-argument builder"):
        load_kernel(f"{KERNELS}:reference_shift")            # needs an argument: not a builder


def test_parse_target_shorthands():
    assert cli.parse_target("sm_80") == {"kind": "cuda", "arch": "sm_80"}
    assert cli.parse_target('{"kind": "cuda", "arch": "sm_75"}') == {"kind": "cuda", "arch": "sm_75"}
    assert cli.parse_target("nvidia/nvidia-h100") == "nvidia/nvidia-h100"
    assert cli.parse_target(None) is None


def test_progress_speaks_only_for_slow_steps():
    import time
    stream = io.StringIO()
    progress = cli.Progress(stream, delay=0.05)
    with progress.step("quick"):
        pass
    assert stream.getvalue() == ""
    with progress.step("slow"):
        time.sleep(0.3)
    assert stream.getvalue().startswith("tilelayout: slow...\ntilelayout: slow took")


# --------------------------------------------------------------------------- user code that fails or exits

_HEADER = "from tvm.script import tirx as T\nfrom tvm.tirx.script import tile as Tx\n\n\n@T.prim_func\n"


def _kernel_file(tmp_path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(_HEADER + body)
    return path


@pytest.mark.parametrize("body, message, line", [
    ('def k(A: T.Buffer((64, 128), "float32"), B: T.Buffer((64, 128), "float32")):\n'
     '    tx = T.launch_thread("threadIdx.x", 128)\n'
     '    frag = T.alloc_buffer((64, 64), "float32", scope="local.fragment")\n'
     '    Tx.copy(frag[0:64, 0:64], A[0:64, 0:128])\n',
     "dst region shape ['64', '64'] != src region shape ['64', '128']", "    Tx.copy(frag[0:64, 0:64], A[0:64, 0:128])"),
    ('def k(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):\n'
     '    tx = T.launch_thread("threadIdx.x", 64)\n'
     '    Tx.copy(B, fragg)\n',
     "Undefined variable: fragg", "    Tx.copy(B, fragg)"),
])
def test_tvmscript_parse_errors_keep_their_message_and_line(tmp_path, body, message, line):
    path = _kernel_file(tmp_path, "broken", body)
    code, out, err = invoke("show", path)
    assert code == 2 and out == "" and "Traceback" not in err
    assert message in err
    lineno = _HEADER.count("\n") + body.splitlines().index(line) + 1
    assert f"--> {path}:{lineno}:5" in err
    assert f"{lineno:>4} | {line}" in err and "|     ^" in err


def test_printed_tvmscript_parse_error_names_the_file_and_line(tmp_path):
    path = tmp_path / "kernel.tir"
    path.write_text('# from tvm.script import tirx as T\n@T.prim_func\ndef f(A: T.Buffer((4,), "float32")):\n'
                    '    A[0] = B[0]\n')
    code, _, err = invoke("show", path)
    assert code == 2 and "Undefined variable: B" in err and f"--> {path}:4:5" in err and "A[0] = B[0]" in err


def test_a_kernel_without_a_thread_launch_is_named_when_cuda_is_asked_for(tmp_path):
    path = _kernel_file(tmp_path, "nolaunch", 'def nolaunch(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):\n'
                        '    frag = T.alloc_buffer((64,), "float32", scope="local.fragment")\n'
                        '    Tx.copy(frag, A)\n    Tx.copy(B, frag)\n')
    code, out, err = invoke("cuda", path)
    assert code == 2 and out == ""
    assert "kernel nolaunch launches no thread" in err and 'T.launch_thread("threadIdx.x"' in err
    from tilelayout.errors import MissingLaunchError
    from tilelayout.passes import cuda_source
    with pytest.raises(MissingLaunchError, match="nolaunch"):
        cuda_source(load_kernel(str(path)))


_REFS = '''import sys

def exits_zero(inputs):
    sys.exit(0)

def exits_with_text(inputs):
    raise SystemExit("done here")

def raises(inputs):
    raise KeyError("Z")

def returns_none(inputs):
    return None

def returns_list(inputs):
    return [inputs["A"]]

def returns_wrong_size(inputs):
    return {"B": inputs["A"][:3]}

def builder_exits():
    sys.exit(0)
'''


@pytest.mark.parametrize("function, message", [
    ("exits_zero", "called sys.exit(0)"),
    ("exits_with_text", "called sys.exit('done here')"),
    ("raises", "KeyError: 'Z'"),
    ("returns_none", "returned NoneType; it must return a dict"),
    ("returns_list", "returned list; it must return a dict"),
    ("returns_wrong_size", "returned B with shape [3, 128]; the parameter has shape [64, 128]"),
])
def test_a_failing_or_exiting_reference_exits_2_with_an_error_line(tmp_path, function, message):
    (tmp_path / "refs.py").write_text(_REFS)
    code, out, err = invoke("check", SHIFT, "--reference", f"{tmp_path / 'refs.py'}:{function}", "--quiet")
    assert code == 2 and out == "", (code, out, err)
    assert err.startswith("error: ") and message in err and "Traceback" not in err


@pytest.mark.parametrize("module_text, spec, message", [
    ("import sys\nsys.exit(0)\n", "", "cannot import it: it called sys.exit(0)"),
    ("raise SystemExit('bye')\n", "", "cannot import it: it called sys.exit('bye')"),
    (_REFS, ":builder_exits", "calling builder_exits() failed: it called sys.exit(0)"),
])
def test_a_kernel_file_or_builder_that_exits_is_an_error_not_success(tmp_path, module_text, spec, message):
    path = tmp_path / "exits.py"
    path.write_text(module_text)
    code, out, err = invoke("check", f"{path}{spec}")
    assert code == 2 and out == "" and message in err
    code, _, err = invoke("check", SHIFT, "--reference", f"{path}:whatever")
    assert code == 2 and ("exit" in err or "no attribute" in err)


def test_console_check_with_an_exiting_reference_module_exits_2(tmp_path):
    (tmp_path / "bye.py").write_text("import sys\nsys.exit(0)\n")
    proc = run_console("check", SHIFT, "--reference", f"{tmp_path / 'bye.py'}:ref", "--quiet", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and "called sys.exit(0)" in proc.stderr
