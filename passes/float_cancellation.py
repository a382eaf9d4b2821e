"""Float subtractions the simplifier would cancel, written so that it keeps the IEEE result.

apache-tvm's rewrite simplifier treats float subtraction as exact and cancels it: ``x - x -> 0``,
``(x + y) - y -> x``, ``x - (x + y) -> 0 - y`` and ``select(c, y, z) - z -> select(c, y - z, 0)``, in the CUDA
build and in the CPU check alike. IEEE arithmetic does not: ``(3 + x) - 3`` in float16 rounds ``x`` to the
spacing of float16 numbers near 4 (the magic-constant rounding trick), ``inf - inf`` is NaN, not 0.

Every float ``a - b`` whose operands may coincide in one of those shapes (``float_coincidence``) is written
``a + b * -1`` instead: IEEE defines ``a - b`` as ``a + (-b)``, multiplying by -1 only flips the sign (NaN,
infinities and signed zeros included), TVM writes negation as that multiplication itself, and no simplifier
rule cancels across an addition of floats. The rewrite runs on the user's function on entry to inference and
lowering, before anything simplifies it; subtractions whose operands can never meet (``A[i + 1] - A[i]``,
``x - y``) are left as written.

Constant identities (``x * 0.0``, ``0.0 / x``, ``x + 0.0``) are folded by TVM when the expression is built, as
TVMScript parses the kernel, so no pass ever sees them (docs/limits.md).
"""
from __future__ import annotations

from tvm import tirx
from tvm.ir import Call

from .float_coincidence import Coincidence, is_float
from .ir_utils import mapped
from .nan_tests import rewrite_nan_tests

__all__ = ["keep_ieee_semantics", "protect_cancellations"]

_IF_THEN_ELSE = ("tirx.if_then_else", "prim.if_then_else")


def _branches(e) -> tuple:
    """The two values a select (or ``T.if_then_else``) chooses between; () for anything else."""
    if isinstance(e, tirx.Select):
        return (e.true_value, e.false_value)
    if isinstance(e, Call) and getattr(e.op, "name", "") in _IF_THEN_ELSE and len(e.args) == 3:
        return (e.args[1], e.args[2])
    return ()


def _cancels(sub: tirx.Sub, same: Coincidence) -> bool:
    """True when one of the simplifier's float cancellation rules may match ``sub``."""
    a, b = same.resolve(sub.a), same.resolve(sub.b)
    if same.may(a, b):                                                     # x - x
        return True
    if isinstance(a, tirx.Add) and (same.may(a.a, b) or same.may(a.b, b)):    # (x + y) - y, (x + y) - x
        return True
    if isinstance(b, tirx.Add) and (same.may(b.a, a) or same.may(b.b, a)):    # x - (y + x), x - (x + y)
        return True
    return any(same.may(v, b) for v in _branches(a))                       # select(c, y, z) - z


def _negated(b):
    """``-b`` as TVM writes it (a constant's sign flipped, else ``b * -1``)."""
    if isinstance(b, tirx.FloatImm):
        return tirx.FloatImm(str(b.ty), -b.value)
    return b * tirx.const(-1.0, str(b.ty))        # a vector type gets a broadcast -1


def protect_cancellations(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every float subtraction the simplifier could cancel written as ``a + b * -1``."""
    same = Coincidence(func)

    def guard(sub):
        if not is_float(sub) or not _cancels(sub, same):
            return sub
        return tirx.Add(sub.a, _negated(sub.b))

    body = mapped(func.body, [(tirx.Sub, guard)])
    return func if body.same_as(func.body) else func.with_body(body)


def keep_ieee_semantics(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The user's function with the float rewrites TVM's simplifier would apply made harmless: self-comparisons
    become NaN tests (``nan_tests``), cancelling subtractions additions of the negation."""
    return protect_cancellations(rewrite_nan_tests(func))
