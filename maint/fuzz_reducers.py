"""Reducer kernels for maint/fuzz.py: ``lang.alloc_reducer`` rows (sum, max, min; replication all and none) of
random shapes and thread counts, sometimes over several column tiles, read from a fragment or straight from
global memory, finalized and stored by a copy or by a parallel loop.

Drawn from a stream of their own (``tilelayout-fuzz-reducer:SEED:INDEX``) at ``REDUCER_RATE``, replacing the
kernel ``generate`` would otherwise give; the checker runs them like any kernel (inferred under both models,
lowered, run under the race detector against the numpy interpreter, where ``finalize_reducer`` is a no-op).
Bug classes it aims at: a replicated loop counting an update twice, partials of one element spread over warps
(the shared-memory combine), fewer iterations than threads, padding cells in the combine.
"""
from __future__ import annotations

import random

__all__ = ["reducer_kernel", "REDUCER_RATE"]

REDUCER_RATE = 0.04
_START = {"sum": "0.0", "max": "-3.0e38", "min": "3.0e38"}


def reducer_kernel(seed: int, index: int):
    """The reducer kernel replacing kernel ``index`` of ``seed``, or None (most kernels)."""
    from maint.fuzz import Kernel
    rng = random.Random(f"tilelayout-fuzz-reducer:{seed}:{index}")
    if rng.random() >= REDUCER_RATE:
        return None
    op = rng.choice(("sum", "max", "min"))
    rep = rng.choice(("all", "all", "none"))
    rows = rng.choice((1, 2, 4, 8, 16, 32))
    cols = rng.choice((4, 8, 16, 32, 64, 128))
    tiles = rng.choice((1, 1, 2))
    threads = rng.choice((8, 32, 64, 128, 256))
    dtype = rng.choice(("float32", "float16"))
    from_frag = rng.random() < 0.6
    start = _START[op] if op == "sum" or rng.random() < 0.7 else repr(round(rng.uniform(-1, 1), 3))
    store_by_loop = rng.random() < 0.3
    src = "f[i, j]" if from_frag else f"A[i, k * {cols} + j]"
    value = src if dtype == "float32" else f'T.Cast("float32", {src})'
    update = {"sum": f"r[i] + {value}", "max": f"T.max(r[i], {value})", "min": f"T.min(r[i], {value})"}[op]
    lines = ["@T.prim_func",
             f'def main(A: T.Buffer(({rows}, {cols * tiles}), "{dtype}"), O: T.Buffer(({rows},), "float32")):',
             '    bx = T.launch_thread("blockIdx.x", 1)',
             f'    tx = T.launch_thread("threadIdx.x", {threads})',
             f'    r = lang.alloc_reducer(({rows},), "float32", op="{op}", replication="{rep}")']
    if from_frag:
        lines.append(f'    f = T.alloc_buffer(({rows}, {cols}), "{dtype}", scope="local.fragment")')
    lines.append(f"    Tx.fill(r[0:{rows}], T.float32({start}))")
    lines.append(f"    for k in T.serial({tiles}):")
    if from_frag:
        lines.append(f"        Tx.copy(f[0:{rows}, 0:{cols}], A[0:{rows}, k * {cols}:k * {cols} + {cols}])")
    lines += [f"        for i in T.parallel({rows}):",
              f"            for j in T.parallel({cols}):",
              f"                r[i] = {update}",
              "    lang.finalize_reducer(r)"]
    if store_by_loop:
        lines += [f"    for i in T.parallel({rows}):", "        O[i] = r[i] * T.float32(2.0)"]
    else:
        lines.append(f"    Tx.copy(O[0:{rows}], r[0:{rows}])")
    notes = [f"reducer:{op}:{rep}", f"reducer-start:{'identity' if start == _START[op] else 'value'}"]
    return Kernel("\n".join(lines) + "\n", threads, notes, op == "sum", cols * tiles)
