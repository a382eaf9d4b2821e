"""TVM passes of tilelayout (installed as ``tilelayout.passes``): layout inference and the lowering after it."""
from .cost_models import (AttemptCost, available_cost_models, get_cost_model, layout_config,
                          register_cost_model, resolve_cost_model_name)
from .layout_inference import Attempt, InferenceResult, LayoutInference, infer_layouts

__all__ = ["LayoutInference", "infer_layouts", "InferenceResult", "Attempt", "AttemptCost", "register_cost_model",
           "available_cost_models", "get_cost_model", "layout_config", "resolve_cost_model_name"]
