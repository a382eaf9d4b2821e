"""Layout: a map from a logical coordinate to physical output coordinates (TileLang's ``tl::Layout``).

Expressions are written over the placeholders of ``expr.py``. Every derived quantity (output shape,
inverse, injectivity) is computed symbolically where TVM can and confirmed or replaced by exact
enumeration where the domain is static and small enough; the analysis and inverse solvers live in
``inverse.py``, the snapshot reader in ``serialize.py``.

Size (over 600 lines): the Layout class and its methods only, one job; expressions, inverses and the snapshot
reader live beside it.
"""
from __future__ import annotations

import math
from functools import cached_property
from typing import Callable, Sequence

import numpy as np
from tvm import sym, tirx

from .errors import EvaluationError, LayoutError, TileLayoutError
from .evaluate import evaluate, evaluate_grid, grid_env
from .expr import (_PLACEHOLDERS, ENUMERATION_LIMIT, INJECTIVE_ENUMERATION_LIMIT, ExprKey, _as_expr,  # noqa: F401
                   _fmt_shape, call_user_fn, expr_text, free_vars, is_static, make_analyzer, normalize_shape, placeholder,
                   rep_placeholder, row_major_offset, row_major_strides, shape_size, shape_vars, simplify,
                   substitute)
from .inverse import (_bound_extent, _detect, _detect_bijective, _gf2_inverse, _digit_inverse,  # noqa: F401
                      _iter_sum_extents, _lookup_inverse, _padding_cells_excluded, _prove_injective_symbolically,
                      _stride_inverse)

__all__ = ["Layout", "placeholder", "rep_placeholder", "substitute", "simplify", "clear_caches"]

#: (layout key, allow_padding, preset output shape) -> (ok, (inverse, exact) or the LayoutError)
_INVERSE_MEMO: dict = {}
_INVERSE_MEMO_LIMIT = 1 << 9      # inverses keep their tables: a few kernels' worth


def clear_caches() -> None:
    """Forget the process-wide inverse memo (benchmarks time cold runs)."""
    _INVERSE_MEMO.clear()


#: invert an axis permutation by writing it down (False: TVM's iter-map inverse, the general path; tests compare)
PERMUTATION_INVERSE = True


class Layout:
    """``input_shape`` -> ``forward_index`` over placeholders; output shape derived as max+1 per output."""

    kind = "Layout"

    def __init__(self, shape, forward_fn: Callable | Sequence | None = None):
        shape = normalize_shape(shape)
        if len(shape) > len(_PLACEHOLDERS):
            raise LayoutError(f"layouts support at most {len(_PLACEHOLDERS)} input dimensions, got {len(shape)}")
        variables = _PLACEHOLDERS[: len(shape)]
        if callable(forward_fn):
            exprs = call_user_fn(forward_fn, variables, f"layout over {_fmt_shape(shape)}", "forward_fn")
        elif forward_fn is None:
            raise LayoutError("Layout needs a forward function (or a list of forward expressions)")
        else:
            exprs = forward_fn
        if not isinstance(exprs, (list, tuple)):
            exprs = [exprs]
        exprs = [_as_expr(e) for e in exprs]
        if not exprs:
            raise LayoutError(f"layout over {_fmt_shape(shape)} has no outputs")
        self._init(shape, exprs)

    def _init(self, shape: list, exprs: list, simplify_exprs: bool = True) -> None:
        self._input_shape = shape
        variables = self.forward_vars
        self._check_free_vars(exprs, allowed=set(variables) | shape_vars(shape))
        self._forward_index = simplify(exprs, variables, shape) if simplify_exprs else list(exprs)

    @classmethod
    def from_exprs(cls, shape, exprs, simplify_exprs: bool = True) -> "Layout":
        """Build from expressions already written over the placeholders."""
        obj = cls.__new__(cls)
        Layout._init(obj, normalize_shape(shape), [_as_expr(e) for e in exprs], simplify_exprs)
        return obj

    def _check_free_vars(self, exprs, allowed: set) -> None:
        bad = []
        allowed = list(allowed)
        by_hash = {a.__hash__(): a for a in allowed}       # Vars hash by handle: one lookup, then confirmed
        for e in exprs:
            for v in free_vars(e):
                hit = by_hash.get(v.__hash__())
                if (hit is not None and v.same_as(hit)) or any(v.same_as(a) for a in allowed):
                    continue
                bad.append(v.name)
        if bad:
            names = ", ".join(sorted(set(bad)))
            raise LayoutError(f"layout over {_fmt_shape(self._input_shape)} uses variables that are not its "
                              f"inputs: {names} (inputs are {', '.join(v.name for v in self.forward_vars)})")

    # ----------------------------------------------------------------- basic fields
    @property
    def input_shape(self) -> list:
        """Extent of every logical dimension (ints, or PrimExprs when symbolic)."""
        return list(self._input_shape)

    @property
    def forward_index(self) -> list:
        """Output coordinates as PrimExprs over ``forward_vars`` (one per output dimension)."""
        return list(self._forward_index)

    @property
    def forward_vars(self) -> list:
        """The placeholder variables ``_i, _j, ...`` the expressions are written over, one per input dimension."""
        return _PLACEHOLDERS[: len(self._input_shape)]

    @property
    def input_dim(self) -> int:
        """Number of logical dimensions."""
        return len(self._input_shape)

    @property
    def output_dim(self) -> int:
        """Number of output dimensions (slot dimensions of a fragment)."""
        return len(self._forward_index)

    @property
    def is_static(self) -> bool:
        """Whether every input extent is a compile-time integer (required for enumeration)."""
        return is_static(self._input_shape)

    @property
    def size(self):
        """Number of logical elements: the product of ``input_shape``."""
        return shape_size(self._input_shape)

    def _enumerable(self, limit: int = ENUMERATION_LIMIT) -> bool:
        return self.is_static and self.size <= limit

    def _require_enumerable(self, why: str, limit: int = ENUMERATION_LIMIT) -> None:
        if not self.is_static:
            raise EvaluationError(f"{why}: {self!r} has a symbolic input shape and cannot be enumerated")
        if self.size > limit:
            raise EvaluationError(f"{why}: {self!r} has {self.size} points, more than the enumeration limit {limit}")

    @cached_property
    def _output_shape(self) -> list:
        if self._enumerable() and "_table" not in self.__dict__ and self.size:
            # each output over the axes it depends on only (the same values as the full table, without
            # materialising it); a negative output is reported from the table below
            env = grid_env(self.forward_vars, self._input_shape)
            values = [np.asarray(evaluate(e, env)) for e in self._forward_index]
            if all(int(v.min()) >= 0 for v in values):
                return [int(v.max()) + 1 for v in values]
        if self._enumerable():
            tab = self.table()
            low = [int(tab[..., k].min()) for k in range(self.output_dim)] if tab.size else []
            if any(v < 0 for v in low):
                k = next(k for k, v in enumerate(low) if v < 0)
                at = [int(x) for x in np.unravel_index(int(np.argmin(tab[..., k])), tuple(self._input_shape))]
                raise LayoutError(f"layout over {_fmt_shape(self._input_shape)} with forward index "
                                  f"{[str(e) for e in self._forward_index]} maps coordinate {at} to "
                                  f"{[int(x) for x in tab[tuple(at)]]}: output {k} is negative ({low[k]}); a layout's "
                                  f"outputs are indices from 0")
            return [int(tab[..., k].max()) + 1 for k in range(self.output_dim)]
        ana = make_analyzer(self.forward_vars, self._input_shape)
        out = []
        for k, e in enumerate(self._forward_index):
            if ana.can_prove(e < 0) or ana.const_int_bound(e).max_value < 0:
                raise LayoutError(f"layout over {_fmt_shape(self._input_shape)}: output {k} ({e}) is negative; a "
                                  f"layout's outputs are indices from 0")
            out.append(_bound_extent(ana, e, self._input_shape, k))
        return out

    @property
    def output_shape(self) -> list:
        """Extent of every output dimension: the smallest box holding every forward index (by range analysis,
        or by enumeration when the analysis cannot bound it)."""
        return list(self._output_shape)

    # ----------------------------------------------------------------- evaluation
    def map(self, *coords) -> list:
        """Forward index at one point (ints in, ints out; PrimExprs in -> simplified PrimExprs out)."""
        if len(coords) == 1 and isinstance(coords[0], (list, tuple)):
            coords = tuple(coords[0])
        if len(coords) != self.input_dim:
            raise LayoutError(f"{self!r} takes {self.input_dim} coordinates, got {len(coords)}")
        if all(isinstance(c, (int, np.integer)) for c in coords):
            for c, s in zip(coords, self._input_shape):
                if isinstance(s, int) and not 0 <= c < s:
                    raise LayoutError(f"coordinate {list(coords)} is outside the input shape {self.input_shape} of {self!r}")
            env = dict(zip(self.forward_vars, (np.int64(c) for c in coords)))
            return [int(evaluate(e, env)) for e in self._forward_index]
        return self.forward(*coords)

    def forward(self, *coords) -> list:
        """Substitute (symbolic) coordinates into the forward index."""
        vmap = dict(zip(self.forward_vars, (_as_expr(c) for c in coords)))
        return [sym.Analyzer().simplify(substitute(e, vmap)) for e in self._forward_index]

    __call__ = map

    def table(self) -> np.ndarray:
        """Forward index at every point: shape (*input_shape, output_dim), read-only."""
        return self._table

    @cached_property
    def _table(self) -> np.ndarray:
        self._require_enumerable("cannot tabulate the layout")
        tab = evaluate_grid(self._forward_index, self.forward_vars, self._input_shape)
        tab.setflags(write=False)
        return tab

    @cached_property
    def linearized_forward_index(self):
        """Row-major linearisation of the outputs over the output shape."""
        out = row_major_offset(self._forward_index, self.output_shape)
        return simplify([out], self.forward_vars, self._input_shape)[0]

    def _linear_table(self) -> np.ndarray:
        """``linearized_forward_index`` at every input point: the output coordinates dotted with the row-major
        strides of the output shape."""
        return self.table() @ np.asarray(row_major_strides(self.output_shape), dtype=np.int64)

    # ----------------------------------------------------------------- properties of the map
    def is_injective(self) -> bool:
        """Distinct coordinates map to distinct outputs (iter-map proof, enumeration, symbolic proof)."""
        return self._injectivity_error is None

    @cached_property
    def _injectivity_error(self):
        return self.injectivity_error()

    def check_injective(self) -> None:
        """Raise LayoutError naming two colliding coordinates if the layout is not injective."""
        err = self._injectivity_error
        if err is not None:
            raise LayoutError(err)

    def injectivity_error(self, exprs=None, variables=None, shape=None) -> str | None:
        """``None`` when the forward map is injective, else a sentence naming two coordinates that collide
        (``exprs``/``variables``/``shape`` check another map over the same machinery)."""
        exprs = self._forward_index if exprs is None else exprs
        variables = self.forward_vars if variables is None else variables
        shape = self._input_shape if shape is None else shape
        if _detect_bijective(exprs, variables, shape) is not None:
            return None
        if is_static(shape) and shape_size(shape) <= INJECTIVE_ENUMERATION_LIMIT:
            tab = evaluate_grid(exprs, variables, shape).reshape(-1, len(exprs))
            keys = _row_keys(tab)
            order = np.argsort(keys, kind="stable")
            same = keys[order[1:]] == keys[order[:-1]]
            if not same.any():
                return None
            hits = order[np.argmax(same): np.argmax(same) + 2]
            dup_row = tab[hits[0]]
            a, b = (list(np.unravel_index(h, tuple(shape))) for h in hits)
            return (f"{self!r} is not injective: logical coordinates {[int(x) for x in a]} and "
                    f"{[int(x) for x in b]} both map to {[int(x) for x in dup_row]}")
        if _prove_injective_symbolically(exprs, variables, shape):
            return None
        return f"injectivity of {self!r} could not be proven (symbolic shape and no affine structure)"

    def is_equal(self, other: "Layout") -> bool:
        """Same mapping (independent of expression form); shapes must agree."""
        if not isinstance(other, Layout) or other.kind != self.kind:
            return False
        if other is self or other.key == self.key:
            return True
        return self._same_index(other)

    @cached_property
    def _index_strs(self) -> tuple:
        return tuple(expr_text(e) for e in self._forward_index)

    @cached_property
    def key(self) -> tuple:
        """Structural identity (same key => same mapping); used to memoise work on equal layouts."""
        return (self.kind, tuple(s if isinstance(s, int) else str(s) for s in self._input_shape),
                ExprKey(self._forward_index))

    def _same_index(self, other: "Layout") -> bool:
        if not _shapes_equal(self._input_shape, other._input_shape) or self.output_dim != other.output_dim:
            return False
        if not _shapes_equal(self.output_shape, other.output_shape):
            return False
        return _exprs_equal(self._forward_index, other._forward_index, self.forward_vars, self._input_shape)

    # ----------------------------------------------------------------- inverse
    def inverse(self) -> "Layout":
        """The inverse layout output -> input (the layout must be a bijection onto its output box)."""
        return self.inverse_with_info()[0]

    def inverse_with_info(self, allow_padding: bool = False):
        """(inverse, exact): ``exact`` is False when the layout is not onto its output box (padding)."""
        # memoised process-wide by structure: inference asks for the same inverse in every attempt and every
        # engine of one kernel, each time on a new but equal Layout (a refusal is remembered too); an output
        # shape given in advance changes the answer, so it is part of the key
        preset = self.__dict__.get("_output_shape")
        key = (self.key, bool(allow_padding), None if preset is None else tuple(preset))
        hit = _INVERSE_MEMO.get(key)
        if hit is None:
            try:
                hit = (True, self._inverse_with_info(allow_padding))
            except LayoutError as err:
                hit = (False, err)
            # the output shape the computation settled on for this layout (it derives one from the iter sums
            # when it can); an equal layout served from the memo takes the same
            shape = self.__dict__.get("_output_shape")
            hit += (None if shape is None else list(shape),)
            if len(_INVERSE_MEMO) >= _INVERSE_MEMO_LIMIT:
                _INVERSE_MEMO.clear()
            _INVERSE_MEMO[key] = hit
        elif hit[2] is not None and "_output_shape" not in self.__dict__:
            self.__dict__["_output_shape"] = list(hit[2])
        if not hit[0]:
            raise hit[1]
        return hit[1]

    def _inverse_with_info(self, allow_padding: bool):
        swapped = self._axis_permutation_inverse() if PERMUTATION_INVERSE else None
        if swapped is not None:
            return swapped, True
        out_vars = _PLACEHOLDERS[: self.output_dim]
        res = _detect_bijective(self._forward_index, self.forward_vars, self._input_shape)
        if res is not None and "_output_shape" not in self.__dict__:
            # a proven bijection's outputs are iter sums whose ranges are exact (``_detect`` keeps only iter
            # maps that read back as the expressions): no enumeration needed
            derived = _iter_sum_extents(res.indices, self.forward_vars, self._input_shape)
            if derived is not None:
                self.__dict__["_output_shape"] = derived
        out_shape = self.output_shape
        exact = True
        filled = shape_size(out_shape), self.size
        if res is not None and all(isinstance(n, int) for n in filled) and filled[0] != filled[1]:
            # bijective onto [base, base + n) with base != 0 (``_i // 4 + 16``) but not onto the box [0, base + n)
            exact = False
            if not allow_padding:
                res = None
        if res is None and allow_padding:
            res = _detect(self._forward_index, self.forward_vars, self._input_shape, "noCheck")
            exact = False
        if res is not None:
            try:
                inv = sym.inverse_affine_iter_map(res.indices, out_vars)
            except Exception:  # TVM refuses this iter map: fall through to enumeration
                inv = None
            if inv is not None:
                back = _lookup_inverse(inv, self.forward_vars)
                result = Layout.from_exprs(out_shape, back)
                if exact:
                    # detect_iter_map proved a bijection (TileLang's own criterion), so the inverse covers exactly
                    # the forward domain; its iter sums are still checked by enumeration where the domain allows:
                    # apache-tvm 0.27 rewrites ``(_i + 3) % 8`` over _i < 8 to ``_i`` (the rotation is dropped)
                    result.__dict__["_output_shape"] = list(self._input_shape)
                if self._verify_inverse(result, exact):
                    return result, exact
        if not self._enumerable():
            raise LayoutError(f"cannot invert {self!r}: it is not affine (no iter-map) and its domain is too large or "
                              f"symbolic to invert by enumeration")
        self.check_injective()
        if shape_size(out_shape) != self.size and not allow_padding:
            raise LayoutError(f"cannot invert {self!r}: it is injective but not onto its output box "
                              f"{out_shape} ({self.size} points into {shape_size(out_shape)})")
        result = _gf2_inverse(self)
        if result is None:
            result = _stride_inverse(self)
        if result is None:
            result = _digit_inverse(self)
        if result is None:
            raise LayoutError(f"cannot invert {self!r}: it is neither affine nor an XOR (GF(2)-linear) map over "
                              f"power-of-two extents, so no closed-form inverse exists here")
        return result, shape_size(out_shape) == self.size

    def _axis_permutation_inverse(self) -> "Layout | None":
        """The inverse of a layout whose outputs are its input axes in another order (``(i, j) -> (j, i)``, what
        a broadcast read's completion inverts), written down: output k is input axis p[k], so input axis p[k]
        is inverse axis k. None for anything else (the general path then decides). The general path finds
        the same layout through TVM's iter-map inverse at about half a millisecond; tests compare the two."""
        index, variables = self._forward_index, self.forward_vars
        if len(index) != len(variables) or not is_static(self._input_shape):
            return None
        axis = []                               # output k is input axis axis[k]
        for e in index:
            pos = next((n for n, v in enumerate(variables) if e.same_as(v)), None)
            if pos is None or pos in axis:
                return None
            axis.append(pos)
        where = {pos: k for k, pos in enumerate(axis)}
        shape = [self._input_shape[pos] for pos in axis]
        preset = self.__dict__.get("_output_shape")
        if preset is not None and list(preset) != shape:
            return None
        self.__dict__["_output_shape"] = shape
        result = Layout.from_exprs(shape, [_PLACEHOLDERS[where[n]] for n in range(len(variables))])
        result.__dict__["_output_shape"] = list(self._input_shape)
        return result

    def _verify_inverse(self, inv: "Layout", exact: bool) -> bool:
        """Enumeration check that ``inv`` inverts this layout on its whole domain (the box ``inv`` reads)
        where the domain is small enough; trusted otherwise.

        inv(fwd(x)) == x alone is not enough: an inverse that ignores an output (TVM's iter map can drop a
        thread output's offset, see ``_inverse_with_info``) passes it while cells of the box outside the
        image still land in the input box, and a loop partitioned by it runs iterations on the wrong thread.
        So every forward value must lie in ``inv``'s input box, and without ``exact`` (padding) every cell of
        that box must map out of the input box or to the point that maps to it. Each output of the inverse
        is compared, as it is evaluated, with its input axis broadcast over the grid (no stacked coordinate
        tables)."""
        if not self._enumerable(1 << 18):
            return True
        tab = self.table().reshape(-1, self.output_dim)
        shape = tuple(int(s) for s in self._input_shape)
        if len(inv._forward_index) != len(shape):
            return False
        box = [int(s) if isinstance(s, (int, np.integer)) else None for s in inv.input_shape]
        if any(b is None for b in box) or len(box) != tab.shape[1]:
            return False
        if tab.size and ((tab < 0).any() or (tab >= np.asarray(box, dtype=np.int64)).any()):
            return False                                 # a forward value outside the box the inverse reads
        env = {v: tab[:, k] for k, v in enumerate(inv.forward_vars)}
        for d, e in enumerate(inv._forward_index):
            back = np.broadcast_to(evaluate(e, env), tab.shape[:1]).reshape(shape)
            axis = np.arange(shape[d], dtype=np.int64).reshape([-1 if k == d else 1 for k in range(len(shape))])
            if not (back == axis).all():
                return False
        if exact and shape_size(box) == self.size:
            return True     # injective (inverted on the domain) into a box of its own size: onto it
        return _padding_cells_excluded(self, inv, box)

    # ----------------------------------------------------------------- transformations
    def repeat(self, dim: int, factor: int) -> "Layout":
        """Tile input dimension ``dim`` ``factor`` times; a leading output says which copy."""
        dim, factor = self._check_repeat(dim, factor)
        if factor == 1:
            return self
        s = self._input_shape[dim]
        v = self.forward_vars[dim]
        inner = [substitute(e, {v: tirx.floormod(v, s)}) for e in self._forward_index]
        shape = list(self._input_shape)
        shape[dim] = s * factor
        return Layout.from_exprs(shape, [tirx.floordiv(v, s)] + inner)

    def _check_repeat(self, dim, factor):
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise LayoutError(f"repeat dim must be an int, got {dim!r}")
        if not -self.input_dim <= dim < self.input_dim:
            raise LayoutError(f"repeat dim {dim} out of range for {self!r}")
        if isinstance(factor, bool) or not isinstance(factor, (int, np.integer)) or factor < 1:
            raise LayoutError(f"repeat factor must be a positive int, got {factor!r}")
        return int(dim) % self.input_dim, int(factor)

    def expand(self, leading_shape) -> "Layout":
        """Prepend input dimensions that pass through unchanged: [I..., J, K] -> [I...] + F(J, K)."""
        lead = self._check_expand(leading_shape)
        if not lead:
            return self
        n = len(lead)
        shift = {v: placeholder(k + n) for k, v in enumerate(self.forward_vars)}
        exprs = [placeholder(k) for k in range(n)] + [substitute(e, shift) for e in self._forward_index]
        return Layout.from_exprs(lead + self.input_shape, exprs)

    def _check_expand(self, leading_shape) -> list:
        if isinstance(leading_shape, (int, np.integer)) and not isinstance(leading_shape, bool):
            leading_shape = [leading_shape]
        if not isinstance(leading_shape, (list, tuple)):
            raise LayoutError(f"expand takes an int or a list of ints, got {type(leading_shape).__name__}")
        return normalize_shape(list(leading_shape), "expand")

    def _make_layout(self, shape, exprs) -> "Layout":
        """A plain Layout (never the subclass): inverses and solvers build theirs through this."""
        return Layout.from_exprs(shape, exprs)

    def _reshaped(self, shape: list, exprs: list, source_coords: dict) -> "Layout":
        """The reshaped layout from its new index; ``source_coords`` maps old coordinates to new ones
        (subclasses carry their other maps, such as a fragment's thread, through it)."""
        return Layout.from_exprs(shape, exprs)

    def _groups_share_threads(self, f: int) -> bool:
        """Whether every aligned group of ``f`` elements lives in one thread (always, without threads)."""
        return True

    def reshape(self, shape, rescale_num: int = 1, rescale_den: int = 1) -> "Layout":
        """View the same storage with a new logical shape; num/den = old/new element bits for dtype views."""
        return _reshape(self, normalize_shape(shape, "reshape"), rescale_num, rescale_den)

    # ----------------------------------------------------------------- printing and serialisation
    def _shown_output_shape(self) -> str:
        """The output shape for printing; an invalid layout (negative outputs) still prints."""
        try:
            return _fmt_shape(self.output_shape)
        except TileLayoutError:
            return "[invalid]"

    def __repr__(self) -> str:
        fwd = ", ".join(str(e) for e in self._forward_index)
        return (f"Layout({_fmt_shape(self._input_shape)} -> {self._shown_output_shape()}, transform: "
                f"[{', '.join(v.name for v in self.forward_vars)}] -> [{fwd}])")

    def to_dict(self) -> dict:
        """Plain JSON form (kind, input_shape, output_shape, forward_index strings); ``tl.layout_from_dict``
        rebuilds the layout."""
        return {
            "kind": self.kind,
            "input_shape": [_jsonable(s) for s in self._input_shape],
            "output_shape": [_jsonable(s) for s in self.output_shape],
            "forward_index": list(self._index_strs),
        }

    def __eq__(self, other) -> bool:  # semantic equality; layouts are immutable values
        return isinstance(other, Layout) and self.is_equal(other)

    def __hash__(self) -> int:
        return hash((self.kind, tuple(str(s) for s in self._input_shape), self.output_dim))


# --------------------------------------------------------------------------- helpers

def _row_keys(tab: np.ndarray) -> np.ndarray:
    """One int64 key per row, equal exactly when the rows are equal (mixed radix over the column ranges)."""
    lo = tab.min(axis=0)
    span = tab.max(axis=0) - lo + 1
    if float(np.prod(span.astype(np.float64))) < 2.0 ** 62:
        keys = np.zeros(tab.shape[0], dtype=np.int64)
        for k in range(tab.shape[1]):
            keys = keys * span[k] + (tab[:, k] - lo[k])
        return keys
    _, inverse = np.unique(tab, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def _jsonable(s):
    return s if isinstance(s, int) else str(s)


def _shapes_equal(a, b) -> bool:
    if len(a) != len(b):
        return False
    ana = sym.Analyzer()
    for x, y in zip(a, b):
        if isinstance(x, int) and isinstance(y, int):
            if x != y:
                return False
        elif not ana.can_prove_equal(_as_expr(x), _as_expr(y)):
            return False
    return True


def _exprs_equal(xs, ys, variables, shape) -> bool:
    if len(xs) != len(ys):
        return False
    if is_static(shape) and shape_size(shape) <= ENUMERATION_LIMIT:
        env = __import__("tilelayout.evaluate", fromlist=["grid_env"]).grid_env(variables, shape)
        for x, y in zip(xs, ys):
            if not np.array_equal(np.broadcast_to(evaluate(x, env), tuple(shape)),
                                  np.broadcast_to(evaluate(y, env), tuple(shape))):
                return False
        return True
    ana = make_analyzer(variables, shape)
    return all(ana.can_prove_equal(x, y) for x, y in zip(xs, ys))


def _reshape(layout: Layout, shape: list, num: int, den: int) -> Layout:
    for name, val in (("rescale_num", num), ("rescale_den", den)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
            raise LayoutError(f"reshape {name} must be a positive int, got {val!r}")
    old = layout.input_shape
    if not (is_static(old) and is_static(shape)):
        if _shapes_equal(old, shape) and num == den:
            return layout
        raise LayoutError(f"cannot reshape {layout!r} to {shape}: symbolic shapes are only kept as they are")
    if shape_size(old) * num != shape_size(shape) * den:
        raise LayoutError(f"cannot reshape {layout!r} to {shape}: {shape_size(old)} elements of {num} bits "
                          f"do not fill {shape_size(shape)} elements of {den} bits")
    if old == shape and num == den:
        return layout
    new_vars = _PLACEHOLDERS[: len(shape)]
    flat = tirx.const(0, "int32")
    for v, s in zip(new_vars, shape):
        flat = flat * s + v
    g = math.gcd(num, den)
    num, den = num // g, den // g

    def old_coords(old_flat):
        coords, rest = [], old_flat
        for s in reversed(old):
            coords.append(tirx.floormod(rest, s))
            rest = tirx.floordiv(rest, s)
        return dict(zip(layout.forward_vars, reversed(coords)))

    if num == den:
        vmap = old_coords(flat)
        exprs = [substitute(e, vmap) for e in layout.forward_index]
    elif num > den:  # old elements wider: each old element splits into f new lanes
        if num % den:
            raise LayoutError(f"cannot reshape {layout!r}: element width ratio {num}/{den} is not integral")
        f = num // den
        vmap = old_coords(tirx.floordiv(flat, f))
        exprs = [substitute(e, vmap) for e in layout.forward_index]
        exprs[-1] = exprs[-1] * f + tirx.floormod(flat, f)
    else:  # new elements wider: f old elements must sit contiguously in the last output
        if den % num:
            raise LayoutError(f"cannot reshape {layout!r}: element width ratio {num}/{den} is not integral")
        f = den // num
        _check_widen(layout, f)
        vmap = old_coords(flat * f)
        exprs = [substitute(e, vmap) for e in layout.forward_index]
        exprs[-1] = tirx.floordiv(exprs[-1], f)
    source_coords = old_coords(flat if num == den else
                               (tirx.floordiv(flat, num // den) if num > den else flat * (den // num)))
    return layout._reshaped(shape, exprs, source_coords)


def _check_widen(layout: Layout, f: int) -> None:
    """Widening needs every aligned group of f old elements in one slot run (and one thread)."""
    layout._require_enumerable("cannot prove the widening reshape")
    tab = layout.table().reshape(-1, layout.output_dim)
    if tab.shape[0] % f:
        raise LayoutError(f"cannot widen {layout!r} by {f}: {tab.shape[0]} elements are not a multiple of {f}")
    groups = tab.reshape(-1, f, layout.output_dim)
    ok = (groups[:, :, :-1] == groups[:, :1, :-1]).all()
    ok = ok and (groups[:, :, -1] == groups[:, :1, -1] + np.arange(f)).all() and (groups[:, 0, -1] % f == 0).all()
    if not ok or not layout._groups_share_threads(f):
        raise LayoutError(f"cannot reshape {layout!r} to {f}x wider elements: the layout interleaves storage below "
                          f"the new element width (groups of {f} consecutive elements are not contiguous in one slot run)")
