"""The golden cases honour their contract, and their checks say what correct means.

Each bug case's ``check`` must accept a correct layout and reject TileLang's wrong one (read from
the saved peer output in maint/peer/tilelang_output.txt; TileLang itself never runs here).
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maint import run  # noqa: E402
from maint.peer.compare import load_peer_output  # noqa: E402

SEED_VARIANTS = {
    "elementwise_copy": ["fp16_128x128_t128", "fp32_64x256_t256"],
    "fp8_copy": ["128x256_t128", "64x128_t64"],
    "broadcast_read": ["issue1729_2x2560_t256", "rows4_cols1024_t128"],
    "transposed_store": ["fp32_128x128_t128", "fp16_64x256_t128"],
    "mixed_dtype_chain": ["128x128_t128", "64x512_t256"],
    "reduce_broadcast": ["64x128_t128", "128x256_t256"],
    "offset_region_copy": ["fp16_tile64x64_t128", "fp32_tile32x128_t128"],
    "shared_staging": ["fp16_64x64_t128", "fp32_128x128_t128"],
}
BUG_CASES = ("mixed_extents", "two_index_read", "ragged_extent")
CASES = run.discover(ROOT / "cases")
PEER = load_peer_output()


def case(name: str):
    return importlib.import_module(f"cases.{name}")


def frag(thread, index, shape, rep=1, threads=128) -> dict:
    return {"kind": "Fragment", "input_shape": list(shape), "forward_index": [index], "forward_thread": thread,
            "replicate": rep, "threads": threads, "thread_range": [0, threads]}


def test_seed_cases_have_exactly_the_reference_variants():
    for name, variants in SEED_VARIANTS.items():
        assert list(case(name).VARIANTS) == variants


def test_bug_cases_exist():
    assert set(BUG_CASES) <= set(CASES) and len(CASES) >= 11


@pytest.mark.parametrize("name", CASES)
def test_case_documents_what_it_pins_and_what_tilelang_does(name):
    module = case(name)
    assert len(module.__doc__.strip()) > 80
    assert "TileLang 0.1.15" in module.TILELANG
    assert callable(getattr(module, "check", None))


@pytest.mark.parametrize("name", CASES)
def test_variants_build_fresh_primfuncs_and_tables_name_real_buffers(name):
    from tvm import tirx
    module = case(name)
    for variant, build in module.VARIANTS.items():
        func = build()
        assert isinstance(func, tirx.PrimFunc) and build() is not func
        params = {p.name for p in func.params}
        from maint.lowered_checks import anchor_table
        for model in ("register-count", "io-aware"):
            assert set(anchor_table(module, variant, model)) <= params
        for frag_name, shape in getattr(module, "CUTE_STATEMENTS", {}).get(variant, {}).items():
            assert frag_name in func.script() and all(isinstance(s, int) for s in shape)


def test_every_case_has_a_tilelang_twin():
    """Every variant has TileLang's output on some target (sm_90, or the target a variant is named for)."""
    from maint.peer.compare import peer_archs
    outputs = [load_peer_output(arch=arch) for arch in peer_archs()]
    for model in ("register-count", "io-aware"):
        twins = set().union(*(set(out.get(model, {})) for out in outputs))
        ours = {f"{name}/{v}" for name in CASES for v in case(name).VARIANTS}
        assert twins == ours


@pytest.mark.parametrize("name", list(SEED_VARIANTS))
def test_tilelang_results_pass_the_seed_checks(name):
    module = case(name)
    for model in ("register-count", "io-aware"):
        for variant in module.VARIANTS:
            module.check(variant, model, PEER[model][f"{name}/{variant}"])


# --------------------------------------------------------------------------- #2957

def _mixed(frag_layout, small_loop, big_loop, write_variant=False) -> dict:
    loops = {"i[100]": small_loop, "i[256]": big_loop}
    if write_variant:
        loops["i[256]#2"] = big_loop
    return {"buffers": {"frag": frag_layout}, "loops": loops}


def test_mixed_extents_check_rejects_tilelang_and_accepts_a_covering_layout():
    module = case("mixed_extents")
    for model in ("register-count", "io-aware"):
        for variant in module.VARIANTS:
            with pytest.raises(AssertionError, match="cover"):
                module.check(variant, model, PEER[model][f"mixed_extents/{variant}"])
    good = frag("_i % 128", "_i // 128", [256])
    small = frag("_i % 128", "_i // 128", [100])
    module.check("read_100_to_256_t128", "register-count", _mixed(good, small, good))
    module.check("write_100_to_256_t128", "register-count", _mixed(good, small, good, True))


def test_mixed_extents_check_rejects_unowned_iterations():
    module = case("mixed_extents")
    good = frag("_i % 128", "_i // 128", [256])
    shifted = frag("(_i + 1) % 128", "_i // 128", [100])       # iteration i on the wrong thread
    with pytest.raises(AssertionError, match="does not hold frag"):
        module.check("read_100_to_256_t128", "register-count", _mixed(good, shifted, good))


def test_mixed_extents_write_must_reach_every_replica():
    module = case("mixed_extents")
    held = frag("_i % 64 + _rep * 64", "_i // 64", [256], rep=2)   # each element on two threads
    writer = frag("_i % 64", "_i // 64", [256])                     # ... written by only one
    small = frag("_i % 64", "_i // 64", [100])
    with pytest.raises(AssertionError, match="stale"):
        module.check("write_100_to_256_t128", "register-count", _mixed(held, small, writer, True))


# --------------------------------------------------------------------------- #3005

ELEMENTWISE = frag("_i % 4 * 32 + _j // 4", "_i // 4 * 4 + _j % 4", [64, 128])


def test_two_index_read_tilelang_crashes():
    for model in ("register-count", "io-aware"):
        assert "it->second.indices, indices" in PEER[model]["two_index_read/const_pair_64x128_t128"]["error"]
        assert "r: (i,) and (i + 1,)" in PEER[model]["two_index_read/adjacent_rows_64x128_t128"]["error"]


def test_two_index_read_check_accepts_full_replication():
    module = case("two_index_read")
    loops = {"i,j[64x128]": ELEMENTWISE}
    module.check("const_pair_64x128_t128", "io-aware",
                 {"buffers": {"s": frag("_rep", "_i", [2], rep=128)}, "loops": loops})
    module.check("adjacent_rows_64x128_t128", "io-aware",
                 {"buffers": {"r": frag("_rep", "_i", [65], rep=128)}, "loops": loops})


def test_two_index_read_check_rejects_partial_holders():
    module = case("two_index_read")
    loops = {"i,j[64x128]": ELEMENTWISE}
    with pytest.raises(AssertionError, match="replicate must be 128"):
        module.check("const_pair_64x128_t128", "register-count",
                     {"buffers": {"s": frag("_rep * 2 + _i", "0", [2], rep=64)}, "loops": loops})
    rows = frag("_i % 4 * 32 + _rep", "_i // 4", [65], rep=32)     # holds r[i], not r[i + 1]
    with pytest.raises(AssertionError, match=r"does not hold r"):
        module.check("adjacent_rows_64x128_t128", "register-count", {"buffers": {"r": rows}, "loops": loops})


# --------------------------------------------------------------------------- #2398

def test_ragged_extent_tilelang_finds_no_layout():
    for model in ("register-count", "io-aware"):
        for variant in case("ragged_extent").VARIANTS:
            assert "no available layout found" in PEER[model][f"ragged_extent/{variant}"]["error"]


def test_ragged_extent_check_accepts_a_predicated_layout_and_rejects_bad_ones():
    module = case("ragged_extent")
    good = frag("_j % 128", "_j // 128", [1, 229])
    module.check("loop_1x229_t128", "register-count", {"buffers": {"frag": good}, "loops": {"i,j[1x229]": good}})
    module.check("copy_1x229_t128", "register-count", {"buffers": {"frag": good}, "loops": {}})
    clash = frag("_j % 64", "_j // 128", [1, 229])                  # two columns share a register
    with pytest.raises(AssertionError, match="share one"):
        module.check("copy_1x229_t128", "register-count", {"buffers": {"frag": clash}, "loops": {}})
    short = frag("_j % 128", "_j // 128", [1, 128])
    with pytest.raises(AssertionError, match="cover"):
        module.check("loop_1x229_t128", "register-count", {"buffers": {"frag": good}, "loops": {"i,j[1x229]": short}})


# --------------------------------------------------------------------------- TileLang's examples/topk

def test_moe_topk_check_accepts_tilelang_and_rejects_owner_subsets_and_split_layouts():
    """TileLang's layouts pass; a row maximum kept by one owner per row (the element nests read it on every
    holder of the row) fails, and so does an ``expand_idx`` laid out unlike ``scores``."""
    import copy
    module = case("moe_topk")
    variant = "e128_k6_b64_t128"
    for model in ("register-count", "io-aware"):
        module.check(variant, model, PEER[model][f"moe_topk/{variant}"])
    good = PEER["register-count"][f"moe_topk/{variant}"]
    owner = copy.deepcopy(good)
    owner["buffers"]["max_val"] = frag("_i % 4 * 32 + _i // 4", "0", (64,), threads=128)
    with pytest.raises(AssertionError, match="max_val"):
        module.check(variant, "register-count", owner)
    split = copy.deepcopy(good)
    split["buffers"]["expand_idx"] = frag("_i // 2 * 2 + _j // 64", "_i % 2 * 64 + _j % 64", (64, 128), threads=128)
    with pytest.raises(AssertionError, match="expand_idx"):
        module.check(variant, "register-count", split)


# --------------------------------------------------------------------------- TileLang's examples/cast

def test_fp8_quantize_check_accepts_tilelang_and_rejects_a_dropped_pin_and_split_tiles():
    """TileLang's layouts pass (pinned and free); a plan that ignores the user's pin fails, and so does a
    quantised tile laid out unlike its source (a conversion inside the kernel)."""
    import copy
    module = case("fp8_quantize")
    for variant in module.VARIANTS:
        for model in ("register-count", "io-aware"):
            module.check(variant, model, PEER[model][f"fp8_quantize/{variant}"])
    pinned = PEER["register-count"]["fp8_quantize/b8_g128_t128_pinned"]
    free = PEER["register-count"]["fp8_quantize/b8_g128_t128"]
    with pytest.raises(AssertionError, match="pin"):
        module.check("b8_g128_t128_pinned", "register-count", free)
    split = copy.deepcopy(pinned)
    split["buffers"]["y_q8"] = copy.deepcopy(free["buffers"]["y_q8"])
    with pytest.raises(AssertionError, match="y_q8"):
        module.check("b8_g128_t128_pinned", "register-count", split)


# --------------------------------------------------------------------------- TileLang's examples/blocksparse_attention

def test_block_sparse_attention_matches_tilelang_and_its_dense_twin():
    """TileLang's layouts of its own example pass our check on sm_80 (on sm_90 TileLang binds them to the
    consumer warpgroup [128, 256), a mapping of its warp specialisation, not ours); a layout unlike the dense
    kernel's fails."""
    import copy
    from maint.peer.compare import load_peer_output
    module = case("block_sparse_attention")
    sm80 = load_peer_output(arch="sm_80")
    for variant in ("sm80_d64_b64x64_t128_causal", "sm80_d128_b128x128_t256"):
        for model in ("register-count", "io-aware"):
            theirs = sm80[model][f"block_sparse_attention/{variant}"]
            mine = {"buffers": theirs["buffers"],
                    "loops": {k: v for k, v in theirs["loops"].items() if k.count("#") == 0 or int(k.split("#")[1]) <= 4}}
            module.check(variant, model, mine)
    bad = copy.deepcopy(sm80["register-count"]["block_sparse_attention/sm80_d64_b64x64_t128_causal"])
    bad["buffers"]["Q_shared"] = bad["buffers"]["K_shared"] | {"input_shape": [64, 65]}
    with pytest.raises(AssertionError, match="Q_shared"):
        module.check("sm80_d64_b64x64_t128_causal", "register-count", bad)


# --------------------------------------------------------------------------- TileLang's deepseek_mla / flash_decoding combine

def test_split_kv_combine_check_accepts_tilelang_and_rejects_split_or_replicated_rows():
    """TileLang's layouts pass in every variant under both models; an accumulator laid out unlike the partial
    row (an exchange per split), a replicated row, and a layout given to a local scalar fail."""
    import copy
    module = case("split_kv_combine")
    for variant in module.VARIANTS:
        for model in ("register-count", "io-aware"):
            module.check(variant, model, PEER[model][f"split_kv_combine/{variant}"])
    good = PEER["register-count"]["split_kv_combine/mla_d512_s4_t128"]
    split = copy.deepcopy(good)
    split["buffers"]["o_accum_local"] = frag("_i % 128", "_i // 128", (512,))
    with pytest.raises(AssertionError, match="differ"):
        module.check("mla_d512_s4_t128", "register-count", split)
    replicated = copy.deepcopy(good)
    for name in ("po_local", "o_accum_local"):
        replicated["buffers"][name] = frag("_i // 8", "_i % 8", (512,), rep=2)
    with pytest.raises(AssertionError):
        module.check("mla_d512_s4_t128", "register-count", replicated)
    scalar = copy.deepcopy(good)
    scalar["buffers"]["scale_local"] = frag("0", "0", (1,))
    with pytest.raises(AssertionError, match="scale_local"):
        module.check("mla_d512_s4_t128", "register-count", scalar)


# --------------------------------------------------------------------------- TileLang's dequantize_gemm

def test_dequant_gemm_equals_tilelang_and_check_rejects_a_moved_packed_tile():
    """On sm_80 TileLang's B_local, B_dequantize_local and Ct_local equal our snapshots as mappings and its
    multi-buffered A_shared equals ours stage by stage; on sm_90a its fragments are ours shifted to the
    consumer warpgroup [128, 256). Our check accepts TileLang's sm_80 layouts and fails a packed tile held
    apart from the nibbles it unpacks into, and an operand outside the PTX lanes."""
    import copy
    import json

    import numpy as np

    from maint import snapshot
    from maint.peer.compare import flat_offsets
    module = case("dequant_gemm")
    ours = json.loads((ROOT / "expected" / "dequant_gemm.json").read_text())
    fragments = ("B_local", "B_dequantize_local", "Ct_local")
    for arch, variants in (("sm_80", ("sm80_b128x128x32_s3_t128", "sm80_b64x64x64_s2_t128")),
                           ("sm_90a", ("sm90a_b128x128x32_s3_t128",))):
        peer = load_peer_output(arch=arch)
        for variant in variants:
            for model in ("register-count", "io-aware"):
                theirs, mine = peer[model][f"dequant_gemm/{variant}"], ours[variant][model]
                for name in fragments:
                    t = copy.deepcopy(theirs["buffers"][name])
                    if arch == "sm_90a":
                        assert t["thread_range"][0] == 128, f"{variant}: TileLang no longer warp-specialises {name}"
                        t["thread_range"] = [0, t["thread_range"][1]]
                    assert snapshot.compare_mapping(t, mine["buffers"][name]) == snapshot.SAME, (variant, model, name)
                stages = theirs["buffers"]["A_shared"]["input_shape"][0]
                staged = flat_offsets(theirs["buffers"]["A_shared"]).reshape(stages, -1)
                single = flat_offsets(mine["buffers"]["A_shared"]).reshape(-1)
                for s in range(stages):
                    assert np.array_equal(staged[s] - s * single.size, single), (variant, model, s)
                if arch == "sm_80":
                    module.check(variant, model, {"buffers": {**theirs["buffers"], "A_shared": mine["buffers"]["A_shared"]},
                                                  "loops": {k: v for k, v in theirs["loops"].items() if "#" not in k}})
    good = ours["sm80_b64x64x64_s2_t128"]["register-count"]
    moved = copy.deepcopy(good)
    moved["buffers"]["B_local"] = frag("_i % 32 * 4 + _j // 8", "_i // 32 * 8 + _j % 8", (64, 32))
    with pytest.raises(AssertionError, match="B_local"):
        module.check("sm80_b64x64x64_s2_t128", "register-count", moved)
    lanes = copy.deepcopy(good)
    lanes["buffers"]["B_dequantize_local"]["forward_thread"] = "_rep * 64 + _i // 32 * 32 + _i % 8 * 4 + _j % 4"
    with pytest.raises(AssertionError, match="B_dequantize_local|PTX"):
        module.check("sm80_b64x64x64_s2_t128", "register-count", lanes)
