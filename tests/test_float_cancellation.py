"""Float identities apache-tvm's simplifier applies are kept out of the generated code.

Each kernel runs lowered on the CPU on inputs with infinities, NaNs and values where rounding shows, against
numpy evaluated step by step in the kernel's dtype (sharing nothing with the lowering). The first tests show
that the simplifier really folds the unguarded forms, so the numeric tests can fail.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm_ffi
from tvm import sym, tirx

import tilelayout as tl
from conftest import main_text
from tilelayout.expr import substitute
from tilelayout.passes.float_cancellation import keep_ieee_semantics
from tilelayout.passes.float_coincidence import Coincidence
from tilelayout.passes.ir_utils import walk
from tilelayout.passes.lowering.pipeline import lower_func
from tilelayout.passes.lowering.race_report import build_race_checked

MODELS = ("register-count", "io-aware")


def _parse(text: str):
    import tvm
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx})


def _inputs(dtype: str) -> tuple:
    """A and B: ordinary values, values where one rounding step shows, infinities and NaNs, in every pairing."""
    special = [np.inf, -np.inf, np.nan, 0.0, -0.0]
    rounding = [1.009765625, 0.3, 1e-3, 5.5, -2.25] + ([1e8, 3e7, 1e-8] if dtype == "float32" else [700.0, 2e-4, 3.0])
    pool = np.array(special + rounding, dtype="float64")
    n = len(pool)
    others = [(x, y) for x in range(n) for y in range(n) if x != y]
    picked = [(x, x) for x in range(n)] + [others[k] for k in np.random.default_rng(0).choice(len(others), 64 - n,
                                                                                              replace=False)]
    a, b = np.array([pool[x] for x, _ in picked]), np.array([pool[y] for _, y in picked])
    return a.astype(dtype), b.astype(dtype)


KERNEL = main_text('A: T.Buffer((64,), "DT"), B: T.Buffer((64,), "DT"), O: T.Buffer((64,), "DT")', threads=64,
                   body='''
    for i in T.parallel(64):
        O[i] = EXPR
''')

#: the same expressions over fragments (``A``, ``B`` renamed to register tiles ``a``, ``b``)
FRAGMENT_KERNEL = main_text('A: T.Buffer((64,), "DT"), B: T.Buffer((64,), "DT"), O: T.Buffer((64,), "DT")',
                            threads=32, body='''
    a = T.alloc_buffer((64,), "DT", scope="local.fragment")
    b = T.alloc_buffer((64,), "DT", scope="local.fragment")
    o = T.alloc_buffer((64,), "DT", scope="local.fragment")
    Tx.copy(a[0:64], A[0:64])
    Tx.copy(b[0:64], B[0:64])
    for i in T.parallel(64):
        o[i] = EXPR
    Tx.copy(O[0:64], o[0:64])
''')


def _kernel(form: str, expr: str, dtype: str) -> str:
    if form == "fragment":
        expr = re.sub(r"\bA\[", "a[", re.sub(r"\bB\[", "b[", expr))
        return FRAGMENT_KERNEL.replace("EXPR", expr).replace("DT", dtype)
    return KERNEL.replace("EXPR", expr).replace("DT", dtype)

# (expression, numpy reference on float arrays of the kernel's dtype: every step rounds as IEEE does)
CASES = {
    "x - x": ("A[i] - A[i]", lambda a, b: a - a),
    "x - x, after the index simplifies": ("A[(i + 64) % 64] - A[i]", lambda a, b: a - a),
    "(x + y) - y": ("(A[i] + B[i]) - B[i]", lambda a, b: (a + b) - b),
    "(x + y) - x, after the index simplifies": ("(A[i] + B[i]) - A[(i + 64) % 64]", lambda a, b: (a + b) - a),
    "x - (x + y)": ("A[i] - (A[i] + B[i])", lambda a, b: a - (a + b)),
    "x - (y + x)": ("A[i] - (B[i] + A[i])", lambda a, b: a - (b + a)),
    "select(c, y, z) - z": ("T.Select(A[i] > B[i], A[i], B[i]) - B[i]", lambda a, b: np.where(a > b, a, b) - b),
    "if_then_else(c, y, z) - y": ("T.if_then_else(A[i] > B[i], A[i], B[i]) - A[i]",
                                  lambda a, b: np.where(a > b, a, b) - a),
    "(c + x) - c": ("(T.DT(3) + A[i]) - T.DT(3)", lambda a, b: (a.dtype.type(3) + a) - a.dtype.type(3)),
    "x == x, after the index simplifies": ("T.if_then_else(A[i] == A[(i + 64) % 64], A[i], T.DT(7))",
                                           lambda a, b: np.where(a == a, a, a.dtype.type(7))),
    "x != x, after the index simplifies": ("T.if_then_else(A[i] != A[(i + 64) % 64], T.DT(7), A[i])",
                                           lambda a, b: np.where(a != a, a.dtype.type(7), a)),
    "x >= x, after the index simplifies": ("T.if_then_else(A[(i + 64) % 64] >= A[i], A[i], T.DT(7))",
                                           lambda a, b: np.where(a >= a, a, a.dtype.type(7))),
}


def test_the_simplifier_cancels_float_subtractions_it_is_not_shown():
    """The threat is real: without the rewrite, apache-tvm folds these for floats."""
    x, y = tirx.Var("x", "float16"), tirx.Var("y", "float16")
    ana = sym.Analyzer()
    assert tvm_ffi.structural_equal(ana.simplify((x + y) - y), x)
    assert tvm_ffi.structural_equal(ana.simplify(x - (x + y)), tirx.const(0.0, "float16") - y)
    assert float(ana.simplify(x - x).value) == 0.0
    three = tirx.const(3.0, "float16")
    assert tvm_ffi.structural_equal(ana.simplify((three + x) - three), x)
    # ... and leaves the guarded form alone
    guarded = (three + x) + three * tirx.const(-1.0, "float16")
    assert isinstance(ana.simplify(guarded), tirx.Add)


@pytest.mark.parametrize("form", ("global", "fragment"))
@pytest.mark.parametrize("dtype", ("float32", "float16"))
@pytest.mark.parametrize("case", sorted(CASES))
def test_lowered_kernel_keeps_the_ieee_result(case, dtype, form):
    expr, reference = CASES[case]
    func = _parse(_kernel(form, expr, dtype))
    a, b = _inputs(dtype)
    with np.errstate(invalid="ignore", over="ignore"):     # inf - inf is NaN on purpose here
        want = reference(a, b).astype(dtype)
    for model in MODELS:   # under the race check: a race raises RaceError, naming the buffer and threads
        out = np.zeros(64, dtype)
        build_race_checked(lower_func(func, cost_model=model))(a.copy(), b.copy(), out)
        np.testing.assert_array_equal(out, want, err_msg=f"{case} ({dtype}, {form}, {model})")


def test_cuda_keeps_the_constant_cancellation():
    """The CUDA of ``(3 + x) - 3`` still adds 3 and subtracts it (as ``+ -3``), instead of storing ``x``."""
    src = tl.cuda_source(_parse(KERNEL.replace("EXPR", CASES["(c + x) - c"][0]).replace("DT", "float16")))
    body = src[src.index("main_kernel("):]
    assert re.search(r"3\.0+e\+00", body) and re.search(r"-3\.0+e\+00", body), body


@pytest.mark.parametrize("expr", ["A[i + 1] - A[i]", "A[i] - B[i]", "(A[i] + B[i]) - A[i + 1]",
                                  "T.if_then_else(A[i + 1] == A[i], A[i], B[i])"])
def test_operands_that_never_meet_are_left_as_written(expr):
    """A subtraction (or comparison) whose operands are provably different elements is not rewritten."""
    text = KERNEL.replace("EXPR", expr).replace("DT", "float32").replace("T.parallel(64)", "T.parallel(63)")
    func = _parse(text)
    assert tvm_ffi.structural_equal(keep_ieee_semantics(func), func)


def test_rewrite_is_idempotent():
    """Inference and lowering both run it on entry: a second run changes nothing."""
    for expr, _ in CASES.values():
        once = keep_ieee_semantics(_parse(KERNEL.replace("EXPR", expr).replace("DT", "float32")))
        assert tvm_ffi.structural_equal(keep_ieee_semantics(once), once), expr


BOUND = main_text('A: T.Buffer((64,), "float16"), O: T.Buffer((64,), "float16")', threads=64, body='''
    for i in T.parallel(64):
        v = T.bind(T.float16(1000) + T.Cast("float16", i) * T.float16(0.1))
        O[i] = v - T.float16(1000) + A[i]
''')


def test_a_bound_value_is_seen_through():
    """``v = 1000 + 0.1 i; v - 1000``: the simplifier substitutes a pure binding, then cancels; float16 rounds
    ``1000 + 0.1 i`` to the spacing near 1000 (0.5)."""
    a, _ = _inputs("float16")
    out = np.zeros(64, "float16")
    tl.build_cpu(_parse(BOUND))(a.copy(), out)
    h = np.float16
    v = h(1000) + np.arange(64).astype("float16") * h(0.1)
    np.testing.assert_array_equal(out, ((v - h(1000)) + a).astype("float16"))


def _index_pairs():
    i = tirx.Var("i", "int32")
    return i, [(i + 1, i), ((i + 64) % 64, i), (i * 2, i + 1), (i // 2, i), (i - i + 3, 3 + i * 0),
               (tirx.floormod(i, 8), tirx.floormod(i + 8, 8)), (i * 3 + 1, i * 3 + 2), (i * 2 + 1, i * 2)]


def _values(e, i, values) -> np.ndarray:
    """``e`` evaluated at every ``i`` in ``values`` (substituted, then folded by the analyzer)."""
    if isinstance(e, int):
        return np.full(values.shape, e)
    ana = sym.Analyzer()
    return np.array([int(ana.simplify(substitute(e, {i: tirx.const(int(v), "int32")})).value) for v in values])


def test_may_coincide_is_sound_by_enumeration():
    """``may`` may only say no when the two indices differ for every value (checked over -512..511)."""
    i, pairs = _index_pairs()
    same = Coincidence()
    values = np.arange(-512, 512)
    for x, y in pairs:
        if not same.may(tirx.BufferLoad(_buffer(), [x]), tirx.BufferLoad(_buffer(), [y])):
            assert (_values(x, i, values) != _values(y, i, values)).all(), (x, y)
    # and it does say no where it can: i + 1 and i, 2i + 1 and 2i
    assert not same.may(i + 1, i) and not same.may(i * 2 + 1, i * 2)


_BUF: list = []


def _buffer():
    if not _BUF:
        _BUF.append(tirx.decl_buffer((1024,), "float32", "A"))
    return _BUF[0]


def test_guarded_forms_reach_the_lowered_ir():
    """The rewrite is what the lowering sees: a cancelling subtraction is an addition of ``b * -1``."""
    func = keep_ieee_semantics(_parse(KERNEL.replace("EXPR", "(A[i] + B[i]) - B[i]").replace("DT", "float32")))
    subs: list = []
    walk(func.body, [(tirx.Sub, lambda n: subs.append(n) if str(n.ty) == "float32" else None)])
    assert not subs
