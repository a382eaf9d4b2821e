"""Time TileLang 0.1.15's own LayoutInference pass on the twins in cases_tilelang.py (development only).

Run with the peer venv's Python (see README.md here); ``--peer`` is the peer driver script
(``tilelang_peer.py``), whose module preparation (the module exactly as ``tilelang.lower`` hands it to
LayoutInference) is reused. Only the ``LayoutInference`` pass call is timed, like ``maint/bench_inference.py``
times only ``infer_layouts``. Prints JSON ``{"arch": ..., "times_ms": {"case/variant": median ms}}``, the input of
``python maint/bench_inference.py --tilelang FILE``.

    /tmp/peer-venv/bin/python maint/peer/bench_tilelang.py --peer PATH/tilelang_peer.py --arch sm_80 \\
        --only flash_attention/sm80_d64_b64x64_t128 > /tmp/tl_sm80.json
"""
import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", required=True, help="path of tilelang_peer.py")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--prefix", default="", help="only kernels whose name starts with this")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    peer = _load(a.peer, "tilelang_peer")
    peer._install_torch_stub()
    import tilelang
    import tilelang.transform
    from tilelang import tvm
    kernels = _load(str(Path(__file__).resolve().parent / "cases_tilelang.py"), "cases_tilelang").KERNELS
    target = tvm.target.Target({"kind": "cuda", "arch": a.arch})
    cfg = {}
    out = {}
    for name in a.only or [k for k in kernels if k.startswith(a.prefix)]:
        try:
            mod = peer._li_input_pipeline(kernels[name](), target, cfg)
            samples = []
            for _ in range(a.repeat + 1):          # the first run warms caches and is dropped
                with tvm.transform.PassContext(opt_level=3, config=cfg), target:
                    t0 = time.perf_counter()
                    tilelang.transform.LayoutInference()(mod)
                    samples.append((time.perf_counter() - t0) * 1e3)
            out[name] = round(statistics.median(samples[1:]), 2)
        except Exception as err:  # noqa: BLE001 -- a kernel TileLang refuses has no time
            out[name] = f"error: {type(err).__name__}: {str(err).strip().splitlines()[0][:200]}"
    print(json.dumps({"arch": a.arch, "times_ms": out}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
