"""CuTe layout algebra (pycute's names, CuTe's printed spelling) and converters to and from tilelayout Layouts.

Exported as ``tl.cute``. Layouts are ``shape:stride`` IntTuple pairs, column-major by default; every algebra
operation raises ``CuteError`` when its precondition fails, and only the ``from_tilelang`` converters answer
None (never raise) when a tilelayout Layout is not expressible.
"""
from .algebra import (append, blocked_product, coalesce, complement, composition, filter, left_inverse,
                      logical_divide, logical_product, raked_product, restrict, right_inverse, tiled_divide,
                      tiled_product, with_shape, zipped_divide, zipped_product)
from .convert import (composed_from_tilelang, composed_to_tilelang, layout_from_table, layout_from_tilelang,
                      layout_from_tilelang_hierarchical, layout_to_tilelang, pack_fragment)
from .int_tuple import (CuteError, E, ScaledBasis, crd2idx, flatten_to_tuple, has_none, idx2crd, inner_product,
                        is_int, is_tuple, prefix_product, product, shape_div, slice_, suffix_product)
from .layout import (Layout, LayoutBase, compatible, congruent, coshape, cosize, depth, flatten, is_layout,
                     make_column_major_layout, make_identity_layout, make_layout, make_row_major_layout, rank, size,
                     slice_and_offset)
from .parse import parse, parse_int_tuple
from .swizzle import ComposedLayout, Swizzle

__all__ = [
    "CuteError", "ScaledBasis", "E", "Layout", "LayoutBase", "ComposedLayout", "Swizzle",
    "is_int", "is_tuple", "is_layout", "flatten", "flatten_to_tuple", "product", "inner_product", "prefix_product",
    "suffix_product", "shape_div", "slice_", "has_none", "idx2crd", "crd2idx", "rank", "depth", "congruent", "compatible",
    "make_layout", "make_column_major_layout", "make_row_major_layout", "make_identity_layout", "size", "cosize",
    "coshape", "slice_and_offset", "coalesce", "filter", "composition", "complement", "right_inverse",
    "left_inverse", "logical_divide", "zipped_divide", "tiled_divide", "logical_product", "zipped_product",
    "tiled_product", "blocked_product", "raked_product", "append", "with_shape", "restrict", "parse",
    "parse_int_tuple", "layout_from_tilelang", "layout_from_table", "layout_from_tilelang_hierarchical", "composed_from_tilelang",
    "layout_to_tilelang", "composed_to_tilelang", "pack_fragment",
]
