"""Which threads must combine partial results of a reduction, and how: xor-shuffles inside a warp, or an
exchange through shared memory behind block-wide barriers. Both sides apply it to the combining layout that
inference records (``annotate.REDUCTIONS_ATTR``): inference to refuse what lowering cannot do (a barrier under a
thread-dependent condition), lowering to emit the combination."""
from __future__ import annotations

import numpy as np

from tilelayout.fragment import Fragment

__all__ = ["needs_barrier", "unheld_partial"]


def needs_barrier(work: Fragment, threads: int, warp: int) -> bool:
    """Do the holders of some element of ``work`` span warps that only a shared-memory exchange can combine?"""
    cells = _cell_elements(work, threads)
    counts = np.bincount(cells[cells >= 0].reshape(-1), minlength=work.size)
    if counts.max() <= 1:
        return False
    split = _split_basis(_xor_basis(cells, counts), warp)
    return split is None or bool(split[1])


def _cell_elements(layout: Fragment, threads: int) -> np.ndarray:
    """E[slot, thread] = flat element held there (-1: none), over every launched thread."""
    slots = int(np.prod([int(s) for s in layout.output_shape]))
    out = np.full((slots, threads), -1, dtype=np.int64)
    lo = (layout.thread_range or (0, threads))[0]
    thread = layout.thread_table() + lo                                 # (*shape, R)
    tab = np.asarray(layout.table(), dtype=np.int64)                    # (*shape, out_dim)
    flat_slot = np.zeros(tab.shape[:-1], dtype=np.int64)
    for k, s in enumerate(layout.output_shape):
        flat_slot = flat_slot * int(s) + tab[..., k]
    elems = np.arange(int(np.prod(tab.shape[:-1]))).reshape(tab.shape[:-1])
    for r in range(thread.shape[-1]):
        out[flat_slot.reshape(-1), thread[..., r].reshape(-1)] = elems.reshape(-1)
    return out


def _xor_basis(cells: np.ndarray, counts: np.ndarray) -> list | None:
    """A reduced basis M of thread masks such that xor-ing a thread with any m in span(M) stays on the same
    element in every slot, and every element's holders are exactly one coset ``t ^ span(M)``; else None."""
    holders = counts[counts > 0]
    size = int(holders.max())
    if size & (size - 1) or (holders != size).any():
        return None
    e0 = int(np.argmax(counts == size))
    threads = np.nonzero((cells == e0).any(axis=0))[0]
    base = int(threads[0])
    basis: list = []
    for t in threads[1:]:
        basis = _reduced(basis + [int(t) ^ base])
    if (1 << len(basis)) != size:
        return None
    n = cells.shape[1]
    lanes = np.arange(n)
    for b in basis:
        partner = lanes ^ b
        if (partner >= n).any() or not (cells[:, partner] == cells).all():
            return None
    return basis


def _reduced(basis: list) -> list:
    """Reduced row echelon form over GF(2): distinct leading bits, each cleared from every other vector."""
    rows = sorted(basis, reverse=True)
    out: list = []
    for v in rows:
        for b in out:
            if v & (1 << (b.bit_length() - 1)):
                v ^= b
        if v:
            top = 1 << (v.bit_length() - 1)
            out = [b ^ v if b & top else b for b in out]
            out.append(v)
    return sorted(out, reverse=True)


def _split_basis(basis: list | None, warp: int):
    """(lane masks < warp, single high bits) when span(basis) = span(lanes) + span(high bits); else None."""
    if basis is None:
        return None
    lanes = [b for b in basis if b < warp]
    high = [b for b in basis if b >= warp]
    if any(b & (b - 1) for b in high):
        return None          # a mask mixing lane and warp bits: no clean two-level split
    return lanes, sorted(high)


def unheld_partial(src: Fragment, reduced: Fragment, axes, threads: int) -> str | None:
    """None when every thread holding a source element (its first replica, the one a reduction folds) holds the
    partial of that element's result in ``reduced`` (``src`` reduced over ``axes``); else the first element
    that breaks it, in words. Lowering folds each source element into the partial its thread holds, so a
    recorded reduced layout must pass this before lowering follows it."""
    if not src.is_static or not reduced.is_static:
        return "the layouts are not static, so the partials' holders cannot be checked"
    shape = [int(s) for s in src.input_shape]
    kept = [d for d in range(len(shape)) if d not in set(axes)]
    rshape = [shape[d] for d in kept] or [1]
    if [int(s) for s in reduced.input_shape] != rshape:
        return f"it covers {list(reduced.input_shape)}, the reduction of {shape} over axes {sorted(axes)} gives {rshape}"
    lo_s = (src.thread_range or (0, threads))[0]
    lo_r = (reduced.thread_range or (0, threads))[0]
    first = np.asarray(src.thread_table())[..., 0] + lo_s                      # (*shape,)
    holders = np.asarray(reduced.thread_table()).reshape(int(np.prod(rshape)), -1) + lo_r
    coords = np.indices(shape).reshape(len(shape), -1)
    row = np.ravel_multi_index(coords[kept], rshape) if kept else np.zeros(coords.shape[1], dtype=np.int64)
    held = (holders[row] == first.reshape(-1)[:, None]).any(axis=1)
    if held.all():
        return None
    k = int(np.argmin(held))
    coord = [int(c) for c in coords[:, k]]
    return f"thread {int(first.reshape(-1)[k])} holds source element {coord} but not the partial of its result"
