"""``Tx.select(dst, a, b, lambda i, j: pred)``: inferred like an elementwise op, lowered to a per-thread
select (vectorised like any elementwise loop), run on the CPU against numpy, compiled with nvcc; a predicate
that reads memory or a destination not at the origin is refused by name."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kernels_select_atomic as KS  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.passes.lowering.pipeline import build_cpu, compile_ptx, cuda_source, lower_func  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
ARCHS = ["sm_80", "sm_90a"]


@pytest.mark.parametrize("model", ["register-count", "io-aware"])
def test_select_infers_like_an_elementwise_op(model):
    res = tl.infer_layouts(KS.causal_mask(), cost_model=model)
    loops = dict(res.func.attrs["tilelayout.tile_loops"])
    sel = [v for v in loops.values() if str(v["op"]).startswith("select s")]
    copy = [v for v in loops.values() if str(v["op"]).startswith("copy s")]
    # the select's loop follows the fragment it reads and writes
    assert sel and copy and str(sel[0]["layout"]["forward_thread"]) == str(copy[0]["layout"]["forward_thread"])


@pytest.mark.parametrize("arch", ARCHS)
def test_causal_mask_matches_numpy(arch):
    func = KS.causal_mask(arch=arch)
    text = lower_func(func).script()
    assert "T.Select(" in text and "T.vectorized" in text
    S = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    O = np.full_like(S, np.nan)
    R = np.full(64, np.nan, np.float32)
    build_cpu(func)(S, O, R)
    keep = np.arange(64)[:, None] >= np.arange(64)[None, :]
    want = np.where(keep, S, np.float32(-1e30))
    assert np.array_equal(O, want)
    assert np.array_equal(R, want.max(axis=1))


@pytest.mark.parametrize("arch", ARCHS)
def test_select_between_a_fragment_and_a_shared_tile_matches_numpy(arch):
    func = KS.select_two_tiles(arch=arch)
    rng = np.random.default_rng(1)
    A = rng.standard_normal((128, 128)).astype(np.float16)
    B = rng.standard_normal((128, 128)).astype(np.float16)
    O = np.zeros_like(A)
    build_cpu(func)(A, B, O)
    rows = np.arange(128)[:, None] % 64
    bx = np.arange(128)[:, None] // 64
    pred = (bx * 64 + rows + np.arange(128)[None, :]) % 3 == 0
    assert np.array_equal(O, np.where(pred, A, B))


def test_a_predicate_reading_memory_is_refused():
    with pytest.raises(tl.TileLayoutError, match="not supported with this predicate: it reads M"):
        lower_func(KS.select_reading_memory())


def test_a_destination_off_the_origin_is_refused():
    with pytest.raises(tl.TileLayoutError, match=r"does not start at the origin"):
        lower_func(KS.select_offset_region())


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["causal_mask", "select_two_tiles"])
def test_select_compiles_with_nvcc(arch, name):
    target = {"kind": "cuda", "arch": arch}
    src = cuda_source(getattr(KS, name)(arch=arch), target)
    assert re.search(r"\?", src)        # a per-thread select
    compile_ptx(src, target)
