#pragma once
// Host stand-in for CUDA's bf16 type names (the layout algebra never converts values).
#include "raw16.h"
TILELAYOUT_SHIM_16BIT(__nv_bfloat16, __nv_bfloat16_raw)
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
