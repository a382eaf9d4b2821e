"""Shared test helpers: independent numpy references and hypothesis strategies for random layouts.

Tests import the plain helpers with ``from conftest import ...`` (pytest puts tests/ on sys.path).
Every reference here is computed from numpy index grids or from a digit spec, never from tilelayout's
own tables, so a wrong symbolic result cannot agree with itself.
"""
from __future__ import annotations

import shutil
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import settings, strategies as st

# the tests import these kernel-text helpers from here
from maint.kernel_text import buffer_type, main_text, parse_kernel, parse_main  # noqa: F401
from tilelayout.evaluate import evaluate

settings.register_profile("tilelayout", deadline=None, max_examples=30, derandomize=True, database=None)
settings.load_profile("tilelayout")

#: what kernels warn about by design: resources over a limit, a layout conversion through shared memory, a fragment
#: read before it is written
KERNEL_WARNINGS = ("TileLayoutResourceWarning", "ConversionWarning", "UninitializedReadWarning")


@contextmanager
def kernel_warnings(*names: str):
    """For a test that runs inference or lowering over many kernels (the golden suite, benchmark kernels) to check
    something else: the warnings of the categories named (default ``KERNEL_WARNINGS``) are the ones those kernels
    are known to give; they are recorded into the list this yields instead of printed. Any other warning still
    reaches pytest, so nothing unexpected is silenced."""
    import tilelayout as tl
    categories = tuple(getattr(tl, n) for n in (names or KERNEL_WARNINGS))
    expected: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield expected
    for w in caught:
        if issubclass(w.category, categories):
            expected.append(w)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def gemm_body(m: int, n: int, k: int, acc: str = "acc") -> str:
    """Kernel statements (a start of ``main_text``'s ``body``) computing ``acc = A @ B``: float16 A (m x k) and B
    (k x n) staged in the shared tiles ``A_s`` and ``B_s``, the product in the float32 fragment ``acc``."""
    return f"""
    A_s = T.alloc_buffer(({m}, {k}), "float16", scope="shared")
    B_s = T.alloc_buffer(({k}, {n}), "float16", scope="shared")
    {acc} = T.alloc_buffer(({m}, {n}), "float32", scope="local.fragment")
    Tx.copy(A_s[0:{m}, 0:{k}], A[0:{m}, 0:{k}])
    Tx.copy(B_s[0:{k}, 0:{n}], B[0:{k}, 0:{n}])
    Tx.gemm({acc}[0:{m}, 0:{n}], A_s[0:{m}, 0:{k}], B_s[0:{k}, 0:{n}], {acc}[0:{m}, 0:{n}], False, False, 1.0, 0.0)"""


def case_variant_params(pending_raises: type) -> list:
    """``pytest.param(name, variant)`` for every variant of every golden case (``cases/``); a variant its case
    declares NUMERIC_PENDING (the lowering it needs is missing, the case says why) is a strict xfail raising
    ``pending_raises``: once that lowering lands the variant passes, the strict xfail fails, and the mark has to
    go."""
    import importlib
    from pathlib import Path

    from maint.run import discover
    out = []
    for name in discover(Path(__file__).resolve().parent.parent / "cases"):
        case = importlib.import_module(f"cases.{name}")
        pending = getattr(case, "NUMERIC_PENDING", {}) or {}
        for variant in case.VARIANTS:
            marks = [pytest.mark.xfail(reason=pending[variant], strict=True, raises=pending_raises)] \
                if variant in pending else []
            out.append(pytest.param(name, variant, id=f"{name}/{variant}", marks=marks))
    return out


#: targets the lowering tests compile for
SM80, SM89, SM90, SM90A = ({"kind": "cuda", "arch": arch} for arch in ("sm_80", "sm_89", "sm_90", "sm_90a"))
#: tests that compile the generated CUDA to PTX
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def gemm_reports(lowered) -> list:
    """The lowering's report line of every gemm of a lowered function (its gemm-report attribute)."""
    from tilelayout.passes.lowering import lower_gemm
    return [str(text) for text in dict(lowered.attrs[lower_gemm.GEMM_REPORT_ATTR]).values()]


def grid(shape):
    """Open coordinate grids (one int64 array per axis, broadcastable) over ``shape``."""
    return tuple(np.asarray(g, dtype=np.int64) for g in np.ogrid[tuple(slice(0, int(s)) for s in shape)])


def full(values, shape):
    return np.broadcast_to(np.asarray(values, dtype=np.int64), tuple(shape))


def apply_exprs(exprs, variables, values):
    """Evaluate PrimExprs with ``variables`` bound to ``values`` (arrays), broadcast together."""
    env = dict(zip(variables, values))
    outs = [np.asarray(evaluate(e, env), dtype=np.int64) for e in exprs]
    shape = np.broadcast_shapes(*(np.shape(v) for v in values), *(o.shape for o in outs))
    return [np.broadcast_to(o, shape) for o in outs]


def check_inverse_roundtrip(layout, inverse):
    """inverse(forward(x)) == x on the whole (static) domain of ``layout``."""
    coords = grid(layout.input_shape)
    fwd = apply_exprs(layout.forward_index, layout.forward_vars, coords)
    back = apply_exprs(inverse.forward_index, inverse.forward_vars, fwd)
    assert len(back) == len(coords)
    for b, c in zip(back, coords):
        np.testing.assert_array_equal(b, full(c, layout.input_shape))


def check_fragment_inverse_roundtrip(frag):
    """frag.inverse() maps (slot..., thread(coords, rep)) back to (coords..., rep) for every replica."""
    inv = frag.inverse()
    shape = list(frag.input_shape) + [frag.replicate_size]
    coords = grid(shape)
    from tilelayout.layout import rep_placeholder
    slots = apply_exprs(frag.forward_index, frag.forward_vars, coords[:-1])
    thread = apply_exprs([frag.forward_thread], frag.forward_vars + [rep_placeholder()], coords)[0]
    back = apply_exprs(inv.forward_index, inv.forward_vars, [*slots, thread])
    assert len(back) == len(shape), "inverse must return (coords..., rep)"
    for b, c in zip(back, coords):
        np.testing.assert_array_equal(b, full(c, shape))


def enumerated_injective(values) -> bool:
    """Ground truth: no two points share an output tuple (values: list of equal-shape arrays)."""
    flat = np.stack([np.asarray(v).reshape(-1) for v in values], axis=1)
    return len(np.unique(flat, axis=0)) == flat.shape[0]


# --------------------------------------------------------------------------- random affine fragments

@dataclass(frozen=True)
class Digit:
    """One mixed-radix digit ``(v // lower) % extent`` of coordinate ``dim`` (dim == -1: the replica)."""
    dim: int
    lower: int
    extent: int


@dataclass(frozen=True)
class AffineSpec:
    """A fragment built by routing each coordinate digit to the thread or to one of the slot outputs.

    ``thread`` and ``slots`` list digits most significant first; the value of a digit list is its
    mixed-radix number. Routing every digit exactly once gives a bijection (coords, rep) -> (slots, thread).
    """
    shape: tuple
    replicate: int
    thread: tuple
    slots: tuple  # tuple of digit tuples, one per slot output
    alt_form: bool = False

    def _piece(self, d: Digit, values):
        v = values[d.dim] if d.dim >= 0 else values[-1]
        top = d.lower * d.extent >= (self.shape[d.dim] if d.dim >= 0 else self.replicate)
        if self.alt_form and not top:  # the same digit written the other way round
            return v % (d.lower * d.extent) // d.lower
        piece = v // d.lower if d.lower > 1 else v
        return piece if top else piece % d.extent

    def number(self, digits, values):
        out = 0
        for d in digits:
            out = out * d.extent + self._piece(d, values)
        return out

    def thread_of(self, *values):
        """values: coords..., rep (PrimExprs or numpy arrays)."""
        return self.number(self.thread, values)

    def slots_of(self, *coords):
        return [self.number(ds, list(coords) + [0]) for ds in self.slots]

    def fragment(self):
        from tilelayout import Fragment
        if self.replicate > 1:
            return Fragment(list(self.shape), lambda *v: self.thread_of(*v), lambda *c: self.slots_of(*c),
                            replicate=self.replicate)
        return Fragment(list(self.shape), lambda *c: self.thread_of(*c, 0), lambda *c: self.slots_of(*c))

    def layout(self):
        """The plain Layout coords -> (slots..., thread) (replicate must be 1)."""
        from tilelayout import Layout
        return Layout(list(self.shape), lambda *c: self.slots_of(*c) + [self.thread_of(*c, 0)])

    def reference(self):
        """(slot arrays, thread array) over (*shape, replicate) from numpy alone."""
        coords = grid(list(self.shape) + [self.replicate])
        slots = [full(s, coords_shape(self)) for s in self.slots_of(*coords[:-1])]
        return slots, full(self.thread_of(*coords), coords_shape(self))


def coords_shape(spec: AffineSpec):
    return list(spec.shape) + [spec.replicate]


_FACTORS = [2, 3, 4]


@st.composite
def affine_specs(draw, max_points: int = 1024, allow_rep: bool = True, max_outputs: int = 2,
                 drop_digit: bool = False):
    """Random mixed-radix split of every coordinate (and the replica) into thread and slot digits.

    ``drop_digit`` removes one non-trivial digit from the routing, which makes the map non-injective.
    """
    ndim = draw(st.integers(1, 3))
    budget = max_points
    shape, digits = [], []
    for d in range(ndim):
        factors = draw(st.lists(st.sampled_from(_FACTORS), min_size=1, max_size=3))
        kept, extent = [], 1
        for f in factors:
            if extent * f * max(1, ndim - d - 1) <= budget:
                kept.append(f)
                extent *= f
        kept = kept or [1]
        lower = 1
        for f in kept:
            digits.append(Digit(d, lower, f))
            lower *= f
        shape.append(extent)
        budget //= extent
    replicate = 1
    if allow_rep and draw(st.booleans()):
        for f in draw(st.lists(st.sampled_from([2, 4]), min_size=1, max_size=2)):
            if f <= budget:
                digits.append(Digit(-1, replicate, f))
                replicate *= f
                budget //= f
    routed = [d for d in digits if d.extent > 1]
    if drop_digit and routed:
        gone = draw(st.sampled_from(routed))
        routed = [d for d in routed if d != gone]
    n_out = draw(st.integers(1, max_outputs))
    thread, slots = [], [[] for _ in range(n_out)]
    for d in routed:
        to = "thread" if d.dim < 0 else draw(st.sampled_from(["thread"] + [k for k in range(n_out)]))
        (thread if to == "thread" else slots[to]).append(d)
    thread = draw(st.permutations(thread)) if thread else []
    slots = [draw(st.permutations(s)) if s else [] for s in slots]
    return AffineSpec(tuple(shape), replicate, tuple(thread), tuple(tuple(s) for s in slots))


@pytest.fixture
def mma_like():
    """TileLang's register-count golden fragment: 128x128 over 128 threads, index inferred."""
    from tilelayout import Fragment
    return Fragment([128, 128], lambda i, j: i % 8 * 16 + j // 8)
