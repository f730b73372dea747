// The NaN/Inf edge-value tests of the GPU suite, checked where this can be done without a GPU
// (tests/gpu/edge_values.h): the generator puts NaN and +-Inf where it says, the CPU reference
// gives that data the semantics the GPU tests assert (NCCL's IEEE sum, then the contract's
// formulas), and the NaN-aware comparison accepts exactly what it should: any NaN where the
// reference is NaN, bit equality elsewhere, and neither poison (0xFFFF NaN, 0xFBFB finite) where
// it must not.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/edge_values.h"
#include "reference/cpu_reference.h"

namespace arf::test {
namespace {

constexpr int64_t kTokens = 8;  // every row kind twice
constexpr int64_t kHidden = 4096;

struct EdgeCall {
  std::vector<std::vector<uint16_t>> inputs;
  std::vector<uint16_t> residual, gamma;
  ref::FusedOutputs want;
};

EdgeCall make_edge_call(int world, DType dtype, uint64_t seed) {
  EdgeCall call;
  const int64_t n = kTokens * kHidden;
  ref::FusedInputs in;
  in.dtype = dtype;
  in.num_tokens = kTokens;
  in.hidden = kHidden;
  call.inputs.resize(world);
  for (int r = 0; r < world; ++r) {
    call.inputs[r].resize(n);
    ref::fill_random(call.inputs[r].data(), n, dtype, seed + 17 * r);
    sprinkle_nan_inf_input(call.inputs[r].data(), kTokens, kHidden, r, world, dtype);
    in.rank_inputs.push_back(call.inputs[r].data());
  }
  call.residual.resize(n);
  ref::fill_random(call.residual.data(), n, dtype, seed + 1001);
  sprinkle_nan_inf_residual(call.residual.data(), kTokens, kHidden, dtype);
  call.gamma.resize(kHidden);
  ref::fill_random(call.gamma.data(), kHidden, dtype, seed + 1002);
  for (uint16_t& g : call.gamma) g = ref::from_float(1.0f + 0.1f * ref::to_float(g, dtype), dtype);
  in.residual_in = call.residual.data();
  in.gamma = call.gamma.data();
  in.gamma_dtype = dtype;
  call.want = ref::reference_fused(in);
  return call;
}

using EdgeParam = std::tuple<int, DType>;

class NanInfSemantics : public ::testing::TestWithParam<EdgeParam> {};

// Each row kind, element by element, against the rules edge_values.h states.
TEST_P(NanInfSemantics, ReferenceFollowsIeeeAsNcclWould) {
  const auto [world, dtype] = GetParam();
  const EdgeCall call = make_edge_call(world, dtype, 42);
  const ref::FusedOutputs& w = call.want;
  const uint16_t pinf = inf_bits(dtype, false), ninf = inf_bits(dtype, true);
  int64_t checked_nan = 0, checked_inf = 0;
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t c = 0; c < kHidden; ++c) {
      const int64_t i = t * kHidden + c;
      const uint16_t ar = w.allreduce[i], res = w.residual_out[i];
      const double norm = w.norm_exact[i];
      SCOPED_TRACE("row " + std::to_string(t) + " col " + std::to_string(c));
      switch (nan_inf_row_kind(t)) {
        case NanInfRow::kNan:
          if (c % 61 == 5) {  // NaN on one rank: the sum is NaN
            EXPECT_TRUE(is_nan_bits(ar, dtype));
            ++checked_nan;
          }
          if (c % 61 == 30) {  // +Inf on rank 0 + finite
            EXPECT_EQ(ar, pinf);
            ++checked_inf;
          }
          if (c % 61 == 5 || c % 61 == 17) EXPECT_TRUE(is_nan_bits(res, dtype));
          EXPECT_TRUE(std::isnan(norm));  // NaN sum of squares: the whole row
          break;
        case NanInfRow::kInf: {
          EXPECT_FALSE(is_nan_bits(ar, dtype));
          EXPECT_FALSE(is_nan_bits(res, dtype));
          if (c % 53 == 7 || c % 53 == 31) EXPECT_EQ(ar, pinf);
          if (c % 53 == 19) EXPECT_EQ(ar, ninf);
          // The largest finite value on every rank: the sum overflows (fp32, or fp16's rounding).
          if (c % 53 == 47) EXPECT_EQ(ar, world > 1 ? pinf : max_finite_bits(dtype));
          if (c % 53 == 43) EXPECT_EQ(res, pinf);  // finite sum + Inf residual
          if (c % 53 == 45) EXPECT_EQ(res, ninf);
          // Inf sum of squares -> rsqrt 0: Inf elements become NaN (Inf * 0), the others +-0.
          if (is_inf_bits(res, dtype)) {
            EXPECT_TRUE(std::isnan(norm));
            ++checked_inf;
          } else {
            EXPECT_EQ(norm, 0.0);
          }
          break;
        }
        case NanInfRow::kCancel:
          if (c % 47 == 3) {  // +Inf on rank 0, -Inf on the last rank: NaN
            if (world > 1) EXPECT_TRUE(is_nan_bits(ar, dtype));
            else EXPECT_EQ(ar, pinf);
            ++checked_nan;
          }
          if (c % 47 == 20) {  // +Inf sum, -Inf residual
            EXPECT_EQ(ar, pinf);
            EXPECT_TRUE(is_nan_bits(res, dtype));
          }
          if (c % 47 == 33) EXPECT_TRUE(is_nan_bits(res, dtype));
          EXPECT_TRUE(std::isnan(norm));
          break;
        case NanInfRow::kClean:
          EXPECT_FALSE(is_nan_bits(ar, dtype) || is_inf_bits(ar, dtype));
          EXPECT_FALSE(is_nan_bits(res, dtype) || is_inf_bits(res, dtype));
          EXPECT_TRUE(std::isfinite(norm));
          break;
      }
      if (::testing::Test::HasFailure()) return;  // one element's trace is enough
    }
  }
  EXPECT_GT(checked_nan, 100);
  EXPECT_GT(checked_inf, 100);
  EXPECT_TRUE(reference_has_nan(w, dtype));
  EXPECT_GT(count_inf(w.allreduce, dtype), 0);
}

// Ordinary data never gives a NaN reference: the harness relies on it (a NaN reference would let
// norm_within_tolerance excuse a NaN-poisoned norm_out).
TEST_P(NanInfSemantics, RandomDataHasNoNanReference) {
  const auto [world, dtype] = GetParam();
  const int64_t n = kTokens * kHidden;
  std::vector<std::vector<uint16_t>> inputs(world, std::vector<uint16_t>(n));
  std::vector<uint16_t> residual(n), gamma(kHidden, ref::from_float(1.0f, dtype));
  ref::FusedInputs in;
  in.dtype = dtype;
  in.num_tokens = kTokens;
  in.hidden = kHidden;
  for (int r = 0; r < world; ++r) {
    ref::fill_random(inputs[r].data(), n, dtype, 7 + r);
    in.rank_inputs.push_back(inputs[r].data());
  }
  ref::fill_random(residual.data(), n, dtype, 99);
  in.residual_in = residual.data();
  in.gamma = gamma.data();
  in.gamma_dtype = dtype;
  EXPECT_FALSE(reference_has_nan(ref::reference_fused(in), dtype));
}

INSTANTIATE_TEST_SUITE_P(Worlds, NanInfSemantics,
                         ::testing::Combine(::testing::Values(1, 2, 8),
                                            ::testing::Values(DType::kBf16, DType::kFp16)),
                         [](const ::testing::TestParamInfo<EdgeParam>& info) {
                           return std::string(std::get<1>(info.param) == DType::kFp16 ? "fp16"
                                                                                      : "bf16") +
                                  "_ws" + std::to_string(std::get<0>(info.param));
                         });

TEST(NanAwareCompare, NanMatchesAnyNanOnlyWhereTheReferenceIsNan) {
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    for (int a = 0; a < 4; ++a) {
      for (int b = 0; b < 4; ++b) {
        EXPECT_TRUE(nan_aware_equal(nan_bits(dtype, a), nan_bits(dtype, b), dtype));
      }
      // The usual poison is a NaN: accepted where NaN is expected (hence the finite poison) ...
      EXPECT_TRUE(nan_aware_equal(0xFFFF, nan_bits(dtype, a), dtype));
      // ... but the finite poison is not.
      EXPECT_FALSE(nan_aware_equal(0xFBFB, nan_bits(dtype, a), dtype));
      EXPECT_FALSE(nan_aware_equal(inf_bits(dtype, false), nan_bits(dtype, a), dtype));
      EXPECT_FALSE(nan_aware_equal(0x3C00, nan_bits(dtype, a), dtype));
    }
    const uint16_t pinf = inf_bits(dtype, false), ninf = inf_bits(dtype, true);
    const uint16_t one = ref::from_float(1.0f, dtype);
    EXPECT_TRUE(nan_aware_equal(pinf, pinf, dtype));
    EXPECT_TRUE(nan_aware_equal(ninf, ninf, dtype));
    EXPECT_FALSE(nan_aware_equal(ninf, pinf, dtype));
    EXPECT_FALSE(nan_aware_equal(max_finite_bits(dtype), pinf, dtype));
    EXPECT_FALSE(nan_aware_equal(0xFFFF, pinf, dtype));
    EXPECT_FALSE(nan_aware_equal(0xFFFF, one, dtype));  // the NaN poison where a value is due
    EXPECT_FALSE(nan_aware_equal(0xFBFB, one, dtype));
    EXPECT_FALSE(nan_aware_equal(nan_bits(dtype, 0), one, dtype));
    EXPECT_FALSE(nan_aware_equal(0x8000, 0x0000, dtype));  // bitwise elsewhere: -0 is not +0
    EXPECT_TRUE(nan_aware_equal(one, one, dtype));
  }
}

TEST(NanAwareCompare, FinitePoisonIsFiniteAndFarFromData) {
  const uint16_t poison = static_cast<uint16_t>((kFinitePoisonByte << 8) | kFinitePoisonByte);
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    EXPECT_FALSE(is_nan_bits(poison, dtype));
    EXPECT_FALSE(is_inf_bits(poison, dtype));
    EXPECT_LT(ref::to_float(poison, dtype), -60000.0f);
  }
}

TEST(NanAwareCompare, FirstMismatchReportsCountAndPosition) {
  const DType dtype = DType::kBf16;
  const std::vector<uint16_t> want = {0x3F80, 0x7FC0, 0x7F80, 0xFF80, 0x7FC0, 0x4000};
  std::vector<uint16_t> got = {0x3F80, 0xFFFF, 0x7F80, 0xFF80, 0x7FC1, 0x4000};
  EXPECT_EQ(first_nan_aware_mismatch(got.data(), want.data(), 6, 3, dtype, "x"), "");
  got[4] = 0xFBFB;  // unwritten where NaN is due
  got[5] = 0xFFFF;  // unwritten where a value is due
  const std::string msg = first_nan_aware_mismatch(got.data(), want.data(), 6, 3, dtype, "x");
  EXPECT_NE(msg.find("2 of 6 differ"), std::string::npos) << msg;
  EXPECT_NE(msg.find("row 1 col 1"), std::string::npos) << msg;
}

// The norm comparison the GPU checks use for every content: NaN only against NaN, Inf exactly.
TEST(NanAwareCompare, NormToleranceIsNanAwareAndInfExact) {
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    const double nan = std::nan("");
    const double inf = HUGE_VAL;
    EXPECT_TRUE(ref::norm_within_tolerance(nan_bits(dtype, 1), nan, dtype));
    EXPECT_FALSE(ref::norm_within_tolerance(0xFBFB, nan, dtype));
    EXPECT_FALSE(ref::norm_within_tolerance(0xFFFF, 1.0, dtype));
    EXPECT_FALSE(ref::norm_within_tolerance(0xFBFB, 1.0, dtype));
    EXPECT_TRUE(ref::norm_within_tolerance(inf_bits(dtype, false), inf, dtype));
    EXPECT_FALSE(ref::norm_within_tolerance(max_finite_bits(dtype), inf, dtype));
    EXPECT_FALSE(ref::norm_within_tolerance(inf_bits(dtype, true), inf, dtype));
    EXPECT_TRUE(ref::norm_within_tolerance(0x8000, 0.0, dtype));  // -0 vs +0: within tolerance
  }
}

}  // namespace
}  // namespace arf::test
