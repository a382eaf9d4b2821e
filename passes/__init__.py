"""TVM passes of tilelayout (installed as ``tilelayout.passes``): layout inference and the lowering after it."""
from .inference.cost_models import (AttemptCost, available_cost_models, get_cost_model, layout_config,
                          register_cost_model, resolve_cost_model_name)
from .inference.layout_inference import Attempt, InferenceResult, LayoutInference, infer_layouts
from .lowering.loop_partition import LoopPartition
from .lowering.loop_vectorize import LoopVectorize
from .lowering.lower_tile_ops import LowerTileOps
from .lowering.pipeline_plan import PlanPipelines
from .lowering.software_pipeline import SoftwarePipeline
from .lowering.pipeline import build_cpu, check_case, check_numeric, cuda_source, lower
from .lowering.serialize_threads import SequentialSemantics, SerializeThreads

__all__ = ["LayoutInference", "LowerTileOps", "LoopPartition", "LoopVectorize", "PlanPipelines", "SoftwarePipeline",
           "SerializeThreads",
           "SequentialSemantics", "lower", "cuda_source", "build_cpu", "check_numeric", "check_case", "infer_layouts", "InferenceResult", "Attempt", "AttemptCost", "register_cost_model",
           "available_cost_models", "get_cost_model", "layout_config", "resolve_cost_model_name"]
