#!/usr/bin/env python3
"""What ptxas makes of our CUDA: registers, spills, stack frame and shared memory per golden case variant.

Every variant is lowered for sm_80 and sm_90a (a variant that names its own target: for that target only),
TVM prints its CUDA, and ``nvcc -cubin -Xptxas -v`` compiles it with the same line for every kernel.
ptxas reports no spill bytes for a register array it cannot index statically -- it puts the array in
local memory, which shows up as a stack frame -- so the stack frame is the number that says whether
fragments stayed in registers. Beside ptxas's registers each row prints the register peak inference predicted
(``pred``: the function attribute ``tilelayout.register_peak``, see docs/cost-models.md) and how far ptxas is
from it (``diff``, percent of the prediction); rows more than ``AGREEMENT`` apart are counted at the end.

    python maint/bench_codegen.py                       every case, table on stdout
    python maint/bench_codegen.py --case softmax_rows   one case (repeatable, CASE or CASE/VARIANT)
    python maint/bench_codegen.py --arch sm_90a --json out.json

The table has one row per (variant, arch). With ``--peer PYTHON`` (a Python with TileLang 0.1.15,
``maint/peer/README.md``) TileLang's CUDA of the case's twin (``maint/peer/cases_tilelang.py``) is generated
on the same target (``maint/peer/emit_cuda.py``), both files are compiled with one nvcc line (C++20 and
TileLang's header directories, which its source needs; ours ignores them), and each row becomes two, ours and
TileLang's: ptxas's figures and the static SASS counts of ``maint/sass_counts.py`` (cuobjdump from the
``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` wheels, the ``bench`` extra), as a Markdown table:

    python maint/bench_codegen.py --peer /tmp/peer-venv/bin/python --arch sm_80 --case gemm_pipelined
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from maint.case_loader import discover, load_case  # noqa: E402

__all__ = ["Stats", "ptxas_stats", "compile_stats", "variant_stats", "predicted_peak", "disagrees", "ARCHS"]

ARCHS = ("sm_80", "sm_90a")
NVCC_FLAGS = ["-O3", "-std=c++17", "-cubin", "-Xptxas", "-v"]


@dataclass(frozen=True)
class Stats:
    """ptxas's account of one compiled kernel (the widest over the file's kernels)."""

    registers: int
    stack_frame: int
    spill_stores: int
    spill_loads: int
    static_smem: int
    dynamic_smem: int = 0
    predicted: int | None = None       # inference's register peak (``tilelayout.register_peak``), None: unknown

    @property
    def clean(self) -> bool:
        """Fragments in registers: no stack frame and no spills."""
        return self.stack_frame == 0 and self.spill_stores == 0 and self.spill_loads == 0


_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def ptxas_stats(text: str) -> Stats:
    """Parse ``ptxas -v`` output; several kernels in one file give the largest of each figure."""
    frames = [tuple(int(x) for x in m.groups()) for m in _FRAME.finditer(text)]
    used = [(int(m.group(1)), int(m.group(2) or 0)) for m in _USED.finditer(text)]
    if not frames or not used:
        raise RuntimeError("ptxas -v printed no register/stack report:\n" + text[-2000:])
    return Stats(registers=max(u[0] for u in used), stack_frame=max(f[0] for f in frames),
                 spill_stores=max(f[1] for f in frames), spill_loads=max(f[2] for f in frames),
                 static_smem=max(u[1] for u in used))


def compile_stats(source: str, arch: str, extra_flags: list | None = None, cubin: Path | None = None,
                  flags: list | None = None) -> Stats:
    """Compile CUDA ``source`` to a cubin for ``arch`` and return ptxas's figures (``cubin``: keep it there;
    ``flags``: instead of ``NVCC_FLAGS``)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH")
    with tempfile.TemporaryDirectory(prefix="tl_codegen_") as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(source)
        out = cubin or Path(tmp) / "k.cubin"
        cmd = [nvcc, *(flags or NVCC_FLAGS), f"-arch={arch}", *(extra_flags or []), "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        errors = [line for line in (proc.stderr + proc.stdout).splitlines() if "error" in line]
        raise RuntimeError(f"nvcc failed for {arch}: " + (errors[0] if errors else proc.stderr[-300:]).strip())
    return ptxas_stats(proc.stderr + proc.stdout)


def dynamic_smem(mod, target) -> int:
    """Dynamic shared memory bytes of a lowered module: TVM's merged ``shared.dyn`` allocation after its own
    pipeline (what the launch asks for; ptxas counts only static shared memory)."""
    import tvm
    from tvm import tirx
    from maint.lanes import device_functions
    from tilelayout.passes.ir_utils import walk
    sizes = [0]

    def visit(node):
        if node.buffer.scope() == "shared.dyn":
            size = 1
            for s in node.buffer.shape:
                size *= int(s)
            sizes.append(size * tvm.DataType(node.buffer.dtype).bits // 8)
    for f in device_functions(mod, target):
        walk(f.body, [(tirx.AllocBuffer, visit)])
    return max(sizes)


def predicted_peak(mod) -> int | None:
    """The register peak inference recorded on the lowered kernel (the largest over its functions)."""
    peaks = []
    for f in mod.functions.values():
        attrs = getattr(f, "attrs", None)
        peak = attrs.get("tilelayout.register_peak") if attrs is not None else None
        if peak is not None:
            peaks.append(int(peak["registers"]))
    return max(peaks) if peaks else None


#: predicted and ptxas registers further apart than this fraction of the prediction are counted (and must be
#: explained in docs/cost-models.md)
AGREEMENT = 0.15


def disagrees(stats) -> bool:
    """ptxas's registers differ from the predicted peak by more than ``AGREEMENT`` of the prediction."""
    return stats.predicted is not None and abs(stats.registers - stats.predicted) > AGREEMENT * stats.predicted


def variant_targets(func, archs) -> list:
    """The targets a variant is measured on: its own when it names one, else every arch asked for."""
    import tvm
    from tilelayout.passes.hardware import func_target
    own = func_target(func, None)
    if own is not None:
        own = own if isinstance(own, tvm.target.Target) else tvm.target.Target(own)
        return [own]
    return [tvm.target.Target({"kind": "cuda", "arch": a}) for a in archs]


def variant_stats(module, variant: str, archs=ARCHS) -> list:
    """[(arch, Stats | error text)] for one case variant."""
    from tilelayout.passes.lowering.pipeline import lower, lowered_cuda_source
    func = module.VARIANTS[variant]()
    out = []
    for target in variant_targets(func, archs):
        arch = str(target.attrs["arch"])
        try:
            mod = lower(func, target)
            stats = compile_stats(lowered_cuda_source(mod, target), arch)
            out.append((arch, replace(stats, dynamic_smem=dynamic_smem(mod, target), predicted=predicted_peak(mod))))
        except Exception as err:  # noqa: BLE001 -- one failing variant is a row, not the end of the table
            text = str(err).splitlines()[0]
            out.append((arch, f"{type(err).__name__}: {text.rsplit('}: ', 1)[-1][:160]}"))
    return out


def _selected(cases_dir: Path, wanted: list) -> list:
    names = discover(cases_dir)
    rows = []
    for name in names:
        module = load_case(cases_dir, name)
        for variant in module.VARIANTS:
            if not wanted or name in wanted or f"{name}/{variant}" in wanted:
                rows.append((name, module, variant))
    return rows


#: one column group per side: ours now, TileLang's CUDA of the same kernel beside it when a peer side is added
COLUMNS = (f"{'pred':>5} {'regs':>5} {'diff':>6} {'stack':>6} {'spill_st':>8} {'spill_ld':>8} {'smem':>7} "
           f"{'dyn_smem':>8}")
HEADER = f"{'case/variant':56} {'arch':7} {COLUMNS}"


def format_row(label: str, arch: str, stats) -> str:
    if isinstance(stats, str):
        return f"{label:56} {arch:7} {stats}"
    return f"{label:56} {arch:7} {format_stats(stats)}"


def format_stats(stats: Stats) -> str:
    """One side's column group."""
    pred = f"{stats.predicted:5d}" if stats.predicted is not None else f"{'-':>5}"
    diff = (f"{100 * (stats.registers - stats.predicted) / stats.predicted:+5.0f}%" if stats.predicted else f"{'-':>6}")
    return (f"{pred} {stats.registers:5d} {diff} {stats.stack_frame:6d} {stats.spill_stores:8d} {stats.spill_loads:8d} "
            f"{stats.static_smem:7d} {stats.dynamic_smem:8d}")


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if "--peer" in argv:
        from maint.bench_peer import main as peer_main
        return peer_main(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", default=[], help="CASE or CASE/VARIANT (repeatable; default all)")
    ap.add_argument("--arch", action="append", choices=ARCHS, help="archs for variants without a target")
    ap.add_argument("--cases-dir", type=Path, default=ROOT / "cases")
    ap.add_argument("--json", type=Path, help="also write the records as JSON")
    ap.add_argument("--peer", metavar="PYTHON", help="a Python with TileLang 0.1.15: compare with its CUDA "
                                                     "(maint/bench_peer.py)")
    args = ap.parse_args(argv)
    if shutil.which("nvcc") is None:
        print("nvcc not found on PATH: nothing to measure", file=sys.stderr)
        return 2
    archs = tuple(args.arch or ARCHS)
    warnings.simplefilter("ignore")       # lowering's resource notes are not this table's subject
    print(HEADER)
    records, dirty, apart = [], 0, 0
    for name, module, variant in _selected(args.cases_dir, args.case):
        for arch, stats in variant_stats(module, variant, archs):
            label = f"{name}/{variant}"
            print(format_row(label, arch, stats), flush=True)
            ok = not isinstance(stats, str)
            dirty += 0 if ok and stats.clean else 1
            apart += 1 if ok and disagrees(stats) else 0
            records.append({"variant": label, "arch": arch, **(asdict(stats) if ok else {"error": stats})})
    print(f"{dirty} row(s) with a stack frame, spills or a compile error")
    print(f"{apart} row(s) whose registers differ from the predicted peak by more than {AGREEMENT:.0%}")
    if args.json:
        args.json.write_text(json.dumps(records, indent=1, sort_keys=True))
    return 1 if dirty else 0


if __name__ == "__main__":
    sys.exit(main())
