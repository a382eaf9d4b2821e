#!/usr/bin/env python3
"""Write TileLang 0.1.15's device CUDA for TileLang kernels (dev only; run with the peer venv's Python).

    PEER_PYTHON maint/peer/emit_cuda.py FILE.py --arch sm_80 --out DIR [--only NAME ...]

FILE defines ``KERNELS = {name: zero-argument callable returning a TileLang PrimFunc}``. Each kernel is lowered
by ``tilelang.lower`` under the target (TileLang's layout inference needs the target context) and its
``kernel_source`` written to ``DIR/<n>.cu``. Prints one JSON object: ``{"include": [header directories nvcc
needs], "kernels": {name: {"file": path, "dyn_smem": bytes} | {"error": text}}}``. ``maint/bench_codegen.py
--peer`` runs it and compiles the files with the nvcc line it uses for ours.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from time_tilelang import _error_text, _torch_stand_in  # noqa: E402


def _load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KERNELS


def _dyn_smem(artifact) -> int:
    """The device module's dynamic shared memory (``dyn_shared_memory_buf``), 0 when absent."""
    mod = getattr(artifact, "device_mod", None)
    if mod is None:
        return 0
    best = 0
    for _, func in mod.functions.items():
        attrs = getattr(func, "attrs", None)
        if attrs is None:
            continue
        for key in ("dyn_shared_memory_buf",):
            if key in attrs:
                best = max(best, int(attrs[key]))
    return best


def emit(build, target, out: Path) -> dict:
    import tilelang
    from tilelang import tvm
    with tvm.transform.PassContext(opt_level=3), target:
        artifact = tilelang.lower(build(), target=target)
    out.write_text(artifact.kernel_source)
    return {"file": str(out), "dyn_smem": _dyn_smem(artifact)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--arch", default="sm_80")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    _torch_stand_in()
    import tilelang
    from tilelang import tvm
    kernels = _load(args.file)
    target = tvm.target.Target({"kind": "cuda", "arch": args.arch})
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    pkg = Path(tilelang.__file__).resolve().parent
    result = {"include": [str(pkg / "src"), str(pkg / "3rdparty" / "cutlass" / "include")], "kernels": {}}
    names = [n for n in kernels if args.only is None or n in args.only]
    for k, name in enumerate(names):
        try:
            result["kernels"][name] = emit(kernels[name], target, out_dir / f"k{k}.cu")
        except Exception as err:  # noqa: BLE001 -- one kernel TileLang refuses is a row, not the end
            result["kernels"][name] = {"error": _error_text(err)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")
    sys.exit(main())
