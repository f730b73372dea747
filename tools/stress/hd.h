// Host+device basics of the soak: the STRESS_HD qualifier, exact float/bit conversions and a
// 32-bit mixer.
//
// Why its own copy: arfusion-stress is an OUTSIDE program. It may include only the public
// header, the CUDA runtime, the standard library, CLI11 and nlohmann-json, so nothing here comes
// from src/. Every function is integer bit manipulation or a single IEEE operation, so host code
// (CPU tests) and device code (the check kernel) compute the same bits.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STRESS_HD __host__ __device__
#else
#define STRESS_HD
#endif

namespace arf::stress {

STRESS_HD inline uint32_t f2u(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

STRESS_HD inline float u2f(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

STRESS_HD inline uint64_t d2u(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
#endif
}

// IEEE single operations that a compiler may not contract into an FMA with a neighbour.
STRESS_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
STRESS_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
STRESS_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// A 32-bit finaliser: two 32-bit multiplies, a bijection of uint32 (the soak's garbage).
STRESS_HD inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  return x ^ (x >> 16);
}

STRESS_HD inline float fabs_f(float x) { return u2f(f2u(x) & 0x7FFFFFFFu); }
STRESS_HD inline bool is_nan_f(float x) { return (f2u(x) & 0x7FFFFFFFu) > 0x7F800000u; }

}  // namespace arf::stress
