"""Trying an epilogue split without re-running the whole search: reuse the unsplit run's decisions.

An epilogue split (``epilogue.py``) rewrites one program: the fragment ``F`` a store to global memory reads gets a
second version ``F_cv``, converted right before the store. When that store is the program's last op, every op
before it is the same statement at the same index, so the split program's run differs from the unsplit one only
in the component holding ``F``: it gains the conversion and the store of ``F_cv``. If that component was settled
before the free level of the unsplit run (its layouts all came from the strict and common levels, an MMA
accumulator's usually do) and nothing any later search did changed what its ops touch, then the split run is:
the unsplit run's final state and attempts everywhere else, and one free-level search of that component. This
module builds that starting state, or says (None) that the argument does not apply; the engine then searches
the one component and, if the search changed anything but ``F_cv`` and the store's loop, runs in full.
Tests compare both ways on every kernel that stages an epilogue.
"""
from __future__ import annotations

from .frontend import ConvertOp, CopyOp

__all__ = ["reuse_state", "only_split_changed", "split_attempts", "later_attempts"]


def _component_of(engine, index: int) -> tuple:
    """(component number, members) of the component holding op ``index``."""
    for cid, members in enumerate(engine.components()):
        if index in members:
            return cid, members
    raise AssertionError(f"op {index} is in no component")


def _same(a, b) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    return type(a) is type(b) and a.key == b.key


def reuse_state(engine, prev, prev_state, reader: int):
    """(state, component number, attempts before it, attempts after it) for ``engine`` (the split program)
    from ``prev`` (the unsplit program, whose op ``reader`` is the store that now reads the new version),
    or None when the reuse is not shown to give what a full run gives."""
    common = getattr(prev, "common", None)
    if getattr(engine.model, "name", None) != "io-aware":
        return None             # only its per-attempt register figure is adjusted in ``later_attempts``
    n = len(prev.ops)
    if common is None or reader != n - 1 or len(engine.ops) != n + 1:
        return None
    if not isinstance(engine.ops[reader], ConvertOp) or not isinstance(engine.ops[reader + 1], CopyOp):
        return None
    if any(not engine.ops[i].stmt.same_as(prev.ops[i].stmt) or type(engine.ops[i]) is not type(prev.ops[i])
           for i in range(reader)):
        return None
    if reader in prev.pinned_loops or reader + 1 in engine.pinned_loops:
        return None
    # the unsplit component of the store: settled before the free level, and unchanged by every search since
    _, members = _component_of(prev, reader)
    if not prev._settled(common, members):
        return None
    for m in members:
        if m != reader and not _same_loop(common.loops.get(m), prev_state.loops.get(m)):
            return None
        for buf in prev.ops[m].buffers():
            if not _same(common.layouts.get(buf.name), prev_state.layouts.get(buf.name)):
                return None
    # the split program's components are the unsplit ones, the store's gaining the conversion
    comps, old = engine.components(), prev.components()
    cid, _ = _component_of(engine, reader + 1)
    if len(comps) != len(old) or any(k != cid and comps[k] != old[k] for k in range(len(comps))) \
            or sorted(comps[cid]) != sorted(old[cid] + [reader + 1]):
        return None
    if any(a.component == cid for a in prev.attempts):
        return None
    state = type(prev_state)(engine)
    state.layouts = dict(prev_state.layouts)
    state.loops = {i: d for i, d in prev_state.loops.items() if i != reader}
    state.strict = set(prev_state.strict)
    for name, op in prev_state.setters.items():
        if op is not None and op.index >= reader:
            return None
        state.setters[name] = None if op is None else engine.ops[op.index]
    if [k for k, c in enumerate(comps) if not engine._settled(state, c)] != [cid]:
        return None
    before = [a for a in prev.attempts if a.component < cid]
    after = [a for a in prev.attempts if a.component > cid]
    return state, cid, before, after


def _same_loop(a, b) -> bool:
    return a is b or (a is not None and b is not None and a.layout.key == b.layout.key
                      and (a.predicate, a.padding_guard, a.replica_guard) == (b.predicate, b.padding_guard,
                                                                              b.replica_guard))


def only_split_changed(engine, start, final, reader: int) -> bool:
    """The search of the split component set only the new version's layout and the store's loop."""
    new = {b.name for b in engine.ops[reader].buffers()} - set(start.layouts)
    if set(final.layouts) - set(start.layouts) != new:
        return False
    if any(final.layouts[k] is not v and not _same(final.layouts[k], v) for k, v in start.layouts.items()):
        return False
    if set(final.loops) - set(start.loops) - {reader + 1}:
        return False
    return all(final.loops.get(i) is d for i, d in start.loops.items())


def later_attempts(after: list, start, final, bits_of) -> list:
    """The unsplit run's attempts of components searched after the split one, as the split run records them:
    the io-aware model's register figure counts every fragment of the state, which then holds the new version
    too (the same amount in every attempt of a component, so no ranking among them changes); so does the
    32-bit register count (``bits_of(name)``: element width)."""
    from .cost_models.base import count_register_slots, register_count32
    added = {k: v for k, v in final.layouts.items() if k not in start.layouts}
    return [_shifted(a, count_register_slots(added), register_count32(added, bits_of)) for a in after]


def _shifted(attempt, slots: int, registers: int):
    """``attempt`` with its register figures moved by ``slots`` and ``registers`` (failed attempts have none)."""
    from dataclasses import replace
    if attempt.regs is None:
        return attempt
    moved = replace(attempt, regs=attempt.regs + slots)
    if attempt.registers is not None:
        moved.registers = attempt.registers + registers
    return moved


def split_attempts(engine, prev, prev_state, cid: int, attempts: list) -> list:
    """The split component's attempts as a full run records them: searched there before the components
    after it, whose fragments then still hold their common-level layouts (or none), so the register figure
    (every fragment of the state) is less by what those searches added."""
    from .cost_models.base import count_register_slots, register_count32
    later = {b.name for members in engine.components()[cid + 1:] for m in members
             for b in engine.ops[m].buffers() if b.is_fragment}
    searched = {n: prev_state.layouts[n] for n in later if n in prev_state.layouts}
    common = {n: prev.common.layouts[n] for n in later if n in prev.common.layouts}
    bits = lambda n: engine.graph.buffer(n).bits
    delta = count_register_slots(searched) - count_register_slots(common)
    delta32 = register_count32(searched, bits) - register_count32(common, bits)
    if not delta and not delta32:
        return attempts
    return [_shifted(a, -delta, -delta32) for a in attempts]
