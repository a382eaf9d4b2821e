#pragma once
// Host stand-in for CUDA's fp16 type names (the layout algebra never converts values).
struct __half_raw { unsigned short x; };
struct __half {
  unsigned short x_ = 0;
  __half() = default;
  __half(__half_raw r) : x_(r.x) {}
  operator __half_raw() const { return __half_raw{x_}; }
};
typedef __half half;
struct __half2 { __half x, y; };
inline float __half2float(__half) { return 0.0f; }
inline __half __float2half_rn(float) { return __half(); }
typedef __half2 half2;
inline __half __float2half(float) { return __half(); }
