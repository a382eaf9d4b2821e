"""tilelayout.cute on random well-posed layouts: the function over the whole domain against each operation's
definition (numpy), and the printed form against NVIDIA's pycute where pycute agrees with CUTLASS 4.x C++
(coalesce, filter, right_inverse, the IntTuple helpers, swizzles). Where pycute lags C++ (composition,
complement, left_inverse, the divides and products) the printed form is checked against the C++ headers
themselves in test_cute_cpp_parity.py; the CUTLASS 4.x answers at the end of this file need no compiler.
"""
from __future__ import annotations

import re

import numpy as np
from tvm import tirx
import pytest

from tilelayout import cute
from tilelayout.cute import CuteError, Layout
from tilelayout.cute.algebra import values

pycute = pytest.importorskip("pycute")

LEAVES = [1, 2, 2, 2, 3, 4, 4, 4, 6, 8]
POW2 = [1, 2, 2, 4, 4, 8]


def pstr(x) -> str:
    """pycute's str in CuTe's spelling."""
    return re.sub(r"\s", "", str(x)).replace(",)", ")")


def to_py(layout: Layout):
    return pycute.Layout(layout.shape, layout.stride)


def rand_shape(rng, max_size=256, leaves=LEAVES):
    while True:
        modes = []
        for _ in range(int(rng.integers(1, 4))):
            if rng.random() < 0.35:
                modes.append(tuple(int(rng.choice(leaves)) for _ in range(int(rng.integers(1, 4)))))
            else:
                modes.append(int(rng.choice(leaves)))
        shape = modes[0] if len(modes) == 1 and rng.random() < 0.5 else tuple(modes)
        if cute.size(shape) <= max_size:
            return shape


def _rebuild(shape, flat):
    it = iter(flat)

    def go(s):
        return tuple(go(x) for x in s) if isinstance(s, tuple) else next(it)
    return go(shape)


def compact_strides(rng, shape, gaps=False):
    """Strides of a bijection (or, with gaps, an injection) onto a compact range in a random mode order."""
    flat = cute.flatten(shape)
    order = rng.permutation(len(flat))
    strides, cur = [0] * len(flat), 1
    for k in order:
        if gaps and rng.random() < 0.3:
            cur *= int(rng.choice([2, 3]))
        strides[k] = cur
        cur *= flat[k]
    return _rebuild(shape, strides)


def rand_layout(rng, kind=None, max_size=256, leaves=LEAVES) -> Layout:
    shape = rand_shape(rng, max_size, leaves)
    kind = kind or rng.choice(["compact", "gaps", "random"])
    if kind == "compact":
        return Layout(shape, compact_strides(rng, shape))
    if kind == "gaps":
        return Layout(shape, compact_strides(rng, shape, gaps=True))
    flat = [int(rng.choice([0, 1, 2, 3, 4, 8, 16, 32])) for _ in cute.flatten(shape)]
    return Layout(shape, _rebuild(shape, flat))


def table(layout: Layout, n=None) -> np.ndarray:
    return values(layout, np.arange(cute.size(layout) if n is None else n, dtype=np.int64))


def agree(ours, theirs):
    assert str(ours) == pstr(theirs), (str(ours), pstr(theirs))


def run_pycute(fn, *args):
    try:
        return fn(*args)
    except Exception:  # pycute asserts (or divides by zero) outside its preconditions
        return None


# ----------------------------------------------------------------------------------------------------------- ops

def test_coalesce_and_filter_match_pycute():
    rng = np.random.default_rng(1)
    for _ in range(800):
        a = rand_layout(rng)
        c, f = cute.coalesce(a), cute.filter(a)
        agree(c, pycute.coalesce(to_py(a)))
        agree(f, pycute.filter(to_py(a)))
        assert np.array_equal(table(c, cute.size(a)), table(a))
        image = np.unique(table(a))
        assert np.array_equal(np.unique(table(f)), image)
        assert cute.depth(c.shape) <= 1 and all(s != 1 for s in cute.flatten(c.shape)) or c == Layout(1, 0)


def test_coalesce_profile_and_max_extent():
    a = Layout(((2, 4), (4, 2)), ((1, 2), (8, 64)))
    assert str(cute.coalesce(a, (1, 1))) == "(8,(4,2)):(1,(8,64))"
    agree(cute.coalesce(a, (1, 1)), pycute.coalesce(to_py(a), (1, 1)))
    assert str(cute.coalesce(Layout((4, 4, 4), (1, 4, 16)), 16)) == "(16,4):(1,16)"
    assert str(cute.coalesce(Layout((4, 4, 4), (1, 4, 16)))) == "64:1"


def composition_operands(rng):
    a = rand_layout(rng, leaves=POW2 + [3, 6], max_size=128)
    while True:  # keep B inside A's domain: that is where CuTe's composition is defined
        b = rand_layout(rng, rng.choice(["compact", "gaps", "random"]), max_size=64, leaves=POW2 + [3])
        if cute.cosize(b) <= cute.size(a):
            return a, b


def test_composition_matches_definition():
    rng = np.random.default_rng(2)
    ok = refused = checked = 0
    for _ in range(1500):
        a, b = composition_operands(rng)
        try:
            r = cute.composition(a, b)
        except CuteError:
            refused += 1  # C++ CuTe's static checks (test_cute_cpp_parity.py compares the accepted cases)
            continue
        ok += 1  # the printed form follows C++ CuTe, checked in test_cute_cpp_parity.py
        assert cute.size(r) == cute.size(b)
        for ri, bi in leaf_pairs(r, b):  # right-distributive down to B's leaves: each is A o (that leaf)
            assert np.array_equal(table(ri), table(a)[table(bi)])
        checked += 1
    assert ok > 900 and refused > 10 and checked > 600, (ok, refused, checked)


def leaf_pairs(r: Layout, b: Layout):
    """(sub-layout of r, leaf mode of b) pairs: a composition's result mirrors B's tree down to B's leaves."""
    if not isinstance(b.shape, tuple):
        return [(r, b)]
    return [pair for ri, bi in zip(r, b) for pair in leaf_pairs(ri, bi)]


def test_composition_by_mode_and_int_tilers():
    a = Layout((12, (4, 8)), (59, (13, 1)))
    agree(cute.composition(a, (Layout(3, 4), Layout(8, 2))),
          pycute.composition(to_py(a), (pycute.Layout(3, 4), pycute.Layout(8, 2))))
    agree(cute.composition(a, (None, 8)), pycute.composition(to_py(a), (None, 8)))
    assert cute.composition(a, None) is a


def test_complement_is_disjoint_and_covers():
    rng = np.random.default_rng(3)
    done = 0
    for _ in range(1200):
        a = rand_layout(rng, rng.choice(["compact", "gaps", "random"]), max_size=128)
        cot = int(rng.choice([1, cute.cosize(a), 2 * cute.cosize(a), 3 * cute.size(a) + 1]))
        try:
            c = cute.complement(a, cot)
        except CuteError:
            # refused only when two modes overlap: then (a, c) cannot be injective for any ordered c
            assert not _complementable(a)
            continue
        done += 1  # the printed form follows C++ CuTe (test_cute_cpp_parity.py)
        both = table(cute.make_layout(cute.filter(a), c))
        assert len(np.unique(both)) == len(both), (a, c)  # disjoint images
        if _complementable(a, exact=True):  # whole gaps: (a, c) covers the cotarget
            assert cute.size(cute.filter(a)) * cute.size(c) >= cot
    assert done > 700


def _complementable(a: Layout, exact=False) -> bool:
    modes = sorted((d, s) for s, d in zip(cute.flatten(a.shape), cute.flatten(a.stride)) if s != 1 and d != 0)
    cur = 1
    for d, s in modes:
        if d < cur or (exact and d % cur):
            return False
        cur = s * d
    return True


def test_right_inverse_matches_pycute_and_inverts():
    rng = np.random.default_rng(4)
    for _ in range(1000):
        a = rand_layout(rng)
        r = cute.right_inverse(a)
        ta = table(a)
        assert np.array_equal(ta[table(r)], np.arange(cute.size(r)))  # a(r(i)) == i
        flat = [(s, d) for s, d in zip(cute.flatten(a.shape), cute.flatten(a.stride)) if s != 1]
        strides = [d for _, d in flat]
        if 0 not in strides and _complementable(a):  # pycute stops at stride 0 and at overlaps
            agree(r, pycute.right_inverse(to_py(a)))
        bijective = np.array_equal(np.sort(ta), np.arange(len(ta)))
        assert (cute.size(r) == cute.size(a)) == bijective  # the documented bijectivity check


def test_right_inverse_skips_broadcast_modes():
    r = cute.right_inverse(Layout((4, 32), (0, 1)))
    assert str(r) == "32:4"  # index i -> coordinate (0, i): the broadcast mode is dropped, not a dead end
    assert str(pycute.right_inverse(pycute.Layout((4, 32), (0, 1)))) == "1:0"  # pycute gives up


def test_left_inverse_matches_pycute():
    rng = np.random.default_rng(5)
    done = 0
    for _ in range(800):
        a = rand_layout(rng, rng.choice(["compact", "gaps"]))
        li = cute.left_inverse(a)  # printed form: C++ CuTe's (test_cute_cpp_parity.py)
        ta = table(a)
        assert np.array_equal(table(li, int(ta.max()) + 1)[ta], np.arange(len(ta)))  # li(a(i)) == i
        done += 1
    assert done == 800


def divide_operands(rng):
    a = rand_layout(rng, leaves=POW2, max_size=256)
    b = rand_layout(rng, rng.choice(["compact", "gaps"]), max_size=16, leaves=POW2)
    return a, b


@pytest.mark.parametrize("name", ["logical_divide", "zipped_divide", "tiled_divide"])
def test_divides_match_pycute(name):
    rng = np.random.default_rng(6)
    ours, theirs_fn = getattr(cute, name), getattr(pycute, name)
    done = 0
    for _ in range(400):
        a, b = divide_operands(rng)
        if rng.random() < 0.4 and isinstance(a.shape, tuple) and len(a) >= 2:  # by-mode tiler
            b = (cute.Layout(int(rng.choice([1, 2])), 1), None)
            pb = (pycute.Layout(b[0].shape, 1), None)
        else:
            pb = to_py(b)
        theirs = run_pycute(theirs_fn, to_py(a), pb)
        try:
            r = ours(a, b)
        except CuteError:
            continue
        if theirs is None:
            continue
        done += 1  # printed form: C++ CuTe's (test_cute_cpp_parity.py)
        if name == "logical_divide" and not isinstance(b, tuple):
            full = cute.make_layout(b, cute.complement(b, cute.coalesce(a).shape))
            tf = table(full)
            keep = tf < cute.size(a)
            assert np.array_equal(table(r)[keep], table(a)[tf[keep]])
    assert done > 250, done


@pytest.mark.parametrize("name", ["logical_product", "zipped_product", "tiled_product"])
def test_products_match_pycute(name):
    rng = np.random.default_rng(7)
    ours, theirs_fn = getattr(cute, name), getattr(pycute, name)
    done = 0
    for _ in range(400):
        a = rand_layout(rng, rng.choice(["compact", "gaps"]), max_size=32)
        b = rand_layout(rng, rng.choice(["compact", "gaps", "random"]), max_size=16)
        if name != "logical_product" and rng.random() < 0.3 and isinstance(a.shape, tuple) and len(a) >= 2:
            b, pb = (Layout(2, 1), Layout(3, 1)), (pycute.Layout(2, 1), pycute.Layout(3, 1))
        else:
            pb = to_py(b)
        theirs = run_pycute(theirs_fn, to_py(a), pb)
        try:
            r = ours(a, b)
        except CuteError:  # composition's shape divisibility: pycute floors and loses elements
            assert theirs is None or pycute.size(theirs) != cute.size(a) * _size(b)
            continue
        if theirs is None:  # pycute refuses where C++ CuTe answers (the tuple-cotarget complement)
            continue
        done += 1  # printed form: C++ CuTe's (test_cute_cpp_parity.py)
        if name == "logical_product":
            # mode 0 is A itself; mode 1 is B's repeats placed in A's complement
            assert r[0] == a
            comp = cute.complement(a, cute.size(a) * cute.cosize(b))
            assert np.array_equal(table(r[1]), table(comp)[table(b)])
    assert done > 300, done


def test_logical_product_with_int_tiler():
    # pycute's int branch calls logical_divide by mistake; CuTe repeats A over an int tiler
    r = cute.logical_product(Layout((2, 2), (1, 2)), 3)
    assert str(r) == "((2,2),3):((1,2),4)"


def _size(b) -> int:
    return int(np.prod([cute.size(x) for x in b])) if isinstance(b, tuple) else cute.size(b)


def blocked_reference(a: Layout, b: Layout, r: Layout, raked=False) -> None:
    """Brute force: for a compact A, mode i coordinate c splits into (block a_i, repeat b_i) and
    blocked(c) = A(a) + size(A) * B(b)   (raked: the split is (b_i, a_i) instead)."""
    n = max(len(a), len(b))
    am = [a[i] if i < len(a) else Layout(1, 0) for i in range(n)]
    bm = [b[i] if i < len(b) else Layout(1, 0) for i in range(n)]
    modes = [r[i] for i in range(n)] if isinstance(r.shape, tuple) else [r]
    grids = np.meshgrid(*[np.arange(cute.size(m)) for m in modes], indexing="ij")
    got = sum(values(m, g.ravel()) for m, g in zip(modes, grids))
    want = 0
    for i, g in enumerate(grids):
        c, sa = g.ravel(), cute.size(am[i])
        inner, outer = (c % sa, c // sa) if not raked else (c // cute.size(bm[i]), c % cute.size(bm[i]))
        want = want + values(am[i], inner) + cute.size(a) * values(bm[i], outer)
    assert np.array_equal(got, want), (a, b, r)


def test_blocked_and_raked_product_brute_force():
    rng = np.random.default_rng(8)
    for _ in range(500):
        a = rand_layout(rng, "compact", max_size=24)
        b = rand_layout(rng, rng.choice(["compact", "gaps", "random"]), max_size=24)
        blocked_reference(a, b, cute.blocked_product(a, b))
        blocked_reference(a, b, cute.raked_product(a, b), raked=True)


def test_blocked_product_cute_docs_example():
    tile, grid = Layout((2, 5), (5, 1)), Layout((3, 4), (4, 1))
    assert str(cute.blocked_product(tile, grid)) == "((2,3),(5,4)):((5,40),(1,10))"
    assert str(cute.raked_product(tile, grid)) == "((3,2),(4,5)):((40,5),(10,1))"


def test_int_tuple_helpers_match_pycute():
    rng = np.random.default_rng(9)
    for _ in range(500):
        shape = rand_shape(rng)
        assert cute.prefix_product(shape) == pycute.prefix_product(shape)
        assert cute.flatten(shape) == pycute.flatten(shape)
        assert cute.product(shape) == pycute.product(shape)
        i = int(rng.integers(cute.size(shape)))
        crd = cute.idx2crd(i, shape)
        assert crd == pycute.idx2crd(i, shape)
        assert cute.crd2idx(crd, shape) == pycute.crd2idx(crd, shape) == i
        stride = compact_strides(rng, shape)
        assert Layout(shape, stride)(crd) == pycute.Layout(shape, stride)(crd)
        assert Layout(shape, stride)(i) == pycute.Layout(shape, stride)(i)
        d = int(rng.choice([1, 2, 4]))
        if all(x % d == 0 or d % x == 0 for x in cute.flatten(shape)):
            assert cute.shape_div(shape, d) == pycute.shape_div(shape, d)


def test_make_layout_size_cosize_slice_match_pycute():
    rng = np.random.default_rng(10)
    for _ in range(400):
        a, b = rand_layout(rng), rand_layout(rng)
        agree(cute.make_layout(a, b), pycute.make_layout(to_py(a), to_py(b)))
        assert cute.size(a) == pycute.size(to_py(a))
        assert cute.cosize(a) == pycute.cosize(to_py(a))
        if isinstance(a.shape, tuple) and len(a) >= 2:
            crd = (None,) + (0,) * (len(a) - 1)
            sub, off = cute.slice_and_offset(crd, a)
            psub, poff = pycute.slice_and_offset(crd, to_py(a))
            agree(sub, psub)
            assert off == poff


def test_swizzle_and_composed_layout_match_pycute():
    rng = np.random.default_rng(11)
    for _ in range(300):
        b = int(rng.integers(0, 4))
        m = int(rng.integers(0, 4))
        s = int(rng.integers(max(b, 1), 5))
        sw, psw = cute.Swizzle(b, m, s), pycute.Swizzle(b, m, s)
        a = rand_layout(rng, "compact", max_size=128)
        off = int(rng.integers(0, 16))
        c, pc = cute.ComposedLayout(sw, off, a), pycute.ComposedLayout(psw, off, to_py(a))
        idx = np.arange(cute.size(a))
        assert [c(int(i)) for i in idx] == [pc(int(i)) for i in idx]
        assert np.array_equal(sw(values(a, idx) + off), [pc(int(i)) for i in idx])  # vectorised form
        assert sw.size() == psw.size()
        assert str(c) == f"Sw<{b},{m},{s}> o {off} o {a}"
        assert cute.parse(str(c)) == c


def test_random_case_count():
    """The differential suite above runs this many random cases (kept in one place for docs/testing.md)."""
    counts = {"coalesce+filter": 800, "composition": 1500, "complement": 1200, "right_inverse": 1000,
              "left_inverse": 800, "divides": 3 * 400, "products": 3 * 400, "blocked/raked": 500,
              "int_tuple": 500, "make_layout/slice": 400, "swizzle": 300}
    assert sum(counts.values()) == 9400


# ------------------------------------------------------------------ CUTLASS 4.x answers where pycute differs
# Each expected string is C++ CuTe's printed answer (CUTLASS 4.2 headers, static ints, '_' marks removed);
# test_cute_cpp_parity.py checks the same cases and thousands more against the compiled headers.

@pytest.mark.parametrize("got, want", [
    (lambda: cute.cosize(Layout((4, 8), (-5, 1))), "23"),
    (lambda: cute.composition(Layout((8, 4), (10, 100)), Layout((4, 8), (cute.E(1), cute.E(0)))), "(4,8):(100,10)"),
    (lambda: cute.composition(Layout((16, 16), (1, 16)), cute.make_identity_layout((4, 4))), "(4,4):(1,16)"),
    (lambda: cute.composition(Layout((4, 1), (1, 0)), Layout(8, 1)), "(4,2):(1,0)"),
    (lambda: cute.composition(Layout((6, 4), (1, 10)), Layout(2, 4)), "2:4"),
    (lambda: cute.blocked_product(Layout((2, 5), (5, 1)), Layout((3, 4))), "((2,3),(5,4)):((5,10),(1,30))"),
    (lambda: cute.raked_product(Layout((2, 5), (5, 1)), Layout((3, 4))), "((3,2),(4,5)):((10,5),(30,1))"),
    (lambda: cute.blocked_product(Layout(4, 1), Layout(3, 1)), "((4,3)):((1,4))"),
    (lambda: cute.tiled_product(Layout((2, 5)), (Layout(3),)), "((2),3,5):((1),2,2)"),
    (lambda: cute.tiled_product(Layout(4, 3), (Layout(2, 3),)), "((4),(2)):((3),(12))"),
    (lambda: cute.left_inverse(Layout(8, 2)), "(2,8):(0,1)"),
    (lambda: cute.complement(Layout(8, 3), 100), "(3,5):(1,24)"),
    (lambda: cute.logical_divide(Layout((6, 4), (1, 10)), Layout(3, 1)), "(3,(2,4)):(1,(3,10))"),
    (lambda: cute.make_layout((1, 4)), "(1,4):(0,1)"),
])
def test_cutlass4_answers(got, want):
    assert str(got()) == want


def test_cutlass4_symbolic_forms():
    n = tirx.Var("n", "int32")
    assert str(cute.cosize(Layout((4, 8), (-n, 1)))).replace(" ", "") != ""
    for nv in (1, 3, 5):
        value = cute.cosize(Layout((4, 8), (-nv, 1)))
        assert value == 3 * nv + 8  # |stride| spans the codomain, as C++'s coshape
    c = cute.complement(Layout(8, n), 1024)  # rank-1 symbolic stride: C++ CuTe accepts it
    assert str(c.shape[0]) == "n" and str(c.stride[1]) == "n * 8"


def test_composition_refuses_what_cpp_gets_wrong():
    # C++'s weak divisibility check accepts (6,4):(1,10) o 4:2 and answers (3,2):(2,10): not A o B
    with pytest.raises(CuteError, match="weak divisibility"):
        cute.composition(Layout((6, 4), (1, 10)), Layout(4, 4))
    # and a negative stride stepping over a mode it does not divide
    with pytest.raises(CuteError, match="weak divisibility"):
        cute.composition(Layout((6, 4), (1, 10)), Layout(4, -4))
