"""Structural walks and maps over TVM IR with the callback types resolved once per process.

``tvm_ffi.structural_walk`` / ``structural_map`` normalise their callbacks on every call (each callback type is
turned into an FFI type index through ``typing`` introspection); for the short expressions inference walks
thousands of times per kernel that set-up cost more than the walk itself. These call the same registered
functions with the type indices cached; with another tvm_ffi they fall back to the public wrappers.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import tvm_ffi

__all__ = ["walk_typed", "map_typed", "mutate_typed"]

_TYPE_INDEX: dict = {}

try:
    from tvm_ffi import structural as _structural
    _WALK = _structural._ffi_api.StructuralWalk
    _MAP = _structural._ffi_api.StructuralMap
    _MUTATE = _structural._ffi_api.StructuralMutate
    _ORDER = {"pre": int(_structural.WalkOrder.PREORDER), "post": int(_structural.WalkOrder.POSTORDER)}
    _type_index_of = _structural._callback_type_to_type_index
except (ImportError, AttributeError):  # pragma: no cover - another tvm_ffi: the public path
    _WALK = _MAP = _MUTATE = None


def _entries(entries: Sequence[tuple], api: str) -> list:
    out = []
    for types, fn in entries:
        for t in (types if isinstance(types, tuple) else (types,)):
            index = _TYPE_INDEX.get(t)
            if index is None:
                index = _TYPE_INDEX[t] = _type_index_of(t, api_name=api)
            out.append((index, fn))
    return out


def walk_typed(root: Any, entries: Sequence[tuple[Any, Callable]], order: str = "post"):
    """``tvm_ffi.structural_walk(root, entries, order=order)`` for a list of (type or tuple of types, callback)."""
    if _WALK is None:
        return tvm_ffi.structural_walk(root, list(entries), order=order)
    return _WALK(root, _entries(entries, "structural_walk"), [], _ORDER[order])


def map_typed(root: Any, entries: Sequence[tuple[Any, Callable]], order: str = "post"):
    """``tvm_ffi.structural_map(root, entries, order=order)`` for a list of (type or tuple of types, callback)."""
    if _MAP is None:
        return tvm_ffi.structural_map(root, list(entries), order=order)
    return _MAP(root, _entries(entries, "structural_map"), [], _ORDER[order])


def mutate_typed(root: Any, entries: Sequence[tuple[Any, Callable]]):
    """``tvm_ffi.structural_mutate(root, entries)`` for callbacks taking ``(value, mutator)`` (the public wrapper
    also inspects every callback's signature, on every call, for an optional third argument)."""
    if _MUTATE is None:
        return tvm_ffi.structural_mutate(root, list(entries))
    return _MUTATE(root, [(index, fn, False) for index, fn in _entries(entries, "structural_mutate")])
