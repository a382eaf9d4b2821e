"""Two shared swizzles demanded of one buffer merge to the smaller granularity instead of conflicting."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tilelayout as tl  # noqa: E402
from cases import gemm_tile  # noqa: E402


@pytest.mark.parametrize("pinned,expected", [
    (tl.SwizzleMode.SWIZZLE_32B, tl.SwizzleMode.SWIZZLE_32B),    # pin finer than the gemm's 128B: pin wins
    (tl.SwizzleMode.SWIZZLE_64B, tl.SwizzleMode.SWIZZLE_64B),
])
def test_pinned_swizzle_and_gemm_swizzle_merge_to_the_finer_one(pinned, expected):
    func = gemm_tile.VARIANTS["m64n64k64_t128"]()
    pin = tl.make_swizzled_layout([64, 64], "float16", pinned)
    result = tl.infer_layouts(tl.annotate_layouts(func, {"A_s": pin}))
    assert tl.detect_swizzle_mode(result.buffers["A_s"], "float16") == expected
    # B_s is not pinned: it keeps the gemm's widest swizzle
    assert tl.detect_swizzle_mode(result.buffers["B_s"], "float16") == tl.SwizzleMode.SWIZZLE_128B


def test_a_pin_equal_to_the_gemms_swizzle_is_no_conflict():
    func = gemm_tile.VARIANTS["m128n128k32_t128"]()          # A_s is 128x32 fp16: the gemm picks 64B
    pin = tl.make_swizzled_layout([128, 32], "float16", tl.SwizzleMode.SWIZZLE_64B)
    result = tl.infer_layouts(tl.annotate_layouts(func, {"A_s": pin}))
    assert tl.detect_swizzle_mode(result.buffers["A_s"], "float16") == tl.SwizzleMode.SWIZZLE_64B


def test_a_pin_that_is_no_bank_swizzle_conflicts_with_the_gemm_naming_the_buffer():
    func = gemm_tile.VARIANTS["m64n64k64_t128"]()
    transposed = tl.Layout([64, 64], lambda i, j: [j * 64 + i])
    with pytest.raises(tl.LayoutConflictError, match="A_s"):
        tl.infer_layouts(tl.annotate_layouts(func, {"A_s": transposed}))
