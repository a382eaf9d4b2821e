"""Lane-split scans: a ``tilelayout.lang.cumsum`` row spread over 2^k lanes of one warp.

A scan walks its axis serially, so by default the whole row lives in the thread running the parallel
iteration (``serial_axes``). With fewer rows than threads that leaves threads idle or holding replicas,
each with the full row in registers. When every thread of the block can take an equal part, the row is
split instead: ``L`` consecutive lanes of one warp hold contiguous chunks of ``n / L`` elements
(``thread = row * L + pos // (n / L)``, slot ``pos % (n / L)``). Lowering scans each chunk in registers,
scans the chunk totals over the ``L`` lanes with warp shuffles, and adds each lane's exclusive prefix
(mirrored for reverse scans).

Only the exact loop ``lang.cumsum`` emits (marked by ``SCAN_KEY`` on its serial loop) qualifies, in place on
a whole fragment, or from a shared/global source into a whole fragment; every lane of every warp takes
part (rows * L == threads), so the shuffles never run in divergent code. Inference and lowering both ask
this module, so a split is chosen only where lowering realises it, and lowering re-checks the layouts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import tirx
from tvm.ir import Call, TensorLoad

from tilelayout.errors import TileLayoutError
from tilelayout.evaluate import evaluate
from tilelayout.expr import mentions
from tilelayout.fragment import Fragment
from tilelayout.layout import placeholder, rep_placeholder

__all__ = ["SCAN_KEY", "CumsumScan", "match_cumsum", "split_lanes", "split_loop_layout", "split_fragment",
           "is_split_loop", "is_split_fragment", "SCAN_DTYPES"]

#: annotation lang.cumsum puts on its serial loop (value: 1 for a reverse scan, 0 forward)
SCAN_KEY = "tilelayout.cumsum"
#: element types the shuffle scan handles (one 32-bit shuffle per value)
SCAN_DTYPES = ("float32", "int32", "uint32")


@dataclass(frozen=True, eq=False)
class CumsumScan:
    """The parts of a matched lang.cumsum loop (TIR nodes of the nest it was matched in)."""

    loop: object          # the serial For over the scan steps
    store: object         # dst[..., pos(k)] = cur + if_then_else(k > 0, dst[..., prev(k)], 0)
    cur: object           # the source load at pos(k)
    before: object        # the destination load at prev(k)
    dst: object           # destination buffer (TIR Var)
    dim: int              # scan dimension of dst
    n: int                # scan length
    reverse: bool
    in_place: bool        # the source is the destination


def _const(e) -> int | None:
    if isinstance(e, int):
        return e
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    return None


def _scope(buf) -> str:
    return str(buf.scope())


def _is_if_then_else(e) -> bool:
    return isinstance(e, Call) and str(getattr(e.op, "name", "")).endswith("if_then_else") and len(e.args) == 3


def _values(expr, var, n: int) -> np.ndarray | None:
    try:
        return np.broadcast_to(np.asarray(evaluate(expr, {var: np.arange(n, dtype=np.int64)})), (n,))
    except Exception:  # noqa: BLE001 - an index we cannot evaluate is simply not the lang.cumsum pattern
        return None


def match_cumsum(par_vars: list, body) -> CumsumScan | None:
    """The lang.cumsum scan in ``body`` (the innermost parallel loop's body), or None when it is not one."""
    if not isinstance(body, tirx.For) or SCAN_KEY not in body.annotations:
        return None
    if body.kind != tirx.ForKind.SERIAL or _const(body.min) != 0 or _const(body.extent) is None:
        return None
    reverse = bool(_const(body.annotations[SCAN_KEY]))
    n, k = _const(body.extent), body.loop_var
    st = body.body
    if not isinstance(st, tirx.BufferStore) or not isinstance(st.value, tirx.Add):
        return None
    cur, tail = st.value.a, st.value.b
    if not isinstance(cur, TensorLoad) or not tirx.is_buffer_var(cur.source) or not _is_if_then_else(tail):
        return None
    cond, before, zero = tail.args
    if not (isinstance(cond, tirx.GT) and cond.a.same_as(k) and _const(cond.b) == 0):
        return None
    if not isinstance(zero, (tirx.FloatImm, tirx.IntImm)) or float(zero.value) != 0.0:
        return None
    if not isinstance(before, TensorLoad) or not before.source.same_as(st.buffer):
        return None
    dst, idx = st.buffer, list(st.indices)
    dims = [d for d, e in enumerate(idx) if mentions(e, [k])]
    if len(dims) != 1 or len(before.indices) != len(idx):
        return None
    dim = dims[0]
    others = [e for d, e in enumerate(idx) if d != dim]
    used = [v for v in par_vars if any(mentions(e, [v]) for e in others)]
    # the other dimensions are the parallel variables themselves, in order (the whole fragment)
    if len(others) != len(used) or not all(e.same_as(v) for e, v in zip(others, used)):
        return None
    if len(used) != len(par_vars) and not (not others and len(par_vars) == 1):
        return None
    if any(mentions(e, [k]) or not e.same_as(idx[d]) for d, e in enumerate(before.indices) if d != dim):
        return None
    # pos(k) walks 0..n-1 (n-1..0 reversed) and prev(k) is pos(k - 1) for every k > 0
    pos, prev = _values(idx[dim], k, n), _values(before.indices[dim], k, n)
    if pos is None or prev is None:
        return None
    want = np.arange(n)[::-1] if reverse else np.arange(n)
    if not np.array_equal(pos, want) or not np.array_equal(prev[1:], want[:-1]):
        return None
    in_place = cur.source.same_as(dst)
    if in_place:
        if len(cur.indices) != len(idx) or not all(a.same_as(b) or _same(a, b) for a, b in zip(cur.indices, idx)):
            return None
    elif _scope(cur.source) == "local.fragment":
        return None           # a second fragment would need its own split layout: not built
    return CumsumScan(body, st, cur, before, dst, dim, n, reverse, in_place)


def _same(a, b) -> bool:
    import tvm_ffi
    return bool(tvm_ffi.structural_equal(a, b))


def split_lanes(scan: CumsumScan | None, par_extents: list, threads: int, warp: int, thread_range: tuple,
                block_threads: int, conditions: tuple = ()) -> int:
    """Lanes per row when the scan can be split over a warp's lanes, else 1."""
    if scan is None or conditions:
        return 1
    if str(scan.dst.dtype) not in SCAN_DTYPES or _scope(scan.dst) != "local.fragment":
        return 1
    shape = [_const(s) for s in scan.dst.shape]
    if any(s is None for s in shape) or shape[scan.dim] != scan.n:
        return 1
    rows = int(np.prod([s for d, s in enumerate(shape) if d != scan.dim], dtype=np.int64))
    if list(thread_range) != [0, threads] or threads != block_threads or rows < 1 or threads % rows:
        return 1
    lanes = threads // rows
    if lanes < 2 or lanes > min(warp, _MIN_WARP) or lanes & (lanes - 1) or scan.n % lanes:
        return 1
    if int(np.prod([e for e in par_extents], dtype=np.int64)) != max(rows, 1):
        return 1
    return lanes


def _row_of(exprs: list, extents: list):
    flat = tirx.const(0, "int32")
    for e, ext in zip(exprs, extents):
        flat = flat * int(ext) + e
    return flat


def split_loop_layout(par_extents: list, lanes: int, thread_range: tuple) -> Fragment:
    """The nest's loop layout: iteration (row) on lanes row*L .. row*L + L - 1, one replica per lane."""
    vs = [placeholder(k) for k in range(len(par_extents))]
    row = _row_of(vs, par_extents) if len(par_extents) > 1 or int(par_extents[0]) > 1 else tirx.const(0, "int32")
    out = Fragment.from_exprs(list(par_extents), row * lanes + rep_placeholder(), [tirx.const(0, "int32")], lanes)
    return out.bind_thread_range(*thread_range)


def split_fragment(shape: list, dim: int, lanes: int, thread_range: tuple) -> Fragment:
    """The scanned fragment's layout: row on lanes row*L.., position pos on lane pos // (n/L), slot pos % (n/L)."""
    chunk = int(shape[dim]) // lanes
    vs = [placeholder(k) for k in range(len(shape))]
    other = [d for d in range(len(shape)) if d != dim]
    row = _row_of([vs[d] for d in other], [shape[d] for d in other])
    out = Fragment.from_exprs(list(shape), row * lanes + tirx.floordiv(vs[dim], chunk),
                              [tirx.floormod(vs[dim], chunk)], 1)
    return out.bind_thread_range(*thread_range)


def is_split_loop(loop: Fragment, par_extents: list, lanes: int, thread_range: tuple) -> bool:
    """Does ``loop`` run every iteration on exactly its row's L lanes (replica r on lane r)?"""
    if lanes < 2 or loop.replicate_size != lanes or list(loop.input_shape) != list(par_extents):
        return False
    if (loop.thread_range or tuple(thread_range)) != tuple(thread_range):
        return False
    return _same_threads(loop, split_loop_layout(par_extents, lanes, thread_range))


def is_split_fragment(frag: Fragment, shape: list, dim: int, lanes: int, thread_range: tuple) -> bool:
    """Does ``frag`` hold each element exactly once, on the lane the split scan gives it?"""
    if lanes < 2 or frag.replicate_size != 1 or list(frag.input_shape) != [int(s) for s in shape]:
        return False
    if (frag.thread_range or tuple(thread_range)) != tuple(thread_range):
        return False
    return _same_threads(frag, split_fragment(shape, dim, lanes, thread_range))


def _same_threads(a: Fragment, b: Fragment) -> bool:
    """Exact comparison of the (element, replica) -> thread tables; too large to enumerate: not the split."""
    try:
        return bool(np.array_equal(a.thread_table(), b.thread_table()))
    except TileLayoutError:
        return False


# ------------------------------------------------------------------------------------ rule hooks

def scan_of(op) -> CumsumScan | None:
    """The lang.cumsum scan of a parallel-nest op (cached on the op), else None."""
    if op is None or not hasattr(op, "loop_vars") or not hasattr(op, "root"):
        return None
    found = op.__dict__.get("_cumsum_scan", False)
    if found is False:
        try:
            found = match_cumsum(list(op.loop_vars), op.body)
        except Exception:  # noqa: BLE001 - anything unexpected is simply not the pattern
            found = None
        object.__setattr__(op, "_cumsum_scan", found)
    return found


def _dst_access(nest, access) -> CumsumScan | None:
    scan = scan_of(getattr(nest, "op", None))
    if scan is None or not access.buffer.var.same_as(scan.dst) or getattr(nest.op, "conditions", ()):
        return None
    mine, theirs = list(nest.loop_vars), list(nest.op.loop_vars)
    if len(mine) != len(theirs) or not all(a.same_as(b) for a, b in zip(mine, theirs)):
        return None           # a widened or rebuilt nest: not the scan's own iteration space
    return scan


def _shape(access) -> list | None:
    shape = [_const(s) for s in access.buffer.shape]
    return None if any(s is None for s in shape) else shape


def split_owns(nest, loop: Fragment, access, frag: Fragment) -> bool:
    """True when ``loop`` is the split loop layout and ``frag`` the split layout of the scanned fragment."""
    scan = _dst_access(nest, access)
    shape = _shape(access)
    if scan is None or shape is None or loop.thread_range is None or loop.replicate_size < 2:
        return False
    lanes, rng = loop.replicate_size, loop.thread_range
    return (is_split_loop(loop, list(nest.extents), lanes, rng)
            and is_split_fragment(frag, shape, scan.dim, lanes, rng))


def _realisable(scan: CumsumScan, shape: list, lanes: int, rng: tuple) -> bool:
    """What lowering needs of a split that the layouts alone do not say (its launch check is stricter)."""
    rows = int(np.prod([s for d, s in enumerate(shape) if d != scan.dim], dtype=np.int64))
    return (str(scan.dst.dtype) in SCAN_DTYPES and 2 <= lanes <= _MIN_WARP and not lanes & (lanes - 1)
            and scan.n % lanes == 0 and rng[0] == 0 and rows * lanes == rng[1])


#: lanes never exceed the smallest warp of any target (lowering shuffles within 32-lane segments)
_MIN_WARP = 32


def split_completion(nest, loop: Fragment, access) -> Fragment | None:
    """The scanned fragment's split layout when ``loop`` is the split loop layout, else None."""
    scan = _dst_access(nest, access)
    shape = _shape(access)
    if scan is None or shape is None or loop.thread_range is None or loop.replicate_size < 2:
        return None
    lanes, rng = loop.replicate_size, loop.thread_range
    if not _realisable(scan, shape, lanes, rng):
        return None
    if not is_split_loop(loop, list(nest.extents), lanes, rng):
        return None
    return split_fragment(shape, scan.dim, lanes, rng)


def split_derived_loop(nest, access, frag: Fragment, thread_range: tuple) -> Fragment | None:
    """The split loop layout when ``frag`` already has the split layout of the scanned fragment, else None."""
    scan = _dst_access(nest, access)
    shape = _shape(access)
    if scan is None or shape is None or frag.replicate_size != 1:
        return None
    rng = tuple(frag.thread_range or thread_range)
    rows = int(np.prod([s for d, s in enumerate(shape) if d != scan.dim], dtype=np.int64))
    if rows < 1 or rng[1] % rows:
        return None
    lanes = rng[1] // rows
    if not _realisable(scan, shape, lanes, rng) or not is_split_fragment(frag, shape, scan.dim, lanes, rng):
        return None
    return split_loop_layout(list(nest.extents), lanes, rng)
