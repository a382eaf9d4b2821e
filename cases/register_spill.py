"""A fragment read at two rows by a register-only loop: ``y[i, j] = x[i, j] * (r[i + 1] - r[i])``.

Pins the io-aware model's local-memory spill term (TileLang's documentation claims one; its code has
none). ``r`` is read at two indices, so it is fully replicated (#3005 behaviour); under the coalesced
loop layout its register slot (the row ``i``) then depends on the thread index, which registers cannot
do directly: the model charges every access as local-memory traffic. ``check`` re-scores the recorded
layouts with the io-aware statements and requires exactly that spill, and no other. (The lowering reads
such a slot through a select over the four warps' rows, ``register_select.py``, so the generated code keeps
``r`` in registers at the price of the selects; the model's charge stands for that extra cost.)
"""
import functools

from tvm.script import tirx as T
from tvm.tirx.script import tile as Tx

from cases import _support

TILELANG = """TileLang 0.1.15 cannot compile this kernel: a fragment read at two different indices in one
T.Parallel loop hits the internal check of #3005 (`StructuralEqual()(it->second.indices, indices)`)."""


def spill_kernel(m: int, n: int, threads: int):
    @T.prim_func
    def kernel(V: T.Buffer((m + 1,), "float32"), A: T.Buffer((m, n), "float32"), B: T.Buffer((m, n), "float32")):
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", threads)
        r = T.alloc_buffer((m + 1,), "float32", scope="local.fragment")
        x = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        y = T.alloc_buffer((m, n), "float32", scope="local.fragment")
        Tx.copy(r[0:m + 1], V[0:m + 1])
        Tx.copy(x[0:m, 0:n], A[0:m, 0:n])
        for i in T.parallel(m):
            for j in T.parallel(n):
                y[i, j] = x[i, j] * (r[i + 1] - r[i])
        Tx.copy(B[0:m, 0:n], y[0:m, 0:n])
    return kernel


VARIANTS = {
    "m64_n128_t128": lambda: spill_kernel(64, 128, 128),
}


@functools.lru_cache(maxsize=None)
def _kernel(variant: str):
    """The variant's kernel, parsed once per process: ``check`` runs under both cost models, and TVMScript
    parsing costs more than the check (IR is immutable, so sharing it is safe)."""
    return VARIANTS[variant]()


def spilled_buffers(variant: str, result: dict) -> dict:
    """{buffer: spill bytes} the io-aware statements charge under the recorded layouts."""
    from tilelayout import layout_from_dict
    from tilelayout.passes.inference.cost_models.io_aware import component_statements, spill_bytes
    from tilelayout.passes.inference.frontend import build_op_graph
    graph = build_op_graph(_kernel(variant))
    layouts = {name: layout_from_dict(d) for name, d in result["buffers"].items()}
    loops = {op.index: layout_from_dict(result["loops"][op.key]) for op in graph.parallel_ops()}
    out = {}
    for st in component_statements(graph.ops, layouts, loops, graph):
        for name, _ in st.spill_accesses:
            out[name] = out.get(name, 0) + spill_bytes(st, 32)
    return out


def check(variant, model, result):
    _support.assert_replicate("r", result["buffers"]["r"], 128)
    (key,) = result["loops"]
    loop = result["loops"][key]
    _support.assert_covers(key, loop)
    _support.assert_owned(key, loop, "r", result["buffers"]["r"], lambda i, j: (i,))
    _support.assert_owned(key, loop, "r", result["buffers"]["r"], lambda i, j: (i + 1,))
    spills = spilled_buffers(variant, result)
    assert set(spills) == {"r"} and spills["r"] > 0, f"r (row-indexed, thread-dependent slot) must be charged as a spill: {spills}"
