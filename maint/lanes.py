#!/usr/bin/env python3
"""Vector lanes per global buffer, read from the device code TVM would generate for a lowered kernel.

``vector_lanes(mod, target)`` runs TVM's own pipeline (the one ``tvm.compile`` runs) on a lowered
IRModule, takes the device functions and reports, for every buffer backed by a kernel parameter, the
widest vector (in elements) any load or store of it uses -- exactly what the CUDA code will contain
(``float4`` = 4 lanes of fp32, ``uint4`` over fp16 = 8 lanes). ``run.py --anchor`` compares these with a
case's ``VECTOR_ANCHOR``.

    python maint/lanes.py [CASE[/VARIANT]] [--model io-aware]     print the lanes of case variants
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import tvm  # noqa: E402
import tvm_ffi  # noqa: E402
from tvm import tirx  # noqa: E402
from tvm.ir import TensorLoad  # noqa: E402

__all__ = ["device_functions", "vector_lanes", "access_lanes", "lowered_lanes"]


def device_functions(mod, target=None) -> list:
    """The device PrimFuncs of ``mod`` after TVM's default pipeline and device finalisation."""
    from tvm.tirx.build import split_host_device_mods
    from tilelayout.passes.hardware import normalize_target
    if isinstance(mod, tirx.PrimFunc):
        mod = tvm.IRModule({"main": mod})
    target = normalize_target(target)
    bound = tirx.transform.BindTarget(target.with_host(tvm.target.Target("llvm")))(mod)
    pipeline, _, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
    with target:
        lowered = pipeline(bound)
    _, devices = split_host_device_mods(lowered)
    out = []
    for dev_mod in devices.values():
        dev_mod = finalize_device()(dev_mod)
        out.extend(f for _, f in sorted(dev_mod.functions.items(), key=lambda kv: str(kv[0]))
                   if isinstance(f, tirx.PrimFunc))
    return out


def access_lanes(func) -> dict:
    """{buffer name: {"load": lanes, "store": lanes}} for the global buffers of one device function."""
    allocated: list = []
    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, lambda a: allocated.append(a.buffer)))
    out: dict = {}

    def record(buf, lanes: int, kind: str):
        if buf.scope() not in ("", "global") or any(buf.same_as(b) for b in allocated):
            return
        entry = out.setdefault(str(buf.name), {"load": 0, "store": 0})
        entry[kind] = max(entry[kind], lanes)

    tvm_ffi.structural_walk(func.body, [
        (TensorLoad, lambda e: record(e.source, tvm.DataType(str(e.ty)).lanes, "load")),
        (tirx.BufferStore, lambda s: record(s.buffer, tvm.DataType(str(s.value.ty)).lanes, "store")),
    ])
    return out


def vector_lanes(mod, target=None) -> dict:
    """{global buffer name: widest vector lanes of any load/store of it} in the device code of ``mod``."""
    out: dict = {}
    for f in device_functions(mod, target):
        for name, entry in access_lanes(f).items():
            out[name] = max(out.get(name, 0), entry["load"], entry["store"])
    return {k: out[k] for k in sorted(out)}


def lowered_lanes(func, target=None, cost_model=None) -> dict:
    """Lower ``func`` with tilelayout (inference with ``cost_model``) and report its vector lanes."""
    from tilelayout.passes.lowering.pipeline import lower
    return vector_lanes(lower(func, target, cost_model), target)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", nargs="?", default="", help="substring of CASE or CASE/VARIANT")
    parser.add_argument("--model", default="io-aware")
    args = parser.parse_args(argv)
    from maint.case_loader import discover, load_case
    from maint.lowered_checks import anchor_table
    cases_dir = ROOT / "cases"
    for name in discover(cases_dir):
        module = load_case(cases_dir, name)
        for variant, build in module.VARIANTS.items():
            if args.case not in f"{name}/{variant}":
                continue
            lanes = lowered_lanes(build(), cost_model=args.model)
            anchor = anchor_table(module, variant, args.model) or None
            note = "" if anchor is None else ("  anchor " + ("match" if all(lanes.get(k) == v for k, v in anchor.items())
                                                             else f"DRIFT (anchor {anchor})"))
            print(f"{name}/{variant}: {lanes}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
