// arfScaleBufferBytes and the host's quant rules (src/core/quant_rules.h) against the layout
// arithmetic the kernels use (src/common/quant_layout.h) and the CPU reference's own rules
// (src/reference/quant_reference.h): the host must size, accept and reject exactly what the
// kernels write and the tests' reference can check.
#include <gtest/gtest.h>

#include <string>

#include "core/quant_rules.h"
#include "common/quant_layout.h"
#include "reference/quant_reference.h"

namespace arf {
namespace {

using quant::ScaleLayout;
using quant::ScaleStorage;

constexpr arfPattern_t kQuantPatterns[] = {
    arfPatternResidualRmsNormFp8PerTensor, arfPatternResidualRmsNormFp8PerToken,
    arfPatternResidualRmsNormFp8PerGroup, arfPatternResidualRmsNormNvfp4,
    arfPatternResidualRmsNormMxfp4};

ref::QuantSpec spec_for(arfPattern_t pattern, arfScaleFormat_t format) {
  ref::QuantSpec spec;
  switch (pattern) {
    case arfPatternResidualRmsNormFp8PerTensor: spec.kind = ref::QuantKind::kFp8PerTensor; break;
    case arfPatternResidualRmsNormFp8PerToken: spec.kind = ref::QuantKind::kFp8PerToken; break;
    case arfPatternResidualRmsNormFp8PerGroup: spec.kind = ref::QuantKind::kFp8PerGroup; break;
    case arfPatternResidualRmsNormNvfp4: spec.kind = ref::QuantKind::kNvfp4; break;
    default: spec.kind = ref::QuantKind::kMxfp4; break;
  }
  spec.ue8m0 = format != arfScaleFp32;
  return spec;
}

TEST(ScaleBufferBytes, HandCheckedSizes) {
  // per-token: one fp32 per token.
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor,
                                arfScaleFp32, 5, 4096),
            20u);
  // per-group row-major [5, 32] fp32; MN-major [32, 8] fp32; MN-major packed: 8 words x 8 tokens.
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor,
                                arfScaleFp32, 5, 4096),
            640u);
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor,
                                arfScaleUe8m0AsFp32, 5, 4096),
            1024u);
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor,
                                arfScaleUe8m0Packed, 5, 4096),
            256u);
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor,
                                arfScaleUe8m0Packed, 5, 4096),
            160u);
  // nvfp4 swizzled: 128 rows x 256 columns; mxfp4 2880: 90 columns, linear or padded to 92.
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormNvfp4, arfScaleSwizzled128x4, arfScaleFp32,
                                5, 4096),
            32768u);
  EXPECT_EQ(
      arfScaleBufferBytes(arfPatternResidualRmsNormMxfp4, arfScaleRowMajor, arfScaleFp32, 5, 2880),
      450u);
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormMxfp4, arfScaleSwizzled128x4, arfScaleFp32,
                                129, 2880),
            256u * 92);
}

TEST(ScaleBufferBytes, ZeroWhereNoScalesOrIllegal) {
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor,
                                arfScaleFp32, 5, 4096),
            0u);
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNorm, arfScaleRowMajor, arfScaleFp32, 5, 4096),
            0u);
  EXPECT_EQ(arfScaleBufferBytes(arfPatternAllReduce, arfScaleRowMajor, arfScaleFp32, 5, 4096), 0u);
  EXPECT_EQ(
      arfScaleBufferBytes(static_cast<arfPattern_t>(7), arfScaleRowMajor, arfScaleFp32, 5, 4096),
      0u);
  // A hidden the pattern cannot take, and illegal layouts / formats.
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor,
                                arfScaleFp32, 5, 2880),
            0u);
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormFp8PerToken, arfScaleMnMajor, arfScaleFp32,
                                5, 4096),
            0u);
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormNvfp4, arfScaleRowMajor,
                                arfScaleUe8m0Packed, 5, 4096),
            0u);
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormMxfp4, static_cast<arfScaleLayout_t>(3),
                                arfScaleFp32, 5, 4096),
            0u);
  EXPECT_EQ(arfScaleBufferBytes(arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor,
                                arfScaleFp32, 0, 4096),
            0u);  // an empty call has no scales
}

// Every pattern x layout x format x shape: the public size is quant_layout.h's for the storage the
// kernels write, and legal exactly where the reference can pack scales.
TEST(ScaleBufferBytes, MatchesTheLayoutArithmeticEverywhere) {
  const int64_t token_counts[] = {0, 1, 3, 4, 5, 31, 127, 128, 129, 1000, 4096};
  const int64_t hiddens[] = {2048, 2880, 4096, 5120, 7168, 8192, 16384};
  int legal = 0;
  for (arfPattern_t pattern : kQuantPatterns) {
    const Pattern p = static_cast<Pattern>(pattern);
    for (int layout = 0; layout < 3; ++layout) {
      for (int format = 0; format < 3; ++format) {
        for (int64_t hidden : hiddens) {
          const arfScaleFormat_t f = static_cast<arfScaleFormat_t>(format);
          const ScaleStorage storage = quant_scale_storage(p, format);
          const ref::QuantSpec spec = spec_for(pattern, f);
          const bool ok_rules =
              quant_hidden_error(p, hidden).empty() && quant_scale_error(p, layout, format).empty();
          const bool ok_ref =
              ref::quant_spec_error(spec, hidden).empty() &&
              ref::quant_scales_supported(spec, static_cast<ScaleLayout>(layout), storage);
          // Per-tensor writes no scales (the reference supports none), yet its default layout
          // and format are a legal call.
          if (pattern != arfPatternResidualRmsNormFp8PerTensor) {
            ASSERT_EQ(ok_rules, ok_ref) << arfPatternName(pattern) << " layout " << layout
                                        << " format " << format << " hidden " << hidden;
          }
          for (int64_t tokens : token_counts) {
            const size_t got = arfScaleBufferBytes(pattern, static_cast<arfScaleLayout_t>(layout),
                                                   f, tokens, hidden);
            const int64_t want =
                ok_ref ? quant::scale_buffer_bytes(static_cast<ScaleLayout>(layout), storage,
                                                   tokens, ref::quant_scale_cols(spec.kind, hidden))
                       : 0;
            ASSERT_EQ(static_cast<int64_t>(got), want)
                << arfPatternName(pattern) << " layout " << layout << " format " << format
                << " tokens " << tokens << " hidden " << hidden;
            legal += got > 0;
          }
        }
      }
    }
  }
  EXPECT_GT(legal, 300);
}

// What the host hands the kernels (KernelParams::scale_addr) puts scale (t, c) of every legal call
// where quant_layout.h's offset function (the one the CPU reference packs with) puts it, inside the
// buffer arfScaleBufferBytes sizes; patterns without per-block scales, and illegal calls, get zeros.
TEST(QuantRules, ScaleAddressingOfACallIsTheLayoutsOffset) {
  const int64_t token_counts[] = {1, 3, 4, 5, 31, 127, 128, 129, 1000};
  const int64_t hiddens[] = {2048, 2880, 7168, 8192, 16384};
  int64_t checked = 0;
  for (arfPattern_t pattern : kQuantPatterns) {
    const Pattern p = static_cast<Pattern>(pattern);
    for (int layout = 0; layout < 3; ++layout) {
      for (int format = 0; format < 3; ++format) {
        for (int64_t hidden : hiddens) {
          for (int64_t tokens : token_counts) {
            const quant::ScaleAddressing a = quant_scale_addressing(p, layout, format, tokens, hidden);
            const bool per_block = quant_group_elems(p) > 0;
            const bool legal = quant_hidden_error(p, hidden).empty() &&
                               quant_scale_error(p, layout, format).empty();
            if (!per_block || !legal) {
              EXPECT_TRUE(a.t7 == 0 && a.t5 == 0 && a.t0 == 0 && a.c2 == 0 && a.c0 == 0)
                  << arfPatternName(pattern) << " layout " << layout << " format " << format
                  << " hidden " << hidden;
              continue;
            }
            // The storage as the kernels pick it (quant_epilogue.cuh): FP4 scales are bytes, FP8
            // per-group ones bytes only when packed UE8M0.
            const ScaleStorage storage =
                pattern != arfPatternResidualRmsNormFp8PerGroup || format == arfScaleUe8m0Packed
                    ? ScaleStorage::kByte
                    : ScaleStorage::kFp32;
            const int64_t cols = quant_scale_cols(p, hidden);
            const int64_t bytes = quant_scale_buffer_bytes(p, layout, format, tokens, hidden);
            const int64_t elem_bytes = storage == ScaleStorage::kFp32 ? 4 : 1;
            for (int64_t t = 0; t < tokens; ++t) {
              for (int64_t c = 0; c < cols; ++c) {
                const int64_t off = a.offset(t, c);
                ASSERT_EQ(off, quant::scale_byte_offset(static_cast<ScaleLayout>(layout), storage, t,
                                                        c, tokens, cols))
                    << arfPatternName(pattern) << " layout " << layout << " format " << format
                    << " tokens " << tokens << " hidden " << hidden << " t " << t << " c " << c;
                ASSERT_TRUE(off >= 0 && off + elem_bytes <= bytes);
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, int64_t{1} << 20);
}

TEST(QuantRules, HiddenRuleAgreesWithTheReference) {
  for (arfPattern_t pattern : kQuantPatterns) {
    const Pattern p = static_cast<Pattern>(pattern);
    const ref::QuantSpec spec = spec_for(pattern, arfScaleFp32);
    for (int64_t hidden = 8; hidden <= 16384; hidden += 8) {
      ASSERT_EQ(quant_hidden_error(p, hidden).empty(), ref::quant_spec_error(spec, hidden).empty())
          << arfPatternName(pattern) << " hidden " << hidden;
      if (quant_writes_scales(p) && quant_hidden_error(p, hidden).empty()) {
        ASSERT_EQ(quant_scale_cols(p, hidden), ref::quant_scale_cols(spec.kind, hidden));
      }
    }
  }
  EXPECT_EQ(quant_hidden_error(Pattern::kResidualRmsNorm, 2888), "");
}

TEST(QuantRules, WhatEachPatternUses) {
  EXPECT_FALSE(quant_writes_scales(Pattern::kFp8PerTensor));
  EXPECT_TRUE(quant_reads_scale_in(Pattern::kFp8PerTensor));
  EXPECT_TRUE(quant_writes_scales(Pattern::kFp8PerToken));
  EXPECT_FALSE(quant_reads_scale_in(Pattern::kFp8PerToken));
  EXPECT_FALSE(quant_reads_scale_in(Pattern::kFp8PerGroup));
  EXPECT_TRUE(quant_reads_scale_in(Pattern::kNvfp4));
  EXPECT_FALSE(quant_reads_scale_in(Pattern::kMxfp4));
  EXPECT_FALSE(quant_writes_scales(Pattern::kResidualRmsNorm));
  EXPECT_EQ(quant_out_bytes(Pattern::kFp8PerGroup, 3, 4096), 3 * 4096);
  EXPECT_EQ(quant_out_bytes(Pattern::kMxfp4, 3, 4096), 3 * 2048);
  EXPECT_EQ(quant_out_bytes(Pattern::kAllReduce, 3, 4096), 0);
  EXPECT_EQ(quant_scale_storage(Pattern::kFp8PerGroup, arfScaleUe8m0AsFp32), ScaleStorage::kFp32);
  EXPECT_EQ(quant_scale_storage(Pattern::kFp8PerGroup, arfScaleUe8m0Packed), ScaleStorage::kByte);
  EXPECT_EQ(quant_scale_storage(Pattern::kNvfp4, arfScaleFp32), ScaleStorage::kByte);
}

}  // namespace
}  // namespace arf
