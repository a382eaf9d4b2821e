"""Benchmark layout inference: every golden case and the benchmark kernels under both cost models, generated
free components of K ops (with the growth exponent), the golden suite in check mode, and registers per thread;
with ``--peer PYTHON`` TileLang 0.1.15's own inference is timed on the twins of the same kernels in the same
run, each kernel right after ours (a second process answering requests), and the table gives the ratio and
both register counts.

    python maint/bench_inference.py [--repeat N] [--rounds R] [--peer PEER_PYTHON] [--k 64 256] [--no-suite]

Kernels are built outside the timed region; each timed run starts cold (``clear_caches``: a compiler infers
each kernel once), after one untimed warm-up of TVM itself; the median of ``--repeat`` runs is reported (with
``--rounds R``, R pairs of batches per kernel and model: the medians of the batch medians, and the median of
the rounds' ratios, which a batch caught in one slow second of the machine no longer decides). Times
are CPU time of the process (``time.process_time``, both sides), so other processes sharing the machine do not
inflate them; the golden-suite figure is wall time of the whole command, once as this environment runs it and
once (median of 3) with Python's bytecode cache warm, as a default Python setup has it from the second run.
Targets (docs/benchmarks.md): ours <= 0.5x TileLang's time on every kernel and <= 0.2x at the median, under both models;
K=64 <= 0.1 s, K=256 <= 0.5 s; golden suite (check mode, both models, ``-j 2``) <= 3 s; registers never above
TileLang's. Exit status 0 whether or not targets are met: this prints numbers, it is not a test.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import pathlib
import statistics
import subprocess
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tvm  # noqa: E402

from maint.peer.compare import BUG_CASES  # noqa: E402
from tilelayout.errors import TileLayoutResourceWarning  # noqa: E402
from tilelayout.passes.inference.resources import live_register_slots  # noqa: E402
from tilelayout.passes.inference.layout_inference import clear_caches, infer_layouts  # noqa: E402

MODELS = ("register-count", "io-aware")
PEER_FILES = (ROOT / "maint" / "peer" / "cases_tilelang.py", ROOT / "maint" / "peer" / "bench_kernels_tilelang.py")


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


def kernels() -> dict:
    """name -> PrimFunc: every golden case variant (``case/variant``), then the benchmark kernels."""
    out = {}
    for path in sorted((ROOT / "cases").glob("[!_]*.py")):
        mod = importlib.import_module(f"cases.{path.stem}")
        for variant, build in mod.VARIANTS.items():
            out[f"{path.stem}/{variant}"] = build()
    from maint import bench_kernels
    for name, build in bench_kernels.KERNELS.items():
        out[name] = build()
    return out


def measure(func, model: str, repeat: int, peer: "PeerTimer | None" = None, name: str | None = None,
            rounds: int = 1) -> tuple:
    """(our ms, our registers per thread, TileLang's {"ms", "regs", "ratio"} | {"error"} | None).
    With ``peer``, TileLang times its twin of ``name`` right after our runs (its own warm-up run, then
    ``repeat`` runs), so both sides of a ratio are timed within the same second: the machine's speed drifts
    by up to 2x over minutes. Each side's runs stay back to back, after its own warm-up run, as in a batch of
    its own (a first version alternated single runs; its slower figures could not be told apart from drift).
    ``rounds`` > 1 repeats that pair of batches: each side's figure is the median of its batch medians and the
    ratio the median of the rounds' ratios, so one batch caught in a slow second no longer decides a kernel."""
    ours, times, ratios, regs, error = [], [], [], None, None
    for _ in range(rounds):
        result = infer_layouts(func, None, model)       # warm-up: TVM's first analyzer use, imports
        samples = []
        for _ in range(repeat):
            clear_caches()
            t0 = time.process_time()
            result = infer_layouts(func, None, model)
            samples.append((time.process_time() - t0) * 1e3)
        ours.append(statistics.median(samples))
        if peer is None:
            continue
        reply = peer.time(name, model, repeat)
        if "ms" not in reply:           # TileLang fails (or has no twin): asking again gives the same answer
            error = reply
            break
        times.append(reply["ms"])
        ratios.append(ours[-1] / reply["ms"])
        regs = reply["regs"]
    theirs = None if peer is None else error or {"ms": statistics.median(times), "regs": regs,
                                                  "ratio": statistics.median(ratios)}
    return statistics.median(ours), live_register_slots(result), theirs


def peer_config(items: list) -> dict:
    """``--peer-config KEY=JSON`` items as a dict (a value that is not JSON is taken as a string)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--peer-config wants KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


class PeerTimer:
    """TileLang 0.1.15 timing its own inference on request: ``maint/peer/time_tilelang.py --serve`` run
    under the peer's Python, one JSON request and reply per line."""

    def __init__(self, python: str, config: dict | None = None):
        cmd = [python, str(ROOT / "maint" / "peer" / "time_tilelang.py"), *map(str, PEER_FILES), "--serve"]
        if config:
            cmd += ["--config", json.dumps(config, sort_keys=True)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, cwd=ROOT / "maint" / "peer")
        ready = json.loads(self._line(" ".join(cmd)))
        self.names = set(ready["ready"])

    def _line(self, what: str) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the TileLang timer stopped ({what}); run it by hand to see why")
        return line

    def _ask(self, name: str, model: str, runs: int) -> dict:
        self.proc.stdin.write(json.dumps({"name": name, "model": model, "runs": runs}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line(f"{name} {model}"))

    def time(self, name: str, model: str, runs: int) -> dict:
        """TileLang on its twin of ``name``: module captured, one untimed run, then ``runs`` timed runs;
        {"ms": median, "regs"} or {"error"}."""
        if name not in self.names:
            return {"error": "no TileLang twin"}
        reply = self._ask(name, model, runs)
        return reply if "error" in reply else {"ms": statistics.median(reply["ms"]), "regs": reply["regs"]}

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def suite_seconds(env: dict | None = None) -> tuple:
    """(wall, CPU) seconds of ``maint/run.py -j 2`` (check mode, both models), the whole command with its
    worker processes; CPU time is what the run costs when the machine is shared. ``env``: the environment
    (default: this process's)."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "maint" / "run.py"), "-j", "2"], capture_output=True, text=True,
                          cwd=ROOT, env=env)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        print(f"golden suite did not pass:\n{proc.stdout[-1500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def suite_with_bytecode(runs: int = 3) -> tuple:
    """Median (wall, CPU) of ``runs`` golden-suite runs with Python's bytecode cache warm, as a default Python
    has it from the second run on. The cache lives in a temporary ``PYTHONPYCACHEPREFIX`` (filled by one untimed
    run), so the checkout gets no ``__pycache__`` and a ``PYTHONDONTWRITEBYTECODE`` in the environment (this
    sandbox sets it) does not hide the difference."""
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        suite_seconds(env)
        samples = [suite_seconds(env) for _ in range(runs)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def _ratio(ratio) -> str:
    return f"{ratio:5.2f}" if isinstance(ratio, (int, float)) else "    -"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--peer", metavar="PYTHON", help="a Python with tilelang 0.1.15 (maint/peer/README.md)")
    ap.add_argument("--k", type=int, nargs="*", default=[64, 256])
    ap.add_argument("--no-suite", action="store_true", help="skip timing the golden runner")
    ap.add_argument("--only", help="only kernels whose name contains this")
    ap.add_argument("--peer-config", metavar="KEY=JSON", action="append", default=[],
                    help="a TileLang pass config for every kernel of the peer (repeatable), e.g. "
                         "tl.disable_tma_lower=true tl.disable_warp_specialized=true: TileLang compiling sm_90 "
                         "copies without TMA and one thread group, as we lower them")
    ap.add_argument("--rounds", type=int, default=1,
                    help="pairs of batches (ours, then TileLang's) per kernel and model; ratio: median over rounds")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", TileLayoutResourceWarning)     # big benchmark tiles warn by design
    peer = PeerTimer(args.peer, peer_config(args.peer_config)) if args.peer else None
    funcs = {k: v for k, v in kernels().items() if not args.only or args.only in k}
    head = f"{'kernel':46s}"
    for m in MODELS:
        head += f" | {m + ' ms':>18s}" + (f" {'TileLang':>8s} {'ratio':>5s}" if peer else "")
    head += " | regs" + (" / TileLang" if peer else "")
    print(head)
    print("-" * len(head))
    ratios = {m: [] for m in MODELS}
    over = []
    for name, func in funcs.items():
        row, regs = f"{name:46s}", []
        peer_regs = []
        for m in MODELS:
            ms, r, theirs = measure(func, m, args.repeat, peer, name, args.rounds)
            regs.append(r)
            row += f" | {ms:18.1f}"
            if peer:
                peer_regs.append(theirs.get("regs", "-"))
                row += f" {theirs.get('ms', float('nan')):8.1f} {_ratio(theirs.get('ratio'))}"
                if "ratio" in theirs:
                    ratios[m].append(theirs["ratio"])
                if "regs" in theirs and r > theirs["regs"] and name.split("/")[0] not in BUG_CASES:
                    over.append(f"{name} ({m}): {r} > {theirs['regs']}")
        row += " | " + "/".join(str(r) for r in regs)
        if peer:
            row += " vs " + "/".join(str(t) for t in peer_regs)
        print(row, flush=True)
    if peer:
        peer.close()
    if peer:
        for m in MODELS:
            if ratios[m]:
                print(f"{m}: ours / TileLang over {len(ratios[m])} kernels: worst {max(ratios[m]):.2f}x, "
                      f"median {statistics.median(ratios[m]):.2f}x (targets 0.5x, 0.2x)")
        print("registers above TileLang's: " + ("; ".join(over) if over else "none")
              + f" (not compared: {', '.join(BUG_CASES)}, where TileLang is wrong or fails)")
    chain = {}
    for k in args.k:
        func = chain_kernel(k)
        chain[k] = [measure(func, m, max(1, min(args.repeat, 3)))[0] for m in MODELS]
        print(f"generated free component, K={k} ops: " + ", ".join(f"{m} {t / 1e3:.3f} s" for m, t in zip(MODELS, chain[k])))
    if len(chain) >= 2:
        lo, hi = min(chain), max(chain)
        for i, m in enumerate(MODELS):
            print(f"growth exponent {m} (K={lo}..{hi}): {math.log(chain[hi][i] / chain[lo][i]) / math.log(hi / lo):.2f}")
    if not args.no_suite:
        import os
        wall, cpu = suite_seconds()
        how = "no bytecode written" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode as this environment has it"
        print(f"golden suite, check mode, both models, -j 2 ({how}): {wall:.2f} s wall, {cpu:.2f} s CPU")
        wall, cpu = suite_with_bytecode()
        print(f"golden suite, check mode, both models, -j 2 (bytecode cached, median of 3): {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
