#!/usr/bin/env python3
"""Median wall times of the core layout operations (a script that prints numbers, not a test).

Each row builds its object afresh every repeat, so cached results never flatter a measurement.
Usage: python maint/bench_layout.py [--repeats N] [--strict]   (--strict: exit 1 if a median misses the target)
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

import tilelayout as tl
from tilelayout.evaluate import evaluate, grid_env
from tilelayout.layout import placeholder

TARGET_MS = 5.0


def _frag():
    """mma-style 128x128 fragment over 128 threads, index inferred (TileLang's register-count golden)."""
    return tl.Fragment([128, 128], lambda i, j: i % 8 * 16 + j // 8)


def _replicated():
    """The same fragment replicated over a second group of 128 threads (256 threads, rep 2)."""
    return tl.Fragment([128, 128], lambda i, j, r: r * 128 + i % 8 * 16 + j // 8, replicate=2)


def _derived(frag):
    """A build is only done once the derived fields (index inference, output shape, thread extent) exist."""
    return frag.forward_index, frag.output_shape, frag.thread_extent


def _times_ms(fn, setup, repeats: int) -> list:
    times = []
    for _ in range(repeats):
        arg = setup()
        t0 = time.perf_counter()
        fn(arg)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def _cases():
    i, j = placeholder(0), placeholder(1)
    expr = _frag().forward_thread * 128 + _frag().forward_index[0]
    env = grid_env([i, j], [128, 128])
    for name, make in (("128x128 fragment", _frag), ("128x128 fragment, replicate 2", _replicated)):
        yield f"build     {name}", (lambda _, make=make: _derived(make())), (lambda: None)
        yield f"table     {name}", (lambda f: (f.table(), f.thread_table())), make
        yield f"inverse   {name}", (lambda f: f.inverse()), make
        yield f"injective {name}", (lambda f: f.is_injective()), make
    yield "evaluate  16,384 points (thread*128 + slot)", (lambda _: np.asarray(evaluate(expr, env))), (lambda: None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--strict", action="store_true", help="exit 1 when a median misses the target")
    args = ap.parse_args()
    slow = 0
    print(f"tilelayout bench: median of {args.repeats} runs, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}")
    print(f"{'operation':<50} {'median ms':>10} {'min ms':>8}  target {TARGET_MS} ms (median)")
    for name, fn, setup in _cases():
        fn(setup())  # warm TVM's own first-call caches, never our objects (each repeat builds afresh)
        times = _times_ms(fn, setup, args.repeats)
        med = statistics.median(times)
        slow += med >= TARGET_MS
        print(f"{name:<50} {med:>10.3f} {min(times):>8.3f}  {'ok' if med < TARGET_MS else 'SLOW'}")
    return 1 if args.strict and slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
