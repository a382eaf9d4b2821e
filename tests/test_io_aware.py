"""The io-aware cost model: TileLang's worked numbers, CuTe scorer == numpy oracle, worst-case charging,
and the local-memory spill term (which TileLang documents but does not model).

Every statement score the model reports is re-derived here by plain enumeration (maint/oracle.py) and
through the standalone CuTe view (maint/cute_model.py); the spill term is checked against an exact
enumeration of which register slot each (thread, loop slot) cell reads.
"""
from __future__ import annotations

import importlib
import inspect
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernels_inference as K  # noqa: E402
import tilelayout as tl  # noqa: E402
from conftest import affine_specs  # noqa: E402
from maint import cute_model, oracle  # noqa: E402
from maint.oracle import OracleScore, Unenumerable, score_statement_oracle  # noqa: E402
from tilelayout import Fragment, layout_from_dict  # noqa: E402
from tilelayout.passes.inference.cost_models.io_aware import component_statements, score_statement  # noqa: E402
from tilelayout.passes.hardware import normalize_target  # noqa: E402
from tilelayout.passes.inference.loop_nest import nest_of  # noqa: E402

IO, RC = "io-aware", "register-count"


def _case(name):
    return importlib.import_module(f"cases.{name}")


_BUILDERS = {
    "issue1729": lambda: _case("broadcast_read").VARIANTS["issue1729_2x2560_t256"](),
    "transposed": lambda: _case("transposed_store").VARIANTS["fp32_128x128_t128"](),
    "mixed": lambda: _case("mixed_dtype_chain").VARIANTS["128x128_t128"](),
    "row_scale": lambda: K.row_scale(64, 128, 128),
    "chain": lambda: K.chain(64, 128, 128),
    "row_max": lambda: K.row_max_then_subtract(64, 128, 128),
    "const_pair": lambda: K.const_pair(64, 128, 128),
    "register_spill": lambda: K.register_spill(64, 128, 128),
    "column_broadcast": lambda: K.column_broadcast(64, 128, 128),
    "nest_3d": lambda: K.nest_3d(128),
    "int4": lambda: K.copy_roundtrip(64, 64, "int4", 128),
    "gather1": lambda: K.gather_load(True),
    "gather2": lambda: K.gather_load(False),
    "partial_copy": K.partial_copy,
    "repeated": lambda: K.repeated_copy(4),
    "ragged": lambda: K.ragged(229, 128),
    "replicated_int4": lambda: K.small_roundtrip(8, 256, "int4"),
}


@pytest.fixture(scope="module")
def infer():
    """infer(kernel name, model) -> InferenceResult, each kernel built and inferred once per module."""
    funcs, results = {}, {}

    def get(name, model=IO):
        if (name, model) not in results:
            if name not in funcs:
                funcs[name] = _BUILDERS[name]()
            results[name, model] = tl.infer_layouts(funcs[name], cost_model=model)
        return results[name, model]
    return get


def _attempt(result, root):
    (a,) = [a for a in result.attempts if a.root == root]
    return a


def _numbers(score) -> tuple:
    return (score.vector, score.issue, score.bandwidth, score.segments)


def _traffic(cost) -> int:
    return sum(max(s.issue, s.bandwidth) for s in cost.scores)


# --------------------------------------------------------------------------- TileLang's worked numbers

def test_issue1729_copy_first_attempt_costs_what_tilelang_computes(infer):
    a = _attempt(infer("issue1729"), 0)
    assert (a.mem, a.regs, a.chosen) == (2_625_536, 1, False)
    copy, loop = a.details
    assert [_numbers(s) for s in copy.scores] == [(1, 4096, 1024, 8)]
    assert [_numbers(s) for s in loop.scores] == [(4, 2_621_440, 163_840, 1280)]
    assert copy.cost == 4096 and loop.cost == 2_621_440 and not copy.note and not loop.note


def test_issue1729_loop_first_attempt_statement_traffic_and_spill_separately(infer):
    a = _attempt(infer("issue1729"), 1)
    assert (a.regs, a.chosen) == (2, True)
    copy, loop = a.details
    assert [_numbers(s) for s in copy.scores] == [(2, 4096, 1024, 8)]
    assert [_numbers(s) for s in loop.scores] == [(4, 20_480, 20_480, 160)]
    traffic = _traffic(copy) + _traffic(loop)
    assert traffic == 24_576 == 4096 + 20_480                     # TileLang's number
    spill = a.mem - traffic
    # s_frag[i] after partitioning: i depends on the thread -> local memory; 256 threads x 20 slots x 4 B
    assert spill == 20_480 == 256 * 20 * 4 and loop.note == "spill 20480" and copy.cost == 4096
    assert a.mem == 45_056


def test_issue1729_models_choose_differently_and_io_aware_matches_tilelang(infer):
    io, rc = infer("issue1729", IO), infer("issue1729", RC)
    assert [a.chosen for a in rc.attempts] == [True, False]
    assert [(a.mem, a.regs) for a in rc.attempts] == [(0, 1), (0, 2)]
    assert io.buffers["s_frag"].is_equal(tl.fully_replicated([2], 256))
    loop = io.loops["i,j[2x2560]"]
    want = Fragment([2, 2560], lambda i, j: (i * 640 + j // 4) % 256,
                    lambda i, j: (i * 640 + j // 4) // 256 * 4 + j % 4).bind_thread_range(0, 256)
    assert loop.is_equal(want)
    assert rc.buffers["s_frag"].replicate_size == 128


def test_transposed_store_numbers_and_choice(infer):
    r = infer("transposed")
    assert [(a.mem, a.regs, a.chosen) for a in r.attempts] == [(2_162_688, 128, False), (786_432, 128, True)]
    a0, a1 = r.attempts
    assert [_numbers(c.scores[0])[:3] for c in a0.details] == [(4, 65_536, 65_536), (1, 262_144, 2_097_152)]
    assert [_numbers(c.scores[0])[:3] for c in a1.details] == [(1, 262_144, 65_536), (4, 65_536, 524_288)]
    want = Fragment([128, 128], lambda i, j: j, lambda i, j: i).bind_thread_range(0, 128)
    assert r.buffers["frag"].is_equal(want) and r.loops["i,j[128x128]"].is_equal(want)


def test_mixed_dtype_numbers_and_tie_to_the_earliest_root(infer):
    r = infer("mixed")
    assert [(a.mem, a.regs) for a in r.attempts] == [(163_840, 256), (131_072, 256), (131_072, 256)]
    assert [a.chosen for a in r.attempts] == [False, True, False]         # tie between roots 1 and 2
    a0, a1, _ = r.attempts
    assert [_numbers(c.scores[0])[:3] for c in a0.details] == [(8, 32_768, 32_768), (4, 65_536, 131_072)]
    assert [_numbers(c.scores[0])[:3] for c in a1.details] == [(4, 65_536, 32_768), (4, 65_536, 65_536)]
    want = Fragment([128, 128], lambda i, j: i % 4 * 32 + j // 4, lambda i, j: i // 4 * 4 + j % 4)
    assert r.buffers["x16"].is_equal(want.bind_thread_range(0, 128))


# --------------------------------------------------------------------------- oracle == CuTe scorer

def _same(a, b) -> bool:
    refused_a, refused_b = isinstance(a, Unenumerable), isinstance(b, cute_model.Unconvertible)
    if refused_a or refused_b:
        return refused_a and refused_b
    return _numbers(a) == b.numbers


def _golden_fragments():
    """Every distinct Fragment TileLang produced for every case (maint/peer), with the enclosing global
    shape from the case's CUTE_STATEMENTS or the fragment's own shape."""
    from maint.peer.compare import load_peer_output
    seen, out = set(), []
    for model, results in sorted(load_peer_output().items()):
        for name, got in sorted(results.items()):
            case, variant = name.split("/")
            shapes = getattr(_case(case), "CUTE_STATEMENTS", {}).get(variant, {})
            for section in ("buffers", "loops"):
                for key, d in sorted(got.get(section, {}).items()):
                    if d.get("kind") != "Fragment":
                        continue
                    gshape = list(shapes.get(key, d["input_shape"]))
                    tag = json.dumps([d, gshape], sort_keys=True)
                    if tag not in seen:
                        seen.add(tag)
                        out.append((f"{name}/{key}", d, gshape))
    return out


GOLDEN = _golden_fragments()


def test_golden_fragments_are_many_and_include_offset_tiles():
    assert len(GOLDEN) >= 20
    assert any(g != d["input_shape"] for _, d, g in GOLDEN)


@pytest.mark.parametrize("label,d,gshape", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_oracle_equals_cute_on_golden_fragments_as_load_and_store(label, d, gshape):
    frag = layout_from_dict(d)
    for elem_bytes in (1, 2, 4):
        for store in (False, True):
            o = score_statement_oracle(frag, gshape, elem_bytes, store)
            c = cute_model.score_fragment(frag, gshape, elem_bytes, store)
            assert isinstance(o, OracleScore), f"{label}: golden fragment not enumerable: {o}"
            assert not isinstance(c, cute_model.Unconvertible), f"{label}: CuTe conversion missed: {c}"
            assert _same(o, c), f"{label} eb={elem_bytes} store={store}: oracle {o} vs cute {c}"


def _spec_case(spec, data):
    frag = spec.fragment()
    pad = data.draw(st.sampled_from([1, 2, 3]))
    gshape = list(spec.shape[:-1]) + [spec.shape[-1] * pad]
    strides = oracle.row_major_strides(gshape)
    base = data.draw(st.sampled_from([0, 4, 6, 64]))
    return frag, strides, base


@given(spec=affine_specs(max_points=1024), data=st.data())
def test_oracle_equals_cute_on_random_affine_fragments(spec, data):
    frag, strides, base = _spec_case(spec, data)
    eb = data.draw(st.sampled_from([1, 2, 4, 8]))
    store = data.draw(st.booleans())
    arch = data.draw(st.sampled_from(["sm_90", "sm_100"]))
    target = {"kind": "cuda", "arch": arch}
    o = score_statement_oracle(frag, None, eb, store, vector_bits=256 if arch == "sm_100" else 128,
                               strides=strides, base=base)
    c = cute_model.score_fragment(frag, None, eb, store, target=target, strides=strides, base=base)
    assert isinstance(o, OracleScore), o             # routing every digit once is a bijection
    assert not isinstance(c, cute_model.Unconvertible), c
    assert _same(o, c), (spec, strides, base, eb, store, arch, o, c)


@given(spec=affine_specs(max_points=512, drop_digit=True), data=st.data())
def test_oracle_and_cute_both_refuse_non_bijective_fragments(spec, data):
    frag, strides, base = _spec_case(spec, data)
    o = score_statement_oracle(frag, None, 4, False, strides=strides, base=base)
    c = cute_model.score_fragment(frag, None, 4, False, strides=strides, base=base)
    if int(np.prod(spec.shape)) * spec.replicate > 1:          # a digit was dropped: two points collide
        assert isinstance(o, Unenumerable), (spec, o)
    assert _same(o, c), (spec, o, c)


def test_warp_size_64_is_honoured_by_both():
    frag = tl.fully_replicated([64], 128)      # every warp reads the same 16 bytes per step
    rocm = normalize_target({"kind": "rocm", "mcpu": "gfx90a"})
    o = score_statement_oracle(frag, [64], 4, False, warp_size=64)
    c = cute_model.score_fragment(frag, [64], 4, False, target=rocm)
    assert _same(o, c) and o.segments == 16 * 2
    assert score_statement_oracle(frag, [64], 4, False).segments == 16 * 4


def test_oracle_hand_numbers():
    # fp32 64x256 over 256 threads, 4-wide: 16 steps x 8 warps x (32 lanes x 16 B = 4 segments)
    frag = Fragment([64, 256], lambda i, j: i % 4 * 64 + j // 4, lambda i, j: i // 4 * 4 + j % 4)
    assert score_statement_oracle(frag, [64, 256], 4, False) == OracleScore(4, 16 * 256 * 16, 512 * 128, 512)
    # the #1729 copy-first s_frag: one slot, 128 replicas; a store only counts replica-0 lanes (threads 0, 1)
    s = Fragment([2], lambda i, r: r * 2 + i, lambda i: 0 * i, replicate=128)
    assert score_statement_oracle(s, [2], 4, False) == OracleScore(1, 4096, 1024, 8)
    assert score_statement_oracle(s, [2], 4, True) == OracleScore(1, 4096, 128, 1)
    # misaligned base: 4-wide vectors would straddle, so scalar
    assert score_statement_oracle(frag, [64, 256], 4, False, base=2).vector == 2
    assert score_statement_oracle(frag, [64, 256], 4, False, base=1).vector == 1
    # not a bijection: 229 points on 128 x 2 cells
    ragged = Fragment([229], lambda j: j % 128, lambda j: j // 128)
    assert isinstance(score_statement_oracle(ragged, [229], 4, False), Unenumerable)


def test_oracle_uses_no_cute_code():
    import ast
    imported = set()
    for node in ast.walk(ast.parse(inspect.getsource(oracle))):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {node.module or ""} | {f"{node.module}.{a.name}" for a in node.names}
    assert not [m for m in imported if "cute" in m or "statement_score" in m or "cost_models" in m], imported


# --------------------------------------------------------------------------- passes model == cute_model == oracle

@pytest.mark.parametrize("name", ["issue1729", "transposed", "mixed", "row_scale", "chain", "row_max",
                                  "const_pair", "repeated"])
def test_model_statements_agree_with_cute_model_and_oracle(infer, name):
    r = infer(name)
    target = normalize_target(None)
    index = {op.describe(): op.index for op in r.graph.ops}
    checked = 0
    for a in r.attempts:
        if a.error is not None:
            continue
        ops = [op for op in r.graph.ops if any(op.describe() == c.statement for c in a.details)]
        loops = {index[k]: v for k, v in a.loops.items()}
        statements = component_statements(ops, a.layouts, loops, r.graph)
        assert [st.description for st in statements] == [c.statement for c in a.details]
        for st_, cost in zip(statements, a.details):
            assert score_statement(st_, target) == cost
            for acc, score in zip(st_.accesses, cost.scores):
                c = cute_model.score_fragment(st_.frag, None, acc.elem_bytes, acc.is_store, strides=acc.strides,
                                              base=acc.base)
                o = score_statement_oracle(st_.frag, None, acc.elem_bytes, acc.is_store, strides=acc.strides,
                                           base=acc.base)
                rep = st_.repeat
                scaled = (score.vector, score.issue // rep, score.bandwidth // rep, score.segments)
                assert scaled == c.numbers == _numbers(o), (name, cost.statement, score, c, o)
                checked += 1
    assert checked >= 2


def test_serial_repeat_multiplies_issue_and_bandwidth(infer):
    r = infer("repeated")
    for cost in r.attempts[0].details:
        (score,) = cost.scores
        assert not cost.note and score.issue == 4 * 8 * 128 * 16 and cost.cost == 4 * 16_384


# --------------------------------------------------------------------------- worst case for unscorable statements

@pytest.mark.parametrize("name,expected,reason", [
    ("int4", [64 * 64 * 128, 64 * 64 * 128], "sub-byte"),
    ("gather1", [64 * 64 * 128, None], "non-affine"),
    ("gather2", [None, 2 * 64 * 64 * 128], "non-affine"),          # both global accesses are charged
    ("partial_copy", [32 * 64 * 128, None], "does not cover"),
    ("ragged", [229 * 128, 229 * 128], "worst case"),
    ("replicated_int4", [8 * 32 * 128, 8 * 32 * 128], "sub-byte"),      # every replica's access counts
])
def test_unscorable_statements_are_charged_the_worst_case(infer, name, expected, reason):
    r = infer(name)
    ok = [a for a in r.attempts if a.error is None]
    assert ok
    for a in ok:
        assert len(a.details) == len(expected)
        for cost, want in zip(a.details, expected):
            if want is None:
                assert cost.scores and not cost.note.startswith("worst case")
            else:
                assert cost.cost == want and cost.scores == () and cost.note.startswith("worst case"), cost
                assert reason in cost.note


@pytest.mark.parametrize("name", ["issue1729", "transposed", "mixed", "row_scale", "gather1", "partial_copy"])
def test_worst_case_bounds_every_scored_statement(infer, name):
    """Opacity never pays: a scored statement never costs more than its worst-case charge."""
    r = infer(name)
    index = {op.describe(): op.index for op in r.graph.ops}
    for a in r.attempts:
        for cost in a.details:
            if cost.scores:
                op = r.graph.ops[index[cost.statement]]
                nest = nest_of(op)
                n_global = sum(1 for acc in nest.accesses if acc.buffer.is_global)
                frag = a.loops.get(cost.statement) or a.layouts[nest.fragment_accesses()[0].buffer.name]
                bound = n_global * nest.size * frag.replicate_size * op.serial_repeat * 128
                assert _traffic(cost) <= bound, (name, cost)


# --------------------------------------------------------------------------- spill term

def _dynamic_slot(nest, loop, access, frag) -> bool:
    """Exact: for some loop slot, the fragment slot read differs between the threads running it."""
    th = np.asarray(loop.thread_table(), dtype=np.int64).reshape(-1, loop.replicate_size)
    ls = np.asarray(loop.table(), dtype=np.int64).reshape(th.shape[0], -1)
    lslot = np.ravel_multi_index(tuple(ls.T), tuple(int(e) for e in loop.output_shape))
    fs_parts = np.asarray(frag.table(), dtype=np.int64).reshape(-1, len(frag.output_shape))
    fslot = np.ravel_multi_index(tuple(fs_parts.T), tuple(int(e) for e in frag.output_shape))
    read = fslot[K.access_elements(nest, access)]
    pairs = np.unique(np.stack([lslot, read], axis=1), axis=0)
    return bool((np.bincount(pairs[:, 0]) > 1).any())


@pytest.mark.parametrize("name", ["row_scale", "issue1729", "register_spill", "column_broadcast", "nest_3d",
                                  "transposed", "chain", "row_max", "const_pair"])
def test_spill_is_charged_exactly_when_a_slot_depends_on_the_thread(infer, name):
    """Per parallel nest of every attempt: charged spill == cells x max(elem bytes, 128 / 32) per fragment
    access whose slot, by enumeration, varies between the threads running one loop slot; 0 otherwise
    (register-only loops included)."""
    r = infer(name)
    seen = set()
    for a in r.attempts:
        if a.error is not None:
            continue
        costs = {c.statement: c for c in a.details}
        for desc, loop in a.loops.items():
            op = next(op for op in r.graph.ops if op.describe() == desc)
            if op.kind != "parallel":
                continue
            nest = nest_of(op)
            spilled = [acc for acc in nest.fragment_accesses() if not acc.is_constant
                       and _dynamic_slot(nest, loop, acc, a.layouts[acc.buffer.name])]
            cells = loop.thread_extent * int(np.prod(loop.output_shape))
            expected = sum(cells * max(acc.buffer.bits // 8, 4) for acc in spilled) * op.serial_repeat
            cost = costs.get(desc)
            charged = 0 if cost is None else cost.cost - _traffic(cost)
            assert charged == expected, (name, a.root, desc, cost)
            assert cost is None or ("spill" in cost.note) == bool(expected)
            seen.add(bool(expected))
        for c in a.details:
            if not c.statement.startswith("parallel"):
                assert "spill" not in c.note
    want = {"issue1729": {True, False}, "register_spill": {True}}.get(name, {False})
    assert seen == want


@pytest.mark.parametrize("name", ["issue1729", "register_spill", "column_broadcast", "row_scale"])
def test_dynamic_slots_are_exact_for_every_loop_and_fragment_layout_pairing(infer, name):
    """``dynamic_slot_accesses`` is memoised per (nest, loop, touched fragments' layouts): every attempt's loop
    paired with every attempt's fragment layouts, asked in one process, gives the exact answer for that pair
    (a memo keyed on the loop alone would hand one pairing's answer to another)."""
    from tilelayout.passes.inference.fragment_rules import dynamic_slot_accesses
    r = infer(name)
    ok = [a for a in r.attempts if a.error is None]
    pairs = 0
    for op in r.graph.ops:
        if op.kind != "parallel":
            continue
        nest = nest_of(op)
        for loop_from in ok:
            loop = loop_from.loops.get(op.describe())
            if loop is None:
                continue
            for layouts_from in ok:
                layouts = layouts_from.layouts
                if any(acc.buffer.name not in layouts for acc in nest.fragment_accesses()):
                    continue
                got = {id(acc) for acc in dynamic_slot_accesses(nest, loop, layouts)}
                want = {id(acc) for acc in nest.fragment_accesses() if not acc.is_constant
                        and _dynamic_slot(nest, loop, acc, layouts[acc.buffer.name])}
                assert got == want, (name, loop_from.root, layouts_from.root)
                pairs += 1
    assert pairs >= 1


def test_register_only_loop_spill_is_charged(infer):
    r = infer("register_spill")
    chosen = next(a for a in r.attempts if a.chosen)
    loop = next(c for c in chosen.details if c.statement.startswith("parallel"))
    assert loop.scores == () and loop.cost == 2 * 128 * 64 * 4 and loop.note == f"spill {2 * 128 * 64 * 4}"
    assert r.buffers["r"].is_fully_replicated


def test_broadcast_reads_keep_partial_replication_and_do_not_spill(infer):
    """r[i] (row_scale) and c[j] (column_broadcast) are held by exactly the threads that read them, so the
    coalesced loop-first attempt neither spills nor pays for full replication; it wins under io-aware."""
    r = infer("row_scale")
    a0, a1 = r.attempts
    assert a1.chosen and a1.mem == 32_768 + 65_536 < a0.mem and a1.regs == 16
    assert all("spill" not in c.note for a in r.attempts for c in a.details)
    want = tl.Fragment([64], lambda i, rep: i % 4 * 32 + rep, lambda i: i // 4, replicate=32)
    assert r.buffers["r"].is_equal(want.bind_thread_range(0, 128))
    c = infer("column_broadcast").buffers["c"]
    assert c.replicate_size == 4 and int(np.prod(c.output_shape)) == 4


def test_3d_nest_writing_its_own_coordinates_is_not_charged_a_spill(infer):
    r = infer("nest_3d")
    assert all(c.note == "" for a in r.attempts for c in a.details)
    assert [a.mem for a in r.attempts] == [8192, 8192]


def test_flat_packed_table_is_the_packed_fragment_over_its_flattened_domain():
    import numpy as np
    from tilelayout import Fragment
    from tilelayout.cute import pack_fragment
    from tilelayout.passes.inference.cost_models.statement_score import flat_packed_table
    frag = Fragment([2, 2560], lambda i, j, r: r * 2 + i, lambda i, j: [j], replicate=128)
    packed = np.asarray(pack_fragment(frag).table())          # (2, 2560, 128, [thread, slot])
    expected = (packed[..., 0] * 2560 + packed[..., 1]).reshape(-1)
    assert np.array_equal(flat_packed_table(frag), expected)
