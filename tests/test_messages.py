"""Error messages that say what is actually wrong: out-of-bounds fragment accesses, int32 index overflow."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tvm.tirx.layout import S, TileLayout

import tilelayout as tl
from tilelayout.tile_layout_interop import is_default_tile_layout

sys.path.insert(0, str(Path(__file__).resolve().parent / "data" / "cli"))
import my_kernels as k  # noqa: E402


def test_loop_larger_than_the_fragment_says_so():
    with pytest.raises(tl.InferenceError) as err:
        tl.infer_layouts(k.loop_past_fragment())
    text = str(err.value)
    assert "index i is 64 there, outside [0, 64) of dimension 0" in text
    assert "the loop over i (128 iterations) is larger than the fragment's dimension (64)" in text


def test_offset_past_the_edge_does_not_blame_the_loop_size():
    with pytest.raises(tl.InferenceError) as err:
        tl.infer_layouts(k.offset_past_fragment())
    text = str(err.value)
    assert "index i + 1 is 64 there, outside [0, 64)" in text and "at loop point [63]" in text
    assert "larger than" not in text and "offset or stride takes it past the fragment's edge" in text


def test_int32_buffer_past_2_31_elements_is_refused_not_wrapped():
    with pytest.raises(tl.TileLayoutError, match=r"buffer A has 4294967296 elements, more than int32 indices "
                                                  r"can address .* int64 extents"):
        tl.infer_layouts(k.huge_int32_buffer())


def test_int64_buffer_of_the_same_size_is_inferred():
    result = tl.infer_layouts(k.huge_int64_buffer())
    assert result.buffers["frag"].thread_extent == 128


@pytest.mark.parametrize("shape", [(65536, 65536), (65536, 32768), (1 << 20, 4096)])
def test_huge_tile_layouts_are_refused_with_the_real_reason(shape):
    with pytest.raises(tl.LayoutError, match=r"32-bit and cannot index past 2147483647") as err:
        tl.from_tile_layout(TileLayout(S[shape]), list(shape))
    assert "covers only" not in str(err.value)


def test_default_layout_of_a_huge_buffer_is_still_the_default():
    # decided with Python integers: TVM's size() of this layout wraps to 0
    assert is_default_tile_layout(TileLayout(S[(65536, 65536)]), [65536, 65536])
    assert not is_default_tile_layout(TileLayout(S[(65536, 65536):(1, 65536)]), [65536, 65536])
