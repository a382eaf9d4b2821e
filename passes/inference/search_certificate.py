"""Why the free level need not run every root of a component to its end.

An attempt starts from the component's starting state S0, steps its root, then propagates and steps every
other member; each step applies one op's rule at the free level and reads and writes only that op's items
(the layouts of its buffers and its loop decision). Once an attempt succeeded with final state F, the
certificate checks, for every member X and every partial state N with S0|X <= N <= F|X over X's items, that
stepping X on N raises nothing, removes nothing, sets only F's values and touches nothing outside X's items
(every access is recorded). Then every attempt, whatever its root and its order of steps, stays inside F
(induction over steps), and since every member is stepped at least once, it ends with at least the items each
member's step always sets: when those cover F, it ends in F exactly, with F's cost. Later roots then tie with
the certified attempt, and the earliest root keeps the win, as running them would have decided. Where the
check fails or would cost more than running the remaining roots, the search runs them.
"""
from __future__ import annotations

from tilelayout.errors import InferenceError, LayoutConflictError, LayoutError

__all__ = ["certify", "copy_outcome", "PATTERN_ITEMS_LIMIT"]

#: members with more undecided items than this are not certified (2**n partial states each)
PATTERN_ITEMS_LIMIT = 6

_SEARCH_ERRORS = (LayoutConflictError, InferenceError, LayoutError)


class _Watched(dict):
    """A state dict that records any access to a key outside the stepped op's own items."""

    def __init__(self, items: dict, allowed: set):
        super().__init__(items)
        self.allowed = allowed
        self.foreign = False

    def _check(self, key) -> bool:
        if key in self.allowed:
            return True
        self.foreign = True
        return False

    def get(self, key, default=None):
        return super().get(key, default) if self._check(key) else default

    def __getitem__(self, key):
        if not self._check(key):
            raise KeyError(key)
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        return super().__contains__(key) if self._check(key) else False

    def __setitem__(self, key, value) -> None:
        self._check(key)
        super().__setitem__(key, value)

    def __delitem__(self, key) -> None:
        self._check(key)
        super().__delitem__(key)

    def __iter__(self):
        self.foreign = True
        return super().__iter__()

    def pop(self, key, *default):
        self._check(key)
        return super().pop(key, *default)

    def keys(self):
        self.foreign = True
        return super().keys()

    def items(self):
        self.foreign = True
        return super().items()

    def values(self):
        self.foreign = True
        return super().values()


def _items(engine, index: int) -> list:
    out = [("b", b.name) for b in engine.ops[index].buffers()]
    if engine.nests[index] is not None:
        out.append(("l", index))
    return out


def _value(state, item):
    kind, key = item
    return state.layouts.get(key) if kind == "b" else state.loops.get(key)


def _same(item, a, b) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    if item[0] == "l":      # a loop decision; how it was found (its source) is explanation only
        return (a.layout.key, a.predicate, a.padding_guard, a.replica_guard) == \
            (b.layout.key, b.predicate, b.padding_guard, b.replica_guard)
    return type(a) is type(b) and a.key == b.key


def certify(engine, start, final, members: list, budget: int) -> bool:
    """True when every attempt from ``start`` over ``members`` provably ends in ``final`` (see the module
    docstring); False when that is not shown, or when showing it would take more than ``budget`` steps."""
    plans, total = [], 0
    for m in members:
        items = _items(engine, m)
        begin = {item: _value(start, item) for item in items}
        goal = {item: _value(final, item) for item in items}
        free = []
        for item in items:
            if begin[item] is not None and not _same(item, begin[item], goal[item]):
                return False                    # the attempt replaced a starting layout: not a monotone run
            if begin[item] is None and goal[item] is not None:
                free.append(item)
        if len(free) > PATTERN_ITEMS_LIMIT:
            return False
        total += 1 << len(free)
        plans.append((m, items, begin, goal, free))
    if total > budget:
        return False
    covered = {item for _, items, begin, _, _ in plans for item in items if begin[item] is not None}
    for m, items, begin, goal, free in plans:
        always = None
        for mask in range(1 << len(free)):
            before = dict(begin)
            for k, item in enumerate(free):
                if mask >> k & 1:
                    before[item] = goal[item]
            after = _step_pattern(engine, start, m, items, before, goal)
            if after is None:
                return False
            always = after if always is None else always & after
        covered |= always
    return all(item in covered for _, items, _, goal, _ in plans for item in items if goal[item] is not None)


def _step_pattern(engine, start, index: int, items: list, before: dict, goal: dict) -> set | None:
    """Step op ``index`` on the partial state ``before`` (its items); the set of its items set afterwards,
    or None when the step fails, leaves ``goal``, removes a value or reaches outside its items."""
    from .op_rules import FREE
    state = type(start)(engine)         # a fresh state of the engine's own kind (``start`` is one)
    layouts = {key: v for (kind, key), v in before.items() if kind == "b" and v is not None}
    loops = {key: v for (kind, key), v in before.items() if kind == "l" and v is not None}
    state.layouts = _Watched(layouts, {key for kind, key in items if kind == "b"})
    state.loops = _Watched(loops, {key for kind, key in items if kind == "l"})
    state.setters = {}
    state.strict = start.strict
    try:
        engine._step(state, index, FREE)
    except _SEARCH_ERRORS:
        return None
    if state.layouts.foreign or state.loops.foreign:
        return None
    out = set()
    for item in items:
        kind, key = item
        now = dict.get(state.layouts if kind == "b" else state.loops, key)
        if before[item] is not None and not _same(item, now, before[item]):
            return None
        if now is not None:
            if not _same(item, now, goal[item]):
                return None
            out.add(item)
    return out


def copy_outcome(attempt, certified) -> None:
    """Give ``attempt`` the outcome of the certified attempt it provably repeats."""
    attempt.mem, attempt.regs, attempt.details = certified.mem, certified.regs, certified.details
    attempt.registers = certified.registers
    attempt.layouts, attempt.loops = dict(certified.layouts), dict(certified.loops)
