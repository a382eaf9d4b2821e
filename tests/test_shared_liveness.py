"""Shared tiles reached through ``address_of`` stay alive for the whole kernel (``lowering/shared_liveness.py``).

apache-tvm 0.27 merges the dynamic shared tiles of a kernel and reuses the bytes of tiles it believes dead, but
its liveness analysis does not see ``address_of(B[i])``: flash attention's Q tile (stored once, then read only by
``ldmatrix``) shared its bytes with the K tile, a wrong result on every GPU. These tests run TVM's own merge on
the lowered kernels and check the merged size, since the CPU check keeps each tile in its own array and cannot
see the overlap.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import s_tir, tirx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import main_text  # noqa: E402
from cases import block_sparse_attention, flash_attention, gemm_pipelined  # noqa: E402
from tilelayout.passes.ir_utils import walk  # noqa: E402
from tilelayout.passes.lowering import lower_tile_ops, pipeline, shared_liveness, software_pipeline  # noqa: E402
from tilelayout.passes.lowering.pipeline import check_numeric, cuda_source, lower  # noqa: E402
from tilelayout.passes.lowering.shared_liveness import (drop_keep_alive, is_keep_alive, keep_shared_alive,  # noqa: E402
                                                        merge_overlap)


def _shared_bytes(func) -> dict:
    """name -> bytes of every dynamic shared tile the lowered ``func`` allocates."""
    out = {}
    walk(func.body, [(tirx.AllocBuffer, lambda a: out.__setitem__(str(a.buffer.name), int(np.prod(
        [int(s) for s in a.buffer.shape])) * tvm.DataType(str(a.buffer.dtype)).bits // 8)
        if str(a.buffer.scope()) == "shared.dyn" else None)])
    return out


def _merged_bytes(mod) -> int:
    """Size of the one dynamic shared buffer TVM's CUDA pipeline merges the tiles into."""
    mod = s_tir.transform.MergeSharedMemoryAllocations()(tirx.transform.FlattenBuffer()(mod))
    found = []
    walk(mod[list(mod.functions)[0]].body, [(tirx.AllocBuffer, lambda a: found.append(
        int(a.buffer.shape[0])) if str(a.buffer.scope()) == "shared.dyn" else None)])
    assert len(found) == 1, found
    return found[0]


def _built_dynamic_bytes(mod) -> int:
    """Dynamic shared memory of the kernel TVM's whole CUDA pipeline builds (what the launch asks for)."""
    from maint.bench_codegen import dynamic_smem
    func = mod[list(mod.functions)[0]]
    return dynamic_smem(mod, func.attrs["target"])


KERNELS = {
    "flash_attention": lambda: flash_attention.VARIANTS["sm80_d64_b64x64_t128"](),
    "flash_attention_sm90a": lambda: flash_attention._flash("sm_90a", 64, 64, 64, 128, False),
    "block_sparse_attention": lambda: block_sparse_attention.VARIANTS["sm80_d64_b64x64_t128_causal"](),
    "pipelined_gemm_dynamic_shared": lambda: gemm_pipelined._gemm(64, 128, 128, 32, 3, "sm_80", scope="shared.dyn"),
}


@pytest.mark.parametrize("name", list(KERNELS))
def test_tvm_never_puts_two_addressed_tiles_on_the_same_bytes(name):
    """The tiles reached through address_of (ldmatrix, wgmma descriptors, cp.async) that one statement of the
    kernel uses (the K loop reads Q, K and V) must sit side by side in the merged buffer (checked here from the
    sizes, and by ``merge_overlap``, which the fuzzer runs). A staging tile first used after them (flash
    attention's O_shared on sm_90a, stored by stmatrix) may take their bytes."""
    mod = lower(KERNELS[name](), cost_model="register-count")
    func = mod[list(mod.functions)[0]]
    tiles = _shared_bytes(func)
    addressed = {str(b.name) for b in shared_liveness._addressed(func.body)}
    together = max(sum(tiles[n] for n in addressed if n in tiles and _names(stmt, n)) for stmt in _top_level(func))
    assert together > 0 and _merged_bytes(mod) >= together, tiles
    assert merge_overlap(mod) is None


def _top_level(func) -> list:
    """The statements of the kernel's longest sequence (its top level inside the launches)."""
    seqs = []
    walk(func.body, [(tirx.SeqStmt, lambda s: seqs.append(list(s.seq)))])
    return max(seqs, key=len)


def _names(stmt, name: str) -> bool:
    found = []
    walk(stmt, [(tirx.BufferStore, lambda st: found.append(1) if str(st.buffer.name) == name else None),
                (tvm.ir.TensorLoad, lambda e: found.append(1) if str(e.source.name) == name else None)])
    return bool(found)


@pytest.mark.parametrize("variant", ["staged_c_sm80_s3_128x128", "staged_c_sm90a_s3_128x128"])
def test_the_epilogue_staging_tile_reuses_the_dead_pipeline_stages(variant):
    """TileLang's gemm with its fp16 result staged through C_s (128x128, three stages of 128x32 and 32x128):
    A_s and B_s (24 KiB each) are dead after the K loop, and C_s (32 KiB) is larger than either, so the staged
    tiles share one allocation (``stage_arena``) and C_s takes its bytes: 48 KiB instead of 80 (TVM's merge
    gives a new tile one freed allocation's place, never two), TileLang's figure. A barrier after the loop keeps a
    slow warp's last ldmatrix or wgmma from reading what a fast one stores into C_s; the kernel matches numpy
    under the race check."""
    func = gemm_pipelined.VARIANTS[variant]()
    mod = lower(func)
    tiles = _shared_bytes(mod[list(mod.functions)[0]])
    assert tiles == {"A_s_B_s": 48 * 1024, "C_s": 32 * 1024}, tiles
    assert _built_dynamic_bytes(mod) == 48 * 1024
    src = cuda_source(func)
    assert "extern __shared__ __align__(1024)" in src      # the arena's tiles keep their 1024-byte phase
    if "sm80" in variant:
        drain = src.index("wait_group_0();")
        assert src[drain:].split(";")[1].strip() == "__syncthreads()", src[drain:drain + 200]
    else:       # every TMA load was waited for in the loop; the last wgmma group too
        first_store = src.index("stmatrix_sync_aligned_m8n8_x4_shared_b16(tvm_builtin")
        assert "__syncthreads" in src[src.rindex("wait_group_sync_aligned_0();", 0, first_store):first_store]
    res = check_numeric(func, reference=gemm_pipelined.REFERENCE[variant], tolerance=(2e-2, 2e-2))
    assert res.ok, res.message


def test_without_the_arena_the_staging_tile_gets_one_stage_only(monkeypatch):
    """The check above can fail: with A_s and B_s in allocations of their own, C_s takes B_s's 24 KiB and 8 KiB
    more (56 KiB)."""
    from tilelayout.passes.lowering import software_pipeline as sp
    monkeypatch.setattr(sp, "share_arenas", lambda body, loops, plans, staged: staged)
    mod = lower(gemm_pipelined.VARIANTS["staged_c_sm80_s3_128x128"]())
    assert sorted(_shared_bytes(mod[list(mod.functions)[0]])) == ["A_s", "B_s", "C_s"]
    assert _built_dynamic_bytes(mod) == 56 * 1024


def test_no_arena_without_a_later_tile_that_needs_one():
    """A pipelined gemm with nothing after its loop keeps one allocation per staged tile."""
    mod = lower(KERNELS["pipelined_gemm_dynamic_shared"](), cost_model="register-count")
    assert sorted(_shared_bytes(mod[list(mod.functions)[0]])) == ["A_s", "B_s"]


def test_without_the_moved_end_markers_the_staging_tile_has_bytes_of_its_own(monkeypatch):
    """The check above can fail: with every end marker at the end of the kernel, C_s gets 32 KiB more."""
    monkeypatch.setattr(shared_liveness, "_last_use", lambda seq, start, buf, nested: len(seq))
    mod = lower(gemm_pipelined.VARIANTS["staged_c_sm80_s3_128x128"]())
    assert _built_dynamic_bytes(mod) == 80 * 1024


def test_without_the_markers_tvm_overlaps_q_and_k(monkeypatch):
    """The bug the markers prevent, shown on flash attention: without them TVM merges Q, K, V and O (8 KiB
    each) into 16 KiB."""
    for module in (shared_liveness, lower_tile_ops, software_pipeline):     # lower_func imports it from the first
        monkeypatch.setattr(module, "keep_shared_alive", lambda f: f)
    mod = lower(KERNELS["flash_attention"](), cost_model="register-count")
    tiles = _shared_bytes(mod[list(mod.functions)[0]])
    assert _merged_bytes(mod) < sum(tiles.values())
    assert "TVM sees it live only at" in merge_overlap(mod)     # Q is read by ldmatrix where TVM thinks it dead


def test_a_pipelined_gemm_on_dynamic_shared_memory_compiles_and_runs():
    """cp.async tiles are reached only through address_of: TVM's merge used to stop with an internal error
    ("buffer_byte_offsets") on every pipelined kernel with dynamic shared tiles (TileLang's T.alloc_shared)."""
    func = KERNELS["pipelined_gemm_dynamic_shared"]()
    assert "cp.async" in cuda_source(func, cost_model="register-count") or "cp_async" in cuda_source(func)
    res = check_numeric(func, cost_model="register-count", reference=gemm_pipelined.REFERENCE["sm80_s3_k128"],
                        tolerance=gemm_pipelined.TOLERANCE["sm80_s3_k128"])
    assert res.ok, res.message


def test_markers_are_idempotent_and_dropped_for_the_cpu():
    lowered = pipeline.lower_func(KERNELS["flash_attention"](), cost_model="register-count")
    marks = []
    walk(lowered.body, [(tirx.Evaluate, lambda e: marks.append(e) if is_keep_alive(e) else None)])
    assert len(marks) == 2 * 3      # Q, K, V (ldmatrix reads them; O is plain loads): after the allocations, at the end
    again = []
    walk(keep_shared_alive(lowered).body, [(tirx.Evaluate, lambda e: again.append(e) if is_keep_alive(e) else None)])
    assert len(again) == len(marks)
    left = []
    walk(drop_keep_alive(lowered).body, [(tirx.Evaluate, lambda e: left.append(e) if is_keep_alive(e) else None)])
    assert not left


TINY = main_text('A: T.Buffer((64,), "float32"), B: T.Buffer((1,), "float32"), O: T.Buffer((64,), "float32"), P: T.Buffer((1,), "float32")',
                 threads=32, body='''
    s0 = T.alloc_buffer((64,), "float32", scope="shared.dyn")
    s1 = T.alloc_buffer((1,), "float32", scope="shared.dyn")
    f = T.alloc_buffer((64,), "float32", scope="local.fragment")
    g = T.alloc_buffer((1,), "float32", scope="local.fragment")
    Tx.copy(s0[0:64], A[0:64])
    Tx.copy(f[0:64], s0[0:64])
    Tx.copy(O[0:64], f[0:64])
    Tx.copy(s1[0:1], B[0:1])
    Tx.copy(g[0:1], s1[0:1])
    Tx.copy(P[0:1], g[0:1])
''')


def test_a_one_float_dynamic_tile_beside_others_compiles(monkeypatch):
    """TVM's merge gives offsets only to tiles it frees and never frees one of 32 bits or less: such a tile
    beside other dynamic tiles stopped the CUDA build (fuzz seed 2446 kernel 10). It is widened to 64 bits and
    marked; without that, ``merge_overlap`` reports the failure."""
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx
    func = tvm.script.from_source(TINY, extra_vars={"T": T, "Tx": Tx})
    for model in ("register-count", "io-aware"):
        mod = lower(func, cost_model=model)
        assert merge_overlap(mod) is None
        assert "__global__" in cuda_source(func, cost_model=model)
        assert check_numeric(func, cost_model=model).ok
    monkeypatch.setattr(shared_liveness, "widen_tiny_dynamic_tiles", lambda f: f)
    monkeypatch.setattr(shared_liveness, "_small_dynamic", lambda body: [])
    assert "failed" in merge_overlap(lower(func, cost_model="register-count"))
