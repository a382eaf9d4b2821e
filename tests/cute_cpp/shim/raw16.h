#pragma once
// A host stand-in for one of CUDA's 16-bit float types: the value type T (raw bits only; the layout algebra never
// converts values) and its RAW twin, as cuda_fp16.h and cuda_bf16.h declare them.
#define TILELAYOUT_SHIM_16BIT(T, RAW)         \
  struct RAW { unsigned short x; };           \
  struct T {                                  \
    unsigned short x_ = 0;                    \
    T() = default;                            \
    T(RAW r) : x_(r.x) {}                     \
    operator RAW() const { return RAW{x_}; }  \
  };
