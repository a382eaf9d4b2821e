#pragma once
// Host stand-in for cutlass/fast_math.h, which pulls in CUDA-only headers; CuTe's layout algebra only names FastDivmod.
#include "cutlass/cutlass.h"
namespace cutlass {
struct FastDivmod {
  using value_div_type = int;
  using value_mod_type = int;
  int divisor = 1;
  void operator()(int& q, int& r, int a) const { q = a / divisor; r = a % divisor; }
};
}
