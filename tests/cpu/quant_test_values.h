// Values the quantization tests enumerate or draw: every bf16 and fp16 value, float neighbours,
// a seeded generator. Shared by the tests of quant_formats.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference/cpu_reference.h"

namespace arf::quant::test_values {

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

inline float up(float x) { return std::nextafter(x, kInf); }
inline float down(float x) { return std::nextafter(x, -kInf); }

inline uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Every bf16 and fp16 value (the norm's dtype values the kernels quantize) as a float, the two
// interleaved.
inline std::vector<float> every_16_bit_value() {
  std::vector<float> values;
  values.reserve(2u << 16);
  for (uint32_t b = 0; b < (1u << 16); ++b) {
    values.push_back(ref::bf16_to_float(static_cast<uint16_t>(b)));
    values.push_back(ref::fp16_to_float(static_cast<uint16_t>(b)));
  }
  return values;
}

}  // namespace arf::quant::test_values
