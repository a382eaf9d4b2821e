"""The inference API around the engine: determinism across hash seeds, the annotated function's print ->
parse round trip, the pass in a ``tvm.transform.Sequential``, and every error path (typed tilelayout
exceptions with messages that say what to change).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tvm

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(TESTS))

import kernels_inference as K  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.errors import InferenceError, LayoutConflictError, LayoutError, TileLayoutError  # noqa: E402
from tilelayout.passes.inference.frontend import FrontendError  # noqa: E402

T128 = 128


@pytest.fixture(scope="module")
def results():
    """Two annotated results per model: the #1729-style row scale and row max -> subtract."""
    out = {}
    for model in ("register-count", "io-aware"):
        out["row_scale", model] = tl.infer_layouts(K.row_scale(64, 128, T128), cost_model=model)
        out["row_max", model] = tl.infer_layouts(K.row_max_then_subtract(64, 128, T128), cost_model=model)
    out["ragged", "io-aware"] = tl.infer_layouts(K.ragged(229, T128), cost_model="io-aware")
    out["short", "register-count"] = tl.infer_layouts(K.short_loop(100, T128))
    return out


def _snapshot(result) -> dict:
    return {"buffers": {k: v.to_dict() for k, v in result.buffers.items()},
            "loops": {k: v.to_dict() for k, v in result.loops.items()},
            "attempts": [a.to_dict() for a in result.attempts]}


# --------------------------------------------------------------------------- determinism

_DETERMINISM = """
import json, sys
sys.path[:0] = [{tests!r}, {root!r}]
import kernels_inference as K, tilelayout as tl
out = {{}}
for name, build in [("row_max", lambda: K.row_max_then_subtract(64, 128, 128)), ("two", K.two_components),
                    ("pair", lambda: K.const_pair(64, 128, 128)), ("spill", lambda: K.register_spill(64, 128, 128))]:
    func = build()
    for model in ("register-count", "io-aware"):
        r = tl.infer_layouts(func, cost_model=model)
        out[name + "/" + model] = {{
            "buffers": {{k: v.to_dict() for k, v in r.buffers.items()}},
            "loops": {{k: v.to_dict() for k, v in r.loops.items()}},
            "order": [list(r.buffers), list(r.loops)],
            "attempts": [a.to_dict() for a in r.attempts],
            "script": r.func.script()}}
print(json.dumps(out, sort_keys=True))
"""


def test_results_do_not_depend_on_the_hash_seed():
    code = _DETERMINISM.format(tests=str(TESTS), root=str(ROOT))
    outputs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        env.pop("TILELAYOUT_COST_MODEL", None)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs.append(json.loads(proc.stdout.splitlines()[-1]))
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == 8 and outputs[0]["row_max/io-aware"]["attempts"]


# --------------------------------------------------------------------------- annotated function round trip

@pytest.mark.parametrize("key", [("row_scale", "register-count"), ("row_scale", "io-aware"),
                                 ("row_max", "io-aware"), ("ragged", "io-aware"), ("short", "register-count")])
def test_annotated_function_survives_print_and_parse(results, key):
    result = results[key]
    text = result.func.script()
    assert '"tilelayout.layouts"' in text and '"tilelayout.loop_layout"' in text
    back = tl.get_layouts(tvm.script.from_source(text))
    assert sorted(back.buffers) == sorted(result.buffers)
    for name, lay in result.buffers.items():
        assert back.buffers[name].is_equal(lay), name
        assert back.buffers[name].to_dict() == lay.to_dict()
    assert sorted(back.loops) == sorted(result.loops)
    for k, info in result.loop_info.items():
        layout, predicate, guard = back.loop_info[k]
        assert layout.is_equal(info.layout) and predicate == info.predicate and guard == info.padding_guard


def test_round_trip_keeps_predicate_and_padding_guard(results):
    short = tl.get_layouts(tvm.script.from_source(results["short", "register-count"].func.script()))
    assert short.loop_info["i[100]"][1] == "tx < 100"
    ragged = tl.get_layouts(tvm.script.from_source(results["ragged", "io-aware"].func.script()))
    assert ragged.loop_info["i,j[1x229]"][2] is True


def test_get_layouts_reads_the_result_without_running_inference(results):
    r = results["row_max", "io-aware"]
    back = tl.get_layouts(r.func)
    assert back.attempts == [] and sorted(back.buffers) == ["row_max", "x", "y"]


def test_reinferring_an_annotated_function_reproduces_it(results):
    """The annotation pins every buffer: a second run changes nothing and needs no search."""
    r = results["row_scale", "io-aware"]
    again = tl.infer_layouts(r.func, cost_model="register-count")
    assert again.attempts == []
    for name, lay in r.buffers.items():
        assert again.buffers[name].is_equal(lay)


# --------------------------------------------------------------------------- the pass

def test_layout_inference_pass_in_a_sequential(results):
    func = K.row_scale(64, 128, T128)
    mod = tvm.IRModule({"main": func})
    seq = tvm.transform.Sequential([tl.passes.LayoutInference(cost_model="io-aware")])
    out = seq(mod)
    back = tl.get_layouts(out["main"])
    want = results["row_scale", "io-aware"]
    assert sorted(back.buffers) == sorted(want.buffers)
    for name, lay in want.buffers.items():
        assert back.buffers[name].is_equal(lay)
    assert back.loops["i,j[64x128]"].is_equal(want.loops["i,j[64x128]"])


def test_pass_takes_the_target_from_the_function():
    func = K.copy_roundtrip(64, 64, "float8_e4m3fn", T128).with_attr(
        "target", tvm.target.Target({"kind": "cuda", "arch": "sm_100"}))
    out = tvm.transform.Sequential([tl.passes.LayoutInference(cost_model="io-aware")])(tvm.IRModule({"main": func}))
    assert "frag" in tl.get_layouts(out["main"]).buffers


@pytest.mark.parametrize("build,kind", [(K.partial_reduce, InferenceError), (K.unsupported_op, FrontendError),
                                        (K.out_of_bounds, InferenceError)])
def test_pass_errors_keep_their_tilelayout_type(build, kind):
    """Run as a Pass the inference sits behind TVM's FFI; the error must still be the typed one."""
    mod = tvm.IRModule({"main": build()})
    with pytest.raises(kind) as err:
        tvm.transform.Sequential([tl.passes.LayoutInference()])(mod)
    assert isinstance(err.value, TileLayoutError)


# --------------------------------------------------------------------------- error paths

ERRORS = [
    ("unsupported op", K.unsupported_op, {}, FrontendError, ["tirx.tile.select", "not supported", "line"]),
    ("partial reduce", K.partial_reduce, {}, InferenceError, ["max r[0:32]", "reduce the whole fragment"]),
    ("loop beyond fragment", K.out_of_bounds, {}, InferenceError, ["leaves buffer frag", "every attempt failed"]),
    ("unknown cost model", lambda: K.chain(64, 128, T128), {"cost_model": "fast"}, ValueError,
     ["'fast'", "register-count", "io-aware"]),
    ("bad target", lambda: K.chain(64, 128, T128), {"target": "no-such-target"}, ValueError,
     ["cannot make a TVM target", "no-such-target"]),
    ("not a PrimFunc", lambda: 42, {}, FrontendError, ["PrimFunc", "int"]),
]


@pytest.mark.parametrize("label,build,kwargs,kind,words", ERRORS, ids=[e[0] for e in ERRORS])
def test_error_paths_raise_typed_errors_with_actionable_messages(label, build, kwargs, kind, words):
    with pytest.raises(kind) as err:
        tl.infer_layouts(build(), **kwargs)
    assert not isinstance(err.value, tvm.error.InternalError)
    if kind is not ValueError:
        assert isinstance(err.value, TileLayoutError) and isinstance(err.value, LayoutError)
    for w in words:
        assert w in str(err.value), (label, str(err.value))


def test_conflict_errors_are_layout_errors_and_value_errors():
    assert issubclass(LayoutConflictError, LayoutError) and issubclass(LayoutConflictError, ValueError)
    assert issubclass(InferenceError, LayoutError) and issubclass(FrontendError, LayoutError)


def test_result_summary_and_attempt_dicts(results):
    r = results["row_max", "io-aware"]
    text = r.summary()
    assert "row_max: Fragment" in text and "loop i,j[64x128]: Fragment" in text
    d = r.attempts[0].to_dict()
    assert set(d) >= {"component", "root", "root_description", "mem", "regs", "chosen", "error", "layouts", "loops"}
    assert json.loads(json.dumps(d)) == d
