// CPU tests of the soak's checker numerics (numerics.h) and data generator (data_gen.h): the
// very functions the check kernel runs, against independent brute-force references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "data_gen.h"
#include "numerics.h"

namespace arf::stress {
namespace {

// Nearest representable value among sorted finite codes (positive magnitudes), ties to the even
// code: an independent reference for the rounding tricks.
uint16_t nearest_code(float f, const std::vector<std::pair<double, uint16_t>>& table, uint16_t inf_code,
                      double overflow_at) {
  const double a = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  if (a >= overflow_at) return static_cast<uint16_t>(sign | inf_code);
  auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(a, uint16_t{0}));
  if (it == table.end()) return static_cast<uint16_t>(sign | table.back().second);
  if (it->first == a || it == table.begin()) return static_cast<uint16_t>(sign | it->second);
  const auto lo = *(it - 1), hi = *it;
  const double dl = a - lo.first, dh = hi.first - a;
  const uint16_t pick = dl < dh ? lo.second : dh < dl ? hi.second : ((lo.second & 1) ? hi.second : lo.second);
  return static_cast<uint16_t>(sign | pick);
}

std::vector<std::pair<double, uint16_t>> positive_table(Act dt) {
  std::vector<std::pair<double, uint16_t>> t;
  const uint16_t limit = dt == Act::kFp16 ? 0x7C00u : 0x7F80u;
  for (uint32_t c = 0; c < limit; ++c) t.push_back({to_float(static_cast<uint16_t>(c), dt), static_cast<uint16_t>(c)});
  return t;
}

std::vector<float> probe_floats() {
  std::vector<float> v;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 400000; ++i) v.push_back(u2f(static_cast<uint32_t>(rng()) & 0x7FFFFFFFu) * (i % 2 ? -1.f : 1.f));
  for (uint32_t c = 0; c < 0x7F80u; c += 3) {  // bf16 values, their neighbours and midpoints
    const uint32_t u = c << 16;
    for (uint32_t d : {0u, 1u, 0x7FFFu, 0x8000u, 0x8001u}) v.push_back(u2f(u + d));
  }
  for (int e = -30; e <= 17; ++e) {  // fp16 binades, incl. subnormals and the overflow edge
    for (int k = 0; k < 2048; k += 7) v.push_back(std::ldexp(1.0f + k / 2048.0f, e));
  }
  v.push_back(65504.0f);
  v.push_back(65519.99f);
  v.push_back(65520.0f);
  v.push_back(0x1p-25f);
  v.push_back(0x1.000002p-25f);
  return v;
}

TEST(StressNumerics, KnownCodes) {
  EXPECT_EQ(fp16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_float(0x0400), 0x1p-14f);
  EXPECT_TRUE(std::isinf(fp16_to_float(0x7C00)));
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
}

TEST(StressNumerics, Bf16RoundingIsNearestEven) {
  const auto table = positive_table(Act::kBf16);
  for (float f : probe_floats()) {
    if (std::isnan(f)) continue;
    const double overflow = 0x1.ffp127;  // midpoint between bf16 max (0x1.fep127) and 2^128
    ASSERT_EQ(float_to_bf16(f), nearest_code(f, table, 0x7F80u, overflow)) << std::hexfloat << f;
  }
}

TEST(StressNumerics, Fp16RoundingIsNearestEven) {
  const auto table = positive_table(Act::kFp16);
  for (float f : probe_floats()) {
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_fp16(f), nearest_code(f, table, 0x7C00u, 65520.0)) << std::hexfloat << f;
  }
}

TEST(StressNumerics, DoubleRoundsOnce) {
  // 1 + 2^-8 + 2^-30 is just above a bf16 midpoint; via float (round to nearest) it would land
  // ON the midpoint and round to even (1.0): one rounding must give 1 + 2^-7.
  EXPECT_EQ(round_double(1.0 + 0x1p-8 + 0x1p-30, Act::kBf16), float_to_bf16(1.0f + 0x1p-7f));
  EXPECT_EQ(round_double(1.0 + 0x1p-8, Act::kBf16), 0x3F80);  // exact tie: even
  EXPECT_EQ(round_double(-(1.0 + 0x1p-11 + 0x1p-40), Act::kFp16), float_to_fp16(-(1.0f + 0x1p-10f)));
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200000; ++i) {  // agrees with correctly rounded long double -> float -> dtype when no tie
    const double d = std::ldexp(static_cast<double>(rng() >> 11) * 0x1p-53 + 0.5, static_cast<int>(rng() % 40) - 20);
    const uint16_t got = round_double(d, Act::kBf16);
    const double g = bf16_to_float(got);
    const double ulp = std::ldexp(1.0, std::ilogb(g == 0 ? d : g) - 7);
    ASSERT_LE(std::fabs(g - d), ulp / 2 * (1 + 1e-12)) << d;
  }
}

TEST(StressNumerics, AllReduceRuleCanonicalises) {
  EXPECT_EQ(canonical(0x8000), 0);
  float acc = 0.0f;
  acc = sum_step(acc, 0x8000, Act::kBf16);  // -0 -> +0 before summing
  EXPECT_EQ(f2u(acc), 0u);
  // An fp16 sum that rounds to -0 is returned as +0.
  EXPECT_EQ(round_sum(-0x1p-26f, Act::kFp16), 0);
  // Rank order: fp32 addition is not associative; the rule sums 0..N-1 left to right.
  const float big = 0x1p24f;
  float a = 0.0f;
  for (float v : {big, 1.0f, 1.0f}) a = add_rn(a, v);
  EXPECT_EQ(a, big);  // (2^24 + 1) + 1 = 2^24 in fp32
  EXPECT_EQ(residual_rule(float_to_bf16(1.0f), float_to_bf16(0x1p-9f), Act::kBf16), float_to_bf16(1.0f));
  EXPECT_EQ(residual_rule(float_to_bf16(1.0f), float_to_bf16(-1.0f), Act::kBf16), 0);
}

TEST(StressNumerics, NormToleranceIsOneUlpPlusAbsolute) {
  EXPECT_TRUE(norm_within_tolerance(float_to_bf16(1.0f), 1.0, Act::kBf16));
  EXPECT_TRUE(norm_within_tolerance(float_to_bf16(1.0f + 0x1p-7f), 1.0, Act::kBf16));
  EXPECT_FALSE(norm_within_tolerance(float_to_bf16(1.0f + 0x1p-6f), 1.0, Act::kBf16));
  EXPECT_TRUE(norm_within_tolerance(float_to_fp16(1.0f + 0x1p-10f), 1.0, Act::kFp16));
  EXPECT_FALSE(norm_within_tolerance(float_to_fp16(1.0f + 0x1p-9f), 1.0, Act::kFp16));
  EXPECT_TRUE(norm_within_tolerance(0, 5e-7, Act::kBf16));   // the 1e-6 absolute slack
  EXPECT_FALSE(norm_within_tolerance(0, 1e-5, Act::kBf16));
  EXPECT_FALSE(norm_within_tolerance(0x7FC0, 1.0, Act::kBf16));  // NaN never matches a number
}

TEST(StressNumerics, NormRoundingModes) {
  const Act dt = Act::kBf16;
  const double y = 1.5, s = 0.7, g = 1.3;
  // Round once: round(y*s*g).
  EXPECT_TRUE(norm_element_ok(round_double(y * s * g, dt), y, s, g, 0, dt));
  // Before weight: round(round(y*s) * g); here y*s = 1.05 rounds to 1.046875 first.
  const double z = bf16_to_float(round_double(y * s, dt));
  EXPECT_TRUE(norm_element_ok(round_double(z * g, dt), y, s, g, 1, dt));
  // A value two ulps off is refused in both modes.
  const uint16_t off = static_cast<uint16_t>(round_double(y * s * g, dt) + 2);
  EXPECT_FALSE(norm_element_ok(off, y, s, g, 0, dt));
  EXPECT_FALSE(norm_element_ok(static_cast<uint16_t>(round_double(z * g, dt) + 2), y, s, g, 1, dt));
  // Next to an intermediate midpoint, both intermediates are accepted.
  const double mid = (1.0 + 0x1p-8) / s;  // y*s exactly on the midpoint of 1 and 1 + 2^-7
  const double gg = 3.0;
  EXPECT_TRUE(norm_element_ok(round_double(1.0 * gg, dt), mid, s, gg, 1, dt));
  EXPECT_TRUE(norm_element_ok(round_double((1.0 + 0x1p-7) * gg, dt), mid, s, gg, 1, dt));
}

// What an implementation that follows the contract in fp32 (arfusion.h, arfNormRounding_t: fp32
// sum of y^2 in column order, s = rsqrt(mean + eps) in fp32 — here perturbed by up to 2 ulps like
// a hardware rsqrt —, each product rounded in fp32) produces must pass the checker in both
// rounding modes: the checker may never raise a false alarm on a correct library.
TEST(StressNumerics, Fp32ImplementationOfTheContractPasses) {
  std::mt19937_64 rng(99);
  const float eps_choices[4] = {1e-6f, 1e-5f, 1e-3f, 0.1f};
  uint64_t checked = 0;
  for (int row = 0; row < 220; ++row) {
    const Act dt = row % 3 == 0 ? Act::kFp16 : Act::kBf16;
    const int64_t hidden = row % 4 == 0 ? 16384 : row % 4 == 1 ? 4096 : row % 4 == 2 ? 1024 : 128;
    const bool gamma_fp32 = row % 5 == 0, plus_one = row % 7 == 0;
    const float eps = eps_choices[row % 4];
    const uint64_t ybase = stream_base(1, static_cast<uint64_t>(row), 0, kStreamResidual);
    const uint64_t gbase = stream_base(1, static_cast<uint64_t>(row), 0, kStreamGamma);
    std::vector<float> y(static_cast<size_t>(hidden)), g(static_cast<size_t>(hidden)), graw(g);
    float sumsq = 0.0f;
    double exact_sumsq = 0.0;
    for (int64_t c = 0; c < hidden; ++c) {
      y[c] = to_float(data_value16(ybase, static_cast<uint64_t>(c), dt), dt);
      const float gv = gamma_fp32 ? data_value32(gbase, static_cast<uint64_t>(c))
                                  : to_float(data_value16(gbase, static_cast<uint64_t>(c), dt), dt);
      graw[c] = gv;
      g[c] = plus_one ? gv + 1.0f : gv;  // the fp32 (1 + gamma)
      sumsq += y[c] * y[c];
      exact_sumsq += static_cast<double>(y[c]) * y[c];
    }
    float s = 1.0f / std::sqrt(sumsq / static_cast<float>(hidden) + eps);
    s = u2f(f2u(s) + static_cast<uint32_t>(rng() % 5) - 2u);  // +-2 ulp
    const double s_exact = rms_scale(exact_sumsq, hidden, eps);
    for (int64_t c = 0; c < hidden; ++c) {
      const float ys = y[c] * s;
      const uint16_t once = from_float(ys * g[c], dt);
      const uint16_t before = from_float(to_float(from_float(ys, dt), dt) * g[c], dt);
      const double gd = static_cast<double>(graw[c]) + (plus_one ? 1.0 : 0.0);  // what the checker uses
      ASSERT_TRUE(norm_element_ok(once, y[c], s_exact, gd, 0, dt)) << "row " << row << " col " << c;
      ASSERT_TRUE(norm_element_ok(before, y[c], s_exact, gd, 1, dt)) << "row " << row << " col " << c;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000000u);
}

TEST(StressDataGen, DeterministicDistinctAndNeverAllZero) {
  const uint64_t b00 = stream_base(1, 0, 0, kStreamInput), b01 = stream_base(1, 0, 1, kStreamInput);
  const uint64_t b10 = stream_base(1, 1, 0, kStreamInput);
  EXPECT_EQ(b00, stream_base(1, 0, 0, kStreamInput));
  EXPECT_NE(b00, b01);
  EXPECT_NE(b00, b10);
  EXPECT_NE(b00, stream_base(2, 0, 0, kStreamInput));
  int differ_rank = 0, differ_call = 0, specials = 0, zeros_at_7 = 0;
  double sum = 0, sumsq = 0;
  const int n = 1 << 18;
  for (int i = 0; i < n; ++i) {
    const uint16_t v = data_value16(b00, static_cast<uint64_t>(i), Act::kBf16);
    differ_rank += v != data_value16(b01, static_cast<uint64_t>(i), Act::kBf16);
    differ_call += v != data_value16(b10, static_cast<uint64_t>(i), Act::kBf16);
    const float f = bf16_to_float(v);
    if ((v & 0x7FFFu) == 0 || (v & 0x7F80u) == 0) ++specials;
    if (i % 8 == 7 && (v & 0x7FFFu) == 0) ++zeros_at_7;
    sum += f;
    sumsq += static_cast<double>(f) * f;
  }
  EXPECT_GT(differ_rank, n * 9 / 10);
  EXPECT_GT(differ_call, n * 9 / 10);
  EXPECT_EQ(zeros_at_7, 0);  // every aligned group of 8 holds a nonzero value
  EXPECT_NEAR(specials / static_cast<double>(n), 1.0 / 64 * 7 / 8, 0.004);
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_GT(sumsq / n, 0.8);  // ~N(0,1) with a few x8 / x1/16 values
  EXPECT_LT(sumsq / n, 12.0);
}

TEST(StressDataGen, SkewAndScales) {
  for (uint64_t call = 0; call < 2000; ++call) {
    EXPECT_LE(skew_ns(5, call, 1, 50), 50000u);
    EXPECT_EQ(skew_ns(5, call, 1, 0), 0u);
    const float s = scale_in_value(5, call, false), g = scale_in_value(5, call, true);
    EXPECT_GE(s, 0x1p-7f);
    EXPECT_LT(s, 0.5f);
    EXPECT_GE(g, 16.0f);
    EXPECT_LT(g, 4096.0f);
  }
  EXPECT_NE(output_term(output_base(3, 0), 5, 1), output_term(output_base(3, 0), 5, 2));
  EXPECT_NE(output_term(output_base(3, 0), 5, 1), output_term(output_base(3, 1), 5, 1));
  EXPECT_NE(output_term(output_base(3, 0), 5, 1), output_term(output_base(4, 0), 5, 1));
}

// The cross-rank comparison rests on this: under one base, distinct (index, bits) give distinct
// terms, so an output differing in one element always changes the call's hash.
TEST(StressDataGen, OutputTermsAreDistinctPerIndexAndBits) {
  const uint64_t base = output_base(11, 2);
  std::set<uint64_t> seen;
  for (uint64_t index : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{65535}, uint64_t{65536},
                         uint64_t{1} << 24, (uint64_t{1} << 31) - 1}) {
    for (uint32_t bits = 0; bits < 65536; bits += 7) {
      EXPECT_TRUE(seen.insert(output_term(base, index, static_cast<uint16_t>(bits))).second)
          << "index " << index << " bits " << bits;
    }
  }
  // Neighbouring indices with the same bits, and the same index under another call's base.
  for (uint64_t index = 0; index < 200000; ++index) {
    EXPECT_NE(output_term(base, index, 0x3F80), output_term(base, index + 1, 0x3F80));
    EXPECT_NE(output_term(base, index, 0x3F80), output_term(output_base(12, 2), index, 0x3F80));
  }
}

// Garbage differs per call, per rank and per buffer (the offsets in the index's high half), and
// covers the 16-bit range, NaN patterns included.
TEST(StressDataGen, GarbageDiffersPerCallRankAndBuffer) {
  const uint64_t a = stream_base(5, 100, 0, kStreamGarbage), b = stream_base(5, 101, 0, kStreamGarbage),
                 c = stream_base(5, 100, 1, kStreamGarbage);
  int same_call = 0, same_rank = 0, same_buffer = 0, nan_bf16 = 0;
  std::set<uint16_t> values;
  const int n = 1 << 16;
  for (uint64_t i = 0; i < static_cast<uint64_t>(n); ++i) {
    const uint16_t g = garbage16(a, i);
    same_call += g == garbage16(b, i);
    same_rank += g == garbage16(c, i);
    same_buffer += g == garbage16(a, i + (uint64_t{1} << 40));
    nan_bf16 += (g & 0x7F80u) == 0x7F80u && (g & 0x7Fu) != 0;
    values.insert(g);
  }
  // Independent 16-bit values agree 1 time in 65536.
  EXPECT_LT(same_call, 8);
  EXPECT_LT(same_rank, 8);
  EXPECT_LT(same_buffer, 8);
  EXPECT_GT(values.size(), static_cast<size_t>(n) * 6 / 10);  // ~63% distinct for random draws
  EXPECT_GT(nan_bf16, n / 512);                               // ~1/256 are bf16 NaNs
  EXPECT_NE(garbage32(a, 3), garbage32(a, 3 + (uint64_t{2} << 40)));
}

}  // namespace
}  // namespace arf::stress
