"""TileLang's golden layouts for the eight original cases (TileLang's golden summary of its harness).

``GOLDENS[case][variant][model][name] = (forward_thread, forward_index, replicate)`` where ``name`` is
a buffer name or a loop key (loop keys contain ``[``). Expressions are TileLang's printed form;
every fragment's thread range is ``[0, threads of the variant]``. These are facts about TileLang
0.1.15 on sm_90 (confirmed by ``maint/peer``); our snapshots must equal them as mappings (by
enumeration), not necessarily as strings. The bug cases have no entry here: TileLang is wrong there.
"""
from __future__ import annotations

RC, IO = "register-count", "io-aware"


def _both(entries: dict) -> dict:
    """The same layouts under both models."""
    return {RC: entries, IO: entries}


# frequently used (thread, index) pairs
_F16_128 = ("_i % 8 * 16 + _j // 8", "_i // 8 * 8 + _j % 8")       # fp16, 128 threads, 128-wide rows
_F32_T128 = ("_i % 4 * 32 + _j // 4", "_i // 4 * 4 + _j % 4")      # fp32 4-vectors, 32 per row, 128 threads
_F32_T256 = ("_i % 4 * 64 + _j // 4", "_i // 4 * 4 + _j % 4")      # fp32 4-vectors, 64 per row, 256 threads
_F16_64W = ("_i % 16 * 8 + _j // 8", "_i // 16 * 8 + _j % 8")      # fp16 64-wide rows, 128 threads


def _unrep(pair: tuple) -> tuple:
    return (*pair, 1)


THREADS = {
    "elementwise_copy": {"fp16_128x128_t128": 128, "fp32_64x256_t256": 256},
    "fp8_copy": {"128x256_t128": 128, "64x128_t64": 64},
    "broadcast_read": {"issue1729_2x2560_t256": 256, "rows4_cols1024_t128": 128},
    "transposed_store": {"fp32_128x128_t128": 128, "fp16_64x256_t128": 128},
    "mixed_dtype_chain": {"128x128_t128": 128, "64x512_t256": 256},
    "reduce_broadcast": {"64x128_t128": 128, "128x256_t256": 256},
    "offset_region_copy": {"fp16_tile64x64_t128": 128, "fp32_tile32x128_t128": 128},
    "shared_staging": {"fp16_64x64_t128": 128, "fp32_128x128_t128": 128},
}

GOLDENS: dict = {
    "elementwise_copy": {
        "fp16_128x128_t128": _both({"frag": _unrep(_F16_128)}),
        "fp32_64x256_t256": _both({"frag": _unrep(_F32_T256)}),
    },
    "fp8_copy": {
        "128x256_t128": _both({"frag": ("_i % 8 * 16 + _j // 16", "_i // 8 * 16 + _j % 16", 1)}),
        "64x128_t64": _both({"frag": ("_i % 8 * 8 + _j // 16", "_i // 8 * 16 + _j % 16", 1)}),
    },
    "broadcast_read": {
        "issue1729_2x2560_t256": {
            RC: {"s_frag": ("_rep * 2 + _i", "0", 128),
                 "i,j[2x2560]": ("_rep * 2 + _i", "_j", 128)},
            IO: {"s_frag": ("_rep", "_i", 256),
                 "i,j[2x2560]": ("(_i * 640 + _j // 4) % 256", "(_i * 640 + _j // 4) // 256 * 4 + _j % 4", 1)},
        },
        "rows4_cols1024_t128": {
            RC: {"s_frag": ("_rep * 4 + _i", "0", 32),
                 "i,j[4x1024]": ("_rep * 4 + _i", "_j", 32)},
            IO: {"s_frag": ("_rep", "_i", 128),
                 "i,j[4x1024]": ("_j % 512 // 4", "_i * 8 + _j // 512 * 4 + _j % 4", 1)},
        },
    },
    "transposed_store": {
        "fp32_128x128_t128": {
            RC: {"frag": _unrep(_F32_T128), "i,j[128x128]": _unrep(_F32_T128)},
            IO: {"frag": ("_j", "_i", 1), "i,j[128x128]": ("_j", "_i", 1)},
        },
        "fp16_64x256_t128": _both({
            "frag": ("_i % 4 * 32 + _j // 8", "_i // 4 * 8 + _j % 8", 1),
            "i,j[64x256]": ("_i % 4 * 32 + _j // 8", "_i // 4 * 8 + _j % 8", 1),
        }),
    },
    "mixed_dtype_chain": {
        "128x128_t128": {
            RC: {n: _unrep(_F16_128) for n in ("x16", "x32", "i,j[128x128]")},
            IO: {n: _unrep(_F32_T128) for n in ("x16", "x32", "i,j[128x128]")},
        },
        "64x512_t256": {
            RC: {n: ("_i % 4 * 64 + _j // 8", "_i // 4 * 8 + _j % 8", 1) for n in ("x16", "x32", "i,j[64x512]")},
            IO: {n: ("_i % 2 * 128 + _j // 4", "_i // 2 * 4 + _j % 4", 1) for n in ("x16", "x32", "i,j[64x512]")},
        },
    },
    "reduce_broadcast": {
        "64x128_t128": _both({
            **{n: _unrep(_F32_T128) for n in ("x", "y", "i,j[64x128]")},
            "row_max": ("_i % 4 * 32 + _rep", "_i // 4", 32),
        }),
        "128x256_t256": _both({
            **{n: _unrep(_F32_T256) for n in ("x", "y", "i,j[128x256]")},
            "row_max": ("_i % 4 * 64 + _rep", "_i // 4", 64),
        }),
    },
    "offset_region_copy": {
        "fp16_tile64x64_t128": _both({"frag": _unrep(_F16_64W)}),
        "fp32_tile32x128_t128": _both({"frag": _unrep(_F32_T128)}),
    },
    "shared_staging": {
        "fp16_64x64_t128": _both({"frag": _unrep(_F16_64W)}),
        "fp32_128x128_t128": _both({"frag": _unrep(_F32_T128)}),
    },
}


def golden_dict(case: str, variant: str, model: str, name: str, input_shape: list) -> dict:
    """The golden entry as a ``to_dict``-shaped Fragment dict (output shape left to the reader)."""
    thread, index, rep = GOLDENS[case][variant][model][name]
    threads = THREADS[case][variant]
    return {"kind": "Fragment", "input_shape": list(input_shape), "forward_thread": thread,
            "forward_index": [index], "replicate": rep, "threads": threads, "thread_range": [0, threads]}
