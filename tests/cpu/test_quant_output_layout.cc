// arfQuantOutputLayout (core/quant_rules.cc over common/quant_layout.h's scale_buffer_shape): the
// shapes, element types and bytes of quant_out and scale_out that the torch ops allocate from.
// Hand-checked shapes per layout, agreement with arfScaleBufferBytes and with the device side's
// addressing over a sweep, the token-count formula against the concrete dims at every count, and
// the refusals with their reasons.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "common/quant_layout.h"

namespace {

using Dims = std::vector<size_t>;

Dims dims_of(const arfQuantBuffer_t& b) { return Dims(b.dims, b.dims + b.rank); }

arfQuantOutputs_t layout_of(arfPattern_t p, arfScaleLayout_t l, arfScaleFormat_t f, size_t t, size_t h) {
  arfQuantOutputs_t out;
  EXPECT_EQ(arfQuantOutputLayout(p, l, f, t, h, &out), arfSuccess) << arfGetLastErrorString();
  return out;
}

size_t formula(const arfQuantBuffer_t& b, int i, size_t t) {
  const size_t a = b.tokens_align[i];
  return b.tokens_scale[i] * ((t + a - 1) / a * a) + b.fixed[i];
}

constexpr arfPattern_t kQuantPatterns[] = {
    arfPatternResidualRmsNormFp8PerTensor, arfPatternResidualRmsNormFp8PerToken,
    arfPatternResidualRmsNormFp8PerGroup, arfPatternResidualRmsNormNvfp4, arfPatternResidualRmsNormMxfp4};
constexpr arfScaleLayout_t kLayouts[] = {arfScaleRowMajor, arfScaleMnMajor, arfScaleSwizzled128x4};
constexpr arfScaleFormat_t kFormats[] = {arfScaleFp32, arfScaleUe8m0AsFp32, arfScaleUe8m0Packed};

TEST(QuantOutputLayout, HandCheckedShapes) {
  // T = 5, H = 1024
  auto o = layout_of(arfPatternResidualRmsNormFp8PerTensor, arfScaleRowMajor, arfScaleFp32, 5, 1024);
  EXPECT_EQ(dims_of(o.quant_out), (Dims{5, 1024}));
  EXPECT_EQ(o.quant_out.element, arfElementFloat8E4M3);
  EXPECT_EQ(dims_of(o.scale_out), (Dims{0}));
  EXPECT_EQ(o.scale_out.element, arfElementFloat32);
  EXPECT_EQ(o.scale_out.bytes, 0u);

  o = layout_of(arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor, arfScaleFp32, 5, 1024);
  EXPECT_EQ(dims_of(o.scale_out), (Dims{5, 1}));
  EXPECT_EQ(o.scale_out.bytes, 20u);

  o = layout_of(arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor, arfScaleUe8m0Packed, 5, 1024);
  EXPECT_EQ(dims_of(o.scale_out), (Dims{5, 8}));
  EXPECT_EQ(o.scale_out.element, arfElementUInt8);
  o = layout_of(arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleFp32, 5, 1024);
  EXPECT_EQ(dims_of(o.scale_out), (Dims{8, 8}));  // [H/128, round_up(5, 4)]
  EXPECT_EQ(o.scale_out.bytes, 256u);
  o = layout_of(arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleUe8m0Packed, 5, 1152);
  EXPECT_EQ(dims_of(o.scale_out), (Dims{3, 32}));  // [ceil(9 / 4), 4 * round_up(5, 4)] bytes
  EXPECT_EQ(o.scale_out.element, arfElementUInt8);
  o = layout_of(arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, arfScaleUe8m0AsFp32, 5, 1024);
  EXPECT_EQ(o.scale_out.element, arfElementFloat32);

  o = layout_of(arfPatternResidualRmsNormNvfp4, arfScaleRowMajor, arfScaleFp32, 5, 1024);
  EXPECT_EQ(dims_of(o.quant_out), (Dims{5, 512}));
  EXPECT_EQ(o.quant_out.element, arfElementUInt8);
  EXPECT_EQ(dims_of(o.scale_out), (Dims{5, 64}));
  EXPECT_EQ(o.scale_out.element, arfElementFloat8E4M3);
  o = layout_of(arfPatternResidualRmsNormNvfp4, arfScaleSwizzled128x4, arfScaleFp32, 5, 2880);
  EXPECT_EQ(dims_of(o.scale_out), (Dims{128, 180}));  // [round_up(5,128), round_up(180,4)]
  o = layout_of(arfPatternResidualRmsNormMxfp4, arfScaleSwizzled128x4, arfScaleFp32, 129, 2880);
  EXPECT_EQ(dims_of(o.scale_out), (Dims{256, 92}));  // [round_up(129,128), round_up(90,4)]
  EXPECT_EQ(o.scale_out.element, arfElementUInt8);
  EXPECT_EQ(o.scale_out.bytes, 256u * 92u);
}

// Every legal combination: scale_out.bytes is arfScaleBufferBytes and covers the device side's
// padded grid exactly; the formula gives the concrete dims at every token count; quant_out is
// the values' bytes.
TEST(QuantOutputLayout, SweepAgreesWithTheBufferSizeAndTheFormula) {
  int legal = 0;
  for (arfPattern_t p : kQuantPatterns)
    for (arfScaleLayout_t l : kLayouts)
      for (arfScaleFormat_t f : kFormats)
        for (size_t h : {16u, 32u, 128u, 1024u, 1152u, 2880u, 7168u, 8192u}) {
          arfQuantOutputs_t at0;
          if (arfQuantOutputLayout(p, l, f, 0, h, &at0) != arfSuccess) {
            for (size_t t : {1u, 130u})
              EXPECT_EQ(arfScaleBufferBytes(p, l, f, t, h), 0u) << p << " " << l << " " << f << " " << h;
            continue;
          }
          ++legal;
          for (size_t t : {0u, 1u, 3u, 4u, 5u, 127u, 128u, 129u, 1000u, 4097u}) {
            const arfQuantOutputs_t o = layout_of(p, l, f, t, h);
            const std::string what = std::to_string(p) + "/" + std::to_string(l) + "/" +
                                     std::to_string(f) + " T=" + std::to_string(t) + " H=" + std::to_string(h);
            EXPECT_EQ(o.scale_out.bytes, arfScaleBufferBytes(p, l, f, t, h)) << what;
            const bool fp4 = p == arfPatternResidualRmsNormNvfp4 || p == arfPatternResidualRmsNormMxfp4;
            EXPECT_EQ(o.quant_out.bytes, fp4 ? t * h / 2 : t * h) << what;
            for (const arfQuantBuffer_t* b : {&o.quant_out, &o.scale_out}) {
              size_t n = b->element_bytes;
              for (int i = 0; i < b->rank; ++i) {
                EXPECT_EQ(b->dims[i], formula(*b, i, t)) << what << " dim " << i;
                EXPECT_EQ(formula(*b, i, t), formula(b == &o.quant_out ? at0.quant_out : at0.scale_out, i, t))
                    << what << ": the formula depends on the count it was asked for";
                n *= b->dims[i];
              }
              EXPECT_EQ(b->bytes, n) << what;
              EXPECT_EQ(b->element_bytes, b->element == arfElementFloat32 ? 4u : 1u) << what;
            }
          }
        }
  // per-tensor 8 + per-token 8 + per-group 5 hiddens x 2 layouts x 3 formats + nvfp4 8 x 2 +
  // mxfp4 7 x 2 (the rest are refused, and arfScaleBufferBytes answers 0 for them)
  EXPECT_EQ(legal, 76);
}

TEST(QuantOutputLayout, RefusalsSayWhy) {
  arfQuantOutputs_t o;
  auto refused = [&](arfPattern_t p, arfScaleLayout_t l, arfScaleFormat_t f, size_t t, size_t h,
                     const char* reason) {
    EXPECT_EQ(arfQuantOutputLayout(p, l, f, t, h, &o), arfInvalidArgument) << reason;
    EXPECT_NE(std::string(arfGetLastErrorString()).find(reason), std::string::npos)
        << arfGetLastErrorString();
  };
  refused(arfPatternResidualRmsNorm, arfScaleRowMajor, arfScaleFp32, 4, 1024, "does not quantize");
  refused(arfPatternAllReduce, arfScaleRowMajor, arfScaleFp32, 4, 1024, "does not quantize");
  refused(static_cast<arfPattern_t>(7), arfScaleRowMajor, arfScaleFp32, 4, 1024, "not a valid arfPattern_t");
  refused(arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor, arfScaleFp32, 4, 2880, "hidden % 128 == 0");
  refused(arfPatternResidualRmsNormNvfp4, arfScaleMnMajor, arfScaleFp32, 4, 1024, "MN-major");
  refused(arfPatternResidualRmsNormFp8PerToken, arfScaleSwizzled128x4, arfScaleFp32, 4, 1024, "128x4");
  refused(arfPatternResidualRmsNormMxfp4, arfScaleRowMajor, arfScaleUe8m0Packed, 4, 1024, "scale_format");
  refused(arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor, static_cast<arfScaleFormat_t>(3), 4, 1024,
          "not a valid arfScaleFormat_t");
  refused(arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor, arfScaleFp32, 4, 0, "hidden");
  refused(arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor, arfScaleFp32, size_t{1} << 40, 1024,
          "num_tokens");
  EXPECT_EQ(arfQuantOutputLayout(arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor, arfScaleFp32, 4,
                                 1024, nullptr),
            arfInvalidArgument);
}

// The storage shape is the one owner of a scale buffer's size: scale_buffer_bytes multiplies it
// out, and every padded position's byte offset falls inside it.
TEST(QuantOutputLayout, ScaleBufferShapeBoundsEveryOffset) {
  using namespace arf::quant;
  for (ScaleLayout l : {ScaleLayout::kRowMajor, ScaleLayout::kMnMajor, ScaleLayout::kSwizzled128x4})
    for (ScaleStorage s : {ScaleStorage::kFp32, ScaleStorage::kByte}) {
      if (!scale_layout_supported(l, s)) {
        EXPECT_EQ(scale_buffer_shape(l, s, 8).rank, 0);
        continue;
      }
      for (int64_t cols : {1, 5, 8, 90}) {
        for (int64_t t : {1, 4, 5, 129}) {
          const BufferShape shape = scale_buffer_shape(l, s, cols);
          const int64_t bytes = shape.bytes(t);
          EXPECT_EQ(bytes, scale_buffer_bytes(l, s, t, cols));
          int64_t last = -1;
          for (int64_t r = 0; r < scale_padded_tokens(l, t); ++r)
            for (int64_t c = 0; c < scale_padded_cols(l, s, cols); ++c)
              last = std::max(last, scale_byte_offset(l, s, r, c, t, cols));
          EXPECT_EQ(last + scale_elem_bytes(s), bytes) << static_cast<int>(l) << "/" << static_cast<int>(s)
                                                       << " cols " << cols << " T " << t;
        }
      }
    }
}

}  // namespace
