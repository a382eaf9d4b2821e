#pragma once
// Host stand-in for CUDA's bf16 type names (the layout algebra never converts values).
struct __nv_bfloat16_raw { unsigned short x; };
struct __nv_bfloat16 {
  unsigned short x_ = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(__nv_bfloat16_raw r) : x_(r.x) {}
  operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{x_}; }
};
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
