"""``maint/bench_inference.py --peer``'s side of the TileLang timing protocol (``time_tilelang.py --serve``),
against a stand-in server: the benchmark reads the ready line, asks for each kernel right after timing its
own runs, takes the median of the replies, and reports TileLang's errors and missing twins as such."""
from __future__ import annotations

import json
import stat
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint import bench_inference  # noqa: E402

_SERVER = """\
#!{python}
import json, sys
log = open({log!r}, "a")
print(json.dumps({{"ready": ["case/ok", "case/broken", "case/varying"]}}), flush=True)
varying = iter([10.0, 10.0, 60.0])
for line in sys.stdin:
    req = json.loads(line)
    log.write(line)
    log.flush()
    if req["name"] == "case/broken":
        reply = {{"error": "InternalError: no available layout found"}}
    elif req["name"] == "case/varying":
        reply = {{"ms": [next(varying)] * req["runs"], "regs": 64}}
    else:
        reply = {{"ms": [10.0 + k for k in range(req["runs"])], "regs": 64}}
    print(json.dumps(reply), flush=True)
"""


def _stand_in(tmp_path: Path) -> tuple:
    log = tmp_path / "requests.jsonl"
    exe = tmp_path / "peer-python"
    exe.write_text(textwrap.dedent(_SERVER.format(python=sys.executable, log=str(log))))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe), log


def test_the_benchmark_asks_per_kernel_and_takes_the_median(tmp_path):
    exe, log = _stand_in(tmp_path)
    peer = bench_inference.PeerTimer(exe)
    try:
        func = bench_inference.chain_kernel(4)
        ours, regs, theirs = bench_inference.measure(func, "register-count", 3, peer, "case/ok")
        assert ours > 0 and regs > 0
        assert theirs == {"ms": 11.0, "regs": 64, "ratio": ours / 11.0}   # median of 10, 11, 12
        assert peer.time("case/broken", "io-aware", 3) == {"error": "InternalError: no available layout found"}
        assert peer.time("case/missing", "io-aware", 3) == {"error": "no TileLang twin"}
    finally:
        peer.close()
    asked = [json.loads(line) for line in log.read_text().splitlines()]
    # one request per kernel and model, for as many runs as ours; a kernel without a twin is never asked for
    assert asked == [{"name": "case/ok", "model": "register-count", "runs": 3},
                     {"name": "case/broken", "model": "io-aware", "runs": 3}]


def test_rounds_repeat_both_batches_and_take_the_median_ratio(tmp_path, monkeypatch):
    """With ``rounds``, each round times our batch and then asks for TileLang's; the ratio is the median of the
    rounds' ratios (not the ratio of overall medians), so one slow batch on either side decides nothing."""
    exe, log = _stand_in(tmp_path)
    durations = iter([5.0] * 3 + [20.0] * 3 + [6.0] * 3)     # our batch medians 5, 20, 6; TileLang's 10, 10, 60
    clock = {"t": 0.0, "calls": 0}

    def process_time():                     # called at the start and at the end of each of our runs
        clock["calls"] += 1
        if clock["calls"] % 2 == 0:
            clock["t"] += next(durations) / 1e3
        return clock["t"]
    monkeypatch.setattr(bench_inference.time, "process_time", process_time)
    peer = bench_inference.PeerTimer(exe)
    try:
        ours, _, theirs = bench_inference.measure(bench_inference.chain_kernel(4), "register-count", 3, peer,
                                                  "case/varying", rounds=3)
    finally:
        peer.close()
    assert abs(ours - 6.0) < 1e-9 and theirs["ms"] == 10.0       # medians of the batch medians
    assert abs(theirs["ratio"] - 0.5) < 1e-9                      # median of 0.5, 2 and 0.1, not 6 / 10
    assert len(log.read_text().splitlines()) == 3


def test_rounds_stop_asking_once_tilelang_fails(tmp_path):
    exe, log = _stand_in(tmp_path)
    peer = bench_inference.PeerTimer(exe)
    try:
        _, _, theirs = bench_inference.measure(bench_inference.chain_kernel(4), "io-aware", 2, peer, "case/broken",
                                               rounds=3)
    finally:
        peer.close()
    assert theirs == {"error": "InternalError: no available layout found"}
    assert len(log.read_text().splitlines()) == 1


def test_a_server_that_dies_is_reported(tmp_path):
    exe = tmp_path / "dead-python"
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(3)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    try:
        bench_inference.PeerTimer(str(exe))
    except SystemExit as err:
        assert "TileLang timer stopped" in str(err)
    else:
        raise AssertionError("a dead timer must stop the benchmark with a message")


def test_peer_configs_reach_the_timer(tmp_path):
    """``--peer-config KEY=JSON`` (TileLang without TMA, say) is parsed into JSON values and handed to the timer
    as ``--config``, which merges it into every kernel's pass config."""
    assert bench_inference.peer_config(["tl.disable_tma_lower=true", "tl.note=plain"]) == \
        {"tl.disable_tma_lower": True, "tl.note": "plain"}
    try:
        bench_inference.peer_config(["no-equals-sign"])
    except SystemExit as err:
        assert "KEY=VALUE" in str(err)
    else:
        raise AssertionError("a malformed --peer-config must stop the benchmark with a message")
    argv_file = tmp_path / "argv.json"
    exe = tmp_path / "argv-python"
    exe.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(argv_file)!r}, 'w').write(json.dumps(sys.argv))\n"
                   "print(json.dumps({'ready': []}), flush=True)\nsys.stdin.read()\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    peer = bench_inference.PeerTimer(str(exe), {"tl.disable_tma_lower": True})
    peer.close()
    argv = json.loads(argv_file.read_text())
    assert argv[argv.index("--config") + 1] == '{"tl.disable_tma_lower": true}'
