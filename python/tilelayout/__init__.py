"""tilelayout: automatic layouts for register fragments and shared tiles of TVM TIRx kernels."""
__version__ = "0.1.0"

from .errors import (ConfigError, EvaluationError, InferenceError, LayoutConflictError, LayoutError, LoweringError,
                     MissingLaunchError, PipelineError, RaceError, ReducerError, ReferenceFunctionError, TargetFeatureWarning,
                     TileLayoutError, TileLayoutResourceWarning, UninitializedReadError, UninitializedReadWarning,
                     ScopeError, Tcgen05LoweringError, WarpPolicyConflictError, WriteRaceError)
from .evaluate import evaluate, evaluate_grid
from .fragment import Fragment, fully_replicated
from .layout import Layout
from .serialize import layout_from_dict

from .swizzle import (SwizzleMode, choose_swizzle_mode, detect_swizzle_mode, make_bank_swizzled_layout,
                      make_full_bank_swizzled_layout, make_half_bank_swizzled_layout, make_linear_layout,
                      make_quarter_bank_swizzled_layout, make_swizzled_layout, make_tcgen05mma_swizzled_layout,
                      make_volta_swizzled_layout, make_wgmma_swizzled_layout, merge_swizzle_layouts)
from .gemm_layouts import (compute_warp_partition, make_gemm_fragment_8x4, make_gemm_fragment_8x8,
                           make_gemm_fragment_8x8_transposed, make_gemm_fragment_8x16, make_gemm_fragment_a,
                           make_gemm_fragment_b, make_gemm_fragment_c, make_mma_accumulator_fragment,
                           make_wgmma_accumulator_fragment)
from .tile_layout_interop import from_tile_layout, to_tile_layout
from .annotate import annotate_layouts, get_pinned_layouts, read_layout_annotations
from . import cute, tla  # noqa: E402
from .plot import PlotError, plot_layout
from . import passes  # noqa: E402  (passes build on the core objects above)
from .passes import (AttemptCost, InferenceResult, available_cost_models, infer_layouts, layout_config,
                     register_cost_model)
from .passes.inference.conversion import ConversionWarning


def __getattr__(name: str):
    """``lower``, ``cuda_source`` and ``build_cpu`` load the lowering modules on first use (see ``passes``)."""
    if name in ("lower", "cuda_source", "build_cpu"):
        value = getattr(passes, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_layouts(func):
    """Read layouts back from a function annotated by layout inference (no inference is run)."""
    from .passes.inference.annotations import get_layouts as _get
    return _get(func)


__all__ = [
    "Layout", "Fragment", "fully_replicated", "layout_from_dict", "evaluate", "evaluate_grid",
    "lower", "cuda_source", "build_cpu", "LoweringError", "PipelineError", "MissingLaunchError", "RaceError", "ReducerError",
    "ReferenceFunctionError", "TargetFeatureWarning",
    "TileLayoutError", "TileLayoutResourceWarning", "UninitializedReadWarning", "UninitializedReadError", "LayoutError",
    "ConfigError", "EvaluationError", "LayoutConflictError", "InferenceError", "WarpPolicyConflictError",
    "Tcgen05LoweringError",
    "WriteRaceError", "ScopeError",
    "SwizzleMode", "choose_swizzle_mode", "detect_swizzle_mode", "make_bank_swizzled_layout",
    "make_full_bank_swizzled_layout", "make_half_bank_swizzled_layout", "make_linear_layout",
    "make_quarter_bank_swizzled_layout", "make_swizzled_layout", "make_tcgen05mma_swizzled_layout",
    "make_wgmma_swizzled_layout", "merge_swizzle_layouts", "compute_warp_partition", "make_gemm_fragment_8x4",
    "make_gemm_fragment_8x8", "make_gemm_fragment_8x8_transposed", "make_gemm_fragment_8x16",
    "make_gemm_fragment_a", "make_gemm_fragment_b", "make_gemm_fragment_c", "make_mma_accumulator_fragment",
    "make_wgmma_accumulator_fragment", "make_volta_swizzled_layout",
    "from_tile_layout", "to_tile_layout", "annotate_layouts", "get_pinned_layouts", "read_layout_annotations",
    "cute", "tla", "passes", "infer_layouts", "get_layouts", "InferenceResult", "AttemptCost", "layout_config",
    "register_cost_model", "available_cost_models", "plot_layout", "PlotError", "ConversionWarning",
]
