"""Global -> fragment -> global round trip, the baseline.

Both copies want the same thing: the last axis split into a per-thread vector run and coalesced
lanes. Both cost models must agree on that layout with no replication; any model change that
perturbs it is a regression in the simplest kernel there is.
"""
from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

TILELANG = """TileLang 0.1.15 (sm_90), both models: fp16 128x128/128 threads -> thread
`_i % 8 * 16 + _j // 8`, index `_i // 8 * 8 + _j % 8`; fp32 64x256/256 -> `_i % 4 * 64 + _j // 4`,
`_i // 4 * 4 + _j % 4`. Correct; we must match."""


def roundtrip(m: int, n: int, dtype: str, threads: int, staged: bool = False, transposed: bool = False):
    """``A -> frag -> B``; with ``staged`` A goes through a shared tile ``smem`` first (``shared_staging``), with
    ``transposed`` a loop stores ``B[j, i] = frag[i, j]`` (``transposed_store``)."""
    out = (n, m) if transposed else (m, n)

    @T.prim_func
    def kernel(A: T.Buffer((m, n), dtype), B: T.Buffer(out, dtype)):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        if staged:
            smem = T.alloc_buffer((m, n), dtype, scope="shared")
        frag = T.alloc_buffer((m, n), dtype, scope="local.fragment")
        if staged:
            Tx.copy(smem[0:m, 0:n], A[0:m, 0:n])
            Tx.copy(frag[0:m, 0:n], smem[0:m, 0:n])
        else:
            Tx.copy(frag[0:m, 0:n], A[0:m, 0:n])
        if transposed:
            for i in T.parallel(m):
                for j in T.parallel(n):
                    B[j, i] = frag[i, j]
        else:
            Tx.copy(B[0:m, 0:n], frag[0:m, 0:n])
    return kernel


VARIANTS = {
    "fp16_128x128_t128": lambda: roundtrip(128, 128, "float16", 128),
    "fp32_64x256_t256": lambda: roundtrip(64, 256, "float32", 256),
}

VECTOR_ANCHOR = {
    "fp16_128x128_t128": {"io-aware": {"A": 8, "B": 8}, "register-count": {"A": 8, "B": 8}},
    "fp32_64x256_t256": {"io-aware": {"A": 4, "B": 4}, "register-count": {"A": 4, "B": 4}},
}


def check(variant, model, result):
    assert result["buffers"]["frag"]["replicate"] == 1, f"a round trip needs no replication: {result['buffers']['frag']}"
