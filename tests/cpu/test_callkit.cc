// The call kit's host half (tools/common/callkit/): which tensors the one argument builder passes
// for each spec (fake pointers, no CUDA), its sizes against the library's own rules, and the data
// generator's distinctness and replication.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "callkit/call_data.h"
#include "callkit/call_spec.h"
#include "core/quant_rules.h"

namespace arf::callkit {
namespace {

// Distinct fake device pointers: the builder only copies them.
CallTensors fake_tensors() {
  static char storage[16];
  CallTensors t;
  t.input = &storage[0];
  t.residual_in = &storage[1];
  t.gamma = &storage[2];
  t.allreduce_out = &storage[3];
  t.residual_out = &storage[4];
  t.norm_out = &storage[5];
  t.quant_out = &storage[6];
  t.scale_out = &storage[7];
  t.scale_in = reinterpret_cast<const float*>(&storage[8]);
  t.post_gamma = &storage[9];
  return t;
}

TEST(CallKitArgs, AllReducePassesInputAndOutputOnly) {
  const CallTensors t = fake_tensors();
  CallSpec spec;
  spec.pattern = arfPatternAllReduce;
  spec.num_tokens = 3;
  spec.hidden = 256;
  const arfFusedArgs_t a = fused_args(spec, arfFloat16, t);
  EXPECT_EQ(a.pattern, arfPatternAllReduce);
  EXPECT_EQ(a.dtype, arfFloat16);
  EXPECT_EQ(a.num_tokens, 3u);
  EXPECT_EQ(a.hidden, 256u);
  EXPECT_EQ(a.input, t.input);
  EXPECT_EQ(a.allreduce_out, t.allreduce_out);
  EXPECT_EQ(a.residual_in, nullptr);
  EXPECT_EQ(a.residual_out, nullptr);
  EXPECT_EQ(a.norm_out, nullptr);
  EXPECT_EQ(a.gamma, nullptr);
  EXPECT_EQ(a.quant_out, nullptr);
  spec.alias = kAllReduceInPlace;
  EXPECT_EQ(fused_args(spec, arfFloat16, t).allreduce_out, t.input);
  spec.alias = kNoAlias;
  spec.flat = true;
  spec.pattern = arfPatternResidualRmsNorm;  // flat calls are all-reduces whatever the pattern
  EXPECT_EQ(fused_args(spec, arfFloat16, t).allreduce_out, t.allreduce_out);
  EXPECT_EQ(fused_args(spec, arfFloat16, t).residual_out, nullptr);
}

TEST(CallKitArgs, NormPatternAliasesAndOptions) {
  const CallTensors t = fake_tensors();
  CallSpec spec;
  spec.gamma_fp32 = true;
  spec.gamma_plus_one = true;
  spec.eps = 1e-5f;
  spec.norm_rounding = arfNormRoundBeforeWeight;
  arfFusedArgs_t a = fused_args(spec, arfBFloat16, t);
  EXPECT_EQ(a.allreduce_out, nullptr);
  EXPECT_EQ(a.residual_in, t.residual_in);
  EXPECT_EQ(a.residual_out, t.residual_out);
  EXPECT_EQ(a.norm_out, t.norm_out);
  EXPECT_EQ(a.gamma, t.gamma);
  EXPECT_EQ(a.gamma_dtype, arfFloat32);
  EXPECT_EQ(a.gamma_plus_one, 1);
  EXPECT_EQ(a.eps, 1e-5f);
  EXPECT_EQ(a.norm_rounding, arfNormRoundBeforeWeight);
  EXPECT_EQ(a.quant_out, nullptr);
  EXPECT_EQ(a.scale_in, nullptr);
  EXPECT_EQ(a.post_gamma, nullptr);

  spec.alias = kResidualInPlace | kNormIntoInput;
  spec.no_residual = true;
  a = fused_args(spec, arfBFloat16, t);
  EXPECT_EQ(a.residual_in, nullptr);
  EXPECT_EQ(a.residual_out, t.residual_in);  // the in-place buffer, written though not read
  EXPECT_EQ(a.norm_out, t.input);

  spec = CallSpec{};
  EXPECT_EQ(fused_args(spec, arfFloat16, t).gamma_dtype, arfFloat16);
}

TEST(CallKitArgs, QuantizedPatternsGetTheScalesTheyUse) {
  const CallTensors t = fake_tensors();
  CallSpec spec;
  spec.num_tokens = 4;
  spec.hidden = 4096;
  spec.fallback = arfFallbackTwoKernels;
  spec.pattern = arfPatternResidualRmsNormFp8PerTensor;
  arfFusedArgs_t a = fused_args(spec, arfBFloat16, t);
  EXPECT_EQ(a.quant_out, t.quant_out);
  EXPECT_EQ(a.scale_out, nullptr);
  EXPECT_EQ(a.scale_in, t.scale_in);
  EXPECT_EQ(a.fallback, arfFallbackTwoKernels);
  EXPECT_EQ(a.norm_out, t.norm_out);

  spec.pattern = arfPatternResidualRmsNormFp8PerGroup;
  spec.scale_layout = arfScaleMnMajor;
  spec.scale_format = arfScaleUe8m0AsFp32;
  spec.norm_side_output = false;
  a = fused_args(spec, arfBFloat16, t);
  EXPECT_EQ(a.scale_out, t.scale_out);
  EXPECT_EQ(a.scale_in, nullptr);
  EXPECT_EQ(a.norm_out, nullptr);
  EXPECT_EQ(a.scale_layout, arfScaleMnMajor);
  EXPECT_EQ(a.scale_format, arfScaleUe8m0AsFp32);
  EXPECT_EQ(a.scale_rule, arfFp8ScaleDivide);  // the default
  spec.scale_rule = arfFp8ScaleTimesReciprocal;
  a = fused_args(spec, arfBFloat16, t);
  EXPECT_EQ(a.scale_rule, arfFp8ScaleTimesReciprocal);
  EXPECT_NE(spec.label().find("scale_rule times_reciprocal"), std::string::npos);

  spec = CallSpec{};
  spec.pattern = arfPatternResidualRmsNormNvfp4;
  a = fused_args(spec, arfBFloat16, t);
  EXPECT_EQ(a.scale_out, t.scale_out);
  EXPECT_EQ(a.scale_in, t.scale_in);
  EXPECT_EQ(spec.scale_in_value(), kGlobalScale);
}

// The kit sizes buffers from the public header; the library's own rules must agree.
TEST(CallKitSizes, QuantAndScaleBytesMatchTheLibrary) {
  for (int p = arfPatternAllReduce; p <= arfPatternResidualRmsNormMxfp4; ++p) {
    for (int64_t tokens : {1, 5, 128}) {
      CallSpec spec;
      spec.pattern = static_cast<arfPattern_t>(p);
      spec.num_tokens = tokens;
      spec.hidden = 4096;
      SCOPED_TRACE(spec.label());
      EXPECT_EQ(spec.quant_bytes(),
                quant_out_bytes(static_cast<Pattern>(p), tokens, spec.hidden));
      const int64_t scales = static_cast<int64_t>(arfScaleBufferBytes(
          spec.pattern, spec.scale_layout, spec.scale_format, static_cast<size_t>(tokens), 4096));
      EXPECT_EQ(spec.scale_bytes(), spec.quantized() ? scales : 0);
      EXPECT_EQ(spec.reads_scale_in(), quant_reads_scale_in(static_cast<Pattern>(p)));
    }
  }
}

TEST(CallKitData, DistinctPerRankAndCallReplicatedResidualAndGamma) {
  CallSpec spec;
  spec.num_tokens = 3;
  spec.hidden = 64;
  const CallData a = make_call_data(spec, 2, arfBFloat16, 7);
  const CallData again = make_call_data(spec, 2, arfBFloat16, 7);
  const CallData next = make_call_data(spec, 2, arfBFloat16, mix_seed(7, 1));
  ASSERT_EQ(a.inputs.size(), 2u);
  EXPECT_EQ(a.inputs[0].size(), 3u * 64u);
  EXPECT_NE(a.inputs[0], a.inputs[1]);
  EXPECT_EQ(a.inputs, again.inputs);
  EXPECT_EQ(a.residual_in, again.residual_in);
  EXPECT_NE(a.inputs[0], next.inputs[0]);
  EXPECT_NE(a.residual_in, next.residual_in);
  EXPECT_EQ(a.residual_in.size(), 3u * 64u);
  EXPECT_EQ(a.gamma16.size(), 64u);
  EXPECT_TRUE(a.gamma32.empty());

  spec.gamma_fp32 = true;
  const CallData f = make_call_data(spec, 2, arfBFloat16, 7);
  EXPECT_EQ(f.gamma32.size(), 64u);
  EXPECT_TRUE(f.gamma16.empty());

  spec.pattern = arfPatternAllReduce;
  const CallData ar = make_call_data(spec, 3, arfBFloat16, 7);
  EXPECT_EQ(ar.inputs.size(), 3u);
  EXPECT_TRUE(ar.residual_in.empty());
}

// A sandwich spec passes post_gamma to the norm patterns (quantized ones too) and never to an
// all-reduce; its data draws post_gamma apart from gamma, and the reference reads it.
TEST(CallKitArgs, SandwichPassesPostGamma) {
  const CallTensors t = fake_tensors();
  CallSpec spec;
  spec.post_norm = true;
  EXPECT_EQ(fused_args(spec, arfBFloat16, t).post_gamma, t.post_gamma);
  spec.pattern = arfPatternResidualRmsNormNvfp4;
  EXPECT_EQ(fused_args(spec, arfBFloat16, t).post_gamma, t.post_gamma);
  spec.pattern = arfPatternAllReduce;
  EXPECT_EQ(fused_args(spec, arfBFloat16, t).post_gamma, nullptr);
  spec.pattern = arfPatternResidualRmsNorm;
  spec.flat = true;
  EXPECT_EQ(fused_args(spec, arfBFloat16, t).post_gamma, nullptr);
  EXPECT_EQ(spec.label().find("sandwich"), std::string::npos);
  spec.flat = false;
  EXPECT_NE(spec.label().find("sandwich"), std::string::npos);

  spec.hidden = 64;
  for (const bool fp32 : {false, true}) {
    spec.gamma_fp32 = fp32;
    const CallData d = make_call_data(spec, 2, arfBFloat16, 5);
    const ref::FusedInputs in = reference_inputs(spec, arfBFloat16, d);
    if (fp32) {
      ASSERT_EQ(d.post_gamma32.size(), 64u);
      EXPECT_NE(d.post_gamma32, d.gamma32);
      EXPECT_EQ(in.post_gamma, static_cast<const void*>(d.post_gamma32.data()));
    } else {
      ASSERT_EQ(d.post_gamma16.size(), 64u);
      EXPECT_NE(d.post_gamma16, d.gamma16);
      EXPECT_EQ(in.post_gamma, static_cast<const void*>(d.post_gamma16.data()));
    }
  }
  spec.post_norm = false;
  const CallData plain = make_call_data(spec, 2, arfBFloat16, 5);
  EXPECT_TRUE(plain.post_gamma16.empty() && plain.post_gamma32.empty());
  EXPECT_EQ(reference_inputs(spec, arfBFloat16, plain).post_gamma, nullptr);
}

TEST(CallKitData, ReferenceInputsFollowTheSpec) {
  CallSpec spec;
  spec.num_tokens = 2;
  spec.hidden = 32;
  spec.no_residual = true;
  spec.gamma_plus_one = true;
  spec.eps = 1e-5f;
  const CallData d = make_call_data(spec, 2, arfFloat16, 3);
  const ref::FusedInputs in = reference_inputs(spec, arfFloat16, d);
  EXPECT_EQ(in.dtype, DType::kFp16);
  ASSERT_EQ(in.rank_inputs.size(), 2u);
  EXPECT_EQ(in.rank_inputs[1], d.inputs[1].data());
  EXPECT_EQ(in.residual_in, nullptr);
  EXPECT_EQ(in.gamma, static_cast<const void*>(d.gamma16.data()));
  EXPECT_EQ(in.gamma_offset, 1.0f);
  EXPECT_EQ(in.eps, 1e-5f);
}

}  // namespace
}  // namespace arf::callkit
