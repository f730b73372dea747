// Sandwich (post-norm) calls on the GPU (arfFusedArgs_t::post_gamma): h = round(RMSNorm(sum) *
// post_gamma), residual_out = round(h + residual_in), norm_out = RMSNorm(residual_out) * gamma
// [+ quantization], at worlds 1, 2, 4, 8 (virtual ranks unless ARF_TEST_DEVICES says otherwise),
// bf16 and fp16. The checks:
//  - SandwichMatrix: every algorithm at token counts 1..2048 (odd ones included) and rows of 8 to
//    16384 columns, with and without residual_in, fp32 and 16-bit gamma, 1 + gamma, both norm
//    roundings, in place (residual_out == residual_in, norm_out == input) and not, interleaved
//    with plain residual_rmsnorm calls of the same shapes; every output against the double
//    reference within the contract (harness.h, sandwich_mismatch), across ranks bitwise, and the
//    whole batch rerun with algorithm unfused: bitwise equal (run_and_check). Data is distinct per
//    rank and call, outputs are poisoned, inputs clobbered right behind each call.
//  - SandwichQuant: the five quantized patterns at fallback levels 1, 2 and 3 (level 3 is the
//    unfused form) under the fused algorithms, with and without the norm side output: exact
//    quantization of the side output, every call of a data set bitwise equal (quant_harness.h).
//  - SandwichComposed: the sandwich equals its composition from the library's older operations:
//    residual_rmsnorm without residual and with post_gamma as gamma (its norm_out is h) at the
//    world's size, then residual_rmsnorm of h and residual_in at world 1. Bitwise, but for the sign
//    of zeros (the second call's all-reduce reads -0.0 as +0.0: arfusion.h, Numerics).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/harness.h"
#include "gpu/quant_harness.h"

namespace arf::test {
namespace {

using Param = std::tuple<int, arfDataType_t>;

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return "ws" + std::to_string(std::get<0>(info.param)) + "_" + dtype_tag(std::get<1>(info.param));
}

std::unique_ptr<World> make_world(int world_size, arfDataType_t dtype, size_t max_hidden) {
  WorldOptions options;
  options.world_size = world_size;
  options.dtype = dtype;
  options.max_tokens = 2048;
  options.max_hidden = max_hidden;
  return World::create(options);
}

// (tokens, hidden): token counts 1..2048, odd ones included, each with a row width the kernels
// treat differently (one vector a thread, two, the widest blocks; 2880 is no power of two).
constexpr std::pair<int64_t, int64_t> kShapes[] = {
    {1, 8},      {2, 16384}, {3, 4096},  {5, 136},     {17, 8192},  {64, 2880},
    {127, 1024}, {255, 4096}, {256, 7168}, {513, 2048}, {1023, 1024}, {1024, 8192},
    {1537, 4096}, {2047, 2048}, {2048, 4096}};
constexpr arfAlgorithm_t kAlgorithms[] = {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                          arfAlgoTwoshot};

class SandwichMatrix : public ::testing::TestWithParam<Param> {};

TEST_P(SandwichMatrix, MatchesTheContractAndTheUnfusedPathBitwise) {
  const auto [world_size, dtype] = GetParam();
  const std::unique_ptr<World> world = make_world(world_size, dtype, 16384);
  ASSERT_NE(world, nullptr);
  std::vector<CallSpec> specs;
  int i = 0;
  for (const auto& [tokens, hidden] : kShapes) {
    for (int j = 0; j < 2; ++j, ++i) {
      CallSpec s;
      s.post_norm = true;
      s.num_tokens = tokens;
      s.hidden = hidden;
      s.algorithm = kAlgorithms[(i + world_size) % 4];
      s.no_residual = i % 5 == 4;
      s.gamma_fp32 = (i & 1) != 0;
      s.gamma_plus_one = (i & 2) != 0;
      s.norm_rounding = (i & 4) ? arfNormRoundBeforeWeight : arfNormRoundOnce;
      s.alias = i % 3 == 0 ? (kResidualInPlace | kNormIntoInput) : i % 3 == 1 ? kResidualInPlace : kNoAlias;
      specs.push_back(s);
      if (j == 1 && i % 4 == 1) {  // a plain call right behind a sandwich one: no post-norm leaks
        CallSpec plain = s;
        plain.post_norm = false;
        specs.push_back(plain);
      }
    }
  }
  run_and_check(*world, specs);
}

INSTANTIATE_TEST_SUITE_P(Sandwich, SandwichMatrix,
                         ::testing::Combine(::testing::Values(1, 2, 4, 8),
                                            ::testing::Values(arfBFloat16, arfFloat16)),
                         param_name);

// ---- quantized tails ---------------------------------------------------------------------------

constexpr ScaleFormat kTails[] = {
    {arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor, arfScaleFp32},
    {arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor, arfScaleFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleUe8m0Packed},
    {arfPatternResidualRmsNormNvfp4, arfScaleSwizzled128x4, arfScaleFp32},
    {arfPatternResidualRmsNormMxfp4, arfScaleRowMajor, arfScaleFp32},
};
constexpr int64_t kQuantTokens[] = {1, 7, 33, 128, 255, 1023, 2048};
constexpr int64_t kQuantHidden[] = {2048, 4096, 7168};

class SandwichQuant : public ::testing::TestWithParam<Param> {};

TEST_P(SandwichQuant, EveryLevelEqualsTheUnfusedFormBitwise) {
  const auto [world_size, dtype] = GetParam();
  const std::unique_ptr<World> world = make_world(world_size, dtype, 8192);
  ASSERT_NE(world, nullptr);
  std::vector<QuantCallSpec> specs;
  size_t groups = 0;
  int k = world_size;
  for (const ScaleFormat& tail : kTails) {
    for (int g = 0; g < 2; ++g, ++k) {
      QuantCallSpec base;
      base.pattern = tail.pattern;
      base.scale_layout = tail.layout;
      base.scale_format = tail.format;
      base.post_norm = true;  // every call of the group: they share one data set and one result
      base.num_tokens = kQuantTokens[k % 7];
      base.hidden = kQuantHidden[k % 3];
      base.data_index = groups++;
      for (QuantCallSpec s : level_variants(base, kFusedAlgorithms[k % 3])) {
        s.alias = s.norm_side_output && s.fallback == arfFallbackOneKernel ? kResidualInPlace
                                                                           : kNoAlias;
        specs.push_back(s);
      }
      QuantCallSpec engine = base;  // as engines ask: auto, or algorithm unfused
      engine.algorithm = k % 2 ? arfAlgoUnfused : arfAlgoAuto;
      specs.push_back(engine);
    }
  }
  std::vector<CallData> data(groups);
  parallel_for(static_cast<int64_t>(groups), [&](int64_t d) {
    for (const QuantCallSpec& s : specs) {
      if (s.data_index != static_cast<size_t>(d)) continue;
      data[d] = make_call_data(s.data_spec(), world_size, dtype, mix_seed(test_seed(), d));
      break;
    }
  });
  const std::vector<QuantCallResult> results = run_quant_calls(*world, specs, data);
  if (::testing::Test::HasFatalFailure()) return;
  check_quant_calls(*world, specs, data, results);
}

INSTANTIATE_TEST_SUITE_P(Sandwich, SandwichQuant,
                         ::testing::Combine(::testing::Values(1, 2, 4, 8),
                                            ::testing::Values(arfBFloat16, arfFloat16)),
                         param_name);

// ---- the composition -----------------------------------------------------------------------------

// 0x8000 and 0x0000 compare equal; every other pair bitwise.
std::string first_mismatch_but_zero_sign(const std::vector<uint16_t>& got,
                                         const std::vector<uint16_t>& want, int64_t hidden,
                                         const char* what) {
  std::vector<uint16_t> a = got, b = want;
  for (uint16_t& v : a) v = v == 0x8000u ? 0 : v;
  for (uint16_t& v : b) v = v == 0x8000u ? 0 : v;
  if (a.size() != b.size()) return std::string(what) + ": sizes differ";
  return ref::first_bitwise_mismatch(a.data(), b.data(), static_cast<int64_t>(a.size()), hidden, what);
}

class SandwichComposed : public ::testing::TestWithParam<Param> {};

TEST_P(SandwichComposed, EqualsNormThenResidualNorm) {
  const auto [world_size, dtype] = GetParam();
  const std::unique_ptr<World> world = make_world(world_size, dtype, 8192);
  const std::unique_ptr<World> one = make_world(1, dtype, 8192);
  ASSERT_NE(world, nullptr);
  ASSERT_NE(one, nullptr);
  std::vector<CallSpec> sandwich;
  int i = 0;
  for (int64_t tokens : {1, 6, 129, 2047}) {
    for (int64_t hidden : {1024, 8192}) {
      CallSpec s;
      s.post_norm = true;
      s.num_tokens = tokens;
      s.hidden = hidden;
      s.algorithm = kAlgorithms[i % 4];
      s.gamma_fp32 = (i & 1) != 0;
      s.gamma_plus_one = (i & 2) != 0;
      s.norm_rounding = (i & 4) ? arfNormRoundBeforeWeight : arfNormRoundOnce;
      sandwich.push_back(s);
      ++i;
    }
  }
  const std::vector<CallData> data = make_all_call_data(sandwich, world_size, dtype, test_seed());
  RunOptions options;
  const std::vector<CallResult> fused = run_calls(*world, sandwich, data, options);
  if (::testing::Test::HasFailure()) return;

  // Step 1: h as residual_rmsnorm's norm_out, without residual, post_gamma as its gamma.
  std::vector<CallSpec> first = sandwich;
  std::vector<CallData> first_data = data;
  for (size_t c = 0; c < first.size(); ++c) {
    first[c].post_norm = false;
    first[c].no_residual = true;
    first_data[c].gamma16 = data[c].post_gamma16;
    first_data[c].gamma32 = data[c].post_gamma32;
  }
  const std::vector<CallResult> h = run_calls(*world, first, first_data, options);
  if (::testing::Test::HasFailure()) return;

  // Step 2 at world 1: residual_rmsnorm of h (rank 0's; every rank's is the same, checked) with
  // the sandwich's residual_in and gamma.
  std::vector<CallSpec> second = sandwich;
  std::vector<CallData> second_data(data.size());
  for (size_t c = 0; c < second.size(); ++c) {
    for (int r = 1; r < world_size; ++r) {
      EXPECT_EQ(ref::first_bitwise_mismatch(h[c][r].norm_out.data(), h[c][0].norm_out.data(),
                                            sandwich[c].elems(), sandwich[c].hidden, "h vs rank 0"),
                "");
    }
    second[c].post_norm = false;
    second[c].algorithm = arfAlgoAuto;
    second_data[c].inputs = {h[c][0].norm_out};
    second_data[c].residual_in = data[c].residual_in;
    second_data[c].gamma16 = data[c].gamma16;
    second_data[c].gamma32 = data[c].gamma32;
  }
  const std::vector<CallResult> composed = run_calls(*one, second, second_data, options);
  if (::testing::Test::HasFailure()) return;
  for (size_t c = 0; c < sandwich.size(); ++c) {
    SCOPED_TRACE("call " + std::to_string(c) + " [" + sandwich[c].label() + "]");
    for (int r = 0; r < world_size; ++r) {
      EXPECT_EQ(first_mismatch_but_zero_sign(fused[c][r].residual_out, composed[c][0].residual_out,
                                             sandwich[c].hidden, "residual_out"),
                "")
          << "rank " << r;
      EXPECT_EQ(first_mismatch_but_zero_sign(fused[c][r].norm_out, composed[c][0].norm_out,
                                             sandwich[c].hidden, "norm_out"),
                "")
          << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sandwich, SandwichComposed,
                         ::testing::Combine(::testing::Values(1, 2, 4, 8),
                                            ::testing::Values(arfBFloat16, arfFloat16)),
                         param_name);

}  // namespace
}  // namespace arf::test
