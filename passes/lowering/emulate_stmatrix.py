"""CPU emulation of ``stmatrix.sync.aligned.m8n8.x{1,2,4}.shared.b16`` for the serialised program.

Read from the call alone (the modifier tokens, the address operand, the register operands), never from the
lowering's plan, so registers in the wrong lanes or a wrong row address store wrong values:

1. every thread publishes its row address (lane ``8 m + r`` addresses row ``r`` of matrix ``m``) and its
   ``x`` registers;
2. every addressing lane writes the eight 16-bit elements of its row: elements ``2 q`` and ``2 q + 1`` are the
   low and high halves of register ``m`` of lane ``4 r + q`` of its warp.

The PTX register format is decoded here on its own (``_unpack``): the lowering packs with
``lower_gemm.pack_elements``, and a shared reading would hide a shared mistake.
"""
from __future__ import annotations

from tvm import tirx

from .emulate_mma import _exchange, _split_args, _unpack, shared_element
from .loop_partition import LoweringError

__all__ = ["STMATRIX_OPS", "emulate_stmatrix"]

STMATRIX_OPS = ("tirx.ptx.stmatrix",)


def emulate_stmatrix(call, phases) -> tirx.Stmt:
    """The two phases (over all threads) that emulate one ``stmatrix`` (module docstring)."""
    operands, tokens = _split_args(call)
    if "trans" in tokens or "b16" not in tokens or "m8n8" not in tokens:
        raise LoweringError(f"cannot emulate stmatrix with modifiers {tokens}: only .m8n8 .b16 without .trans")
    count = next((int(t[1]) for t in tokens if t in ("x1", "x2", "x4")), None)
    addr, regs = operands[0], operands[1:]
    if count is None or len(regs) != count:
        raise LoweringError(f"cannot emulate stmatrix: {len(regs)} registers for modifiers {tokens}")
    buf, index = shared_element(addr)
    dtype = str(buf.dtype)
    if dtype not in ("float16", "bfloat16", "int16", "uint16"):
        raise LoweringError(f"cannot emulate stmatrix into {buf.name} ({dtype}): .b16 stores 16-bit elements")
    t = phases.flat_thread()
    rows = _exchange(phases, "stmatrix_rows", 1, "int32")
    words = _exchange(phases, "stmatrix_words", count, "uint32")
    publish = [tirx.BufferStore(rows, index, [t, 0])]
    for m, reg in enumerate(regs):
        word = reg if str(reg.ty) == "uint32" else tirx.reinterpret("uint32", reg)
        publish.append(tirx.BufferStore(words, word, [t, m]))
    lane = tirx.floormod(t, 32)
    base = t - lane
    matrix, row = tirx.floordiv(lane, 8), tirx.floormod(lane, 8)
    start = tirx.BufferLoad(rows, [t, 0])
    stores = []
    for q in range(4):
        for half in range(2):
            value = _unpack(tirx.BufferLoad(words, [base + 4 * row + q, matrix]), half, dtype)
            stores.append(tirx.BufferStore(buf, tirx.Cast(dtype, value) if str(value.ty) != dtype else value,
                                           [start + 2 * q + half]))
    write = tirx.IfThenElse(lane < 8 * count, tirx.SeqStmt(stores), None)
    return tirx.SeqStmt([phases.thread_loop(tirx.SeqStmt(publish)), phases.thread_loop(write)])
