"""CUTLASS 4.x CuTe's coalesce, filter, composition, complement and inverses, step for step as its C++ does them.

Python ints play C++'s static integers and PrimExprs its dynamic ones; where C++ would fail a static assertion
we raise ``CuteError``. One deliberate difference: C++ checks composition's divisibility only weakly and then
returns a layout that is not ``A o B``; we refuse those cases (docs/objects.md, "CuTe algebra").
"""
from __future__ import annotations

from .int_tuple import (CuteError, ScaledBasis, ceil_div, flatten, fmt, is_int, is_tuple, known_eq, norm,
                        prefix_product)
from .layout import Layout, _zero_ones, cosize, make_layout

__all__ = ["coalesce", "filter", "compose_layouts", "complement", "right_inverse", "left_inverse", "coalesce_x"]


def _by_mode(fn, a: Layout, b: tuple, op: str) -> Layout:
    """Apply ``fn`` to the first len(b) modes of ``a`` pairwise (``None`` in ``b`` keeps a mode); keep the rest."""
    if len(a) < len(b):
        raise CuteError(f"{op}: {a} has rank {len(a)}, fewer modes than the by-mode tiler of rank {len(b)}")
    return make_layout([fn(a[i], b[i]) for i in range(len(b))] + [a[i] for i in range(len(b), len(a))])


def _from_lists(shapes: list, strides: list) -> Layout:
    if not shapes:
        return Layout(1, 0)
    if len(shapes) == 1:
        return Layout(shapes[0], strides[0])
    return Layout(tuple(shapes), tuple(strides))


# Flatten and merge adjacent modes where shape*stride meets the next stride; the int->value map is unchanged.
# max_extent caps merged extents; a tuple there is a by-mode profile (pycute's second argument).
def coalesce(layout: Layout, max_extent=None) -> Layout:
    if is_tuple(max_extent):
        return _by_mode(lambda a, p: coalesce(a, None if is_int(p) else p), layout, max_extent, "coalesce")
    shapes, strides = [], []
    for s, d in zip(flatten(layout.shape), flatten(layout.stride)):
        if known_eq(s, 1):
            continue  # a size-1 mode contributes nothing, whatever its stride
        if shapes and known_eq(shapes[-1] * strides[-1], d) and _within(shapes[-1] * s, max_extent):
            shapes[-1] = shapes[-1] * s
        else:
            shapes.append(s)
            strides.append(d)
    return _from_lists(shapes, strides)


def _within(extent, max_extent) -> bool:
    return max_extent is None or (is_int(extent) and extent <= max_extent)


# Drop stride-0 and size-1 modes, then coalesce: the layout's image with broadcasts removed.
def filter(layout: Layout, profile=None) -> Layout:  # noqa: A001 - pycute's name
    if is_tuple(profile):
        return _by_mode(filter, layout, profile, "filter")
    keep = [(s, d) for s, d in zip(flatten(layout.shape), flatten(layout.stride))
            if not (known_eq(s, 1) or known_eq(d, 0))]
    if not keep:
        return Layout(1, 0)
    return coalesce(Layout(tuple(s for s, _ in keep), tuple(d for _, d in keep)))


def _is_one(x) -> bool:
    return known_eq(x, 1) if not isinstance(x, ScaledBasis) else False


def coalesce_x(layout: Layout) -> Layout:
    """coalesce that also keeps the map beyond the domain: a trailing size-1 mode keeps its stride (as size 2),
    because composition reads the last mode of its left operand as unbounded."""
    shapes, strides = list(flatten(layout.shape)), list(flatten(layout.stride))
    if _is_one(shapes[-1]):
        shapes[-1] = 2
    out_s, out_d = [shapes[-1]], [strides[-1]]
    for s, d in zip(reversed(shapes[:-1]), reversed(strides[:-1])):
        if _is_one(s):
            continue
        if is_int(out_s[0]) and known_eq(s * d, out_d[0]):
            out_s[0], out_d[0] = s * out_s[0], d
        else:
            out_s.insert(0, s)
            out_d.insert(0, d)
    return _from_lists(out_s, out_d)


def _coalesce_by(layout: Layout, profile) -> Layout:
    """coalesce_x at the leaves of ``profile`` (the right operand's codomain profile)."""
    if not is_tuple(profile):
        return coalesce_x(layout)
    if len(profile) > len(layout):
        raise CuteError(f"composition: the right operand reaches codomain mode {len(profile) - 1} of {layout}, "
                        f"which has rank {len(layout)}")
    return make_layout([_coalesce_by(layout[i], p) for i, p in enumerate(profile)]
                       + [layout[i] for i in range(len(profile), len(layout))])


def _coprofile(stride):
    """Codomain profile of the right operand: 0 for integer strides, a tuple tree for basis strides."""
    leaves = flatten(stride)
    basis = [d for d in leaves if isinstance(d, ScaledBasis)]
    if not basis:
        return 0
    if len(basis) != len(leaves) and any(not known_eq(d, 0) for d in leaves if not isinstance(d, ScaledBasis)):
        raise CuteError(f"composition: the right operand's strides {fmt(stride)} mix integers and basis strides")
    tree: dict = {}
    for d in basis:
        node = tree
        for m in d.mode:
            node = node.setdefault(m, {})
    return _tree_profile(tree)


def _tree_profile(node):
    if not node:
        return 0
    return tuple(_tree_profile(node.get(i, {})) for i in range(max(node) + 1))


def compose_layouts(a: Layout, b: Layout) -> Layout:
    """A o B for a Layout B (C++ ``composition(Layout, Layout)``)."""
    flat = _coalesce_by(a, _coprofile(b.stride))
    return _compose(flat.shape, flat.stride, b.shape, b.stride, a, b)


def _compose(ls, ld, rs, rd, a, b) -> Layout:
    if is_tuple(rs):
        return make_layout([_compose(ls, ld, s, d, a, b) for s, d in zip(rs, rd)])
    if isinstance(rd, ScaledBasis):
        for m in rd.mode:
            if not is_tuple(ls) or m >= len(ls):
                if m == 0 and not is_tuple(ls):
                    continue
                raise CuteError(f"composition {a} o {b}: basis stride {rd} names codomain mode {m}, "
                                f"which {a} does not have")
            ls, ld = ls[m], ld[m]
        return _compose(ls, ld, rs, rd.value, a, b)
    if is_int(rd) and rd == 0:
        return Layout(rs, 0)
    if not is_tuple(ls):
        return Layout(rs, _scale(ld, rd))
    res_s, res_d = [], []
    rest_s, rest_d = rs, rd
    for cs, cd in zip(ls[:-1], ld[:-1]):
        if not (is_int(cs) and is_int(rest_d)):
            raise CuteError(f"composition {a} o {b}: needs a constant stride and constant left extents, "
                            f"got {cs} and {rest_d}")
        mag = abs(rest_d)
        next_s = ceil_div(cs, mag)
        next_d = ceil_div(mag, cs) * (1 if rest_d >= 0 else -1)
        if rest_d > 0 and rest_d % cs and rest_d >= cs:
            raise CuteError(f"composition {a} o {b}: stride divisibility fails, the remaining stride {rest_d} "
                            f"is neither below nor a multiple of the mode extent {cs}")
        if next_s == 1 or _is_one(rest_s):
            if mag % cs and not _is_one(rest_s):
                raise _inexact(a, b, f"the stride {rest_d} steps over a mode of extent {cs} it does not divide")
            rest_d = next_d
            continue
        new = min(next_s, rest_s) if is_int(rest_s) else None
        if new is None:
            raise CuteError(f"composition {a} o {b}: cannot split the symbolic extent {rest_s} across modes")
        if rest_s % new:
            raise CuteError(f"composition {a} o {b}: shape divisibility fails, {new} elements of a mode do not "
                            f"divide the remaining extent {rest_s}")
        if new < rest_s and cs % mag:
            raise _inexact(a, b, f"the stride {rest_d} does not divide the mode extent {cs} it wraps around")
        res_s.append(new)
        res_d.append(_scale(cd, rest_d))
        rest_s, rest_d = rest_s // new, next_d
    if not res_s:
        return Layout(rest_s, _scale(ld[-1], rest_d))
    if _is_one(rest_s) and is_int(rest_s):
        return _from_lists(res_s, res_d)
    return Layout(tuple(res_s) + (rest_s,), tuple(res_d) + (_scale(ld[-1], rest_d),))


def _scale(stride, k):
    return stride * k if isinstance(stride, ScaledBasis) else k * stride


def _inexact(a, b, why: str) -> CuteError:
    return CuteError(f"composition {a} o {b}: {why}; C++ CuTe's weak divisibility check lets this through and "
                     f"returns a layout that is not A o B, so it is refused here")


def _ceil_div_shape(target, d):
    """C++ ``ceil_div(IntTuple, Int)``: divide the leaves from the left, carrying the rounded-up rest."""
    if not is_tuple(target):
        return (ceil_div(target, d),)
    out = []
    for t in flatten(target):
        out.append(ceil_div(t, d))
        d = ceil_div(d, t)
    return tuple(out)


def _coalesce_shape(shape) -> tuple:
    """C++ ``coalesce(Shape)``: multiply neighbouring leaves that are both constants or both symbolic."""
    out = []
    for x in flatten(shape):
        if out and is_int(out[-1]) == is_int(x):
            out[-1] = out[-1] * x
        else:
            out.append(x)
    return tuple(out)


# The layout of the "holes" of an injective layout, ordered by stride, extended up to cotarget (an int, a shape
# or a layout, whose shape is taken).
def complement(layout, cotarget=None) -> Layout:
    if is_int(layout):
        layout = Layout(layout)
    f = filter(layout)
    if cotarget is None:
        cotarget = cosize(f)
    elif isinstance(cotarget, Layout):
        cotarget = cotarget.shape
    else:
        cotarget = norm(cotarget, "complement cotarget")
    shapes, strides = list(flatten(f.shape)), list(flatten(f.stride))
    if len(shapes) == 1 and is_int(strides[0]) and strides[0] == 0:
        cs = _coalesce_shape(cotarget)
        return Layout(cs[0] if len(cs) == 1 else cs)
    for d in strides:
        if isinstance(d, ScaledBasis):
            raise CuteError(f"complement of {layout}: needs integer strides, got {d}")
        if len(strides) > 1 and not is_int(d):
            raise CuteError(f"complement of {layout}: a symbolic stride ({d}) is supported only for rank-1 layouts "
                            f"(as in C++ CuTe)")
        if is_int(d) and d < 0:
            raise CuteError(f"complement of {layout}: negative stride {d}")
    res_s, res_d = [], [1]
    while len(shapes) > 1:
        k = min(range(len(strides)), key=lambda i: strides[i])
        d, s = strides.pop(k), shapes.pop(k)
        res_s.append(_complement_gap(layout, d, res_d[-1]))
        res_d.append(d * s)
    res_s.append(_complement_gap(layout, strides[0], res_d[-1]))
    new_d = strides[0] * shapes[0]
    rest = _coalesce_shape(_ceil_div_shape(cotarget, new_d))
    rest_d = _zero_ones(rest, prefix_product(rest, new_d))
    return coalesce(Layout(tuple(res_s) + rest, tuple(res_d) + rest_d))


def _complement_gap(layout, d, cur):
    if is_int(d) and is_int(cur):
        if d < cur:
            raise CuteError(f"complement of {layout}: stride {d} falls inside the span [0, {cur}) of the smaller "
                            f"modes (the layout is not injective, or its modes interleave)")
        return d // cur
    return d // cur if not known_eq(cur, 1) else d


def _inverse(layout, modes_of_inverse):
    """An inverse of ``layout`` assembled by ``modes_of_inverse(layout, shapes, strides, positions)`` from the
    coalesced, flattened modes and their column-major positions; None and an int ``n`` (the identity of size
    ``n``) need no assembly."""
    if layout is None:
        return None
    if is_int(layout):
        return Layout(layout)
    flat = coalesce(layout)
    shapes, strides = flatten(flat.shape), flatten(flat.stride)
    res_s, res_d = modes_of_inverse(layout, shapes, strides, prefix_product(shapes))
    return coalesce(Layout(tuple(res_s), tuple(res_d)))


# R with L(R(i)) == i on the longest chain of strides 1, s0*d0, ... ; stride-0 and symbolic modes are skipped.
# Partial: L is a bijection onto [0, size(L)) exactly when size(right_inverse(L)) == size(L).
def right_inverse(layout):
    return _inverse(layout, _right_inverse_modes)


def _right_inverse_modes(layout, shapes: tuple, strides: tuple, pre: tuple) -> tuple[list, list]:
    res_s, res_d, cur = [1], [0], 1
    for i in sorted((i for i, d in enumerate(strides) if is_int(d)), key=lambda i: strides[i]):
        if strides[i] == cur:
            res_s.append(shapes[i])
            res_d.append(pre[i])
            cur = shapes[i] * strides[i]
    return res_s, res_d


# R with R(L(c)) == L(c)'s coordinate for an injective L: strides sorted, each gap between them a new mode.
def left_inverse(layout):
    return _inverse(layout, _left_inverse_modes)


def _left_inverse_modes(layout, shapes: tuple, strides: tuple, pre: tuple) -> tuple[list, list]:
    for d in strides:
        if not is_int(d):
            raise CuteError(f"left_inverse of {layout}: needs constant integer strides (as C++ CuTe), got {d}")
        if d < 0:
            raise CuteError(f"left_inverse of {layout}: negative stride {d}")
    order = sorted(range(len(strides)), key=lambda i: strides[i])
    res_s, res_d = [], [0]
    for i in order:
        d = strides[i]
        if d == 0:
            continue
        covered = 1
        for x in res_s:
            covered *= x
        if d % covered:
            raise CuteError(f"left_inverse of {layout}: divisibility fails, stride {d} is not a multiple of the "
                            f"{covered} values the smaller strides span")
        res_s.append(d // covered)
        res_d.append(pre[i])
    res_s.append(shapes[order[-1]])
    return res_s, res_d
