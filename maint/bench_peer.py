"""``maint/bench_codegen.py --peer``: our CUDA and TileLang 0.1.15's for the same kernels, side by side.

For every selected case variant and target, TileLang's twin (``maint/peer/cases_tilelang.py``, same key
``case/variant``) is lowered by the peer Python (``maint/peer/emit_cuda.py``), and both sources are compiled
with one nvcc line. Each kernel gives two Markdown rows, ours and TileLang's: ptxas's registers, stack frame,
spill stores / loads and shared memory (static + dynamic), then static SASS counts (``maint/sass_counts.py``):
tensor-core instructions, LDSM / STSM, LDG and STG by width (32 / 64 / 128 bits), LDGSTS, UTMALDG / UTMASTG,
BAR, SYNCS, SHFL, LDL / STL and all instructions.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path

from maint.bench_codegen import ARCHS, ROOT, _selected, compile_stats, dynamic_smem, variant_targets
from maint.sass_counts import sass_counts

__all__ = ["main", "peer_sources", "PEER_FLAGS"]

#: one nvcc line for both sides: TileLang's source needs C++20 and its headers (``-I`` added per run)
PEER_FLAGS = ["-O3", "-std=c++20", "-cubin", "-Xptxas", "-v"]
PEER_CASES = ROOT / "maint" / "peer" / "cases_tilelang.py"

HEADER = ("| kernel | arch | side | regs | stack | spill st/ld | smem | MMA | LDSM | STSM | LDG 32/64/128 "
          "| STG 32/64/128 | LDGSTS | UTMA ld/st | BAR | SYNCS | SHFL | LDL/STL | SASS |")
RULE = "|" + "---|" * HEADER.count(" |")


def peer_sources(python: str, arch: str, names: list, out: Path) -> dict:
    """{"include": [...], "kernels": {name: {"file", "dyn_smem"} | {"error"}}} from the peer's emitter."""
    cmd = [python, str(ROOT / "maint" / "peer" / "emit_cuda.py"), str(PEER_CASES), "--arch", arch,
           "--out", str(out), "--only", *names]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT / "maint" / "peer", timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the peer emitter failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
    return json.loads(lines[-1])


def _side(source: str, arch: str, flags: list, cubin: Path, dyn: int) -> dict:
    stats = replace(compile_stats(source, arch, cubin=cubin, flags=flags), dynamic_smem=dyn)
    return {"stats": stats, "sass": dict(sass_counts(cubin))}


def format_side(label: str, arch: str, side: str, rec) -> str:
    if isinstance(rec, str):
        return f"| {label} | {arch} | {side} | {rec} |" + " |" * (HEADER.count(" |") - 4)
    st, c = rec["stats"], rec["sass"]

    def g(*keys):
        return "/".join(str(c.get(k, 0)) for k in keys)
    return (f"| {label} | {arch} | {side} | {st.registers} | {st.stack_frame} | {st.spill_stores}/{st.spill_loads} "
            f"| {st.static_smem + st.dynamic_smem} | {g('MMA')} | {g('LDSM')} | {g('STSM')} "
            f"| {g('LDG32', 'LDG64', 'LDG128')} | {g('STG32', 'STG64', 'STG128')} | {g('LDGSTS')} "
            f"| {g('UTMALDG', 'UTMASTG')} | {g('BAR')} | {g('SYNCS')} | {g('SHFL')} | {g('LDL', 'STL')} "
            f"| {g('total')} |")


def _ours(module, variant: str, target, flags: list, cubin: Path):
    from tilelayout.passes.lowering.pipeline import lower, lowered_cuda_source
    mod = lower(module.VARIANTS[variant](), target)
    return _side(lowered_cuda_source(mod, target), str(target.attrs["arch"]), flags, cubin,
                 dynamic_smem(mod, target))


def _error(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", metavar="PYTHON", required=True, help="a Python with tilelang 0.1.15")
    ap.add_argument("--case", action="append", default=[], help="CASE or CASE/VARIANT (repeatable; default all)")
    ap.add_argument("--arch", action="append", choices=ARCHS, help="archs for variants without a target")
    ap.add_argument("--cases-dir", type=Path, default=ROOT / "cases")
    ap.add_argument("--json", type=Path, help="also write the records as JSON")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    archs = tuple(args.arch or ARCHS)
    rows = []
    for name, module, variant in _selected(args.cases_dir, args.case):
        for target in variant_targets(module.VARIANTS[variant](), archs):
            rows.append((f"{name}/{variant}", module, variant, target, str(target.attrs["arch"])))
    records = []
    with tempfile.TemporaryDirectory(prefix="tl_peer_") as tmp:
        peer = {}
        for arch in sorted({r[4] for r in rows}):
            peer[arch] = peer_sources(args.peer, arch, sorted({r[0] for r in rows if r[4] == arch}),
                                      Path(tmp) / arch)
        print(HEADER)
        print(RULE)
        for k, (label, module, variant, target, arch) in enumerate(rows):
            flags = PEER_FLAGS + [f"-I{d}" for d in peer[arch]["include"]]
            try:
                ours = _ours(module, variant, target, flags, Path(tmp) / f"ours{k}.cubin")
            except Exception as err:  # noqa: BLE001 -- one failing variant is a row
                ours = _error(err)
            entry = peer[arch]["kernels"].get(label, {"error": "no TileLang twin"})
            if "error" in entry:
                theirs = f"TileLang: {entry['error'][:120]}"
            else:
                try:
                    theirs = _side(Path(entry["file"]).read_text(), arch, flags, Path(tmp) / f"peer{k}.cubin",
                                   int(entry["dyn_smem"]))
                except Exception as err:  # noqa: BLE001
                    theirs = _error(err)
            print(format_side(label, arch, "ours", ours), flush=True)
            print(format_side(label, arch, "TileLang", theirs), flush=True)
            for side, rec in (("ours", ours), ("tilelang", theirs)):
                records.append({"variant": label, "arch": arch, "side": side,
                                **({"error": rec} if isinstance(rec, str) else
                                   {"ptxas": rec["stats"].__dict__, "sass": rec["sass"]})})
    if args.json:
        args.json.write_text(json.dumps(records, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
