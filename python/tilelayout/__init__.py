"""tilelayout: automatic layouts for register fragments and shared tiles of TVM TIRx kernels."""
from .errors import EvaluationError, InferenceError, LayoutConflictError, LayoutError, TileLayoutError
from .evaluate import evaluate, evaluate_grid
from .fragment import Fragment, fully_replicated
from .layout import Layout, layout_from_dict

__all__ = [
    "Layout", "Fragment", "fully_replicated", "layout_from_dict", "evaluate", "evaluate_grid",
    "TileLayoutError", "LayoutError", "EvaluationError", "LayoutConflictError", "InferenceError",
]
