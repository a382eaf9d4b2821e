"""Register fragments of tensor-core GEMMs (TileLang's ``gemm_layouts`` and its ``T.gemm`` emitters).

Atoms follow PTX's mma.sync fragment tables: in every 8-row block a quad of 4 lanes holds one row
(``lane = 4 * row + col // k``). Composite fragments tile those atoms over the warps of a block.

Two accumulator constructions exist in TileLang and they place warps differently:

* ``make_mma_accumulator_fragment`` is what TileLang's ``T.gemm`` actually infers (its Python mma emitter,
  checked against TileLang 0.1.15): each warp owns one contiguous ``(m / Wm) x (n / Wn)`` block, warps are
  numbered M-block fastest (``warp = block_j * Wm + block_i``), and inside a warp the 16x8 atoms are
  numbered row-major in the register index.
* ``make_gemm_fragment_c`` is the C++ ``MakeGemmFragmentC`` composition (8x8 atom -> Repeat({2,1}) ->
  Repeat over warps on threads -> Repeat over atoms on slots); warps interleave at atom granularity.

The warp partition (``compute_warp_partition``) is TileLang's: among ``Wm * Wn == warps`` with every warp
owning a multiple of 16 rows and 8 columns, Square minimises ``|(m/16Wm) / (n/8Wn) - m/n|`` (first, i.e.
smallest Wm, on ties); FullRow / FullCol put as many warps as possible on rows / columns. For wgmma
(``instruction="wgmma"``) ``Wm`` must be a multiple of 4: warps come in warpgroups of four, each warp of a
warpgroup owning a 16-row slab of every 64-row block (checked against TileLang 0.1.15 on sm_90).

Every builder that depends on the partition takes ``warp_partition=(Wm, Wn)``; the gemm plan
(``passes/inference/gemm_plan.py``) passes the partition it decided, so the accumulator and operand
fragments of one gemm always come from the same partition.
"""
from __future__ import annotations

import re

from .errors import LayoutError
from .fragment import Fragment
from .swizzle import element_bits

__all__ = [
    "compute_warp_partition", "make_gemm_fragment_8x4", "make_gemm_fragment_8x8", "make_gemm_fragment_8x16",
    "make_gemm_fragment_8x8_transposed", "make_gemm_fragment_c", "make_mma_accumulator_fragment",
    "make_gemm_fragment_a", "make_gemm_fragment_b", "make_wgmma_accumulator_fragment", "make_wgmma_fragment_a",
    "normalize_warp_policy",
]

WARP = 32
_POLICIES = ("square", "fullrow", "fullcol")


# ------------------------------------------------------------------ atoms

def make_gemm_fragment_8x4() -> Fragment:
    """8x4 atom: one element per lane, lane = 4*i + j (tf32 A/B rows)."""
    return Fragment([8, 4], lambda i, j: i * 4 + j, lambda i, j: 0)


def make_gemm_fragment_8x8() -> Fragment:
    """8x8 atom of mma.sync / ldmatrix: lane = 4*i + j//2 holds the pair j%2 in {0, 1}."""
    return Fragment([8, 8], lambda i, j: i * 4 + j // 2, lambda i, j: j % 2)


def make_gemm_fragment_8x16() -> Fragment:
    """8x16 atom (8-bit operands): lane = 4*i + j//4 holds four consecutive elements."""
    return Fragment([8, 16], lambda i, j: i * 4 + j // 4, lambda i, j: j % 4)


def make_gemm_fragment_8x8_transposed() -> Fragment:
    """The 8x8 atom with rows and columns exchanged: lane = 4*j + i//2 holds i%2."""
    return Fragment([8, 8], lambda i, j: j * 4 + i // 2, lambda i, j: i % 2)


# ------------------------------------------------------------------ warp partition

def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LayoutError(f"{name} must be a positive int, got {value!r}")
    return value


def normalize_warp_policy(policy) -> str:
    """``"square"``, ``"fullrow"`` or ``"fullcol"`` from any spelling (``"full_row"``, ``"FullRow"``, ...)."""
    text = str(policy).lower().replace("_", "").replace("-", "")
    if text.startswith("gemmwarppolicy."):
        text = text.split(".", 1)[1]
    if text not in _POLICIES:
        raise LayoutError(f"unknown warp policy {policy!r}; valid: square, full_row, full_col")
    return text


def compute_warp_partition(m: int, n: int, num_warps: int, policy: str = "square",
                           instruction: str = "mma_sync") -> tuple[int, int]:
    """(Wm, Wn) warps along M and N for an m x n accumulator, TileLang's rule (see module doc)."""
    m, n, num_warps = _positive("m", m), _positive("n", n), _positive("warps", num_warps)
    policy = normalize_warp_policy(policy)
    if instruction not in ("mma_sync", "wgmma"):
        raise LayoutError(f"unknown gemm instruction {instruction!r}; valid: mma_sync, wgmma")
    group = 4 if instruction == "wgmma" else 1
    valid = [(wm, num_warps // wm) for wm in range(1, num_warps + 1)
             if num_warps % wm == 0 and wm % group == 0 and m % (16 * wm) == 0 and n % (8 * (num_warps // wm)) == 0]
    if not valid:
        extra = " and warps on M come in warpgroups of 4" if group == 4 else ""
        raise LayoutError(f"no valid warp partition for an {m}x{n} accumulator over {num_warps} warps "
                          f"(policy {policy}, {instruction}): each warp must own a multiple of 16 rows and 8 "
                          f"columns{extra}")
    if policy == "fullrow":
        return max(valid)
    if policy == "fullcol":
        return min(valid)
    return min(valid, key=lambda p: (abs((m / (16 * p[0])) / (n / (8 * p[1])) - m / n), p[0]))


def _warps(threads) -> int:
    threads = _positive("threads", threads)
    if threads % WARP:
        raise LayoutError(f"threads must be a multiple of the warp size {WARP}, got {threads}")
    return threads // WARP


def _check_arch(arch: str) -> None:
    found = re.fullmatch(r"sm_(\d+)[a-z]?", str(arch))
    if not found:
        raise LayoutError(f"arch must look like 'sm_80', got {arch!r}")
    if int(found.group(1)) < 80:
        raise LayoutError(f"mma.sync m16n8 fragments need sm_80 or newer, got {arch} (Volta/Turing layouts differ)")


# ------------------------------------------------------------------ accumulators

def _partition(m: int, n: int, threads: int, warp_policy: str, warp_partition, instruction: str = "mma_sync"):
    warps = _warps(threads)
    if warp_partition is None:
        return compute_warp_partition(m, n, warps, warp_policy, instruction)
    wm_count, wn_count = (_positive("warp_m", warp_partition[0]), _positive("warp_n", warp_partition[1]))
    group = 4 if instruction == "wgmma" else 1
    if wm_count * wn_count != warps or wm_count % group or m % (16 * wm_count) or n % (8 * wn_count):
        raise LayoutError(f"warp partition {wm_count}x{wn_count} does not fit an {m}x{n} {instruction} tile over "
                          f"{warps} warps (need Wm*Wn == warps, 16-row x 8-column warp tiles"
                          f"{', Wm a multiple of 4' if group == 4 else ''})")
    return wm_count, wn_count


def make_mma_accumulator_fragment(m: int, n: int, threads: int, dtype="float32", arch: str = "sm_80",
                                  warp_policy: str = "square", warp_partition=None) -> Fragment:
    """mma.sync accumulator of an m x n tile over ``threads`` threads, as TileLang's ``T.gemm`` infers it.

    Per 16x8 atom (8x8 for float64's m8n8k4): lane = 4 * (i % 8) + (j % 8) // 2, slot pair j % 2, and the
    row half (i % 16) // 8 selects slots 2-3. Warp (block_i, block_j) owns rows block_i*wm.. and columns
    block_j*wn..; thread = 32 * (block_j * Wm + block_i) + lane. ``dtype`` is the accumulator type (only
    float64 changes the atom). ``arch`` must be sm_80 or newer; note that on sm_90 TileLang's ``T.gemm`` with
    both operands in shared memory switches to a wgmma accumulator (``make_wgmma_accumulator_fragment``).
    """
    _check_arch(arch)
    bits = element_bits(dtype)
    wm_count, wn_count = _partition(m, n, threads, warp_policy, warp_partition)
    wm, wn = m // wm_count, n // wn_count
    atom_m, slots = (8, 2) if bits == 64 else (16, 4)
    warp_rows, warp_cols = wm // atom_m, wn // 8

    def thread(i, j):
        return (j // wn) * (wm_count * WARP) + (i // wm) * WARP + (i % 8) * 4 + (j % 8) // 2

    def index(i, j):
        local = j % 2 if bits == 64 else (i % 16) // 8 * 2 + j % 2
        return ((i // atom_m) % warp_rows) * (warp_cols * slots) + ((j // 8) % warp_cols) * slots + local
    # i and j split into mixed-radix digits (warp block, atom, row/column in the atom), and thread and slot
    # are mixed-radix numbers of disjoint digit sets: a bijection onto every warp's lanes x the warp's slots,
    # with a closed-form inverse (tests/test_gemm_layouts.py inverts every plan shape)
    # the cell thread * S + slot read backwards, lowest digit first (slot digits, then thread digits), as
    # strides of the element index i * n + j
    row_half = [] if bits == 64 else [(2, 8 * n)]
    digits = [(2, 1)] + row_half + [(warp_cols, 8), (warp_rows, atom_m * n),
                                    (4, 2), (8, n), (wm_count, wm * n), (wn_count, wn)]
    return Fragment([m, n], thread, index)._known_by_construction(wm_count * wn_count * WARP,
                                                                  warp_rows * warp_cols * slots, inverse=True,
                                                                  cell_digits=digits)


def make_wgmma_accumulator_fragment(m: int, n: int, threads: int = 128, warp_partition=None) -> Fragment:
    """Hopper wgmma accumulator of an m x n tile, as TileLang's ``T.gemm`` infers it on sm_90.

    ``warp_partition=(Wm, Wn)`` (default: every warp on M, ``(threads // 32, 1)``): ``Wm / 4`` warpgroups split
    the rows into contiguous blocks and ``Wn`` split the columns. Within a warpgroup's rows, warp w owns rows
    16w..16w+15 of every 64-row block (lane = 4 * (i % 8) + (j % 8) // 2, as in mma.sync); further 64-row
    blocks stack in the slots. Warpgroups are numbered M-block fastest (checked against TileLang 0.1.15 for
    1x1, 2x1 and 1x2 warpgroup grids)."""
    _positive("m", m), _positive("n", n), _positive("threads", threads)
    if threads % 128:
        raise LayoutError(f"wgmma accumulator needs whole warpgroups (threads % 128 == 0), got {threads} threads")
    if warp_partition is None:
        groups = threads // 128
        if m % (64 * groups) or n % 8:
            raise LayoutError(f"wgmma accumulator of {m}x{n} over {groups} warpgroup(s) needs m % {64 * groups} == 0 "
                              f"and n % 8 == 0")
        warp_partition = (threads // WARP, 1)
    wm_count, wn_count = _partition(m, n, threads, "square", warp_partition, "wgmma")
    groups_m = wm_count // 4
    mg, wn = m // groups_m, n // wn_count
    per_block = wn // 8 * 4

    def thread(i, j):
        return ((j // wn) * groups_m + i // mg) * 128 + (i % 64) // 16 * WARP + (i % 8) * 4 + (j % 8) // 2

    def index(i, j):
        return (i % mg) // 64 * per_block + ((j % wn) // 8) * 4 + (i % 16) // 8 * 2 + j % 2
    # as for mma.sync: thread and slot are mixed-radix numbers of disjoint digits of i and j, a bijection
    # onto the warpgroups' threads x (64-row blocks) * (8-column atoms) * 4 slots
    digits = [(2, 1), (2, 8 * n), (wn // 8, 8), (mg // 64, 64 * n),                 # slot digits
              (4, 2), (8, n), (4, 16 * n), (groups_m, mg * n), (wn_count, wn)]        # thread digits
    return Fragment([m, n], thread, index)._known_by_construction(wm_count * wn_count * WARP,
                                                                  mg // 64 * per_block, inverse=True,
                                                                  cell_digits=digits)


def make_wgmma_fragment_a(m: int, k: int, threads: int = 128, dtype="float16", warp_partition=None) -> Fragment:
    """Register A operand (m x k, K-major) of wgmma's RS form on sm_90.

    Each warp holds the rows its accumulator rows are (16-row slabs of every 64-row block, see
    ``make_wgmma_accumulator_fragment``) with the mma.sync m16nXk A register order inside a 16 x K-step atom;
    K-steps are the outer slot dimension, then the 64-row blocks. Warpgroups that share rows (different N
    blocks) hold the same A elements: replica = N-warpgroup index (checked against TileLang 0.1.15)."""
    who = f"make_wgmma_fragment_a(m={m}, k={k})"
    kp, k_atom = _operand_geometry(dtype, _positive("k", k), who)
    _positive("m", m), _positive("threads", threads)
    if threads % 128:
        raise LayoutError(f"{who}: wgmma needs whole warpgroups (threads % 128 == 0), got {threads} threads")
    if warp_partition is None:
        warp_partition = (threads // WARP, 1)
    wm_count, wn_count = warp_partition
    wm_count, wn_count = _partition(m, 8 * wn_count, threads, "square", (wm_count, wn_count), "wgmma")
    groups_m = wm_count // 4
    mg = m // groups_m
    regs = 4 * kp
    blocks = mg // 64

    def thread(i, j, rep):
        return (rep * groups_m + i // mg) * 128 + (i % 64) // 16 * WARP + (i % 8) * 4 + (j % (4 * kp)) // kp

    def index(i, j):
        local = (j % k_atom) // (4 * kp) * (2 * kp) + (i % 16) // 8 * kp + j % kp
        return (j // k_atom) * (blocks * regs) + (i % mg) // 64 * regs + local
    return _replicated([m, k], thread, index, wn_count, wm_count * wn_count * WARP, k // k_atom * blocks * regs)


def make_gemm_fragment_c(block_m: int, block_n: int, warp_m: int, warp_n: int) -> Fragment:
    """TileLang's C++ ``MakeGemmFragmentC``: the 16x8 atom repeated over warps (on threads, M-warp fastest),
    then over each warp's atoms (on slots). ``warp_m``/``warp_n`` are the rows/columns one warp covers."""
    for name, v in (("block_m", block_m), ("block_n", block_n), ("warp_m", warp_m), ("warp_n", warp_n)):
        _positive(name, v)
    if block_m % warp_m or block_n % warp_n or warp_m % 16 or warp_n % 8:
        raise LayoutError(f"make_gemm_fragment_c({block_m}, {block_n}, {warp_m}, {warp_n}): the block must be whole "
                          f"warps and a warp whole 16x8 atoms")
    atom = make_gemm_fragment_8x8().repeat([2, 1], repeat_on_thread=False)
    warps = atom.repeat([block_m // warp_m, block_n // warp_n], repeat_on_thread=True, lower_dim_first=False)
    return warps.repeat([warp_m // 16, warp_n // 8], repeat_on_thread=False, lower_dim_first=False)


# ------------------------------------------------------------------ ldmatrix-fed operands

def _operand_geometry(dtype, k: int, who: str) -> tuple[int, int]:
    bits = element_bits(dtype)
    if bits not in (8, 16, 32):
        raise LayoutError(f"{who}: mma.sync operands are 8-, 16- or 32-bit, got {dtype} ({bits} bits)")
    kp = 32 // bits            # consecutive K elements one lane holds in a 32-bit register
    k_atom = 8 * kp            # K of one mma instruction: 32 / 16 / 8
    if k % k_atom:
        raise LayoutError(f"{who}: K={k} is not a multiple of the mma K step {k_atom} for {dtype}")
    return kp, k_atom


def make_gemm_fragment_a(m: int, n: int, k: int, threads: int, dtype="float16", transposed: bool = False,
                         warp_policy: str = "square", warp_partition=None) -> Fragment:
    """Register fragment of operand A (m x k, or k x m when ``transposed``) as ldmatrix loads it for mma.sync.

    Warps that share rows (different N blocks) hold the same A elements: replica = N-warp index.
    """
    who = f"make_gemm_fragment_a(m={m}, n={n}, k={k})"
    kp, k_atom = _operand_geometry(dtype, _positive("k", k), who)
    wm_count, wn_count = _partition(m, n, threads, warp_policy, warp_partition)
    wm = m // wm_count
    regs = 4 * kp                               # registers of one 16 x k_atom atom

    def thread(r, c, rep):
        i, j = (c, r) if transposed else (r, c)
        return rep * (wm_count * WARP) + (i // wm) * WARP + (i % 8) * 4 + (j % (4 * kp)) // kp

    def index(r, c):
        i, j = (c, r) if transposed else (r, c)
        local = (j % k_atom) // (4 * kp) * (2 * kp) + (i % 16) // 8 * kp + j % kp
        return (j // k_atom) * (wm // 16 * regs) + (i % wm) // 16 * regs + local
    shape = [k, m] if transposed else [m, k]
    # thread and slot are mixed-radix numbers of disjoint digits of (row, K, replica), as for the accumulator
    return _replicated(shape, thread, index, wn_count, wm_count * wn_count * WARP, k // k_atom * (wm // 16 * regs))


def make_gemm_fragment_b(m: int, n: int, k: int, threads: int, dtype="float16", transposed: bool = False,
                         warp_policy: str = "square", warp_partition=None) -> Fragment:
    """Register fragment of operand B (k x n, or n x k when ``transposed``) for mma.sync.

    Warps that share columns (different M blocks) hold the same B elements: replica = M-warp index.
    """
    who = f"make_gemm_fragment_b(m={m}, n={n}, k={k})"
    kp, k_atom = _operand_geometry(dtype, _positive("k", k), who)
    wm_count, wn_count = _partition(m, n, threads, warp_policy, warp_partition)
    wn = n // wn_count
    regs = 2 * kp                               # registers of one k_atom x 8 atom

    def thread(r, c, rep):
        kk, j = (c, r) if transposed else (r, c)
        return (j // wn) * (wm_count * WARP) + rep * WARP + (j % 8) * 4 + (kk % (4 * kp)) // kp

    def index(r, c):
        kk, j = (c, r) if transposed else (r, c)
        local = (kk % k_atom) // (4 * kp) * kp + kk % kp
        return (kk // k_atom) * (wn // 8 * regs) + (j % wn) // 8 * regs + local
    shape = [n, k] if transposed else [k, n]
    return _replicated(shape, thread, index, wm_count, wm_count * wn_count * WARP, k // k_atom * (wn // 8 * regs))


def _replicated(shape, thread, index, replicate: int, threads: int, slots: int) -> Fragment:
    """An operand fragment whose (element, replica) pairs its constructor maps one-to-one onto ``threads`` x
    ``slots`` by disjoint mixed-radix digits: those facts and its closed-form inverse are recorded
    (``Fragment._known_by_construction``; ``tests/test_known_facts.py`` checks them by enumeration)."""
    if replicate == 1:
        frag = Fragment(shape, lambda r, c: thread(r, c, 0), index)
    else:
        frag = Fragment(shape, thread, index, replicate=replicate)
    return frag._known_by_construction(threads, slots, inverse=True)

