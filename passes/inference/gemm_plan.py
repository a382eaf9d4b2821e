"""The gemm plan: how one ``Tx.gemm`` runs on tensor cores, decided once by inference, recorded in the IR.

Why: the accumulator and operand fragments of a gemm, the code lowering emits for it and the layouts of every
fragment chained to it (attention's ``S``, ``P``, ``O`` and their row vectors) all follow from three choices:
the instruction, its shape and the warp partition. Inference makes them once (here) and writes them into the
PrimFunc; lowering reads them back (``gemm_plan_of``) instead of deciding again, so the two cannot disagree.

Interface (stable: extend, never rename):

* ``GemmPlan`` (frozen dataclass): ``instruction`` (``"mma_sync"`` | ``"wgmma"`` | ``"tcgen05"``), the instruction shape
  ``instr_m, instr_n, instr_k``, the tile ``m, n, k``, ``threads``, the warp partition ``warp_m, warp_n``
  (number of warps along M and along N, TileLang's ``m_warp, n_warp``; warps are numbered M-block fastest,
  for wgmma in warpgroups of four along M), the warp ``policy`` (``"square"`` | ``"full_row"`` |
  ``"full_col"``) and where it came from (``policy_source``: ``"user"``, ``"default"``, ``"chain"``),
  ``a_in_registers``, ``a_dtype, b_dtype, accum_dtype``, ``transpose_a, transpose_b``, ``thread_offset``
  (the first thread of the range running the gemm; the fragments are over ``threads`` threads from there);
  for tcgen05 also ``ld_shape`` (the ``tcgen05.ld`` shape reading the accumulator out of Tensor Memory) and
  ``tmem_columns`` (the TMEM columns allocated), see ``tcgen05_plan``.
  ``plan.accumulator_fragment()`` / ``plan.a_fragment()`` / ``plan.b_fragment()`` build the register
  fragments FROM the plan (``tilelayout.gemm_layouts`` with ``warp_partition=(warp_m, warp_n)``).
  ``to_dict()`` / ``GemmPlan.from_dict()``: plain ints, strings and bools.
* ``plan_gemm(op, threads, target, policy=None, instruction=None) -> GemmPlan`` for one gemm (raises
  ``GemmPlanError`` naming the gemm, the operand and what would work); ``plan_gemms(ops, threads, target)``
  plans every gemm of a kernel jointly (see "Chains" below) and returns ``{op index: GemmPlan}``.
* Annotation: the function attribute ``"tilelayout.gemm_plans"`` = ``{ordinal: plan.to_dict()}``, where the
  ordinal (a decimal string) is the gemm's position among the ``tirx.tile.gemm`` calls of the function in
  program order. ``annotate_gemm_plans(func, {ordinal: plan})`` writes it (it prints and survives
  print -> parse), ``read_gemm_plans(func)`` reads ``{ordinal: GemmPlan}``, ``gemm_ordinal(func, op)`` finds
  an op's ordinal and ``gemm_plan_of(func, op)`` returns the plan of one front-end ``GemmOp`` (checking that
  the recorded tile shape still matches the op).

Instruction choice (TileLang's rule, checked against TileLang 0.1.15): on sm_90 wgmma when B is in shared
memory, A is in shared memory or (K-major) in registers, the block has whole warpgroups, the dtypes have a
wgmma form and a warpgroup partition exists; mma.sync m16n8kK otherwise (sm_80 and newer; m8n8k4 for
float64). K is 16 for 16-bit operands, 8 for tf32, 32 for 8-bit ones. On sm_100a / sm_103a every gemm but a
float64 one is planned as tcgen05.mma with its accumulator in Tensor Memory, or refused (``tcgen05_plan``).

Warp policy: ``Tx.gemm(..., warp_policy="full_row")`` (any spelling of square / full_row / full_col; the
keyword lands in the call's config and survives print -> parse). Without it a gemm gets TileLang's default,
square, unless it is chained.

Chains: gemms whose fragments meet (attention: ``S = Q K^T``'s accumulator feeds the register A operand ``P``
of ``O += P V``, and row vectors reduced from ``S`` rescale ``O``) must use one instruction and give every row
to the same threads in each of them. Gemms are chained when they are linked through fragments (an op
touching a fragment of one and a fragment of the other, transitively). A chain uses wgmma only if all its
gemms can; gemms of a chain without a user policy get ``full_row`` (all warps on M, so an accumulator row
lives in one quad of one warp and a register A operand fed from it needs no other warp), provided every
gemm of the chain then has ``warp_n == 1``; otherwise they keep square.
"""
from __future__ import annotations

import re
from dataclasses import MISSING, asdict, dataclass, fields

import tvm
from tilelayout.ir_walk import walk_typed
from tvm import tirx

from tilelayout import gemm_layouts
from tilelayout.errors import InferenceError, LayoutError
from tilelayout.fragment import Fragment

from ..hardware import normalize_target, sm_version
from .tcgen05_plan import chain_conflict, has_tcgen05, tcgen05_fields, tcgen05_kind

__all__ = ["GemmPlan", "GemmPlanError", "GEMM_PLANS_ATTR", "POLICIES", "plan_gemm", "plan_gemms", "chains",
           "annotate_gemm_plans", "read_gemm_plans", "gemm_ordinal", "gemm_ordinals", "gemm_plan_of", "gemm_calls",
           "policy_of", "uses_wgmma"]

GEMM_PLANS_ATTR = "tilelayout.gemm_plans"
POLICIES = ("square", "full_row", "full_col")
_POLICY_NAMES = {"square": "square", "fullrow": "full_row", "fullcol": "full_col"}
_INSTRUCTIONS = ("mma_sync", "wgmma", "tcgen05")


class GemmPlanError(InferenceError):
    """A gemm no tensor-core instruction can run as written (the message says what would work)."""


@dataclass(frozen=True)
class GemmPlan:
    """One gemm's instruction, instruction shape, warp partition and operand facts (see module doc)."""

    instruction: str
    instr_m: int
    instr_n: int
    instr_k: int
    m: int
    n: int
    k: int
    threads: int
    warp_m: int
    warp_n: int
    policy: str
    policy_source: str
    a_in_registers: bool
    a_dtype: str
    b_dtype: str
    accum_dtype: str
    transpose_a: bool = False
    transpose_b: bool = False
    thread_offset: int = 0         # first thread of the range running the gemm (warp-specialised kernels)
    ld_shape: str = ""             # tcgen05: the tcgen05.ld shape reading the accumulator out of Tensor Memory
    tmem_columns: int = 0          # tcgen05: Tensor Memory columns the accumulator is allocated

    @property
    def warp_partition(self) -> tuple[int, int]:
        return (self.warp_m, self.warp_n)

    @property
    def rows_per_warp(self) -> int:
        return self.m // self.warp_m

    @property
    def cols_per_warp(self) -> int:
        return self.n // self.warp_n

    def accumulator_fragment(self) -> Fragment:
        """The m x n accumulator fragment the instruction writes under this partition (for tcgen05: the
        registers ``tcgen05.ld`` reads the Tensor Memory accumulator into)."""
        if self.instruction == "tcgen05":
            from tilelayout.tmem import tmem_ld_fragment
            return tmem_ld_fragment(self.ld_shape, self.instr_m, self.n, self.warp_n, self.m // self.instr_m)
        if self.instruction == "wgmma":
            return gemm_layouts.make_wgmma_accumulator_fragment(self.m, self.n, self.threads,
                                                                warp_partition=self.warp_partition)
        return gemm_layouts.make_mma_accumulator_fragment(self.m, self.n, self.threads, self.accum_dtype,
                                                          warp_partition=self.warp_partition)

    def a_fragment(self) -> Fragment:
        """The register fragment of operand A (m x k, or k x m when ``transpose_a``) this instruction reads."""
        if self.instruction == "tcgen05":
            raise LayoutError(f"a tcgen05 plan ({self.describe()}) reads A from shared memory; it has no register A")
        if self.instruction == "wgmma":
            return gemm_layouts.make_wgmma_fragment_a(self.m, self.k, self.threads, self.a_dtype,
                                                      warp_partition=self.warp_partition)
        return gemm_layouts.make_gemm_fragment_a(self.m, self.n, self.k, self.threads, self.a_dtype,
                                                 self.transpose_a, warp_partition=self.warp_partition)

    def b_fragment(self) -> Fragment:
        """The mma.sync register fragment of operand B (what ldmatrix loads; B itself stays in shared)."""
        return gemm_layouts.make_gemm_fragment_b(self.m, self.n, self.k, self.threads, self.b_dtype,
                                                 self.transpose_b, warp_partition=self.warp_partition)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data) -> "GemmPlan":
        data = _plain(data)
        if not isinstance(data, dict):
            raise LayoutError(f"a gemm plan annotation must be a dict, got {data!r}")
        kwargs = {}
        for f in fields(cls):
            if f.name not in data:
                if f.default is not MISSING:
                    continue
                raise LayoutError(f"gemm plan annotation {data!r} lacks {f.name!r}")
            kwargs[f.name] = data[f.name]
        plan = cls(**kwargs)
        if plan.instruction not in _INSTRUCTIONS or plan.policy not in POLICIES:
            raise LayoutError(f"malformed gemm plan annotation {data!r}")
        return plan

    def describe(self) -> str:
        shape = f"m{self.instr_m}n{self.instr_n}k{self.instr_k}"
        if self.instruction == "tcgen05":
            return (f"tcgen05.mma {shape} {tcgen05_kind(_kind(self.a_dtype))} cta_group::1, SS, accumulator in Tensor "
                    f"Memory ({self.tmem_columns} columns), read by tcgen05.ld {self.ld_shape} over {self.warp_n} "
                    f"warpgroup(s)")
        return (f"{self.instruction} {shape}, {self.warp_m}x{self.warp_n} warps ({self.policy}, "
                f"{self.policy_source}){', A in registers' if self.a_in_registers else ''}")


# ------------------------------------------------------------------------------------ deciding

def policy_of(op) -> str | None:
    """The user's warp policy of a gemm (``Tx.gemm(..., warp_policy=...)``), normalised, or None."""
    raw = getattr(op, "policy", None)
    if raw is None:
        return None
    try:
        return _POLICY_NAMES[gemm_layouts.normalize_warp_policy(raw)]
    except LayoutError:
        raise GemmPlanError(f"{op.describe()}: unknown warp_policy {raw!r}; use square, full_row or full_col") from None


def _dtype(buf) -> str:
    return str(buf.dtype)


def _bits(dtype: str) -> int:
    return tvm.DataType(dtype).bits


_FLOAT8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3", "e4m3_float8", "e5m2_float8")


def _kind(dtype: str) -> str:
    if dtype in ("float16",):
        return "f16"
    if dtype == "bfloat16":
        return "bf16"
    if dtype in ("float32", "tfloat32"):
        return "tf32"
    if dtype == "float64":
        return "f64"
    if dtype in ("int8", "uint8"):
        return "i8"
    if dtype.startswith("float8") or dtype in _FLOAT8:
        return "f8"
    return dtype


# (operand kind) -> (accumulator dtypes, K of one instruction, minimum sm) ; wgmma has no f64 form
_MMA_FORMS = {"f16": (("float16", "float32"), 16, 80), "bf16": (("float32",), 16, 80),
              "tf32": (("float32",), 8, 80), "i8": (("int32",), 32, 80), "f8": (("float16", "float32"), 32, 89),
              "f64": (("float64",), 4, 80)}
#: operand kinds wgmma reads K-major only (A [M, K], B [N, K] with transpose_B), as PTX and TileLang require
_K_MAJOR_ONLY = ("tf32", "i8", "f8")
_WGMMA_FORMS = {"f16": ("float16", "float32"), "bf16": ("float32",), "tf32": ("float32",), "i8": ("int32",),
                "f8": ("float16", "float32")}


def _operand_kind(op) -> str:
    a, b, c = _dtype(op.a.buffer), _dtype(op.b.buffer), _dtype(op.c.buffer)
    ka, kb = _kind(a), _kind(b)
    forms = ", ".join(f"{k} -> {'/'.join(v[0])}" for k, v in _MMA_FORMS.items())
    if ka != kb or ka not in _MMA_FORMS:
        raise GemmPlanError(f"{op.describe()}: no tensor-core instruction multiplies A ({a}) by B ({b}); both "
                            f"operands must have one of these kinds ({forms}); cast an operand first")
    if c not in _MMA_FORMS[ka][0]:
        raise GemmPlanError(f"{op.describe()}: {a} x {b} operands cannot accumulate into {c} (accumulator "
                            f"{op.c.buffer.name}); use {' or '.join(_MMA_FORMS[ka][0])}")
    return ka


def _shape(op) -> tuple[int, int, int]:
    a, b = op.a.squeezed_extents(), op.b.squeezed_extents()
    m, k = (a[1], a[0]) if op.transpose_a else (a[0], a[1])
    n = b[0] if op.transpose_b else b[1]
    for name, v in (("M", m), ("N", n), ("K", k)):
        if not isinstance(v, int):
            raise GemmPlanError(f"{op.describe()}: the gemm's {name} extent {v} must be a constant")
    return m, n, k


def _check_operands(op) -> None:
    a, b, c = op.a.buffer, op.b.buffer, op.c.buffer
    if not c.is_fragment:
        raise GemmPlanError(f"{op.describe()}: the accumulator {c.name} is in {c.scope}; tensor-core gemms "
                            f"accumulate into a local.fragment buffer")
    if b.is_fragment:
        raise GemmPlanError(f"{op.describe()}: operand B ({b.name}) is a register fragment, but mma.sync and "
                            f"wgmma read B from shared memory here; stage {b.name} in a shared buffer "
                            f"(Tx.copy into T.alloc_buffer(..., scope=\"shared\")) or swap the operands "
                            f"(C^T = B^T A^T) so the register tile is A")
    if not b.is_shared:
        raise GemmPlanError(f"{op.describe()}: operand B ({b.name}) is in {b.scope}; stage it in shared memory")
    if not (a.is_shared or a.is_fragment):
        raise GemmPlanError(f"{op.describe()}: operand A ({a.name}) is in {a.scope}; stage it in shared memory "
                            f"or load it into a local.fragment buffer")


def uses_wgmma(op, threads: int, target, kind: str | None = None, thread_offset: int = 0) -> bool:
    """TileLang's rule: Hopper (sm_90) issues wgmma when B is in shared memory, A is in shared memory or
    K-major in registers, the threads running it are whole warpgroups, the dtypes have a wgmma form (8-bit and
    tf32 operands only K-major: A not transposed, B transposed) and the tile has a warpgroup partition (each
    warp 16-row slabs, every warpgroup whole 64-row blocks)."""
    target = normalize_target(target)
    if not 90 <= sm_version(target) < 100:
        return False
    if not op.b.buffer.is_shared or threads % 128 or thread_offset % 128:
        return False
    if op.a.buffer.is_fragment and op.transpose_a:
        return False
    if not (op.a.buffer.is_shared or op.a.buffer.is_fragment):
        return False
    try:
        kind = kind or _operand_kind(op)
        m, n, _ = _shape(op)
    except GemmPlanError:
        return False
    if kind not in _WGMMA_FORMS or _dtype(op.c.buffer) not in _WGMMA_FORMS[kind]:
        return False
    if kind in _K_MAJOR_ONLY and (op.transpose_a or not op.transpose_b):
        return False            # wgmma transposes 16-bit operands only: 8-bit and tf32 ones must be K-major
    try:
        gemm_layouts.compute_warp_partition(m, n, threads // 32, "square", "wgmma")
    except LayoutError:
        return False
    return True


def plan_gemm(op, threads: int, target, policy: str | None = None, instruction: str | None = None,
              policy_source: str | None = None, thread_offset: int = 0) -> GemmPlan:
    """The plan of one gemm run by ``threads`` threads from ``thread_offset`` on. ``policy`` overrides the op's
    own ``warp_policy`` (else square); ``instruction`` forces ``"mma_sync"`` (a chain that cannot use wgmma
    everywhere); raises ``GemmPlanError``."""
    target = normalize_target(target)
    _check_operands(op)
    kind = _operand_kind(op)
    m, n, k = _shape(op)
    user = policy_of(op)
    if policy is None:
        policy, source = (user, "user") if user is not None else ("square", "default")
    else:
        policy = _POLICY_NAMES[gemm_layouts.normalize_warp_policy(policy)]
        source = policy_source or ("user" if user == policy else "chain")
    sm = sm_version(target)
    if sm < 80:
        raise GemmPlanError(f"{op.describe()}: tensor-core gemms need sm_80 or newer, the target is "
                            f"{target.attrs.get('arch', target.kind.name)}")
    if kind == "f64" and op.a.buffer.is_fragment:
        raise GemmPlanError(f"{op.describe()}: operand A ({op.a.buffer.name}) is a register fragment, but float64 gemms "
                            f"(mma.sync m8n8k4) read A from shared memory here; stage {op.a.buffer.name} in a shared "
                            f"buffer")
    accs, k_step, min_sm = _MMA_FORMS[kind]
    if sm < min_sm:
        raise GemmPlanError(f"{op.describe()}: {_dtype(op.a.buffer)} operands need sm_{min_sm} or newer")
    if has_tcgen05(target) and kind != "f64":
        if instruction not in (None, "tcgen05"):
            raise GemmPlanError(f"{op.describe()}: on {target.attrs['arch']} this gemm runs as tcgen05.mma, not "
                                f"{instruction}")
        fields_ = tcgen05_fields(op, kind, m, n, k, threads, thread_offset)
        if isinstance(fields_, str):
            raise GemmPlanError(fields_)
        return GemmPlan(instruction="tcgen05", m=m, n=n, k=k, threads=threads, policy=policy, policy_source=source,
                        a_in_registers=False, a_dtype=_dtype(op.a.buffer), b_dtype=_dtype(op.b.buffer),
                        accum_dtype=_dtype(op.c.buffer), transpose_a=bool(op.transpose_a),
                        transpose_b=bool(op.transpose_b), thread_offset=thread_offset, **fields_)
    if instruction is None:
        instruction = "wgmma" if uses_wgmma(op, threads, target, kind, thread_offset) else "mma_sync"
    if threads % 32 or thread_offset % 32:
        raise GemmPlanError(f"{op.describe()}: the threads running it ({threads} from thread {thread_offset}) are "
                            f"not whole warps")
    try:
        wm, wn = gemm_layouts.compute_warp_partition(m, n, threads // 32, policy, instruction)
    except LayoutError:
        rows = 64 if instruction == "wgmma" else 16
        raise GemmPlanError(
            f"{op.describe()}: the {m}x{n} accumulator {op.c.buffer.name} cannot be split over {threads // 32} "
            f"warps for {instruction} (policy {policy}): every warp needs a multiple of 16 rows (M) and 8 columns "
            f"(N); make M a multiple of {rows if instruction == 'wgmma' else 16 * (threads // 32)} or N a "
            f"multiple of {8 * (threads // 32)}, or use fewer threads") from None
    if k % k_step:
        raise GemmPlanError(f"{op.describe()}: K={k} is not a multiple of the instruction's K step {k_step} for "
                            f"{_dtype(op.a.buffer)} operands (operand A ({op.a.buffer.name}), operand B "
                            f"({op.b.buffer.name})); pad or retile K to a multiple of {k_step}")
    if kind == "f64":
        instr = (8, 8, 4)
    elif instruction == "wgmma":
        per = n // wn
        instr_n = max(d for d in range(8, min(per, 256) + 1, 8) if per % d == 0)
        instr = (64, instr_n, k_step)
    else:
        instr = (16, 8, k_step)
    return GemmPlan(instruction=instruction, instr_m=instr[0], instr_n=instr[1], instr_k=instr[2], m=m, n=n, k=k,
                    threads=threads, warp_m=wm, warp_n=wn, policy=policy, policy_source=source,
                    a_in_registers=op.a.buffer.is_fragment, a_dtype=_dtype(op.a.buffer), b_dtype=_dtype(op.b.buffer),
                    accum_dtype=_dtype(op.c.buffer), transpose_a=bool(op.transpose_a),
                    transpose_b=bool(op.transpose_b), thread_offset=thread_offset)


def chains(ops) -> list[list]:
    """The gemms of ``ops`` grouped into chains (linked through fragments), each in program order."""
    from .frontend import GemmOp
    ops = list(ops)
    return _chains(ops, [op for op in ops if isinstance(op, GemmOp)])


def _chains(ops, gemms) -> list[list]:
    """Gemms linked through fragments (union-find over ops sharing a fragment), in program order."""
    parent = {op.index: op.index for op in ops}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    users: dict = {}
    for op in ops:
        for buf in op.buffers():
            if buf.is_fragment:
                users.setdefault(buf.name, []).append(op.index)
    for group in users.values():
        for other in group[1:]:
            a, b = find(group[0]), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    chains: dict = {}
    for g in gemms:
        chains.setdefault(find(g.index), []).append(g)
    return [chains[k] for k in sorted(chains)]


def plan_gemms(ops, threads: int, target, thread_range_of=None, policy_override: dict | None = None) -> dict:
    """``{op index: GemmPlan}`` for every gemm among ``ops``, chained gemms decided jointly (module doc).
    ``thread_range_of(op) -> (first thread, count)`` gives the threads running a gemm (default: the whole
    block of ``threads``). ``policy_override``: ``{op index: policy}`` taking the place of those gemms' own
    ``warp_policy`` (how a refusal checks which policy would infer)."""
    from .frontend import GemmOp
    ops = list(ops)
    gemms = [op for op in ops if isinstance(op, GemmOp)]
    ranges = {g.index: tuple(thread_range_of(g)) if thread_range_of is not None else (0, threads) for g in gemms}
    override = dict(policy_override or {})

    def user(g):
        return override.get(g.index) or policy_of(g)

    def plan(g, *args):
        lo, count = ranges[g.index]
        if not args and g.index in override:
            args = (override[g.index], None, "user")
        return plan_gemm(g, count, target, *args, thread_offset=lo)

    plans: dict = {}
    for chain in _chains(ops, gemms):
        first = {g.index: plan(g) for g in chain}
        conflict = chain_conflict(chain, first)
        if conflict:
            raise GemmPlanError(conflict)
        if len(chain) == 1 or any(p.instruction == "tcgen05" for p in first.values()):
            plans.update(first)         # tcgen05: each accumulator its own TMEM columns, no warp policy to share
            continue
        instruction = "wgmma" if all(p.instruction == "wgmma" for p in first.values()) else "mma_sync"
        trial = {}
        for g in chain:
            policy = user(g) or "full_row"
            trial[g.index] = plan(g, policy, instruction, "user" if user(g) else "chain")
        free = [g for g in chain if user(g) is None]
        if free and any(trial[g.index].warp_n != 1 for g in free):
            # full_row cannot give every row to one warp here: keep the default for the free gemms
            for g in free:
                trial[g.index] = plan(g, "square", instruction, "default")
        plans.update(trial)
    return plans


# ------------------------------------------------------------------------------------ the IR record

def _plain(obj):
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, float)):
        return obj
    if isinstance(obj, str):
        return str(obj)
    if hasattr(obj, "items"):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) or type(obj).__name__ == "Array":
        return [_plain(v) for v in obj]
    if isinstance(obj, tvm.ir.Expr) and type(obj).__name__ == "IntImm":
        return bool(obj.value) if str(obj.ty) == "bool" else int(obj.value)
    return str(obj)


def gemm_calls(func) -> list:
    """Every ``tirx.tile.gemm`` call of ``func`` in program order (the ordinals of the plans)."""
    from tvm.tirx.tile_primitive import TilePrimitiveCall
    found: list = []

    def on_call(node):
        if str(node.op.name) == "tirx.tile.gemm":
            found.append(node)

    walk_typed(func.body, [(TilePrimitiveCall, on_call)], order="pre")
    return found


def gemm_ordinal(func, op) -> int:
    """Position of the front-end ``GemmOp`` ``op`` among the gemm calls of ``func``."""
    return gemm_ordinals(func, [op])[0]


def gemm_ordinals(func, ops: list) -> list:
    """``gemm_ordinal`` of each of ``ops``, from one walk of ``func``."""
    calls = gemm_calls(func)
    out = []
    for op in ops:
        k = next((k for k, call in enumerate(calls) if call.same_as(op.stmt)), None)
        if k is None:
            raise LayoutError(f"{op.describe()} is not a gemm call of this function")
        out.append(k)
    return out


def annotate_gemm_plans(func, plans: dict):
    """``func`` with ``{ordinal: GemmPlan}`` recorded in the attribute ``"tilelayout.gemm_plans"``."""
    if not plans:
        return func
    encoded = {str(k): plans[k].to_dict() for k in sorted(plans)}
    return func.with_attr(GEMM_PLANS_ATTR, encoded)


def read_gemm_plans(func) -> dict:
    """``{ordinal: GemmPlan}`` recorded in ``func`` (empty when inference recorded none)."""
    attrs = func.attrs
    if attrs is None or GEMM_PLANS_ATTR not in attrs:
        return {}
    raw = _plain(attrs[GEMM_PLANS_ATTR])
    if not isinstance(raw, dict) or not all(re.fullmatch(r"\d+", k) for k in raw):
        raise LayoutError(f"attribute {GEMM_PLANS_ATTR!r} must map gemm ordinals to plans, got {raw!r}")
    return {int(k): GemmPlan.from_dict(v) for k, v in sorted(raw.items(), key=lambda kv: int(kv[0]))}


def gemm_plan_of(func, op) -> GemmPlan:
    """The recorded plan of ``op`` (a front-end ``GemmOp`` of ``func``); a clear error when there is none or
    when it no longer fits the op (the IR changed after inference)."""
    plans = read_gemm_plans(func)
    ordinal = gemm_ordinal(func, op)
    plan = plans.get(ordinal)
    if plan is None:
        raise LayoutError(f"{op.describe()}: no gemm plan recorded (attribute {GEMM_PLANS_ATTR!r}); run layout "
                          f"inference first")
    try:
        m, n, k = _shape(op)
    except GemmPlanError as err:
        raise LayoutError(str(err)) from None
    if (plan.m, plan.n, plan.k) != (m, n, k) or plan.a_in_registers != op.a.buffer.is_fragment:
        raise LayoutError(f"{op.describe()}: the recorded gemm plan ({plan.m}x{plan.n}x{plan.k}, "
                          f"{plan.describe()}) does not match the op; run layout inference again")
    return plan
