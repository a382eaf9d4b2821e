"""The vector-width rule: how many iterations of a loop's innermost variable can move as one vector, from the
accesses of its body. Both sides apply it: inference plans a loop layout's vector groups with it (and the
io-aware model prices them), ``LoopVectorize`` checks with it the slot loops partitioning made, which inference
never sees. It is a check over a body, not a layout decision, so it lives apart from both.

Memory (global/shared) accesses must be contiguous and aligned along the innermost loop; register accesses cap
the width by element size; the values stored cap it by what apache-tvm 0.27's CUDA generator emits correctly
(``value_lane_cap``); ``same_in_group`` tells whether an index or a guard takes one value per vector.
"""
from __future__ import annotations

import math
from typing import Sequence

import tvm
from tvm import sym, tirx
from tvm.ir import Range, TensorLoad

from tilelayout.expr import mentions as _uses
from tilelayout.layout import substitute

from .hardware import lanes_for_bits, widening_load_bits
from .ir_utils import walk

__all__ = ["plan_vector_width", "is_contiguous_run", "same_in_group", "linear_offset", "value_lane_cap",
           "affine_terms", "FLOAT8_CONVERSION_LANES", "INTEGER_BITWISE_LANES", "NARROW_ARITHMETIC_LANES"]


def linear_offset(indices: Sequence, shape: Sequence):
    """Row-major element offset of ``indices`` into a buffer of ``shape``."""
    out = tirx.const(0, "int32")
    for idx, ext in zip(indices, shape):
        out = out * ext + idx
    return out


def is_contiguous_run(offset, var, extent: int, width: int, bounds: dict) -> bool:
    """Can ``var`` be vectorised by ``width``: each aligned group of ``width`` iterations reads
    consecutive, ``width``-aligned elements (TileLang's IndicesCanVectorize)."""
    if width == 1:
        return True
    if extent % width:
        return False
    terms = affine_terms(offset)
    if terms is not None:
        return _affine_run(terms, var, width, bounds)
    return _proved_run(offset, var, extent, width, bounds)


def affine_terms(expr) -> list | None:
    """``[(var, coefficient), ...] + [(None, constant)]`` when ``expr`` is an integer combination of variables
    (sums, differences, products with a constant), else None; a variable appears once."""
    out: list = []
    const = _collect(expr, 1, out)
    if const is None:
        return None
    merged: list = []
    for v, c in out:
        for k, (w, d) in enumerate(merged):
            if w.same_as(v):
                merged[k] = (w, d + c)
                break
        else:
            merged.append((v, c))
    return merged + [(None, const)]


def _collect(e, scale: int, out: list) -> int | None:
    """Append ``scale * e``'s variable terms to ``out``; its constant part, or None when ``e`` is not affine."""
    kind = type(e)
    if kind is tirx.IntImm:
        return scale * int(e.value)
    if kind is tirx.Var:
        if not str(e.ty).startswith("int"):
            return None
        out.append((e, scale))
        return 0
    if kind is tirx.Add or kind is tirx.Sub:
        a = _collect(e.a, scale, out)
        b = None if a is None else _collect(e.b, scale if kind is tirx.Add else -scale, out)
        return None if b is None else a + b
    if kind is tirx.Mul:
        if type(e.b) is tirx.IntImm:
            return _collect(e.a, scale * int(e.b.value), out)
        if type(e.a) is tirx.IntImm:
            return _collect(e.b, scale * int(e.a.value), out)
    return None


def _affine_run(terms: list, var, width: int, bounds: dict) -> bool:
    """``is_contiguous_run`` for ``offset = c * var + sum(a_v * v) + k``: a run of ``width`` consecutive
    ``var`` moves the offset by ``c`` per step, so it is contiguous iff c == 1; the run's first offset is
    ``width``-aligned for every value of the other variables iff k and every a_v with v able to be nonzero
    (not bound to extent 1) are multiples of ``width`` (each such v takes the values 0 and 1). Equal to
    the analyzer's proof on affine offsets (tests compare the two)."""
    coeff = 0
    for v, a in terms:
        if v is None:
            if a % width:
                return False
        elif v.same_as(var):
            coeff = a
        elif a % width and next((e for w, e in bounds.items() if w.same_as(v)), None) != 1:
            return False
    return coeff == 1


def _lane_analyzer(var, extent: int, width: int, bounds: dict) -> tuple:
    """(analyzer, group, lane): ``var`` written as ``group * width + lane``, every other loop variable of
    ``bounds`` bound to its range."""
    outer, lane = tirx.Var("v_outer", "int32"), tirx.Var("v_lane", "int32")
    ana = sym.Analyzer()
    for v, ext in bounds.items():
        if v is not var:
            ana.bind(v, Range(0, ext))
    ana.bind(outer, Range(0, extent // width))
    ana.bind(lane, Range(0, width))
    return ana, outer, lane


def _proved_run(offset, var, extent: int, width: int, bounds: dict) -> bool:
    """``is_contiguous_run`` by TVM's analyzer (any offset)."""
    ana, outer, lane = _lane_analyzer(var, extent, width, bounds)
    base = ana.simplify(substitute(offset, {var: outer * width}))
    step = ana.simplify(substitute(offset, {var: outer * width + lane}) - base)
    return bool(ana.can_prove_equal(step, lane)) and bool(ana.can_prove(tirx.floormod(base, width) == 0))


def plan_vector_width(loop_vars: Sequence, extents: Sequence[int], accesses: Sequence, max_bits: int,
                      value_cap: int | None = None) -> int:
    """Vector width of a loop nest from its accesses (``accesses``: (BufferInfo, indices, is_write)).

    Memory (global/shared) accesses must be contiguous and aligned along the innermost loop variable;
    a store that does not move with it must stay scalar; register accesses only cap the width by their
    element size, except accesses to physical register arrays (lowered fragments, locals): stores must move
    contiguously with the lane, and loads must read one register per vector or consecutive ones. A load that
    gathers (an unpacking read ``packed[j // 2]`` over lanes j) would need a vector of register indices, and
    apache-tvm 0.27's CUDA code generator emits eight-lane 32-bit index vectors as ``make_longlong4`` with
    eight arguments, which nvcc rejects.
    """
    inner, inner_ext = loop_vars[-1], extents[-1]
    if not isinstance(inner_ext, int):
        return 1
    limit = math.gcd(max_bits, inner_ext)
    bounds = {v: e for v, e in zip(loop_vars, extents) if isinstance(e, int)}
    # the widest element of the statement caps every access's lanes (the rule the io-aware model uses too),
    # except a converting load into wider registers, whose memory side sets them (``hardware.lanes_for_bits``)
    lanes = lanes_for_bits(max_bits, [buf.bits for buf, _, _ in accesses], widening_load_bits(
        [(buf.bits, buf.is_fragment or buf.is_local, w, buf.dtype) for buf, _, w in accesses])) if accesses else limit
    if _converts_float8(accesses):
        lanes = min(lanes, FLOAT8_CONVERSION_LANES)
    if value_cap is not None:        # what the stored values' operations allow (``value_lane_cap``)
        lanes = min(lanes, value_cap)
    memory_width, local_width = None, math.gcd(limit, lanes)
    for buf, indices, is_write in accesses:
        if buf.is_fragment or buf.is_local:
            if is_write and not buf.is_fragment:
                # a physical register array (a lowered fragment, a local): lanes must write distinct consecutive
                # slots, or a vector store would drop all but one update (``acc[0] += B[i, j]`` over lanes j)
                local_width = math.gcd(local_width, _contiguous_width(
                    linear_offset(indices, buf.shape), inner, inner_ext, local_width, bounds))
            elif not buf.is_fragment:
                local_width = math.gcd(local_width, _gather_free_width(
                    linear_offset(indices, buf.shape), inner, inner_ext, local_width, bounds))
            continue
        offset = linear_offset(indices, buf.shape)
        if not _uses(offset, inner):
            if is_write:
                return 1
            continue
        width = _contiguous_width(offset, inner, inner_ext, min(limit, lanes), bounds)
        memory_width = width if memory_width is None else math.gcd(memory_width, width)
    if memory_width is None:
        return _largest_pow2_at_most(local_width)
    return _largest_pow2_at_most(math.gcd(memory_width, local_width))


def _contiguous_width(offset, inner, inner_ext: int, cap: int, bounds: dict) -> int:
    """The widest power of two up to ``cap`` over which ``offset`` moves contiguously with ``inner``."""
    if not _uses(offset, inner):
        return 1
    return _widest(cap, lambda w: is_contiguous_run(offset, inner, inner_ext, w, bounds))


def _widest(cap: int, fits) -> int:
    """The widest power of two up to ``cap`` that ``fits`` (1 when none wider does)."""
    width = _largest_pow2_at_most(cap)
    while width > 1 and not fits(width):
        width //= 2
    return width


#: most lanes of a vectorised conversion to or from a float8 type: apache-tvm 0.27's CUDA generator converts
#: 2 and 4 lanes (``__nv_fp8x4_e4m3`` and its kin) but prints 8 as a C cast between storage vectors (``(uint2)``
#: of a ``uint4``), which nvcc rejects; measured for float16, bfloat16 and float32 both ways, e4m3 and e5m2
FLOAT8_CONVERSION_LANES = 4


#: most lanes of a vector of integer ``&``, ``|``, ``^``, ``~``, ``<<`` or ``>>``: at 4 lanes apache-tvm 0.27 stops
#: in LowerIntrin on an 8-bit shift by one amount for every lane, at 8 lanes nvcc rejects every integer width;
#: also of a loop index narrowed to 8 bits (4 lanes: nvcc rejects the char4 of an int4 ramp)
INTEGER_BITWISE_LANES = 2
#: most lanes of an integer multiply, divide, modulo, min, max (a float32 one too: 256-bit statements on sm_100+),
#: or of any select: at 8 lanes (8- and 16-bit integers, float32, float16 selects) apache-tvm 0.27 prints code
#: nvcc rejects, or has no CUDA type for the mask
NARROW_ARITHMETIC_LANES = 4
_BITWISE = (tirx.BitwiseAnd, tirx.BitwiseOr, tirx.BitwiseXor, tirx.BitwiseNot, tirx.LShift, tirx.RShift)
_ARITHMETIC = (tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max)


def value_lane_cap(stmt) -> int | None:
    """The most lanes apache-tvm 0.27's CUDA generator emits correctly for the values ``stmt`` stores (measured
    op by op with nvcc: ``tests/test_vectorize.py``), or None when nothing in them limits the width. Addresses
    (the indices of loads and stores) are scalar per lane and do not count."""
    caps: list = []

    def visit(e) -> None:
        if isinstance(e, TensorLoad) or not isinstance(e, tvm.ir.Expr):
            return
        if isinstance(e, tirx.Cast):
            if str(e.ty).startswith("float8") or str(e.value.ty).startswith("float8"):
                caps.append(FLOAT8_CONVERSION_LANES)
            elif str(e.ty) in ("int8", "uint8") and not _reads_memory(e.value):
                caps.append(INTEGER_BITWISE_LANES)   # 4 lanes of an index (a ramp) narrowed to bytes: nvcc rejects
            visit(e.value)
            return
        if isinstance(e, _BITWISE):
            caps.append(INTEGER_BITWISE_LANES)
        elif isinstance(e, tirx.Select) or (isinstance(e, _ARITHMETIC) and (
                not str(e.ty).startswith(("float", "bfloat")) or tvm.DataType(str(e.ty)).bits >= 32)):
            caps.append(NARROW_ARITHMETIC_LANES)
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(e, name, None)
            if child is not None and child is not e:
                visit(child)
        if isinstance(e, tvm.ir.Call):
            for arg in e.args:
                visit(arg)

    walk(stmt, [(tirx.BufferStore, lambda s: visit(s.value))])
    return min(caps) if caps else None


def _reads_memory(expr) -> bool:
    found = []
    walk(expr, [(TensorLoad, found.append)])
    return bool(found)


def _converts_float8(accesses: Sequence) -> bool:
    """A statement reading or writing a float8 buffer beside a buffer of another dtype converts between them
    (a cast to or from float8); a float8-only copy moves bytes and keeps its full width."""
    dtypes = {str(buf.dtype) for buf, _, _ in accesses}
    return any(d.startswith("float8") for d in dtypes) and len(dtypes) > 1


def _gather_free_width(offset, inner, inner_ext: int, cap: int, bounds: dict) -> int:
    """The widest power of two up to ``cap`` over which every aligned group of lanes reads one element
    (a broadcast) or consecutive, aligned ones (a vector load) at ``offset``."""
    if not _uses(offset, inner):
        return _largest_pow2_at_most(cap)
    return _widest(cap, lambda w: same_in_group(offset, inner, inner_ext, w, bounds)
                   or is_contiguous_run(offset, inner, inner_ext, w, bounds))


def same_in_group(expr, var, extent: int, width: int, bounds: dict) -> bool:
    """``expr`` (an index or a condition) takes one value inside every aligned group of ``width`` iterations of
    ``var``: a register load is then a broadcast, a guard can be evaluated once per vector."""
    if extent % width:
        return False
    ana, outer, lane = _lane_analyzer(var, extent, width, bounds)
    full, base = substitute(expr, {var: outer * width + lane}), substitute(expr, {var: outer * width})
    if str(full.ty) == "bool":
        return bool(ana.can_prove(tirx.EQ(tirx.Cast("int32", full), tirx.Cast("int32", base))))
    return bool(ana.can_prove(full == base))


def _largest_pow2_at_most(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)
