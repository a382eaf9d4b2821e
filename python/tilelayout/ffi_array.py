"""Read a TVM FFI array into a Python list at one FFI call per element.

``tvm_ffi.Array`` iterates through ``__getitem__``, which asks the array's size again and checks the index in
Python for every element: about 1.3 microseconds per element, three times the FFI call that fetches it.
Inference reads the arguments, regions, shapes and free variables of every statement it meets, a few hundred
small arrays per kernel, so it reads them here: the same registered functions ``Array`` itself calls, once
each. With another tvm_ffi (no such functions) the public iteration is used.
"""
from __future__ import annotations

from typing import Any

import tvm_ffi

__all__ = ["as_list"]

try:
    from tvm_ffi import _ffi_api as _api
    _GET, _SIZE = _api.ArrayGetItem, _api.ArraySize
except (ImportError, AttributeError):  # pragma: no cover - another tvm_ffi: the public path
    _GET = _SIZE = None

_ARRAY = tvm_ffi.Array


def as_list(values: Any) -> list:
    """``list(values)``; a ``tvm_ffi.Array`` is read element by element through the FFI directly."""
    if _GET is not None and type(values) is _ARRAY:
        return [_GET(values, i) for i in range(_SIZE(values))]
    return list(values)
