// Every value the soak writes or expects, as a pure function of (seed, call, rank, stream,
// index) — host+device. The generate kernel writes inputs from it, the overwrite kernel garbage,
// and the check kernel recomputes every rank's inputs from it to form the expected outputs, so no
// data set is stored anywhere and a process can check its own outputs alone (every process of an
// arfusion-run job derives every rank's inputs).
//
// Contracts:
//  - values are distinct per rank and per call (the rank and call enter the key);
//  - inputs are N(0,1)-ish (Irwin-Hall of three uniforms, exact in fp32), sometimes scaled by 8 or
//    1/16 (exact), with ~1/64 specials: +0, -0, tiny positive or negative subnormal;
//  - a row is never all zero: element i with i % 8 == 7 is never special and never zero, and
//    every legal hidden (a multiple of 8) holds whole groups of 8;
//  - residual, gamma and post_gamma of a call are one copy for all ranks (key rank kSharedRank)
//    unless the call has per-rank residual/gamma.
#pragma once

#include <cstdint>

#include "hd.h"
#include "numerics.h"

namespace arf::stress {

enum DataStream : uint32_t {
  kStreamInput = 1,
  kStreamResidual = 2,
  kStreamGamma = 3,
  kStreamGarbage = 4,
  kStreamSkew = 5,
  kStreamScaleIn = 6,
  kStreamOutputHash = 7,
  kStreamInputBuffer = 8,
  kStreamPostGamma = 9,  // a sandwich call's post_gamma: like gamma's, another stream
};

// The rank id of data every rank shares (residual, gamma, scale_in of a replicated call).
inline constexpr uint32_t kSharedRank = 0xFFFFu;

STRESS_HD inline uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Key of one (call, rank, stream); element i's hash is element_hash(base, i).
STRESS_HD inline uint64_t stream_base(uint64_t seed, uint64_t call, uint32_t rank, uint32_t stream) {
  return mix64(mix64(seed ^ mix64(call)) ^ ((static_cast<uint64_t>(rank) << 32) | stream));
}
STRESS_HD inline uint64_t element_hash(uint64_t base, uint64_t index) {
  return mix64(base ^ (index * 0xD6E8FEB86659FD93ull));
}

// The float behind a data element (before rounding to the dtype), from its hash.
STRESS_HD inline float normal_value(uint64_t h) {
  const float u1 = static_cast<float>(h & 0xFFFFu) * 0x1p-16f;
  const float u2 = static_cast<float>((h >> 16) & 0xFFFFu) * 0x1p-16f;
  const float u3 = static_cast<float>((h >> 32) & 0xFFFFu) * 0x1p-16f;
  float x = add_rn(add_rn(add_rn(u1, u2), u3), -1.5f);  // exact: multiples of 2^-16 below 4
  x = mul_rn(x, 2.0f);                                  // exact; var 1
  const uint32_t scale_sel = (h >> 48) & 7u;
  if (scale_sel == 6) x = mul_rn(x, 8.0f);
  if (scale_sel == 7) x = mul_rn(x, 0.0625f);
  return x;
}

// A 16-bit data element (input, residual, 16-bit gamma) of element index `index`.
STRESS_HD inline uint16_t data_value16(uint64_t base, uint64_t index, Act dt) {
  const uint64_t h = element_hash(base, index);
  const bool may_be_special = index % 8 != 7;
  if (may_be_special && (h >> 58) == 0) {  // 1/64
    switch ((h >> 51) & 3u) {
      case 0: return 0x0000u;
      case 1: return 0x8000u;
      case 2: return static_cast<uint16_t>(0x0001u + ((h >> 40) & 0x3Fu));  // tiny positive
      default: return static_cast<uint16_t>(0x8001u + ((h >> 40) & 0x3Fu));  // negative subnormal
    }
  }
  uint16_t bits = from_float(normal_value(h), dt);
  if (!may_be_special && (bits & 0x7FFFu) == 0) bits = from_float(0.5f, dt);
  return bits;
}

// An fp32 gamma element: the unrounded normal value (about 18 significant bits).
STRESS_HD inline float data_value32(uint64_t base, uint64_t index) {
  const uint64_t h = element_hash(base, index);
  const float x = normal_value(h);
  return x == 0.0f ? 0.5f : x;
}

// Garbage written over an input after the call: arbitrary bits (NaN patterns included), different
// per (call, rank) through `base` and per element; a late reader of the input reads these instead
// of the data (any one element equals its data value with probability 2^-16). Statistical
// quality is not needed, so one 32-bit mix (mix32, hd.h): a GPU multiplies 64-bit integers in
// several instructions, and hashing bounds the soak's rate at 8 virtual ranks. The index's high
// half (the buffers' offsets, 1 << 40 and up) enters by its own multiplier.
STRESS_HD inline uint32_t garbage_bits(uint64_t base, uint64_t index) {
  const uint32_t lo = static_cast<uint32_t>(index), hi = static_cast<uint32_t>(index >> 32);
  return mix32(static_cast<uint32_t>(base) ^ (lo * 0x9E3779B1u) ^ (hi * 0x85EBCA77u) ^
               static_cast<uint32_t>(base >> 32));
}
STRESS_HD inline uint16_t garbage16(uint64_t base, uint64_t index) {
  return static_cast<uint16_t>(garbage_bits(base, index) >> 9);
}
STRESS_HD inline uint32_t garbage32(uint64_t base, uint64_t index) { return garbage_bits(base, index); }

// The device-side delay of (call, rank) before its inputs are written, in ns: 0 .. skew_us us.
STRESS_HD inline uint64_t skew_ns(uint64_t seed, uint64_t call, uint32_t rank, uint32_t skew_us) {
  if (skew_us == 0) return 0;
  return element_hash(stream_base(seed, call, rank, kStreamSkew), 0) %
         (static_cast<uint64_t>(skew_us) * 1000u + 1u);
}

// *scale_in of a call: FP8 per-tensor dequant scale 2^-(2..7) * [1, 2) (so norm / scale spans
// e4m3's range and sometimes saturates), or the NVFP4 global scale 2^(4..10) * [1, 2). Exact
// floats, the same on every rank.
STRESS_HD inline float scale_in_value(uint64_t seed, uint64_t call, bool nvfp4) {
  const uint64_t h = element_hash(stream_base(seed, call, kSharedRank, kStreamScaleIn), 0);
  const float mant = add_rn(1.0f, static_cast<float>((h >> 8) & 0xFFu) * 0x1p-8f);
  const int e = static_cast<int>(h % 6u);
  const float pow2 = nvfp4 ? u2f(static_cast<uint32_t>(127 + 4 + e) << 23)
                           : u2f(static_cast<uint32_t>(127 - 2 - e) << 23);
  return mul_rn(mant, pow2);
}

// The rank whose residual/gamma stream a call uses.
STRESS_HD inline uint32_t shared_data_rank(bool per_rank, uint32_t rank) {
  return per_rank ? rank : kSharedRank;
}

// One output element's contribution to a call's output hash: the hash is the wrapping SUM of
// these over every output element, so CTAs may add their parts in any order and every rank with
// the same output bits gets the same 64-bit value. base = output_base(call, output id).
// Terms are distinct for distinct (index, bits) under one base: (index << 16 | bits) is injective
// for 16-bit bits (every output element is 16 bits or narrower) and index < 2^48, xor with the
// base keeps it so and mix64 is a bijection. So two outputs that differ in any element differ in
// the sum unless their term differences cancel modulo 2^64 (chance ~2^-64). One mix64 per term.
STRESS_HD inline uint64_t output_base(uint64_t call, uint32_t output) {
  return stream_base(0x6F75747075747321ull, call, output, kStreamOutputHash);
}
STRESS_HD inline uint64_t output_term(uint64_t base, uint64_t index, uint16_t bits) {
  return mix64(base ^ ((index << 16) | bits));
}

}  // namespace arf::stress
