// The CPU reference of sandwich (post-norm) calls: h = round(RMSNorm(all-reduce) * post_gamma),
// residual_out = round(h + residual_in), norm_out = RMSNorm(residual_out) * gamma. Checked against
// a hand-computed row, for its own consistency (each stage reads the previous stage's rounded
// values, as the unfused graph does), and the contract check first_sandwich_residual_mismatch
// against an fp32 emulation of the kernels' arithmetic (must pass), against faults a kernel
// could have (must each fail) and against the contract enumerated over every 16-bit h (exactly the
// reachable residual_outs pass, with residuals that nearly cancel h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "reference/cpu_reference.h"

namespace arf::ref {
namespace {

struct Case {
  DType dtype;
  int norm_rounding;
  bool gamma_fp32;
  bool plus_one;
  bool residual;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(c.dtype == DType::kFp16 ? "fp16" : "bf16") + (c.norm_rounding ? "_round_before" : "_round_once") +
         (c.gamma_fp32 ? "_gamma32" : "_gamma16") + (c.plus_one ? "_plus_one" : "") +
         (c.residual ? "_residual" : "_no_residual");
}

// One sandwich call's host data: world ranks of [tokens, hidden] inputs, residual_in, gamma and
// post_gamma, all distinct random draws.
struct Data {
  std::vector<std::vector<uint16_t>> ranks;
  std::vector<uint16_t> residual;
  std::vector<uint16_t> gamma16, post16;
  std::vector<float> gamma32, post32;
  FusedInputs in;

  Data(const Case& c, int world, int64_t tokens, int64_t hidden, uint64_t seed) {
    ranks.resize(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      ranks[r].resize(static_cast<size_t>(tokens * hidden));
      fill_random(ranks[r].data(), tokens * hidden, c.dtype, seed * 97 + static_cast<uint64_t>(r));
      in.rank_inputs.push_back(ranks[r].data());
    }
    residual.resize(static_cast<size_t>(tokens * hidden));
    fill_random(residual.data(), tokens * hidden, c.dtype, seed * 97 + 50, 4.0f);
    gamma16.resize(static_cast<size_t>(hidden));
    post16.resize(static_cast<size_t>(hidden));
    fill_random(gamma16.data(), hidden, c.dtype, seed * 97 + 60, 0.5f);
    fill_random(post16.data(), hidden, c.dtype, seed * 97 + 61, 0.5f);
    for (int64_t i = 0; i < hidden; ++i) {
      gamma32.push_back(to_float(gamma16[i], c.dtype) * 1.0009765625f);  // not a 16-bit value
      post32.push_back(to_float(post16[i], c.dtype) * 0.9990234375f);
    }
    in.dtype = c.dtype;
    in.num_tokens = tokens;
    in.hidden = hidden;
    in.residual_in = c.residual ? residual.data() : nullptr;
    in.gamma_dtype = c.gamma_fp32 ? DType::kFp32 : c.dtype;
    in.gamma = c.gamma_fp32 ? static_cast<const void*>(gamma32.data()) : gamma16.data();
    in.post_gamma = c.gamma_fp32 ? static_cast<const void*>(post32.data()) : post16.data();
    in.gamma_offset = c.plus_one ? 1.0f : 0.0f;
    in.norm_rounding = c.norm_rounding;
  }

  float gamma_at(const void* g, int64_t col) const {
    if (in.gamma_dtype == DType::kFp32) return static_cast<const float*>(g)[col] + in.gamma_offset;
    return to_float(static_cast<const uint16_t*>(g)[col], in.dtype) + in.gamma_offset;
  }
};

// A row's norm by the kernels' arithmetic (row_epilogue.cuh), in fp32: fma sum of squares in
// column order, mean by division, 1 / sqrt(mean + eps) (the kernel's rsqrtf is within an ulp of
// it), y * s * g (or round(y * s) * g), one rounding to the dtype.
std::vector<uint16_t> fp32_norm_row(const Data& d, const void* gamma, const uint16_t* row) {
  const int64_t h = d.in.hidden;
  float sum_sq = 0.0f;
  for (int64_t c = 0; c < h; ++c) {
    const float y = to_float(row[c], d.in.dtype);
    sum_sq = std::fmaf(y, y, sum_sq);
  }
  const float s = 1.0f / std::sqrt(sum_sq / static_cast<float>(h) + d.in.eps);
  std::vector<uint16_t> out(static_cast<size_t>(h));
  for (int64_t c = 0; c < h; ++c) {
    const float y = to_float(row[c], d.in.dtype);
    float t = y * s;
    if (d.in.norm_rounding != 0) t = to_float(from_float(t, d.in.dtype), d.in.dtype);
    out[static_cast<size_t>(c)] = from_float(t * d.gamma_at(gamma, c), d.in.dtype);
  }
  return out;
}

// What a kernel writes into residual_out, emulated in fp32 with one of the faults a kernel could
// have (kNone: the contract's arithmetic).
enum class Fault { kNone, kNoPostNorm, kPostNormWithGamma, kOffByTwoUlps };

std::vector<uint16_t> emulated_residual_out(const Data& d, const FusedOutputs& ref, Fault fault) {
  const int64_t h = d.in.hidden;
  std::vector<uint16_t> out(ref.allreduce.size());
  for (int64_t row = 0; row < d.in.num_tokens; ++row) {
    const uint16_t* sum = &ref.allreduce[static_cast<size_t>(row * h)];
    std::vector<uint16_t> hrow(sum, sum + h);
    if (fault != Fault::kNoPostNorm) {
      hrow = fp32_norm_row(d, fault == Fault::kPostNormWithGamma ? d.in.gamma : d.in.post_gamma, sum);
    }
    for (int64_t c = 0; c < h; ++c) {
      const size_t i = static_cast<size_t>(row * h + c);
      uint16_t v = hrow[static_cast<size_t>(c)];
      if (d.in.residual_in != nullptr) {
        v = from_float(to_float(v, d.in.dtype) + to_float(d.in.residual_in[i], d.in.dtype), d.in.dtype);
      }
      // Two steps away from zero: beyond any neighbour the tolerance admits, for values of
      // normal magnitude (the mismatch count below needs only some elements to fail).
      if (fault == Fault::kOffByTwoUlps && (v & 0x7FFFu) != 0 && (v & 0x7FFFu) < 0x7000u) v = static_cast<uint16_t>(v + 2);
      out[i] = v;
    }
  }
  return out;
}

class SandwichReference : public ::testing::TestWithParam<Case> {};

TEST_P(SandwichReference, HandComputedRow) {
  const Case c = GetParam();
  // world 2, hidden 8: rank 0 + rank 1 = s = {2, -2, 2, -2, 2, -2, 2, -2} (exact in both dtypes),
  // mean(s^2) = 4, so h_c = s_c / sqrt(4 + eps) * (post_c + offset).
  const std::vector<float> r0 = {1.5f, -1.0f, 2.5f, -3.0f, 0.5f, -0.5f, 1.0f, -1.75f};
  std::vector<uint16_t> x0, x1, residual, gamma16, post16;
  const std::vector<float> post = {0.5f, 1.0f, -1.5f, 2.0f, 0.25f, -0.75f, 1.25f, 3.0f};
  const std::vector<float> gamma = {1.0f, 0.5f, 2.0f, -1.0f, 1.5f, 0.25f, -0.5f, 0.75f};
  for (int i = 0; i < 8; ++i) {
    const float s = i % 2 == 0 ? 2.0f : -2.0f;
    x0.push_back(from_float(r0[i], c.dtype));
    x1.push_back(from_float(s - r0[i], c.dtype));
    residual.push_back(from_float(0.125f * static_cast<float>(i + 1), c.dtype));
    gamma16.push_back(from_float(gamma[i], c.dtype));
    post16.push_back(from_float(post[i], c.dtype));
  }
  std::vector<float> gamma32(gamma), post32(post);
  FusedInputs in;
  in.dtype = c.dtype;
  in.num_tokens = 1;
  in.hidden = 8;
  in.rank_inputs = {x0.data(), x1.data()};
  in.residual_in = c.residual ? residual.data() : nullptr;
  in.gamma_dtype = c.gamma_fp32 ? DType::kFp32 : c.dtype;
  in.gamma = c.gamma_fp32 ? static_cast<const void*>(gamma32.data()) : gamma16.data();
  in.post_gamma = c.gamma_fp32 ? static_cast<const void*>(post32.data()) : post16.data();
  in.gamma_offset = c.plus_one ? 1.0f : 0.0f;
  in.norm_rounding = c.norm_rounding;
  const FusedOutputs out = reference_fused(in);
  ASSERT_EQ(out.post_norm.size(), 8u);
  const double eps = static_cast<double>(in.eps);
  const double inv_rms = 1.0 / std::sqrt(4.0 + eps);
  std::vector<double> res(8);
  for (int i = 0; i < 8; ++i) {
    const double s = i % 2 == 0 ? 2.0 : -2.0;
    const double g = static_cast<double>(post[i]) + in.gamma_offset;
    double t = s * inv_rms;
    if (c.norm_rounding) t = to_float(from_float(static_cast<float>(t), c.dtype), c.dtype);
    EXPECT_DOUBLE_EQ(out.post_norm_exact[i], t * g) << "col " << i;
    const uint16_t h = from_float(static_cast<float>(t * g), c.dtype);
    EXPECT_EQ(out.post_norm[i], h) << "col " << i;
    const float added = c.residual ? to_float(h, c.dtype) + 0.125f * static_cast<float>(i + 1) : to_float(h, c.dtype);
    EXPECT_EQ(out.residual_out[i], from_float(added, c.dtype)) << "col " << i;
    res[i] = to_float(out.residual_out[i], c.dtype);
  }
  double sum_sq = 0.0;
  for (double v : res) sum_sq += v * v;
  const double inv_rms2 = 1.0 / std::sqrt(sum_sq / 8.0 + eps);
  for (int i = 0; i < 8; ++i) {
    const double g = static_cast<double>(gamma[i]) + in.gamma_offset;
    if (c.norm_rounding) {
      const double t = to_float(from_float(static_cast<float>(res[i] * inv_rms2), c.dtype), c.dtype);
      EXPECT_DOUBLE_EQ(out.norm_exact[i], t * g) << "col " << i;
    } else {
      EXPECT_DOUBLE_EQ(out.norm_exact[i], res[i] * inv_rms2 * g) << "col " << i;
    }
  }
}

// Each stage reads the previous stage's rounded values: the residual adds to the rounded post-norm,
// and the norm is the norm of the rounded residual_out.
TEST_P(SandwichReference, StagesReadTheRoundedValuesBeforeThem) {
  const Data d(GetParam(), 4, 7, 264, 11);
  const FusedOutputs out = reference_fused(d.in);
  ASSERT_EQ(out.post_norm.size(), out.allreduce.size());
  for (size_t i = 0; i < out.allreduce.size(); ++i) {
    EXPECT_TRUE(norm_within_tolerance(out.post_norm[i], out.post_norm_exact[i], d.in.dtype)) << i;
    const float h = to_float(out.post_norm[i], d.in.dtype);
    const uint16_t want = d.in.residual_in ? from_float(h + to_float(d.in.residual_in[i], d.in.dtype), d.in.dtype)
                                           : out.post_norm[i];
    ASSERT_EQ(out.residual_out[i], want) << i;
  }
  const std::vector<double> exact = norm_exact_of(d.in, out.residual_out.data());
  EXPECT_EQ(exact, out.norm_exact);
  EXPECT_EQ(first_sandwich_residual_mismatch(d.in, out, out.residual_out.data()), "");
}

// Value order of the non-NaN 16-bit values of either dtype (sign-magnitude) as an integer: -Inf
// lowest, -0 just below +0, +Inf highest.
uint32_t order_key(uint16_t b) { return (b & 0x8000u) ? 0x7FFFu - (b & 0x7FFFu) : 0x8000u + b; }
uint16_t from_order_key(uint32_t k) {
  return k >= 0x8000u ? static_cast<uint16_t>(k - 0x8000u) : static_cast<uint16_t>(0x8000u | (0x7FFFu - k));
}
bool is_nan(uint16_t b, DType dtype) { return std::isnan(to_float(b, dtype)); }

// The residual_out values the contract allows for element i, by brute force: every one of the
// 2^16 bit patterns h that the norm rule accepts (norm_within_tolerance of the exact post-norm, or
// rounding before the weight of its alternative, as first_norm_mismatch accepts norm_out) and
// round(float(h) + float(residual_in[i])) for each (h itself without residual_in). NaN results
// count as one: any NaN matches any NaN.
struct Reachable {
  std::set<uint16_t> bits;  // non-NaN results, bitwise
  bool nan = false;
};
Reachable reachable_residuals(const FusedInputs& in, const FusedOutputs& ref, size_t i) {
  Reachable out;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const bool accepted = norm_within_tolerance(h, ref.post_norm_exact[i], in.dtype) ||
                          (!ref.post_norm_alt.empty() && norm_within_tolerance(h, ref.post_norm_alt[i], in.dtype));
    if (!accepted) continue;
    const uint16_t r = in.residual_in == nullptr
                           ? h
                           : from_float(to_float(h, in.dtype) + to_float(in.residual_in[i], in.dtype), in.dtype);
    if (is_nan(r, in.dtype)) {
      out.nan = true;
    } else {
      out.bits.insert(r);
    }
  }
  return out;
}

// Hand-worked, round once, post_gamma 1: every sum is 1.0 (0.5 + 0.5 on two ranks), so the exact
// post-norm is 1 / sqrt(1 + eps) = 1 - 5e-7. Its tolerance is one ulp at [0.5, 1) + 1e-6 (bf16
// 2^-8, fp16 2^-11), so the accepted h are 1 - ulp and 1 (1 + 2 ulp and 1 - 2 ulp lie beyond it).
// With residual_in -0.875, residual_out = 0.125 - ulp or 0.125, where the dtype's spacing is an
// eighth of h's ulp (bf16 2^-11, fp16 2^-14): the 7 values strictly between them are on no path
// from an accepted h, though they lie between the lowest and highest reachable residual_out.
void check_hand_worked_cancellation(DType dtype) {
  const double ulp = dtype == DType::kFp16 ? 0x1p-11 : 0x1p-8;
  const double spacing = ulp / 8;
  const int64_t hidden = 8;
  std::vector<uint16_t> half(hidden, from_float(0.5f, dtype)), residual(hidden, from_float(-0.875f, dtype));
  std::vector<uint16_t> post(hidden, from_float(1.0f, dtype)), gamma(hidden, from_float(1.0f, dtype));
  FusedInputs in;
  in.dtype = dtype;
  in.num_tokens = 1;
  in.hidden = hidden;
  in.rank_inputs = {half.data(), half.data()};
  in.residual_in = residual.data();
  in.gamma_dtype = dtype;
  in.gamma = gamma.data();
  in.post_gamma = post.data();
  const FusedOutputs ref = reference_fused(in);
  ASSERT_GT(ref.post_norm_exact[0], 1.0 - 1e-6);
  ASSERT_LT(ref.post_norm_exact[0], 1.0);
  ASSERT_EQ(ref.residual_out[0], from_float(0.125f, dtype));
  std::vector<uint16_t> got = ref.residual_out;
  auto passes = [&](double v) {
    got[0] = from_float(static_cast<float>(v), dtype);
    EXPECT_EQ(to_float(got[0], dtype), v) << "not a dtype value";
    return first_sandwich_residual_mismatch(in, ref, got.data()).empty();
  };
  EXPECT_TRUE(passes(0.125));
  EXPECT_TRUE(passes(0.125 - ulp));
  for (int k = 1; k < 8; ++k) EXPECT_FALSE(passes(0.125 - k * spacing)) << "0.125 - " << k << " spacings";
  EXPECT_FALSE(passes(0.125 + 2 * spacing));  // the next value up: the spacing doubles at 0.125
  EXPECT_FALSE(passes(0.125 - ulp - spacing));
  // Without residual_in residual_out is h itself: the two accepted values and nothing else.
  in.residual_in = nullptr;
  const FusedOutputs alone = reference_fused(in);
  got = alone.residual_out;
  auto passes_alone = [&](double v) {
    got[0] = from_float(static_cast<float>(v), dtype);
    return first_sandwich_residual_mismatch(in, alone, got.data()).empty();
  };
  EXPECT_TRUE(passes_alone(1.0));
  EXPECT_TRUE(passes_alone(1.0 - ulp));
  EXPECT_FALSE(passes_alone(1.0 - 2 * ulp));
  EXPECT_FALSE(passes_alone(1.0 + 2 * ulp));
}

TEST(SandwichResidualCheck, CancellationAdmitsOnlyReachableValuesBf16) {
  check_hand_worked_cancellation(DType::kBf16);
}
TEST(SandwichResidualCheck, CancellationAdmitsOnlyReachableValuesFp16) {
  check_hand_worked_cancellation(DType::kFp16);
}

// The check against the contract enumerated (reachable_residuals) element by element, with
// residuals that nearly cancel h (residual_out an eighth to a 64th of h, or h's exact negative),
// Inf in one row's sum (NaN and zero post-norms), and a NaN and an infinite residual_in: every
// reachable residual_out passes and every other value from just below the lowest reachable one to
// just above the highest fails, as do NaN and both infinities where unreachable.
TEST_P(SandwichReference, ContractCheckAcceptsExactlyTheReachableValues) {
  const Case c = GetParam();
  Data d(c, 2, 4, 8, 29);
  const DType dt = c.dtype;
  const int64_t count = d.in.num_tokens * d.in.hidden;
  const FusedOutputs first = reference_fused(d.in);
  for (int64_t i = 0; i < count; ++i) {
    const float h = to_float(first.post_norm[static_cast<size_t>(i)], dt);
    const int shift = static_cast<int>(i % 8);
    const float cancel = shift == 7 ? 1.0f : 1.0f - std::ldexp(1.0f, -(shift % 4) - 3);
    d.residual[static_cast<size_t>(i)] = from_float(-h * cancel, dt);
  }
  d.ranks[0][3 * 8 + 2] = from_float(std::numeric_limits<float>::infinity(), dt);  // row 3: sum Inf
  d.residual[5] = from_float(std::numeric_limits<float>::quiet_NaN(), dt);
  d.residual[6] = from_float(-std::numeric_limits<float>::infinity(), dt);
  const FusedOutputs ref = reference_fused(d.in);
  ASSERT_TRUE(std::isnan(ref.post_norm_exact[3 * 8 + 2]));
  const uint16_t nan_bits = from_float(std::numeric_limits<float>::quiet_NaN(), dt);
  const uint16_t pos_inf = from_float(std::numeric_limits<float>::infinity(), dt);
  const uint16_t neg_inf = from_float(-std::numeric_limits<float>::infinity(), dt);
  std::vector<uint16_t> got = ref.residual_out;
  int64_t unreachable_inside = 0;  // values between two reachable ones that are not reachable
  for (int64_t i = 0; i < count; ++i) {
    const size_t e = static_cast<size_t>(i);
    const Reachable want = reachable_residuals(d.in, ref, e);
    ASSERT_TRUE(want.nan || !want.bits.empty()) << "element " << i;
    auto passes = [&](uint16_t v) {
      got[e] = v;
      const bool ok = first_sandwich_residual_mismatch(d.in, ref, got.data()).empty();
      got[e] = ref.residual_out[e];
      return ok;
    };
    EXPECT_EQ(passes(nan_bits), want.nan) << "element " << i;
    EXPECT_EQ(passes(pos_inf), want.bits.count(pos_inf) != 0) << "element " << i;
    EXPECT_EQ(passes(neg_inf), want.bits.count(neg_inf) != 0) << "element " << i;
    if (want.bits.empty()) continue;
    uint32_t lo = order_key(*want.bits.begin()), hi = lo;
    for (uint16_t b : want.bits) lo = std::min(lo, order_key(b)), hi = std::max(hi, order_key(b));
    const uint32_t from = std::max(lo, order_key(neg_inf) + 3) - 3;
    const uint32_t to = std::min(hi + 3, order_key(pos_inf));
    for (uint32_t k = from; k <= to; ++k) {
      const uint16_t v = from_order_key(k);
      const bool reachable = want.bits.count(v) != 0;
      if (!reachable && k > lo && k < hi) ++unreachable_inside;
      ASSERT_EQ(passes(v), reachable) << "element " << i << " got 0x" << std::hex << v << " ("
                                      << to_float(v, dt) << ")" << std::dec << " exact post-norm "
                                      << ref.post_norm_exact[e];
    }
  }
  // The near-cancelling residuals put unreachable values between reachable ones: the case an
  // interval of residual_out would wrongly admit is exercised.
  if (c.residual) EXPECT_GT(unreachable_inside, 0);
}

// The kernels' fp32 arithmetic is within the contract on many rows; each fault is caught.
TEST_P(SandwichReference, ContractCheckPassesKernelArithmeticAndCatchesFaults) {
  for (int64_t hidden : {8, 136, 2048}) {
    const Data d(GetParam(), 2, 33, hidden, static_cast<uint64_t>(hidden));
    const FusedOutputs ref = reference_fused(d.in);
    const std::vector<uint16_t> good = emulated_residual_out(d, ref, Fault::kNone);
    EXPECT_EQ(first_sandwich_residual_mismatch(d.in, ref, good.data()), "") << "hidden " << hidden;
    // norm_out of that residual_out, by the kernels' arithmetic, within tolerance of its exact norm.
    std::vector<uint16_t> norm;
    for (int64_t row = 0; row < d.in.num_tokens; ++row) {
      const std::vector<uint16_t> n = fp32_norm_row(d, d.in.gamma, &good[static_cast<size_t>(row * hidden)]);
      norm.insert(norm.end(), n.begin(), n.end());
    }
    std::vector<double> alt;
    const std::vector<double> exact = norm_exact_of(d.in, good.data(), &alt);
    EXPECT_EQ(first_norm_mismatch(norm.data(), exact, hidden, d.in.dtype, d.in.norm_rounding ? &alt : nullptr), "");
    for (Fault fault : {Fault::kNoPostNorm, Fault::kPostNormWithGamma, Fault::kOffByTwoUlps}) {
      const std::vector<uint16_t> bad = emulated_residual_out(d, ref, fault);
      EXPECT_NE(first_sandwich_residual_mismatch(d.in, ref, bad.data()), "")
          << "fault " << static_cast<int>(fault) << " hidden " << hidden;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SandwichReference,
                         ::testing::Values(Case{DType::kBf16, 0, false, false, true},
                                           Case{DType::kBf16, 1, false, true, true},
                                           Case{DType::kBf16, 0, true, true, false},
                                           Case{DType::kFp16, 0, false, true, true},
                                           Case{DType::kFp16, 1, true, false, true},
                                           Case{DType::kFp16, 1, false, false, false}),
                         case_name);

TEST(SandwichReferenceOff, WithoutPostGammaNothingChanges) {
  const Case c{DType::kBf16, 0, false, false, true};
  Data d(c, 2, 5, 64, 3);
  d.in.post_gamma = nullptr;
  const FusedOutputs out = reference_fused(d.in);
  EXPECT_TRUE(out.post_norm.empty());
  EXPECT_TRUE(out.post_norm_exact.empty());
  for (size_t i = 0; i < out.allreduce.size(); ++i) {
    const float sum = to_float(out.allreduce[i], c.dtype) + to_float(d.in.residual_in[i], c.dtype);
    ASSERT_EQ(out.residual_out[i], from_float(sum, c.dtype)) << i;
  }
  EXPECT_NE(first_sandwich_residual_mismatch(d.in, out, out.residual_out.data()), "");
}

// The run's ends are met exactly: the lowest and highest allowed value pass, one step past
// either fails.
TEST(SandwichResidualCheck, IntervalEndsAreTight) {
  const Case c{DType::kBf16, 0, false, false, false};  // without a residual: the run of accepted h
  const Data d(c, 2, 1, 8, 5);
  const FusedOutputs ref = reference_fused(d.in);
  std::vector<uint16_t> got = ref.residual_out;
  // Walk element 0 up until it fails, then down until it fails: both walks are short.
  auto passes = [&](uint16_t v) {
    got[0] = v;
    return first_sandwich_residual_mismatch(d.in, ref, got.data()).empty();
  };
  auto up = [](uint16_t b) { return static_cast<uint16_t>((b & 0x8000u) ? b - 1 : b + 1); };
  auto down = [](uint16_t b) { return static_cast<uint16_t>((b & 0x8000u) ? b + 1 : b - 1); };
  ASSERT_TRUE(passes(ref.residual_out[0]));
  uint16_t v = ref.residual_out[0];
  int steps_up = 0;
  while (passes(up(v)) && steps_up < 8) v = up(v), ++steps_up;
  int steps_down = 0;
  v = ref.residual_out[0];
  while (passes(down(v)) && steps_down < 8) v = down(v), ++steps_down;
  // h's tolerance (one ulp + 1e-6) admits the neighbour across the exact value, and at most one
  // more value where the exact value sits next to a power of two.
  EXPECT_GE(steps_up + steps_down, 1);
  EXPECT_LE(steps_up + steps_down, 3);
}

}  // namespace
}  // namespace arf::ref
