// The quantized patterns on the GPU: every pattern and scale layout/format x algorithm x
// fallback level x dtype x world size, checked as quant_harness.h describes (exact against the
// reference quantizer of the kernel's own norm, all ranks identical, levels 1/2/3 and the runs
// with and without the norm side output identical to each other).
//
// Coverage, per (dtype in {bf16, fp16}) x (world in {1, 2, 4, 8}, virtual ranks), one batch per
// scale format:
//   formats: fp8 per-tensor; fp8 per-token; fp8 per-group row-major and MN-major, each with fp32,
//            UE8M0-as-fp32 and packed UE8M0 scales; nvfp4 and mxfp4, linear and 128x4-swizzled;
//   hidden:  2048, 4096, 7168, 8192, and 2880 for every format that takes it (all but per-group);
//   tokens:  two per (format, hidden), rotating through 1, 3, 4, 5, 31, 32, 33, 64, 65, 127, 128,
//            129 (MN-major padding at multiples of 4, swizzle tiles at 128, the oneshot limits of
//            worlds 4 and 8 at hidden 4096/8192) with the world size shifting the rotation;
//   per (format, hidden, tokens), on one data set: a fused algorithm (oneshot_lamport,
//            oneshot_pull, twoshot in rotation) at levels 1, 2 and 3, each with and without the
//            norm side output, plus algorithm unfused (auto level) or auto/auto in alternation.
// So every format meets every fused algorithm at every level (as level 3's inner all-reduce too),
// with and without scratch, at every world size and dtype. Not covered here: fp32 gamma, Gemma's
// 1 + gamma and aliasing with quantized patterns (the epilogue shares that code with
// residual_rmsnorm, tested in test_sequences.cc), CUDA graphs. Expected runtime on one H200:
// about a minute (about 6500 calls, mostly allocation), not yet measured.
// QuantManyRows: every format at 2000-4500 tokens (several rows per CTA) at worlds 1 and 2.
// QuantEdge (edge values): fp8 per-tensor with values near and past 448 * scale,
// per-token and per-group with the largest scales RMSNorm allows and huge input magnitudes.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/harness.h"
#include "gpu/quant_harness.h"

namespace arf::test {
namespace {

constexpr ScaleFormat kFormats[] = {
    {arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor, arfScaleFp32},
    {arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor, arfScaleFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor, arfScaleFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor, arfScaleUe8m0AsFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor, arfScaleUe8m0Packed},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleUe8m0AsFp32},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleUe8m0Packed},
    {arfPatternResidualRmsNormNvfp4, arfScaleRowMajor, arfScaleFp32},
    {arfPatternResidualRmsNormNvfp4, arfScaleSwizzled128x4, arfScaleFp32},
    {arfPatternResidualRmsNormMxfp4, arfScaleRowMajor, arfScaleFp32},
    {arfPatternResidualRmsNormMxfp4, arfScaleSwizzled128x4, arfScaleFp32},
};

constexpr int64_t kTokens[] = {1, 3, 4, 5, 31, 32, 33, 64, 65, 127, 128, 129};
constexpr int kNumTokens = sizeof(kTokens) / sizeof(kTokens[0]);

std::vector<int64_t> hidden_sizes(arfPattern_t pattern) {
  // 16384: blocks of 1024 threads at 2 vectors each (the widest rows).
  if (pattern == arfPatternResidualRmsNormFp8PerGroup) return {2048, 4096, 7168, 8192, 16384};
  return {2048, 2880, 4096, 7168, 8192, 16384};
}

// One batch: every (hidden, tokens) case of one scale format, each case a group of calls on one
// data set (quant_harness.h). `rotation` shifts token counts and algorithms between batches.
std::vector<QuantCallSpec> format_specs(const ScaleFormat& f, int rotation) {
  std::vector<QuantCallSpec> specs;
  size_t data_index = 0;
  int k = rotation;
  for (int64_t hidden : hidden_sizes(f.pattern)) {
    for (int i = 0; i < 2; ++i, ++k) {
      QuantCallSpec base;
      base.pattern = f.pattern;
      base.scale_layout = f.layout;
      base.scale_format = f.format;
      base.hidden = hidden;
      base.num_tokens = kTokens[(2 * k + i) % kNumTokens];
      base.data_index = data_index++;
      for (const QuantCallSpec& s : level_variants(base, kFusedAlgorithms[k % 3])) {
        specs.push_back(s);
      }
      QuantCallSpec extra = base;  // the unfused path as engines ask for it, or the default
      extra.algorithm = k % 2 ? arfAlgoUnfused : arfAlgoAuto;
      extra.norm_side_output = k % 4 < 2;
      specs.push_back(extra);
    }
  }
  return specs;
}

std::string format_text(const ScaleFormat& f) {
  return std::string(arfPatternName(f.pattern)) + " layout " + std::to_string(f.layout) +
         " format " + std::to_string(f.format);
}

using QuantParam = std::tuple<arfDataType_t, int>;

std::string quant_param_name(const ::testing::TestParamInfo<QuantParam>& info) {
  return std::string(dtype_tag(std::get<0>(info.param))) + "_ws" + std::to_string(std::get<1>(info.param));
}

class QuantMatrix : public ::testing::TestWithParam<QuantParam> {};

TEST_P(QuantMatrix, EveryFormatAlgorithmAndLevel) {
  const auto [dtype, world_size] = GetParam();
  WorldOptions options;
  options.world_size = world_size;
  options.dtype = dtype;
  options.max_hidden = 16384;
  const std::unique_ptr<World> world = World::create(options);
  ASSERT_NE(world, nullptr);
  int rotation = world_size;
  for (size_t f = 0; f < sizeof(kFormats) / sizeof(kFormats[0]); ++f, rotation += 5) {
    SCOPED_TRACE(format_text(kFormats[f]));
    const std::vector<QuantCallSpec> specs = format_specs(kFormats[f], rotation);
    std::vector<CallData> data;
    for (const QuantCallSpec& s : specs) {
      if (s.data_index == data.size()) data.emplace_back();
    }
    parallel_for(static_cast<int64_t>(data.size()), [&](int64_t d) {
      for (const QuantCallSpec& s : specs) {
        if (s.data_index != static_cast<size_t>(d)) continue;
        data[d] =
            make_call_data(s.data_spec(), world_size, dtype, mix_seed(test_seed(), f * 1000 + d));
        break;
      }
    });
    const std::vector<QuantCallResult> results = run_quant_calls(*world, specs, data);
    if (::testing::Test::HasFatalFailure()) return;
    check_quant_calls(*world, specs, data, results);
  }
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantMatrix,
                         ::testing::Combine(::testing::Values(arfBFloat16, arfFloat16),
                                            ::testing::Values(1, 2, 4, 8)),
                         quant_param_name);

// ---- edge values: FP8 near and past its maximum, large dynamic scales, huge magnitudes -------

// Reshapes harness data row by row (row % 3):
//  0: a spike: residual_in = +-2048 at one column. After the norm the spike is about
//     sqrt(hidden) * gamma, the largest value RMSNorm can produce: dynamic (per-token, per-group)
//     scales are as large as they get, the row's other values land in e4m3's subnormals or flush to
//     zero, and per-tensor saturates the spike at +-448;
//  1: every input and residual_in scaled by 2^40 (bf16) or 2^10 (fp16, sums stay below 65504):
//     huge magnitudes through the fp32 sum of squares (still far from its overflow at an RMS of
//     about 1.8e19, past which the fp32 kernel's sum of squares is Inf and the double reference's
//     is not: untested, the two would part), the same norm up to rounding;
//  2: as generated.
void shape_edge_rows(CallData& d, int64_t tokens, int64_t hidden, DType dtype) {
  const float magnify = dtype == DType::kFp16 ? 0x1p10f : 0x1p40f;
  auto scale_row = [&](std::vector<uint16_t>& v, int64_t t) {
    for (int64_t c = 0; c < hidden; ++c) {
      uint16_t& bits = v[t * hidden + c];
      bits = ref::from_float(ref::to_float(bits, dtype) * magnify, dtype);  // exact
    }
  };
  for (int64_t t = 0; t < tokens; ++t) {
    if (t % 3 == 0) {
      const float spike = t % 2 == 0 ? 2048.0f : -2048.0f;
      d.residual_in[t * hidden + (37 * t + 5) % hidden] = ref::from_float(spike, dtype);
    } else if (t % 3 == 1) {
      for (auto& input : d.inputs) scale_row(input, t);
      scale_row(d.residual_in, t);
    }
  }
}

struct EdgeFormat {
  arfPattern_t pattern;
  arfScaleLayout_t layout;
  arfScaleFormat_t format;
  float static_scale;  // per-tensor: 448 * scale is where saturation starts
};

// Per-tensor saturating from |norm| > 448 * scale = 7 (spikes only), 2.8 (the tail of ordinary
// rows lands near and past 448) and 1 (a fifth of the values saturate), and at each edge of the
// reciprocal's domain (quant_formats.h E4m3TensorReciprocal: [2^-80, 2^100]) and one step past it,
// where the kernels divide instead (2^-80: every value saturates, 2^100: every code is a signed
// zero); per-token; per-group with fp32 and with packed UE8M0 scales (MN-major).
constexpr EdgeFormat kEdgeFormats[] = {
    {arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor, arfScaleFp32, kStaticScale},
    {arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor, arfScaleFp32, 1.0f / 160.0f},
    {arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor, arfScaleFp32, 1.0f / 448.0f},
    {arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor, arfScaleFp32, 0x1p-80f},
    {arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor, arfScaleFp32, 0x1.fffffep-81f},
    {arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor, arfScaleFp32, 0x1p+100f},
    {arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor, arfScaleFp32, 0x1.000002p+100f},
    {arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor, arfScaleFp32, kStaticScale},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor, arfScaleFp32, kStaticScale},
    {arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleUe8m0Packed, kStaticScale},
};

// Three calls on base's data set: base itself (auto with the norm side output: the anchor), a
// fused algorithm at level 2 without the side output, and unfused (level 3) with it.
void add_anchor_level2_unfused(const QuantCallSpec& base, std::vector<QuantCallSpec>* specs) {
  specs->push_back(base);
  QuantCallSpec level2 = base;
  level2.algorithm = kFusedAlgorithms[base.data_index % 3];
  level2.fallback = arfFallbackTwoKernels;
  level2.norm_side_output = false;
  specs->push_back(level2);
  QuantCallSpec unfused = base;
  unfused.algorithm = arfAlgoUnfused;
  specs->push_back(unfused);
}

class QuantEdge : public ::testing::TestWithParam<QuantParam> {};

// One batch: per format, two data sets (4096 x 6 tokens, 7168 x 33), each run as auto with the
// norm side output (the anchor: quant_out and scales exact against the reference quantizer of its
// norm), a fused algorithm at level 2 without it, and unfused (level 3) with it: all bitwise
// equal to the anchor, on every rank.
TEST_P(QuantEdge, Fp8NearAndPastMaxAndLargeScales) {
  const auto [dtype, world_size] = GetParam();
  WorldOptions options;
  options.world_size = world_size;
  options.dtype = dtype;
  const std::unique_ptr<World> world = World::create(options);
  ASSERT_NE(world, nullptr);
  std::vector<QuantCallSpec> specs;
  std::vector<CallData> data;
  for (const EdgeFormat& f : kEdgeFormats) {
    for (const auto [hidden, tokens] : {std::pair<int64_t, int64_t>{4096, 6}, {7168, 33}}) {
      QuantCallSpec base;
      base.pattern = f.pattern;
      base.scale_layout = f.layout;
      base.scale_format = f.format;
      base.static_scale = f.static_scale;
      base.hidden = hidden;
      base.num_tokens = tokens;
      base.data_index = data.size();
      data.push_back(make_call_data(base.data_spec(), world_size, dtype,
                                    mix_seed(test_seed(), base.data_index)));
      shape_edge_rows(data.back(), tokens, hidden, ref_dtype(dtype));
      add_anchor_level2_unfused(base, &specs);
    }
  }
  const std::vector<QuantCallResult> results = run_quant_calls(*world, specs, data);
  if (::testing::Test::HasFatalFailure()) return;
  check_quant_calls(*world, specs, data, results);
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantEdge,
                         ::testing::Combine(::testing::Values(arfBFloat16, arfFloat16),
                                            ::testing::Values(2, 8)),
                         quant_param_name);

// ---- many rows per CTA: the streaming kernels' row pipeline --------------------------------

// The token counts above stay below one row per CTA at world 1 (the streaming kernel's grid is one
// wave: every SM's worth of CTAs). Here every format runs with several rows per CTA, so a CTA's
// row loop, its prefetch of the next row and (where a pattern stages rows through shared memory)
// the reuse of each row buffer are exercised: 2000 tokens at 7168 columns, 4500 at 2048 (about 4
// or more rows per CTA on an H200's 132 SMs), alternating between formats. Per data set the three
// calls of add_anchor_level2_unfused; at world 2 levels 2 and 3 run the local epilogue (the same
// streaming kernels) after the all-reduce.
class QuantManyRows : public ::testing::TestWithParam<QuantParam> {};

TEST_P(QuantManyRows, EveryFormatWithSeveralRowsPerCta) {
  const auto [dtype, world_size] = GetParam();
  WorldOptions options;
  options.world_size = world_size;
  options.dtype = dtype;
  options.max_tokens = 4608;
  const std::unique_ptr<World> world = World::create(options);
  ASSERT_NE(world, nullptr);
  constexpr std::pair<int64_t, int64_t> kShapes[] = {{7168, 2000}, {2048, 4500}};
  std::vector<QuantCallSpec> specs;
  size_t num_data = 0;
  for (size_t f = 0; f < sizeof(kFormats) / sizeof(kFormats[0]); ++f) {
    const ScaleFormat& fmt = kFormats[f];
    // FP8 per-token and per-group (row-major, fp32) at both shapes, the rest at one in turn
    const bool both = fmt.pattern == arfPatternResidualRmsNormFp8PerToken ||
                      (fmt.pattern == arfPatternResidualRmsNormFp8PerGroup &&
                       fmt.layout == arfScaleRowMajor && fmt.format == arfScaleFp32);
    for (size_t sh = 0; sh < 2; ++sh) {
      if (!both && sh != f % 2) continue;
      QuantCallSpec base;
      base.pattern = fmt.pattern;
      base.scale_layout = fmt.layout;
      base.scale_format = fmt.format;
      base.hidden = kShapes[sh].first;
      base.num_tokens = kShapes[sh].second;
      base.data_index = num_data++;
      add_anchor_level2_unfused(base, &specs);
    }
  }
  std::vector<CallData> data(num_data);
  parallel_for(static_cast<int64_t>(num_data), [&](int64_t d) {
    data[d] = make_call_data(specs[3 * d].data_spec(), world_size, dtype, mix_seed(test_seed(), 7000 + d));
  });
  const std::vector<QuantCallResult> results = run_quant_calls(*world, specs, data);
  if (::testing::Test::HasFatalFailure()) return;
  check_quant_calls(*world, specs, data, results);
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantManyRows,
                         ::testing::Values(QuantParam{arfBFloat16, 1}, QuantParam{arfFloat16, 1},
                                           QuantParam{arfBFloat16, 2}),
                         quant_param_name);

// A quantized call validation refuses launches nothing and leaves the communicator usable: the
// next, valid, batch runs and checks clean.
TEST(QuantErrors, RefusedCallsLaunchNothing) {
  WorldOptions options;
  options.world_size = 2;
  options.max_hidden = 16384;  // the valid batch after the refusals reaches format_specs' widest rows
  const std::unique_ptr<World> world = World::create(options);
  ASSERT_NE(world, nullptr);
  QuantCallSpec bad;
  bad.pattern = arfPatternResidualRmsNormFp8PerGroup;
  bad.hidden = 2880;  // not a multiple of 128
  bad.num_tokens = 4;
  world->run_ranks([&](int r) {
    std::vector<DeviceBuffer> bufs;
    for (int i = 0; i < 6; ++i) bufs.emplace_back(world->device(r), 4 * 2880 * 2);
    arfFusedArgs_t a;
    arfFusedArgsInit(&a);
    a.pattern = bad.pattern;
    a.num_tokens = 4;
    a.hidden = 2880;
    a.input = bufs[0].get();
    a.residual_in = bufs[1].get();
    a.gamma = bufs[2].get();
    a.residual_out = bufs[3].get();
    a.quant_out = bufs[4].get();
    a.scale_out = bufs[5].get();
    arfStatus_t st = arfFusedAllReduce(world->comm(r), &a, world->stream(r));
    EXPECT_EQ(st, arfInvalidArgument) << status_text(st);
    EXPECT_NE(std::string(arfGetLastErrorString()).find("needs hidden % 128 == 0"),
              std::string::npos);
    a.hidden = 2048;  // valid shape, but unfused cannot be level 1
    a.algorithm = arfAlgoUnfused;
    a.fallback = arfFallbackOneKernel;
    st = arfFusedAllReduce(world->comm(r), &a, world->stream(r));
    EXPECT_EQ(st, arfUnsupported) << status_text(st);
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "sync");
  });
  const std::vector<QuantCallSpec> specs = format_specs(kFormats[1], 0);
  std::vector<CallData> data;
  for (const QuantCallSpec& s : specs) {
    if (s.data_index == data.size()) {
      data.push_back(
          make_call_data(s.data_spec(), 2, arfBFloat16, mix_seed(test_seed(), s.data_index)));
    }
  }
  check_quant_calls(*world, specs, data, run_quant_calls(*world, specs, data));
}

}  // namespace
}  // namespace arf::test
