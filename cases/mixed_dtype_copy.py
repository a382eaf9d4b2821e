"""A copy that widens on the way in: fp16 (or bf16) global -> fp32 fragment -> fp32 global.

The fragment's elements are twice as wide as the loaded ones, so one 128-bit register-side vector holds
4 fp32 values: the load of A can only be 4 lanes wide although 8 fp16 lanes would fit a 128-bit load.
The io-aware model must score the width the vectorizer emits (4), not the width of the global side alone
(8); ``run.py --anchor`` checks the emitted lanes against this table and against the scored width.
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

TILELANG = """TileLang 0.1.15 (sm_90), both models: the 8-wide split of the fp16 side for the fp32
fragment (fp16 128x128/128 threads: thread `_i % 8 * 16 + _j // 8`, index `_i // 8 * 8 + _j % 8`;
bf16 64x256/256: `_i % 8 * 32 + _j // 8`). We differ: our vectorizer caps an access at one 128-bit
vector of the widest element it moves (4 fp32 lanes), so the 4-wide split (`_i % 4 * 32 + _j // 4`
at 128x128) is what it emits and what the io model scores; both are coalesced (ratio 1.00). TileLang's
split would let a converting load read 8 fp16 (128 bits) at once; our vectorizer does not split one
load across two register vectors (a stated limit)."""


def _widening_copy(m: int, n: int, src: str, threads: int):
    @T.prim_func
    def kernel(A: T.Buffer((m, n), src), B: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        acc = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        Tx.copy(acc[0:m, 0:n], A[0:m, 0:n])
        Tx.copy(B[0:m, 0:n], acc[0:m, 0:n])
    return kernel


VARIANTS = {
    "fp16_to_fp32_128x128_t128": lambda: _widening_copy(128, 128, "float16", 128),
    "bf16_to_fp32_64x256_t256": lambda: _widening_copy(64, 256, "bfloat16", 256),
}

VECTOR_ANCHOR = {
    "fp16_to_fp32_128x128_t128": {"io-aware": {"A": 4, "B": 4}, "register-count": {"A": 4, "B": 4}},
    "bf16_to_fp32_64x256_t256": {"io-aware": {"A": 4, "B": 4}, "register-count": {"A": 4, "B": 4}},
}


def _reference(inputs: dict) -> dict:
    return {"B": np.asarray(inputs["A"], dtype=np.float32)}


REFERENCE = {name: _reference for name in VARIANTS}


def check(variant, model, result):
    frag = result["buffers"]["acc"]
    assert frag["replicate"] == 1, f"a widening copy needs no replication: {frag}"
