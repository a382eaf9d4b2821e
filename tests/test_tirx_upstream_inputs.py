"""from_tile_layout / to_tile_layout on the inputs of apache/tvm's TIRx layout tests (tests/python/tirx/test_layout.py).

For each TIRx layout there (its constructor, canonicalize, axis-fusion, replica-order and tile cases, lane and
warp shards, replicas, offsets, swizzle compositions) and each thing TVM derives from it (``canonicalize()``,
``tile()``), checked element by element against TVM's own ``apply``:
  * our import places every element, all replicas, at the threads and memory coordinates TVM's apply gives;
  * TVM's canonical form imports to an equal layout;
  * our export evaluates, in TVM, the same as the input, and canonicalizes to a layout that evaluates the same
    as the input's canonical form.
"""
from __future__ import annotations

import pytest
import tvm
from tvm.tirx.layout import ComposeLayout, R, S, TileLayout, laneid, tid_in_wg, wgid, wid_in_wg, warpid

import tilelayout as tl
from test_tirx_interop import assert_matches_tvm, assert_same_tile
from tilelayout.tile_layout_interop import from_tile_layout, to_tile_layout


def _size(tile) -> int:
    base = tile.tile_layout if isinstance(tile, ComposeLayout) else tile
    return int(base.size())


UPSTREAM = [
    # constructor and spec-builder cases
    TileLayout(S[2, 3, 4]),
    TileLayout(S[(2, 3, 4):(12, 4, 1)]),
    TileLayout(S[(8, 4, 2):(4 @ laneid, 1 @ laneid, 1)]),
    TileLayout(S[8:4 @ laneid] + R[4:1 @ laneid]),
    TileLayout(S[8:4 @ laneid] + 1 @ laneid),
    TileLayout(S[8:4 @ laneid] + 1 @ laneid + 2 @ warpid + 64),
    TileLayout(64 + S[8:4 @ laneid] + 1 @ laneid),
    TileLayout(S[(8, 4):(1 @ laneid, 1)] + R[4:1 @ laneid] + 2 @ warpid),
    TileLayout(S[1:1] + R[(8, 4):(4 @ laneid, 1 @ laneid)] + 2 @ warpid),
    TileLayout(S[(2, 8, 2, 4, 2):(2 @ warpid, 4 @ laneid, 1 @ warpid, 1 @ laneid, 1)]),
    TileLayout(S[(2, 8, 2, 4, 2):(2 @ wid_in_wg, 4 @ laneid, 1 @ wid_in_wg, 1 @ laneid, 1)]),
    # canonicalize cases
    TileLayout(S[(8, 8, 8, 4, 2):(512, 64, 8, 2, 1)]),
    TileLayout(S[(8, 8, 1, 8, 4, 2):(512, 64, 160, 8, 2, 1)]),
    TileLayout(S[(8, 8, 8, 4, 1, 1):(512, 64, 8, 2, 1, 1)]),
    TileLayout(S[(8, 8, 1, 1, 1, 4, 1, 1):(512, 64, 1, 1, 1, 2, 1, 1)]),
    TileLayout(S[(2, 3, 6):(18, 6, 1)]),
    TileLayout(S[(8, 2, 3, 6):(6, 18, 6, 1)]),
    TileLayout(S[(8, 2, 3, 6):(6, 24, 6, 1)]),
    TileLayout(S[(8, 2, 4, 2, 3, 6):(2, 1, 4, 24, 6, 1)]),
    TileLayout(S[(3, 4, 5, 2):(20, 5, 1, 60)]),
    TileLayout(S[(18, 8, 2, 4, 2, 3, 6):(4, 2, 1, 4, 24, 6, 1)]),
    TileLayout(S[(3, 4, 5, 2, 3, 4):(20, 5, 1, 60, 20, 5)]),
    TileLayout(S[(8, 8, 8, 4, 2):(16, 4 @ laneid, 2, 1 @ laneid, 1)]),
    TileLayout(S[(8, 8, 8, 1, 4, 2, 1):(16, 4 @ laneid, 2, 1, 1 @ laneid, 1, 1)]),
    TileLayout(S[(8, 8, 8, 1, 4, 2, 1):(16, 4 @ laneid, 2, 1, 1 @ laneid, 1, 4 @ laneid)]),
    TileLayout(S[(8, 8, 8, 1, 1, 2, 1):(16, 4 @ laneid, 2, 1, 4 @ laneid, 1, 1)] + 0 @ laneid),
    TileLayout(S[(8, 4, 8, 8, 16):(4 @ laneid, 1 @ laneid, 4, 2, 4)]),
    TileLayout(S[(8, 4, 8, 16):(4 @ laneid, 1 @ laneid, 2, 4)]),
    TileLayout(S[(8, 4, 8):(4 @ laneid, 1 @ laneid, 8)]),
    TileLayout(S[(8, 4, 8):(4 @ laneid, 1 @ laneid, 4)]),
    TileLayout(S[(8, 4):(4 @ laneid, 1 @ laneid)]),
    TileLayout(S[(8, 4, 4, 8, 8, 8):(4 @ laneid, 1 @ laneid, 4, 8, 8, 8)]),
    TileLayout(S[(8, 4, 4, 8, 8, 8):(4 @ laneid, 1 @ laneid, 16, 2, 8, 8)]),
    TileLayout(S[(32, 3, 4, 5, 2, 3, 4):(1 @ laneid, 20, 5, 1, 60, 20, 5)]),
    TileLayout(S[(1, 1, 1, 1, 1):(1, 1, 1, 1, 1)]),
    # axis fusion (warp and lane shards become tx / tid_in_wg)
    TileLayout(S[(2, 8, 2, 4):(2 @ warpid, 4 @ laneid, 1 @ warpid, 1 @ laneid)]),
    TileLayout(S[(2, 2, 8, 4):(2 @ warpid, 1 @ warpid, 4 @ laneid, 1 @ laneid)]),
    TileLayout(S[(2, 2, 8, 2, 2, 4):(2 @ wgid, 2 @ wid_in_wg, 4 @ laneid, 1 @ wgid, 1 @ wid_in_wg, 1 @ laneid)]),
    TileLayout(S[(2, 8, 2, 4):(2 @ wid_in_wg, 4 @ laneid, 1 @ wid_in_wg, 1 @ laneid)]),
    TileLayout(S[(2, 2, 4, 32):(2 @ wgid, 1 @ wgid, 32 @ tid_in_wg, 1 @ tid_in_wg)]),
    # replica order
    TileLayout(S[1:1] + R[(4, 8):(1 @ laneid, 4 @ laneid)] + 2 @ warpid),
    # tile() operands
    TileLayout(S[(2, 4):(1, 2)]),
    TileLayout(S[(4, 2, 2, 4):(16, 8, 1, 2)]),
    TileLayout(S[(8, 1, 4, 2):(4 @ laneid, 2, 1 @ laneid, 1)]),
    TileLayout(S[(8, 8, 1, 8, 4, 2):(16, 4 @ laneid, 2, 2, 1 @ laneid, 1)]),
    TileLayout(S[(8, 8, 8, 4):(8, 4 @ laneid, 1, 1 @ laneid)]),
    TileLayout(S[(2, 4, 1):(2, 3, 1)]),
    TileLayout(S[(16, 8, 4):(1, 64, 16)]),
    TileLayout(S[(2, 4, 2, 2):(4, 1, 4, 3)]),
    # swizzle compositions (the 128B atom over row-major and tiled layouts)
    ComposeLayout(3, 3, 3, TileLayout(S[(8, 64):(64, 1)])),
    ComposeLayout(3, 3, 3, TileLayout(S[4096:1])),
    ComposeLayout(3, 3, 3, TileLayout(S[(64, 4, 64):(64, 4096, 1)])),
    ComposeLayout(2, 3, 3, TileLayout(S[(8, 32):(32, 1)])),
    ComposeLayout(1, 3, 3, TileLayout(S[(8, 16):(16, 1)])),
]

TILED = [  # (inner, outer, outer_shape, inner_shape) as apache/tvm's test_tile_layout composes them
    (TileLayout(S[8:1]), TileLayout(S[8:1]), [8], [8]),
    (TileLayout(S[(8, 8):(8, 1)]), TileLayout(S[(8, 8):(8, 1)]), [8, 8], [8, 8]),
    (TileLayout(S[(2, 4):(1, 2)]), TileLayout(S[(8, 8):(8, 1)]), [8, 8], [2, 4]),
    (TileLayout(S[(8, 1, 4, 2):(4 @ laneid, 2, 1 @ laneid, 1)]), TileLayout(S[(8, 8):(8, 1)]), (8, 8), (8, 8)),
    (TileLayout(S[(8, 4):(4 @ laneid, 1 @ laneid)]), TileLayout(S[(8, 8):(8, 1)]), (8, 8), (8, 4)),
    (TileLayout(S[(2, 4, 1):(2, 3, 1)]), TileLayout(S[(4, 2, 1):(2, 1, 1)]), (4, 2), (2, 4)),
    (TileLayout(S[(2, 4, 2, 2):(4, 1, 4, 3)]), TileLayout(S[(16, 8, 4):(1, 64, 16)]), (16, 8, 4), (8, 2, 2)),
]


def _tvm_canonical_form_moves(tile, canon, shape) -> bool:
    try:
        assert_same_tile(canon, tile, shape)
        return False
    except AssertionError:
        return True


#: apache-tvm 0.27's canonicalize() (CUDA target) fuses a laneid and a warpid offset into tx and drops the lane
#: part (1 @ laneid + 2 @ warpid becomes 64 @ tx, not 65 @ tx): its canonical form is another function. Our
#: import follows TileLayout.apply, which keeps 65; these inputs skip the canonical-form comparison.
TVM_CANONICALIZE_DROPS_LANE_OFFSET = {str(TileLayout(S[8:4 @ laneid] + 1 @ laneid + 2 @ warpid + 64))}


def _check(tile, shape):
    with tvm.target.Target("cuda"):
        canon = tile.canonicalize()
    ours = from_tile_layout(tile, shape)
    assert_matches_tvm(tile, ours, shape)
    if str(tile) in TVM_CANONICALIZE_DROPS_LANE_OFFSET:
        assert _tvm_canonical_form_moves(tile, canon, shape)  # fails once TVM keeps the lane offset
        return
    assert_matches_tvm(canon, ours, shape)
    if not list((tile.tile_layout if isinstance(tile, ComposeLayout) else tile).replica):
        assert from_tile_layout(canon, shape).is_equal(ours)  # with replicas only the set of copies is fixed
    back = to_tile_layout(ours)
    assert_same_tile(back, tile, shape)
    with tvm.target.Target("cuda"):
        assert_same_tile(back.canonicalize(), canon, shape)


def test_lane_shard_past_a_warp_is_refused():
    # apache/tvm's spec-builder test prints S[128 : 1 @ laneid]; a lane index past 31 would alias the next warp
    with pytest.raises(tl.TileLayoutError, match="alias threads of the next warp"):
        from_tile_layout(TileLayout(S[128:1 @ laneid]), [128])


@pytest.mark.parametrize("tile", UPSTREAM, ids=lambda t: str(t)[:70])
def test_upstream_tile_layouts(tile):
    _check(tile, [_size(tile)])


@pytest.mark.parametrize("inner,outer,outer_shape,inner_shape", TILED, ids=lambda x: str(x)[:40])
def test_upstream_tiled_layouts(inner, outer, outer_shape, inner_shape):
    tiled = inner.tile(outer, outer_shape, inner_shape)
    _check(tiled, [o * i for o, i in zip(outer_shape, inner_shape)])
