// Tests of src/reference/quant_reference: every quant pattern on small rows whose codes and scales
// were computed by hand (zero rows, values at and near 448, ties, saturation), layout packing with
// zeroed padding, error bounds of the dequantized values on reference_fused's norm output, and the
// comparison helper the GPU tests rely on (it must catch what it claims to).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "common/quant_formats.h"
#include "reference/cpu_reference.h"
#include "reference/quant_reference.h"

namespace arf::ref {
namespace {

using quant::ScaleLayout;
using quant::ScaleStorage;

// Row-major [tokens, hidden] bits; `cells` sets (token, col, value), everything else is +0.
struct Cell {
  int64_t t, c;
  float v;
};
std::vector<uint16_t> make_rows(int64_t tokens, int64_t hidden, std::initializer_list<Cell> cells,
                                DType dtype = DType::kBf16) {
  std::vector<uint16_t> bits(tokens * hidden, 0);
  for (const Cell& cell : cells) bits[cell.t * hidden + cell.c] = from_float(cell.v, dtype);
  return bits;
}

QuantResult quantize_ok(const std::vector<uint16_t>& bits, int64_t tokens, int64_t hidden,
                        const QuantSpec& spec, DType dtype = DType::kBf16) {
  QuantResult r;
  const std::string error = quantize_reference(bits.data(), dtype, tokens, hidden, spec, &r);
  EXPECT_EQ(error, "");
  return r;
}

std::vector<float> as_floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> f(bytes.size() / 4);
  std::memcpy(f.data(), bytes.data(), f.size() * 4);
  return f;
}

QuantSpec spec_of(QuantKind kind, bool ue8m0 = false, float global_scale = 1.0f) {
  QuantSpec s;
  s.kind = kind;
  s.ue8m0 = ue8m0;
  s.global_scale = global_scale;
  return s;
}

TEST(QuantReference, SpecErrorsNameTheRule) {
  QuantSpec s = spec_of(QuantKind::kFp8PerGroup);
  EXPECT_EQ(quant_spec_error(s, 7168), "");
  EXPECT_NE(quant_spec_error(s, 2880), "");  // 2880 % 128 != 0
  EXPECT_EQ(quant_spec_error(spec_of(QuantKind::kNvfp4), 2880), "");
  EXPECT_EQ(quant_spec_error(spec_of(QuantKind::kMxfp4), 2880), "");
  EXPECT_NE(quant_spec_error(spec_of(QuantKind::kNvfp4), 2888), "");
  EXPECT_NE(quant_spec_error(spec_of(QuantKind::kMxfp4), 2896), "");
  EXPECT_NE(quant_spec_error(spec_of(QuantKind::kNvfp4, false, 0.0f), 2048), "");
  EXPECT_NE(quant_spec_error(spec_of(QuantKind::kFp8PerToken, /*ue8m0=*/true), 2048), "");
  s = spec_of(QuantKind::kFp8PerTensor);
  for (const float bad : {0.0f, -1.0f, INFINITY, NAN}) {
    s.static_scale = bad;
    EXPECT_NE(quant_spec_error(s, 2048), "") << bad;
  }
  QuantResult r;
  const std::vector<uint16_t> bits(2880, 0);
  EXPECT_NE(
      quantize_reference(bits.data(), DType::kBf16, 1, 2880, spec_of(QuantKind::kFp8PerGroup), &r),
      "");
}

TEST(QuantReference, Fp8PerTensorDividesAndSaturates) {
  for (const DType dtype : {DType::kBf16, DType::kFp16}) {
    const std::vector<uint16_t> bits = make_rows(1, 8,
                                                 {{0, 0, 1.0f},
                                                  {0, 1, -3.0f},
                                                  {0, 2, 896.0f},
                                                  {0, 3, 1000.0f},
                                                  {0, 5, -0.0f},
                                                  {0, 6, 0.25f},
                                                  {0, 7, -0.0001f}},
                                                 dtype);
    QuantSpec spec = spec_of(QuantKind::kFp8PerTensor);
    spec.static_scale = 2.0f;
    const QuantResult r = quantize_ok(bits, 1, 8, spec, dtype);
    // 0.5, -1.5, 448, 500 -> 448, +0, -0, 0.125, -0.00005 underflows to -0.
    const std::vector<uint8_t> want = {0x30, 0xBC, 0x7E, 0x7E, 0x00, 0x80, 0x20, 0x80};
    EXPECT_EQ(r.values, want);
    EXPECT_TRUE(r.scales.empty());
    EXPECT_TRUE(pack_scales(r, ScaleLayout::kRowMajor, ScaleStorage::kFp32).empty());
    EXPECT_EQ(dequantize(r)[2], 896.0);
  }
}

TEST(QuantReference, Fp8PerTokenHandComputed) {
  // Row 0: amax 3.5, scale 2^-7. Row 1: only -0.0, so the floor. Row 2: amax 448, scale 1.
  const std::vector<uint16_t> bits = make_rows(3, 8,
                                               {{0, 0, 1.0f},
                                                {0, 1, -2.0f},
                                                {0, 2, 3.5f},
                                                {0, 3, 0.5f},
                                                {1, 0, -0.0f},
                                                {2, 0, 448.0f},
                                                {2, 1, 444.0f},
                                                {2, 2, 440.0f},
                                                {2, 3, -432.0f},
                                                {2, 4, 1.0f}});
  const QuantResult r = quantize_ok(bits, 3, 8, spec_of(QuantKind::kFp8PerToken));
  EXPECT_EQ(r.scales, (std::vector<float>{0x1p-7f, quant::kMinFp8Scale, 1.0f}));
  const std::vector<uint8_t> want = {
      0x70, 0xF8, 0x7E, 0x68, 0,    0, 0, 0,  // 128, -256, 448, 64
      0x80, 0,    0,    0,    0,    0, 0, 0,  // -0 keeps its sign
      0x7E, 0x7E, 0x7E, 0xFE, 0x38, 0, 0, 0,  // 444 and 440 round to 448; -432 is a tie -> -448
  };
  EXPECT_EQ(r.values, want);
  EXPECT_EQ(as_floats(pack_scales(r, ScaleLayout::kRowMajor, ScaleStorage::kFp32)), r.scales);
  EXPECT_TRUE(pack_scales(r, ScaleLayout::kMnMajor, ScaleStorage::kFp32).empty());
}

// Token 0: group 0 amax 3.5, group 1 zero. Token 1: group 0 amax 448, group 1 amax 6.
// Token 2: zero.
std::vector<uint16_t> group_rows() {
  return make_rows(3, 256,
                   {{0, 0, 3.5f},
                    {0, 1, 1.0f},
                    {0, 127, -2.0f},
                    {1, 0, 448.0f},
                    {1, 1, -0.5f},
                    {1, 133, -6.0f},
                    {1, 255, 1.0f}});
}

TEST(QuantReference, Fp8PerGroupFp32HandComputed) {
  const QuantResult r = quantize_ok(group_rows(), 3, 256, spec_of(QuantKind::kFp8PerGroup));
  const float six =
      static_cast<float>(6.0 / 448.0);  // correctly rounded, like the kernel's division
  const float floor = quant::kMinFp8Scale;
  EXPECT_EQ(r.scales, (std::vector<float>{0x1p-7f, floor, 1.0f, six, floor, floor}));
  EXPECT_TRUE(r.scale_codes.empty());
  EXPECT_EQ(r.values[0], 0x7E);
  EXPECT_EQ(r.values[1], 0x70);          // 128
  EXPECT_EQ(r.values[127], 0xF8);        // -256
  EXPECT_EQ(r.values[256 + 1], 0xB0);    // -0.5
  EXPECT_EQ(r.values[256 + 133], 0xFE);  // -6 / (6/448): the amax element is -448
  EXPECT_EQ(r.values[256 + 255], quant::encode_e4m3(1.0f / six));
  // MN-major: [2 groups][4 tokens] fp32, token 3 is padding.
  const std::vector<float> mn =
      as_floats(pack_scales(r, ScaleLayout::kMnMajor, ScaleStorage::kFp32));
  EXPECT_EQ(mn, (std::vector<float>{0x1p-7f, 1.0f, floor, 0.0f, floor, six, floor, 0.0f}));
  EXPECT_TRUE(pack_scales(r, ScaleLayout::kMnMajor, ScaleStorage::kByte).empty());  // not UE8M0
}

TEST(QuantReference, Fp8PerGroupUe8m0HandComputed) {
  const QuantResult r =
      quantize_ok(group_rows(), 3, 256, spec_of(QuantKind::kFp8PerGroup, /*ue8m0=*/true));
  // 3.5/448 = 2^-7 -> 120; zero -> floor 2^-17.8 -> 110; 448 -> 127; 6/448 = 2^-6.2 -> 2^-6 -> 121.
  EXPECT_EQ(r.scale_codes, (std::vector<uint8_t>{120, 110, 127, 121, 110, 110}));
  EXPECT_EQ(r.scales[3], 0x1p-6f);
  EXPECT_EQ(r.values[256 + 133], 0xFC);  // -6 / 2^-6 = -384
  EXPECT_EQ(pack_scales(r, ScaleLayout::kRowMajor, ScaleStorage::kByte), r.scale_codes);
  // Packed MN-major: one word column, token t's word holds groups 0..3 in bytes 0..3.
  const std::vector<uint8_t> packed = {120, 110, 0, 0, 127, 121, 0, 0, 110, 110, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(pack_scales(r, ScaleLayout::kMnMajor, ScaleStorage::kByte), packed);
  // The power of two stored as fp32.
  const std::vector<float> mn =
      as_floats(pack_scales(r, ScaleLayout::kMnMajor, ScaleStorage::kFp32));
  EXPECT_EQ(mn[1], 1.0f);
  EXPECT_EQ(mn[5], 0x1p-6f);
}

TEST(QuantReference, Nvfp4HandComputed) {
  const std::vector<uint16_t> bits = make_rows(1, 32,
                                               {{0, 0, 6.0f},
                                                {0, 1, 3.0f},
                                                {0, 2, -1.5f},
                                                {0, 3, 0.5f},
                                                {0, 4, 0.25f},
                                                {0, 5, 0.75f},
                                                {0, 6, -5.0f},
                                                {0, 7, 2.5f},  // block 0: amax 6
                                                {0, 16, 12.0f},
                                                {0, 17, 5.0f},
                                                {0, 18, -1.0f}});  // block 1: amax 12
  QuantResult r = quantize_ok(bits, 1, 32, spec_of(QuantKind::kNvfp4));
  EXPECT_EQ(r.scale_codes, (std::vector<uint8_t>{0x38, 0x40}));  // 1.0, 2.0
  std::vector<uint8_t> want(16, 0);
  want[0] = 0x57;  // 6 -> 7, 3 -> 5 (high nibble)
  want[1] = 0x1B;  // -1.5, 0.5
  want[2] = 0x20;  // 0.25 ties to 0, 0.75 ties to 1.0
  want[3] = 0x4E;  // -5 ties to -4, 2.5 ties to 2
  want[8] = 0x47;  // 12 * 0.5 = 6, 5 * 0.5 = 2.5 -> 2
  want[9] = 0x09;  // -0.5
  EXPECT_EQ(r.values, want);
  EXPECT_EQ(dequantize(r)[16], 12.0);

  // With gs = 448 * 6 / 12 the largest block's scale is 448: same codes, scales 224 and 448.
  r = quantize_ok(bits, 1, 32, spec_of(QuantKind::kNvfp4, false, 224.0f));
  EXPECT_EQ(r.scale_codes, (std::vector<uint8_t>{0x76, 0x7E}));
  EXPECT_EQ(r.values, want);
  EXPECT_EQ(dequantize(r)[16], 12.0);
  EXPECT_EQ(dequantize(r)[1], 3.0);
  // Swizzled: a 128x4 tile of which (0, 0) and (0, 1) are set.
  std::vector<uint8_t> tile(512, 0);
  tile[0] = 0x76;
  tile[1] = 0x7E;
  EXPECT_EQ(pack_scales(r, ScaleLayout::kSwizzled128x4, ScaleStorage::kByte), tile);
  EXPECT_EQ(pack_scales(r, ScaleLayout::kRowMajor, ScaleStorage::kByte), r.scale_codes);
  EXPECT_TRUE(pack_scales(r, ScaleLayout::kRowMajor, ScaleStorage::kFp32).empty());
}

TEST(QuantReference, Mxfp4HandComputed) {
  const std::vector<uint16_t> bits = make_rows(1, 64,
                                               {{0, 0, 7.0f},
                                                {0, 1, 5.0f},
                                                {0, 2, -0.25f},
                                                {0, 3, 3.0f},  // amax 7: X = 0, 7 saturates
                                                {0, 32, 0.75f},
                                                {0, 33, 0.1f},
                                                {0, 34, -0.375f}});  // amax 0.75: X = -3
  const QuantResult r = quantize_ok(bits, 1, 64, spec_of(QuantKind::kMxfp4));
  EXPECT_EQ(r.scale_codes, (std::vector<uint8_t>{127, 124}));
  EXPECT_EQ(r.scales, (std::vector<float>{1.0f, 0.125f}));
  std::vector<uint8_t> want(32, 0);
  want[0] = 0x67;   // 7 -> 6, 5 ties to 4
  want[1] = 0x58;   // -0.25 ties to -0, 3
  want[16] = 0x27;  // 6, 0.8 -> 1
  want[17] = 0x0D;  // -3
  EXPECT_EQ(r.values, want);
  EXPECT_EQ(dequantize(r)[0], 6.0);
  EXPECT_EQ(dequantize(r)[34], -0.375);
}

// Whether a value v (in units of the block's scale) and its dequantized value are at most half a
// step of the format apart, allowing for saturation only up to the largest v each recipe can reach:
// NVFP4's sf rounds to nearest (v <= 6 / (1 - 2^-4)), MXFP4's floor(log2) leaves v < 8, a dynamic
// FP8 scale overshoots 448 by float rounding at most.
bool within_half_step(QuantKind kind, double v, double err) {
  v = std::fabs(v);
  const bool fp4 = kind == QuantKind::kNvfp4 || kind == QuantKind::kMxfp4;
  const double top = fp4 ? 6.0 : 448.0;
  const double v_max = kind == QuantKind::kNvfp4 ? 6.4 : kind == QuantKind::kMxfp4 ? 8.0 : 448.001;
  if (v > v_max) return false;
  const double in_range = std::min(v, top);
  const double half = fp4 ? std::max(0.25, in_range * 0.25) : std::max(in_range * 0x1p-4, 0x1p-10);
  return err <= (v - in_range + half) * (1 + 1e-6);
}

// Every pattern's dequantized output is within half a step of the norm_out it read.
TEST(QuantReference, DequantizedValuesStayWithinHalfAStepOfNormOut) {
  for (const DType dtype : {DType::kBf16, DType::kFp16}) {
    const int64_t tokens = 5, hidden = 512, world = 2;
    std::vector<std::vector<uint16_t>> inputs(world, std::vector<uint16_t>(tokens * hidden));
    std::vector<uint16_t> residual(tokens * hidden), gamma(hidden);
    for (int r = 0; r < world; ++r) fill_random(inputs[r].data(), tokens * hidden, dtype, 7 + r);
    fill_random(residual.data(), tokens * hidden, dtype, 99);
    fill_random(gamma.data(), hidden, dtype, 123, 2.0f);
    FusedInputs in;
    in.dtype = in.gamma_dtype = dtype;
    in.num_tokens = tokens;
    in.hidden = hidden;
    for (const auto& v : inputs) in.rank_inputs.push_back(v.data());
    in.residual_in = residual.data();
    in.gamma = gamma.data();
    const std::vector<uint16_t> norm = reference_fused(in).norm_out;
    double tensor_amax = 0.0;
    for (const uint16_t b : norm)
      tensor_amax = std::max(tensor_amax, std::fabs(double{to_float(b, dtype)}));

    QuantSpec per_tensor = spec_of(QuantKind::kFp8PerTensor);
    per_tensor.static_scale = static_cast<float>(tensor_amax / 400.0);
    const QuantSpec specs[] = {
        per_tensor,
        spec_of(QuantKind::kFp8PerToken),
        spec_of(QuantKind::kFp8PerGroup),
        spec_of(QuantKind::kFp8PerGroup, /*ue8m0=*/true),
        spec_of(QuantKind::kNvfp4, false, static_cast<float>(2688.0 / tensor_amax)),
        spec_of(QuantKind::kMxfp4)};
    for (const QuantSpec& spec : specs) {
      const QuantResult r = quantize_ok(norm, tokens, hidden, spec, dtype);
      const std::vector<double> deq = dequantize(r);
      const int64_t block = quant_block_elems(spec.kind, hidden);
      int64_t bad = 0;
      for (int64_t i = 0; i < tokens * hidden; ++i) {
        // Units of the format: x / (what one unit dequantizes to).
        double unit = spec.static_scale;
        if (block != 0) unit = r.scales[(i / hidden) * r.scale_cols + (i % hidden) / block];
        if (spec.kind == QuantKind::kNvfp4) unit /= spec.global_scale;
        const double x = to_float(norm[i], dtype);
        const bool ok = unit == 0.0
                            ? deq[i] == 0.0 && std::fabs(x * spec.global_scale) <= 6 * 0x1p-10
                            : within_half_step(spec.kind, x / unit, std::fabs(deq[i] - x) / unit);
        if (!ok && bad++ == 0) {
          ADD_FAILURE() << "kind " << static_cast<int>(spec.kind) << " ue8m0 " << spec.ue8m0
                        << " element " << i << ": x " << x << " dequantized " << deq[i];
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// The amax element of a dynamic FP8 row or group lands on +-448 (or, with a UE8M0 scale, in the top
// binade (224, 448]), so the range is used in full.
TEST(QuantReference, DynamicFp8AmaxUsesTheTopOfTheRange) {
  std::vector<uint16_t> bits(4 * 256);
  fill_random(bits.data(), bits.size(), DType::kBf16, 5, 3.0f);
  for (const bool ue8m0 : {false, true}) {
    for (const QuantKind kind : {QuantKind::kFp8PerToken, QuantKind::kFp8PerGroup}) {
      const QuantResult r =
          quantize_ok(bits, 4, 256, spec_of(kind, ue8m0 && kind == QuantKind::kFp8PerGroup));
      const int64_t block = quant_block_elems(kind, 256);
      for (int64_t b = 0; b < 4 * 256 / block; ++b) {
        uint8_t top = 0;
        for (int64_t i = b * block; i < (b + 1) * block; ++i)
          top = std::max<uint8_t>(top, r.values[i] & 0x7F);
        EXPECT_LE(top, 0x7E);
        EXPECT_GE(top, r.spec.ue8m0 ? 0x76 : 0x7E) << "block " << b;
      }
    }
  }
}

TEST(QuantReference, Ordinals) {
  EXPECT_EQ(e4m3_ordinal(0x00), 0);
  EXPECT_EQ(e4m3_ordinal(0x80), 0);
  EXPECT_EQ(e4m3_ordinal(0x81), -1);
  EXPECT_EQ(e4m3_ordinal(0x7E), 126);
  EXPECT_EQ(e2m1_ordinal(0x8), 0);
  EXPECT_EQ(e2m1_ordinal(0xF), -7);
  EXPECT_EQ(e2m1_ordinal(0x3), 3);
}

TEST(QuantReference, ComparisonCatchesValueErrors) {
  const std::vector<uint16_t> bits =
      make_rows(2, 8, {{0, 0, 1.0f}, {0, 1, 0.01f}, {1, 3, NAN}, {1, 4, -3.0f}});
  const QuantResult r = quantize_ok(bits, 2, 8, spec_of(QuantKind::kFp8PerToken));
  const std::vector<uint8_t> scales = pack_scales(r, ScaleLayout::kRowMajor, ScaleStorage::kFp32);
  auto compare = [&](const std::vector<uint8_t>& values, int steps) {
    return first_quant_mismatch(r, values.data(), scales.data(), ScaleLayout::kRowMajor,
                                ScaleStorage::kFp32, steps);
  };
  EXPECT_EQ(compare(r.values, 0), "");
  std::vector<uint8_t> v = r.values;
  v[1] += 1;  // one step
  EXPECT_EQ(compare(v, 1), "");
  EXPECT_NE(compare(v, 0).find("row 0 col 1"), std::string::npos) << compare(v, 0);
  v[1] += 1;  // two steps
  EXPECT_NE(compare(v, 1).find("1 of 16"), std::string::npos) << compare(v, 1);
  v = r.values;
  ASSERT_EQ(v[8 + 3], 0x7F);  // NaN element; any NaN code is accepted, nothing else
  v[8 + 3] = 0xFF;
  EXPECT_EQ(compare(v, 1), "");
  v[8 + 3] = 0x7E;
  EXPECT_NE(compare(v, 1), "");
  v = r.values;
  v[2] = 0x81;  // +0 vs -2^-9: one step; 0x01 vs 0x81 would be two
  EXPECT_EQ(compare(v, 1), "");
  v[0] = quant::encode_e4m3(-quant::decode_e4m3(r.values[0]));  // sign flip
  EXPECT_NE(compare(v, 1), "");
}

TEST(QuantReference, ComparisonCatchesFp4Errors) {
  const std::vector<uint16_t> bits = make_rows(1, 32, {{0, 0, 0.5f}, {0, 1, 6.0f}});
  const QuantResult r = quantize_ok(bits, 1, 32, spec_of(QuantKind::kMxfp4));
  const std::vector<uint8_t> scales = pack_scales(r, ScaleLayout::kRowMajor, ScaleStorage::kByte);
  std::vector<uint8_t> v = r.values;
  ASSERT_EQ(v[0], 0x71);
  v[0] = 0x79;  // 0.5 -> -0.5: two steps across zero
  const std::string msg = first_quant_mismatch(r, v.data(), scales.data(), ScaleLayout::kRowMajor,
                                               ScaleStorage::kByte, 1);
  EXPECT_NE(msg.find("row 0 col 0"), std::string::npos) << msg;
  v[0] = 0x61;  // high nibble 6 -> 4 (code 7 -> 6): one step
  EXPECT_EQ(first_quant_mismatch(r, v.data(), scales.data(), ScaleLayout::kRowMajor,
                                 ScaleStorage::kByte, 1),
            "");
  EXPECT_NE(first_quant_mismatch(r, v.data(), scales.data(), ScaleLayout::kRowMajor,
                                 ScaleStorage::kByte, 0),
            "");
}

TEST(QuantReference, ComparisonDemandsExactScalesAndZeroPadding) {
  const QuantResult r =
      quantize_ok(group_rows(), 3, 256, spec_of(QuantKind::kFp8PerGroup, /*ue8m0=*/true));
  std::vector<uint8_t> s = pack_scales(r, ScaleLayout::kMnMajor, ScaleStorage::kByte);
  auto compare = [&] {
    return first_quant_mismatch(r, r.values.data(), s.data(), ScaleLayout::kMnMajor,
                                ScaleStorage::kByte);
  };
  EXPECT_EQ(compare(), "");
  s[5] += 1;  // token 1, group 1
  EXPECT_NE(compare().find("token 1, scale column 1"), std::string::npos) << compare();
  s[5] -= 1;
  s[13] = 0x7F;  // token 3 is padding
  EXPECT_NE(compare().find("padding"), std::string::npos) << compare();
  s[13] = 0;
  s[2] = 1;  // group 2 of token 0 does not exist: padding too
  EXPECT_NE(compare().find("padding"), std::string::npos) << compare();
  EXPECT_NE(first_quant_mismatch(r, r.values.data(), s.data(), ScaleLayout::kSwizzled128x4,
                                 ScaleStorage::kByte),
            "");

  // fp32 scales: one ulp is a mismatch.
  const QuantResult f = quantize_ok(group_rows(), 3, 256, spec_of(QuantKind::kFp8PerGroup));
  std::vector<uint8_t> fs = pack_scales(f, ScaleLayout::kRowMajor, ScaleStorage::kFp32);
  fs[12] ^= 1;  // scale (1, 1), lowest mantissa bit
  const std::string msg = first_quant_mismatch(f, f.values.data(), fs.data(),
                                               ScaleLayout::kRowMajor, ScaleStorage::kFp32);
  EXPECT_NE(msg.find("token 1, scale column 1"), std::string::npos) << msg;
}

}  // namespace
}  // namespace arf::ref
