"""Fragment: a Layout whose elements also live in threads (TileLang's ``tl::Fragment``).

Element ``coords`` with replica ``r`` in ``[0, replicate)`` sits in thread ``forward_thread(coords, r)`` at
per-thread slot ``forward_index(coords)``. The slot never depends on the replica.

Variable-order gotcha: TileLang's ``GetForwardVars()`` puts ``_rep`` *first* when replicate > 1, while its
canonical inverse packs ``rep`` as the *last* input. Here nothing is ever zipped by position: the thread
function receives the replica as a keyword-free trailing argument only when replicate > 1, ``thread_of``
takes ``rep=`` by name, tables put the replica on the last axis, and ``inverse()`` always answers
``(slot..., thread) -> (coords..., rep)`` with ``rep`` last.

Size (over 600 lines): the Fragment class and its methods only, one job (holders, containment, thread
tables and their caches all read one another's state).
"""
from __future__ import annotations
from .expr import mentions as _uses

import functools
import math
import weakref
from functools import cached_property
from typing import Callable, Sequence

import numpy as np
from tvm import sym, tirx
from tvm.ir import Range

from .errors import EvaluationError, LayoutError
from .evaluate import evaluate, grid_env
from .expr import (ExprKey, _as_expr, _fmt_shape, call_user_fn, expr_text, make_analyzer, normalize_shape, placeholder,
                   rep_placeholder, shape_size, shape_vars, simplifier, substitute)
from .inverse import _bound_extent
from . import layout as layout_module
from .layout import Layout, _exprs_equal, _jsonable, _shapes_equal

__all__ = ["Fragment", "fully_replicated", "infer_fragment_index", "clear_caches"]

#: containment answers by (container key, contained key): keys identify mappings, so answers never go stale
_CONTAINS_MEMO: dict = {}
_CONTAINS_MEMO_LIMIT = 1 << 14
_MISS = object()

#: static fragments by key, while something still holds them: an equal fragment built again (every attempt of
#: the free level rebuilds the same candidates) is the same object, so its tables, holders, injectivity and
#: thread extent are computed once. Weak values: the table lives only as long as the inference using it.
_INTERNED: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def _interned(frag: "Fragment") -> "Fragment":
    """The live fragment equal to ``frag`` (same key), or ``frag`` itself; symbolic shapes are not shared (the
    key prints a shape variable, and two variables may share a name)."""
    if not all(isinstance(s, int) for s in frag._input_shape):
        return frag
    key = frag.key
    hit = _INTERNED.get(key)
    if hit is not None:
        # what a constructor proved about ``frag`` holds for every fragment with its key: an equal fragment
        # built earlier by a path that proves nothing (a parsed layout, a derived one) learns it
        for fact in Fragment._CONSTRUCTION_FACTS:
            if fact in frag.__dict__:
                hit.__dict__.setdefault(fact, frag.__dict__[fact])
        return hit
    _INTERNED[key] = frag
    return frag


def _check_replicate(replicate, what: str = "fragment") -> int:
    if isinstance(replicate, bool) or not isinstance(replicate, (int, np.integer)):
        raise LayoutError(f"{what}: replicate must be a positive int, got {replicate!r}")
    if replicate < 1:
        raise LayoutError(f"{what}: replicate must be >= 1, got {replicate}")
    if replicate > MAX_REPLICATE:
        raise LayoutError(f"{what}: replicate {replicate} is more than {MAX_REPLICATE}; a replica is a thread holding a "
                          f"copy, and no GPU block has that many threads")
    return int(replicate)


#: largest replication accepted (GPU blocks have at most 1,024 threads; reductions multiply replicas by extents)
MAX_REPLICATE = 1 << 20


#: largest (elements x threads) bitmap ``same_holders`` builds (4 MiB of booleans)
_BITMAP_CELLS = 1 << 22


def _holder_bitmap(rows: np.ndarray, width: int) -> np.ndarray:
    """(elements, width) booleans: which threads hold each element, given each element's holder row."""
    have = np.zeros((rows.shape[0], width), dtype=bool)
    have[np.arange(rows.shape[0])[:, None], rows] = True
    return have


class Fragment(Layout):
    """Per-thread register layout: coords (+ replica) -> (thread, slot...)."""

    kind = "Fragment"

    def __init__(self, shape, forward_thread_fn: Callable, forward_index_fn: Callable | None = None,
                 replicate: int = 1):
        shape = normalize_shape(shape, "fragment")
        replicate = _check_replicate(replicate, f"fragment over {_fmt_shape(shape)}")
        variables = [placeholder(k) for k in range(len(shape))]
        if not callable(forward_thread_fn):
            raise LayoutError("Fragment needs a callable forward_thread_fn(*coords[, rep])")
        what = f"fragment over {_fmt_shape(shape)} with replicate {replicate}"
        thread_args = variables + [rep_placeholder()] if replicate > 1 else variables
        thread = call_user_fn(forward_thread_fn, thread_args, what, "forward_thread_fn")
        index = None
        if forward_index_fn is not None:
            index = call_user_fn(forward_index_fn, variables, what, "forward_index_fn")
            if not isinstance(index, (list, tuple)):
                index = [index]
        self._init_fragment(shape, _as_expr(thread), index, replicate)

    @classmethod
    def from_exprs(cls, shape, thread, index=None, replicate: int = 1) -> "Fragment":
        """Build from expressions over the placeholders (``_rep`` in ``thread``); index None -> inferred."""
        obj = cls.__new__(cls)
        obj._init_fragment(normalize_shape(shape, "fragment"), _as_expr(thread),
                           None if index is None else list(index), _check_replicate(replicate))
        return _interned(obj) if cls is Fragment else obj

    def _init_fragment(self, shape, thread, index, replicate) -> None:
        self._replicate = replicate
        self._thread_range = None
        variables = [placeholder(k) for k in range(len(shape))]
        rep = rep_placeholder()
        ana = simplifier(variables + [rep], list(shape) + [replicate])
        self._input_shape = shape
        allowed = set(variables) | {rep} | shape_vars(shape)
        self._check_free_vars([thread], allowed=allowed)
        self._forward_thread = ana.simplify(thread)
        if index is None:
            index = infer_fragment_index(self._forward_thread, shape)
        index = [_as_expr(e) for e in index]
        self._check_free_vars(index, allowed=allowed)
        index = [ana.simplify(e) for e in index]
        if any(_uses(e, rep) for e in index):
            raise LayoutError(f"fragment over {_fmt_shape(shape)}: forward_index {[str(e) for e in index]} depends on "
                              f"the replica _rep; a replica changes the thread, never the slot")
        self._forward_index = index

    # ----------------------------------------------------------------- fields
    @property
    def forward_thread(self):
        """The thread holding each element, a PrimExpr over ``forward_vars`` (and ``_rep`` when replicated),
        counted from the start of ``thread_range``."""
        return self._forward_thread

    @property
    def replicate_size(self) -> int:
        """How many threads hold a copy of each element (1 = not replicated)."""
        return self._replicate

    @property
    def thread_range(self):
        """(min, extent) of the threads this fragment is bound to, or None when unbound."""
        return self._thread_range

    @cached_property
    def thread_extent(self) -> int:
        """max+1 of the thread map over coords and replicas (independent of ``thread_range``)."""
        if self._enumerable(1 << 22) and self.size * self._replicate <= 1 << 22:
            if "_thread_table" in self.__dict__:
                return int(self._thread_table.max()) + 1
            # the thread map evaluated over the axes it depends on only: the same values as the whole table
            # (a replicated 2x2560 fragment over 256 threads would tabulate 1.3M cells for one maximum)
            env = grid_env(self.forward_vars + [rep_placeholder()], self._input_shape + [self._replicate])
            return int(np.asarray(evaluate(self._forward_thread, env)).max()) + 1
        ana = make_analyzer(self.forward_vars + [rep_placeholder()], self._input_shape + [self._replicate])
        return _bound_extent(ana, self._forward_thread, [], 0)

    #: cached values that depend on the thread range (a copy rebound to another range recomputes them)
    _RANGE_DEPENDENT = frozenset({"_holders"})
    #: public cached values that do not (a rebound copy keeps them)
    _RANGE_FREE = frozenset({"thread_extent", "linearized_forward_index"})

    def _copy(self) -> "Fragment":
        obj = Fragment.__new__(Fragment)
        obj.__dict__.update({k: v for k, v in self.__dict__.items()
                             if (k.startswith("_") and not k.startswith("__") and k not in self._RANGE_DEPENDENT)
                             or k in self._RANGE_FREE})
        return obj

    #: what ``_known_by_construction`` records (an interned equal fragment is given them too, see ``_interned``)
    _CONSTRUCTION_FACTS = ("thread_extent", "_output_shape", "_injectivity_error", "_closed_form_inverse",
                           "_cell_digits")

    def _known_by_construction(self, thread_extent: int, slots: int, inverse: bool = False,
                               cell_digits=None) -> "Fragment":
        """Record what a constructor proved about the fragment it built: an injective map of the (element,
        replica) pairs into threads [0, thread_extent) x slots [0, slots) that reaches the last thread and the
        last slot. Inference asks every loop and fragment for its injectivity, thread extent and slot count,
        and learning them from the expressions (enumeration or a symbolic proof) is a large share of a small
        kernel's time; a constructor that composes mixed-radix digits knows them exactly. Only facts not
        already known are set (an interned equal fragment may have computed them); static shapes only. Tests
        compare every constructor's facts with enumeration. ``inverse``: the constructor's layouts also have
        the closed-form inverse lowering walks registers with (``inverse_with_info(allow_padding=True)``
        succeeds); tests invert every such layout over a grid of its parameters. ``cell_digits``: the same
        bijection read backwards, when every cell is used (threads x slots == elements x replicas), as mixed-radix
        digits of the cell ``thread * slots + slot``, lowest first: [(extent, stride), ...] such that the cell's
        element and replica are ``n = sum(((cell // lower_k) % extent_k) * stride_k)`` with lower_k the product
        of the extents before k, and ``n = row-major(coords) * replicate + replica`` (``cell_digits()``)."""
        size = self.size
        if not isinstance(size, int):
            return self
        if size * self._replicate > thread_extent * slots:
            raise LayoutError(f"{self!r}: {size * self._replicate} (element, replica) pairs cannot map one-to-one "
                              f"into {thread_extent} threads x {slots} slots")
        facts = self.__dict__
        facts.setdefault("thread_extent", int(thread_extent))
        facts.setdefault("_output_shape", [int(slots)])
        facts.setdefault("_injectivity_error", None)
        if inverse:
            facts["_closed_form_inverse"] = True
        if cell_digits is not None:
            digits = tuple((int(e), int(d)) for e, d in cell_digits if int(e) > 1)
            if math.prod(e for e, _ in digits) != size * self._replicate or size * self._replicate != \
                    thread_extent * slots:
                raise LayoutError(f"{self!r}: cell digits {digits} do not cover {thread_extent} threads x {slots} "
                                  f"slots once")
            facts["_cell_digits"] = digits
        return self

    def cell_digits(self) -> tuple | None:
        """The cell -> (element, replica) digits a constructor recorded (``_known_by_construction``), else None."""
        return self.__dict__.get("_cell_digits")

    def inverse_known_to_exist(self) -> bool:
        """The constructor recorded (``_known_by_construction``) that ``inverse_with_info(allow_padding=True)``
        succeeds, so a caller that only needs to know it does can skip computing it."""
        return self.__dict__.get("_closed_form_inverse", False)

    def bind_thread_range(self, min_thread: int, extent: int) -> "Fragment":
        """Copy bound to threads [min, min+extent); the thread map itself stays 0-based."""
        for name, val in (("min", min_thread), ("extent", extent)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)):
                raise LayoutError(f"thread range {name} must be an int, got {val!r}")
        if min_thread < 0 or extent < 1:
            raise LayoutError(f"invalid thread range ({min_thread}, {extent}) for {self!r}")
        out = self._copy()
        out._thread_range = (int(min_thread), int(extent))
        return _interned(out)

    # ----------------------------------------------------------------- evaluation
    def thread_of(self, *coords, rep: int = 0) -> int:
        """The thread (counted from the range start) holding replica ``rep`` of the element at ``coords``."""
        if len(coords) == 1 and isinstance(coords[0], (list, tuple)):
            coords = tuple(coords[0])
        if len(coords) != self.input_dim:
            raise LayoutError(f"{self!r} takes {self.input_dim} coordinates, got {len(coords)}")
        if not 0 <= rep < self._replicate:
            raise LayoutError(f"replica {rep} out of range [0, {self._replicate}) for {self!r}")
        env = dict(zip(self.forward_vars, (np.int64(c) for c in coords)))
        env[rep_placeholder()] = np.int64(rep)
        return int(evaluate(self._forward_thread, env))

    def thread_table(self) -> np.ndarray:
        """Thread of every (coords..., rep): shape (*input_shape, replicate), read-only."""
        return self._thread_table

    @cached_property
    def _thread_table(self) -> np.ndarray:
        self._require_enumerable("cannot tabulate the fragment's threads", 1 << 22)
        if self.size * self._replicate > 1 << 24:
            raise EvaluationError(f"cannot tabulate the fragment's threads: {self!r} has {self.size * self._replicate} "
                                  f"(element, replica) pairs, more than the enumeration limit {1 << 24}")
        shape = self._input_shape + [self._replicate]
        env = grid_env(self.forward_vars + [rep_placeholder()], shape)
        tab = np.broadcast_to(evaluate(self._forward_thread, env), tuple(shape)).astype(np.int64)
        tab.setflags(write=False)
        return tab

    # ----------------------------------------------------------------- canonical packing and inverse
    def packed(self) -> Layout:
        """(coords..., rep) -> (slot..., thread) as a plain Layout; rep is the trailing input."""
        rep_in = placeholder(self.input_dim)
        thread = substitute(self._forward_thread, {rep_placeholder(): rep_in})
        return Layout.from_exprs(self._input_shape + [self._replicate], self._forward_index + [thread])

    def inverse(self) -> Layout:
        """Canonical inverse (slot..., thread) -> (coords..., rep); rep is always the last output."""
        return self.packed().inverse()

    def inverse_with_info(self, allow_padding: bool = False):
        """(inverse, exact) of the canonical packing ``(coords..., rep) -> (slot..., thread)``; ``exact`` is
        False when some (slot, thread) cells hold no element (padding)."""
        # memoised: inference asks again for every attempt; the packing ignores the thread range, so a copy
        # rebound to another range shares the answer (a refusal is remembered too)
        memo = self.__dict__.setdefault("_inverse_memo", {})
        if allow_padding not in memo:
            try:
                memo[allow_padding] = (True, self.packed().inverse_with_info(allow_padding))
            except LayoutError as err:
                memo[allow_padding] = (False, err)
        ok, value = memo[allow_padding]
        if not ok:
            raise value
        return value

    def is_bijective(self) -> bool:
        """(coords, rep) -> (thread, slots) is a bijection onto [0, T) x slots: a well-formed fragment."""
        packed = self.packed()
        return packed.is_injective() and shape_size(packed.output_shape) == packed.size

    def injectivity_error(self, exprs=None, variables=None, shape=None):
        """``None`` when no two (element, replica) pairs share a (thread, slot) cell, else why they do."""
        if exprs is not None:
            return super().injectivity_error(exprs, variables, shape)
        return self.packed().injectivity_error()

    # ----------------------------------------------------------------- replication
    def _reshaped(self, shape: list, exprs: list, source_coords: dict) -> "Fragment":
        """The reshaped fragment: the thread map follows the elements to their new coordinates."""
        out = Fragment.from_exprs(shape, substitute(self.forward_thread, source_coords), exprs, self.replicate_size)
        return out.bind_thread_range(*self.thread_range) if self.thread_range is not None else out

    def _groups_share_threads(self, f: int) -> bool:
        """Widening by ``f`` needs each aligned group of ``f`` elements held by the same threads."""
        th = self.thread_table().reshape(-1, f, self.replicate_size)
        return bool((th == th[:, :1, :]).all())

    def replicate(self, n: int) -> "Fragment":
        """n times more replicas: replica r lives in thread thread(r % R) + T * (r // R)."""
        n = _check_replicate(n, f"replicate() of {self!r}")
        if n == 1:
            return self
        r = rep_placeholder()
        thread = substitute(self._forward_thread, {r: tirx.floormod(r, self._replicate)}) \
            + self.thread_extent * tirx.floordiv(r, self._replicate)
        return self._rebuilt(thread, self._forward_index, self._replicate * n)

    def dereplicate(self) -> "Fragment":
        """Trade replicas for slots: gcd(R, slots) copies become distinct slots in distinct threads."""
        if self.output_dim != 1:
            raise LayoutError(f"dereplicate needs a single slot output, {self!r} has {self.output_dim}")
        f = math.gcd(self._replicate, int(self.output_shape[0]))
        if f == 1:
            return self
        r, idx = rep_placeholder(), self._forward_index[0]
        thread = substitute(self._forward_thread, {r: r * f + tirx.floormod(idx, f)})
        return self._rebuilt(thread, [tirx.floordiv(idx, f)], self._replicate // f)

    def condense_rep_var(self) -> "Fragment":
        """Drop replica bits the thread map never uses, packing the used ones densely."""
        if self._replicate == 1:
            return self
        r = rep_placeholder()
        dom = {v: Range(0, s) for v, s in zip(self.forward_vars, self._input_shape)}
        dom[r] = Range(0, self._replicate)
        pieces = _used_pieces(self._forward_thread, dom, r)
        if pieces is None:
            return self
        used = sorted(pieces)
        new_extent = shape_size([e for _, e in used]) if used else 1
        if new_extent == self._replicate:
            return self
        # old replica whose used digits equal the new replica's digits and whose unused digits are 0
        old, scale = tirx.const(0, "int32"), 1
        for lower, ext in used:
            old = old + tirx.floormod(tirx.floordiv(r, scale), ext) * lower
            scale *= ext
        return self._rebuilt(substitute(self._forward_thread, {r: old}), self._forward_index, new_extent)

    def _rebuilt(self, thread, index, replicate) -> "Fragment":
        out = Fragment.from_exprs(self._input_shape, thread, index, replicate)
        return out.bind_thread_range(*self._thread_range) if self._thread_range is not None else out

    @property
    def is_fully_replicated(self) -> bool:
        """Every thread holds every element (thread == _rep)."""
        t = self._forward_thread
        return t.same_as(rep_placeholder()) or (isinstance(t, tirx.Var) and t.name == "_rep")

    def repeat(self, repeats, repeat_on_thread: bool = False, lower_dim_first: bool = True) -> "Fragment":
        """Tile each input dim by repeats[d]; the copy id goes to the thread or to the slot."""
        if isinstance(repeats, (int, np.integer)):
            repeats = [repeats]
        repeats = list(repeats)
        if len(repeats) != self.input_dim or any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1
                                                  for x in repeats):
            raise LayoutError(f"repeat needs {self.input_dim} positive ints for {self!r}, got {repeats}")
        if all(x == 1 for x in repeats):
            return self
        if not repeat_on_thread and self.output_dim != 1:
            raise LayoutError(f"repeat on slots needs a single slot output, {self!r} has {self.output_dim}")
        vs = self.forward_vars
        inner = {v: tirx.floormod(v, s) for v, s in zip(vs, self._input_shape)}
        order = list(range(self.input_dim))
        if lower_dim_first:
            order = order[::-1]
        group, scale = tirx.const(0, "int32"), 1
        for d in order:  # the first dim in ``order`` varies fastest
            group = group + tirx.floordiv(vs[d], self._input_shape[d]) * scale
            scale *= repeats[d]
        thread = substitute(self._forward_thread, inner)
        index = [substitute(e, inner) for e in self._forward_index]
        if repeat_on_thread:
            thread = thread + self.thread_extent * group
        else:
            index = [index[0] + self.output_shape[0] * group]
        shape = [s * x for s, x in zip(self._input_shape, repeats)]
        return Fragment.from_exprs(shape, thread, index, self._replicate)

    # ----------------------------------------------------------------- comparison
    @cached_property
    def _thread_str(self) -> str:
        return expr_text(self._forward_thread)

    @cached_property
    def key(self) -> tuple:
        return super().key + (ExprKey([self._forward_thread]), self._replicate, self._thread_range)

    def is_equal(self, other) -> bool:
        """Same slots, same threads for every replica, same replication and thread range."""
        if not isinstance(other, Fragment) or self._replicate != other._replicate:
            return False
        if other is self or other.key == self.key:
            return True
        if self._thread_range is not None and other._thread_range is not None \
                and self._thread_range != other._thread_range:
            return False
        if not self._same_index(other):
            return False
        variables = self.forward_vars + [rep_placeholder()]
        return _exprs_equal([self._forward_thread], [other._forward_thread], variables,
                            self._input_shape + [self._replicate])

    def contains(self, other: "Fragment") -> bool:
        """Does every thread hold (at least) every element ``other`` gives it? (Ownership check.)"""
        return other is self or self._containment_failure(other) is None

    def containment_error(self, other: "Fragment") -> str | None:
        """``None`` when every thread holding an element in ``other`` also holds it here (this fragment may
        have more holders; slots are not compared), else a sentence naming the first element that breaks it."""
        if other is self:
            return None
        failure = self._containment_failure(other)
        if failure is None:
            return None
        if failure == "shape":
            return f"{other!r} and {self!r} have different shapes"
        coord, thread = failure
        return f"element {coord} is held by thread {thread} in {other!r} but not in {self!r}"

    def same_holders(self, other: "Fragment") -> bool:
        """Every element has the same set of holder threads in both (``self.contains(other) and
        other.contains(self)``): (element, thread) bitmaps compared, or for tables too large for them, one
        pass over the two row-sorted holder tables."""
        if other is self:
            return True
        if not _shapes_equal(self._input_shape, other._input_shape):
            return False
        mine, theirs = self._thread_rows(), other._thread_rows()
        width = int(max(mine.max(initial=0), theirs.max(initial=0))) + 1
        if mine.min(initial=0) >= 0 and theirs.min(initial=0) >= 0 and self.size * width <= _BITMAP_CELLS:
            # holder sets as (element, thread) bitmaps: one scatter each, where sorting the rows of a map with
            # many repeated replicas (an uncondensed ``_rep % 1024 // 8``) takes milliseconds
            return bool(np.array_equal(_holder_bitmap(mine, width), _holder_bitmap(theirs, width)))
        mine, theirs = self._holders, other._holders
        keep_mine = np.ones(mine.shape, dtype=bool)
        keep_mine[:, 1:] = mine[:, 1:] != mine[:, :-1]          # first of each run of equal threads in a row
        keep_theirs = np.ones(theirs.shape, dtype=bool)
        keep_theirs[:, 1:] = theirs[:, 1:] != theirs[:, :-1]
        if not np.array_equal(keep_mine.sum(axis=1), keep_theirs.sum(axis=1)):
            return False
        return bool(np.array_equal(mine[keep_mine], theirs[keep_theirs]))

    def _containment_failure(self, other: "Fragment"):
        """None, "shape", or (coordinate, thread) of the first element held in ``other`` but not here; memoised
        by both keys (the sentence is formatted only when asked for: the search mostly wants the yes/no)."""
        key = (self.key, other.key)
        hit = _CONTAINS_MEMO.get(key, _MISS)
        if hit is _MISS:
            hit = self._first_uncontained(other)
            if len(_CONTAINS_MEMO) >= _CONTAINS_MEMO_LIMIT:
                _CONTAINS_MEMO.clear()
            _CONTAINS_MEMO[key] = hit
        return hit

    def holder_table(self) -> np.ndarray:
        """Holder threads of every element, row-major, each row sorted ascending and counted from thread 0 of
        the block (the thread range's start added): shape (size, replicate), read-only, computed once."""
        return self._holders

    @cached_property
    def _holders(self) -> np.ndarray:
        """Holder threads of every element (row-major), each row sorted: shape (size, replicate), read-only."""
        tab = self._thread_rows()
        if tab.shape[1] > 1 and not (tab[:, 1:] >= tab[:, :-1]).all():     # most maps already grow with _rep
            tab = np.sort(tab, axis=1)
        out = np.ascontiguousarray(tab)
        out.setflags(write=False)
        return out

    def _thread_rows(self) -> np.ndarray:
        """Holder threads of every element (row-major, counted from thread 0 of the block), rows unsorted."""
        if "_holders" in self.__dict__:
            return self._holders
        return self.thread_table().reshape(self.size, -1) + (self._thread_range or (0, 0))[0]

    def _first_uncontained(self, other: "Fragment"):
        if not _shapes_equal(self._input_shape, other._input_shape):
            return "shape"
        if other.is_fully_replicated and not self.is_fully_replicated and self._replicate < other._replicate \
                and self.size:
            # every element of ``other`` is held by its whole thread range, more threads than any element has
            # here: the first element already fails, at the first of those threads it lacks (as the table says)
            lo = (other._thread_range or (0, 0))[0]
            held = set(self._holders[0].tolist())
            thread = next(t for t in range(lo, lo + other._replicate) if t not in held)
            return [0] * len(self._input_shape), thread
        mine, theirs = self._holders, other._holders
        if mine.shape[1] == 1:
            missing = theirs != mine
        elif self.is_fully_replicated:
            lo = (self._thread_range or (0, 0))[0]
            missing = (theirs < lo) | (theirs >= lo + self._replicate)
        else:
            # rows ascending and each row sorted: the flattened keys are already globally sorted
            width = int(max(mine.max(), theirs.max())) + 1
            rows = np.arange(mine.shape[0], dtype=np.int64)[:, None]
            have = (rows * width + mine).reshape(-1)
            want = rows * width + theirs
            pos = np.minimum(np.searchsorted(have, want.reshape(-1)), have.size - 1).reshape(want.shape)
            missing = have[pos] != want
        if not missing.any():
            return None
        elem, k = (int(x) for x in np.argwhere(missing)[0])
        thread = int(theirs[elem, k])
        coord = [int(x) for x in np.unravel_index(elem, tuple(self._input_shape))]
        return coord, thread

    # ----------------------------------------------------------------- printing
    def __repr__(self) -> str:
        rng = "" if self._thread_range is None else f", thread_range: ({self._thread_range[0]}, {self._thread_range[1]})"
        return (f"Fragment({_fmt_shape(self._input_shape)} -> {self._shown_output_shape()}, replicate: "
                f"{self._replicate}, thread: {self.thread_extent}, forward_thread: {self._forward_thread}, "
                f"forward_index: [{', '.join(str(e) for e in self._forward_index)}]{rng})")

    def to_dict(self) -> dict:
        """Plain JSON form: the Layout fields plus forward_thread, replicate, threads and (once bound)
        thread_range; ``tl.layout_from_dict`` rebuilds the fragment."""
        d = super().to_dict()
        d.update(replicate=self._replicate, threads=_jsonable(self.thread_extent),
                 forward_thread=self._thread_str)
        if self._thread_range is not None:
            d["thread_range"] = list(self._thread_range)
        return d

    def __hash__(self) -> int:
        return hash((self.kind, tuple(str(s) for s in self._input_shape), self._replicate))


def clear_caches() -> None:
    """Forget process-wide memos (containment answers, shared fully replicated layouts); benchmarks call it
    to time a cold run, as a compiler sees each kernel once."""
    _CONTAINS_MEMO.clear()
    _INTERNED.clear()
    _fully_replicated_static.cache_clear()
    layout_module.clear_caches()


def fully_replicated(shape, threads: int) -> Fragment:
    """Every one of ``threads`` threads holds the whole buffer, row-major in its slots."""
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise LayoutError(f"fully_replicated needs a positive thread count, got {threads!r}")
    if isinstance(shape, (list, tuple)) and all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        return _fully_replicated_static(tuple(shape), int(threads))
    return Fragment.from_exprs(shape, rep_placeholder(), None, int(threads)).bind_thread_range(0, int(threads))


@functools.lru_cache(maxsize=256)
def _fully_replicated_static(shape: tuple, threads: int) -> Fragment:
    """Fragments are immutable values, so one object per static (shape, threads) serves every caller."""
    return Fragment.from_exprs(list(shape), rep_placeholder(), None, threads).bind_thread_range(0, threads)


# --------------------------------------------------------------------------- index inference

def _split_pieces(split, out: dict) -> bool:
    """Record (lower_factor, extent) pieces of base variables used by one IterSplitExpr."""
    mark = split.source
    lower, extent = int(split.lower_factor), int(split.extent)
    if lower < 1 or extent < 1:
        return False        # a reversed iterator (``31 - r``) splits with negative factors: no digit pieces
    src = mark.source
    if isinstance(src, sym.IterSumExpr):
        return _fused_pieces(src, lower, extent, out)
    name = getattr(src, "name", None)
    if name is None:
        return False
    out.setdefault(name, []).append((lower, extent))
    return True


def _fused_pieces(fused, lower: int, extent: int, out: dict) -> bool:
    """Map a split [lower, lower*extent) of a fused mark back onto its components' digits."""
    lo, hi = lower, lower * extent
    for comp in fused.args:
        scale, c_ext = int(comp.scale), int(comp.extent)
        if scale < 1 or c_ext < 1:
            return False
        a, b = max(lo, scale), min(hi, scale * c_ext)
        if a >= b:
            continue
        if a % scale or b % scale:
            return False
        sub = sym.IterSplitExpr(comp.source, int(comp.lower_factor) * (a // scale), b // a, 1)
        if not _split_pieces(sub, out):
            return False
    return True


def _collect_pieces(expr, dom: dict) -> dict | None:
    try:
        norm = sym.normalize_to_iter_sum(expr, dom)
    except Exception:
        return None
    if type(norm.base).__name__ != "IntImm":
        return None  # TVM could not split the expression into iterators: it left it whole in the base
    out: dict = {}
    try:
        for split in norm.args:
            if not _split_pieces(split, out):
                return None
    except (TypeError, ValueError):  # a piece with a symbolic extent or factor: not a constant split
        return None
    return out


def _merged_pieces(exprs: list, dom: dict) -> dict | None:
    """The split pieces of every expression of ``exprs``, gathered per variable name; None when one does not split."""
    out: dict = {}
    for expr in exprs:
        pieces = _collect_pieces(expr, dom)
        if pieces is None:
            return None
        for name, ps in pieces.items():
            out.setdefault(name, []).extend(ps)
    return out


def _used_pieces(expr, dom: dict, var) -> list | None:
    pieces = _collect_pieces(expr, dom)
    if pieces is None:
        return None
    return pieces.get(var.name, [])


def infer_fragment_index(thread, shape: Sequence) -> list:
    """Row-major flattening of the coordinate pieces the thread map does not use (TileLang's rule)."""
    variables = [placeholder(k) for k in range(len(shape))]
    rep = rep_placeholder()
    thread0 = substitute(thread, {rep: tirx.const(0, "int32")})
    thread0 = simplifier(variables, list(shape)).simplify(thread0)
    dom = {v: Range(0, s) for v, s in zip(variables, shape)}
    pieces = _collect_pieces(thread0, dom)
    if pieces is None:
        raise LayoutError(f"cannot infer forward_index of a fragment over {_fmt_shape(shape)}: thread map "
                          f"{thread} is not affine in split iterators; pass forward_index_fn explicitly")
    terms = []  # (expr, extent), most significant first
    for v, s in zip(variables, shape):
        used = sorted(pieces.get(v.name, []))
        gaps, expected = [], 1  # (lower, extent, is_top)
        for lower, ext in used:
            if lower > expected:
                if lower % expected:
                    raise LayoutError(f"cannot infer forward_index: thread map {thread} uses overlapping pieces of {v.name}")
                gaps.append((expected, lower // expected, False))
            expected = max(expected, lower * ext)
        if not isinstance(s, int):  # symbolic extent: the remaining top piece is v // expected
            gaps.append((expected, s if expected == 1 else tirx.floordiv(s + expected - 1, expected), True))
        elif expected < s:
            gaps.append((expected, -(-s // expected), True))
        for lower, ext, top in reversed(gaps):
            piece = tirx.floordiv(v, lower) if lower > 1 else v
            if not top:
                piece = tirx.floormod(piece, ext)
            terms.append((piece, ext))
    index = tirx.const(0, "int32")
    for piece, ext in terms:
        index = index * ext + piece
    return [index]
