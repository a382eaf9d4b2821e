"""tilelayout: automatic layouts for register fragments and shared tiles of TVM TIRx kernels."""
from .errors import EvaluationError, InferenceError, LayoutConflictError, LayoutError, TileLayoutError
from .evaluate import evaluate, evaluate_grid
from .fragment import Fragment, fully_replicated
from .layout import Layout, layout_from_dict

from .tirx import from_tile_layout, to_tile_layout
from .annotate import annotate_layouts, get_pinned_layouts, read_layout_annotations
from . import cute, tla  # noqa: E402
from . import passes  # noqa: E402  (passes build on the core objects above)
from .passes import (AttemptCost, InferenceResult, available_cost_models, infer_layouts, layout_config,
                     register_cost_model)


def get_layouts(func):
    """Read layouts back from a function annotated by layout inference (no inference is run)."""
    from .passes.annotations import get_layouts as _get
    return _get(func)


__all__ = [
    "Layout", "Fragment", "fully_replicated", "layout_from_dict", "evaluate", "evaluate_grid",
    "TileLayoutError", "LayoutError", "EvaluationError", "LayoutConflictError", "InferenceError",
    "from_tile_layout", "to_tile_layout", "annotate_layouts", "get_pinned_layouts", "read_layout_annotations",
    "cute", "tla", "passes", "infer_layouts", "get_layouts", "InferenceResult", "AttemptCost", "layout_config",
    "register_cost_model", "available_cost_models",
]
