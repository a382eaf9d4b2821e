"""Differential test of tl.cute against C++ CuTe (CUTLASS 4.x headers compiled for the host).

Several thousand random and edge-case inputs (nested shapes, negative and zero strides, basis strides, tuple
tilers) go through both; printed forms must agree exactly. A case we refuse is not sent to C++ (static CuTe
fails to compile it); the refusals are counted and the ones C++ would accept are checked separately in
test_cute_algebra.py. Skipped, with the reason, when no C++ compiler or no CUTLASS headers are present.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm import sym, tirx

import cute_cpp_oracle as oracle
from tilelayout import cute
from tilelayout.cute import CuteError, E, Layout, ScaledBasis
from tilelayout.expr import substitute

pytestmark = pytest.mark.skipif(oracle.skip_reason() is not None, reason=str(oracle.skip_reason()))

LEAVES = [1, 2, 2, 3, 4, 4, 8]
PROFILES = [0, (0, 0), (0, 0, 0), ((0, 0), 0), (0, (0, 0)), ((0, 0), (0, 0)), ((0,),), (0,)]


def _fill(profile, take):
    return tuple(_fill(p, take) for p in profile) if isinstance(profile, tuple) else take()


def rand_shape(rng, profile=None):
    profile = PROFILES[rng.integers(len(PROFILES))] if profile is None else profile
    return _fill(profile, lambda: int(LEAVES[rng.integers(len(LEAVES))]))


def rand_layout(rng, kind: str, profile=None) -> Layout:
    """kind: 'compact' (a permuted column-major order with gaps, injective), 'any' (random strides, some
    negative or zero)."""
    shape = rand_shape(rng, profile)
    flat = cute.flatten(shape)
    if kind == "compact":
        order = rng.permutation(len(flat))
        strides, acc = [0] * len(flat), 1
        for i in order:
            acc *= int(rng.choice([1, 1, 1, 2, 3]))
            strides[i] = acc
            acc *= flat[i]
    else:
        strides = [int(rng.choice([0, 1, 2, 3, 4, 8, 16, -1, -2, -4, 32])) for _ in flat]
    it = iter(strides)
    return Layout(shape, _fill(_profile(shape), lambda: next(it)))


def _profile(t):
    return tuple(_profile(x) for x in t) if isinstance(t, tuple) else 0


def basis_layout(rng, a: Layout) -> Layout:
    """A right operand reaching into ``a``'s top modes through basis strides (TMA-box style), shapes dividing."""
    modes = list(rng.permutation(len(a)))[: int(rng.integers(1, len(a) + 1))]
    shapes, strides = [], []
    for m in modes:
        n = cute.size(a[int(m)])
        divs = [d for d in (1, 2, 4, 8) if n % d == 0]
        step = int(rng.choice(divs))
        shapes.append(max(1, n // step // int(rng.choice([1, 1, 2])) or 1))
        strides.append(ScaledBasis(step, int(m)))
    return Layout(tuple(shapes), tuple(strides)) if len(shapes) > 1 else Layout(shapes[0], strides[0])


def build_cases(seed: int = 38):
    """(name, python thunk, C++ expression) triples; deterministic for a seed."""
    rng = np.random.default_rng(seed)
    L, T = oracle.cpp_layout, oracle.cpp_tiler
    cases = []

    def add(name, fn, expr):
        cases.append((name, fn, expr))

    for _ in range(500):
        a = rand_layout(rng, "any")
        add("cosize", lambda a=a: cute.cosize(a), f"cosize({L(a)})")
        add("coalesce", lambda a=a: cute.coalesce(a), f"coalesce({L(a)})")
        add("filter", lambda a=a: cute.filter(a), f"filter({L(a)})")
        add("right_inverse", lambda a=a: cute.right_inverse(a), f"right_inverse({L(a)})")
    for _ in range(400):
        a = rand_layout(rng, "compact")
        add("left_inverse", lambda a=a: cute.left_inverse(a), f"left_inverse({L(a)})")
        add("right_inverse", lambda a=a: cute.right_inverse(a), f"right_inverse({L(a)})")
        add("complement", lambda a=a: cute.complement(a), f"complement({L(a)})")
        extra = int(cute.cosize(a) * rng.integers(1, 4) + rng.integers(0, 5))
        add("complement", lambda a=a, e=extra: cute.complement(a, e), f"complement({L(a)},{oracle.cpp_int(extra)})")
    for _ in range(900):
        a = rand_layout(rng, str(rng.choice(["any", "compact"])))
        b = rand_layout(rng, str(rng.choice(["any", "compact"])))
        add("composition", lambda a=a, b=b: cute.composition(a, b), f"composition({L(a)},{L(b)})")
    for _ in range(300):
        a = rand_layout(rng, "compact", profile=PROFILES[int(rng.integers(1, 6))])
        b = basis_layout(rng, a)
        add("composition/basis", lambda a=a, b=b: cute.composition(a, b), f"composition({L(a)},{L(b)})")
        ident = cute.make_identity_layout(rand_shape(rng))
        add("cosize/identity", lambda i=ident: cute.cosize(i), f"cosize({L(ident)})")
    for _ in range(500):
        a = rand_layout(rng, "compact")
        b = rand_layout(rng, "compact", profile=PROFILES[int(rng.choice([0, 0, 1, 6]))])
        tiler = b
        if rng.random() < 0.4 and len(a) >= 2:
            tiler = tuple(rand_layout(rng, "compact", profile=0) for _ in range(int(rng.integers(1, len(a) + 1))))
        for op in ("logical_divide", "zipped_divide", "tiled_divide"):
            add(op, lambda op=op, a=a, t=tiler: getattr(cute, op)(a, t), f"{op}({L(a)},{T(tiler)})")
    for _ in range(350):
        a = rand_layout(rng, "compact", profile=PROFILES[int(rng.integers(0, 6))])
        b = rand_layout(rng, "compact", profile=PROFILES[int(rng.integers(0, 6))])
        for op in ("logical_product", "blocked_product", "raked_product"):
            add(op, lambda op=op, a=a, b=b: getattr(cute, op)(a, b), f"{op}({L(a)},{L(b)})")
        tiler = tuple(rand_layout(rng, "compact", profile=0) for _ in range(int(rng.integers(1, len(a) + 1))))
        for op in ("zipped_product", "tiled_product"):
            add(op, lambda op=op, a=a, t=tiler: getattr(cute, op)(a, t), f"{op}({L(a)},{T(tiler)})")
    return cases + edge_cases()


def edge_cases():
    """The documented differences from pycute, and forms the random draw rarely hits."""
    L, T = oracle.cpp_layout, oracle.cpp_tiler
    out = []
    pairs = [
        ("cosize", Layout((4, 8), (-5, 1)), None),
        ("composition", Layout((8, 4), (10, 100)), Layout((4, 8), (E(1), E(0)))),
        ("composition", Layout((16, 16), (1, 16)), cute.make_identity_layout((4, 4))),
        ("composition", Layout(((4, 2), 8), ((1, 64), 4)), Layout((2, 4), (E(1), E(0)))),
        ("composition", Layout((4, 1), (1, 0)), Layout(8, 1)),
        ("composition", Layout((6, 4), (1, 10)), Layout(2, 4)),
        ("composition", Layout((4, 8), (8, 1)), Layout((2, 4), (-2, 1))),
        ("blocked_product", Layout((2, 5), (5, 1)), Layout((3, 4))),
        ("raked_product", Layout((2, 5), (5, 1)), Layout((3, 4))),
        ("blocked_product", Layout(4, 1), Layout(3, 1)),
        ("raked_product", Layout(4, 2), Layout((3, 2))),
        ("tiled_product", Layout((2, 5)), (Layout(3),)),
        ("tiled_divide", Layout((8, 6)), (Layout(2),)),
        ("left_inverse", Layout(8, 2), None),
        ("left_inverse", Layout((4, 4), (0, 2)), None),
        ("complement", Layout(8, 3), None),
        ("complement", Layout((2, 2), (0, 4)), 64),
        ("logical_divide", Layout((6, 4), (1, 6)), Layout(4, 1)),
        ("logical_divide", Layout((8, 6), (6, 1)), Layout((2, 3), (3, 1))),
        ("logical_divide", Layout((6, 4), (1, 10)), Layout(3, 1)),
        ("composition", Layout((6, 4), (1, 10)), Layout(2, -4)),
        ("blocked_product", Layout(4, 1), Layout(3, 1)),
        ("tiled_product", Layout(4, 3), (Layout(2, 3),)),
        ("complement", Layout(8, 3), 100),
    ]
    for op, a, b in pairs:
        fn = getattr(cute, op)
        if b is None:
            out.append((op, lambda fn=fn, a=a: fn(a), f"{op}({L(a)})"))
        elif isinstance(b, int):
            out.append((op, lambda fn=fn, a=a, b=b: fn(a, b), f"{op}({L(a)},{oracle.cpp_int(b)})"))
        else:
            out.append((op, lambda fn=fn, a=a, b=b: fn(a, b), f"{op}({L(a)},{T(b)})"))
    return out


#: cases compiled with static extents (each costs C++ ~0.1 s of compile time; CI has two cores)
STATIC_PER_OP = 24


def static_sample(cases, per_op: int = STATIC_PER_OP):
    """Every edge case and the first ``per_op`` random cases of each operation that we answer."""
    edge = len(edge_cases())
    taken: dict = {}
    out = []
    for k, (name, fn, expr) in enumerate(cases):
        try:
            text = str(fn())
        except CuteError:
            continue
        if k >= len(cases) - edge or taken.get(name, 0) < per_op:
            taken[name] = taken.get(name, 0) + 1
            out.append((name, expr, text))
    return out


def dynamic_cases(seed: int = 83, n: int = 3000):
    """Runtime-int inputs (one compiled type per nesting profile): cosize exactly, and composition of a coalesced
    left operand compared mode by mode after coalescing, because C++ merges no runtime-int modes."""
    rng = np.random.default_rng(seed)
    L = oracle.cpp_layout
    out = []
    for _ in range(n // 2):
        a = rand_layout(rng, "any")
        out.append(("cosize/dynamic", str(cute.cosize(a)), f"cosize({L(a, static=False)})"))
    while len(out) < n:
        a = cute.coalesce(rand_layout(rng, str(rng.choice(["any", "compact"]))))
        b = rand_layout(rng, str(rng.choice(["any", "compact"])))
        if any(d == 0 for d in cute.flatten(b.stride)):
            continue  # a runtime 0 stride takes C++'s general path; the static 0 shortcut is checked above
        try:
            mine = cute.composition(a, b)
        except CuteError:
            continue
        out.append(("composition/dynamic", (str(by_mode_coalesced(mine, _profile(b.shape))), _profile(b.shape)),
                    f"composition({L(a, static=False)},{L(b, static=False)})"))
    return out


def symbolic_cases(seed: int = 7, n: int = 300):
    """Our PrimExpr leaves against C++'s runtime ints: cosize with a symbolic (possibly negative) stride, and the
    complement of a rank-1 layout with a symbolic stride; our answer is evaluated at the runtime value."""
    rng = np.random.default_rng(seed)
    var = tirx.Var("n", "int32")
    out = []
    for k in range(n):
        v = int(rng.choice([1, 2, 3, 5, 8]))
        if k % 2:
            s, d = int(rng.choice([2, 3, 4, 8])), int(rng.choice([-1, 1]))
            lay = Layout((s, 4), (d * var, 1))
            want = _at(cute.cosize(lay), var, v)
            expr = f"cosize({oracle.cpp_layout(Layout((s, 4), (d * v, 1)), static=False)})"
        else:
            s, cot = int(rng.choice([2, 4, 8])), int(rng.integers(1, 300))
            want = _at(cute.complement(Layout(s, var), cot), var, v)
            expr = f"complement({oracle.cpp_layout(Layout(s, v), static=False)},int({cot}))"
        out.append(("symbolic" if k % 2 else "symbolic/complement", want, expr))
    return out


def _at(x, var, value):
    """``x`` (an int, PrimExpr or Layout of them) with ``var`` set to ``value``, printed."""
    def leaf(e):
        if isinstance(e, tuple):
            return tuple(leaf(y) for y in e)
        if isinstance(e, int):
            return e
        return int(sym.Analyzer().simplify(substitute(e, {var: tirx.IntImm("int32", value)})))
    if isinstance(x, Layout):
        return str(Layout(leaf(x.shape), leaf(x.stride)))
    return str(leaf(x))


def by_mode_coalesced(layout: Layout, profile) -> Layout:
    """Each leaf mode of the right operand's profile coalesced (static CuTe merges there, runtime ints do not)."""
    if isinstance(profile, tuple):
        return cute.make_layout([by_mode_coalesced(layout[i], p) for i, p in enumerate(profile)])
    return cute.coalesce(layout)


def differences(static, dynamic) -> list[str]:
    """Run C++ CuTe on both case lists; every case whose answers differ, described."""
    theirs = oracle.run([expr for _, expr, _ in static] + [expr for _, _, expr in dynamic])
    bad = [f"{name}: {expr}\n  ours {mine}\n  C++  {cpp}" for (name, expr, mine), cpp in zip(static, theirs)
           if mine.replace(" ", "") != cpp]
    for (name, mine, expr), cpp in zip(dynamic, theirs[len(static):]):
        if name == "composition/dynamic":
            mine, profile = mine
            cpp = str(by_mode_coalesced(cute.parse(cpp), profile))
        if name == "symbolic/complement":  # C++ keeps a runtime-valued size-1 mode that TVM proves is 1
            mine, cpp = (str(cute.coalesce(cute.parse(x))) for x in (mine, cpp))
        if mine.replace(" ", "") != cpp:
            bad.append(f"{name}: {expr}\n  ours {mine}\n  C++  {cpp}")
    return bad


def test_tl_cute_matches_cpp_cute():
    static = static_sample(build_cases())
    dynamic = dynamic_cases() + symbolic_cases()
    assert len(static) >= 400 and len(dynamic) >= 3000
    bad = differences(static, dynamic)
    assert not bad, f"{len(bad)} of {len(static) + len(dynamic)} differ:\n" + "\n".join(bad[:25])


def test_refused_compositions_are_wrong_in_cpp():
    """Where we refuse and C++ answers (its weak divisibility check), C++'s answer is not A o B."""
    pairs = [(Layout((6, 4), (1, 10)), Layout(4, 4)), (Layout((6, 4), (1, 10)), Layout(4, -4)),
             (Layout((3, 8), (1, 5)), Layout(4, 2)), (Layout((6, 2, 4), (1, 8, 32)), Layout((2, 4), (1, 4)))]
    for a, b in pairs:
        with pytest.raises(CuteError, match="weak divisibility"):
            cute.composition(a, b)
    answers = oracle.run([f"composition({oracle.cpp_layout(a)},{oracle.cpp_layout(b)})" for a, b in pairs], jobs=1)
    for (a, b), text in zip(pairs, answers):
        theirs = cute.parse(text)
        want = [a(b(i)) for i in range(cute.size(b))]
        assert [theirs(i) for i in range(cute.size(b))] != want, (a, b, text)
