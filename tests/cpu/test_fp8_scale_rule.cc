// The dynamic FP8 scale rules (quant_formats.h Fp8ScaleRule; arfusion.h arfFp8ScaleRule_t) against
// formulas written here independently of quant_formats.h: arfFp8ScaleDivide is RN(amax / 448),
// arfFp8ScaleTimesReciprocal RN(amax * RN(1/448)) (torch's `amax / 448.0` on a GPU), each then
// floored at 1 / (448 * 512); checked for every bf16 and fp16 bit pattern (zero, subnormals, Inf,
// NaN and negative values included) and random floats. Then how often the rules differ, that the
// UE8M0 scales of both still bound amax / scale by 448, and the CPU reference quantizing with each.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/quant_formats.h"
#include "reference/cpu_reference.h"
#include "reference/quant_reference.h"

namespace arf::quant {
namespace {

// Run-time operands (volatile), so the compiler folds nothing: the arithmetic is the machine's
// fp32 IEEE operations (FLT_EVAL_METHOD 0 on the CPU builds: cpu_reference.cc checks).
volatile float g_one = 1.0f, g_e4m3_max = 448.0f, g_floor_divisor = 448.0f * 512.0f;

float floor_of_scales() { return g_one / g_floor_divisor; }

// torch's clamp_min(amax / 448.0, 1 / (448 * 512)) as a GPU evaluates it: one fp32 multiplication
// by the fp32 reciprocal, then the floor. NaN gives the floor (the contract's choice: an amax
// ignores NaN elements, so this input never comes from a row; torch's clamp_min would keep NaN).
float times_reciprocal_formula(float amax) {
  const float reciprocal = g_one / g_e4m3_max;
  const float product = amax * reciprocal;
  return product > floor_of_scales() ? product : floor_of_scales();
}

// The IEEE quotient, then the floor (the default rule; torch's formula on the CPU).
float divide_formula(float amax) {
  const float quotient = amax / g_e4m3_max;
  return quotient > floor_of_scales() ? quotient : floor_of_scales();
}

float rule_formula(Fp8ScaleRule rule, float amax) {
  return rule == Fp8ScaleRule::kDivide ? divide_formula(amax) : times_reciprocal_formula(amax);
}

// Every bf16 or fp16 bit pattern as a float, and random float patterns.
std::vector<float> every_16_bit_value(bool fp16) {
  std::vector<float> v;
  for (uint32_t b = 0; b < (1u << 16); ++b) {
    v.push_back(fp16 ? ref::fp16_to_float(static_cast<uint16_t>(b))
                     : ref::bf16_to_float(static_cast<uint16_t>(b)));
  }
  return v;
}

TEST(Fp8ScaleRule, TheReciprocalIsTheFp32RoundingOfOneOver448) {
  EXPECT_EQ(bit_cast<uint32_t>(kE4m3MaxReciprocal), 0x3B124925u);
  EXPECT_EQ(bit_cast<uint32_t>(kE4m3MaxReciprocal), bit_cast<uint32_t>(g_one / g_e4m3_max));
  EXPECT_EQ(bit_cast<uint32_t>(kE4m3MaxReciprocal), bit_cast<uint32_t>(static_cast<float>(1.0 / 448.0)));
  EXPECT_EQ(static_cast<int>(Fp8ScaleRule::kDivide), 0);
  EXPECT_EQ(static_cast<int>(Fp8ScaleRule::kTimesReciprocal), 1);
}

// Both rules equal their formula bit for bit for every 16-bit value and a few million random
// floats; the UE8M0 code is the formula's scale rounded up to a power of two.
TEST(Fp8ScaleRule, EachRuleIsItsFormulaThenTheFloor) {
  std::vector<float> inputs;
  for (const bool fp16 : {false, true}) {
    const std::vector<float> v = every_16_bit_value(fp16);
    inputs.insert(inputs.end(), v.begin(), v.end());
  }
  uint64_t state = 0x5eed;
  for (int i = 0; i < (1 << 22); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    inputs.push_back(bit_cast<float>(static_cast<uint32_t>(state >> 32)));
  }
  for (const float edge : {0.0f, -0.0f, 0x1p-10f, std::nextafter(0x1p-10f, 0.0f), 0x1p-9f,
                           std::nextafter(0x1p-9f, 1.0f), 448.0f, 0x1p-149f,
                           std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()}) {
    inputs.push_back(edge);
  }
  for (const Fp8ScaleRule rule : {Fp8ScaleRule::kDivide, Fp8ScaleRule::kTimesReciprocal}) {
    int64_t mismatches = 0, ue8m0_mismatches = 0;
    for (const float amax : inputs) {
      const float want = rule_formula(rule, amax);
      if (bit_cast<uint32_t>(fp8_dynamic_scale(amax, rule)) != bit_cast<uint32_t>(want) && ++mismatches <= 5) {
        ADD_FAILURE() << "rule " << static_cast<int>(rule) << " amax " << amax << " (0x" << std::hex
                      << bit_cast<uint32_t>(amax) << "): " << fp8_dynamic_scale(amax, rule) << ", want " << want;
      }
      ue8m0_mismatches += fp8_dynamic_scale_ue8m0(amax, rule) != encode_ue8m0_ceil(want);
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(ue8m0_mismatches, 0);
  }
  // The special values under both rules: zero and NaN give the floor, +inf stays +inf.
  for (const Fp8ScaleRule rule : {Fp8ScaleRule::kDivide, Fp8ScaleRule::kTimesReciprocal}) {
    EXPECT_EQ(bit_cast<uint32_t>(fp8_dynamic_scale(0.0f, rule)), bit_cast<uint32_t>(kMinFp8Scale));
    EXPECT_EQ(bit_cast<uint32_t>(fp8_dynamic_scale(std::numeric_limits<float>::quiet_NaN(), rule)),
              bit_cast<uint32_t>(kMinFp8Scale));
    EXPECT_EQ(fp8_dynamic_scale(std::numeric_limits<float>::infinity(), rule),
              std::numeric_limits<float>::infinity());
    EXPECT_EQ(fp8_dynamic_scale_ue8m0(std::numeric_limits<float>::infinity(), rule), 0xFE);
    EXPECT_EQ(bit_cast<uint32_t>(fp8_dynamic_scale(0x1p-149f, rule)), bit_cast<uint32_t>(kMinFp8Scale));  // subnormal amax
    EXPECT_EQ(fp8_dynamic_scale_ue8m0(0.0f, rule), 110);
  }
  EXPECT_EQ(bit_cast<uint32_t>(floor_of_scales()), bit_cast<uint32_t>(kMinFp8Scale));
}

// How often the rules part, over the positive finite values of each dtype: the unfloored
// quotients RN(a / 448) and RN(a * RN(1/448)) differ for 17,468 of bf16's 32,512 positive normal
// values (the figure the torch probe, dev/python/probe_fp8_scale_rounding.py, measured
// exhaustively), the floored scales for 9,727 of them (the rest lie under the floor);
// always by one ulp. The power-of-two (UE8M0) scales never differ for a 16-bit amax.
TEST(Fp8ScaleRule, TheRulesDifferByOneUlpWhereTheQuotientsDo) {
  struct Counts {
    int64_t positive_finite, normal, quotients_differ, scales_differ, ue8m0_differ;
  };
  const auto count = [](bool fp16) {
    Counts c{};
    for (uint32_t b = 1; b < 0x8000u; ++b) {
      const float a = fp16 ? ref::fp16_to_float(static_cast<uint16_t>(b))
                           : ref::bf16_to_float(static_cast<uint16_t>(b));
      if (!std::isfinite(a)) continue;
      ++c.positive_finite;
      c.normal += std::isnormal(a);
      c.quotients_differ += bit_cast<uint32_t>(a / g_e4m3_max) != bit_cast<uint32_t>(a * (g_one / g_e4m3_max));
      const float divide = fp8_dynamic_scale(a, Fp8ScaleRule::kDivide);
      const float times = fp8_dynamic_scale(a, Fp8ScaleRule::kTimesReciprocal);
      if (bit_cast<uint32_t>(divide) != bit_cast<uint32_t>(times)) {
        ++c.scales_differ;
        EXPECT_EQ(bit_cast<uint32_t>(std::nextafter(divide, times)), bit_cast<uint32_t>(times)) << a;  // one ulp apart
        EXPECT_GE(a, 0x1p-9f) << "a floored scale differs";
      }
      c.ue8m0_differ += fp8_dynamic_scale_ue8m0(a, Fp8ScaleRule::kDivide) !=
                        fp8_dynamic_scale_ue8m0(a, Fp8ScaleRule::kTimesReciprocal);
    }
    return c;
  };
  const Counts bf16 = count(false), fp16 = count(true);
  EXPECT_EQ(bf16.normal, 32'512);
  EXPECT_EQ(bf16.positive_finite, 32'639);
  EXPECT_EQ(bf16.quotients_differ, 17'468);
  EXPECT_EQ(bf16.scales_differ, 9'727);
  EXPECT_EQ(bf16.ue8m0_differ, 0);
  EXPECT_EQ(fp16.positive_finite, 31'743);
  EXPECT_EQ(fp16.quotients_differ, 17'420);
  EXPECT_EQ(fp16.scales_differ, 14'050);
  EXPECT_EQ(fp16.ue8m0_differ, 0);
}

// The UE8M0 scale of either rule keeps amax / scale <= 448 (exactly, in double) for every
// 16-bit amax, so rounding the scale up never makes an element saturate.
TEST(Fp8ScaleRule, Ue8m0ScalesOfBothRulesBoundTheAmax) {
  for (const bool fp16 : {false, true}) {
    for (const float a : every_16_bit_value(fp16)) {
      if (!std::isfinite(a) || a <= 0.0f) continue;
      for (const Fp8ScaleRule rule : {Fp8ScaleRule::kDivide, Fp8ScaleRule::kTimesReciprocal}) {
        const double scale = decode_ue8m0(fp8_dynamic_scale_ue8m0(a, rule));
        ASSERT_LE(static_cast<double>(a) / scale, 448.0) << a << " rule " << static_cast<int>(rule);
      }
    }
  }
}

}  // namespace
}  // namespace arf::quant

namespace arf::ref {
namespace {

using quant::Fp8ScaleRule;

// Rows of bf16 values spread over many binades, so that both rules' scales occur and differ.
std::vector<uint16_t> spread_rows(int64_t tokens, int64_t hidden) {
  std::vector<uint16_t> v(tokens * hidden);
  uint64_t state = 99;
  for (auto& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float mag = std::ldexp(1.0f + static_cast<float>((state >> 40) & 0xFFFF) / 65536.0f,
                                 static_cast<int>((state >> 20) % 24) - 12);
    x = from_float((state >> 63) ? -mag : mag, DType::kBf16);
  }
  return v;
}

// The reference with each rule, checked against this file's formulas: per-token and per-group
// scales (fp32, and UE8M0 codes) from the block amax, every value e4m3(x / scale) with the IEEE
// division; the two rules' fp32 scales differ somewhere on this data, their codes never.
TEST(Fp8ScaleRuleReference, QuantizesWithTheSpecsRule) {
  constexpr int64_t kTokens = 64, kHidden = 512;
  const std::vector<uint16_t> rows = spread_rows(kTokens, kHidden);
  for (const QuantKind kind : {QuantKind::kFp8PerToken, QuantKind::kFp8PerGroup}) {
    for (const bool ue8m0 : {false, true}) {
      if (ue8m0 && kind == QuantKind::kFp8PerToken) continue;
      QuantResult by_rule[2];
      for (const Fp8ScaleRule rule : {Fp8ScaleRule::kDivide, Fp8ScaleRule::kTimesReciprocal}) {
        QuantSpec spec;
        spec.kind = kind;
        spec.ue8m0 = ue8m0;
        spec.scale_rule = rule;
        QuantResult& r = by_rule[static_cast<int>(rule)];
        ASSERT_EQ(quantize_reference(rows.data(), DType::kBf16, kTokens, kHidden, spec, &r), "");
        const int64_t block = kind == QuantKind::kFp8PerToken ? kHidden : 128;
        for (int64_t t = 0; t < kTokens; ++t) {
          for (int64_t b = 0; b < kHidden / block; ++b) {
            float amax = 0.0f;
            for (int64_t i = 0; i < block; ++i) {
              amax = std::fmax(amax, std::fabs(to_float(rows[t * kHidden + b * block + i], DType::kBf16)));
            }
            float scale = quant::rule_formula(rule, amax);
            const int64_t s = t * (kHidden / block) + b;
            if (ue8m0) {
              ASSERT_EQ(r.scale_codes[s], quant::encode_ue8m0_ceil(scale));
              scale = quant::decode_ue8m0(r.scale_codes[s]);
            }
            ASSERT_EQ(bit_cast<uint32_t>(r.scales[s]), bit_cast<uint32_t>(scale)) << "token " << t << " block " << b;
            for (int64_t i = 0; i < block; ++i) {
              const int64_t e = t * kHidden + b * block + i;
              const float x = to_float(rows[e], DType::kBf16);
              ASSERT_EQ(r.values[e], quant::encode_e4m3(x / scale)) << "element " << e;
            }
          }
        }
      }
      int64_t scales_differ = 0;
      for (size_t s = 0; s < by_rule[0].scales.size(); ++s) {
        scales_differ += bit_cast<uint32_t>(by_rule[0].scales[s]) != bit_cast<uint32_t>(by_rule[1].scales[s]);
      }
      if (ue8m0) {
        EXPECT_EQ(scales_differ, 0);  // no 16-bit amax gives the rules different codes
      } else {
        EXPECT_GT(scales_differ, static_cast<int64_t>(by_rule[0].scales.size() / 10));
      }
    }
  }
}

// The rule applies to the dynamic FP8 kinds only: the reference refuses it elsewhere, as
// validation does (core/quant_rules.h).
TEST(Fp8ScaleRuleReference, OtherKindsTakeTheDivideRuleOnly) {
  for (const QuantKind kind : {QuantKind::kFp8PerTensor, QuantKind::kNvfp4, QuantKind::kMxfp4,
                               QuantKind::kFp8PerToken, QuantKind::kFp8PerGroup}) {
    QuantSpec spec;
    spec.kind = kind;
    spec.scale_rule = Fp8ScaleRule::kTimesReciprocal;
    const bool dynamic = kind == QuantKind::kFp8PerToken || kind == QuantKind::kFp8PerGroup;
    EXPECT_EQ(quant_spec_error(spec, 1024).empty(), dynamic) << static_cast<int>(kind);
    if (!dynamic) {
      EXPECT_EQ(quant_spec_error(spec, 1024),
                "scale rule times_reciprocal applies to fp8 per-token and per-group only");
    }
    spec.scale_rule = Fp8ScaleRule::kDivide;
    EXPECT_EQ(quant_spec_error(spec, 1024), "");
  }
  QuantSpec bad;
  const int two = 2;
  std::memcpy(&bad.scale_rule, &two, sizeof(two));
  EXPECT_EQ(quant_spec_error(bad, 1024), "unknown fp8 scale rule");
}

}  // namespace
}  // namespace arf::ref
