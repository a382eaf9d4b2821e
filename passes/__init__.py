"""TVM passes of tilelayout (installed as ``tilelayout.passes``): layout inference and the lowering after it."""
import importlib

from .inference.cost_models import (AttemptCost, available_cost_models, get_cost_model, layout_config,
                          register_cost_model, resolve_cost_model_name)
from .inference.layout_inference import Attempt, InferenceResult, LayoutInference, infer_layouts

#: the lowering passes, imported on first use: inference alone (the golden runner, a compiler that only
#: infers) does not pay for compiling and importing the lowering modules (76 ms when Python writes no bytecode)
_LOWERING = {
    "LoopPartition": ".lowering.loop_partition", "LoopVectorize": ".lowering.loop_vectorize",
    "LowerTileOps": ".lowering.lower_tile_ops", "PlanPipelines": ".lowering.pipeline_plan",
    "SoftwarePipeline": ".lowering.software_pipeline", "build_cpu": ".lowering.pipeline",
    "check_case": ".lowering.pipeline", "check_numeric": ".lowering.pipeline", "cuda_source": ".lowering.pipeline",
    "lower": ".lowering.pipeline", "SequentialSemantics": ".lowering.serialize_threads",
    "SerializeThreads": ".lowering.serialize_threads",
}


def __getattr__(name: str):
    """A lowering pass or helper (or the ``lowering`` package), imported the first time it is asked for."""
    if name == "lowering":
        return importlib.import_module(".lowering", __name__)
    module = _LOWERING.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value

__all__ = ["LayoutInference", "LowerTileOps", "LoopPartition", "LoopVectorize", "PlanPipelines", "SoftwarePipeline",
           "SerializeThreads",
           "SequentialSemantics", "lower", "cuda_source", "build_cpu", "check_numeric", "check_case", "infer_layouts", "InferenceResult", "Attempt", "AttemptCost", "register_cost_model",
           "available_cost_models", "get_cost_model", "layout_config", "resolve_cost_model_name"]
