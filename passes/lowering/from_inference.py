"""Everything lowering takes from layout inference, in one place: no other lowering module imports
``passes/inference``, so this list is the whole boundary between the two stages.

Lowering reads inference's decisions from the IR (``tilelayout.annotate`` decodes the annotations); what it
takes from inference's code is not a decision but one of:

- the front end, which reads a TIRx function into ops and loop nests: lowering walks the same ops the
  annotations are numbered by (``build_op_graph``, the op classes, ``nest_of``, ``uniform_local_buffers``,
  ``match_cumsum`` and the lane-split scan's shapes, ``finalized_buffer`` for a reducer's finalize);
- readers of plans recorded in the IR (``read_gemm_plans`` / ``gemm_ordinal``; ``has_tcgen05``, whether a
  target's gemms are planned as tcgen05; ``CONFIG_KEY``, where a
  conversion's plan sits on its copy);
- checks both stages run on layouts already chosen: ``ownership_error`` (the partitioner's ``verify``), the
  conversion moves (``is_noop``, ``shuffle_count``, ``shuffle_plan``: a recorded shuffle conversion is checked,
  then its shuffles are built), shared-memory sizes (``stage_stride``, ``shared_tile_bytes``, the limits);
- ``infer_layouts`` itself, which ``pipeline.lower`` runs first.

No inference rule (``op_rules``, ``fragment_rules``, ``reduce_layouts``, ``loop_plan``) is imported here:
lowering never derives a layout again. ``tests/test_architecture_doc.py`` keeps this the only door.
"""
from __future__ import annotations

from ..inference.conversion import CONFIG_KEY, SHARED_STAGE_LIMIT, is_noop, shuffle_count, shuffle_plan
from ..inference.frontend import (ConvertOp, CopyOp, ElementwiseOp, FillOp, GemmOp, ParallelOp, ReduceOp,
                                  build_op_graph)
from ..inference.gemm_plan import gemm_ordinal, read_gemm_plans
from ..inference.layout_inference import infer_layouts
from ..inference.loop_nest import nest_of
from ..inference.ownership import ownership_error
from ..inference.resources import MAX_STATIC_SHARED_BYTES, shared_memory_limit, shared_tile_bytes, stage_stride
from ..inference.tcgen05_plan import has_tcgen05
from ..inference.reducers import finalized_buffer
from ..inference.scan_split import CumsumScan, is_split_fragment, is_split_loop, match_cumsum, split_lanes
from ..inference.uniform_locals import uniform_local_buffers

__all__ = ["CONFIG_KEY", "SHARED_STAGE_LIMIT", "is_noop", "shuffle_count", "shuffle_plan", "ConvertOp", "CopyOp",
           "ElementwiseOp", "FillOp", "GemmOp", "ParallelOp", "ReduceOp", "build_op_graph", "gemm_ordinal",
           "read_gemm_plans", "infer_layouts", "nest_of", "ownership_error", "MAX_STATIC_SHARED_BYTES",
           "shared_memory_limit", "shared_tile_bytes", "stage_stride", "CumsumScan", "is_split_fragment",
           "is_split_loop", "match_cumsum", "split_lanes", "uniform_local_buffers", "has_tcgen05", "finalized_buffer"]
