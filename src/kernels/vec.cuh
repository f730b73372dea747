// 16-byte vectors of 8 bf16/fp16 elements: loads, stores, fp32 conversion with the contract's
// round-to-nearest-even, and the -0.0 sentinel tests of the Lamport protocol.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "base/bit_cast.h"
#include "common/kernel_params.h"  // kNegZeroBits

namespace arf {

template <typename T>
struct DTypeOps;

template <>
struct DTypeOps<__nv_bfloat16> {
  __device__ static float to_float(uint16_t bits) {
    return bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  }
  __device__ static uint16_t from_float(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};

template <>
struct DTypeOps<__half> {
  __device__ static float to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
  __device__ static uint16_t from_float(float v) { return __half_as_ushort(__float2half_rn(v)); }
};

// Lane i (0..7) of a vector as raw bits.
__device__ __forceinline__ uint16_t lane_bits(const uint4& v, int i) {
  const uint32_t w = (i < 2) ? v.x : (i < 4) ? v.y : (i < 6) ? v.z : v.w;
  return static_cast<uint16_t>((i & 1) ? (w >> 16) : (w & 0xffffu));
}

__device__ __forceinline__ uint32_t canonical_word(uint32_t w) {
  if ((w & 0xffffu) == kNegZeroBits) w &= 0xffff0000u;
  if ((w >> 16) == kNegZeroBits) w &= 0x0000ffffu;
  return w;
}

// -0.0 -> +0.0 in every lane: pushed data must never look like the Lamport sentinel.
__device__ __forceinline__ uint4 canonicalize(uint4 v) {
  return make_uint4(canonical_word(v.x), canonical_word(v.y), canonical_word(v.z), canonical_word(v.w));
}

__device__ __forceinline__ bool word_has_neg_zero(uint32_t w) {
  return (w & 0xffffu) == kNegZeroBits || (w >> 16) == kNegZeroBits;
}
// True while any lane still holds the sentinel (lanes of one 16-byte store may land separately).
__device__ __forceinline__ bool has_neg_zero(const uint4& v) {
  return word_has_neg_zero(v.x) | word_has_neg_zero(v.y) | word_has_neg_zero(v.z) |
         word_has_neg_zero(v.w);
}

__device__ __forceinline__ uint4 neg_zero_vec() {
  const uint32_t w = (kNegZeroBits << 16) | kNegZeroBits;
  return make_uint4(w, w, w, w);
}

template <typename T>
__device__ __forceinline__ void unpack(const uint4& v, float (&f)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = DTypeOps<T>::to_float(static_cast<uint16_t>(words[i] & 0xffffu));
    f[2 * i + 1] = DTypeOps<T>::to_float(static_cast<uint16_t>(words[i] >> 16));
  }
}

template <typename T>
__device__ __forceinline__ uint4 pack(const float (&f)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    words[i] = static_cast<uint32_t>(DTypeOps<T>::from_float(f[2 * i])) |
               (static_cast<uint32_t>(DTypeOps<T>::from_float(f[2 * i + 1])) << 16);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

template <typename T>
__device__ __forceinline__ void add_to(float (&acc)[8], const uint4& v) {
  float f[8];
  unpack<T>(v, f);
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] += f[i];
}

__device__ __forceinline__ uint4 ld_v4(const void* ptr) { return *reinterpret_cast<const uint4*>(ptr); }
__device__ __forceinline__ void st_v4(void* ptr, const uint4& v) { *reinterpret_cast<uint4*>(ptr) = v; }

// Byte address of element `elem` of a 2-byte-element array.
__device__ __forceinline__ const char* elem_ptr(const void* base, int64_t elem) {
  return static_cast<const char*>(base) + elem * 2;
}
__device__ __forceinline__ char* elem_ptr(void* base, int64_t elem) {
  return static_cast<char*>(base) + elem * 2;
}

}  // namespace arf
