#!/usr/bin/env python3
"""Check every case on real hardware, or everything that can be checked without it.

    python maint/gpu_check.py              with a CUDA GPU: compile every case variant for the device (its arch,
                                           with the "a" features on Hopper: sm_90a, so wgmma is used), run it
                                           through TVM's runtime, compare with the case's numpy REFERENCE (else
                                           the layout-free numpy interpreter), and time the copy cases (GB/s
                                           against the device's peak) and every variant with gemms (achieved
                                           TFLOP/s: 2*M*N*K per gemm execution, counted over the grid and the
                                           serial loops); without a GPU say so and exit 0
    python maint/gpu_check.py --offline    no GPU needed: lower every variant for its own target (the kernel's
                                           "target" attribute, else sm_90a), compile its CUDA source to PTX with
                                           nvcc (skipped when absent), run it on the CPU against the reference,
                                           and print per variant: lowering time (inference included), nvcc time,
                                           CPU build time (lowering + LLVM), first CPU run (includes LLVM's JIT), a
                                           warm CPU run, the gemm work (GFLOP) and the instructions the gemms use
    options: --case SUBSTR, --model NAME (default io-aware), --peak-gbps N (override the peak table),
             --json FILE (write one record per variant: numeric result, times, GB/s or TFLOP/s, instructions)

Exit status: 0 all checks passed (or no GPU), 1 a variant failed.
"""
from __future__ import annotations

import argparse
import itertools
import json
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


def gemm_flops(func) -> int | None:
    """Floating-point operations of every ``Tx.gemm`` the kernel executes: ``2 * M * N * K`` per execution,
    summed over every block of the grid and every iteration of the serial loops around it (loop extents are
    evaluated per block, so a causal loop bound such as ``min(blocks, bx + 1)`` counts what runs). A gemm under a
    thread condition counts once per block. None for a grid of symbolic size (``ceildiv(m, 64)`` blocks): the
    count depends on the sizes the kernel is run at."""
    from tvm import tirx
    from tvm.tirx.tile_primitive import TilePrimitiveCall
    from tilelayout.passes.inference.frontend import GemmOp, build_op_graph
    from tilelayout.passes.inference.gemm_plan import _shape
    from tilelayout.passes.ir_utils import make_analyzer, walk
    work = []
    for op in build_op_graph(func).ops:
        if isinstance(op, GemmOp):
            m, n, k = _shape(op)
            work.append((op.stmt, 2 * m * n * k))
    if not work:
        return 0
    grid: dict = {}

    def on_attr(a):
        if a.attr_key == "thread_extent" and str(a.node.thread_tag).startswith("blockIdx."):
            value = a.value.value if isinstance(a.value, tirx.IntImm) else None
            grid.setdefault(str(a.node.thread_tag), (a.node.var, value))
    walk(func.body, [(tirx.AttrStmt, on_attr)])
    if any(ext is None for _, ext in grid.values()):
        return None
    block_vars = [grid[t] for t in sorted(grid)]

    def count(stmt, ana, times: int) -> int:
        if isinstance(stmt, tirx.SeqStmt):
            return sum(count(s, ana, times) for s in stmt.seq)
        if isinstance(stmt, tirx.For):
            extent = ana.simplify(stmt.extent)
            if not isinstance(extent, tirx.IntImm):
                raise ValueError(f"loop extent {stmt.extent} is not constant per block")
            return count(stmt.body, ana, times * int(extent.value))
        if isinstance(stmt, tirx.IfThenElse):
            return count(stmt.then_case, ana, times) + (count(stmt.else_case, ana, times) if stmt.else_case else 0)
        node = stmt.value if isinstance(stmt, tirx.Evaluate) else stmt
        if isinstance(node, TilePrimitiveCall):
            return sum(f for s, f in work if s.same_as(node) or s.same_as(stmt)) * times
        body = getattr(stmt, "body", None)
        return count(body, ana, times) if body is not None else 0

    total = 0
    for values in itertools.product(*(range(ext) for _, ext in block_vars)):
        ana = make_analyzer({var: (v, 1) for (var, _), v in zip(block_vars, values)})
        total += count(func.body, ana, 1)
    return total


def gemm_report(lowered) -> str:
    """The instructions every gemm of a lowered function uses (the lowering's own report), one line."""
    from tilelayout.passes.lowering.lower_gemm import GEMM_REPORT_ATTR
    attrs = lowered.attrs
    if attrs is None or GEMM_REPORT_ATTR not in attrs:
        return ""
    return " | ".join(str(v).split(" (")[0] for v in dict(attrs[GEMM_REPORT_ATTR]).values())


def variant_target(func):
    """The target a variant is written for (its ``target`` attribute), else the default (sm_90a)."""
    from tilelayout.passes.hardware import func_target, normalize_target
    return normalize_target(func_target(func, None))


def device_target(major: int, minor: int):
    """The target of the device: its compute capability, with the arch-specific features ("a") on Hopper."""
    import tvm
    arch = f"sm_{major}{minor}" + ("a" if major == 9 else "")
    return tvm.target.Target({"kind": "cuda", "arch": arch})


# --------------------------------------------------------------------------------------- offline

def offline(args) -> int:
    from tilelayout.passes.lowering.pipeline import compile_ptx, check_case, lower, lowered_cuda_source
    have_nvcc = shutil.which("nvcc") is not None
    failures = 0
    records = []
    print(f"{'case/variant':52} {'arch':7} {'lower_ms':>8} {'nvcc_s':>6} {'cpu_build_ms':>12} {'first_run_ms':>12} "
          f"{'warm_run_ms':>11} {'GFLOP':>7}  numeric")
    for name, module, variant in _variants(args.case):
        func = module.VARIANTS[variant]()
        target = variant_target(func)
        arch = str(target.attrs["arch"])
        t0 = time.perf_counter()
        mod = lower(func, target, args.model)
        t1 = time.perf_counter()
        ptx = "-"
        if have_nvcc:
            src = lowered_cuda_source(mod, target)
            t2 = time.perf_counter()
            try:
                compile_ptx(src, target)
                ptx = f"{time.perf_counter() - t2:.2f}"
            except Exception as err:  # report and continue with the other variants
                ptx = "FAIL"
                failures += 1
                print(f"  nvcc failed for {name}/{variant}: {str(err).splitlines()[-1][:200]}")
        res = check_case(module, variant, cost_model=args.model, target=target)
        failures += 0 if res.ok else 1
        t = res.times
        flops = gemm_flops(func)
        gflop = f"{'-':>7}" if flops is None else f"{flops / 1e9:7.4f}"      # '-': a grid of symbolic size
        insts = gemm_report(next(iter(mod.functions.values())))
        print(f"{name + '/' + variant:52} {arch:7} {(t1 - t0) * 1e3:8.1f} {ptx:>6} {t['lower_build_s'] * 1e3:12.1f} "
              f"{t['run_s'] * 1e3:12.1f} {t['warm_run_s'] * 1e3:11.2f} {gflop}  {res.message[:60]}"
              + (f"\n    gemms: {insts}" if insts else ""))
        records.append({"variant": f"{name}/{variant}", "arch": arch, "ok": bool(res.ok), "message": res.message,
                        "lower_ms": (t1 - t0) * 1e3, "nvcc_s": ptx, "gflop": None if flops is None else flops / 1e9,
                        "gemms": insts})
    if not have_nvcc:
        print("nvcc not found: PTX compilation skipped")
    _write_json(args, {"mode": "offline", "variants": records})
    return 1 if failures else 0


def _write_json(args, data) -> None:
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1, sort_keys=True))


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
    from tilelayout.passes.lowering.shared_alignment import compile_module
    dev = tvm.cuda(0)
    major, minor = (int(x) for x in str(dev.compute_version).split("."))
    target = device_target(major, minor)
    name_of_dev = str(dev.device_name)
    peak = args.peak_gbps or peak_gbps(name_of_dev)
    print(f"device: {name_of_dev} ({target.attrs['arch']}), peak {peak or '?'} GB/s; every variant is compiled "
          f"for the device (a variant written for another target is re-planned for it)")
    failures = 0
    records = []
    for name, module, variant in _variants(args.case):
        func = module.VARIANTS[variant]()
        label = f"{name}/{variant}"
        record = {"variant": label, "arch": str(target.attrs["arch"])}
        try:
            mod = lower(func, target, args.model)
            ex = compile_module(mod, target)
            kernel = next(iter(mod.functions.keys())).name_hint
            record["gemms"] = gemm_report(next(iter(mod.functions.values())))
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
            record["ok"] = not bad
            line = f"{label:52} numeric {'ok' if not bad else 'MISMATCH: ' + '; '.join(bad)}"
            failures += 1 if bad else 0
            flops = gemm_flops(func)
            if _is_copy_case(func) or flops:
                timer = ex.mod.time_evaluator(kernel, dev, number=200, repeat=5)
                seconds = float(timer(*tensors).mean)
                record["us"] = seconds * 1e6
                line += f"  {seconds * 1e6:8.2f} us"
                if flops:
                    record["tflops"] = flops / seconds / 1e12
                    line += f"  {record['tflops']:8.3f} TFLOP/s  [{record['gemms']}]"
                else:
                    gbps = _global_bytes(func) / seconds / 1e9
                    record["gbps"] = gbps
                    line += f"  {gbps:8.1f} GB/s" + (f" ({gbps / peak:.1%} of peak)" if peak else "")
            print(line)
        except Exception as err:  # one broken variant must not hide the others
            failures += 1
            record["error"] = f"{type(err).__name__}: {str(err).splitlines()[-1][:200] if str(err) else ''}"
            print(f"{label:52} ERROR {record['error']}")
        records.append(record)
    _write_json(args, {"mode": "gpu", "device": name_of_dev, "variants": records})
    return 1 if failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--offline", action="store_true", help="checks that need no GPU (nvcc PTX, CPU numerics)")
    parser.add_argument("--case", default="", help="only CASE[/VARIANT] containing this substring")
    parser.add_argument("--model", default="io-aware", help="cost model for inference (default io-aware)")
    parser.add_argument("--peak-gbps", type=float, default=None, help="device peak bandwidth in GB/s")
    parser.add_argument("--json", default=None, help="write the per-variant records to this JSON file")
    args = parser.parse_args(argv)
    if args.offline:
        return offline(args)
    if not gpu_present():
        print("no CUDA GPU present: nothing to run (use --offline for the checks that need none)")
        return 0
    return on_gpu(args)


if __name__ == "__main__":
    sys.exit(main())
