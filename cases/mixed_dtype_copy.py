"""A copy that widens on the way in: fp16 (or bf16) global -> fp32 fragment -> fp32 global.

The fragment's elements are twice as wide as the loaded ones. A converting load into registers takes its
lanes from the memory side (``hardware.lanes_for_bits``): 8 fp16 lanes, one 128-bit load, converted into
two register vectors' worth of fp32. Under register-count the 8-wide split wins (TileLang's); the io-aware
model also scores the fp32 store, which under the 8-wide split moves each 128-bit vector at a 32-byte
stride (twice the segments), and keeps the 4-wide split. ``run.py --anchor`` checks the emitted lanes
against this table and against the scored width.
"""
import numpy as np
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

TILELANG = """TileLang 0.1.15 (sm_90), both models: the 8-wide split of the fp16 side for the fp32
fragment (fp16 128x128/128 threads: thread `_i % 8 * 16 + _j // 8`, index `_i // 8 * 8 + _j % 8`;
bf16 64x256/256: `_i % 8 * 32 + _j // 8`). Register-count matches it (an 8-lane, 128-bit converting load).
io-aware differs by its cost: the fp32 store of the 8-wide split moves each 128-bit vector at a 32-byte
stride (2x the segments of the 4-wide split `_i % 4 * 32 + _j // 4` at 128x128), which outweighs the
halved load instructions, so it keeps the 4-wide split (4-lane loads, coalesced stores)."""


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
    "fp16_to_fp32_128x128_t128": {"io-aware": {"A": 4, "B": 4}, "register-count": {"A": 8, "B": 4}},
    "bf16_to_fp32_64x256_t256": {"io-aware": {"A": 4, "B": 4}, "register-count": {"A": 8, "B": 4}},
}


def _reference(inputs: dict) -> dict:
    return {"B": np.asarray(inputs["A"], dtype=np.float32)}


REFERENCE = {name: _reference for name in VARIANTS}


def check(variant, model, result):
    frag = result["buffers"]["acc"]
    assert frag["replicate"] == 1, f"a widening copy needs no replication: {frag}"
