"""Pipelined loops indexed as TileLang's examples index them: named offsets (one-element locals, ``Bind``),
offsets read from memory before the loop (grouped gemm), copies and gemm under a block-uniform ``if`` (block-sparse
gemm), a reshaped view of a parameter as the copy source (conv2d as an implicit gemm). Each runs on the CPU
against numpy (cp.async lands only at its wait_group + barrier there) on sm_80 and sm_90a, and its CUDA compiles
with nvcc; the patterns that cannot be pipelined are refused by name."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import tirx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kernels_pipeline_indexing as KI  # noqa: E402
import tilelayout as tl  # noqa: E402
from tilelayout.passes.ir_utils import walk  # noqa: E402
from tilelayout.passes.lowering.pipeline import build_cpu, compile_ptx, cuda_source, lower_func  # noqa: E402
from tilelayout.passes.lowering.pipeline_plan import PIPELINE_REPORT_ATTR  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
ARCHS = ["sm_80", "sm_90a"]


def _report(lowered) -> str:
    return list(dict(lowered.attrs[PIPELINE_REPORT_ATTR]).values())[0]


def _f16(rng, shape):
    return rng.standard_normal(shape).astype(np.float16)


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


# ------------------------------------------------------------------------------------ named offsets

@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("stages", [2, 3])
def test_named_offsets_are_pipelined_and_match_numpy(arch, stages):
    func = KI.named_offsets(stages=stages, arch=arch)
    lowered = lower_func(func)
    if arch == "sm_90a":        # swizzled tiles of parameters: TMA (test_tma.py)
        assert _report(lowered).startswith("TMA")
    else:
        assert "cp.async" in _report(lowered) and "16 B" in _report(lowered)
    # the names are gone from the copies: nothing reads row0 / k0 any more
    assert "row0" not in lowered.script() and "k0" not in lowered.script()
    rng = np.random.default_rng(1)
    A, B = _f16(rng, (128, 128)), _f16(rng, (128, 128))
    C = np.full((128, 128), np.nan, np.float32)
    build_cpu(func)(A, B, C)
    _close(C, A.astype(np.float64) @ B.astype(np.float64))


def test_named_offsets_infer_like_the_inlined_kernel():
    """Inference sees ``by * 64`` where the kernel wrote ``row0``: the copies get the layouts of the gemm whose
    offsets are written out (16-byte vectors), not the scalar layout an unknown offset would force."""
    res = tl.infer_layouts(KI.named_offsets())
    copies = [v for v in dict(res.func.attrs["tilelayout.tile_loops"]).values() if "copy A_s" in str(v["op"])]
    assert copies and "by * 64:by * 64 + 64, ko * 32:ko * 32 + 32" in str(copies[0]["op"])


def test_bind_variables_are_inlined_too():
    from tilelayout.passes.named_scalars import inline_named_scalars
    func = KI.named_offsets()
    by = []
    walk(func.body, [(tirx.AttrStmt, lambda n: by.append(n.node.var) if n.attr_key == "thread_extent" and
                      str(n.node.thread_tag) == "blockIdx.y" else None)])
    row = tirx.Var("row", "int32")
    bind = tirx.Bind(row, by[0] * 64)

    # replace the one-element local ``row0`` by a Bind of the same value
    from tilelayout.passes.ir_utils import mapped
    from tvm.ir import TensorLoad

    def on_load(e):
        return row if str(e.source.name) == "row0" else e

    def on_seq(seq):
        out = []
        for st in seq.seq:
            if isinstance(st, tirx.AllocBuffer) and str(st.buffer.name) == "row0":
                continue
            if isinstance(st, tirx.BufferStore) and str(st.buffer.name) == "row0":
                out.append(bind)
                continue
            out.append(st)
        return tirx.SeqStmt(out)
    with_bind = func.with_body(mapped(mapped(func.body, [(TensorLoad, on_load)]), [(tirx.SeqStmt, on_seq)]))
    assert "row:" in with_bind.script() or "row =" in with_bind.script()
    inlined = inline_named_scalars(with_bind)
    assert "A[by * 64:by * 64 + 64" in inlined.script()


def test_thread_dependent_names_are_not_inlined():
    from tilelayout.passes.named_scalars import uniform_value
    tx = tirx.Var("tx", "int32")
    by = tirx.Var("by", "int32")
    assert uniform_value(by * 64 + 1, {}, [by], []) is not None
    assert uniform_value(by * 64 + tx, {}, [by], []) is None
    assert uniform_value(tirx.FloatImm("float32", 1.0), {}, [by], []) is None


# ------------------------------------------------------------------------------------ offsets read from memory

def _grouped_inputs(sizes, k=128, n=64, bm=64, seed=0):
    """Inputs of the golden case's kernel (``cases/grouped_gemm.py``): a group's last tile runs past A's end,
    where safe memory reads 0 (those rows are not stored)."""
    rng = np.random.default_rng(seed)
    total = sum(sizes)
    A = _f16(rng, (total, k))
    B = _f16(rng, (len(sizes), k, n))
    C = np.full((total, n), np.nan, np.float32)
    s, o, p = (np.array(x, np.int32) for x in KI.grouped_offsets(sizes, bm))
    return A, B, C, s, o, p


def _grouped_reference(A, B, sizes):
    out, start = [], 0
    for g, size in enumerate(sizes):
        out.append(A[start:start + size].astype(np.float64) @ B[g].astype(np.float64))
        start += size
    return np.concatenate(out)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("sizes,stages", [((64, 40, 100), 2), ((64, 40, 100), 3), ((7, 128, 65), 2)])
def test_grouped_gemm_offsets_from_memory_match_numpy(arch, sizes, stages):
    func = KI.grouped_gemm(sizes, stages=stages, arch=arch)
    lowered = lower_func(func)
    assert "cp.async" in _report(lowered)
    A, B, C, s, o, p = _grouped_inputs(sizes)
    build_cpu(func)(A, B, C, s, o, p)
    _close(C, _grouped_reference(A, B, sizes))


def test_an_offset_the_loop_writes_is_refused():
    with pytest.raises(tl.PipelineError, match=r"buffer cur_batch_idx: loop ko .* which the loop writes"):
        lower_func(KI.offset_written_in_loop())


# ------------------------------------------------------------------------------------ copies under an if

def _mask(m=128, n=128, k=256, bm=64, bn=64, bk=32, seed=0):
    rng = np.random.default_rng(seed)
    mask = (rng.random((m // bm, n // bn, k // bk)) < 0.5).astype(np.int8)
    mask[0, 0, :] = 0           # a block that computes nothing
    mask[1, 1, :] = 1           # a dense one
    return mask


def _block_sparse_reference(A, B, mask, bm=64, bn=64, bk=32):
    m, n = A.shape[0], B.shape[1]
    C = np.zeros((m, n))
    for by in range(m // bm):
        for bx in range(n // bn):
            for ko in range(A.shape[1] // bk):
                if mask[by, bx, ko]:
                    C[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn] += (
                        A[by * bm:(by + 1) * bm, ko * bk:(ko + 1) * bk].astype(np.float64)
                        @ B[ko * bk:(ko + 1) * bk, bx * bn:(bx + 1) * bn].astype(np.float64))
    return C


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_block_sparse_copies_under_the_mask_match_numpy(arch, stages):
    func = KI.block_sparse(stages=stages, arch=arch)
    lowered = lower_func(func)
    text = lowered.script()
    assert "cp.async" in _report(lowered)
    # the mask is read for the iteration being issued (ko + s - 1) and for the one computed (ko)
    assert f"BlockMask[by, bx, ko + {stages - 1}]" in text and "BlockMask[by, bx, ko]" in text
    rng = np.random.default_rng(3)
    A, B = _f16(rng, (128, 256)), _f16(rng, (256, 128))
    mask = _mask()
    C = np.full((128, 128), np.nan, np.float32)
    build_cpu(func)(A, B, mask, C)
    _close(C, _block_sparse_reference(A, B, mask))


def test_a_conditional_copy_read_outside_its_if_is_refused():
    with pytest.raises(tl.PipelineError, match=r"buffer A_s: loop ko .* copies it only when .* uses it outside that if"):
        lower_func(KI.conditional_copy_read_outside())


def test_a_thread_dependent_condition_is_refused():
    with pytest.raises(tl.PipelineError, match=r"not uniform over the block|runs on threads"):
        lower_func(KI.thread_conditional_copy())


# ------------------------------------------------------------------------------------ a view of a parameter

def _conv_reference(data, weight):
    """The golden case's numpy convolution (a padded sum of shifted matmuls: no im2col, no tiles)."""
    from cases.pipelined_indexing import REFERENCE
    return REFERENCE["sm80_conv_im2col_s2"]({"data": data, "weight": weight})["out"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("stages", [2, 3])
def test_conv_im2col_with_a_reshaped_weight_view_matches_numpy(arch, stages):
    func = KI.conv_im2col(stages=stages, arch=arch)
    lowered = lower_func(func)
    assert "cp.async" in _report(lowered) and "weight_s" in _report(lowered)
    rng = np.random.default_rng(5)
    data, weight = _f16(rng, (2, 8, 8, 32)), _f16(rng, (3, 3, 32, 64))
    out = np.full((2, 8, 8, 64), np.nan, np.float32)
    build_cpu(func)(data, weight, out)
    _close(out, _conv_reference(data, weight))


# ------------------------------------------------------------------------------------ CUDA

BUILDERS = {"named": KI.named_offsets, "grouped": KI.grouped_gemm, "block_sparse": KI.block_sparse,
            "conv": KI.conv_im2col}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_cuda_source_issues_cp_async(arch, name):
    src = cuda_source(BUILDERS[name](arch=arch))
    if arch == "sm_90a" and name == "named":      # TMA (test_tma.py); the conv's weight is a view: cp.async
        assert "cp.async.bulk.tensor.2d" in src
        return
    assert "cp.async.commit_group;" in src and re.search(r"cp\.async\.c[ag]\.shared\.global", src)


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_pipelined_indexing_compiles_with_nvcc(arch, name):
    target = {"kind": "cuda", "arch": arch}
    ptx = compile_ptx(cuda_source(BUILDERS[name](arch=arch), target), target).decode()
    if arch == "sm_90a" and name == "named":
        assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx
        return
    assert re.search(r"cp\.async\.c[ag]\.shared\.global", ptx) and "cp.async.wait_group" in ptx


def test_a_condition_evaluated_for_the_wrong_iteration_gives_wrong_cpu_values():
    """The producer must test the mask of the iteration it issues (ko + 1 with two stages): testing ko's instead
    skips copies the consumer then reads, which the CPU emulation shows."""
    from tilelayout.passes.ir_utils import mapped
    from tilelayout.passes.lowering.pipeline import build_cpu_lowered
    from tvm.ir import TensorLoad
    func = KI.block_sparse(stages=2, arch="sm_80")
    lowered = lower_func(func)
    rng = np.random.default_rng(3)
    A, B = _f16(rng, (128, 256)), _f16(rng, (256, 128))
    mask = _mask()
    want = _block_sparse_reference(A, B, mask)

    def run(f):
        C = np.full((128, 128), np.nan, np.float32)
        build_cpu_lowered(f)(A, B, mask, C)
        return C

    _close(run(lowered), want)

    def on_if(node):
        issues = []
        walk(node.then_case, [(tvm.ir.Call, lambda c: issues.append(1) if "cp_async" in str(c.op.name) or
                               str(c.op.name) == "tirx.ptx.cp" else None)])
        if not issues:
            return node

        def current(e):
            if str(e.source.name) != "BlockMask":
                return e
            return tirx.BufferLoad(e.source, list(e.indices[:-1]) + [e.indices[-1] - 1])
        return tirx.IfThenElse(mapped(node.condition, [(TensorLoad, current)]), node.then_case, node.else_case)

    broken = lowered.with_body(mapped(lowered.body, [(tirx.IfThenElse, on_if)]))
    assert "BlockMask[by, bx, ko + 1]" not in broken.script()
    got = run(broken)
    assert not np.allclose(got, want, rtol=2e-2, atol=2e-2)


def test_a_view_whose_storage_the_loop_writes_is_refused():
    with pytest.raises(tl.TileLayoutError, match=r"buffer X: loop ko .* also writes X \(the storage of X_view\)"):
        lower_func(KI.view_source_written())
