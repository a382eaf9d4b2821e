"""Cost-model registry. A model is a class with ``name`` and ``score(component, layouts, context)``."""
from __future__ import annotations

import contextlib
import contextvars
import os

from tilelayout.errors import ConfigError

from .base import AttemptCost, CostModel, ScoringContext, count_register_slots
from .io_aware import IOAwareModel
from .register_count import RegisterCountModel

__all__ = ["AttemptCost", "CostModel", "ScoringContext", "count_register_slots", "register_cost_model",
           "available_cost_models", "get_cost_model", "resolve_cost_model_name", "layout_config",
           "DEFAULT_COST_MODEL", "ENV_VAR"]

DEFAULT_COST_MODEL = "register-count"
ENV_VAR = "TILELAYOUT_COST_MODEL"
_REGISTRY: dict = {}
_CONFIG: contextvars.ContextVar = contextvars.ContextVar("tilelayout_config", default={})


def register_cost_model(cls, name: str | None = None, override: bool = False):
    """Register a cost-model class (usable as a decorator). Names are unique unless ``override``."""
    key = name or getattr(cls, "name", None)
    if not isinstance(key, str) or not key:
        raise ConfigError(f"cost model {cls!r} needs a non-empty string name")
    if not callable(getattr(cls, "score", None)):
        raise ConfigError(f"cost model {key!r} must define score(component, candidate_layouts, context)")
    if key in _REGISTRY and not override and _REGISTRY[key] is not cls:
        raise ConfigError(f"cost model {key!r} is already registered")
    _REGISTRY[key] = cls
    return cls


def available_cost_models() -> list:
    """Names of the registered cost models, sorted."""
    return sorted(_REGISTRY)


def resolve_cost_model_name(name: str | None = None) -> str:
    """Most specific wins: argument, then layout_config, then $TILELAYOUT_COST_MODEL, then the default."""
    for candidate in (name, _CONFIG.get().get("cost_model"), os.environ.get(ENV_VAR) or None, DEFAULT_COST_MODEL):
        if candidate is not None:
            break
    if not isinstance(candidate, str) or candidate not in _REGISTRY:
        raise ConfigError(f"unknown layout cost model {candidate!r}; valid names: {', '.join(available_cost_models())}")
    return candidate


def get_cost_model(name: str | None = None):
    """An instance of the selected model (see resolve_cost_model_name); instances pass through."""
    if name is not None and not isinstance(name, str):
        if callable(getattr(name, "score", None)):
            return name
        raise ConfigError(f"cost_model must be a name or a model object, got {name!r}")
    return _REGISTRY[resolve_cost_model_name(name)]()


@contextlib.contextmanager
def layout_config(cost_model: str | None = None, conflicts: str | None = None, register_budget: int | None = None):
    """``with layout_config(cost_model="io-aware"):`` selects the model for inference inside the block;
    ``conflicts="strict"`` turns automatic layout conversions off there (``"convert"``: the default);
    ``register_budget=N`` plans for N 32-bit registers per thread instead of the 255 of CUDA targets."""
    if cost_model is not None:
        resolve_cost_model_name(cost_model)
    if conflicts is not None and conflicts not in ("convert", "strict"):
        raise ValueError(f"unknown conflict mode {conflicts!r}; valid: convert, strict")
    if register_budget is not None and (not isinstance(register_budget, int) or register_budget < 1):
        raise ValueError(f"register_budget must be a positive int, got {register_budget!r}")
    settings = {**({"cost_model": cost_model} if cost_model else {}), **({"conflicts": conflicts} if conflicts else {}),
                **({"register_budget": register_budget} if register_budget else {})}
    token = _CONFIG.set({**_CONFIG.get(), **settings})
    try:
        yield
    finally:
        _CONFIG.reset(token)


register_cost_model(RegisterCountModel)
register_cost_model(IOAwareModel)
