"""Global -> shared -> fragment -> global.

The shared-to-fragment copy is outside the io model (only fragment <-> global statements are
charged), so the fragment's layout is decided by the copy-out alone. A model that starts charging
shared traffic, or a shared layout that starts constraining the fragment, shows up here first.
"""
from cases.elementwise_copy import roundtrip

TILELANG = """TileLang 0.1.15 (sm_90), both models: fp16 64x64 -> frag `_i % 16 * 8 + _j // 8` /
`_i // 16 * 8 + _j % 8`; fp32 128x128 -> `_i % 4 * 32 + _j // 4` / `_i // 4 * 4 + _j % 4`. smem gets
no layout entry."""


def _staged(m: int, n: int, dtype: str, threads: int):
    return roundtrip(m, n, dtype, threads, staged=True)


VARIANTS = {
    "fp16_64x64_t128": lambda: _staged(64, 64, "float16", 128),
    "fp32_128x128_t128": lambda: _staged(128, 128, "float32", 128),
}


def check(variant, model, result):
    assert result["buffers"]["frag"]["replicate"] == 1, f"a staged round trip needs no replication: {result['buffers']['frag']}"
