"""Fragments stay in registers (``passes/lowering/unroll_registers.py``): every loop whose variable indexes a
per-thread array is unrolled, so ptxas sees constant slots. A runtime index moves the array to local memory
(a stack frame, with no spill reported), so the nvcc checks read the stack frame, not only the spills.

The structural checks run everywhere; the ptxas checks compile a few representative kernels (a 512-element
fragment over 32 threads, a full row softmax, an elementwise kernel with named indices, an mma chain, a
flash-attention step) and need nvcc."""
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

from maint.bench_kernels import softmax  # noqa: E402  (the row softmax benchmark kernel, at any shape)
from maint.case_loader import load_case  # noqa: E402
from tilelayout.passes.lowering.pipeline import check_case, check_numeric, lower_func  # noqa: E402
from conftest import kernel_warnings  # noqa: E402
from test_index_binds import NAMED, _add as named_index_add  # noqa: E402  (the index-binds add kernel)


@pytest.fixture(autouse=True)
def _oversized_kernels_warn_by_design():
    """The 512-element fragment and the wide softmaxes are sized past the register budget on purpose."""
    with kernel_warnings():
        yield
from tilelayout.passes.lowering.unroll_registers import unroll_register_loops  # noqa: E402

CASES = ROOT / "cases"
SM80 = {"kind": "cuda", "arch": "sm_80"}


def _parse(text: str):
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    return tvm.script.from_source(text, extra_vars={"T": T, "Tx": Tx})


def _softmax_ref(inputs: dict) -> dict:
    a = inputs["A"].astype(np.float64)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return {"B": (e / e.sum(axis=1, keepdims=True)).astype(np.float32)}


def rolled_register_loops(func) -> list:
    """Serial loops of constant extent left rolled whose own variable indexes a per-thread array."""
    found: list = []

    def on_for(f):
        if f.kind != tirx.ForKind.SERIAL or not isinstance(f.extent, tirx.IntImm):
            return
        hits: list = []

        def check(buf, indices):
            if str(buf.scope()).startswith("local") and any(
                    _mentions(i, f.loop_var) for i in indices):
                hits.append(str(buf.name))
        tvm_ffi.structural_walk(f.body, (tirx.BufferStore, lambda s: check(s.buffer, s.indices)))
        tvm_ffi.structural_walk(f.body, (TensorLoad, lambda e: check(e.source, e.indices)
                                         if tirx.is_buffer_var(e.source) else None))
        if hits:
            found.append((str(f.loop_var), sorted(set(hits))))
    tvm_ffi.structural_walk(func.body, (tirx.For, on_for))
    return found


def _mentions(expr, var) -> bool:
    hit: list = []
    tvm_ffi.structural_walk(expr, (tirx.Var, lambda v: hit.append(1) if v.same_as(var) else None))
    return bool(hit)


def test_the_512_element_fragment_and_softmax_loops_are_unrolled():
    owner = load_case(CASES, "reduce_owner_subset").VARIANTS["sum_128x128_t32"]()
    for func in (owner, softmax(128, 256, 256)):
        lowered = lower_func(func, SM80)
        assert rolled_register_loops(lowered) == [], rolled_register_loops(lowered)


def test_without_the_pass_the_loops_index_registers_at_run_time(monkeypatch):
    """The check above can fail: the partitioned nests themselves leave register-indexing loops rolled."""
    import tilelayout.passes.lowering.unroll_registers as unroll
    monkeypatch.setattr(unroll, "unroll_register_loops", lambda f: f)
    lowered = lower_func(softmax(128, 256, 256), SM80)
    assert rolled_register_loops(lowered)


def test_a_main_loop_stays_rolled():
    """A main loop whose variable reads a per-thread flag (block-sparse attention's mask) holds barriers:
    it stays rolled (its body per iteration would be copied); the loop filling the flags is unrolled."""
    func = _parse('''
@T.prim_func
def main(A: T.Buffer((4, 64), "float32"), F: T.Buffer((4,), "int32"), B: T.Buffer((64,), "float32")):
    tx = T.launch_thread("threadIdx.x", 1)
    flags = T.alloc_buffer((4,), "int32", scope="local")
    acc = T.alloc_buffer((1,), "float32", scope="local")
    for v in T.serial(4):
        flags[v] = F[v]
    acc[0] = T.float32(0)
    for k in T.serial(4):
        if flags[k] > 0:
            for e in T.serial(64):
                B[e] = B[e] + A[k, e]
            T.tvm_storage_sync("shared")
''')
    out = unroll_register_loops(func)
    kinds: dict = {}
    tvm_ffi.structural_walk(out.body, (tirx.For, lambda f: kinds.__setitem__(str(f.loop_var), int(f.kind))))
    assert kinds == {"v": int(tirx.ForKind.UNROLLED), "k": int(tirx.ForKind.SERIAL), "e": int(tirx.ForKind.SERIAL)}


@pytest.mark.parametrize("m, n, threads", [(128, 256, 256), (64, 128, 32)])
def test_unrolled_softmax_matches_numpy(m, n, threads):
    res = check_numeric(softmax(m, n, threads), _softmax_ref, target=SM80, tolerance=(1e-5, 1e-6))
    assert res.ok, res.message


def test_the_512_element_fragment_case_matches_its_reference():
    module = load_case(CASES, "reduce_owner_subset")
    res = check_case(module, "sum_128x128_t32", target=tvm.target.Target(SM80))
    assert res.ok, res.message


# ------------------------------------------------------------------------------------------------ ptxas

def _ptxas_kernels():
    """(label, kernel, arch): a handful of shapes that once had stack frames, or stand for a family."""
    return [
        ("reduce_owner_subset/sum_128x128_t32", lambda: load_case(CASES, "reduce_owner_subset").VARIANTS[
            "sum_128x128_t32"](), "sm_80"),
        ("softmax 128x256 t256", lambda: softmax(128, 256, 256), "sm_90a"),
        ("named-index add fp16", lambda: named_index_add(NAMED, "float16"), "sm_80"),
        ("flash_attention/sm80_d64_b64x64_t128", lambda: load_case(CASES, "flash_attention").VARIANTS[
            "sm80_d64_b64x64_t128"](), "sm_80"),
    ]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: ptxas figures need it")
@pytest.mark.parametrize("label, make, arch", _ptxas_kernels(), ids=[k[0] for k in _ptxas_kernels()])
def test_ptxas_reports_no_stack_frame_and_no_spills(label, make, arch):
    from maint.bench_codegen import compile_stats
    from tilelayout.passes.hardware import func_target
    from tilelayout.passes.lowering.pipeline import lower, lowered_cuda_source
    func = make()
    target = tvm.target.Target(func_target(func, None) or {"kind": "cuda", "arch": arch})
    source = lowered_cuda_source(lower(func, target), target)
    stats = compile_stats(source, str(target.attrs["arch"]))
    assert stats.clean, f"{label}: {stats}"
    if label.startswith("named"):
        assert "*(uint4*)(A_ptr" in source and "*(uint4*)(C_ptr" in source, "named indices must load 128 bits"


PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'kernel_kernel' for 'sm_80'
ptxas info    : Function properties for kernel_kernel
    2608 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 66 registers, used 0 barriers, 1024 bytes smem, 360 bytes cmem[0]
"""


def test_ptxas_figures_are_read_from_its_report():
    from maint.bench_codegen import ptxas_stats
    stats = ptxas_stats(PTXAS)
    assert (stats.registers, stats.stack_frame, stats.spill_stores, stats.static_smem) == (66, 2608, 0, 1024)
    assert not stats.clean
    with pytest.raises(RuntimeError, match="no register"):
        ptxas_stats("ptxas info    : 0 bytes gmem")


def test_a_loop_past_the_unroll_budget_stays_rolled():
    """Every thread visiting a 64x32 tile under an owner guard, its register slot set by the row: 2,048
    predicated stores once ptxas unrolls the inner loop too (it then took minutes); the row loop stays rolled
    while the 16-row version, 512 stores, is unrolled."""
    def kernel(rows: int):
        return _parse(f'''
@T.prim_func
def main(A: T.Buffer(({rows}, 32), "float32"), O: T.Buffer(({rows}, 32), "float32")):
    tx = T.launch_thread("threadIdx.x", 32)
    f = T.alloc_buffer(({rows},), "float32", scope="local")
    for i in T.serial({rows}):
        for j in T.serial(32):
            if j == tx:
                O[i, j] = f[i] + A[i, j]
''')
    from tilelayout.passes.lowering.unroll_registers import MAX_UNROLLED_STORES
    assert 16 * 32 <= MAX_UNROLLED_STORES < 64 * 32
    for rows, kind in ((64, tirx.ForKind.SERIAL), (16, tirx.ForKind.UNROLLED)):
        kinds: dict = {}
        tvm_ffi.structural_walk(unroll_register_loops(kernel(rows)).body,
                                (tirx.For, lambda f: kinds.__setitem__(str(f.loop_var), int(f.kind))))
        assert kinds == {"i": int(kind), "j": int(tirx.ForKind.SERIAL)}, (rows, kinds)
