#pragma once
// Host stand-in for CUDA's fp16 type names (the layout algebra never converts values).
#include "raw16.h"
TILELAYOUT_SHIM_16BIT(__half, __half_raw)
typedef __half half;
struct __half2 { __half x, y; };
inline float __half2float(__half) { return 0.0f; }
inline __half __float2half_rn(float) { return __half(); }
typedef __half2 half2;
inline __half __float2half(float) { return __half(); }
