"""fp8 round trip: one-byte elements, the widest vector (16 lanes in 128 bits).

Pins that the shared width policy reaches 16 elements at the narrow end of the dtype range and
that neither model replicates the fragment.
"""
from cases.elementwise_copy import roundtrip

TILELANG = """TileLang 0.1.15 (sm_90), both models: 128x256/128 threads -> thread `_i % 8 * 16 + _j // 16`,
index `_i // 8 * 16 + _j % 16`; 64x128/64 -> `_i % 8 * 8 + _j // 16`, `_i // 8 * 16 + _j % 16`.
(TileLang's `float8_e4m3` is TVM's `float8_e4m3fn`; layout only depends on the byte width.)"""

DTYPE = "float8_e4m3fn"


def _roundtrip(m: int, n: int, threads: int):
    return roundtrip(m, n, DTYPE, threads)


VARIANTS = {
    "128x256_t128": lambda: _roundtrip(128, 256, 128),
    "64x128_t64": lambda: _roundtrip(64, 128, 64),
}

# the 16-lane (128-bit) width of 1-byte elements, as TileLang's harness anchors it
VECTOR_ANCHOR = {
    "128x256_t128": {"io-aware": {"A": 16, "B": 16}, "register-count": {"A": 16, "B": 16}},
    "64x128_t64": {"io-aware": {"A": 16, "B": 16}, "register-count": {"A": 16, "B": 16}},
}


def check(variant, model, result):
    assert result["buffers"]["frag"]["replicate"] == 1, f"a round trip needs no replication: {result['buffers']['frag']}"
