// Tests of the CPU reference (src/reference): every GPU test and `bench --check` trusts it, so its
// conversions are checked against hand-derived bit patterns and exhaustively against the defining
// property of round-to-nearest-even, and its maths against rows computed by hand.
#include "reference/cpu_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "base/bit_cast.h"

namespace arf::ref {
namespace {

bool is_nan16(uint16_t bits, DType dtype) {
  const uint16_t exp_mask = dtype == DType::kFp16 ? 0x7C00 : 0x7F80;
  return (bits & exp_mask) == exp_mask && (bits & ~exp_mask & 0x7FFF) != 0;
}

TEST(ReferenceConversion, Bf16HandCheckedPatterns) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_TRUE(std::signbit(bf16_to_float(0x8000)));
  // Largest finite: (2 - 2^-7) * 2^127.
  EXPECT_EQ(bf16_to_float(0x7F7F), std::ldexp(2.0f - 0x1p-7f, 127));
  EXPECT_EQ(float_to_bf16(std::ldexp(2.0f - 0x1p-7f, 127)), 0x7F7F);
  // Smallest subnormal 2^-133 survives both ways (no flush to zero).
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(float_to_bf16(std::ldexp(1.0f, -133)), 0x0001);
  EXPECT_EQ(float_to_bf16(-std::ldexp(1.0f, -133)), 0x8001);
  // Ties to even: 1 + 2^-8 lies halfway between 0x3F80 (even) and 0x3F81.
  EXPECT_EQ(float_to_bf16(bit_cast<float>(0x3F808000u)), 0x3F80);
  EXPECT_EQ(float_to_bf16(bit_cast<float>(0x3F818000u)), 0x3F82);   // between 0x3F81 and 0x3F82 (even)
  EXPECT_EQ(float_to_bf16(bit_cast<float>(0x3F808001u)), 0x3F81);   // just above the tie
  EXPECT_EQ(float_to_bf16(bit_cast<float>(0x00008000u)), 0x0000);   // subnormal tie
  EXPECT_EQ(float_to_bf16(bit_cast<float>(0x00018000u)), 0x0002);
  // Overflow: FLT_MAX is above the tie between 0x7F7F and Inf.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(bit_cast<float>(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // NaN stays NaN, including a signalling NaN whose payload truncation would clear.
  EXPECT_TRUE(is_nan16(float_to_bf16(std::numeric_limits<float>::quiet_NaN()), DType::kBf16));
  EXPECT_TRUE(is_nan16(float_to_bf16(bit_cast<float>(0x7F800001u)), DType::kBf16));
  EXPECT_TRUE(is_nan16(float_to_bf16(bit_cast<float>(0xFF800001u)), DType::kBf16));
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7F81)));
  EXPECT_TRUE(std::isnan(bf16_to_float(0xFFFF)));
}

TEST(ReferenceConversion, Fp16HandCheckedPatterns) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp16_to_float(0x3C00), 1.0f);
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_float(0x03FF), 1023.0f * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(fp16_to_float(0x0400), 0x1p-14f);            // smallest normal
  EXPECT_EQ(float_to_fp16(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_fp16(-0x1p-24f), 0x8001);
  // Ties to even, normal and subnormal.
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(float_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(float_to_fp16(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3C01);
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000);
  EXPECT_EQ(float_to_fp16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(float_to_fp16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_fp16(1023.5f * 0x1p-24f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  // Overflow: 65520 is the tie between 65504 (odd) and Inf.
  EXPECT_EQ(float_to_fp16(65519.99f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_fp16(1e6f), 0x7C00);
  EXPECT_EQ(float_to_fp16(-1e6f), 0xFC00);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_TRUE(std::isinf(fp16_to_float(0xFC00)));
  EXPECT_TRUE(is_nan16(float_to_fp16(std::numeric_limits<float>::quiet_NaN()), DType::kFp16));
  EXPECT_TRUE(is_nan16(float_to_fp16(bit_cast<float>(0x7F800001u)), DType::kFp16));
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7C01)));
  EXPECT_TRUE(std::isnan(fp16_to_float(0xFFFF)));
}

// Every non-NaN 16-bit pattern survives to_float -> from_float.
TEST(ReferenceConversion, ExhaustiveRoundTrip) {
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    for (uint32_t b = 0; b <= 0xFFFF; ++b) {
      const uint16_t bits = static_cast<uint16_t>(b);
      const float f = to_float(bits, dtype);
      if (is_nan16(bits, dtype)) {
        ASSERT_TRUE(std::isnan(f)) << std::hex << b;
        ASSERT_TRUE(is_nan16(from_float(f, dtype), dtype)) << std::hex << b;
      } else {
        ASSERT_EQ(from_float(f, dtype), bits) << std::hex << b << " dtype " << int(dtype);
      }
    }
  }
}

// The defining property of round-to-nearest-even, for every pair of adjacent non-negative finite
// values (and Inf above the largest): the exact midpoint goes to the even pattern, anything a
// float-ulp off goes to the nearer one. Negative values mirror via the sign bit.
TEST(ReferenceConversion, ExhaustiveMidpointsRoundToEven) {
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    const uint16_t inf = dtype == DType::kFp16 ? 0x7C00 : 0x7F80;
    for (uint16_t lo = 0; lo < inf; ++lo) {
      const uint16_t hi = static_cast<uint16_t>(lo + 1);
      const double lo_v = to_float(lo, dtype);
      // Past the largest finite value, Inf behaves like the next value of the same spacing.
      const double hi_v = hi == inf ? 2 * lo_v - to_float(lo - 1, dtype) : to_float(hi, dtype);
      const float mid = static_cast<float>((lo_v + hi_v) / 2);
      ASSERT_EQ(static_cast<double>(mid), (lo_v + hi_v) / 2) << "midpoint not exact in float";
      const uint16_t even = (lo & 1) == 0 ? lo : hi;
      ASSERT_EQ(from_float(mid, dtype), even) << std::hex << lo << " dtype " << int(dtype);
      ASSERT_EQ(from_float(-mid, dtype), even | 0x8000) << std::hex << lo;
      ASSERT_EQ(from_float(std::nextafter(mid, 0.0f), dtype), lo) << std::hex << lo;
      ASSERT_EQ(from_float(std::nextafter(mid, INFINITY), dtype), hi) << std::hex << lo;
    }
  }
}

TEST(ReferenceConversion, CanonicalizeOnlyTouchesNegativeZero) {
  EXPECT_EQ(canonicalize_negative_zero(0x8000), 0x0000);
  EXPECT_EQ(canonicalize_negative_zero(0x0000), 0x0000);
  EXPECT_EQ(canonicalize_negative_zero(0x8001), 0x8001);  // negative subnormal is a real value
  EXPECT_EQ(canonicalize_negative_zero(0xBF80), 0xBF80);
  EXPECT_EQ(canonicalize_negative_zero(0xFFFF), 0xFFFF);
}

// Inputs of one rank per entry; allreduce only.
std::vector<uint16_t> reduce(const std::vector<std::vector<uint16_t>>& ranks, DType dtype) {
  FusedInputs in;
  in.dtype = dtype;
  in.num_tokens = 1;
  in.hidden = static_cast<int64_t>(ranks[0].size());
  for (const auto& r : ranks) in.rank_inputs.push_back(r.data());
  return reference_fused(in).allreduce;
}

TEST(ReferenceAllReduce, SumsInRankOrderInFp32) {
  // bf16 1, 2^-8, 2^-24, 2^-24. In rank order the two 2^-24 each tie back to 1 + 2^-8, which then
  // ties to 1.0 in bf16. Reversed, they add to 2^-23 first, the float sum is 1 + 2^-8 + 2^-23,
  // above the bf16 tie, and rounds up to 1 + 2^-7. Only a strict 0..N-1 fp32 sum gives both.
  const uint16_t one = 0x3F80, two_m8 = 0x3B80, two_m24 = 0x3380;
  EXPECT_EQ(reduce({{one}, {two_m8}, {two_m24}, {two_m24}}, DType::kBf16)[0], 0x3F80);
  EXPECT_EQ(reduce({{two_m24}, {two_m24}, {two_m8}, {one}}, DType::kBf16)[0], 0x3F81);
  // A double (or wider) accumulator would give 0x3F81 for the first order too.
}

TEST(ReferenceAllReduce, CanonicalisesZerosAndKeepsSubnormals) {
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    // -0 + -0 would be -0 without canonicalisation; x + -x is +0 anyway.
    const auto out = reduce({{0x8000, 0x3C00, 0x8001, 0x8001}, {0x8000, 0xBC00, 0x8001, 0x0001}},
                            dtype);
    EXPECT_EQ(out[0], 0x0000);
    EXPECT_EQ(out[1], 0x0000);
    EXPECT_EQ(out[2], 0x8002);  // two smallest negative subnormals, not flushed
    EXPECT_EQ(out[3], 0x0000);
  }
  // Sums whose value is a negative subnormal keep it (no flush on the way): fp16 2^-24 - 2^-23 and
  // bf16 2^-130 - 2^-133 - 2^-130, both -(smallest subnormal).
  FusedInputs in;
  in.dtype = DType::kFp16;
  in.num_tokens = 1;
  in.hidden = 1;
  const uint16_t x = float_to_fp16(0x1p-24f), y = float_to_fp16(-0x1p-23f);
  in.rank_inputs = {&x, &y};
  EXPECT_EQ(reference_fused(in).allreduce[0], 0x8001);
  const uint16_t t0 = float_to_bf16(std::ldexp(1.0f, -130)), t1 = 0x8001;
  const uint16_t t2 = float_to_bf16(-std::ldexp(1.0f, -130));
  in.dtype = DType::kBf16;
  in.rank_inputs = {&t0, &t1, &t2};
  EXPECT_EQ(reference_fused(in).allreduce[0], 0x8001);
}

// Two ranks, hidden 8, chosen so every value is exact in both dtypes:
// ar = [3,1,0,0,.5,1,0,1], residual_out = [5,1,1,1,1,1,1,1], mean square 4, rms 2.
struct HandRow {
  std::vector<float> in0 = {2, 0.5f, 1, -1, 0.25f, 3, -0.0f, 1};
  std::vector<float> in1 = {1, 0.5f, -1, 1, 0.25f, -2, -0.0f, 0};
  std::vector<float> residual = {2, 0, 1, 1, 0.5f, 0, 1, 0};
  std::vector<float> gamma = {1, 2, 0.5f, -1, 1.5f, 1, 1, 0.25f};
  std::vector<float> want_norm = {2.5f, 1, 0.25f, -0.5f, 0.75f, 0.5f, 0.5f, 0.125f};
};

std::vector<uint16_t> encode(const std::vector<float>& v, DType dtype) {
  std::vector<uint16_t> out;
  for (float f : v) out.push_back(from_float(f, dtype));
  return out;
}

class ReferenceNorm : public ::testing::TestWithParam<DType> {};

TEST_P(ReferenceNorm, HandComputedRow) {
  const DType dtype = GetParam();
  HandRow h;
  const auto in0 = encode(h.in0, dtype), in1 = encode(h.in1, dtype);
  const auto residual = encode(h.residual, dtype), gamma = encode(h.gamma, dtype);
  FusedInputs in;
  in.dtype = dtype;
  in.num_tokens = 1;
  in.hidden = 8;
  in.rank_inputs = {in0.data(), in1.data()};
  in.residual_in = residual.data();
  in.gamma = gamma.data();
  in.gamma_dtype = dtype;
  in.eps = 1e-6f;
  const FusedOutputs out = reference_fused(in);
  EXPECT_EQ(out.allreduce, encode({3, 1, 0, 0, 0.5f, 1, 0, 1}, dtype));
  EXPECT_EQ(out.allreduce[6], 0x0000);  // -0 + -0 canonicalised
  EXPECT_EQ(out.residual_out, encode({5, 1, 1, 1, 1, 1, 1, 1}, dtype));
  const double inv_rms = 1.0 / std::sqrt(4.0 + static_cast<double>(1e-6f));
  for (int c = 0; c < 8; ++c) {
    EXPECT_NEAR(out.norm_exact[c], h.want_norm[c] * 2 * inv_rms, 1e-12) << c;
  }
  EXPECT_EQ(out.norm_out, encode(h.want_norm, dtype));  // eps moves it far less than half an ulp

  // Gemma: stored gamma is gamma - 1, scaled by (1 + gamma); same result.
  std::vector<float> gemma = h.gamma;
  for (float& g : gemma) g -= 1.0f;
  const auto gemma_bits = encode(gemma, dtype);
  in.gamma = gemma_bits.data();
  in.gamma_offset = 1.0f;
  const FusedOutputs gemma_out = reference_fused(in);
  EXPECT_EQ(gemma_out.norm_out, out.norm_out);
  EXPECT_EQ(gemma_out.norm_exact, out.norm_exact);

  // fp32 gamma is used at full precision: 1 + 2^-12 is not a bf16/fp16 value.
  std::vector<float> gamma32 = h.gamma;
  gamma32[1] = 1.0f + 0x1p-12f;
  in.gamma = gamma32.data();
  in.gamma_dtype = DType::kFp32;
  in.gamma_offset = 0.0f;
  const FusedOutputs fp32_out = reference_fused(in);
  EXPECT_NEAR(fp32_out.norm_exact[1], (1.0 + 0x1p-12) * 0.5 * 2 * inv_rms, 1e-12);
  EXPECT_NEAR(fp32_out.norm_exact[0], out.norm_exact[0], 1e-15);
  EXPECT_EQ(fp32_out.norm_out[1], from_float(0.5f + 0x1p-13f, dtype));
}

// No residual (residual_in NULL, the first layer): residual_out is the all-reduce, bitwise.
TEST_P(ReferenceNorm, WithoutResidualTheResidualOutIsTheAllReduce) {
  const DType dtype = GetParam();
  HandRow h;
  const auto in0 = encode(h.in0, dtype), in1 = encode(h.in1, dtype), gamma = encode(h.gamma, dtype);
  FusedInputs in;
  in.dtype = dtype;
  in.num_tokens = 1;
  in.hidden = 8;
  in.rank_inputs = {in0.data(), in1.data()};
  in.gamma = gamma.data();
  in.gamma_dtype = dtype;
  const FusedOutputs out = reference_fused(in);
  ASSERT_EQ(out.residual_out.size(), 8u);
  EXPECT_EQ(out.residual_out, out.allreduce);
  ASSERT_EQ(out.norm_out.size(), 8u);
  // mean square of [3,1,0,0,.5,1,0,1] = 12.25/8
  const double inv_rms = 1.0 / std::sqrt(12.25 / 8 + static_cast<double>(1e-6f));
  EXPECT_NEAR(out.norm_exact[0], 3 * inv_rms * 1.0, 1e-12);
  EXPECT_TRUE(out.norm_alt.empty());  // round-once: no alternative
}

// arfNormRoundBeforeWeight: norm = round(round(y * s) * g). With y * s = 1 + 3/8 ulp... the
// intermediate rounds before the weight; the alternative takes the other neighbour.
TEST_P(ReferenceNorm, RoundBeforeWeightRoundsTheIntermediate) {
  const DType dtype = GetParam();
  const int mant = dtype == DType::kFp16 ? 10 : 7;
  const double ulp = std::ldexp(1.0, -mant);
  // One row of 8 equal values y: rms = |y|, so y * s = sign(y) * (1 - eps-term) ~ 1 - tiny. Use a
  // large eps to move y * s to 1 - 0.4 ulp(below 1) so round(y * s) = 1 exactly.
  const float y = 1.0f;
  std::vector<float> row(8, y), g(8, 1.5f);
  // s = 1/sqrt(1 + eps); choose eps with s = 1 - 0.2 ulp  =>  y*s rounds up to 1.
  const double s_want = 1.0 - 0.2 * ulp / 2;  // ulp below 1 is half of ulp above
  const float eps = static_cast<float>(1.0 / (s_want * s_want) - 1.0);
  const auto in0 = encode(row, dtype), zero = encode(std::vector<float>(8, 0.0f), dtype);
  const auto gamma = encode(g, dtype);
  FusedInputs in;
  in.dtype = dtype;
  in.num_tokens = 1;
  in.hidden = 8;
  in.rank_inputs = {in0.data(), zero.data()};
  in.residual_in = zero.data();
  in.gamma = gamma.data();
  in.gamma_dtype = dtype;
  in.eps = eps;
  const FusedOutputs once = reference_fused(in);
  in.norm_rounding = 1;
  const FusedOutputs before = reference_fused(in);
  const double s = 1.0 / std::sqrt(1.0 + static_cast<double>(eps));
  EXPECT_NEAR(once.norm_exact[0], 1.5 * s, 1e-12);
  EXPECT_EQ(before.norm_exact[0], 1.5);               // round(y * s) = 1, then * 1.5
  EXPECT_EQ(before.norm_out[0], from_float(1.5f, dtype));
  ASSERT_EQ(before.norm_alt.size(), 8u);
  EXPECT_EQ(before.norm_alt[0], 1.5 * (1.0 - ulp / 2));  // the neighbour below 1
  // The mismatch check accepts either candidate and nothing farther.
  const std::vector<uint16_t> near_other = {from_float(static_cast<float>(before.norm_alt[0]), dtype)};
  const std::vector<double> exact1 = {before.norm_exact[0]}, alt1 = {before.norm_alt[0]};
  EXPECT_FALSE(norm_within_tolerance(near_other[0], 1.5 + 4 * ulp, dtype));
  EXPECT_EQ(first_norm_mismatch(near_other.data(), exact1, 1, dtype, &alt1), "");
  const std::vector<uint16_t> far = {from_float(1.5f + 8 * static_cast<float>(ulp), dtype)};
  EXPECT_NE(first_norm_mismatch(far.data(), exact1, 1, dtype, &alt1), "");
}

TEST_P(ReferenceNorm, ResidualOutAddsResidualToTheRoundedAllReduce) {
  // 1 + half an ulp ties back to 1 in the dtype, so ar = 1 and residual_out = round(1 + half an
  // ulp) = 1. Adding the residual to the unrounded fp32 sum instead would give round(1 + ulp) =
  // 1 + ulp: the contract's early rounding is what makes fused equal to unfused.
  const DType dtype = GetParam();
  const float ulp = dtype == DType::kBf16 ? 0x1p-7f : 0x1p-10f;
  const uint16_t one = from_float(1.0f, dtype), half_ulp = from_float(ulp / 2, dtype);
  ASSERT_EQ(to_float(half_ulp, dtype), ulp / 2);
  FusedInputs in;
  in.dtype = dtype;
  in.num_tokens = 1;
  in.hidden = 1;
  in.rank_inputs = {&one, &half_ulp};
  in.residual_in = &half_ulp;
  FusedOutputs out = reference_fused(in);
  EXPECT_EQ(out.allreduce[0], one);
  EXPECT_EQ(out.residual_out[0], one);
  // And upwards: ar = round(1 + 0.75 ulp) = 1 + ulp, then 1 + 1.5 ulp ties to even 1 + 2 ulp;
  // from the unrounded sum it would be round(1 + 1.25 ulp) = 1 + ulp.
  const uint16_t three_quarters = from_float(ulp * 0.75f, dtype);
  in.rank_inputs = {&one, &three_quarters};
  in.residual_in = &half_ulp;
  out = reference_fused(in);
  EXPECT_EQ(out.allreduce[0], from_float(1.0f + ulp, dtype));
  EXPECT_EQ(out.residual_out[0], from_float(1.0f + 2 * ulp, dtype));
  // -0 residual: +0 ar plus -0 residual is +0 (IEEE), not -0.
  const uint16_t zero = 0x0000, neg_zero = 0x8000;
  in.rank_inputs = {&zero, &neg_zero};
  in.residual_in = &neg_zero;
  EXPECT_EQ(reference_fused(in).residual_out[0], 0x0000);
}

TEST_P(ReferenceNorm, AllZeroRowGivesZeroNotNan) {
  const DType dtype = GetParam();
  std::vector<uint16_t> zeros(8, 0x0000), neg_zeros(8, 0x8000);
  const auto gamma = encode({1, 2, 3, 4, 5, 6, 7, 8}, dtype);
  FusedInputs in;
  in.dtype = dtype;
  in.num_tokens = 1;
  in.hidden = 8;
  in.rank_inputs = {zeros.data(), neg_zeros.data()};
  in.residual_in = zeros.data();
  in.gamma = gamma.data();
  in.gamma_dtype = dtype;
  const FusedOutputs out = reference_fused(in);
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(out.residual_out[c], 0x0000);
    EXPECT_EQ(out.norm_out[c], 0x0000) << c;
    EXPECT_EQ(out.norm_exact[c], 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ReferenceNorm, ::testing::Values(DType::kBf16, DType::kFp16),
                         [](const auto& info) {
                           return info.param == DType::kBf16 ? "bf16" : "fp16";
                         });

TEST(ReferenceNormRows, EachRowUsesItsOwnRms) {
  // Row 1 is row 0 times 4: the norm is scale invariant, so both rows give the same norm_out.
  const auto row = encode({1, -2, 3, 0.5f, 1, 1, -1, 2, 4, -8, 12, 2, 4, 4, -4, 8}, DType::kBf16);
  const auto gamma = encode({1, 1, 1, 1, 1, 1, 1, 1}, DType::kBf16);
  FusedInputs in;
  in.num_tokens = 2;
  in.hidden = 8;
  in.rank_inputs = {row.data()};
  std::vector<uint16_t> zeros(16, 0);
  in.residual_in = zeros.data();
  in.gamma = gamma.data();
  in.eps = 0.0f;
  const FusedOutputs out = reference_fused(in);
  for (int c = 0; c < 8; ++c) EXPECT_EQ(out.norm_out[c], out.norm_out[8 + c]) << c;
}

TEST(ReferenceTolerance, OneUlpAtExactPlusTinyAbsolute) {
  // bf16 ulp at 1.0 is 2^-7.
  EXPECT_TRUE(norm_within_tolerance(0x3F80, 1.0, DType::kBf16));
  EXPECT_TRUE(norm_within_tolerance(0x3F81, 1.0, DType::kBf16));   // +1 ulp
  EXPECT_FALSE(norm_within_tolerance(0x3F82, 1.0, DType::kBf16));  // +2 ulp
  EXPECT_TRUE(norm_within_tolerance(0x3F7E, 1.0, DType::kBf16));   // -2^-7 (two half-ulps below)
  EXPECT_FALSE(norm_within_tolerance(0x3F7D, 1.0, DType::kBf16));  // -3 * 2^-8
  EXPECT_TRUE(norm_within_tolerance(0xBF81, -1.0, DType::kBf16));  // sign symmetric
  EXPECT_FALSE(norm_within_tolerance(0x3F80, -1.0, DType::kBf16));
  // fp16 ulp at 1.0 is 2^-10.
  EXPECT_TRUE(norm_within_tolerance(0x3C01, 1.0, DType::kFp16));
  EXPECT_FALSE(norm_within_tolerance(0x3C02, 1.0, DType::kFp16));
  // Near zero the 1e-6 absolute term dominates.
  EXPECT_TRUE(norm_within_tolerance(0x0000, 0.0, DType::kBf16));
  EXPECT_TRUE(norm_within_tolerance(0x8000, 0.0, DType::kBf16));
  EXPECT_TRUE(norm_within_tolerance(float_to_bf16(9e-7f), 0.0, DType::kBf16));
  EXPECT_FALSE(norm_within_tolerance(float_to_bf16(2e-6f), 0.0, DType::kBf16));
  EXPECT_TRUE(norm_within_tolerance(0x0001, 0.0, DType::kFp16));  // 6e-8
  EXPECT_FALSE(norm_within_tolerance(0x0020, 0.0, DType::kFp16));  // 1.9e-6
  // Non-finite results never pass against a finite exact value.
  EXPECT_FALSE(norm_within_tolerance(0x7FC0, 1.0, DType::kBf16));
  EXPECT_FALSE(norm_within_tolerance(0xFFFF, 1.0, DType::kFp16));
  EXPECT_FALSE(norm_within_tolerance(0x7C00, 65504.0, DType::kFp16));
  EXPECT_TRUE(norm_within_tolerance(0x7C00, INFINITY, DType::kFp16));
}

TEST(ReferenceMismatch, ReportsRowColumnAndValues) {
  std::vector<uint16_t> want = {0x3F80, 0x4000, 0x4040, 0x4080, 0x3F80, 0x4000, 0x4040, 0x4080};
  std::vector<uint16_t> got = want;
  EXPECT_EQ(first_bitwise_mismatch(got.data(), want.data(), 8, 4, "allreduce"), "");
  got[6] = 0x4041;
  got[7] = 0xFFFF;
  const std::string msg = first_bitwise_mismatch(got.data(), want.data(), 8, 4, "allreduce");
  EXPECT_NE(msg.find("allreduce"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 of 8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("row 1 col 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0x4041"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0x4040"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3.015625"), std::string::npos) << msg;  // bf16 reading of 0x4041

  std::vector<double> exact = {1, 2, 3, 4, 1, 2, 3, 4};
  EXPECT_EQ(first_norm_mismatch(want.data(), exact, 4, DType::kBf16), "");
  const std::string norm_msg = first_norm_mismatch(got.data(), exact, 4, DType::kBf16);
  EXPECT_NE(norm_msg.find("1 of 8"), std::string::npos) << norm_msg;  // 0x4041 is within 1 ulp
  EXPECT_NE(norm_msg.find("row 1 col 3"), std::string::npos) << norm_msg;
  EXPECT_NE(norm_msg.find("0xffff"), std::string::npos) << norm_msg;
}

TEST(ReferenceFillRandom, DeterministicDistinctAndNeverAllZero) {
  constexpr int64_t kCount = 1 << 16;
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    std::vector<uint16_t> a(kCount), b(kCount), c(kCount);
    fill_random(a.data(), kCount, dtype, 42);
    fill_random(b.data(), kCount, dtype, 42);
    fill_random(c.data(), kCount, dtype, 43);
    EXPECT_EQ(a, b);
    int64_t same = 0, specials = 0, neg_zero = 0, neg_subnormal = 0;
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < kCount; ++i) {
      same += a[i] == c[i];
      const float v = to_float(a[i], dtype);
      ASSERT_TRUE(std::isfinite(v)) << i;
      const bool zero = (a[i] & 0x7FFF) == 0;
      const uint16_t exp_mask = dtype == DType::kFp16 ? 0x7C00 : 0x7F80;
      const bool subnormal = !zero && (a[i] & exp_mask) == 0;
      specials += zero || subnormal;
      neg_zero += a[i] == 0x8000;
      neg_subnormal += subnormal && v < 0;
      sum += v;
      sum_sq += double(v) * v;
    }
    EXPECT_LT(same, kCount / 20) << "seeds 42 and 43 gave nearly the same data";
    EXPECT_GT(specials, kCount / 128);
    EXPECT_LT(specials, kCount / 32);
    EXPECT_GT(neg_zero, 0);
    EXPECT_GT(neg_subnormal, 0);
    EXPECT_NEAR(sum / kCount, 0.0, 0.05);
    EXPECT_NEAR(std::sqrt(sum_sq / kCount), 1.0, 0.1);
  }
  // Scale is honoured.
  std::vector<uint16_t> s(4096);
  fill_random(s.data(), 4096, DType::kBf16, 7, 0.01f);
  double max_abs = 0;
  for (uint16_t v : s) max_abs = std::max(max_abs, std::fabs(double(bf16_to_float(v))));
  EXPECT_LT(max_abs, 0.04);
  EXPECT_GT(max_abs, 0.01);
}

TEST(ReferenceFillRandom, NeverAnAllZeroRowEvenAtZeroScale) {
  // At scale 0 every ordinary draw rounds to zero, so only the guard keeps rows nonzero: each
  // ordinary element must become a smallest subnormal, and no 8-wide row may be all zero.
  constexpr int64_t kCount = 1 << 14;
  std::vector<uint16_t> data(kCount);
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    for (float scale : {0.0f, 1e-42f}) {  // 1e-42: below half of every subnormal
      fill_random(data.data(), kCount, dtype, 5, scale);
      for (int64_t row = 0; row < kCount / 8; ++row) {
        bool all_zero = true;
        for (int c = 0; c < 8; ++c) all_zero &= (data[row * 8 + c] & 0x7FFF) == 0;
        ASSERT_FALSE(all_zero) << "row " << row;
      }
      for (uint16_t v : data) ASSERT_LE(v & 0x7FFF, 0x7F) << std::hex << v;  // zero or subnormal
    }
  }
}

}  // namespace
}  // namespace arf::ref
