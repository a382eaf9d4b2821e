// Host-side harness for the differential test of tl.cute against C++ CuTe (tests/test_cute_cpp_parity.py).
// The test writes one case per line as CASE(id, expression); each prints "id<TAB>result" with CuTe's own print.
#pragma once
#include <cute/layout.hpp>
#include <cstdio>

using namespace cute;

#define CASE(ID, ...)                 \
  do {                                \
    printf("%d\t", ID);               \
    print(__VA_ARGS__);               \
    printf("\n");                     \
  } while (0)
