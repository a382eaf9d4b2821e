"""Shared-memory reads (and stmatrix's writes) of the warp and warpgroup collectives, for the race check
(``race_check``).

A collective reads shared memory on behalf of all its threads, so each element it reads is recorded once, as
read by several threads: a write by any thread in the same barrier interval conflicts with it.

- ``ldmatrix``: lane ``8 m + r`` supplies the address of row ``r`` of matrix ``m``; the 16 bytes there are
  read (lanes past the matrices the instruction loads supply no address).
- ``stmatrix``: lane ``8 m + r`` supplies the address of row ``r`` of matrix ``m``; the 16 bytes there are
  written, recorded as written by that lane (the values come from four lanes, the store is one per row).
- ``wgmma`` (ss and rs forms): the A and B tiles its descriptors describe (64 x K and N x K elements),
  addressed as the CPU emulation reads them (``emulate_wgmma``: canonical layouts, swizzle); the elements are
  split over the warpgroup's 128 threads, each recording its share. Recorded at the issue: a write after the
  issue and before ``wgmma.wait_group`` plus a barrier is not seen.
- ``tcgen05.mma`` (SS): the M x K and N x K tiles its descriptors name (as ``tcgen05_cpu`` reads them), all
  read by the one thread issuing it; recorded at the issue, like wgmma's.
"""
from __future__ import annotations

import re

import tvm
from tvm import tirx
from tvm.ir import TensorLoad

from .emulate_mma import _op_name as _op, _split_args
from .emulate_wgmma import _buffer_of, _decode, _element
from .race_fields import SEVERAL

__all__ = ["collective_reads"]


def collective_reads(ins, call, stmt) -> list:
    """Statements recording the shared reads of collective ``call`` (``ins``: the race instrumenter)."""
    if _op(call) == "tirx.ptx.ldmatrix":
        return _ldmatrix(ins, call, stmt)
    if _op(call) == "tirx.ptx.stmatrix":
        return _stmatrix(ins, call, stmt)
    if _op(call) == "tirx.ptx.tcgen05_mma_ss":
        return _tcgen05_mma(ins, call, stmt)
    return _wgmma(ins, call, stmt)


def _address_load(addr):
    """The ``buffer[index]`` under ``cvta_generic_to_shared(address_of(...))`` / ``address_of(...)``."""
    node = addr
    while isinstance(node, tvm.ir.Call) and _op(node) != "tirx.address_of" and node.args:
        node = node.args[0]
    load = node.args[0] if isinstance(node, tvm.ir.Call) and _op(node) == "tirx.address_of" else None
    return load if isinstance(load, TensorLoad) and len(load.indices) == 1 else None


def _stmatrix(ins, call, stmt) -> list:
    tokens = [str(a.value) for a in call.args if isinstance(a, tvm.ir.StringImm)]
    nmat = next((int(t[1]) for t in tokens if t in ("x1", "x2", "x4")), 4)
    load = _address_load([a for a in call.args if not isinstance(a, tvm.ir.StringImm)][0])
    ent = ins.entry(load.source) if load is not None else None
    if ent is None:
        return []
    site = ins.site(load.source, "stmatrix write", stmt)
    q = tirx.Var("race_q", "int32")
    row = tirx.For(q, 0, 8, tirx.ForKind.SERIAL, ins.element(ent, load.indices[0] + q, "write", site))
    return [tirx.IfThenElse(tirx.floormod(ins.tid, 32) < 8 * nmat, row, None)]


def _ldmatrix(ins, call, stmt) -> list:
    tokens = [str(a.value) for a in call.args if isinstance(a, tvm.ir.StringImm)]
    nmat = next((int(t[1]) for t in tokens if t in ("x1", "x2", "x4")), 4)
    load = _address_load([a for a in call.args if not isinstance(a, tvm.ir.StringImm)][-1])
    ent = ins.entry(load.source) if load is not None else None
    if ent is None:
        return []
    per_row = 128 // tvm.DataType(str(load.source.dtype)).bits       # elements in one 16-byte row
    site = ins.site(load.source, "collective read", stmt)
    q = tirx.Var("race_q", "int32")
    row = tirx.For(q, 0, per_row, tirx.ForKind.SERIAL, ins.element(ent, load.indices[0] + q, "read", site, SEVERAL))
    return [tirx.IfThenElse(tirx.floormod(ins.tid, 32) < 8 * nmat, row, None)]


def _wgmma(ins, call, stmt) -> list:
    operands, tokens = _split_args(call)
    shape = next((t for t in tokens if re.fullmatch(r"m64n\d+k\d+", t)), None)
    if shape is None:
        return []
    n, k = (int(x) for x in re.findall(r"\d+", shape)[1:])
    types = [t for t in tokens[tokens.index(shape) + 1:] if t]
    transposable = len(types) > 1 and types[1] in ("f16", "bf16")   # 8-bit and tf32 operands are K-major
    imm = [int(x.value) for x in operands if isinstance(x, tirx.IntImm) and str(x.ty) != "bool"]
    descs = [o for o in operands if _is_descriptor(o)]
    if _op(call).endswith("_ss") and len(descs) == 2:
        trans_a, trans_b = imm[-2:] if transposable else (0, 0)
        tiles = [(descs[0], 64, trans_a), (descs[1], n, trans_b)]
    elif _op(call).endswith("_rs") and len(descs) == 1:
        tiles = [(descs[0], n, imm[-1] if transposable else 0)]
    else:
        return []
    tg = tirx.floormod(ins.tid, 128)
    scratch = tirx.decl_buffer([4], "int32", name="race_desc", scope="local")
    out = [tirx.AllocBuffer(scratch)]
    for desc, rows, trans in tiles:
        out += _tile_reads(ins, stmt, desc, scratch, _decode, (rows, k), trans == 0, None, lane=tg)
    return out if len(out) > 1 else []


def _tcgen05_mma(ins, call, stmt) -> list:
    """``tcgen05.mma`` (SS) reads its M x K and N x K tiles on behalf of the one thread issuing it, addressed as
    the CPU emulation reads them (``tcgen05_cpu``); recorded at the issue, like wgmma's."""
    from .emulate_mma import _split_args
    from .emulate_tcgen05 import EmulationError, decode_instr_descriptor
    from .tcgen05_cpu import _decode_smem
    operands, tokens = _split_args(call)
    kind = next((t for t in tokens if t.startswith("kind::")), None)
    if kind is None or len(operands) < 4 or not isinstance(operands[3], tirx.IntImm):
        return []
    try:
        f = decode_instr_descriptor(int(operands[3].value), kind)
    except EmulationError:
        return []               # the emulation itself refuses the instruction
    scratch = tirx.decl_buffer([4], "int32", name="race_desc", scope="local")
    out = [tirx.AllocBuffer(scratch)]
    for desc, rows, mn, dtype in ((operands[1], f["m"], f["a_mn"], f["a"]), (operands[2], f["n"], f["b_mn"], f["b"])):
        out += _tile_reads(ins, stmt, desc, scratch, _decode_smem, (rows, f["k"]), not mn,
                           "float32" if dtype == "tfloat32" else dtype)
    return out if len(out) > 1 else []


def _tile_reads(ins, stmt, desc, scratch, decode, shape: tuple, k_major: bool, dtype: str | None,
                lane=None) -> list:
    """Statements recording the reads of the ``shape`` = (rows, k) shared tile descriptor ``desc`` names, read as
    the CPU emulation reads it (``desc`` decoded into ``scratch`` by ``decode``; ``dtype`` None: the buffer's).

    ``lane`` (the thread's place in its warpgroup): the 128 threads split the elements, each recording its share
    as read by several threads; None: the one issuing thread reads them all. [] when the race check does not
    follow the buffer."""
    rows, k = shape
    buf, offset_desc = _buffer_of(desc)
    ent = ins.entry(buf)
    if ent is None:
        return []
    site = ins.site(buf, "collective read", stmt)
    q = tirx.Var("race_q", "int32")
    e = q if lane is None else q * 128 + lane
    value = _element(buf, scratch, 0, k_major, tirx.floordiv(e, k), tirx.floormod(e, k), dtype or str(buf.dtype))
    loads: list = []
    _collect_loads(value, buf, loads)
    if not loads:           # (fp8 decoding repeats the one load of the element)
        return []
    if lane is None:
        loop = tirx.For(q, 0, rows * k, tirx.ForKind.SERIAL, ins.element(ent, loads[0].indices[0], "read", site))
    else:
        record = tirx.IfThenElse(e < rows * k, ins.element(ent, loads[0].indices[0], "read", site, SEVERAL), None)
        loop = tirx.For(q, 0, -(-rows * k // 128), tirx.ForKind.SERIAL, record)
    return decode(offset_desc, scratch, 0) + [loop]


def _is_descriptor(e) -> bool:
    """A 64-bit operand naming a shared buffer (a wgmma matrix descriptor)."""
    if str(getattr(e, "ty", "")) != "uint64":
        return False
    found = []
    from ..ir_utils import walk
    walk(e, [(tvm.ir.Call, lambda c: found.append(1) if _op(c) == "tirx.cuda.cvta_generic_to_shared" else None)])
    return bool(found)


def _collect_loads(expr, buf, out: list) -> None:
    from ..ir_utils import walk
    walk(expr, [(TensorLoad, lambda l: out.append(l) if l.source.same_as(buf) else None)])
