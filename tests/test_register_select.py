"""Register reads at a runtime index become selects over constant slots (``passes/lowering/register_select.py``).

An index that depends on the thread (a fully replicated fragment read at a row spread over the warps) or on a
loop that must stay rolled (block-sparse attention's mask, read by the loop that holds the attention step)
would put the whole per-thread array in local memory: a stack frame with no spills reported. The structural
checks run everywhere and can fail (without the pass the runtime index is there); the kernels run on the CPU
under the race detector against numpy; the ptxas checks compile the cases that had stack frames and need nvcc."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import TensorLoad

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from maint.case_loader import load_case  # noqa: E402
from tilelayout.passes.lowering.pipeline import check_case, check_numeric, lower_func  # noqa: E402

CASES = ROOT / "cases"
SM80 = {"kind": "cuda", "arch": "sm_80"}

#: (case, variant): the kernels whose register arrays were read at a runtime index
CASES_WITH_RUNTIME_INDEX = [
    ("two_index_read", "adjacent_rows_64x128_t128"),
    ("register_spill", "m64_n128_t128"),
    ("block_sparse_attention", "sm80_d64_b64x64_t128_causal"),
    ("block_sparse_attention", "sm80_d128_b128x128_t256"),
]


def _loop_vars(func, kinds) -> set:
    found: set = set()
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda f: found.add(f.loop_var) if f.kind in kinds else None))
    return found


def runtime_register_reads(func) -> list:
    """Register reads whose index is not a constant once the unrolled and vectorized loops are expanded."""
    fixed = _loop_vars(func, (tirx.ForKind.UNROLLED, tirx.ForKind.VECTORIZED))
    out: list = []

    def on_load(e):
        if not tirx.is_buffer_var(e.source) or not str(e.source.scope()).startswith("local"):
            return
        if str(e.source.scope()) == "local.var":
            return
        free: list = []
        for i in e.indices:
            tvm_ffi.structural_walk(i, (tirx.Var, lambda v: free.append(v) if v not in fixed else None))
        if free:
            out.append(f"{e.source.name}[{', '.join(str(i) for i in e.indices)}]")
    tvm_ffi.structural_walk(func.body, (TensorLoad, on_load))
    return out


@pytest.mark.parametrize("case, variant", CASES_WITH_RUNTIME_INDEX[:3])
def test_no_register_read_keeps_a_runtime_index(case, variant):
    func = load_case(CASES, case).VARIANTS[variant]()
    lowered = lower_func(func, SM80)
    assert runtime_register_reads(lowered) == []


def test_without_the_pass_the_reads_keep_their_runtime_index(monkeypatch):
    """The check above can fail: the partitioned loop reads ``r`` at ``(tx >> 5) + 4 k``."""
    import tilelayout.passes.lowering.register_select as select
    monkeypatch.setattr(select, "select_register_reads", lambda f: f)
    func = load_case(CASES, "two_index_read").VARIANTS["adjacent_rows_64x128_t128"]()
    assert runtime_register_reads(lower_func(func, SM80))


def _parse(text: str):
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx})


ROLLED_MASK = '''
@T.prim_func
def main(A: T.Buffer((6, 64), "float32"), F: T.Buffer((6,), "int32"), B: T.Buffer((64,), "float32")):
    tx = T.launch_thread("threadIdx.x", 64)
    flags = T.alloc_buffer((6,), "int32", scope="local")
    for v in T.serial(6):
        flags[v] = F[v]
    for k in T.serial(6):
        if flags[k] > 0:
            B[tx] = B[tx] + A[k, tx] * T.float32(flags[k])
            T.tvm_storage_sync("shared")
'''


def test_a_rolled_loop_reads_its_flag_through_a_select_and_matches_numpy():
    """Six flags, read by a loop holding a barrier (it stays rolled): every read selects among the six slots;
    on the CPU the kernel adds exactly the flagged rows, each weighted by its flag."""
    func = _parse(ROLLED_MASK)
    lowered = lower_func(func, SM80)
    assert runtime_register_reads(lowered) == []

    def reference(d):
        f = d["F"].astype(np.float32)
        return {"B": d["B"] + ((f > 0)[:, None] * f[:, None] * d["A"]).sum(axis=0)}
    res = check_numeric(func, reference, target=SM80)
    assert res.ok, res.message


@pytest.mark.parametrize("case, variant", CASES_WITH_RUNTIME_INDEX[:2] + [("row_scan", "cumsum_reverse_f32_64x32_t128")])
def test_selected_reads_match_their_reference(case, variant):
    """(The reverse scan indexes its registers through a ``Let``: inlined before the index is split.)"""
    res = check_case(load_case(CASES, case), variant, target=tvm.target.Target(SM80))
    assert res.ok, res.message


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: ptxas figures need it")
@pytest.mark.parametrize("case, variant", CASES_WITH_RUNTIME_INDEX, ids=["/".join(c) for c in CASES_WITH_RUNTIME_INDEX])
def test_ptxas_reports_no_stack_frame_and_no_spills(case, variant):
    from maint.bench_codegen import compile_stats
    from tilelayout.passes.lowering.pipeline import lower, lowered_cuda_source
    target = tvm.target.Target(SM80)
    source = lowered_cuda_source(lower(load_case(CASES, case).VARIANTS[variant](), target), target)
    stats = compile_stats(source, "sm_80")
    assert stats.stack_frame == 0 and stats.spill_stores == 0 and stats.spill_loads == 0, f"{case}/{variant}: {stats}"
