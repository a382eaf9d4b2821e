"""Layouts on TIR buffers and loops: print -> parse round trips, pinned layouts, default layouts, errors."""
import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx

import kernels_annotate as K
import tilelayout as tl
from tilelayout.annotate import (LAYOUTS_ATTR, LOOP_LAYOUT_KEY, LOOP_PREDICATE_KEY, PADDING_GUARD_KEY,
                                 annotate_layouts, annotate_loop, annotate_loops, decode_layout, encode_layout,
                                 function_buffers, get_pinned_layouts, parallel_nests, read_layout_annotations)
from tilelayout.fragment import Fragment
from tilelayout.layout import Layout
from tilelayout.tile_layout_interop import from_tile_layout

FRAG = Fragment([128, 128], lambda i, j: i % 8 * 16 + j // 8)
ROWS = Fragment([128], lambda i: i)
REPL = tl.fully_replicated([128], 128)
SWZ = Layout([128, 128], lambda i, j: i * 128 + (j ^ ((i % 8) * 8)))


def _reparse(func):
    text = func.script()
    back = tvm.script.from_source(text)
    assert tvm_ffi.structural_equal(back, func)
    return text, back


def _same(a, b):
    return type(a) is type(b) and a.is_equal(b) and (
        not isinstance(a, Fragment) or a.thread_range == b.thread_range)


# --------------------------------------------------------------------------- buffers

def test_buffer_layouts_round_trip_through_script():
    f = annotate_layouts(K.two_nests, {"frag": FRAG, "acc": REPL})
    text, back = _reparse(f)
    assert LAYOUTS_ATTR in text and "_i % 8 * 16 + _j // 8" in text
    layouts, loops = read_layout_annotations(back)
    assert sorted(layouts) == ["acc", "frag"] and loops == {}
    assert _same(layouts["frag"], FRAG) and _same(layouts["acc"], REPL)
    assert layouts["acc"].thread_range == (0, 128) and layouts["acc"].replicate_size == 128


def test_keyed_by_buffer_and_merged():
    frag_buf = next(b for b in function_buffers(K.two_nests) if b.name == "frag")
    f = annotate_layouts(K.two_nests, {frag_buf: FRAG})
    f = annotate_layouts(f, {"acc": ROWS, "A": SWZ})
    layouts, _ = read_layout_annotations(_reparse(f)[1])
    assert sorted(layouts) == ["A", "acc", "frag"]
    assert _same(layouts["A"], SWZ) and _same(layouts["acc"], ROWS)
    f = annotate_layouts(f, {"acc": REPL})  # a later annotation replaces the earlier one
    assert _same(read_layout_annotations(f)[0]["acc"], REPL)


def test_tile_layout_value_is_converted():
    f = annotate_layouts(K.pinned, {"A": K.SEED_FRAG})
    got = read_layout_annotations(_reparse(f)[1])[0]["A"]
    want = from_tile_layout(K.SEED_FRAG, [8, 16])
    assert _same(got, want) and got.thread_range == (160, 192)


def test_encode_decode_plain_and_ffi():
    for lay in (FRAG, REPL, SWZ, FRAG.bind_thread_range(32, 128), Fragment([8, 8], lambda i, j, r: r * 8 + i, replicate=2)):
        enc = encode_layout(lay)
        assert _same(decode_layout(enc), lay)
        assert _same(decode_layout(tvm_ffi.Map(enc)), lay)  # what TVM hands back from attributes


# --------------------------------------------------------------------------- loops

def test_parallel_nest_keys():
    keys = [k for k, _ in parallel_nests(K.two_nests)]
    assert keys == ["i,j[128x128]", "i[128]", "i,j[128x128]#2"]
    assert [k for k, _ in parallel_nests(K.pinned)] == ["i,j[8x16]", "i,j[8x64]"]


def test_loop_annotations_round_trip():
    f = annotate_loops(K.two_nests, {
        "i,j[128x128]": FRAG,
        "i[128]": (ROWS, None, False),
        "i,j[128x128]#2": (FRAG.bind_thread_range(0, 128), "_i < 100", True),
    })
    text, back = _reparse(f)
    assert LOOP_LAYOUT_KEY in text and LOOP_PREDICATE_KEY in text and PADDING_GUARD_KEY in text
    assert text.count(PADDING_GUARD_KEY) == 1 and text.count(LOOP_PREDICATE_KEY) == 1
    _, loops = read_layout_annotations(back)
    assert list(loops) == ["i,j[128x128]", "i[128]", "i,j[128x128]#2"]
    lay, pred, guard = loops["i,j[128x128]"]
    assert _same(lay, FRAG) and pred is None and guard is False
    lay, pred, guard = loops["i,j[128x128]#2"]
    assert _same(lay, FRAG.bind_thread_range(0, 128)) and pred == "_i < 100" and guard is True
    assert _same(loops["i[128]"][0], ROWS)
    # the annotation sits on the outermost loop of the nest, inside the serial k loop
    assert 'for i in T.parallel(128, annotations={"tilelayout.loop_layout"' in text
    assert "for j in T.parallel(128):" in text


def test_annotate_loop_replaces_predicate_and_guard():
    root = dict(parallel_nests(K.two_nests))["i,j[128x128]"]
    once = annotate_loop(root, FRAG, predicate=tirx.Var("_i", "int32") < 64, padding_guard=True)
    assert str(once.annotations[LOOP_PREDICATE_KEY]) == "_i < 64"
    twice = annotate_loop(once, FRAG)
    assert LOOP_PREDICATE_KEY not in twice.annotations and PADDING_GUARD_KEY not in twice.annotations
    assert decode_layout(twice.annotations[LOOP_LAYOUT_KEY]).is_equal(FRAG)


def test_replica_guard_flag():
    from tilelayout.annotate import REPLICA_GUARD_KEY
    root = dict(parallel_nests(K.two_nests))["i[128]"]
    guarded = annotate_loop(root, ROWS, replica_guard=True)
    assert bool(guarded.annotations[REPLICA_GUARD_KEY]) is True
    assert REPLICA_GUARD_KEY not in annotate_loop(guarded, ROWS).annotations


def test_loop_errors():
    root = dict(parallel_nests(K.two_nests))["i[128]"]
    with pytest.raises(tl.LayoutError, match=r"loop i\[128\] nests 1 parallel loops"):
        annotate_loop(root, FRAG)
    with pytest.raises(tl.LayoutError, match="covers"):
        annotate_loop(root, Fragment([64], lambda i: i))
    with pytest.raises(tl.LayoutError, match="padding_guard"):
        annotate_loop(root, ROWS, padding_guard="yes")
    with pytest.raises(tl.LayoutError, match="tirx.For"):
        annotate_loop(K.two_nests.body, ROWS)
    with pytest.raises(tl.LayoutError, match=r"no parallel nest 'k,i\[2x128\]'"):
        annotate_loops(K.two_nests, {"k,i[2x128]": ROWS})


# --------------------------------------------------------------------------- pinned layouts

def test_pinned_tile_layouts():
    pins = get_pinned_layouts(K.pinned)
    # defaults (params, explicit row-major spellings, no layout) are not pins
    assert sorted(pins) == ["C", "F", "Sm", "Tm"]
    assert _same(pins["F"], from_tile_layout(K.SEED_FRAG, [8, 16]))
    assert pins["F"].thread_of(1, 3) + pins["F"].thread_range[0] == 5 * 32 + 5
    assert [pins["Sm"].map(i, 0)[0] for i in range(8)] == [72 * i for i in range(8)]
    i, j = np.meshgrid(np.arange(8), np.arange(16), indexing="ij")
    assert np.array_equal(pins["C"].table()[..., 0], j * 8 + i)
    assert pins["Tm"].output_shape == [128, 224]


def test_pinned_survive_print_parse():
    back = tvm.script.from_source(K.pinned.script())
    pins, again = get_pinned_layouts(K.pinned), get_pinned_layouts(back)
    assert sorted(pins) == sorted(again) and all(_same(pins[k], again[k]) for k in pins)


def test_annotation_pins_and_conflicts():
    f = annotate_layouts(K.pinned, {"D3": Layout([8, 16], lambda i, j: j * 8 + i)})
    assert sorted(get_pinned_layouts(f)) == ["C", "D3", "F", "Sm", "Tm"]
    same = annotate_layouts(K.pinned, {"C": Layout([8, 16], lambda i, j: i + j * 8)})
    assert _same(get_pinned_layouts(same)["C"], get_pinned_layouts(K.pinned)["C"])
    clash = annotate_layouts(K.pinned, {"C": Layout([8, 16], lambda i, j: i * 16 + j)})
    with pytest.raises(tl.LayoutConflictError, match="'C' is pinned twice"):
        get_pinned_layouts(clash)


def test_unconvertible_pin_names_the_buffer():
    with pytest.raises(tl.LayoutError, match="buffer 'SF'.*memory axis TLane"):
        get_pinned_layouts(K.scale_factors)


def test_no_pins_in_plain_and_block_functions():
    assert get_pinned_layouts(K.two_nests) == {}
    assert [b.name for b in function_buffers(K.block_style)] == ["A", "B", "Fr"]
    assert get_pinned_layouts(K.block_style) == {}


# --------------------------------------------------------------------------- errors

def test_annotate_errors():
    with pytest.raises(tl.LayoutError, match="no such buffer"):
        annotate_layouts(K.two_nests, {"nope": FRAG})
    with pytest.raises(tl.LayoutError, match=r"buffer 'acc' has shape \[128\]"):
        annotate_layouts(K.two_nests, {"acc": FRAG})
    with pytest.raises(tl.LayoutError, match="keyed by buffer"):
        annotate_layouts(K.two_nests, {3: FRAG})
    with pytest.raises(tl.LayoutError, match="buffer 'Sm'.*memory axis TLane"):
        annotate_layouts(K.pinned, {"Sm": K.SCALE_ATOM})
    with pytest.raises(tl.LayoutError, match="PrimFunc"):
        annotate_layouts(K.two_nests.body, {"frag": FRAG})


def test_malformed_annotations():
    with pytest.raises(tl.LayoutError, match="unknown layout kind"):
        decode_layout({"kind": "Swizzle", "input_shape": [4], "forward_index": ["_i"]})
    with pytest.raises(tl.LayoutError, match="must be a dict"):
        decode_layout(["_i"])
    with pytest.raises(tl.LayoutError):
        decode_layout({"kind": "Layout", "input_shape": [4], "forward_index": ["_i +"]})
    bad = K.two_nests.with_attr(LAYOUTS_ATTR, {"frag": {"kind": "Layout", "input_shape": [128, 128],
                                                        "forward_index": ["_q"]}})
    with pytest.raises(tl.LayoutError, match="buffer 'frag'"):
        read_layout_annotations(bad)


def _front_end_pins(func) -> dict:
    """Pins as inference reads them: the TIRx layouts the front end found on the buffers it read."""
    from tilelayout.passes.inference.frontend import build_op_graph
    graph = build_op_graph(func)
    found = [(b.var, b.pinned_layout) for b in graph.buffers if b.pinned_layout is not None]
    return get_pinned_layouts(func, found)


def test_front_end_pins_are_the_functions_pins_on_every_case_kernel():
    """Inference takes the non-default TIRx layouts from its front end's buffer records instead of walking the
    function again: on every golden case kernel and on the pinned test kernels both give the same pins."""
    import importlib
    import sys
    import warnings
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    kernels = [("pinned", K.pinned), ("annotated", annotate_layouts(K.pinned, {"C": Layout([8, 16], lambda i, j:
                                                                                            i + j * 8)}))]
    for path in sorted((root / "cases").glob("[!_]*.py")):
        mod = importlib.import_module(f"cases.{path.stem}")
        kernels += [(f"{path.stem}/{v}", b) for v, b in mod.VARIANTS.items()]
    compared = pinned = 0
    for label, build in kernels:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            func = build() if callable(build) and not isinstance(build, tirx.PrimFunc) else build
        try:
            expected = get_pinned_layouts(func)
        except tl.TileLayoutError:
            continue
        try:
            got = _front_end_pins(func)
        except tl.TileLayoutError:
            continue            # the front end refuses the kernel before inference would read its pins
        assert sorted(got) == sorted(expected), label
        assert all(_same(got[n], expected[n]) for n in got), label
        compared += 1
        pinned += bool(expected)
    assert compared > 100 and pinned >= 5, (compared, pinned)
    with pytest.raises(tl.LayoutError, match="buffer 'SF'.*memory axis TLane"):
        _front_end_pins(K.scale_factors)
