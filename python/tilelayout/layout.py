"""Layout: a map from a logical coordinate to physical output coordinates (TileLang's ``tl::Layout``).

Expressions are written over process-wide placeholder variables ``_i, _j, _k, ...`` so that two layouts
built independently compare structurally. Every derived quantity (output shape, inverse, injectivity)
is computed symbolically where TVM can and confirmed or replaced by exact enumeration where the domain
is static and small enough.
"""
from __future__ import annotations

import inspect
import math
from functools import cached_property
from typing import Callable, Sequence

import numpy as np
import tvm
from tvm import sym, tirx
from tvm.ir import Range

from .errors import EvaluationError, LayoutError, TileLayoutError
from .evaluate import evaluate, evaluate_grid

__all__ = ["Layout", "placeholder", "rep_placeholder", "layout_from_dict", "substitute", "simplify"]

_NAMES = "ijklmnopqrstuvwxyzabcdefgh"
_PLACEHOLDERS = [tirx.Var("_" + c, "int32") for c in _NAMES]
_REP = tirx.Var("_rep", "int32")
_BY_NAME = {v.name: v for v in _PLACEHOLDERS + [_REP]}

#: domains up to this many points are enumerated exactly (output shape, equality, inverse of non-affine maps)
ENUMERATION_LIMIT = 1 << 20
#: injectivity falls back to enumeration up to this many points (TileLang's bound)
INJECTIVE_ENUMERATION_LIMIT = 1 << 18


def placeholder(k: int) -> tirx.Var:
    """The k-th input placeholder (``_i`` for 0)."""
    if not 0 <= k < len(_PLACEHOLDERS):
        raise LayoutError(f"layouts support at most {len(_PLACEHOLDERS)} input dimensions, got index {k}")
    return _PLACEHOLDERS[k]


def rep_placeholder() -> tirx.Var:
    """The replica placeholder ``_rep`` of fragments."""
    return _REP


def substitute(expr, vmap: dict):
    """Replace variables in ``expr`` (Vars hash by identity)."""
    if not vmap or isinstance(expr, int):
        return expr
    import tvm_ffi
    return tvm_ffi.structural_map(expr, (tvm.ir.Var, lambda v: vmap.get(v, v)))


def call_user_fn(fn, args, what: str, role: str):
    """Call a user's forward function, turning an arity mismatch into a LayoutError (shape/rank mismatch)."""
    try:
        inspect.signature(fn).bind(*args)
    except TypeError as err:
        names = ", ".join(getattr(a, "name", str(a)) for a in args)
        raise LayoutError(f"{what}: {role} must take {len(args)} arguments ({names}) but does not: {err}") from None
    except ValueError:  # no introspectable signature (builtin): let the call speak for itself
        pass
    try:
        return fn(*args)
    except TileLayoutError:
        raise
    except Exception as err:  # TVM rejects the expression the function builds (``i // 0``, a float operand...)
        raise LayoutError(f"{what}: {role} failed: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}") \
            from None


def _as_expr(value):
    if isinstance(value, (bool, np.bool_)):
        raise LayoutError(f"a layout expression must be an integer expression, got boolean {value!r}")
    if isinstance(value, (int, np.integer)):
        return tirx.const(int(value), "int32")
    if isinstance(value, tvm.ir.Expr):
        if "int" not in str(value.ty):
            raise LayoutError(f"a layout expression must have an integer type, got {value.ty}: {value}")
        return value
    raise LayoutError(f"a layout expression must be an int or a PrimExpr, got {type(value).__name__}: {value!r}")


def normalize_shape(shape, what: str = "layout") -> list:
    """Validate a shape: positive ints (kept as int) or symbolic integer PrimExprs."""
    if isinstance(shape, (int, np.integer)):
        shape = [shape]
    out = []
    for s in shape:
        if isinstance(s, tvm.ir.Expr) and type(s).__name__ == "IntImm":
            s = int(s.value)
        if isinstance(s, (bool, np.bool_, float)) or not isinstance(s, (int, np.integer, tvm.ir.Expr)):
            raise LayoutError(f"{what} extent must be a positive integer or an integer PrimExpr, got {s!r}")
        if isinstance(s, (int, np.integer)):
            if s < 1:
                raise LayoutError(f"{what} extent must be positive, got {s}")
            s = int(s)
        out.append(s)
    return out


def shape_vars(shape: Sequence) -> set:
    """Free variables of symbolic extents: expressions of a symbolic layout may use them (``_i * n + _j``)."""
    import tvm_ffi
    found: list = []
    for s in shape:
        if isinstance(s, tvm.ir.Expr):
            tvm_ffi.structural_walk(s, (tvm.ir.Var, found.append))
    return set(found)


def is_static(shape: Sequence) -> bool:
    return all(isinstance(s, int) for s in shape)


def shape_size(shape: Sequence):
    out = 1
    for s in shape:
        out = out * s
    return out


def make_analyzer(variables: Sequence, shape: Sequence) -> sym.Analyzer:
    """Analyzer with each variable bound to [0, extent) and every symbolic extent's variable known >= 1."""
    ana = sym.Analyzer()
    for var in sorted(shape_vars(shape), key=lambda v: v.name):
        ana.update(var, sym.ConstIntBound(1, sym.ConstIntBound.POS_INF), override=True)
    for v, s in zip(variables, shape):
        ana.bind(v, Range(0, s))
    return ana


def simplify(exprs: Sequence, variables: Sequence, shape: Sequence) -> list:
    ana = make_analyzer(variables, shape)
    return [ana.simplify(e) for e in exprs]


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


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
        import tvm_ffi
        bad = []
        allowed = list(allowed)

        def check(v):
            if not any(v.same_as(a) for a in allowed):
                bad.append(v.name)
        for e in exprs:
            tvm_ffi.structural_walk(e, (tvm.ir.Var, check))
        if bad:
            names = ", ".join(sorted(set(bad)))
            raise LayoutError(f"layout over {_fmt_shape(self._input_shape)} uses variables that are not its "
                              f"inputs: {names} (inputs are {', '.join(v.name for v in self.forward_vars)})")

    # ----------------------------------------------------------------- basic fields
    @property
    def input_shape(self) -> list:
        return list(self._input_shape)

    @property
    def forward_index(self) -> list:
        return list(self._forward_index)

    @property
    def forward_vars(self) -> list:
        return _PLACEHOLDERS[: len(self._input_shape)]

    @property
    def input_dim(self) -> int:
        return len(self._input_shape)

    @property
    def output_dim(self) -> int:
        return len(self._forward_index)

    @property
    def is_static(self) -> bool:
        return is_static(self._input_shape)

    @property
    def size(self):
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
        shape = self.output_shape
        out = tirx.const(0, "int32")
        for e, s in zip(self._forward_index, shape):
            out = out * s + e
        return simplify([out], self.forward_vars, self._input_shape)[0]

    def _linear_table(self) -> np.ndarray:
        tab = self.table()
        out = np.zeros(tab.shape[:-1], dtype=np.int64)
        for k, s in enumerate(self.output_shape):
            out = out * s + tab[..., k]
        return out

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
        return tuple(str(e) for e in self._forward_index)

    @cached_property
    def key(self) -> tuple:
        """Structural identity (same key => same mapping); used to memoise work on equal layouts."""
        return (self.kind, tuple(str(s) for s in self._input_shape), self._index_strs)

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
        out_vars = _PLACEHOLDERS[: self.output_dim]
        res = _detect_bijective(self._forward_index, self.forward_vars, self._input_shape)
        if res is not None and "_output_shape" not in self.__dict__:
            # a proven bijection's outputs are iter sums whose ranges are exact: no enumeration needed
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

    def _verify_inverse(self, inv: "Layout", exact: bool) -> bool:
        """Enumeration check inv(fwd(x)) == x where the domain is small enough; trusted otherwise."""
        if not self._enumerable(1 << 18):
            return True
        tab = self.table().reshape(-1, self.output_dim)
        env = {v: tab[:, k] for k, v in enumerate(inv.forward_vars)}
        back = np.stack([np.broadcast_to(evaluate(e, env), tab.shape[:1]) for e in inv._forward_index], axis=1)
        coords = np.stack(np.unravel_index(np.arange(tab.shape[0]), tuple(self._input_shape)), axis=1)
        return bool((back == coords).all())

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


def _detect(exprs, variables, shape, level: str):
    dom = {v: Range(0, s) for v, s in zip(variables, shape)}
    try:
        res = sym.detect_iter_map(list(exprs), dom, check_level=level, simplify_trivial_iterators=False)
    except Exception:
        return None
    if len(res.errors) or not len(res.indices):
        return None
    return res


def _iter_sum_extents(indices, variables, shape) -> list | None:
    """max+1 of each detected iter sum (exact for iter maps): base plus scale * (extent - 1) of every split
    with a positive scale. A negative scale (``31 - _i``) lowers the minimum instead; None unless every
    minimum is provably 0 (the output box starts at 0), so the caller falls back to enumeration."""
    out = []
    ana = make_analyzer(variables, shape)
    for idx in indices:
        if not isinstance(idx, sym.IterSumExpr):
            return None
        top, bottom = idx.base, idx.base
        for split in idx.args:
            span = split.scale * (split.extent - 1)
            if type(split.scale).__name__ == "IntImm" and int(split.scale.value) < 0:
                bottom = bottom + span
            else:
                top = top + span
        bottom = ana.simplify(bottom)
        if type(bottom).__name__ != "IntImm" or int(bottom.value) != 0:
            return None
        top = ana.simplify(top + 1)
        out.append(int(top.value) if type(top).__name__ == "IntImm" else top)
    return out


def _detect_bijective(exprs, variables, shape):
    return _detect(exprs, variables, shape, "bijective")


def _lookup_inverse(inv, variables) -> list:
    found = {}
    for k, v in inv.items():
        found[k.name] = v
    return [found.get(v.name, tirx.const(0, "int32")) for v in variables]


def _prove_injective_symbolically(exprs, variables, shape) -> bool:
    twins = [tirx.Var(v.name + "_twin", "int32") for v in variables]
    ana = make_analyzer(list(variables) + twins, list(shape) + list(shape))
    same = None
    for e in exprs:
        eq = tirx.EQ(e, substitute(e, dict(zip(variables, twins))))
        same = eq if same is None else tirx.And(same, eq)
    goal = None
    for v, t in zip(variables, twins):
        eq = tirx.EQ(v, t)
        goal = eq if goal is None else tirx.And(goal, eq)
    try:
        with ana.constraint_scope(same):
            return bool(ana.can_prove(goal))
    except Exception:
        return False


def _bound_extent(ana, e, input_shape, k):
    """max+1 of ``e`` by analyzer bounds (TileLang's rule, for symbolic domains)."""
    try:
        iset = ana.int_set(e + 1)
        hi = iset.max_value
        if type(hi).__name__ == "IntImm" or isinstance(hi, tvm.ir.Expr):
            if "inf" not in str(hi):
                return int(hi.value) if type(hi).__name__ == "IntImm" else ana.simplify(hi)
    except Exception:
        pass
    bound = ana.const_int_bound(e)
    if bound.min_value >= 0 and bound.max_value < (1 << 62):
        return int(bound.max_value) + 1
    return input_shape[k] if k < len(input_shape) else 1


def _stride_inverse(layout: Layout) -> Layout | None:
    """Invert an injective layout output by output, each output solving for inputs no earlier one fixed:

    - ``base + sum(c_k * x_k)`` with strides that leave gaps (``_j * 7 + _i``, ``_i``: 6) or run backwards
      (``_j * 4 + 3 - _i``), which TVM's iter maps take neither: sorted by |stride|, each stride must exceed
      the span of the smaller ones, and ``x_k = (u % c_{k+1}) // c_k``;
    - ``(x + base) % M`` with ``x``'s extent at most M (a wrapped thread map, ``(_i * 32 + _rep) % 100``
      once ``_i`` is known): ``x = (y - base) % M``.

    ``base`` may use inputs solved before. Cells no input maps to come out of the input box (an off-stride
    or inconsistent cell gives coordinate -1), so range guards alone exclude them; the result is checked by
    enumeration over the whole output box."""
    if not layout.is_static:
        return None
    variables, shape = list(layout.forward_vars), [int(s) for s in layout.input_shape]
    out_vars = _PLACEHOLDERS[: layout.output_dim]
    back: list = [None] * len(variables)
    box = make_analyzer(out_vars, [int(s) for s in layout.output_shape])
    pending = _fuse_div_mod(list(zip(out_vars, layout.forward_index)), make_analyzer(variables, shape), box)
    while pending:
        progress = False
        for item in list(pending):
            solved = _solve_output(item[0], item[1], variables, shape, back, box)
            if solved is None:
                continue
            pending.remove(item)
            progress = True
            for k, x in solved.items():
                back[k] = x
        if not progress:
            return None
    for k, s in enumerate(shape):
        if back[k] is None:
            if s != 1:
                return None
            back[k] = tirx.const(0, "int32")
    return _checked_inverse(layout, back)


def _checked_inverse(layout: Layout, back: list) -> Layout | None:
    """``back`` (input coordinates in the output placeholders) as the inverse of ``layout`` when, at every
    cell of the output box, it gives either a point outside the input box or the point that maps there."""
    shape = [int(s) for s in layout.input_shape]
    out_shape = [int(s) for s in layout.output_shape]
    inv = Layout.from_exprs(out_shape, back)
    if shape_size(out_shape) > (1 << 20):
        return inv
    cells = np.stack(np.unravel_index(np.arange(shape_size(out_shape)), tuple(out_shape)), axis=1)
    env = {v: cells[:, k] for k, v in enumerate(inv.forward_vars)}
    coords = np.stack([np.broadcast_to(evaluate(x, env), cells.shape[:1]) for x in back], axis=1)
    inside = ((coords >= 0) & (coords < np.asarray(shape))).all(axis=1)
    table = np.asarray(layout.table()).reshape(-1, layout.output_dim)
    flat_in = np.ravel_multi_index(tuple(coords[inside].T), tuple(shape))
    if inside.sum() != layout.size or not (table[flat_in] == cells[inside]).all():
        return None
    return inv


def _digit_inverse(layout: Layout) -> Layout | None:
    """Like ``_stride_inverse`` over the digits ``(x // lower) % extent`` the outputs use instead of whole
    inputs (``[_i // 32, _i % 32 * 3 + _j]``): each output solves its digits by strides, then every input
    is rebuilt from its digits, which must tile it (lower factors 1, e0, e0*e1, ...). A digit out of its
    range makes its input -1, so range guards still exclude every cell no point maps to."""
    if not layout.is_static:
        return None
    variables, shape = list(layout.forward_vars), [int(s) for s in layout.input_shape]
    dom = {v: Range(0, s) for v, s in zip(variables, shape)}
    ana = make_analyzer(variables, shape)
    box = make_analyzer(_PLACEHOLDERS[: layout.output_dim], [int(s) for s in layout.output_shape])
    outputs = _fuse_div_mod(list(zip(_PLACEHOLDERS[: layout.output_dim], layout.forward_index)), ana, box)
    extents: dict = {}
    digit_of: dict = {}
    for y, e in outputs:
        try:
            norm = sym.normalize_to_iter_sum(e, dom)
        except Exception:
            return None
        if type(norm.base).__name__ != "IntImm":
            return None
        terms = []
        for split in norm.args:
            src = split.source.source
            ks = [k for k, v in enumerate(variables) if isinstance(src, tvm.ir.Var) and src.same_as(v)]
            if not ks or any(type(x).__name__ != "IntImm" for x in (split.lower_factor, split.extent, split.scale)):
                return None
            key = (ks[0], int(split.lower_factor))
            if key in extents:
                return None                      # one digit in two places: not this shape of map
            extents[key] = int(split.extent)
            terms.append((int(split.scale), key))
        solved = _solve_strides(y, int(norm.base.value), terms, extents)
        if solved is None:
            return None
        digit_of.update(solved)
    back = []
    for k, s in enumerate(shape):
        pieces = sorted((lower, key) for key in extents if key[0] == k for lower in [key[1]])
        if not pieces:
            if s != 1:
                return None
            back.append(tirx.const(0, "int32"))
            continue
        value, expected, bad = tirx.const(0, "int32"), 1, None
        for n, (lower, key) in enumerate(pieces):
            if lower != expected:
                return None                      # digits leave part of the input unused: not a bijection
            d = digit_of[key]
            value = value + (d * lower if lower > 1 else d)
            expected = lower * extents[key]
            if n + 1 < len(pieces):
                out = tirx.Or(d < 0, d >= extents[key])
                bad = out if bad is None else tirx.Or(bad, out)
        if expected < s:
            return None
        back.append(tirx.Select(bad, tirx.const(-1, "int32"), value) if bad is not None else value)
    return _checked_inverse(layout, back)


def _solve_strides(y, base: int, terms: list, extents: dict) -> dict | None:
    """{unknown: expression of y} for ``y = base + sum(c * x)`` over unknowns with the given extents, when
    sorted by |c| each stride exceeds the span of the smaller ones (see ``_stride_inverse``)."""
    ordered = []
    for c, key in terms:
        if c == 0:
            continue
        if c < 0:
            if not isinstance(base, int):
                return None
            base += c * (extents[key] - 1)
        ordered.append((abs(c), key, c < 0))
    ordered.sort(key=lambda t: t[0])
    span = 0
    for c, key, _ in ordered:
        if c <= span:
            return None
        span += c * (extents[key] - 1)
    u = y - base if not isinstance(base, int) or base else y
    out = {}
    for n, (c, key, flipped) in enumerate(ordered):
        top = tirx.floormod(u, ordered[n + 1][0]) if n + 1 < len(ordered) else u
        x = tirx.floordiv(top, c) if c > 1 else top
        if n == 0 and c > 1:      # off-stride cells land out of range
            x = tirx.Select(tirx.NE(tirx.floormod(u, c), 0), tirx.const(-1 if not flipped else extents[key], "int32"), x)
        out[key] = extents[key] - 1 - x if flipped else x
    return out


def _mod(a, m: int, box):
    """``a % m`` as a chain of Selects over the periods ``a`` can span (``box`` bounds the output variables),
    floormod when unbounded or wide. apache-tvm 0.27's iter-map simplification, which FlattenBuffer applies
    to every buffer index on the way to CUDA, rewrites sums of a rotation wrongly (``((y + 28) % 128 + 100) //
    128`` becomes ``(y + 100) % 128 // 128``, always 0, for y in [0, 128)); it leaves Selects alone."""
    bound = box.const_int_bound(a)
    lo, hi = bound.min_value, bound.max_value
    if lo <= sym.ConstIntBound.NEG_INF or hi >= sym.ConstIntBound.POS_INF or hi // m - lo // m > 3:
        return tirx.floormod(a, m)
    out = None
    for k in range(lo // m, hi // m + 1):
        term = a - k * m if k else a
        out = term if out is None else tirx.Select(a >= k * m, term, out)
    return out


def _fuse_div_mod(items: list, ana, box) -> list:
    """Rejoin an output pair ``F // M`` and ``(F + c) % M`` (a flat index split into slot and thread, the
    thread possibly rotated) into one output ``F = y_div * M + (y_mod - c) % M``."""
    out, used = [], set()
    for a, (ya, ea) in enumerate(items):
        if a in used:
            continue
        if isinstance(ea, tirx.FloorDiv) and type(ea.b).__name__ == "IntImm":
            m = int(ea.b.value)
            for b, (yb, eb) in enumerate(items):
                if b in used or b == a or not isinstance(eb, tirx.FloorMod) or type(eb.b).__name__ != "IntImm" \
                        or int(eb.b.value) != m:
                    continue
                c = ana.simplify(eb.a - ea.a)
                if type(c).__name__ != "IntImm":
                    continue
                low = _mod(yb - int(c.value), m, box) if int(c.value) else yb
                out.append((ya * m + low, ea.a))
                used.update((a, b))
                break
        if a not in used:
            out.append((ya, ea))
    return out


def _solve_output(y, expr, variables: list, shape: list, back: list, box) -> dict | None:
    """{input index: expression in the outputs} for the inputs ``y = expr`` determines (see
    ``_stride_inverse``); {} when it uses only solved inputs; None when it cannot be solved yet."""
    known = {v: back[k] if back[k] is not None else tirx.const(0, "int32")
             for k, v in enumerate(variables) if back[k] is not None or shape[k] == 1}
    unknown = [k for k in range(len(variables)) if back[k] is None and shape[k] > 1]
    wrap = None
    if isinstance(expr, tirx.FloorMod) and type(expr.b).__name__ == "IntImm":
        wrap, expr = int(expr.b.value), expr.a
    coeffs = sym.detect_linear_equation(expr, [variables[k] for k in unknown])
    if not len(coeffs) or any(type(c).__name__ != "IntImm" for c in coeffs[:-1]):
        return None
    base = substitute(coeffs[-1], known) if known else coeffs[-1]
    if _mentions_unsolved(base, variables, back, shape):
        return None
    terms = [(int(c.value), k) for c, k in zip(coeffs[:-1], unknown) if int(c.value) != 0]
    if not terms:
        # a pure constraint on solved inputs: fold "y differs from what they give" into one solved input so
        # that such cells land out of range (a flat slot map plus its thread: ``[_i, (3 - _i) % 48]``)
        solved = [k for k in range(len(variables)) if back[k] is not None]
        if not solved:
            return None
        value = _mod(base, wrap, box) if wrap is not None else base
        k = solved[0]
        return {k: tirx.Select(tirx.NE(y, value), tirx.const(-1, "int32"), back[k])}
    if wrap is not None:
        # y = (c * x + base) % M: with g = gcd(c, M), x = ((y - base) / g * (c / g)^-1) % (M / g), defined when
        # g divides y - base (otherwise folded out of range); injective only when x's extent <= M / g
        if len(terms) != 1:
            return None
        c, k = terms[0]
        g = math.gcd(c, wrap)
        m = wrap // g
        if shape[k] > m:
            return None
        diff = y - base
        unit = pow((c // g) % m, -1, m) if m > 1 else 0
        x = _mod(tirx.floordiv(diff, g) * unit if g > 1 else diff * unit, m, box) if m > 1 else \
            tirx.const(0, "int32")
        if g > 1:
            x = tirx.Select(tirx.NE(tirx.floormod(diff, g), 0), tirx.const(-1, "int32"), x)
        return {k: x}
    ext = {k: shape[k] for _, k in terms}
    if type(base).__name__ == "IntImm":
        base = int(base.value)
    return _solve_strides(y, base, terms, ext)


def _mentions_unsolved(expr, variables: list, back: list, shape: list) -> bool:
    import tvm_ffi
    todo = [v for k, v in enumerate(variables) if back[k] is None and shape[k] > 1]
    hits = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Var, lambda v: hits.append(1) if any(v.same_as(w) for w in todo) else None))
    return bool(hits)


def _gf2_inverse(layout: Layout) -> Layout | None:
    """Invert a bijection whose flat output bits are XORs of flat input bits (swizzles) by GF(2) algebra."""
    in_shape, out_shape = layout.input_shape, layout.output_shape
    n = layout.size
    if any(s & (s - 1) for s in in_shape + out_shape) or shape_size(out_shape) != n:
        return None
    bits = n.bit_length() - 1
    y = layout._linear_table().reshape(-1)
    x = np.arange(n, dtype=np.int64)
    if y[0] != 0:
        return None
    # column b of the forward matrix = image of the unit input 1<<b; linearity checked on every point
    cols = [int(y[1 << b]) for b in range(bits)]
    pred = np.zeros(n, dtype=np.int64)
    for b, c in enumerate(cols):
        pred ^= np.where((x >> b) & 1, c, 0)
    if not np.array_equal(pred, y):
        return None
    inverse_cols = _gf2_invert_columns(cols, bits)
    if inverse_cols is None:
        return None
    # build: out flat -> in flat as XOR of shifted bits, then split into input coordinates
    out_vars = _PLACEHOLDERS[: len(out_shape)]
    flat = tirx.const(0, "int32")
    for v, s in zip(out_vars, out_shape):
        flat = flat * s + v
    acc = None
    for b, col in enumerate(inverse_cols):
        term = tirx.floormod(tirx.floordiv(flat, 1 << b), 2) * col
        acc = term if acc is None else tirx.bitwise_xor(acc, term)
    acc = tirx.const(0, "int32") if acc is None else acc
    coords, rest = [], acc
    for s in reversed(in_shape):
        coords.append(tirx.floormod(rest, s))
        rest = tirx.floordiv(rest, s)
    inv = Layout.from_exprs(out_shape, list(reversed(coords)))
    return inv if layout._verify_inverse(inv, True) else None


def _gf2_invert_columns(cols: list, bits: int) -> list | None:
    """Columns of the inverse of the GF(2) matrix whose b-th column is ``cols[b]``."""
    # rows of augmented matrix [A | I]: row r holds bit r of every column
    rows = []
    for r in range(bits):
        a = sum(((cols[c] >> r) & 1) << c for c in range(bits))
        rows.append([a, 1 << r])
    for c in range(bits):
        pivot = next((r for r in range(c, bits) if (rows[r][0] >> c) & 1), None)
        if pivot is None:
            return None
        rows[c], rows[pivot] = rows[pivot], rows[c]
        for r in range(bits):
            if r != c and (rows[r][0] >> c) & 1:
                rows[r] = [rows[r][0] ^ rows[c][0], rows[r][1] ^ rows[c][1]]
    # now A^-1 row c = rows[c][1]; inverse column b = sum over c of bit b of row c
    return [sum(((rows[c][1] >> b) & 1) << c for c in range(bits)) for b in range(bits)]


def _reshape(layout: Layout, shape: list, num: int, den: int) -> Layout:
    from .fragment import Fragment
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
    is_frag = isinstance(layout, Fragment)
    thread = layout.forward_thread if is_frag else None

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
    if is_frag:
        vmap_t = old_coords(flat if num == den else (tirx.floordiv(flat, num // den) if num > den else flat * (den // num)))
        new_thread = substitute(thread, vmap_t)
        out = Fragment.from_exprs(shape, new_thread, exprs, layout.replicate_size)
        return out.bind_thread_range(*layout.thread_range) if layout.thread_range is not None else out
    return Layout.from_exprs(shape, exprs)


def _check_widen(layout: Layout, f: int) -> None:
    """Widening needs every aligned group of f old elements in one slot run (and one thread)."""
    from .fragment import Fragment
    layout._require_enumerable("cannot prove the widening reshape")
    tab = layout.table().reshape(-1, layout.output_dim)
    if tab.shape[0] % f:
        raise LayoutError(f"cannot widen {layout!r} by {f}: {tab.shape[0]} elements are not a multiple of {f}")
    groups = tab.reshape(-1, f, layout.output_dim)
    ok = (groups[:, :, :-1] == groups[:, :1, :-1]).all()
    ok = ok and (groups[:, :, -1] == groups[:, :1, -1] + np.arange(f)).all() and (groups[:, 0, -1] % f == 0).all()
    if isinstance(layout, Fragment):
        th = layout.thread_table().reshape(-1, f, layout.replicate_size)
        ok = ok and (th == th[:, :1, :]).all()
    if not ok:
        raise LayoutError(f"cannot reshape {layout!r} to {f}x wider elements: the layout interleaves storage below "
                          f"the new element width (groups of {f} consecutive elements are not contiguous in one slot run)")


def _identifiers(text: str) -> list:
    import ast
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise LayoutError(f"cannot parse extent {text[:80]!r}: {getattr(err, 'msg', err)}") from None
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})


def layout_from_dict(d: dict, variables: dict | None = None):
    """Inverse of ``to_dict``: rebuild a Layout or Fragment from its snapshot form.

    Symbolic extents ("n") become fresh int32 Vars unless ``variables`` ({name: Var}) supplies them, so a
    caller who owns the shape variables gets back a layout over the very same ones.
    """
    from .exprparse import parse_expr
    from .fragment import Fragment
    if not isinstance(d, dict) or "kind" not in d:
        raise LayoutError(f"not a layout dict: {_short(d)}")
    kind = d["kind"]
    if kind not in ("Layout", "Fragment"):
        raise LayoutError(f"unknown layout kind {_short(kind)} (expected 'Layout' or 'Fragment')")
    required = ["input_shape", "forward_index"] + (["forward_thread"] if kind == "Fragment" else [])
    missing = [k for k in required if k not in d]
    if missing:
        raise LayoutError(f"layout dict of kind {kind!r} lacks {', '.join(missing)}: {_short(d)}")
    raw_shape, raw_index = d["input_shape"], d["forward_index"]
    if not isinstance(raw_shape, (list, tuple)) or not raw_shape:
        raise LayoutError(f"layout dict: input_shape must be a non-empty list of extents, got {_short(raw_shape)}")
    for s in raw_shape:
        if isinstance(s, bool) or not isinstance(s, (int, str)):
            raise LayoutError(f"layout dict: an extent must be a positive int or an expression string, got {_short(s)}")
    if not isinstance(raw_index, (list, tuple)) or not all(isinstance(e, str) for e in raw_index):
        raise LayoutError(f"layout dict: forward_index must be a list of expression strings, got {_short(raw_index)}")
    names = dict(variables or {})
    for s in raw_shape:  # symbolic extents name their own variables; reuse the caller's if given
        if isinstance(s, str):
            for name in _identifiers(s):
                if name in _BY_NAME:
                    raise LayoutError(f"layout dict: extent {s!r} uses the placeholder {name!r}")
                if name not in names:
                    names[name] = tirx.Var(name, "int32")
    scope = {**names, **_BY_NAME}
    shape = [s if isinstance(s, int) else parse_expr(s, names) for s in raw_shape]
    exprs = [parse_expr(e, scope) for e in raw_index]
    if kind == "Layout":
        return _checked_outputs(Layout.from_exprs(shape, exprs))
    thread = d["forward_thread"]
    if not isinstance(thread, str):
        raise LayoutError(f"layout dict: forward_thread must be an expression string, got {_short(thread)}")
    replicate = d.get("replicate", 1)
    if isinstance(replicate, bool) or not isinstance(replicate, int):
        raise LayoutError(f"layout dict: replicate must be a positive int, got {_short(replicate)}")
    frag = Fragment.from_exprs(shape, parse_expr(thread, scope), exprs, replicate)
    rng = d.get("thread_range")
    if rng is not None:
        if not isinstance(rng, (list, tuple)) or len(rng) != 2:
            raise LayoutError(f"layout dict: thread_range must be [min, extent], got {_short(rng)}")
        frag = frag.bind_thread_range(*rng)
    return _checked_outputs(frag)


def _checked_outputs(layout):
    """Compute the output shape now (it raises for negative outputs), so a bad dict fails where it is read."""
    if layout.is_static:
        layout.output_shape
    return layout


def _short(value, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
