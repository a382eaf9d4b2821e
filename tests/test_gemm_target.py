"""The gemm accumulator follows the target as TileLang's T.gemm does: wgmma on sm_90 with both operands
in shared memory, mma.sync elsewhere (facts from TileLang 0.1.15, maint/peer/tilelang_output.txt)."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tilelayout as tl  # noqa: E402
from cases import gemm_tile  # noqa: E402
from tilelayout.exprparse import parse_expr  # noqa: E402
from tilelayout.expr import _BY_NAME  # noqa: E402

# TileLang 0.1.15, sm_90, one warpgroup: (thread, slot) of C_frag
TILELANG_SM90 = {
    "m64n64k64_t128": ("_i // 16 * 32 + _i % 8 * 4 + _j % 8 // 2", "_j // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
    "m128n128k32_t128": ("_i % 64 // 16 * 32 + _i % 8 * 4 + _j % 8 // 2",
                         "_i // 64 * 64 + _j // 8 * 4 + _i % 16 // 8 * 2 + _j % 2"),
}
SHAPES = {"m64n64k64_t128": (64, 64), "m128n128k32_t128": (128, 128)}


@pytest.mark.parametrize("variant", sorted(TILELANG_SM90))
def test_sm90_accumulator_is_tilelangs_wgmma_layout(variant):
    result = tl.infer_layouts(gemm_tile.VARIANTS[variant](), target={"kind": "cuda", "arch": "sm_90"})
    thread, slot = TILELANG_SM90[variant]
    expected = tl.Fragment.from_exprs(list(SHAPES[variant]), parse_expr(thread, _BY_NAME), [parse_expr(slot, _BY_NAME)])
    got = result.buffers["C_frag"]
    assert np.array_equal(got.thread_table(), expected.thread_table())
    assert np.array_equal(got.table(), expected.table())
    assert got.is_bijective()


@pytest.mark.parametrize("variant", sorted(SHAPES))
def test_sm80_accumulator_is_mma_sync_layout(variant):
    m, n = SHAPES[variant]
    result = tl.infer_layouts(gemm_tile.VARIANTS[variant](), target={"kind": "cuda", "arch": "sm_80"})
    assert result.buffers["C_frag"].is_equal(tl.make_mma_accumulator_fragment(m, n, 128))


def test_wgmma_fragment_rejects_partial_warpgroups():
    with pytest.raises(tl.LayoutError, match="warpgroup"):
        tl.make_wgmma_accumulator_fragment(64, 64, 96)
    with pytest.raises(tl.LayoutError, match="m % 128"):
        tl.make_wgmma_accumulator_fragment(64, 64, 256)


def test_wgmma_fragment_with_two_warpgroups_is_a_bijection():
    frag = tl.make_wgmma_accumulator_fragment(128, 64, 256)
    assert frag.thread_extent == 256 and frag.is_bijective()
