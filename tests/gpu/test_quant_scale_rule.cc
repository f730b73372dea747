// The dynamic FP8 scale rule arfFp8ScaleTimesReciprocal (amax * fp32(1/448), torch's GPU
// arithmetic) on the GPU, checked as quant_harness.h describes: quant_out and scale_out exact
// against the CPU reference quantizer (with the same rule) of the kernel's own norm; the fused
// path (levels 1 and 2, a fused algorithm) and the unfused one (level 3, and algorithm unfused)
// bitwise identical, with and without the norm side output; every rank identical.
//
// Coverage, per (dtype in {bf16, fp16}) x (world in {1, 2, 4, 8}, virtual ranks): fp8 per-token and
// fp8 per-group in row-major and MN-major with fp32, UE8M0-as-fp32 and packed UE8M0 scales; three
// shapes (4096 x 5, 7168 x 33, 2048 x 130: MN-major padding, several CTAs per rank). Each shape also
// runs once with the divide rule on a copy of its data: that the rule reaches the kernel is then
// visible: fp32 scales must differ somewhere between the two rules, and UE8M0 scales (and so every
// output) must not, since no 16-bit amax gives the two rules different power-of-two scales
// (tests/cpu/test_fp8_scale_rule.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/harness.h"
#include "gpu/quant_harness.h"

namespace arf::test {
namespace {

struct RuleFormat {
  arfPattern_t pattern;
  arfScaleLayout_t layout;
  arfScaleFormat_t format;
};

constexpr RuleFormat kRuleFormats[] = {
    {arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor, arfScaleFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor, arfScaleFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor, arfScaleUe8m0AsFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor, arfScaleUe8m0Packed},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleUe8m0AsFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleUe8m0Packed},
};

constexpr std::pair<int64_t, int64_t> kShapes[] = {{4096, 5}, {7168, 33}, {2048, 130}};
constexpr arfAlgorithm_t kFused[] = {arfAlgoOneshotLamport, arfAlgoOneshotPull, arfAlgoTwoshot};

// One shape's calls: data set 2i with the times-reciprocal rule (the anchor: auto with the norm
// side output; a fused algorithm at level 1 with it and at level 2 without; level 3 with and
// without; algorithm unfused), data set 2i + 1 (the same data) with the divide rule (auto, side
// output). Returns the index of each rule's anchor call.
std::pair<size_t, size_t> add_shape(const RuleFormat& f, int64_t hidden, int64_t tokens,
                                    size_t shape_idx, std::vector<QuantCallSpec>* specs) {
  QuantCallSpec base;
  base.pattern = f.pattern;
  base.scale_layout = f.layout;
  base.scale_format = f.format;
  base.hidden = hidden;
  base.num_tokens = tokens;
  base.scale_rule = arfFp8ScaleTimesReciprocal;
  base.data_index = 2 * shape_idx;
  const size_t anchor = specs->size();
  specs->push_back(base);
  const arfAlgorithm_t fused = kFused[shape_idx % 3];
  const std::pair<arfFallbackLevel_t, bool> levels_and_side_output[] = {
      {arfFallbackOneKernel, true}, {arfFallbackTwoKernels, false},
      {arfFallbackThreeKernels, true}, {arfFallbackThreeKernels, false}};
  for (const auto& [level, side_output] : levels_and_side_output) {
    QuantCallSpec s = base;
    s.algorithm = fused;
    s.fallback = level;
    s.norm_side_output = side_output;
    specs->push_back(s);
  }
  QuantCallSpec unfused = base;
  unfused.algorithm = arfAlgoUnfused;
  specs->push_back(unfused);
  QuantCallSpec divide = base;
  divide.scale_rule = arfFp8ScaleDivide;
  divide.data_index = 2 * shape_idx + 1;
  specs->push_back(divide);
  return {anchor, specs->size() - 1};
}

// fp32 scales (4-byte words) that differ between two scale buffers of one layout.
int64_t differing_words(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int64_t n = 0;
  for (size_t i = 0; i + 4 <= a.size() && i + 4 <= b.size(); i += 4) {
    n += std::memcmp(&a[i], &b[i], 4) != 0;
  }
  return n;
}

std::string format_text(const RuleFormat& f) {
  return std::string(arfPatternName(f.pattern)) + " layout " + std::to_string(f.layout) +
         " format " + std::to_string(f.format);
}

using RuleParam = std::tuple<arfDataType_t, int>;

class QuantScaleRule : public ::testing::TestWithParam<RuleParam> {};

TEST_P(QuantScaleRule, TimesReciprocalIsExactAndFusedEqualsUnfused) {
  const auto [dtype, world_size] = GetParam();
  WorldOptions options;
  options.world_size = world_size;
  options.dtype = dtype;
  const std::unique_ptr<World> world = World::create(options);
  ASSERT_NE(world, nullptr);
  for (size_t fi = 0; fi < sizeof(kRuleFormats) / sizeof(kRuleFormats[0]); ++fi) {
    const RuleFormat& f = kRuleFormats[fi];
    SCOPED_TRACE(format_text(f));
    std::vector<QuantCallSpec> specs;
    std::vector<std::pair<size_t, size_t>> anchors;
    std::vector<CallData> data;
    for (size_t i = 0; i < sizeof(kShapes) / sizeof(kShapes[0]); ++i) {
      const auto [hidden, tokens] = kShapes[i];
      anchors.push_back(add_shape(f, hidden, tokens, i, &specs));
      const CallData d = make_call_data(specs[anchors.back().first].data_spec(), world_size,
                                        dtype, mix_seed(test_seed(), 5000 + fi * 10 + i));
      data.push_back(d);
      data.push_back(d);  // the divide rule's twin reads the same data
    }
    const std::vector<QuantCallResult> results = run_quant_calls(*world, specs, data);
    if (::testing::Test::HasFatalFailure()) return;
    check_quant_calls(*world, specs, data, results);
    int64_t differing = 0;
    for (const auto& [times, divide] : anchors) {
      const QuantRankOutputs& a = results[times][0];
      const QuantRankOutputs& b = results[divide][0];
      EXPECT_EQ(a.norm_out, b.norm_out) << "the rule changed the norm";
      if (f.format == arfScaleFp32) {
        differing += differing_words(a.scale_out, b.scale_out);
      } else {
        EXPECT_EQ(a.scale_out, b.scale_out) << "UE8M0 scales of the two rules differ";
        EXPECT_EQ(a.quant_out, b.quant_out) << "UE8M0: equal scales, different codes";
      }
    }
    if (f.format == arfScaleFp32) {
      EXPECT_GT(differing, 0) << "the two rules gave the same fp32 scales: the rule did not reach "
                                 "the kernel";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantScaleRule,
                         ::testing::Combine(::testing::Values(arfBFloat16, arfFloat16),
                                            ::testing::Values(1, 2, 4, 8)),
                         [](const ::testing::TestParamInfo<RuleParam>& info) {
                           return std::string(dtype_tag(std::get<0>(info.param))) + "_ws" +
                                  std::to_string(std::get<1>(info.param));
                         });

// A refused rule launches nothing and leaves the communicator usable: times-reciprocal for a
// pattern without a dynamic FP8 scale, and a value outside the enum.
TEST(QuantScaleRuleErrors, RefusedRulesLaunchNothing) {
  WorldOptions options;
  options.world_size = 2;
  const std::unique_ptr<World> world = World::create(options);
  ASSERT_NE(world, nullptr);
  world->run_ranks([&](int r) {
    std::vector<DeviceBuffer> bufs;
    for (int i = 0; i < 6; ++i) bufs.emplace_back(world->device(r), 4 * 2048 * 2);
    DeviceBuffer scale_in(world->device(r), sizeof(float));
    arfFusedArgs_t a;
    arfFusedArgsInit(&a);
    a.pattern = arfPatternResidualRmsNormFp8PerTensor;
    a.num_tokens = 4;
    a.hidden = 2048;
    a.input = bufs[0].get();
    a.residual_in = bufs[1].get();
    a.gamma = bufs[2].get();
    a.residual_out = bufs[3].get();
    a.quant_out = bufs[4].get();
    a.scale_out = bufs[5].get();
    a.scale_in = static_cast<const float*>(scale_in.get());
    a.scale_rule = arfFp8ScaleTimesReciprocal;
    arfStatus_t st = arfFusedAllReduce(world->comm(r), &a, world->stream(r));
    EXPECT_EQ(st, arfInvalidArgument) << status_text(st);
    EXPECT_NE(std::string(arfGetLastErrorString()).find("applies to fp8 per-token and per-group"),
              std::string::npos);
    a.pattern = arfPatternResidualRmsNormFp8PerToken;
    const int bad = 3;
    std::memcpy(&a.scale_rule, &bad, sizeof(bad));
    st = arfFusedAllReduce(world->comm(r), &a, world->stream(r));
    EXPECT_EQ(st, arfInvalidArgument) << status_text(st);
    EXPECT_NE(std::string(arfGetLastErrorString()).find("is not a valid arfFp8ScaleRule_t"),
              std::string::npos);
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "sync");
  });
  std::vector<QuantCallSpec> specs;
  add_shape(kRuleFormats[1], 2048, 4, 0, &specs);
  const CallData d = make_call_data(specs[0].data_spec(), 2, arfBFloat16, mix_seed(test_seed(), 1));
  const std::vector<CallData> data = {d, d};
  check_quant_calls(*world, specs, data, run_quant_calls(*world, specs, data));
}

}  // namespace
}  // namespace arf::test
