#pragma once
// Host stand-ins for CUDA's vector types (only their names and alignment are used by CuTe's layout headers).
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) double2 { double x, y; };
struct alignas(16) longlong2 { long long x, y; };
struct alignas(16) ulonglong2 { unsigned long long x, y; };
struct alignas(16) long2 { long x, y; };
struct alignas(16) ulong2 { unsigned long x, y; };
struct alignas(32) long4 { long x, y, z, w; };
struct alignas(32) ulong4 { unsigned long x, y, z, w; };
struct alignas(32) longlong4 { long long x, y, z, w; };
struct alignas(32) ulonglong4 { unsigned long long x, y, z, w; };
struct alignas(32) double4 { double x, y, z, w; };
struct uint3 { unsigned x, y, z; };
