"""The tcgen05.mma plan of a gemm on Blackwell (sm_100a): what inference decides, once, for ``gemm_plan``.

Why a module of its own: on sm_100a a gemm's accumulator lives in Tensor Memory and reaches registers through
``tcgen05.ld``, so the plan is not a warp partition but an instruction shape, a placement of the accumulator's
M-blocks in TMEM columns and the ``tcgen05.ld`` shape that reads them back (``tilelayout.tmem``). The rule:

* targets: ``sm_100a`` and ``sm_103a`` (tcgen05 is arch-specific: plain ``sm_100`` keeps mma.sync, as plain
  ``sm_90`` keeps it instead of wgmma);
* operand kinds: f16 / bf16 (``kind::f16``), float32 read as tf32 (``kind::tf32``), fp8 e4m3 / e5m2 in any
  pair (``kind::f8f6f4``), all with a float32 accumulator; both operands in shared memory (SS), K- or MN-major;
* shapes: cta_group::1, M = 128 when the tile's M is a multiple of 128, else 64 (M a multiple of 64); N of one
  instruction the largest divisor of the tile's N up to 256 that is a multiple of 16 (M=128) or 8 (M=64);
  K a multiple of the kind's K (16, 8, 32);
* TMEM: 128-row blocks side by side in columns, 64-row blocks in pairs over the lower and upper half
  subpartitions (``tmem.accumulator_blocks``); at most 512 columns; the allocation a power of two >= 32;
* read-out: ``tcgen05.ld.32x32b`` for M=128 (a row per thread), ``16x256b`` for M=64 (the wgmma accumulator
  layout), by whole warpgroups (threads and their offset multiples of 128: warp ``w`` may only touch the lanes
  of subpartition ``w % 4``), warpgroup ``g`` reading the ``g``-th slice of the columns.

Everything else is refused (``gemm_plan`` raises ``GemmPlanError`` naming the gemm and the fix): a register or Tensor-Memory A (the
TS form is not planned), int8 (``kind::i8``), float16 accumulators, fp8 e2m3 / e3m2 / e2m1, shapes outside the
rule. float64 gemms have no tcgen05 form and keep mma.sync m8n8k4 (as on Hopper). Nothing is silently run on
mma.sync instead.
"""
from __future__ import annotations

from tilelayout import tmem
from tilelayout.errors import LayoutError

__all__ = ["TCGEN05_ARCHS", "has_tcgen05", "TCGEN05_KINDS", "tcgen05_fields", "tcgen05_kind", "chain_conflict"]

TCGEN05_ARCHS = ("sm_100a", "sm_103a")

#: operand kind (gemm_plan._kind) -> (PTX kind, K of one instruction)
TCGEN05_KINDS = {"f16": ("kind::f16", 16), "bf16": ("kind::f16", 16), "tf32": ("kind::tf32", 8),
                 "f8": ("kind::f8f6f4", 32)}


def has_tcgen05(target) -> bool:
    """Whether gemms on ``target`` (a tvm Target) are planned as tcgen05.mma."""
    return target.kind.name == "cuda" and str(target.attrs.get("arch", "")) in TCGEN05_ARCHS


def tcgen05_kind(a_kind: str) -> str:
    return TCGEN05_KINDS[a_kind][0]


class _Refusal(Exception):
    """Why a gemm cannot be planned as tcgen05; ``gemm_plan`` turns it into its ``GemmPlanError``."""


def _refuse(op, why: str, fix: str):
    raise _Refusal(f"{op.describe()}: on sm_100a gemms run as tcgen05.mma, but {why}; {fix} (a gemm here never "
                   f"falls back to mma.sync)")


def tcgen05_fields(op, kind: str, m: int, n: int, k: int, threads: int, thread_offset: int) -> dict | str:
    """The instruction-specific fields of a tcgen05 plan (instr_m/n/k, warp_m/n, ld_shape, tmem_columns), or
    the message saying why none exists and what would work (``gemm_plan`` raises it)."""
    try:
        return _fields(op, kind, m, n, k, threads, thread_offset)
    except _Refusal as why:
        return str(why)


def _fields(op, kind: str, m: int, n: int, k: int, threads: int, thread_offset: int) -> dict:
    a, b, c = op.a.buffer, op.b.buffer, op.c.buffer
    if kind not in TCGEN05_KINDS:
        what = {"i8": "8-bit integer operands (kind::i8) are not planned yet"}.get(
            kind, f"{a.dtype} operands have no tcgen05 form planned here")
        _refuse(op, what, "use float16, bfloat16, float32 (tf32) or fp8 operands, or target sm_90a")
    if a.is_fragment:
        _refuse(op, f"operand A ({a.name}) is a register fragment and tcgen05.mma reads A from shared memory or "
                    f"Tensor Memory (the TS form with A in Tensor Memory is not planned yet)",
                f"stage {a.name} in a shared buffer")
    if str(c.dtype) != "float32":
        _refuse(op, f"the accumulator {c.name} is {c.dtype} and only float32 accumulators in Tensor Memory are "
                    f"planned", f"accumulate into a float32 fragment and cast after the gemm")
    if threads % 128 or thread_offset % 128:
        _refuse(op, f"its threads ({threads} from thread {thread_offset}) are not whole warpgroups, and each warp "
                    f"of a warpgroup reads its own 32 lanes of Tensor Memory", "run it on a multiple of 128 threads "
                    "starting at a multiple of 128")
    groups = threads // 128
    if m % 64:
        _refuse(op, f"M={m} is not a multiple of 64 (tcgen05.mma cta_group::1 has M=64 and M=128)",
                "pad or retile M to a multiple of 64")
    instr_m = 128 if m % 128 == 0 else 64
    step = 16 if instr_m == 128 else 8
    width = n // groups if n % groups == 0 else 0
    if n % step or not width or width % (8 if instr_m == 64 else 1):
        _refuse(op, f"N={n} does not split into instructions of N a multiple of {step} read by {groups} "
                    f"warpgroup(s)", f"make N a multiple of {step * groups if instr_m == 128 else 8 * groups}")
    instr_n = max(d for d in range(step, min(n, 256) + 1, step) if n % d == 0)
    k_step = TCGEN05_KINDS[kind][1]
    if k % k_step:
        _refuse(op, f"K={k} is not a multiple of the instruction's K step {k_step} for {a.dtype} operands (operand A "
                    f"({a.name}), operand B ({b.name}))", f"pad or retile K to a multiple of {k_step}")
    try:
        blocks = tmem.accumulator_blocks(m, n, instr_m)
    except LayoutError as err:
        _refuse(op, str(err), "split the tile (smaller M or N per block)")
    used = max(blk.col_offset for blk in blocks) + n
    return {"instr_m": instr_m, "instr_n": instr_n, "instr_k": k_step, "warp_m": 4, "warp_n": groups,
            "ld_shape": tmem.accumulator_ld_shape(instr_m), "tmem_columns": tmem.alloc_columns(used)}


def chain_conflict(chain: list, chain_plans: dict) -> str | None:
    """A chain of gemms on sm_100a is planned per gemm (each accumulator has its own TMEM columns); the message
    refusing a chain mixing tcgen05 with another instruction (a float64 gemm chained to a tcgen05 one), or None."""
    kinds = {p.instruction for p in chain_plans.values()}
    if "tcgen05" not in kinds or len(kinds) == 1:
        return None
    names = ", ".join(f"{g.describe()} ({chain_plans[g.index].instruction})" for g in chain)
    return f"gemms chained through fragments mix tcgen05.mma with other instructions: {names}; give them operands of " \
           f"one kind"
