#!/usr/bin/env python3
"""Time TileLang 0.1.15's own LayoutInference on TileLang kernels (dev only; run with the peer venv's Python).

    PEER_PYTHON maint/peer/time_tilelang.py FILE.py [FILE.py ...] [--repeat N] [--arch sm_90] [--serve]

Each FILE defines ``KERNELS = {name: zero-argument callable returning a TileLang PrimFunc}``. For every kernel
and both cost models the module is taken exactly as ``tilelang.lower`` hands it to ``tl.LayoutInference`` (a
pass instrument captures it), then only that pass is timed (CPU time of the process): the median of ``--repeat`` runs after one
warm-up run. Registers per thread: the sum over the inferred fragments of their slot counts. Prints one JSON
object ``{model: {name: {"ms": float, "regs": int} | {"error": text}}}``. TileLang imports torch, which layout
inference never uses: when torch is absent a small stand-in module is installed first. With ``--serve`` it
answers timing requests one per line instead (``serve``), which ``maint/bench_inference.py --peer`` uses to
alternate TileLang's runs with ours.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import sys
import time
import types

MODELS = ("register-count", "io-aware")


def _torch_stand_in() -> None:
    """A module named torch with just what importing tilelang touches (dtype attributes, cuda probes)."""
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")
    import tvm_ffi  # noqa: F401  (initialise the FFI while torch is really absent)
    dtype_name = re.compile(r"^(bool|half|float|double|short|int|long|bfloat16|chalf|cfloat|cdouble|"
                            r"u?int\d+|float\d+\w*|complex\d+|bits\w*|qu?int\w*)$")

    class dtype:
        def __init__(self, name: str):
            self.name = name

        def __repr__(self) -> str:
            return f"torch.{self.name}"

    class _Torch(types.ModuleType):
        def __getattr__(self, name):
            if dtype_name.match(name):
                value = dtype(name)
                setattr(self, name, value)
                return value
            raise AttributeError(name)

    no = lambda *a, **k: False  # noqa: E731
    torch = _Torch("torch")
    torch.__file__, torch.__path__, torch.__version__ = "<stand-in>", [], "0.0.0"
    torch.dtype = dtype
    torch.version = types.SimpleNamespace(cuda=None, hip=None, __version__="0.0.0")
    torch.cuda = types.SimpleNamespace(is_available=no, device_count=lambda: 0)
    torch.backends = types.SimpleNamespace(mps=types.SimpleNamespace(is_available=no))
    torch.Tensor, torch.device, torch.Size = type("Tensor", (), {}), type("device", (), {}), tuple
    sys.modules["torch"] = torch


def _module_before_inference(func, target, config):
    import tilelang
    from tilelang import tvm

    @tvm.instrument.pass_instrument
    class Capture:
        def __init__(self):
            self.mod = None

        def run_before_pass(self, mod, info):
            if self.mod is None and info.name.split(".")[-1] == "LayoutInference":
                self.mod = mod

    capture = Capture()
    try:
        with tvm.transform.PassContext(opt_level=3, config=config, instruments=[capture]), target:
            tilelang.lower(func, target=target)
    except Exception:
        if capture.mod is None:
            raise
    if capture.mod is None:
        raise RuntimeError("tilelang.lower never ran tl.LayoutInference")
    return capture.mod


def _registers(mod) -> int:
    from tilelang import tvm
    from tilelang.layout import Fragment
    from tvm.tirx.stmt_functor import post_order_visit
    slots_of = {}      # buffer name -> slots (a layout map may sit on more than one block)

    def visit(node):
        if isinstance(node, tvm.tirx.SBlock) and "layout_map" in node.annotations:
            for buf, layout in node.annotations["layout_map"].items():
                if isinstance(layout, Fragment):
                    slots = 1
                    for s in layout.get_output_shape():
                        slots *= int(s)
                    slots_of[buf.name] = slots

    for _, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            post_order_visit(func.body, visit)
    return sum(slots_of.values())


def _prepare(build, target, config: dict) -> tuple:
    """(the module as ``tl.LayoutInference`` receives it, registers per thread of its result): captured from
    ``tilelang.lower``, then inferred once untimed (the warm-up)."""
    import tilelang.transform
    from tilelang import tvm
    mod = _module_before_inference(build(), target, config)
    with tvm.transform.PassContext(opt_level=3, config=config), target:
        out = tilelang.transform.LayoutInference()(mod)
    return mod, _registers(out)


def _timed_runs(mod, target, config: dict, runs: int) -> list:
    """CPU milliseconds of ``runs`` runs of ``tl.LayoutInference`` on ``mod``."""
    import tilelang.transform
    from tilelang import tvm
    samples = []
    for _ in range(runs):
        with tvm.transform.PassContext(opt_level=3, config=config), target:
            t0 = time.process_time()
            tilelang.transform.LayoutInference()(mod)
            samples.append((time.process_time() - t0) * 1e3)
    return samples


def _error_text(err: Exception) -> str:
    first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
    return f"{type(err).__name__}: {first}"


def time_kernel(build, target, model: str, repeat: int, extra: dict | None = None) -> dict:
    config = {"tl.layout_cost_model": model, **(extra or {})}
    mod, regs = _prepare(build, target, config)
    return {"ms": statistics.median(_timed_runs(mod, target, config, repeat)), "regs": regs}


def _target_for(name: str, default):
    """A variant named for a target (``case/sm80_...``) runs on that target, as our twin of it does."""
    from tilelang import tvm
    named = re.match(r"[^/]*/sm(\d+)_", name)
    return tvm.target.Target({"kind": "cuda", "arch": f"sm_{named.group(1)}"}) if named else default


def serve(kernels: dict, target, requests, replies, extra: dict | None = None) -> None:
    """Answer one JSON request per line, ``{"name": ..., "model": ..., "runs": n}``, with one JSON line
    ``{"ms": [n samples], "regs": int}`` or ``{"error": text}``: the module is captured (and the pass run once
    untimed) on a kernel's first request, then every request times ``runs`` more runs. The benchmark asks
    for each kernel right after its own runs of it, so that both sides are timed within the same second of a
    machine whose speed drifts."""
    prepared = {}
    for line in requests:
        if not line.strip():
            continue
        req = json.loads(line)
        key = (req["name"], req["model"])
        try:
            config = {"tl.layout_cost_model": req["model"], **(extra or {})}
            tgt = _target_for(req["name"], target)
            if key not in prepared:
                prepared[key] = _prepare(kernels[req["name"]], tgt, config)
            mod, regs = prepared[key]
            reply = {"ms": _timed_runs(mod, tgt, config, int(req.get("runs", 1))), "regs": regs}
        except Exception as err:  # TileLang fails on some kernels (#2398, #3005): report and keep serving
            reply = {"error": _error_text(err)}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--serve", action="store_true", help="answer timing requests on stdin (see serve)")
    ap.add_argument("--config", default="{}", help="JSON object of extra TileLang pass configs for every kernel, "
                    'e.g. {"tl.disable_tma_lower": true, "tl.disable_warp_specialized": true}')
    args = ap.parse_args(argv)
    replies = sys.stdout
    if args.serve:
        sys.stdout = sys.stderr         # whatever TileLang prints must not interleave with the replies
    _torch_stand_in()
    import tilelang  # noqa: F401
    from tilelang import tvm
    target = tvm.target.Target({"kind": "cuda", "arch": args.arch})
    kernels = {}
    for path in args.files:
        spec = importlib.util.spec_from_file_location(f"peer_{len(kernels)}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kernels.update(module.KERNELS)
    extra = json.loads(args.config)
    if args.serve:
        replies.write(json.dumps({"ready": sorted(kernels)}) + "\n")
        replies.flush()
        serve(kernels, target, sys.stdin, replies, extra)
        return 0
    result = {m: {} for m in MODELS}
    for name in args.only or list(kernels):
        tgt = _target_for(name, target)
        for model in MODELS:
            try:
                result[model][name] = time_kernel(kernels[name], tgt, model, args.repeat, extra)
            except Exception as err:  # report and keep going: TileLang fails on some kernels (#2398, #3005)
                result[model][name] = {"error": _error_text(err)}
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
