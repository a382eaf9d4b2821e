"""Racy kernel classes for ``maint/fuzz.py``: kernels that a GPU would run wrongly, which the checks must
catch, drawn from a stream of their own so that the fuzzer's other kernels stay the ones earlier runs made.

Tile programs (through the whole lowering): parallel accumulation into global or shared memory
(``O[i] = O[i] + A[i, j]``, also ``max``, fragment sources and grouped indices) and plain write races
(``O[i] = A[i, j]``), with more threads than rows so that some row is visited by two threads. Such a kernel
must be refused by name or reported by the race check; passing the numeric check is a bug (the serialised
CPU run gets the sum right while the GPU keeps one lane's update).

Hand-written lowered kernels (explicit launches and barriers, no lowering decision involved): a shared
exchange ``S[w(tx)] = A[tx]; [barrier;] O[tx] = S[r(tx)]``, global element sharing ``O[tx // g] = A[tx]``
(plain or atomic), shifted, out-of-bounds shared stores, and a warp-shuffle exchange
``v = O[r(tx)] + A[tx]; [v += shfl_xor(v, m);] if tx % 32 == L: O[w(tx)] = v`` (a full-warp shuffle orders the
lanes of its warp, not other warps; under ``tx % 32 < 16`` only half the warp executes it, the storing lane not). Whether each has a race is computed here from the
index maps, independently of the detector, which must agree, and the race-free ones must give numpy's values.
"""
from __future__ import annotations

import random

import numpy as np

#: share of generated kernels replaced by a racy one
RACY_RATE = 0.06
TILE_CLASSES = {"accumulate-global": 3, "accumulate-shared": 2, "accumulate-grouped": 1, "write-race": 2}
LOWERED_CLASSES = {"exchange": 4, "shared-global": 2, "atomic": 1, "out-of-bounds": 1}
#: share of the hand-written lowered kernels that are warp-shuffle exchanges
SHUFFLE_SHARE = 0.25


def _pick(rng: random.Random, weights: dict) -> str:
    x = rng.random() * sum(weights.values())
    for key, w in weights.items():
        x -= w
        if x < 0:
            return key
    return key


def racy_kernel(seed: int, index: int):
    """The racy kernel replacing kernel ``index`` of ``seed``, or None (most kernels)."""
    from maint.fuzz import Kernel
    rng = random.Random(f"tilelayout-fuzz-race:{seed}:{index}")
    if rng.random() >= RACY_RATE:
        return None
    if rng.random() < 0.5:
        cls = _pick(rng, TILE_CLASSES)
        text, threads = _tile_text(rng, cls)
        return Kernel(text, threads, notes=[f"racy:{cls}"])
    shfl = random.Random(f"tilelayout-fuzz-race-shuffle:{seed}:{index}")   # a stream of its own: the other
    if shfl.random() < SHUFFLE_SHARE:                                           # classes stay as they were drawn
        text, threads, racy = _shuffle_text(shfl)
        return Kernel(text, threads, notes=["lowered:shuffle", "race" if racy else "race-free"])
    cls = _pick(rng, LOWERED_CLASSES)
    text, threads, racy = _lowered_text(rng, cls)
    return Kernel(text, threads, notes=[f"lowered:{cls}", "race" if racy else "race-free"])


def _tile_text(rng: random.Random, cls: str) -> tuple:
    rows = rng.choice((2, 4, 8))
    cols = rng.choice((4, 8, 16, 32))
    threads = rng.choice([t for t in (32, 64, 128) if rows < t <= rows * cols] or [rows * cols])
    dtype = rng.choice(("float32", "float16"))
    combine = rng.choice(("+", "max"))
    from_frag = rng.random() < 0.4
    src = "f[i, j]" if from_frag else "A[i, j]"
    lines = ["@T.prim_func",
             f'def main(A: T.Buffer(({rows}, {cols}), "{dtype}"), O: T.Buffer(({rows},), "{dtype}")):',
             '    bx = T.launch_thread("blockIdx.x", 1)',
             f'    tx = T.launch_thread("threadIdx.x", {threads})']
    if from_frag:
        lines += [f'    f = T.alloc_buffer(({rows}, {cols}), "{dtype}", scope="local.fragment")',
                  f"    Tx.copy(f[0:{rows}, 0:{cols}], A[0:{rows}, 0:{cols}])"]
    dst, index = "O", "i"
    if cls == "accumulate-shared":
        lines += [f'    S = T.alloc_buffer(({rows},), "{dtype}", scope="shared")',
                  f"    Tx.copy(S[0:{rows}], O[0:{rows}])"]
        dst = "S"
    if cls == "accumulate-grouped":
        index = "i // 2" if rows > 2 else "i // 1"
    lines += [f"    for i in T.parallel({rows}):", f"        for j in T.parallel({cols}):"]
    if cls == "write-race":
        lines.append(f"            {dst}[{index}] = {src}")
    elif combine == "+":
        lines.append(f"            {dst}[{index}] = {dst}[{index}] + {src}")
    else:
        lines.append(f"            {dst}[{index}] = T.max({dst}[{index}], {src})")
    if cls == "accumulate-shared":
        lines.append(f"    Tx.copy(O[0:{rows}], S[0:{rows}])")
    return "\n".join(lines) + "\n", threads


def _maps(rng: random.Random, n: int) -> tuple:
    """Two index maps over ``n`` threads as (text, numpy function) pairs."""
    forms = [("tx", lambda t: t), (f"{n - 1} - tx", lambda t: n - 1 - t)]
    c = rng.randint(1, n - 1)
    forms.append((f"(tx + {c}) % {n}", lambda t, c=c: (t + c) % n))
    if n & (n - 1) == 0:
        m = rng.randint(1, n - 1)
        forms.append((f"T.bitwise_xor(tx, {m})", lambda t, m=m: t ^ m))
    return rng.choice(forms), rng.choice(forms)


def _lowered_text(rng: random.Random, cls: str) -> tuple:
    """(TVMScript of a hand-written lowered kernel, threads, whether it has a race or out-of-bounds access)."""
    n = rng.choice((32, 48, 64, 128))
    head = ["@T.prim_func", f'def main(A: T.Buffer(({n},), "float32"), O: T.Buffer(({n},), "float32")):',
            '    bx = T.launch_thread("blockIdx.x", 1)', f'    tx = T.launch_thread("threadIdx.x", {n})']
    t = np.arange(n)
    if cls == "exchange":
        (w, wf), (r, rf) = _maps(rng, n)
        barrier = rng.random() < 0.5
        body = [f'    S = T.alloc_buffer(({n},), "float32", scope="shared")', f"    S[{w}] = A[tx]"]
        body += ['    T.tvm_storage_sync("shared")'] if barrier else []
        body += [f"    O[tx] = S[{r}]"]
        writer = np.empty(n, dtype=np.int64)
        writer[wf(t)] = t
        racy = not barrier and bool((writer[rf(t)] != t).any())
        return "\n".join(head + body) + "\n", n, racy
    g = rng.choice((1, 2, 4))
    if cls == "shared-global":
        body = [f"    O[tx // {g}] = A[tx]"]
        return "\n".join(head + body) + "\n", n, g > 1
    if cls == "atomic":
        body = [f'    T.evaluate(T.call_extern("float32", "atomicAdd", T.address_of(O[tx // {g}]), A[tx]))']
        return "\n".join(head + body) + "\n", n, False
    c = rng.choice((0, 1, 3))
    body = [f'    S = T.alloc_buffer(({n},), "float32", scope="shared")', f"    S[tx + {c}] = A[tx]",
            '    T.tvm_storage_sync("shared")', f"    O[tx] = S[tx]"]
    return "\n".join(head + body) + "\n", n, c > 0


def _shuffle_text(rng: random.Random) -> tuple:
    """(a warp-shuffle exchange, threads, whether it races): the lanes of each warp read ``O[r(tx)]``, exchange
    partial sums with one ``shfl_xor`` (or none), then one lane per warp stores into ``O[w(tx)]``. The race is
    computed from the index maps: a store and another thread's read of its element conflict unless both
    threads are lanes of one warp with a full-warp shuffle between them (under ``tx % 32 < 16`` the storing
    lane is one of those that skip it)."""
    n = rng.choice((32, 64, 96, 128))
    warps = n // 32
    c1, c2 = rng.randrange(warps), rng.randrange(warps)
    read = rng.choice((f"(tx // 32 + {c1}) % {warps}", "tx", f"tx % 32 + {c1 * 32}"))
    write = f"(tx // 32 + {c2}) % {warps}"
    lane, mask = rng.randrange(32), 1 << rng.randrange(5)
    shuffle = rng.choice(("full", "full", "none", "half"))
    if shuffle == "half":      # a lane that skips the shuffle stores: ordered after no other lane's read
        lane = 16 + lane % 16
    sh = f"v[0] = v[0] + T.tvm_warp_shuffle_xor(T.tvm_warp_activemask(), v[0], {mask}, 32, 32)"
    body = ['    v = T.alloc_buffer((1,), "float32", scope="local")', f"    v[0] = O[{read}] + A[tx]"]
    body += [f"    {sh}"] if shuffle == "full" else ["    if tx % 32 < 16:", f"        {sh}"] if shuffle == "half" else []
    body += [f"    if tx % 32 == {lane}:", f"        O[{write}] = v[0]"]
    head = ["@T.prim_func", f'def main(A: T.Buffer(({n},), "float32"), O: T.Buffer(({n},), "float32")):',
            '    bx = T.launch_thread("blockIdx.x", 1)', f'    tx = T.launch_thread("threadIdx.x", {n})']
    t = np.arange(n)
    reads, writers = _index_values(read, n), t[t % 32 == lane]
    racy = False
    for w in writers:
        others = (reads == _index_values(write, n)[w]) & (t != w)
        if shuffle == "full":
            others &= t // 32 != w // 32
        racy = racy or bool(others.any())
    return "\n".join(head + body) + "\n", n, racy


def _expected_shuffle(text: str, a: np.ndarray, o: np.ndarray) -> dict:
    """numpy values of a race-free warp-shuffle exchange (``_shuffle_text``)."""
    import re
    n = a.shape[0]
    read = re.search(r"v\[0\] = O\[(.*)\] \+ A\[tx\]", text).group(1)
    lane = int(re.search(r"if tx % 32 == (\d+):", text).group(1))
    write = re.search(r"O\[(.*)\] = v\[0\]", text).group(1)
    v = o[_index_values(read, n)] + a
    m = re.search(r"v\[0\], (\d+), 32, 32\)", text)
    t = np.arange(n)
    if m:
        inside = t % 32 < 16 if "if tx % 32 < 16:" in text else np.ones(n, dtype=bool)
        v = np.where(inside, v + v[t ^ int(m.group(1))], v)
    out = o.copy()
    out[_index_values(write, n)[t % 32 == lane]] = v[t % 32 == lane]
    return {"O": out.astype(np.float32)}


def _index_values(expr: str, n: int) -> np.ndarray:
    """The value of a generated index expression of ``tx`` for every thread (numpy, not TVM)."""
    import re
    tx = np.arange(n)
    expr = re.sub(r"T\.bitwise_xor\(tx, (\d+)\)", r"(tx ^ \1)", expr)
    return eval(expr, {"__builtins__": {}}, {"tx": tx})      # noqa: S307 -- text this module generated


def expected_lowered(text: str, inputs: dict) -> dict | None:
    """numpy values of a race-free hand-written kernel (None when it has none to compare)."""
    import re
    a, o = inputs["A"].astype(np.float64), inputs["O"].astype(np.float64).copy()
    n = a.shape[0]
    if "tvm_warp_shuffle" in text or "if tx % 32 ==" in text:
        return _expected_shuffle(text, a, o)
    m = re.search(r"O\[tx // (\d+)\] = A\[tx\]", text)
    if m:
        return {"O": a.astype(np.float32)} if int(m.group(1)) == 1 else None
    m = re.search(r"atomicAdd\", T.address_of\(O\[tx // (\d+)\]\)", text)
    if m:
        np.add.at(o, np.arange(n) // int(m.group(1)), a)
        return {"O": o.astype(np.float32)}
    w, r = re.search(r"S\[(.*)\] = A\[tx\]", text), re.search(r"O\[tx\] = S\[(.*)\]", text)
    if w and r:
        shared = np.zeros(n + 8)
        shared[_index_values(w.group(1), n)] = a
        return {"O": shared[_index_values(r.group(1), n)].astype(np.float32)}
    return None


def check_lowered(kernel, func) -> tuple:
    """(kind, detail) of a hand-written lowered kernel under the race check: ``ok`` when the detector agrees
    with the race computed from the index maps (and a race-free kernel gives numpy's values), ``mismatch``
    otherwise."""
    from tilelayout.passes.lowering.pipeline import random_inputs
    from tilelayout.passes.lowering.race_report import build_race_checked
    racy = "race" in kernel.notes
    global_only = not any(n in kernel.notes for n in ("lowered:exchange", "lowered:out-of-bounds"))
    # shared exchanges run with their barriers as written: TVM's barrier insertion would repair them
    checked = build_race_checked(func, tvm_barriers=global_only)
    inputs = random_inputs(func, 0)
    arrays = [inputs[k].copy() for k in inputs]
    races = checked.run(*arrays)
    if bool(races) != racy:
        what = races[0].describe() if races else "no race"
        return "mismatch", f"race check: expected {'a race' if racy else 'none'}, got {what}"
    want = None if racy else expected_lowered(kernel.text, inputs)
    if want is not None:
        got = dict(zip(inputs, arrays))
        for name, value in want.items():
            if not np.allclose(got[name], value, rtol=1e-5, atol=1e-5):
                return "mismatch", f"race-free hand-written kernel: {name} differs from numpy"
    return "ok", ""


def check_racy(func, model: str, cls: str) -> tuple:
    """(kind, detail) of a racy tile program: ``unsupported`` when lowering refuses it by name or the race check
    reports it; an update (``accumulate-*``) lowered race-free is ``ok`` when it matches the sequential program
    (else ``mismatch``); anything else that passes is ``accepted-bad``; ``crash`` on any other exception."""
    import traceback

    from tilelayout.errors import TileLayoutError
    from tilelayout.passes.lowering.pipeline import lower_func, random_inputs
    from tilelayout.passes.lowering.race_report import build_race_checked
    try:
        kernel = build_race_checked(lower_func(func, cost_model=model))
    except TileLayoutError as err:
        return "unsupported", f"lower: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    except Exception as err:     # noqa: BLE001 -- a bug, reported
        return "crash", f"lower: {type(err).__name__}: {err}\n{traceback.format_exc(limit=-3)}"
    inputs = random_inputs(func, 0)
    races = kernel.run(*[inputs[n].copy() for n in inputs])
    if races:
        return "unsupported", "race check: " + races[0].describe()[:300]
    if cls.startswith("accumulate"):     # an update: inference runs each element's iterations in one thread
        from tilelayout.passes.lowering.pipeline import check_numeric
        res = check_numeric(func, cost_model=model)
        return ("ok", "") if res.ok else ("mismatch", f"a {cls} update lowered race-free: {res.message[:300]}")
    return "accepted-bad", f"a {cls} race passed the race check"
