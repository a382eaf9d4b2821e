"""Shared -> global tile copies as TMA stores on sm_90a (``passes/lowering/tma_store.py``), checked on the CPU.

The emulation (``emulate_tma``) stores the box where the issuing thread waits for the store to read the tile,
clipped to the global, reading the tile through the tensor map's swizzle: a store issued before every thread
wrote the tile is a race, a store never waited for is refused, a tensor map of another swizzle stores wrong
values. The numpy references share no code with the lowering.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import tirx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import tilelayout as tl  # noqa: E402
from cases import gemm_pipelined  # noqa: E402
from conftest import parse_main  # noqa: E402
from tilelayout.passes.ir_utils import mapped, walk  # noqa: E402
from tilelayout.passes.lowering.pipeline import (build_cpu_lowered, check_numeric, compare_outputs, cuda_source,  # noqa: E402
                                                 lower_func, random_inputs)
from tilelayout.passes.lowering.race_report import build_race_checked  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
STORE = "tirx.ptx.cp_async_bulk_tensor_s2g"
STAGED = "staged_c_sm90a_s3_128x128"


def _through_shared(rows: int, arch: str = "sm_90a", swizzle: bool = False, out_rows: int | None = None):
    """Y[b * rows + i, j] = X[b * rows + i, j] * 2 through a shared tile S (two blocks); ``out_rows``: Y's row
    count (fewer than 2 * rows: the second block's box runs past Y's end)."""
    out_rows = out_rows or 2 * rows
    func = parse_main(f'X: T.Buffer(({2 * rows}, 128), "float16"), Y: T.Buffer(({out_rows}, 128), "float16")',
                      threads=128, blocks=2, body=f'''
    S = T.alloc_buffer(({rows}, 128), "float16", scope="shared")
    F = T.alloc_buffer(({rows}, 128), "float16", scope="local.fragment")
    for i in T.parallel({rows}):
        for j in T.parallel(128):
            F[i, j] = X[bx * {rows} + i, j] * T.float16(2)
    Tx.copy(S[0:{rows}, 0:128], F[0:{rows}, 0:128])
    Tx.copy(Y[bx * {rows}:bx * {rows} + {rows}, 0:128], S[0:{rows}, 0:128])
''')
    func = func.with_attr("target", tvm.target.Target({"kind": "cuda", "arch": arch}))
    if swizzle:
        func = tl.annotate_layouts(func, {"S": tl.make_swizzled_layout([rows, 128], "float16",
                                                                       tl.SwizzleMode.SWIZZLE_128B)})
    return func


def _reference(out_rows: int):
    def ref(d):
        return {"Y": (d["X"][:out_rows].astype(np.float32) * 2).astype(np.float16)}
    return ref


def _calls(node, name: str) -> list:
    """The calls of ``name`` in a function or a statement."""
    out = []
    walk(node.body if isinstance(node, tirx.PrimFunc) else node, [(tvm.ir.Call, lambda c: out.append(c) if isinstance(c.op, tvm.ir.Op)
                      and str(c.op.name) == name else None)])
    return out


def _run(lowered, out_rows: int) -> list:
    inputs = random_inputs(lowered, 0)
    got = {n: v.copy() for n, v in inputs.items()}
    build_cpu_lowered(lowered)(*got.values())
    want = dict(inputs)
    want.update(_reference(out_rows)(inputs))
    return compare_outputs(got, want, False, (1e-3, 1e-3))[0]


def test_the_staged_gemm_epilogue_is_one_tma_store():
    """TileLang's Hopper gemm stores C_s with one bulk copy; so do we: one cp.async.bulk.tensor from thread 0
    (C_s is row-major: one 128x128 box, no swizzle), no per-thread global stores, right under the race check."""
    func = gemm_pipelined.VARIANTS[STAGED]()
    lowered = lower_func(func)
    assert len(_calls(lowered, STORE)) == 1
    src = cuda_source(func)
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in src and "C_s_tmap" in src
    assert "C_ptr[" not in src and "(C_ptr +" not in src
    res = check_numeric(func, reference=gemm_pipelined.REFERENCE[STAGED], tolerance=(2e-2, 2e-2))
    assert res.ok, res.message
    reports = " ".join(str(v) for v in lowered.attrs["tilelayout.gemm_instructions"].values())
    assert "TMA store of C_s into C: 1 x cp.async.bulk.tensor.2d of 128x128 (no swizzle)" in reports, reports


@pytest.mark.parametrize("swizzle", [False, True])
def test_a_tile_is_stored_as_its_layout_reads(swizzle):
    """A row-major tile is one box; a 128B-swizzled one two panels of 64 columns, read through the swizzle."""
    func = _through_shared(64, swizzle=swizzle)
    lowered = lower_func(func)
    assert len(_calls(lowered, STORE)) == (2 if swizzle else 1)
    assert not _run(lowered, 128)
    res = check_numeric(func, reference=_reference(128), tolerance=(1e-3, 1e-3))
    assert res.ok, res.message


def test_a_box_past_the_end_of_the_global_is_clipped():
    """The second block's box covers rows 64..127 of a 96-row Y: TMA writes rows 64..95 only."""
    func = _through_shared(64, out_rows=96)
    lowered = lower_func(func)
    assert _calls(lowered, STORE)
    res = check_numeric(func, reference=_reference(96), tolerance=(1e-3, 1e-3))
    assert res.ok, res.message


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.filterwarnings("ignore::tilelayout.TargetFeatureWarning")
def test_targets_without_tma_store_element_by_element(arch):
    assert not _calls(lower_func(_through_shared(64, arch)), STORE)


@needs_nvcc
@pytest.mark.parametrize("swizzle", [False, True])
def test_tma_stores_compile_with_nvcc_for_sm90a(swizzle):
    from tilelayout.passes.lowering.pipeline import compile_ptx
    ptx = compile_ptx(cuda_source(_through_shared(64, swizzle=swizzle)), {"kind": "cuda", "arch": "sm_90a"}).decode()
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == (2 if swizzle else 1)
    assert "cp.async.bulk.wait_group.read 0" in ptx and "fence.proxy.async.shared::cta" in ptx


def _without_barrier_before_the_store(lowered):
    """The block barrier between the tile's writes and thread 0's store removed."""
    def on_seq(s):
        seq = list(s.seq)
        for k in range(len(seq) - 1):
            if isinstance(seq[k + 1], tirx.IfThenElse) and _calls(seq[k + 1], STORE) and \
                    isinstance(seq[k], tirx.Evaluate) and "storage_sync" in str(seq[k].value.op.name):
                return tirx.SeqStmt(seq[:k] + seq[k + 1:])
        return s
    return lowered.with_body(mapped(lowered.body, [(tirx.SeqStmt, on_seq)]))


def test_a_store_before_every_thread_wrote_the_tile_is_a_race():
    lowered = lower_func(_through_shared(64))
    edited = _without_barrier_before_the_store(lowered)
    assert len(str(edited)) < len(str(lowered))
    races = build_race_checked(edited).run(*random_inputs(edited).values())
    assert any(r.buffer == "S" for r in races), races
    assert not build_race_checked(lowered).run(*random_inputs(lowered).values())


def test_a_store_never_waited_for_is_refused():
    lowered = lower_func(_through_shared(64))

    def on_eval(node):
        c = node.value
        if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op) and \
                str(c.op.name) == "tirx.ptx.cp_async_bulk_wait_group":
            return tirx.Evaluate(0)
        return node
    edited = lowered.with_body(mapped(lowered.body, [(tirx.Evaluate, on_eval)]))
    with pytest.raises(Exception, match="never waited for"):
        _run(edited, 128)


def test_a_tensor_map_of_another_swizzle_stores_wrong_values():
    lowered = lower_func(_through_shared(64, swizzle=True))

    def on_eval(node):
        c = node.value
        if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op) and str(c.op.name) == "tirx.tensormap_encode_tiled" \
                and "S_tmap" in str(c.args[0]):
            attrs = dict(c.attrs.items()) if hasattr(c.attrs, "items") else None
            new = tirx.op.tensormap_encode_tiled(*c.args, descriptor_dtype=str(c.attrs.descriptor_dtype),
                                                 rank=int(c.attrs.rank), interleave=0, swizzle=2,
                                                 l2_promotion=int(c.attrs.l2_promotion),
                                                 oob_fill=int(c.attrs.oob_fill))
            del attrs
            return tirx.Evaluate(new)
        return node
    edited = lowered.with_body(mapped(lowered.body, [(tirx.Evaluate, on_eval)]))
    assert str(edited) != str(lowered)
    assert _run(edited, 128)
