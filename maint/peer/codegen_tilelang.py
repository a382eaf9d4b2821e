"""ptxas figures of TileLang's own CUDA for named twins (dev only; run with the peer venv's Python).

    TILELANG_PEER=DIR PEER_PYTHON codegen_tilelang.py cases_tilelang.py gemv/sm80_reducer_256x1024_t256 ... [--arch sm_80]

(``DIR``: the folder holding ``tilelang_peer.py``, whose torch stand-in lets TileLang import without torch.)

TileLang 0.1.15 lowers each twin to CUDA on the CPU (``tilelang.lower`` under a target context); the source is
compiled with nvcc against the package's bundled headers (``-std=c++20``, TileLang's own flags) and ptxas's
registers, stack frame and spill bytes are printed, one line per twin: the other half of
``maint/bench_codegen.py``'s table.
"""
import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernels")
    ap.add_argument("names", nargs="+")
    ap.add_argument("--arch", default="sm_80")
    args = ap.parse_args()
    sys.path.insert(0, os.environ.get("TILELANG_PEER", "."))
    import tilelang_peer  # noqa: F401  (installs the torch stand-in)
    tilelang_peer._install_torch_stub()
    import tilelang
    from tilelang import tvm
    spec = importlib.util.spec_from_file_location("twins", args.kernels)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    pkg = os.path.dirname(tilelang.__file__)
    for name in args.names:
        target = tvm.target.Target({"kind": "cuda", "arch": args.arch})
        try:
            with tvm.transform.PassContext(opt_level=3), target:
                artifact = tilelang.lower(mod.KERNELS[name](), target=target)
            with tempfile.TemporaryDirectory() as tmp:
                src = os.path.join(tmp, "k.cu")
                with open(src, "w") as f:
                    f.write(artifact.kernel_source)
                proc = subprocess.run(["nvcc", "-O3", "-std=c++20", "-cubin", "-Xptxas", "-v", f"-arch={args.arch}",
                                       "-I", os.path.join(pkg, "src"), "-I",
                                       os.path.join(pkg, "3rdparty", "cutlass", "include"), "-o",
                                       os.path.join(tmp, "k.cubin"), src], capture_output=True, text=True)
            text = proc.stderr + proc.stdout
            regs = [int(r) for r in re.findall(r"Used (\d+) registers", text)]
            stack = [int(r) for r in re.findall(r"(\d+) bytes stack frame", text)]
            spills = [int(r) for r in re.findall(r"(\d+) bytes spill stores", text)]
            if not regs:
                print(f"{name} {args.arch} error: {text[-600:]}")
                continue
            print(f"{name} {args.arch} regs {max(regs)} stack {max(stack or [0])} spill_st {max(spills or [0])}")
        except Exception as err:  # noqa: BLE001 -- one failing twin is a line, not the end of the run
            print(f"{name} {args.arch} error: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
