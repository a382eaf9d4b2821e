"""The per-kernel safe-memory settings, read from function attributes (inference and lowering both read them).

- ``tilelayout.safe_memory`` (bool, default True): global accesses whose index may leave the buffer are
  guarded (loads read the pad value, stores are dropped); ``False`` turns the guards off for this kernel.
- ``tilelayout.safe_memory_pad`` (``{buffer name: number}``): the value a guarded load of that global buffer
  reads outside it; 0 when absent (a ``-inf`` pad keeps a row max of a partial tile right, for example).
- ``tilelayout.safe_memory_guards``: written by lowering, never by the user: the guards it inserted
  (``passes/lowering/bounds_guards.py``).
"""
from __future__ import annotations

import math

from tvm import tirx

from tilelayout.errors import ConfigError

__all__ = ["SAFE_MEMORY_ATTR", "SAFE_PAD_ATTR", "GUARDS_ATTR", "safe_memory_enabled", "pad_values", "pad_const"]

SAFE_MEMORY_ATTR = "tilelayout.safe_memory"
SAFE_PAD_ATTR = "tilelayout.safe_memory_pad"
GUARDS_ATTR = "tilelayout.safe_memory_guards"


def _attr(func, key: str):
    attrs = getattr(func, "attrs", None)
    return attrs[key] if attrs is not None and key in attrs else None


def safe_memory_enabled(func) -> bool:
    """Whether ``func``'s possibly out-of-bounds global accesses are guarded (the default)."""
    value = _attr(func, SAFE_MEMORY_ATTR)
    if value is None:
        return True
    if isinstance(value, (bool, int)) or isinstance(value, tirx.IntImm):
        number = int(value.value) if isinstance(value, tirx.IntImm) else int(value)
        if number in (0, 1):
            return bool(number)
    raise ConfigError(f"function attribute {SAFE_MEMORY_ATTR} must be True or False, got {value!r}")


def pad_values(func) -> dict:
    """``{buffer name: float}`` of ``tilelayout.safe_memory_pad`` (checked: names are strings, values numbers)."""
    value = _attr(func, SAFE_PAD_ATTR)
    if value is None:
        return {}
    out = {}
    try:
        items = list(value.items())
    except AttributeError:
        raise ConfigError(f"function attribute {SAFE_PAD_ATTR} must map buffer names to numbers, got {value!r}") \
            from None
    for name, pad in items:
        number = pad.value if isinstance(pad, (tirx.IntImm, tirx.FloatImm)) else pad
        if not isinstance(number, (int, float)) or isinstance(number, bool) or math.isnan(float(number)):
            raise ConfigError(f"function attribute {SAFE_PAD_ATTR}: the pad of buffer {name} must be a number, "
                              f"got {pad!r}")
        out[str(name)] = float(number)
    return out


def pad_const(dtype: str, pad: float):
    """``pad`` as a constant of ``dtype`` (an integer buffer's pad must be an integer)."""
    if dtype == "bool":
        return tirx.const(bool(pad), "bool")
    if not dtype.startswith(("float", "bfloat")):
        if pad != int(pad) or math.isinf(pad):
            raise ConfigError(f"{SAFE_PAD_ATTR}: the pad {pad} of an {dtype} buffer must be an integer")
        return tirx.const(int(pad), dtype)
    return tirx.const(pad, dtype)
