// Tests of src/common/quant_formats.h: the e4m3 / e2m1 / UE8M0 encoders and decoders against
// hand-derived bit patterns (saturation, -0, subnormals, NaN, ties to even), exhaustive round trips
// of every code, sweeps against CUDA's own host conversions (an independent implementation of the
// same rules), and the scale rules of every quantized pattern.
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/quant_formats.h"
#include "quant_test_values.h"
#include "reference/cpu_reference.h"

namespace arf::quant {
namespace {

// Under ASan/UBSan (cmake/sanitizers.cmake) the exhaustive enumerations below take ~3 minutes of
// CI; there they run on every kSanitizedStride-th case (odd, so both bf16 and fp16 values of the
// interleaved lists stay in) and the release build of the same CI run enumerates everything.
#ifdef ARF_SANITIZED_BUILD
constexpr size_t kSanitizedStride = 17;
#else
constexpr size_t kSanitizedStride = 1;
#endif

using namespace test_values;  // quant_test_values.h

// The default rule's dynamic scales (arfFp8ScaleDivide), which most tests here use;
// test_fp8_scale_rule.cc tests the rules themselves.
float divide_scale(float amax) { return fp8_dynamic_scale(amax, Fp8ScaleRule::kDivide); }
uint8_t divide_scale_ue8m0(float amax) {
  return fp8_dynamic_scale_ue8m0(amax, Fp8ScaleRule::kDivide);
}

// Float bit patterns that exercise every rounding case of the small formats: every sign/exponent
// with the top 11 mantissa bits free (all ties of e4m3/e2m1 are among them), each one's neighbours
// one ulp away, and random patterns.
template <typename Fn>
void for_each_probe(Fn&& fn) {
  for (uint32_t i = 0; i < (1u << 20); ++i) {
    const uint32_t u = i << 12;
    fn(u);
    fn(u + 1);
    fn(u - 1);
  }
  uint64_t state = 42;
  for (int i = 0; i < (1 << 20); ++i) fn(static_cast<uint32_t>(splitmix64(&state)));
}

TEST(E4m3, HandCheckedEncodings) {
  EXPECT_EQ(encode_e4m3(0.0f), 0x00);
  EXPECT_EQ(encode_e4m3(-0.0f), 0x80);
  EXPECT_EQ(encode_e4m3(1.0f), 0x38);
  EXPECT_EQ(encode_e4m3(-1.0f), 0xB8);
  EXPECT_EQ(encode_e4m3(1.5f), 0x3C);
  EXPECT_EQ(encode_e4m3(-240.0f), 0xF7);
  EXPECT_EQ(encode_e4m3(448.0f), 0x7E);
  EXPECT_EQ(encode_e4m3(-448.0f), 0xFE);
  EXPECT_EQ(encode_e4m3(0x1p-6f), 0x08);      // smallest normal
  EXPECT_EQ(encode_e4m3(0x1p-9f), 0x01);      // smallest subnormal
  EXPECT_EQ(encode_e4m3(7 * 0x1p-9f), 0x07);  // largest subnormal
  EXPECT_EQ(encode_e4m3(-3 * 0x1p-9f), 0x83);
}

TEST(E4m3, SaturatesFiniteOverflowAndInfinity) {
  EXPECT_EQ(encode_e4m3(up(448.0f)), 0x7E);
  EXPECT_EQ(encode_e4m3(464.0f), 0x7E);  // the 448/480 tie
  EXPECT_EQ(encode_e4m3(up(464.0f)), 0x7E);
  EXPECT_EQ(encode_e4m3(480.0f), 0x7E);
  EXPECT_EQ(encode_e4m3(1e30f), 0x7E);
  EXPECT_EQ(encode_e4m3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(encode_e4m3(kInf), 0x7E);
  EXPECT_EQ(encode_e4m3(-kInf), 0xFE);
  EXPECT_EQ(encode_e4m3(-1000.0f), 0xFE);
}

TEST(E4m3, NanBecomes0x7FWhateverItsSign) {
  EXPECT_EQ(encode_e4m3(kNan), 0x7F);
  EXPECT_EQ(encode_e4m3(-kNan), 0x7F);
  EXPECT_EQ(encode_e4m3(bit_cast<float>(0x7F800001u)), 0x7F);  // signalling
  EXPECT_EQ(encode_e4m3(bit_cast<float>(0xFFFFFFFFu)), 0x7F);
  EXPECT_TRUE(std::isnan(decode_e4m3(0x7F)));
  EXPECT_TRUE(std::isnan(decode_e4m3(0xFF)));
}

TEST(E4m3, TiesGoToEven) {
  EXPECT_EQ(encode_e4m3(1.0f + 0x1p-4f), 0x38);  // 1 | 1.125: even is 1
  EXPECT_EQ(encode_e4m3(up(1.0f + 0x1p-4f)), 0x39);
  EXPECT_EQ(encode_e4m3(down(1.0f + 0x1p-4f)), 0x38);
  EXPECT_EQ(encode_e4m3(1.0f + 3 * 0x1p-4f), 0x3A);  // 1.125 | 1.25: even is 1.25
  EXPECT_EQ(encode_e4m3(432.0f), 0x7E);              // 416 | 448
  EXPECT_EQ(encode_e4m3(-432.0f), 0xFE);
  EXPECT_EQ(encode_e4m3(15 * 0x1p-10f), 0x08);  // largest subnormal | smallest normal
  EXPECT_EQ(encode_e4m3(3 * 0x1p-10f), 0x02);   // subnormal tie 1 | 2
  EXPECT_EQ(encode_e4m3(5 * 0x1p-10f), 0x02);   // subnormal tie 2 | 3
}

TEST(E4m3, UnderflowKeepsTheSign) {
  EXPECT_EQ(encode_e4m3(0x1p-10f), 0x00);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(encode_e4m3(up(0x1p-10f)), 0x01);
  EXPECT_EQ(encode_e4m3(-0x1p-10f), 0x80);
  EXPECT_EQ(encode_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(encode_e4m3(-std::numeric_limits<float>::denorm_min()), 0x80);
}

TEST(E4m3, HandCheckedDecodings) {
  EXPECT_EQ(decode_e4m3(0x38), 1.0f);
  EXPECT_EQ(decode_e4m3(0x7E), 448.0f);
  EXPECT_EQ(decode_e4m3(0xFE), -448.0f);
  EXPECT_EQ(decode_e4m3(0x01), 0x1p-9f);
  EXPECT_EQ(decode_e4m3(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(decode_e4m3(0x08), 0x1p-6f);
  EXPECT_EQ(decode_e4m3(0xF7), -240.0f);
  EXPECT_EQ(decode_e4m3(0x00), 0.0f);
  EXPECT_FALSE(std::signbit(decode_e4m3(0x00)));
  EXPECT_TRUE(std::signbit(decode_e4m3(0x80)));
}

TEST(E4m3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    if ((code & 0x7F) == 0x7F) {
      EXPECT_EQ(encode_e4m3(decode_e4m3(code)), 0x7F) << c;
    } else {
      EXPECT_EQ(encode_e4m3(decode_e4m3(code)), code) << c;
    }
  }
}

TEST(E4m3, DecodingIsMonotonicInTheCodeMagnitude) {
  // Consecutive positive codes are consecutive representable values, which is what lets the
  // reference compare codes by "steps".
  for (int c = 1; c < 0x7F; ++c) {
    EXPECT_LT(decode_e4m3(static_cast<uint8_t>(c - 1)), decode_e4m3(static_cast<uint8_t>(c))) << c;
  }
}

TEST(E4m3, MatchesCudaSatfiniteConversion) {
  int64_t mismatches = 0;
  uint32_t first = 0;
  for_each_probe([&](uint32_t u) {
    const float x = bit_cast<float>(u);
    if (encode_e4m3(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)) {
      if (mismatches++ == 0) first = u;
    }
  });
  EXPECT_EQ(mismatches, 0) << "first at float bits 0x" << std::hex << first;
}

TEST(E2m1, EveryMagnitudeAndItsNegative) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(encode_e2m1(magnitudes[c]), c);
    EXPECT_EQ(encode_e2m1(-magnitudes[c]), c | 0x8);
    EXPECT_EQ(decode_e2m1(static_cast<uint8_t>(c)), magnitudes[c]);
    EXPECT_EQ(decode_e2m1(static_cast<uint8_t>(c | 0x8)), -magnitudes[c]);
  }
  EXPECT_TRUE(std::signbit(decode_e2m1(0x8)));
  EXPECT_EQ(decode_e2m1(0xF7), 6.0f);  // the high nibble is ignored
}

TEST(E2m1, TiesGoToEven) {
  EXPECT_EQ(encode_e2m1(0.25f), 0x0);  // 0 | 0.5
  EXPECT_EQ(encode_e2m1(up(0.25f)), 0x1);
  EXPECT_EQ(encode_e2m1(0.75f), 0x2);  // 0.5 | 1
  EXPECT_EQ(encode_e2m1(down(0.75f)), 0x1);
  EXPECT_EQ(encode_e2m1(1.25f), 0x2);  // 1 | 1.5
  EXPECT_EQ(encode_e2m1(1.75f), 0x4);  // 1.5 | 2
  EXPECT_EQ(encode_e2m1(2.5f), 0x4);   // 2 | 3
  EXPECT_EQ(encode_e2m1(3.5f), 0x6);   // 3 | 4
  EXPECT_EQ(encode_e2m1(5.0f), 0x6);   // 4 | 6
  EXPECT_EQ(encode_e2m1(up(5.0f)), 0x7);
  EXPECT_EQ(encode_e2m1(-5.0f), 0xE);
}

TEST(E2m1, SaturationNanAndZeroSign) {
  EXPECT_EQ(encode_e2m1(7.0f), 0x7);
  EXPECT_EQ(encode_e2m1(1e30f), 0x7);
  EXPECT_EQ(encode_e2m1(kInf), 0x7);
  EXPECT_EQ(encode_e2m1(-kInf), 0xF);
  EXPECT_EQ(encode_e2m1(kNan), 0x7);  // no NaN in e2m1: +6, as CUDA does
  EXPECT_EQ(encode_e2m1(-kNan), 0x7);
  EXPECT_EQ(encode_e2m1(-0.0f), 0x8);
  EXPECT_EQ(encode_e2m1(-0.1f), 0x8);
  EXPECT_EQ(encode_e2m1(-std::numeric_limits<float>::denorm_min()), 0x8);
}

TEST(E2m1, EveryCodeRoundTrips) {
  for (int c = 0; c < 16; ++c) EXPECT_EQ(encode_e2m1(decode_e2m1(static_cast<uint8_t>(c))), c);
}

TEST(E2m1, MatchesCudaConversion) {
  int64_t mismatches = 0;
  uint32_t first = 0;
  for_each_probe([&](uint32_t u) {
    const float x = bit_cast<float>(u);
    if (encode_e2m1(x) != __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) {
      if (mismatches++ == 0) first = u;
    }
  });
  EXPECT_EQ(mismatches, 0) << "first at float bits 0x" << std::hex << first;
}

TEST(Ue8m0, RoundsUpToAPowerOfTwo) {
  EXPECT_EQ(encode_ue8m0_ceil(1.0f), 127);
  EXPECT_EQ(encode_ue8m0_ceil(up(1.0f)), 128);
  EXPECT_EQ(encode_ue8m0_ceil(1.5f), 128);
  EXPECT_EQ(encode_ue8m0_ceil(2.0f), 128);
  EXPECT_EQ(encode_ue8m0_ceil(0.75f), 127);
  EXPECT_EQ(encode_ue8m0_ceil(0.5f), 126);
  EXPECT_EQ(encode_ue8m0_ceil(-4.0f), 129);  // magnitude
  EXPECT_EQ(encode_ue8m0_ceil(0.0f), 0);
  EXPECT_EQ(encode_ue8m0_ceil(-0.0f), 0);
  EXPECT_EQ(encode_ue8m0_ceil(0x1p-127f), 0);
  EXPECT_EQ(encode_ue8m0_ceil(up(0x1p-127f)), 1);
  EXPECT_EQ(encode_ue8m0_ceil(0x1p-126f), 1);
  EXPECT_EQ(encode_ue8m0_ceil(0x1p-149f), 0);
  EXPECT_EQ(encode_ue8m0_ceil(0x1p127f), 254);
  EXPECT_EQ(encode_ue8m0_ceil(up(0x1p127f)), 254);  // 2^128 does not exist: saturate
  EXPECT_EQ(encode_ue8m0_ceil(kInf), 254);
  EXPECT_EQ(encode_ue8m0_ceil(kNan), 255);
}

TEST(Ue8m0, DecodeAndReciprocal) {
  EXPECT_EQ(decode_ue8m0(127), 1.0f);
  EXPECT_EQ(decode_ue8m0(0), 0x1p-127f);
  EXPECT_EQ(decode_ue8m0(254), 0x1p127f);
  EXPECT_TRUE(std::isnan(decode_ue8m0(255)));
  EXPECT_TRUE(std::isnan(ue8m0_reciprocal(255)));
  for (int e = 0; e < 255; ++e) {
    const uint8_t code = static_cast<uint8_t>(e);
    EXPECT_EQ(encode_ue8m0_ceil(decode_ue8m0(code)), code) << e;
    EXPECT_EQ(decode_ue8m0(code) * ue8m0_reciprocal(code), 1.0f) << e;
  }
}

TEST(Ue8m0, MatchesCudaRoundUpConversion) {
  int64_t mismatches = 0;
  uint32_t first = 0;
  for_each_probe([&](uint32_t u) {
    const float x = bit_cast<float>(u);
    if (encode_ue8m0_ceil(x) != __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf)) {
      if (mismatches++ == 0) first = u;
    }
  });
  EXPECT_EQ(mismatches, 0) << "first at float bits 0x" << std::hex << first;
}

// The licence quant_formats.h gives kernels: for a UE8M0 scale, x * 2^-k has the bits of x / 2^k.
TEST(Ue8m0, DividingByTheScaleEqualsMultiplyingByItsReciprocal) {
  int64_t mismatches = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    // Every bf16 value, and every fp16 value widened (fp16 subnormals are normal floats).
    const float xs[2] = {ref::bf16_to_float(static_cast<uint16_t>(h)),
                         ref::fp16_to_float(static_cast<uint16_t>(h))};
    for (const float x : xs) {
      if (std::isnan(x)) continue;
      for (int e = 0; e < 255; ++e) {
        const uint8_t code = static_cast<uint8_t>(e);
        const float q_div = div_rn(x, decode_ue8m0(code));
        const float q_mul = mul_rn(x, ue8m0_reciprocal(code));
        if (bit_cast<uint32_t>(q_div) != bit_cast<uint32_t>(q_mul)) ++mismatches;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(ScaleRules, MinFp8ScaleIsTwoToMinusNineOver448) {
  EXPECT_EQ(bit_cast<uint32_t>(kMinFp8Scale), 0x36924925u);
  volatile float smallest_subnormal = 0x1p-9f;  // computed at run time, not folded
  EXPECT_EQ(kMinFp8Scale, smallest_subnormal / 448.0f);
}

TEST(ScaleRules, Fp8DynamicScale) {
  EXPECT_EQ(divide_scale(448.0f), 1.0f);
  EXPECT_EQ(divide_scale(3.5f), 0x1p-7f);
  EXPECT_EQ(divide_scale(0.0f), kMinFp8Scale);
  EXPECT_EQ(divide_scale(0x1p-9f), kMinFp8Scale);
  EXPECT_EQ(divide_scale(0x1p-20f), kMinFp8Scale);
  EXPECT_EQ(divide_scale(up(0x1p-9f)), up(kMinFp8Scale));  // the first value above the floor
  EXPECT_EQ(divide_scale(kInf), kInf);
  // Correctly rounded amax / 448 (float division via double is exact here: 53 >= 2 * 24 + 2).
  for (const float amax : {1.0f, 3.0f, 0.1f, 65504.0f, 3e-3f, 12345.678f}) {
    EXPECT_EQ(divide_scale(amax), static_cast<float>(static_cast<double>(amax) / 448.0))
        << amax;
  }
}

TEST(ScaleRules, Fp8DynamicScaleUe8m0RoundsUp) {
  EXPECT_EQ(divide_scale_ue8m0(448.0f), 127);
  EXPECT_EQ(divide_scale_ue8m0(up(448.0f)), 128);
  EXPECT_EQ(divide_scale_ue8m0(224.0f), 126);
  EXPECT_EQ(divide_scale_ue8m0(3.5f), 120);  // exactly 2^-7
  EXPECT_EQ(divide_scale_ue8m0(4.0f), 121);  // 2^-6.8 rounds up to 2^-6
  EXPECT_EQ(divide_scale_ue8m0(0.0f), 110);  // the floor 2^-17.8 rounds up to 2^-17
  // amax / scale never exceeds 448 once the scale is rounded up.
  for (const float amax : {1.0f, 3.0f, 0.1f, 65504.0f, 1e-3f, 12345.678f, up(448.0f)}) {
    EXPECT_LE(amax / decode_ue8m0(divide_scale_ue8m0(amax)), 448.0f) << amax;
  }
}

TEST(ScaleRules, QuantizeE4m3DividesBeforeEncoding) {
  EXPECT_EQ(quantize_e4m3(3.5f, 0x1p-7f), 0x7E);
  EXPECT_EQ(quantize_e4m3(-1.0f, 0x1p-7f), 0xF0);  // -128
  EXPECT_EQ(quantize_e4m3(1000.0f, 1.0f), 0x7E);
  // Division and multiplication by a reciprocal differ: here x / s is exactly the tie between
  // codes 0x08 and 0x09 (goes to even 0x08), while x * (1 / s) lands one float ulp above it.
  const float x = 0x1.26p+0f, s = 0x1.14b4b4p+6f;
  EXPECT_EQ(quantize_e4m3(x, s), 0x08);
  EXPECT_EQ(encode_e4m3(x * (1.0f / s)), 0x09);
}

// The dynamic scales of every 61st value of xs as an amax, under each Fp8ScaleRule (the
// times-reciprocal scale only where it differs from the divide rule's).
std::vector<float> every_61st_dynamic_scale(const std::vector<float>& xs) {
  std::vector<float> scales;
  for (size_t i = 0; i < xs.size(); i += 61) {
    const float amax = std::fabs(xs[i]);
    scales.push_back(divide_scale(amax));
    const float times = fp8_dynamic_scale(amax, Fp8ScaleRule::kTimesReciprocal);
    if (bit_cast<uint32_t>(times) != bit_cast<uint32_t>(scales.back())) scales.push_back(times);
  }
  return scales;
}

// The kernels' forms of the scale rules skip dividing zeros and tiny values (the device division's
// slow path); each must give the bits of the plain rule for every input.
TEST(ScaleRules, Fp8DynamicScaleEqualsTheFlooredQuotient) {
  const auto plain = [](float amax) {
    const float s = div_rn(amax, kE4m3Max);
    return s > kMinFp8Scale ? s : kMinFp8Scale;
  };
  int64_t mismatches = 0;
  const auto check = [&](float amax) {
    if (bit_cast<uint32_t>(divide_scale(amax)) != bit_cast<uint32_t>(plain(amax)) && ++mismatches < 5) {
      ADD_FAILURE() << "amax " << amax << " (bits 0x" << std::hex << bit_cast<uint32_t>(amax) << ")";
    }
  };
  for (const float amax : every_16_bit_value()) check(amax);
  for_each_probe([&](uint32_t u) { check(bit_cast<float>(u)); });
  for (const float amax :
       {0.0f, -0.0f, 0x1p-10f, down(0x1p-10f), up(0x1p-10f), 0x1p-9f, up(0x1p-9f), kInf, kNan}) {
    check(amax);
  }
  EXPECT_EQ(mismatches, 0);
}

// The paired encoder's host form is two encode_e4m3 calls, low byte first (the device form, the
// instruction both halves of which encode_e4m3_device's exhaustive GPU check covers through its
// low half, is checked on the GPU).
TEST(E4m3, PairedEncodingIsTwoEncodings) {
  const std::vector<float> xs = every_16_bit_value();
  for (size_t i = 0; i < xs.size(); ++i) {
    const float other = xs[(i * 7919) % xs.size()];
    ASSERT_EQ(encode_e4m3x2_device(xs[i], other), encode_e4m3(xs[i]) | (encode_e4m3(other) << 8));
  }
  EXPECT_EQ(encode_e4m3x2_device(-0.0f, 448.0f), 0x7E80);
}

// Per-row reciprocal + Markstein's correction (E4m3Reciprocal) instead of x / scale for the
// dynamic scales: for each activation dtype, every amax (every non-NaN magnitude of the dtype,
// +inf included) gives a scale under the rule, and every x of the dtype with |x| <= amax, or NaN,
// must get quantize_e4m3(x, scale)'s code. Exhaustive: ~1.9e9 pairs per rule. Only quotients far
// below e4m3's smallest subnormal may differ (they round to the same signed zero), and the control
// without the correction differs in codes. Run for each Fp8ScaleRule: the exactness is this
// enumeration of the scales a rule makes (quant_formats.h), so each rule needs its own.
class E4m3ReciprocalByRule : public ::testing::TestWithParam<Fp8ScaleRule> {};

TEST_P(E4m3ReciprocalByRule, GivesTheCodesOfTheDivision) {
  const Fp8ScaleRule rule = GetParam();
  int64_t pairs = 0, code_mismatches = 0, quotient_mismatches = 0, uncorrected_mismatches = 0;
  int64_t scales_of_other_rule = 0;
  for (const bool fp16 : {false, true}) {
    std::vector<float> values, nans, magnitudes;
    for (uint32_t b = 0; b < (1u << 16); ++b) {
      const float v = fp16 ? ref::fp16_to_float(static_cast<uint16_t>(b)) : ref::bf16_to_float(static_cast<uint16_t>(b));
      (std::isnan(v) ? nans : values).push_back(v);
      if (!std::isnan(v)) magnitudes.push_back(std::fabs(v));
    }
    std::sort(values.begin(), values.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
    std::sort(magnitudes.begin(), magnitudes.end());
    // Each distinct scale with the largest amax that gives it (smaller amaxes bound fewer x).
    std::vector<std::pair<float, float>> scale_amax;
    for (const float a : magnitudes) {
      const float s = fp8_dynamic_scale(a, rule);
      const Fp8ScaleRule other =
          rule == Fp8ScaleRule::kDivide ? Fp8ScaleRule::kTimesReciprocal : Fp8ScaleRule::kDivide;
      scales_of_other_rule += bit_cast<uint32_t>(fp8_dynamic_scale(a, other)) != bit_cast<uint32_t>(s);
      if (!scale_amax.empty() && bit_cast<uint32_t>(scale_amax.back().first) == bit_cast<uint32_t>(s)) {
        scale_amax.back().second = a;
      } else {
        scale_amax.push_back({s, a});
      }
    }
    std::atomic<size_t> next{0};
    std::atomic<int64_t> n{0}, bad_code{0}, bad_q{0}, bad_plain{0};
    auto work = [&] {
      int64_t my_n = 0, my_code = 0, my_q = 0, my_plain = 0;
      for (size_t i; (i = next++) < scale_amax.size();) {
        if (i % kSanitizedStride != 0) continue;
        const auto [s, amax] = scale_amax[i];
        const E4m3Reciprocal r = e4m3_reciprocal(s);
        auto check = [&](float x) {
          ++my_n;
          const float q = e4m3_dynamic_quotient(x, r);
          const float exact = div_rn(x, s);
          if (bit_cast<uint32_t>(q) != bit_cast<uint32_t>(exact)) {
            ++my_q;
            my_code += encode_e4m3(q) != encode_e4m3(exact);
          }
          if (i % 8 == 0) my_plain += encode_e4m3(mul_rn(x, r.recip)) != encode_e4m3(exact);
        };
        for (const float x : values) {
          if (std::fabs(x) > amax) break;
          check(x);
        }
        for (const float x : nans) check(x);
      }
      n += my_n; bad_code += my_code; bad_q += my_q; bad_plain += my_plain;
    };
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(work);
    for (std::thread& t : threads) t.join();
    pairs += n; code_mismatches += bad_code; quotient_mismatches += bad_q; uncorrected_mismatches += bad_plain;
  }
  EXPECT_EQ(code_mismatches, 0);
  // every pair (a sanitized build: about 1/kSanitizedStride of them)
  EXPECT_GT(pairs, int64_t{1'800'000'000} / static_cast<int64_t>(2 * kSanitizedStride - 1));
  EXPECT_LT(quotient_mismatches, pairs / 1000);  // the tiny-quotient region only
  EXPECT_GT(uncorrected_mismatches, 0);          // the correction is what makes it exact
  EXPECT_GT(scales_of_other_rule, 10'000);       // the rules' scale sets differ: both are needed
}

INSTANTIATE_TEST_SUITE_P(ScaleRules, E4m3ReciprocalByRule,
                         ::testing::Values(Fp8ScaleRule::kDivide, Fp8ScaleRule::kTimesReciprocal),
                         [](const ::testing::TestParamInfo<Fp8ScaleRule>& info) {
                           return std::string(info.param == Fp8ScaleRule::kDivide
                                                  ? "divide"
                                                  : "times_reciprocal");
                         });

TEST(ScaleRules, E4m3ReciprocalOfAnInfiniteScale) {
  // The infinite scale of an infinite amax: x / inf is a signed zero, inf / inf NaN.
  const E4m3Reciprocal inf = e4m3_reciprocal(kInf);
  EXPECT_EQ(encode_e4m3(e4m3_dynamic_quotient(-3.0f, inf)), 0x80);
  EXPECT_EQ(encode_e4m3(e4m3_dynamic_quotient(3.0f, inf)), 0x00);
  EXPECT_EQ(encode_e4m3(e4m3_dynamic_quotient(kInf, inf)), kE4m3Nan);
  EXPECT_EQ(bit_cast<uint32_t>(e4m3_dynamic_quotient(-0.0f, e4m3_reciprocal(1.0f))), 0x80000000u);
}

TEST(ScaleRules, Nvfp4BlockScaleEqualsThePlainRule) {
  const auto plain = [](float amax, float gs) {
    Nvfp4BlockScale s;
    s.sf = encode_e4m3(mul_rn(div_rn(amax, kE2m1Max), gs));
    const float sf = decode_e4m3(s.sf);
    s.mult = sf == 0.0f ? 0.0f : div_rn(gs, sf);
    return s;
  };
  int64_t mismatches = 0;
  for (const float gs : {1.0f, 224.0f, 448.0f * 6.0f / 0.37f, 0x1p-100f, 0.0f, kInf, kNan}) {
    for (const float x : every_16_bit_value()) {
      const float amax = std::fabs(x);
      const Nvfp4BlockScale a = nvfp4_block_scale(amax, gs), b = plain(amax, gs);
      if ((a.sf != b.sf || bit_cast<uint32_t>(a.mult) != bit_cast<uint32_t>(b.mult)) && ++mismatches < 5) {
        ADD_FAILURE() << "amax " << amax << " gs " << gs;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(ScaleRules, Nvfp4BlockScale) {
  Nvfp4BlockScale s = nvfp4_block_scale(6.0f, 1.0f);
  EXPECT_EQ(s.sf, 0x38);  // 1.0
  EXPECT_EQ(s.mult, 1.0f);
  s = nvfp4_block_scale(12.0f, 1.0f);
  EXPECT_EQ(s.sf, 0x40);  // 2.0
  EXPECT_EQ(s.mult, 0.5f);
  s = nvfp4_block_scale(12.0f, 224.0f);  // gs = 448 * 6 / 12 maps this block's sf to 448
  EXPECT_EQ(s.sf, 0x7E);
  EXPECT_EQ(s.mult, 0.5f);
  s = nvfp4_block_scale(0.0f, 224.0f);
  EXPECT_EQ(s.sf, 0x00);
  EXPECT_EQ(s.mult, 0.0f);
  s = nvfp4_block_scale(1e6f, 224.0f);  // sf saturates at 448
  EXPECT_EQ(s.sf, 0x7E);
  EXPECT_EQ(s.mult, 0.5f);
  // sf rounds down (1.05 -> 1.0), so the amax element lands above 6 and saturates.
  s = nvfp4_block_scale(6.3f, 1.0f);
  EXPECT_EQ(s.sf, 0x38);
  EXPECT_EQ(quantize_e2m1(6.3f, s.mult), 0x7);
  EXPECT_EQ(quantize_e2m1(-2.9f, s.mult), 0xD);  // -3
}

TEST(ScaleRules, Mxfp4ScaleCode) {
  EXPECT_EQ(mxfp4_scale_code(6.0f), 127);  // floor(log2 6) - 2 = 0
  EXPECT_EQ(mxfp4_scale_code(4.0f), 127);
  EXPECT_EQ(mxfp4_scale_code(down(8.0f)), 127);
  EXPECT_EQ(mxfp4_scale_code(8.0f), 128);
  EXPECT_EQ(mxfp4_scale_code(down(4.0f)), 126);
  EXPECT_EQ(mxfp4_scale_code(0.75f), 124);
  EXPECT_EQ(mxfp4_scale_code(0.0f), 0);
  EXPECT_EQ(mxfp4_scale_code(0x1p-124f), 1);
  EXPECT_EQ(mxfp4_scale_code(down(0x1p-124f)), 0);
  EXPECT_EQ(mxfp4_scale_code(std::numeric_limits<float>::max()), 252);
  EXPECT_EQ(mxfp4_scale_code(kInf), 0xFF);
  // amax in [4, 8) * 2^X: 7 saturates to 6 (the spec's choice), 5 is the 4/6 tie.
  EXPECT_EQ(quantize_e2m1(7.0f, ue8m0_reciprocal(mxfp4_scale_code(7.0f))), 0x7);
  EXPECT_EQ(quantize_e2m1(0.75f, ue8m0_reciprocal(mxfp4_scale_code(0.75f))), 0x7);  // 0.75 * 8
}

TEST(AbsMax, IgnoresNanAndSign) {
  float acc = 0.0f;
  for (const float x : {1.0f, -3.0f, kNan, 2.0f, -0.0f}) acc = abs_max(acc, x);
  EXPECT_EQ(acc, 3.0f);
  EXPECT_EQ(abs_max(0.0f, -kInf), kInf);
  EXPECT_FALSE(std::signbit(abs_max(0.0f, -0.0f)));
}

}  // namespace
}  // namespace arf::quant
