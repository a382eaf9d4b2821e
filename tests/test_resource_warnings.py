"""Resource warnings of layout inference (TileLayoutResourceWarning), each naming the buffer responsible."""
from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import pytest

import tilelayout as tl
from tilelayout.passes.inference.resources import (LARGE_FRAGMENT_REGISTERS, MAX_REGISTERS_PER_THREAD,
                                                    resource_usage, shared_memory_limit)

sys.path.insert(0, str(Path(__file__).resolve().parent / "data" / "cli"))
import my_kernels as k  # noqa: E402


def test_category_is_our_own_and_does_not_shadow_builtins():
    assert issubclass(tl.TileLayoutResourceWarning, UserWarning)
    assert tl.TileLayoutResourceWarning is not ResourceWarning


def _messages(record) -> list[str]:
    return [str(w.message) for w in record]


def test_registers_over_255_warn_naming_the_fragment():
    with pytest.warns(tl.TileLayoutResourceWarning) as record:
        result = tl.infer_layouts(k.huge_fragment())
    # both of this kernel's warnings: the register peak over 255 (where, and what is live there), and the one
    # fragment over 128 on its own
    assert [re.search(r"register peak is \d+ 32-bit registers per thread at .*\(op #\d\).*live there: frag "
                      r"\(1024\)", m) is not None for m in _messages(record)] == [True, False]
    assert _messages(record)[1].startswith("fragment frag: 1024 elements")
    usage = resource_usage(result)
    # 256x256 fp32 over 64 threads: 1024 elements per thread whatever the layout, one register each
    assert usage.fragment_registers == {"frag": 256 * 256 // 64} and usage.registers > MAX_REGISTERS_PER_THREAD
    assert usage.peak.live == {"frag": 1024} and usage.peak.registers == 1024 + usage.peak.overhead


def test_unusually_large_fragment_warns_on_its_own():
    with pytest.warns(tl.TileLayoutResourceWarning) as record:
        tl.infer_layouts(k.huge_fragment())
    assert any(re.search(rf"fragment frag: 1024 elements .* more than {LARGE_FRAGMENT_REGISTERS}", m)
               for m in _messages(record))


def test_threads_over_1024_are_refused_by_the_front_end():
    with pytest.raises(tl.TileLayoutError, match="2048 threads"):
        tl.infer_layouts(k.too_many_threads())


def test_threads_over_the_target_limit_warn_when_a_result_has_them():
    # the front end refuses such launches on CUDA; the resource check still covers any result that has them
    from types import SimpleNamespace
    from tilelayout.passes.inference.resources import resource_warnings
    graph = SimpleNamespace(thread_extent=2048, buffers=[], func_name="wide")
    fake = SimpleNamespace(target=None, graph=graph, buffers={})
    assert resource_warnings(fake) == ["wide: 2048 threads per block exceed the target's limit of 1024; "
                                       "the kernel cannot launch"]


def test_shared_memory_over_the_target_limit_names_the_buffer():
    with pytest.warns(tl.TileLayoutResourceWarning) as record:
        tl.infer_layouts(k.big_shared())
    # the shared tile over the limit, and (this kernel's fragment is large too) the registers
    assert sum("524288 bytes per block (largest: smem (524288))" in m for m in _messages(record)) == 1
    assert sorted(m.split(":")[0] for m in _messages(record)) == ["fragment frag", "staged", "staged"]


def test_static_shared_over_48k_warns_but_dynamic_does_not():
    with pytest.warns(tl.TileLayoutResourceWarning, match=r"static shared buffers .* 65536 bytes.*shared\.dyn"):
        tl.infer_layouts(k.big_shared("shared", 64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", tl.TileLayoutResourceWarning)
        result = tl.infer_layouts(k.big_shared("shared.dyn", 64))
    assert resource_usage(result).shared_bytes == 64 * 256 * 4


def test_a_small_kernel_is_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error", tl.TileLayoutResourceWarning)
        result = tl.infer_layouts(k.row_softmax_shift)
    usage = resource_usage(result)
    assert usage.threads == 128 and usage.shared_bytes == 0
    assert usage.fragment_registers == {"frag": 64 * 128 // 128, "mx": 16}   # mx: 64 rows, 4 per warp row, x32


@pytest.mark.parametrize("arch, limit", [("sm_90", 227 * 1024), ("sm_80", 163 * 1024), ("sm_86", 99 * 1024),
                                         ("sm_75", 64 * 1024), ("sm_70", 96 * 1024), ("sm_120", 99 * 1024),
                                         ("sm_100", 227 * 1024), ("sm_60", 48 * 1024)])
def test_shared_memory_limit_by_architecture(arch, limit):
    assert shared_memory_limit({"kind": "cuda", "arch": arch}) == limit


def test_warnings_point_at_the_users_line_from_every_entry_point():
    """The warning's file and line are the caller's, not a module of ours or TVM's, however deep it is raised."""
    import tvm
    for run in (lambda: tl.infer_layouts(k.huge_fragment()),
                lambda: tl.passes.LayoutInference()(tvm.IRModule({"main": k.huge_fragment()}))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
        ours = [w for w in caught if issubclass(w.category, tl.TileLayoutResourceWarning)]
        assert ours and all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]


def test_live_register_slots_count_a_retired_conversion_source_once():
    """io-aware stages a gemm epilogue through a second version of the accumulator (C_frag_cv); nothing
    touches C_frag after the conversion, so the two versions never coexist and count as the larger one. A
    source still read after its conversion (two consumers) keeps counting in full."""
    import importlib
    from tilelayout.passes.inference.cost_models import count_register_slots
    from tilelayout.passes.inference.resources import live_register_slots
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    gemm = importlib.import_module("cases.gemm_tile").VARIANTS["m64n64k64_t128"]
    with pytest.warns(tl.ConversionWarning, match="C_frag_cv <- C_frag: shared memory round trip"):
        staged = tl.infer_layouts(gemm(), cost_model="io-aware")
    plain = tl.infer_layouts(gemm(), cost_model="register-count")
    assert "C_frag_cv" in staged.buffers and "C_frag_cv" not in plain.buffers
    assert count_register_slots(staged.buffers) == 2 * count_register_slots(plain.buffers)
    assert live_register_slots(staged) == live_register_slots(plain) == count_register_slots(plain.buffers)
    two = importlib.import_module("cases.conversion_two_consumers").VARIANTS["rows_vs_columns_64x64_t128"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tl.infer_layouts(two(), cost_model="register-count")
    assert "F_cv" in result.buffers
    assert live_register_slots(result) == count_register_slots(result.buffers)
