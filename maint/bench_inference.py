"""Benchmark: median layout-inference time per golden case and on generated kernels whose free
component has K ops (a chain of parallel loops over fragments between a copy in and a copy out).

Kernels are built once, outside the timed region; only ``infer_layouts`` is timed (a kernel carrying a
``target`` attribute, such as the sm_80 attention variants, is inferred for that target).
Usage: python maint/bench_inference.py [--repeat N] [--model NAME] [--case SUBSTR] [--tilelang FILE ...]

``--tilelang FILE`` reads TileLang's own LayoutInference times for the same kernels (JSON written by
``maint/peer/bench_tilelang.py`` with the peer venv) and adds a column ``tl/ours``: how many times longer
TileLang takes than our fastest model.
"""
from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tvm  # noqa: E402

from tilelayout.passes.inference.layout_inference import infer_layouts  # noqa: E402


def chain_kernel(k: int, m: int = 64, n: int = 64, threads: int = 128):
    """copy A -> f0; f{t+1}[i, j] = f{t}[i, j] * 2 + 1 for t < k-2; copy f{k-2} -> B: k ops, one component."""
    loops = k - 2
    lines = [
        "# from tvm.script import tirx as T",
        "@T.prim_func",
        f"def chain(A: T.Buffer(({m}, {n}), \"float32\"), B: T.Buffer(({m}, {n}), \"float32\")):",
        "    bx = T.launch_thread(\"blockIdx.x\", 1)",
        f"    tx = T.launch_thread(\"threadIdx.x\", {threads})",
    ]
    for t in range(loops + 1):
        lines.append(f"    f{t} = T.alloc_buffer(({m}, {n}), scope=\"local.fragment\")")
    lines.append(f"    T.tile.copy(f0[0:{m}, 0:{n}], A[0:{m}, 0:{n}])")
    for t in range(loops):
        lines += [f"    for i in T.parallel({m}):", f"        for j in T.parallel({n}):",
                  f"            f{t + 1}[i, j] = f{t}[i, j] * T.float32(2.0) + T.float32(1.0)"]
    lines.append(f"    T.tile.copy(B[0:{m}, 0:{n}], f{loops}[0:{m}, 0:{n}])")
    return tvm.script.from_source("\n".join(lines) + "\n")


def median_ms(fn, repeat: int) -> float:
    fn()  # warm caches (TVM's first analyzer use, imports)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", default=None, help="cost model (default: both)")
    ap.add_argument("--k", type=int, nargs="*", default=[4, 16, 64])
    ap.add_argument("--case", default=None, help="only case/variant names containing this")
    ap.add_argument("--tilelang", nargs="*", default=[], help="JSON files from maint/peer/bench_tilelang.py")
    args = ap.parse_args(argv)
    models = [args.model] if args.model else ["register-count", "io-aware"]
    theirs = {}
    for path in args.tilelang:
        theirs.update(json.loads(pathlib.Path(path).read_text())["times_ms"])
    extra = f" {'TileLang':>14s} {'tl/ours':>8s}" if theirs else ""
    print(f"{'kernel':56s} " + " ".join(f"{m:>16s}" for m in models) + extra)
    for path in sorted((ROOT / "cases").glob("[!_]*.py")):
        mod = importlib.import_module(f"cases.{path.stem}")
        for variant, build in mod.VARIANTS.items():
            name = f"{path.stem}/{variant}"
            if args.case and args.case not in name:
                continue
            func = build()
            times = [median_ms(lambda: infer_layouts(func, None, m), args.repeat) for m in models]
            line = f"{name:56s} " + " ".join(f"{t:13.1f} ms" for t in times)
            tl_ms = theirs.get(name)
            if isinstance(tl_ms, (int, float)):
                line += f" {tl_ms:11.1f} ms {tl_ms / min(times):8.2f}"
            elif tl_ms is not None:
                line += "   TileLang fails"
            print(line)
    for k in args.k:
        func = chain_kernel(k)
        reps = max(1, args.repeat if k <= 16 else 2)
        times = [median_ms(lambda: infer_layouts(func, None, m), reps) for m in models]
        print(f"{f'generated chain, K={k} ops':56s} " + " ".join(f"{t:13.1f} ms" for t in times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
