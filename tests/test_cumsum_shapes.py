"""lang.cumsum over fragments across shapes and thread counts, run on the CPU against numpy.

The golden case covers two shapes; these add the ones where rows and threads disagree (fewer rows than
threads, so the row-per-thread scan leaves threads replicated or idle; more rows than threads, so a thread
walks several rows), forward and reversed, in place and into a second fragment, under both cost models.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilelayout as tl

from tests import kernels_coverage as K

MODELS = ("register-count", "io-aware")

#: (rows, columns, threads): rows < threads, rows == threads, rows > threads, odd column counts
SHAPES = [(64, 32, 128), (16, 32, 128), (8, 64, 64), (4, 8, 32), (32, 16, 32), (128, 8, 32), (48, 12, 64)]


def _numpy_scan(a: np.ndarray, dim: int, reverse: bool) -> np.ndarray:
    """Inclusive prefix sum by an explicit loop in float64 (independent of the kernel and of np.cumsum)."""
    x = np.moveaxis(a.astype(np.float64), dim, -1)
    out = np.empty_like(x)
    order = range(x.shape[-1] - 1, -1, -1) if reverse else range(x.shape[-1])
    run = np.zeros(x.shape[:-1])
    for k in order:
        run = run + x[..., k]
        out[..., k] = run
    return np.moveaxis(out, -1, dim)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("m,n,threads", SHAPES)
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_rows_match_numpy(model, m, n, threads, reverse):
    func = K.cumsum(m, n, threads, 1, reverse)
    a = np.random.default_rng(m * 7 + n + reverse).standard_normal((m, n)).astype(np.float32)
    out = [a.copy(), np.zeros_like(a)]
    tl.build_cpu(func, cost_model=model)(*out)
    np.testing.assert_allclose(out[1], _numpy_scan(a, 1, reverse), rtol=1e-5, atol=1e-4)
    assert np.array_equal(out[0], a), "the source tensor must not be written"


@pytest.mark.parametrize("m,n,threads,reverse", [(16, 32, 128, True), (8, 24, 64, False)])
def test_cumsum_into_a_second_fragment_and_along_dim0(m, n, threads, reverse):
    a = np.random.default_rng(3).standard_normal((m, n)).astype(np.float32)
    for dim, into_other in ((1, True), (0, False), (0, True)):
        func = K.cumsum(m, n, threads, dim, reverse, into_other)
        out = [a.copy(), np.zeros_like(a)]
        tl.build_cpu(func)(*out)
        np.testing.assert_allclose(out[1], _numpy_scan(a, dim, reverse), rtol=1e-5, atol=1e-4,
                                   err_msg=f"dim {dim}, into_other {into_other}")


def test_the_numpy_scan_reference_is_not_trivially_satisfied():
    """The reference differs from a plain copy and from the opposite direction, so the checks can fail."""
    a = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    fwd, rev = _numpy_scan(a, 1, False), _numpy_scan(a, 1, True)
    assert np.allclose(fwd, np.cumsum(a, axis=1), atol=1e-5)
    assert not np.allclose(fwd, a, atol=1e-3) and not np.allclose(fwd, rev, atol=1e-3)
