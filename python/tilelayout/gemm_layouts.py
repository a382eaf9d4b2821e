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
smallest Wm, on ties); FullRow / FullCol put as many warps as possible on rows / columns.
"""
from __future__ import annotations

import re

from .errors import LayoutError
from .fragment import Fragment
from .swizzle import element_bits

__all__ = [
    "compute_warp_partition", "make_gemm_fragment_8x4", "make_gemm_fragment_8x8", "make_gemm_fragment_8x16",
    "make_gemm_fragment_8x8_transposed", "make_gemm_fragment_c", "make_mma_accumulator_fragment",
    "make_gemm_fragment_a", "make_gemm_fragment_b",
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


def compute_warp_partition(m: int, n: int, num_warps: int, policy: str = "square") -> tuple[int, int]:
    """(Wm, Wn) warps along M and N for an m x n accumulator, TileLang's rule (see module doc)."""
    m, n, num_warps = _positive("m", m), _positive("n", n), _positive("warps", num_warps)
    policy = str(policy).lower().replace("_", "")
    if policy not in _POLICIES:
        raise LayoutError(f"unknown warp policy {policy!r}; valid: {', '.join(_POLICIES)}")
    valid = [(wm, num_warps // wm) for wm in range(1, num_warps + 1)
             if num_warps % wm == 0 and m % (16 * wm) == 0 and n % (8 * (num_warps // wm)) == 0]
    if not valid:
        raise LayoutError(f"no valid warp partition for an {m}x{n} accumulator over {num_warps} warps "
                          f"(policy {policy}): each warp must own a multiple of 16 rows and 8 columns")
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

def make_mma_accumulator_fragment(m: int, n: int, threads: int, dtype="float32", arch: str = "sm_80",
                                  warp_policy: str = "square") -> Fragment:
    """mma.sync accumulator of an m x n tile over ``threads`` threads, as TileLang's ``T.gemm`` infers it.

    Per 16x8 atom (8x8 for float64's m8n8k4): lane = 4 * (i % 8) + (j % 8) // 2, slot pair j % 2, and the
    row half (i % 16) // 8 selects slots 2-3. Warp (block_i, block_j) owns rows block_i*wm.. and columns
    block_j*wn..; thread = 32 * (block_j * Wm + block_i) + lane. ``dtype`` is the accumulator type (only
    float64 changes the atom). ``arch`` must be sm_80 or newer; note that on sm_90 TileLang's ``T.gemm`` with
    both operands in shared memory switches to a wgmma accumulator (``make_wgmma_accumulator_fragment``).
    """
    _check_arch(arch)
    bits = element_bits(dtype)
    wm_count, wn_count = compute_warp_partition(m, n, _warps(threads), warp_policy)
    wm, wn = m // wm_count, n // wn_count
    atom_m, slots = (8, 2) if bits == 64 else (16, 4)
    warp_rows, warp_cols = wm // atom_m, wn // 8

    def thread(i, j):
        return (j // wn) * (wm_count * WARP) + (i // wm) * WARP + (i % 8) * 4 + (j % 8) // 2

    def index(i, j):
        local = j % 2 if bits == 64 else (i % 16) // 8 * 2 + j % 2
        return ((i // atom_m) % warp_rows) * (warp_cols * slots) + ((j // 8) % warp_cols) * slots + local
    return Fragment([m, n], thread, index)


def make_wgmma_accumulator_fragment(m: int, n: int, threads: int = 128) -> Fragment:
    """Hopper wgmma accumulator of an m x n tile, as TileLang's ``T.gemm`` infers it on sm_90 when both
    operands are in shared memory: within each 64-row block, warp w of a warpgroup owns rows 16w..16w+15
    across all columns (lane = 4 * (i % 8) + (j % 8) // 2, as in mma.sync); further 64-row blocks stack
    in the slots. Several warpgroups take consecutive 64-row blocks (checked against TileLang for one
    warpgroup only)."""
    _positive("m", m), _positive("n", n), _positive("threads", threads)
    if threads % 128:
        raise LayoutError(f"wgmma accumulator needs whole warpgroups (threads % 128 == 0), got {threads} threads")
    groups = threads // 128
    if m % (64 * groups) or n % 8:
        raise LayoutError(f"wgmma accumulator of {m}x{n} over {groups} warpgroup(s) needs m % {64 * groups} == 0 "
                          f"and n % 8 == 0")
    per_block = n // 8 * 4

    def thread(i, j):
        return (i // 64) % groups * 128 + (i % 64) // 16 * WARP + (i % 8) * 4 + (j % 8) // 2

    def index(i, j):
        return i // (64 * groups) * per_block + (j // 8) * 4 + (i % 16) // 8 * 2 + j % 2
    return Fragment([m, n], thread, index)


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
                         warp_policy: str = "square") -> Fragment:
    """Register fragment of operand A (m x k, or k x m when ``transposed``) as ldmatrix loads it for mma.sync.

    Warps that share rows (different N blocks) hold the same A elements: replica = N-warp index.
    """
    who = f"make_gemm_fragment_a(m={m}, n={n}, k={k})"
    kp, k_atom = _operand_geometry(dtype, _positive("k", k), who)
    wm_count, wn_count = compute_warp_partition(m, n, _warps(threads), warp_policy)
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
    return _replicated(shape, thread, index, wn_count)


def make_gemm_fragment_b(m: int, n: int, k: int, threads: int, dtype="float16", transposed: bool = False,
                         warp_policy: str = "square") -> Fragment:
    """Register fragment of operand B (k x n, or n x k when ``transposed``) for mma.sync.

    Warps that share columns (different M blocks) hold the same B elements: replica = M-warp index.
    """
    who = f"make_gemm_fragment_b(m={m}, n={n}, k={k})"
    kp, k_atom = _operand_geometry(dtype, _positive("k", k), who)
    wm_count, wn_count = compute_warp_partition(m, n, _warps(threads), warp_policy)
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
    return _replicated(shape, thread, index, wm_count)


def _replicated(shape, thread, index, replicate: int) -> Fragment:
    if replicate == 1:
        return Fragment(shape, lambda r, c: thread(r, c, 0), index)
    return Fragment(shape, thread, index, replicate=replicate)

