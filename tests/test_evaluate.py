"""evaluate(): exact numpy evaluation of every supported index-expression node, errors for the rest."""
import numpy as np
import pytest
from tvm import tirx

from tilelayout import EvaluationError, evaluate, evaluate_grid

I = tirx.Var("i", "int32")
J = tirx.Var("j", "int32")
A = np.arange(-7, 9, dtype=np.int64).reshape(-1, 1)  # negative values pin floor vs trunc semantics
B = np.array([1, 2, 3, 5, -2, -3], dtype=np.int64).reshape(1, -1)
ENV = {I: A, J: B}


CASES = {
    "Add": (lambda: I + J, lambda a, b: a + b),
    "Sub": (lambda: I - J, lambda a, b: a - b),
    "Mul": (lambda: I * J, lambda a, b: a * b),
    "FloorDiv": (lambda: tirx.floordiv(I, J), lambda a, b: a // b),
    "FloorMod": (lambda: tirx.floormod(I, J), lambda a, b: a % b),
    "Div (trunc)": (lambda: tirx.truncdiv(I, J), lambda a, b: np.trunc(a / b).astype(np.int64)),
    "Mod (trunc)": (lambda: tirx.truncmod(I, J), lambda a, b: np.fmod(a, b)),
    "Min": (lambda: tirx.min(I, J), np.minimum),
    "Max": (lambda: tirx.max(I, J), np.maximum),
    "Select": (lambda: tirx.Select(I < J, I * 2, J - 1), lambda a, b: np.where(a < b, a * 2, b - 1)),
    "if_then_else": (lambda: tirx.if_then_else(I >= J, I, J), lambda a, b: np.where(a >= b, a, b)),
    "BitwiseAnd": (lambda: tirx.bitwise_and(I, J), np.bitwise_and),
    "BitwiseOr": (lambda: tirx.bitwise_or(I, J), np.bitwise_or),
    "BitwiseXor": (lambda: tirx.bitwise_xor(I, J), np.bitwise_xor),
    "BitwiseNot": (lambda: tirx.bitwise_not(I) + J * 0, lambda a, b: ~a + 0 * b),
    "Cast": (lambda: tirx.Cast("int64", I) + tirx.Cast("int64", J), lambda a, b: a + b),
    "And/Or/Not": (lambda: tirx.Select(tirx.Or(tirx.And(I > 0, J > 0), tirx.Not(I != J)), 1, 0),
                   lambda a, b: (((a > 0) & (b > 0)) | (a == b)).astype(np.int64)),
    "EQ/NE/LE/GT": (lambda: tirx.Select(tirx.EQ(I, J), 1, 0) + tirx.Select(tirx.NE(I, 0), 2, 0)
                    + tirx.Select(I <= J, 4, 0) + tirx.Select(I > J, 8, 0),
                    lambda a, b: (a == b) * 1 + (a != 0) * 2 + (a <= b) * 4 + (a > b) * 8),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_supported_node_matches_numpy(name):
    build, ref = CASES[name]
    got = evaluate(build(), ENV)
    np.testing.assert_array_equal(np.broadcast_to(got, (16, 6)), ref(A, B))


@pytest.mark.parametrize("build, ref", [
    (lambda: tirx.shift_left(I, J), lambda a, b: a << b),
    (lambda: tirx.shift_right(I, J), lambda a, b: a >> b),
])
def test_shifts(build, ref):
    a = np.arange(0, 40, dtype=np.int64).reshape(-1, 1)
    b = np.arange(0, 5, dtype=np.int64).reshape(1, -1)
    np.testing.assert_array_equal(evaluate(build(), {I: a, J: b}), ref(a, b))


def test_constants_scalars_and_result_dtype():
    assert int(evaluate(tirx.const(7, "int32") * 6, {})) == 42
    out = evaluate(I * 3 + 1, {I: np.arange(4)})
    assert out.dtype == np.int64 and out.tolist() == [1, 4, 7, 10]
    assert int(evaluate(I * J, {I: 6, J: 7})) == 42


def test_no_int32_overflow_in_intermediates():
    big = evaluate(I * 65536 * 65536 // 65536, {I: np.array([3])})
    assert big.tolist() == [3 * 65536]


def test_open_grid_broadcasting_is_lazy_per_variable():
    """A term over one variable keeps that variable's own axis only (no full grid materialised)."""
    i = np.arange(128, dtype=np.int64).reshape(128, 1)
    j = np.arange(128, dtype=np.int64).reshape(1, 128)
    assert evaluate(I % 8 * 16, {I: i, J: j}).shape == (128, 1)
    assert evaluate(I % 8 * 16 + J // 8, {I: i, J: j}).shape == (128, 128)


def test_shared_subexpressions_evaluated_once_and_correct():
    sub = I * 7 + J
    expr = sub * sub - sub
    got = evaluate(expr, ENV)
    ref = (A * 7 + B) ** 2 - (A * 7 + B)
    np.testing.assert_array_equal(got, ref)


def test_evaluate_grid_shape_and_values():
    tab = evaluate_grid([I * 4 + J, J], [I, J], [3, 4])
    assert tab.shape == (3, 4, 2)
    ii, jj = np.meshgrid(np.arange(3), np.arange(4), indexing="ij")
    np.testing.assert_array_equal(tab[..., 0], ii * 4 + jj)
    np.testing.assert_array_equal(tab[..., 1], jj)


@pytest.mark.parametrize("expr, node", [
    (lambda: tirx.Let(J, I, J + 1), "Let"),
    (lambda: tirx.FloatImm("float32", 1.5), "FloatImm"),
    (lambda: tirx.exp(tirx.Cast("float32", I)), "Call"),
    (lambda: tirx.Cast("float32", I), "Cast"),
    (lambda: tirx.Ramp(I, 1, 4), "Ramp"),
])
def test_unsupported_node_names_the_node_type(expr, node):
    with pytest.raises(EvaluationError, match=node):
        evaluate(expr(), {I: np.arange(3), J: 1})


def test_errors_are_typed_and_informative():
    with pytest.raises(EvaluationError, match="free variable 'j'"):
        evaluate(I + J, {I: 1})
    with pytest.raises(EvaluationError, match="by zero"):
        evaluate(tirx.floordiv(I, J), {I: np.arange(3), J: 0})
    with pytest.raises(EvaluationError, match="symbolic extent"):
        evaluate_grid([I], [I], [tirx.Var("n", "int32")])
    assert issubclass(EvaluationError, TypeError)


def test_bool_valued_nodes_come_back_as_booleans_usable_in_select():
    cond = evaluate(I < 3, {I: np.arange(5)})
    assert cond.tolist() == [True, True, True, False, False]


@pytest.mark.parametrize("divisor", [1, 2, 4, 8, 64, 1 << 20, 3, 6, 12, -1, -4, -8])
def test_floor_division_by_constants_including_powers_of_two(divisor):
    """A constant power-of-two divisor is evaluated with shifts and masks: still floor semantics on negatives."""
    a = np.arange(-300, 300, dtype=np.int64).reshape(-1, 1)
    env = {I: a, J: np.zeros((1, 1), dtype=np.int64)}
    full = lambda e: np.broadcast_to(evaluate(e + J, env), a.shape)     # noqa: E731  (TVM folds x % 1 to 0)
    np.testing.assert_array_equal(full(tirx.floordiv(I, divisor)), a // divisor)
    np.testing.assert_array_equal(full(tirx.floormod(I, divisor)), a % divisor)
    np.testing.assert_array_equal(full(tirx.floordiv(I * 3 + 1, divisor)), (a * 3 + 1) // divisor)
    assert int(evaluate(tirx.floormod(I, divisor), {I: np.int64(-7)})) == -7 % divisor

