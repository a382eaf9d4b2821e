#!/usr/bin/env python3
"""Check every case on real hardware, or everything that can be checked without it.

    python maint/gpu_check.py              with a CUDA GPU: compile and run every case variant through TVM's
                                           runtime, compare with the layout-free CPU reference, and report the
                                           bandwidth of the copy cases against the device's peak; without a GPU
                                           say so and exit 0
    python maint/gpu_check.py --offline    no GPU needed: lower every variant, compile its CUDA source to PTX
                                           with nvcc (skipped when absent), run it on the CPU against the
                                           reference, and print per variant: lowering time (inference
                                           included), nvcc time, CPU build time (lowering + LLVM), first
                                           CPU run (includes LLVM's JIT) and a warm CPU run
    options: --case SUBSTR, --model NAME (default io-aware), --peak-gbps N (override the peak table)

Exit status: 0 all checks passed (or no GPU), 1 a variant failed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


#: HBM/GDDR peak bandwidth in GB/s by device-name substring (first match wins)
PEAK_GBPS = (("H200", 4800.0), ("H100 PCIe", 2000.0), ("H100", 3350.0), ("B200", 8000.0), ("A100-SXM4-80GB", 2039.0),
             ("A100 80GB", 1935.0), ("A100", 1555.0), ("L40S", 864.0), ("L40", 864.0), ("L4", 300.0),
             ("RTX 4090", 1008.0), ("RTX 3090", 936.0), ("V100", 900.0), ("A10", 600.0), ("T4", 320.0))


def _variants(case_filter: str):
    from maint.case_loader import discover, load_case
    cases_dir = ROOT / "cases"
    for name in discover(cases_dir):
        module = load_case(cases_dir, name)
        for variant in module.VARIANTS:
            if case_filter in f"{name}/{variant}":
                yield name, module, variant


def _is_copy_case(func) -> bool:
    from tilelayout.passes.inference.frontend import CopyOp, build_op_graph
    ops = build_op_graph(func).ops
    return bool(ops) and all(isinstance(op, CopyOp) for op in ops)


def _global_bytes(func) -> int:
    from tilelayout.passes.lowering.pipeline import random_inputs
    return int(sum(a.nbytes for a in random_inputs(func).values()))


def peak_gbps(device_name: str) -> float | None:
    for key, value in PEAK_GBPS:
        if key.lower() in device_name.lower():
            return value
    return None


# --------------------------------------------------------------------------------------- offline

def offline(args) -> int:
    from tilelayout.passes.lowering.pipeline import compile_ptx, check_case, lower
    import tvm
    from tilelayout.passes.hardware import normalize_target
    have_nvcc = shutil.which("nvcc") is not None
    target = normalize_target(None)
    failures = 0
    print(f"{'case/variant':46} {'lower_ms':>8} {'nvcc_s':>6} {'cpu_build_ms':>12} {'first_run_ms':>12} "
          f"{'warm_run_ms':>11}  numeric")
    for name, module, variant in _variants(args.case):
        func = module.VARIANTS[variant]()
        t0 = time.perf_counter()
        mod = lower(func, target, args.model)
        t1 = time.perf_counter()
        ptx = "-"
        if have_nvcc:
            src = tvm.compile(mod, target=target).mod.imports[0].inspect_source("cuda")
            t2 = time.perf_counter()
            try:
                compile_ptx(src, target)
                ptx = f"{time.perf_counter() - t2:.2f}"
            except Exception as err:  # report and continue with the other variants
                ptx = "FAIL"
                failures += 1
                print(f"  nvcc failed for {name}/{variant}: {str(err).splitlines()[-1][:200]}")
        res = check_case(module, variant, cost_model=args.model)
        failures += 0 if res.ok else 1
        t = res.times
        print(f"{name + '/' + variant:46} {(t1 - t0) * 1e3:8.1f} {ptx:>6} {t['lower_build_s'] * 1e3:12.1f} "
              f"{t['run_s'] * 1e3:12.1f} {t['warm_run_s'] * 1e3:11.2f}  {res.message[:60]}")
    if not have_nvcc:
        print("nvcc not found: PTX compilation skipped")
    return 1 if failures else 0


# --------------------------------------------------------------------------------------- GPU

def gpu_present() -> bool:
    try:
        import tvm
        return bool(tvm.cuda(0).exist)
    except Exception:
        return False


def on_gpu(args) -> int:
    if shutil.which("nvcc") is not None:
        os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
    import tvm
    import tvm.support.nvcc  # noqa: F401  (registers the CUDA JIT compile callback)
    from tilelayout.passes.lowering.pipeline import compare_outputs, lower, random_inputs, reference_outputs
    dev = tvm.cuda(0)
    major, minor = str(dev.compute_version).split(".")
    target = tvm.target.Target({"kind": "cuda", "arch": f"sm_{major}{minor}"})
    name_of_dev = str(dev.device_name)
    peak = args.peak_gbps or peak_gbps(name_of_dev)
    print(f"device: {name_of_dev} ({target.attrs['arch']}), peak {peak or '?'} GB/s")
    failures = 0
    for name, module, variant in _variants(args.case):
        func = module.VARIANTS[variant]()
        label = f"{name}/{variant}"
        try:
            mod = lower(func, target, args.model)
            ex = tvm.compile(mod, target=target)
            kernel = next(iter(mod.functions.keys())).name_hint
            inputs = random_inputs(func)
            names = list(inputs)
            tensors = [tvm.runtime.tensor(inputs[n].copy(), dev) for n in names]
            ex[kernel](*tensors)
            dev.sync()
            got = [t.numpy() for t in tensors]
            # the case's numpy REFERENCE, else the numpy interpreter of the unlowered program
            want = reference_outputs(func, getattr(module, "REFERENCE", {}).get(variant))
            tol = getattr(module, "TOLERANCE", {}).get(variant, (1e-2, 1e-2))
            bad, _ = compare_outputs(dict(zip(names, got)), {n: want[n] for n in names}, False, tol)
            line = f"{label:48} numeric {'ok' if not bad else 'MISMATCH: ' + '; '.join(bad)}"
            failures += 1 if bad else 0
            if _is_copy_case(func):
                timer = ex.mod.time_evaluator(kernel, dev, number=200, repeat=5)
                seconds = float(timer(*tensors).mean)
                gbps = _global_bytes(func) / seconds / 1e9
                frac = f" ({gbps / peak:.1%} of peak)" if peak else ""
                line += f"  {seconds * 1e6:8.2f} us  {gbps:8.1f} GB/s{frac}"
            print(line)
        except Exception as err:  # one broken variant must not hide the others
            failures += 1
            print(f"{label:48} ERROR {type(err).__name__}: {str(err).splitlines()[-1][:200] if str(err) else ''}")
    return 1 if failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--offline", action="store_true", help="checks that need no GPU (nvcc PTX, CPU numerics)")
    parser.add_argument("--case", default="", help="only CASE[/VARIANT] containing this substring")
    parser.add_argument("--model", default="io-aware", help="cost model for inference (default io-aware)")
    parser.add_argument("--peak-gbps", type=float, default=None, help="device peak bandwidth in GB/s")
    args = parser.parse_args(argv)
    if args.offline:
        return offline(args)
    if not gpu_present():
        print("no CUDA GPU present: nothing to run (use --offline for the checks that need none)")
        return 0
    return on_gpu(args)


if __name__ == "__main__":
    sys.exit(main())
