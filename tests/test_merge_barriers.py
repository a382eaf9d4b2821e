"""Adjacent block barriers with only fences or liveness markers between them become one
(``passes/lowering/merge_barriers.py``)."""
from __future__ import annotations

import sys
from pathlib import Path

import tvm
from tvm import tirx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cases import gemm_pipelined  # noqa: E402
from tilelayout.passes.lowering.lower_gemm import ptx_call  # noqa: E402
from tilelayout.passes.lowering.merge_barriers import merge_barriers  # noqa: E402
from tilelayout.passes.lowering.pipeline import lower_func  # noqa: E402


def _sync():
    return tirx.Evaluate(tirx.op.tvm_storage_sync("shared"))


def _names(func) -> list:
    """The statements of ``func``'s body sequence: a barrier, a fence, or a store's buffer."""
    out = []
    for s in func.body.seq:
        if isinstance(s, tirx.BufferStore):
            out.append(str(s.buffer.name))
        else:
            out.append("sync" if "storage_sync" in str(s.value.op.name) else "fence")
    return out


def _func(stmts: list) -> tirx.PrimFunc:
    return tirx.PrimFunc([], tirx.SeqStmt(stmts))


def _store(buf):
    return tirx.BufferStore(buf, tirx.const(1.0, "float32"), [tirx.const(0, "int32")])


def test_barriers_around_a_fence_become_one_after_it():
    s = tirx.decl_buffer([4], "float32", name="S", scope="shared")
    fence = ptx_call("fence.proxy.async.shared::cta")
    out = merge_barriers(_func([_store(s), _sync(), fence, _sync(), _sync(), _store(s)]))
    assert _names(out) == ["S", "fence", "sync", "S"]


def test_a_memory_access_between_barriers_keeps_both():
    s = tirx.decl_buffer([4], "float32", name="S", scope="shared")
    before = _func([_sync(), _store(s), _sync(), ptx_call("fence.proxy.async.shared::cta")])
    assert _names(merge_barriers(before)) == ["sync", "S", "sync", "fence"]


def test_the_staged_epilogue_has_no_barrier_pair_before_its_tma_store():
    """stmatrix ends with a barrier and the TMA store starts with fence + barrier: one barrier is left, after the
    fence, right before thread 0's store."""
    from tilelayout.passes.ir_utils import walk
    lowered = lower_func(gemm_pipelined.VARIANTS["staged_c_sm90a_s3_128x128"]())
    seqs = []
    walk(lowered.body, [(tirx.SeqStmt, lambda q: seqs.append(list(q.seq)))])
    seq = max(seqs, key=len)

    def kind(st) -> str:
        if isinstance(st, tirx.IfThenElse):
            return "if"
        c = st.value if isinstance(st, tirx.Evaluate) else None
        return str(c.op.name) if isinstance(c, tvm.ir.Call) else type(st).__name__
    kinds = [kind(st) for st in seq]
    at = max(k for k, x in enumerate(kinds) if x == "if")       # thread 0's store
    assert kinds[at - 3:at] == ["tirx.ptx.stmatrix", "tirx.ptx.fence_proxy", "tirx.tvm_storage_sync"], kinds[at - 4:at]
