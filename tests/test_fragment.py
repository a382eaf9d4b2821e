"""Fragment: index inference, threads, replication, repeat, equality, ownership, the canonical inverse."""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, strategies as st
from tvm import tirx

import tilelayout as tl
from tilelayout import Fragment, Layout, LayoutError, fully_replicated, layout_from_dict
from tilelayout.layout import rep_placeholder

from conftest import (affine_specs, apply_exprs, check_fragment_inverse_roundtrip, enumerated_injective, full,
                      grid)


def thread_ref(frag):
    """Thread table of ``frag`` from its own expression evaluated on numpy grids: (*shape, rep)."""
    coords = grid(list(frag.input_shape) + [frag.replicate_size])
    return apply_exprs([frag.forward_thread], frag.forward_vars + [rep_placeholder()], coords)[0]


def owner_pairs(frag):
    """{(flat element, thread)} of every replica, from numpy."""
    tab = thread_ref(frag).reshape(-1, frag.replicate_size)
    return {(int(e), int(t)) for e in range(tab.shape[0]) for t in tab[e]}


# ------------------------------------------------------------------ index inference (TileLang's goldens)

def test_index_inference_128x128():
    frag = Fragment([128, 128], lambda i, j: i % 8 * 16 + j // 8)
    assert [str(e) for e in frag.forward_index] == ["_i // 8 * 8 + _j % 8"]
    assert frag.output_shape == [128]
    assert frag.thread_extent == 128
    assert frag.is_bijective()


def test_index_inference_128x256():
    frag = Fragment([128, 256], lambda i, j: i % 4 * 64 + j // 4)
    assert [str(e) for e in frag.forward_index] == ["_i // 4 * 4 + _j % 4"]
    assert frag.output_shape == [128] and frag.thread_extent == 256


def test_index_inference_ignores_replica_and_partial_replication_golden():
    row_max = Fragment([128], lambda i, r: i % 4 * 64 + r, replicate=64)   # reduce_broadcast golden
    assert [str(e) for e in row_max.forward_index] == ["_i // 4"]
    assert row_max.output_shape == [32] and row_max.thread_extent == 256


def test_index_inference_non_power_of_two_tail():
    frag = Fragment([6, 24], lambda i, j: j // 8)        # thread uses the top digit of j only
    i, j = grid([6, 24])
    np.testing.assert_array_equal(frag.table()[..., 0], full(i * 8 + j % 8, (6, 24)))
    assert frag.is_bijective()


def test_explicit_index_is_kept():
    frag = Fragment([16, 16], lambda i, j: i, lambda i, j: [j, 0])
    assert frag.output_shape == [16, 1] and frag.output_dim == 2


# ------------------------------------------------------------------ threads

def test_thread_of_and_thread_table():
    frag = Fragment([8, 8], lambda i, j, r: r * 32 + i * 4 + j // 2, replicate=2)
    tab = frag.thread_table()
    assert tab.shape == (8, 8, 2) and not tab.flags.writeable
    np.testing.assert_array_equal(tab, thread_ref(frag))
    assert frag.thread_of(3, 5) == 14 and frag.thread_of(3, 5, rep=1) == 46
    assert frag.thread_of([3, 5], rep=1) == 46
    with pytest.raises(LayoutError, match=r"replica 2 out of range \[0, 2\)"):
        frag.thread_of(0, 0, rep=2)


def test_thread_extent_is_max_plus_one_and_independent_of_range():
    frag = Fragment([8], lambda i: i * 2 + 1, lambda i: 0)
    assert frag.thread_extent == 16
    assert frag.bind_thread_range(64, 16).thread_extent == 16


def test_bind_thread_range_copies():
    frag = Fragment([8], lambda i: i)
    bound = frag.bind_thread_range(32, 8)
    assert bound.thread_range == (32, 8) and frag.thread_range is None
    assert bound.forward_thread.same_as(frag.forward_thread)
    for bad in [(-1, 8), (0, 0), (0.5, 8), (0, "8")]:
        with pytest.raises(LayoutError):
            frag.bind_thread_range(*bad)


# ------------------------------------------------------------------ replication

def test_replicate_adds_thread_groups():
    frag = Fragment([16], lambda i, r: i % 4 + r * 4, replicate=2)        # threads [0, 8)
    rep = frag.replicate(3)
    assert rep.replicate_size == 6 and rep.thread_extent == 24
    base = thread_ref(frag)
    got = thread_ref(rep)
    for r in range(6):
        np.testing.assert_array_equal(got[..., r], base[..., r % 2] + 8 * (r // 2))
    assert frag.replicate(1) is frag
    with pytest.raises(LayoutError, match="replicate must be >= 1"):
        frag.replicate(0)


def test_dereplicate_trades_replicas_for_slots():
    frag = Fragment([16], lambda i, r: r, replicate=4)                    # 4 threads hold all 16
    de = frag.dereplicate()
    assert de.replicate_size == 1 and de.output_shape == [4] and de.thread_extent == 4
    assert de.is_bijective()
    i = np.arange(16)
    np.testing.assert_array_equal(thread_ref(de)[:, 0], i % 4)
    with pytest.raises(LayoutError, match="single slot output"):
        Fragment([4, 4], lambda i, j: i, lambda i, j: [j, 0]).dereplicate()


def test_condense_rep_var_drops_unused_replica_bits():
    frag = Fragment([16], lambda i, r: i % 4 + 4 * (r // 2), replicate=8)   # bit 0 of rep unused
    cond = frag.condense_rep_var()
    assert cond.replicate_size == 4
    assert owner_pairs(frag) == owner_pairs(cond) and cond.is_bijective()
    used = Fragment([16], lambda i, r: i % 4 + 4 * r, replicate=8)
    assert used.condense_rep_var().replicate_size == 8


def test_condense_rep_var_leaves_a_reversed_replica_alone():
    """``(31 - r) // 4`` splits into pieces with negative factors (fuzz 16000/53): condensing read them as digits
    and built a fragment of replicate -8. A replica map it cannot split into digits is kept as it is; the
    (element, thread) pairs are unchanged, by enumeration."""
    frag = Fragment([32], lambda i, r: (15 - i) % 16 * 8 + (31 - r) // 4, lambda i: [i], replicate=32)
    cond = frag.condense_rep_var()
    assert cond.replicate_size >= 1
    assert owner_pairs(frag) == owner_pairs(cond)


def test_fully_replicated():
    frag = fully_replicated([4, 8], 64)
    assert frag.replicate_size == 64 and frag.thread_extent == 64 and frag.thread_range == (0, 64)
    assert frag.is_fully_replicated and str(frag.forward_thread) == "_rep"
    assert frag.output_shape == [32] and [str(e) for e in frag.forward_index] == ["_i * 8 + _j"]
    assert owner_pairs(frag) == {(e, t) for e in range(32) for t in range(64)}
    assert not Fragment([4], lambda i: i).is_fully_replicated
    with pytest.raises(LayoutError, match="positive thread count"):
        fully_replicated([4], 0)


# ------------------------------------------------------------------ repeat

def test_repeat_on_threads():
    atom = Fragment([8, 8], lambda i, j: i * 4 + j // 2, lambda i, j: j % 2)
    rep = atom.repeat([2, 1], repeat_on_thread=True)
    assert rep.input_shape == [16, 8] and rep.thread_extent == 64 and rep.output_shape == [2]
    i, j = grid([16, 8])
    np.testing.assert_array_equal(thread_ref(rep)[..., 0], full((i % 8) * 4 + j // 2 + 32 * (i // 8), (16, 8)))


def test_repeat_on_slots_and_dim_order():
    atom = Fragment([8, 8], lambda i, j: i * 4 + j // 2, lambda i, j: j % 2)
    low = atom.repeat([2, 2], repeat_on_thread=False)                     # last dim fastest
    high = atom.repeat([2, 2], repeat_on_thread=False, lower_dim_first=False)
    i, j = grid([16, 16])
    np.testing.assert_array_equal(low.table()[..., 0], full(j % 2 + 2 * ((i // 8) * 2 + j // 8), (16, 16)))
    np.testing.assert_array_equal(high.table()[..., 0], full(j % 2 + 2 * ((j // 8) * 2 + i // 8), (16, 16)))
    assert low.thread_extent == 32 and low.is_bijective() and high.is_bijective()
    assert atom.repeat([1, 1]) is atom
    with pytest.raises(LayoutError, match="positive ints"):
        atom.repeat([2])
    with pytest.raises(LayoutError, match="single slot output"):
        Fragment([4, 4], lambda i, j: i, lambda i, j: [j, 0]).repeat([2, 1])


# ------------------------------------------------------------------ dtype views (reshape)

def test_fragment_reshape_narrow_and_widen_keep_threads():
    frag = Fragment([16, 16], lambda i, j: i * 2 + j // 8).bind_thread_range(0, 32)
    narrow = frag.reshape([16, 32], 32, 16)            # each 32-bit element becomes two 16-bit lanes
    i, j = grid([16, 32])
    np.testing.assert_array_equal(narrow.thread_table()[..., 0], full(i * 2 + (j // 2) // 8, (16, 32)))
    np.testing.assert_array_equal(narrow.table()[..., 0], full(((j // 2) % 8) * 2 + j % 2, (16, 32)))
    assert narrow.thread_range == (0, 32) and narrow.is_bijective()
    wide = frag.reshape([16, 8], 16, 32)               # pairs of 16-bit elements become one 32-bit element
    i, j = grid([16, 8])
    np.testing.assert_array_equal(wide.thread_table()[..., 0], full(i * 2 + (2 * j) // 8, (16, 8)))
    np.testing.assert_array_equal(wide.table()[..., 0], full((2 * j % 8) // 2, (16, 8)))
    assert wide.is_bijective()


def test_fragment_widen_fails_when_a_pair_spans_threads():
    frag = Fragment([16, 16], lambda i, j: j % 2 + 2 * (i % 8))       # neighbours live in different threads
    with pytest.raises(LayoutError, match="interleaves storage"):
        frag.reshape([16, 8], 16, 32)


# ------------------------------------------------------------------ equality and ownership

def test_is_equal_compares_threads_too():
    a = Fragment([16, 16], lambda i, j: i, lambda i, j: j)
    assert a.is_equal(Fragment([16, 16], lambda x, y: x % 16, lambda x, y: y))
    assert not a.is_equal(Fragment([16, 16], lambda i, j: 15 - i, lambda i, j: j))   # same slots, other threads
    assert not a.is_equal(a.replicate(2))
    assert a.is_equal(a.bind_thread_range(0, 16))                   # unbound matches any range
    assert not a.bind_thread_range(0, 16).is_equal(a.bind_thread_range(16, 16))
    assert not a.is_equal(Fragment([16, 8], lambda i, j: i, lambda i, j: j))          # shapes differ: not equal
    assert not a.is_equal(Layout([16, 16], lambda i, j: j))


def test_contains_is_ownership():
    rows = Fragment([16, 16], lambda i, j: i)                        # thread t holds row t
    assert fully_replicated([16, 16], 16).contains(rows)
    assert not rows.contains(fully_replicated([16, 16], 16))
    assert rows.contains(rows)
    cols = Fragment([16, 16], lambda i, j: j)
    assert not rows.contains(cols)
    assert "is held by thread" in rows.containment_error(cols)
    half = Fragment([16, 16], lambda i, j, r: i // 2 * 2 + r, replicate=2)   # pairs of rows in pairs of threads
    assert half.contains(rows) and not rows.contains(half)
    lanes = Fragment([32], lambda i: i)                              # thread ranges shift the owners
    assert not lanes.bind_thread_range(0, 32).contains(lanes.bind_thread_range(32, 32))
    assert lanes.bind_thread_range(32, 32).contains(lanes.bind_thread_range(32, 32))


def test_rebinding_after_a_containment_check_recomputes_the_holders():
    """A copy rebound to another thread range must not keep the holder table computed for the old range (it
    did: the copy shifted no owner, so two equal fragments on threads [32, 64) were said not to contain each
    other, and one on [32, 64) was said to contain one on [0, 32))."""
    lanes = Fragment([64], lambda i: i % 32, lambda i: i // 32)
    fresh = lanes.bind_thread_range(32, 32)
    assert lanes.contains(lanes)                        # computes (and caches) lanes' holders on [0, 32)
    lanes.holder_table()
    moved = lanes.bind_thread_range(32, 32)
    np.testing.assert_array_equal(moved.holder_table(), fresh.holder_table())
    assert int(moved.holder_table().min()) == 32
    assert moved.contains(fresh) and fresh.contains(moved)
    assert not moved.contains(lanes.bind_thread_range(0, 32))


# ------------------------------------------------------------------ canonical inverse

def test_inverse_puts_rep_last():
    frag = Fragment([8, 8], lambda i, j, r: r * 32 + i * 4 + j // 2, lambda i, j: j % 2, replicate=2)
    inv = frag.inverse()
    assert inv.input_shape == [2, 64]                   # (slot, thread)
    assert inv.output_shape == [8, 8, 2]                # (coords..., rep)
    assert inv.map(1, 45) == [3, 3, 1]                  # thread 45 = rep 1, row 3, col 2|3; slot 1 -> col 3
    check_fragment_inverse_roundtrip(frag)


def test_inverse_of_unreplicated_fragment_has_trivial_rep_output():
    frag = Fragment([128, 128], lambda i, j: i % 8 * 16 + j // 8)
    inv = frag.inverse()
    assert inv.input_shape == [128, 128] and inv.output_shape == [128, 128, 1]
    check_fragment_inverse_roundtrip(frag)


def test_inverse_of_broken_fragment_names_collision():
    frag = Fragment([8], lambda i: i // 2, lambda i: 0)             # two elements share (thread, slot)
    with pytest.raises(LayoutError, match="not injective: logical coordinates"):
        frag.inverse()
    assert not frag.is_injective() and not frag.is_bijective()


# ------------------------------------------------------------------ printing and serialisation

def test_repr_and_to_dict():
    frag = Fragment([16, 16], lambda i, j: i % 8 * 4 + j // 4).bind_thread_range(0, 32)
    assert repr(frag) == ("Fragment([16, 16] -> [8], replicate: 1, thread: 32, forward_thread: _i % 8 * 4 + _j // 4, "
                          "forward_index: [_i // 8 * 4 + _j % 4], thread_range: (0, 32))")
    d = frag.to_dict()
    assert d == {"kind": "Fragment", "input_shape": [16, 16], "output_shape": [8],
                 "forward_index": ["_i // 8 * 4 + _j % 4"], "replicate": 1, "threads": 32,
                 "forward_thread": "_i % 8 * 4 + _j // 4", "thread_range": [0, 32]}
    back = layout_from_dict(d)
    assert isinstance(back, Fragment) and back.is_equal(frag) and back.thread_range == (0, 32)


def test_golden_dict_from_tilelang_parses():
    golden = {"forward_index": ["_i // 8 * 8 + _j % 8"], "forward_thread": "_i % 8 * 16 + _j // 8",
              "input_shape": [128, 128], "kind": "Fragment", "output_shape": [128], "replicate": 1,
              "thread_range": [0, 128], "threads": 128}
    frag = layout_from_dict(golden)
    assert frag.to_dict() == golden
    assert frag.is_equal(Fragment([128, 128], lambda i, j: i % 8 * 16 + j // 8).bind_thread_range(0, 128))


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("build, match", [
    (lambda: Fragment([4], lambda i: i, replicate=0), "replicate must be >= 1"),
    (lambda: Fragment([4], lambda i: i, replicate=2.0), "replicate must be a positive int"),
    (lambda: Fragment([4, 4], lambda i: i), r"fragment over \[4, 4\].*forward_thread_fn must take 2"),
    (lambda: Fragment([4], lambda i: i, replicate=2), r"forward_thread_fn must take 2 arguments \(_i, _rep\)"),
    (lambda: Fragment([4], lambda i, r: r, lambda i: i + rep_placeholder(), replicate=2), "depends on the replica"),
    (lambda: Fragment([4], 3), "callable"),
    (lambda: Fragment([4], lambda i: i, lambda i, j: i), "forward_index_fn must take 1"),
    (lambda: Fragment([-4], lambda i: i), "extent must be positive"),
])
def test_bad_fragment_input(build, match):
    with pytest.raises(LayoutError, match=match):
        build()


def test_symbolic_fragment_needs_no_enumeration_for_index_inference():
    n = tirx.Var("n", "int32")
    frag = Fragment([n, 32], lambda i, j: j)
    assert [str(e) for e in frag.forward_index] == ["_i"]
    with pytest.raises(tl.EvaluationError, match="symbolic"):
        frag.thread_table()


# ------------------------------------------------------------------ properties over random affine fragments

@given(affine_specs())
def test_property_inverse_after_forward_is_identity(spec):
    frag = spec.fragment()
    assert frag.is_bijective()
    check_fragment_inverse_roundtrip(frag)


@given(affine_specs())
def test_property_tables_match_reference(spec):
    frag = spec.fragment()
    slots, thread = spec.reference()
    np.testing.assert_array_equal(frag.thread_table(), thread)
    for k, ref in enumerate(slots):
        np.testing.assert_array_equal(frag.table()[..., k], ref[..., 0])
    assert frag.thread_extent == int(thread.max()) + 1


@given(st.booleans().flatmap(lambda drop: affine_specs(drop_digit=drop)))
def test_property_is_injective_agrees_with_enumeration(spec):
    slots, thread = spec.reference()
    assert spec.fragment().is_injective() == enumerated_injective(slots + [thread])


@given(affine_specs())
def test_property_inferred_index_gives_a_valid_fragment(spec):
    frag = spec.fragment()
    inferred = Fragment.from_exprs(frag.input_shape, frag.forward_thread, None, frag.replicate_size)
    assert inferred.is_bijective()
    assert inferred.thread_extent == frag.thread_extent
    np.testing.assert_array_equal(inferred.thread_table(), frag.thread_table())


@given(affine_specs())
def test_property_to_dict_round_trips(spec):
    frag = spec.fragment().bind_thread_range(0, spec.fragment().thread_extent)
    back = layout_from_dict(frag.to_dict())
    assert back.is_equal(frag) and back.to_dict() == frag.to_dict()


@given(affine_specs(), affine_specs())
def test_property_is_equal_is_an_equivalence(s1, s2):
    a, a_alt = s1.fragment(), replace(s1, alt_form=True).fragment()
    a_rt = layout_from_dict(a_alt.to_dict())
    b = s2.fragment()
    assert a.is_equal(a) and a.is_equal(a_alt) and a_alt.is_equal(a) and a_alt.is_equal(a_rt) and a.is_equal(a_rt)
    assert a.is_equal(b) == b.is_equal(a)
    same = (a.input_shape == b.input_shape and a.replicate_size == b.replicate_size
            and a.output_shape == b.output_shape and np.array_equal(a.table(), b.table())
            and np.array_equal(a.thread_table(), b.thread_table()))
    assert a.is_equal(b) == same


@given(affine_specs())
def test_property_replicate_then_condense_keeps_ownership(spec):
    frag = spec.fragment()
    doubled = frag.replicate(2)
    assert doubled.is_bijective()
    check_fragment_inverse_roundtrip(doubled)
    assert doubled.condense_rep_var().replicate_size == doubled.replicate_size  # every replica bit is used


def test_condense_keeps_replicas_of_a_thread_map_tvm_cannot_split():
    # (i * 640 + rep) % 256 is not an iterator sum TVM can split; condensing must not drop the replica
    from tilelayout.layout import placeholder, rep_placeholder
    frag = Fragment.from_exprs([2], (placeholder(0) * 640 + rep_placeholder()) % 256, [placeholder(0)], 256)
    condensed = frag.condense_rep_var()
    assert condensed.replicate_size == 256
    assert np.array_equal(condensed.thread_table(), frag.thread_table())


def test_containment_of_everyone_agrees_with_holder_sets():
    """``contains(everyone)`` answers without tabulating everyone's holders when this fragment has fewer replicas;
    the first failing element and thread are the ones the holder sets give."""
    frags = [Fragment([16, 8], lambda i, j: i), Fragment([16, 8], lambda i, j, r: i // 2 * 2 + r, replicate=2),
             Fragment([32], lambda i, r: (i + 5 * r) % 32, replicate=4), Fragment([4, 4], lambda i, j: 3)]
    for frag in frags:
        mine = np.asarray(frag.thread_table()).reshape(frag.size, -1)
        for threads, lo in ((16, 0), (32, 0), (8, 4), (64, 0)):
            everyone = fully_replicated(frag.input_shape, threads).bind_thread_range(lo, threads)
            first = next(((e, t) for e in range(frag.size) for t in range(lo, lo + threads)
                          if t not in set(mine[e].tolist())), None)
            err = frag.containment_error(everyone)
            assert (err is None) == (first is None) == frag.contains(everyone)
            if first is not None:
                coord = [int(x) for x in np.unravel_index(first[0], tuple(frag.input_shape))]
                assert err.startswith(f"element {coord} is held by thread {first[1]} ")


@pytest.mark.parametrize("bitmap_cells", [1 << 22, 0], ids=["bitmaps", "sorted-rows"])
def test_same_holders_is_containment_both_ways(monkeypatch, bitmap_cells):
    """``same_holders`` (holder bitmaps, or one pass over sorted holder rows; duplicates ignored either way)
    answers as two containments do, also between thread ranges that start elsewhere."""
    from tilelayout import fragment as fragment_module
    monkeypatch.setattr(fragment_module, "_BITMAP_CELLS", bitmap_cells)
    frags = [Fragment([16, 8], lambda i, j: i), Fragment([16, 8], lambda i, j: i, replicate=1),
             Fragment([16, 8], lambda i, j, r: i // 2 * 2 + r, replicate=2),
             Fragment([16, 8], lambda i, j, r: i // 2 * 2 + r % 2, replicate=4),      # each holder twice
             Fragment([16, 8], lambda i, j, r: (i // 2 * 2 + r * 3) % 16, replicate=2),
             fully_replicated([16, 8], 16), Fragment([16, 8], lambda i, j, r: r, replicate=16),
             Fragment([16, 8], lambda i, j, r: r // 2, replicate=32), Fragment([8, 16], lambda i, j: i),
             Fragment([16, 8], lambda i, j, r: (r % 64) // 4, replicate=128),                # many repeats
             Fragment([16, 8], lambda i, j: i).bind_thread_range(16, 32),
             Fragment([16, 8], lambda i, j: i).bind_thread_range(0, 32)]
    pairs = 0
    for a in frags:
        for b in frags:
            assert a.same_holders(b) == (a.contains(b) and b.contains(a)), (a, b)
            pairs += 1
    assert pairs == 144
