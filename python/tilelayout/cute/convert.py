"""Converters between tilelayout Layouts and CuTe layouts: probe, then prove.

``from_tilelang`` reads strides off the exact table of the forward index (one-hot coordinates along each
input axis, splitting an axis into sub-modes where the values stop being linear), builds the candidate CuTe
layout, and accepts it only if it reproduces the whole table. Any doubt -- a symbolic or too-large domain,
an offset, a non-strided or XOR map, an unpacked replica -- returns None; these converters never raise.
A CuTe layout from here has one top-level mode per tilelayout input axis, in the same order (an axis
split into sub-modes becomes a nested mode). A Fragment converts on its forward_index only, as in TileLang;
one with replicate > 1 gives None -- convert ``pack_fragment(frag)`` to include threads and replicas.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx

from ..layout import Layout as TLLayout, placeholder, rep_placeholder, substitute
from .algebra import _as_stride, eval_modes, fit_1d
from .int_tuple import CuteError, ScaledBasis, flatten, is_int, is_tuple, prefix_product
from .layout import Layout, size
from .swizzle import ComposedLayout, Swizzle

__all__ = ["layout_from_tilelang", "layout_from_table", "layout_from_tilelang_hierarchical", "composed_from_tilelang",
           "layout_to_tilelang", "composed_to_tilelang", "pack_fragment"]


def pack_fragment(frag) -> TLLayout:
    """A Fragment as one plain Layout ``(coords..., rep) -> [thread, slot]`` (TileLang's canonical packing).

    The replica becomes the trailing input (extent ``replicate_size``, present even when it is 1); several
    slot outputs are linearised row-major into one slot.
    """
    n = frag.input_dim
    thread = substitute(frag.forward_thread, {rep_placeholder(): placeholder(n)})
    slot = tirx.const(0, "int32")
    for e, s in zip(frag.forward_index, frag.output_shape):
        slot = slot * s + e
    return TLLayout.from_exprs(frag.input_shape + [frag.replicate_size], [thread, slot])


def _table(layout) -> np.ndarray:
    """(*input_shape, outputs) exact table; replicated Fragments are refused (pack them first)."""
    if getattr(layout, "replicate_size", 1) != 1:
        raise CuteError("replicated fragment: pack it with pack_fragment first")
    tab = np.asarray(layout.table(), dtype=np.int64)
    if tab.ndim != len(layout.input_shape) + 1:
        raise CuteError("unexpected table shape")
    return tab


def _flat(layout) -> np.ndarray:
    """Outputs serialised row-major over the output shape: [thread, slot] -> thread * slots + slot."""
    tab = _table(layout)
    out = np.zeros(tab.shape[:-1], dtype=np.int64)
    for k, s in enumerate(layout.output_shape):
        out = out * int(s) + tab[..., k]
    return out


def _fit_table(tab: np.ndarray, ndim: int):
    """Per-input-axis fitted modes reproducing ``tab`` (shape (*dims) or (*dims, k), zero at the origin), or None."""
    dims = tab.shape[:ndim]
    origin = (0,) * ndim
    if np.any(tab[origin] != 0):
        return None
    per_axis, total = [], np.zeros_like(tab)
    for d, n in enumerate(dims):
        line = tab[origin[:d] + (slice(None),) + origin[d + 1:]]
        modes = fit_1d(line)
        if modes is None:
            return None
        per_axis.append(modes)
        view = [1] * ndim + list(tab.shape[ndim:])
        view[d] = n
        total = total + eval_modes(modes, n, tab.shape[ndim:]).reshape(view)
    return per_axis if np.array_equal(total, tab) else None  # the proof: every point, exactly


def _assemble(per_axis, as_stride) -> Layout:
    modes = []
    for fitted in per_axis:
        if not fitted:
            modes.append((1, 0))
        elif len(fitted) == 1:
            modes.append((int(fitted[0][0]), as_stride(fitted[0][1])))
        else:
            modes.append((tuple(int(e) for e, _ in fitted), tuple(as_stride(st) for _, st in fitted)))
    if len(modes) == 1 and not is_tuple(modes[0][0]):
        return Layout(*modes[0])
    return Layout(tuple(s for s, _ in modes), tuple(d for _, d in modes))


def layout_from_tilelang(layout) -> Layout | None:
    """CuTe layout with one integer output equal to the row-major serialisation of ``layout``'s outputs, or None."""
    try:
        return layout_from_table(_flat(layout))
    except Exception:  # noqa: BLE001 - a converter answers None on any doubt, by contract
        return None


def layout_from_table(tab) -> Layout | None:
    """The same probe-then-prove conversion from an exact integer table over a domain (axis k = mode k):
    modes are proposed from the values along each axis and the result is checked at every point."""
    try:
        tab = np.asarray(tab, dtype=np.int64)
        fitted = _fit_table(tab, tab.ndim)
        return None if fitted is None else _assemble(fitted, int)
    except Exception:  # noqa: BLE001
        return None


def layout_from_tilelang_hierarchical(layout) -> Layout | None:
    """CuTe layout whose strides are ``v@k`` (v along output axis k), reproducing every output, or None."""
    try:
        tab = _table(layout)
        fitted = _fit_table(tab, tab.ndim - 1)
        return None if fitted is None else _assemble(fitted, _as_stride)
    except Exception:  # noqa: BLE001
        return None


def _swizzle_candidates(nbits: int):
    """Identity first, then widest XOR fields first (a narrower field may fit by accident of a short domain)."""
    yield Swizzle(0, 0, 0)
    for b in range(nbits // 2, 0, -1):
        for m in range(0, nbits - 2 * b + 1):
            for s in range(b, nbits - m - b + 1):
                yield Swizzle(b, m, s)


def composed_from_tilelang(layout) -> ComposedLayout | None:
    """``swizzle o offset o layout`` reproducing ``layout``'s serialised outputs (identity swizzle when none), or None."""
    try:
        tab = _flat(layout)
        if tab.min() < 0:
            return None
        for sw in _swizzle_candidates(int(tab.max()).bit_length()):
            un = sw(tab)  # a swizzle is its own inverse
            offset = int(un.flat[0])
            fitted = _fit_table(un - offset, un.ndim)
            if fitted is not None:
                return ComposedLayout(sw, offset, _assemble(fitted, int))
        return None
    except Exception:  # noqa: BLE001
        return None


def _mode_expr(shape, stride, x):
    """Value of one top-level mode at index expression ``x`` as a list of (codomain axis, PrimExpr) terms."""
    shapes, strides = flatten(shape), flatten(stride)
    terms = []
    for k, (s, d, pre) in enumerate(zip(shapes, strides, prefix_product(shapes))):
        crd = x if is_int(pre) and pre == 1 else x // pre
        if k < len(shapes) - 1:
            crd = crd % s
        if isinstance(d, ScaledBasis):
            if len(d.mode) != 1:
                raise CuteError(f"to_tilelang: nested basis stride {d} has no tilelayout output axis")
            terms.append((d.mode[0], crd * d.value))
        elif not (is_int(d) and d == 0):
            terms.append((None, crd * d))
    return terms


def layout_to_tilelang(layout: Layout, num_outputs: int | None = None) -> TLLayout:
    """tilelayout Layout with one input per top-level mode and one output (integer strides) or one per
    basis axis (``v@k`` strides; ``num_outputs`` pads unused trailing axes)."""
    modes = list(layout) if is_tuple(layout.shape) else [layout]
    shape = [size(m) for m in modes]
    xs = [placeholder(k) for k in range(len(modes))]
    terms = [t for m, x in zip(modes, xs) for t in _mode_expr(m.shape, m.stride, x)]
    basis = any(isinstance(d, ScaledBasis) for d in flatten(layout.stride))
    if basis and any(axis is None for axis, _ in terms):
        raise CuteError(f"to_tilelang: {layout} mixes integer and basis strides")
    n_out = (1 + max((a for a, _ in terms), default=0)) if basis else 1
    n_out = max(n_out, num_outputs or 0)
    outs = [tirx.const(0, "int32") for _ in range(n_out)]
    for axis, e in terms:
        outs[axis or 0] = outs[axis or 0] + e
    return TLLayout(shape, outs)


def composed_to_tilelang(composed: ComposedLayout) -> TLLayout:
    """tilelayout Layout computing ``swizzle(offset + layout(c))`` (XOR expression for a Swizzle)."""
    inner = layout_to_tilelang(composed.layout)
    if inner.output_dim != 1 or not is_int(composed.offset):
        raise CuteError(f"to_tilelang: {composed} needs an integer inner layout and offset")
    addr = composed.offset + inner.forward_index[0]
    return TLLayout(inner.input_shape, [composed.swizzle(addr)])


def _layout_to_tilelang_method(self: Layout, num_outputs: int | None = None) -> TLLayout:
    """The same map as a tilelayout Layout: one input per top-level mode, one output per codomain axis (at
    least ``num_outputs``, for axes no basis stride reaches)."""
    return layout_to_tilelang(self, num_outputs)


# Methods of Layout and ComposedLayout (see Layout's docstring): layout.py and swizzle.py do not import this module.
Layout.from_tilelang = staticmethod(layout_from_tilelang)
Layout.from_tilelang_hierarchical = staticmethod(layout_from_tilelang_hierarchical)
Layout.to_tilelang = _layout_to_tilelang_method
ComposedLayout.from_tilelang = staticmethod(composed_from_tilelang)
ComposedLayout.to_tilelang = composed_to_tilelang
