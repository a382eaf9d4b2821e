"""Coalesced load, transposed store: the two statements pull the layout apart.

``A -> frag`` is coalesced along ``j``; the loop stores ``B[j, i]``, coalesced along ``i``. No layout
serves both. Register count cannot tell the candidates apart (same slot count), io-aware weighs
the transactions: for fp32 it gives each thread a column (`_j` / `_i`), for fp16 the load side
wins. The goldens are the expectation; a diff between the models is the signal.
"""
from cases import _support
from cases.elementwise_copy import roundtrip

TILELANG = """TileLang 0.1.15 (sm_90). fp32 128x128: io-aware frag and loop thread `_j`, index `_i`;
register-count `_i % 4 * 32 + _j // 4` / `_i // 4 * 4 + _j % 4`. fp16 64x256: both models
`_i % 4 * 32 + _j // 8` / `_i // 4 * 8 + _j % 8`."""


def _transposed(m: int, n: int, dtype: str, threads: int):
    return roundtrip(m, n, dtype, threads, transposed=True)


VARIANTS = {
    "fp32_128x128_t128": lambda: _transposed(128, 128, "float32", 128),
    "fp16_64x256_t128": lambda: _transposed(64, 256, "float16", 128),
}

VECTOR_ANCHOR = {
    "fp32_128x128_t128": {"io-aware": {"A": 1, "B": 4}, "register-count": {"A": 4, "B": 1}},
    "fp16_64x256_t128": {"io-aware": {"A": 8, "B": 1}, "register-count": {"A": 8, "B": 1}},
}


def check(variant, model, result):
    frag = result["buffers"]["frag"]
    _support.assert_replicate("frag", frag, 1)
    for key, loop in result["loops"].items():
        _support.assert_covers(key, loop)
        _support.assert_owned(key, loop, "frag", frag, lambda i, j: (i, j))
