// E4m3TensorReciprocal (quant_formats.h): the per-tensor FP8 quotient by a prescale, a reciprocal
// and Markstein's correction gives the IEEE division's bits where quant_formats.h says, and the
// division's codes (quantize_e4m3, the contract) for every bf16 and fp16 value and any scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "common/quant_formats.h"
#include "quant_test_values.h"

namespace arf::quant {
namespace {

using namespace test_values;  // quant_test_values.h

// Under ASan/UBSan the enumerations run on every 257th case (of each chunk of scales); the release
// build of the same CI run enumerates all of them.
#ifdef ARF_SANITIZED_BUILD
constexpr uint32_t kScaleStride = 257;
#else
constexpr uint32_t kScaleStride = 1;
#endif

// The exactness argument's base case: x and scale in [1, 2), every float significand of the scale
// against every fp16 significand of x (bf16's 7 bits are among fp16's 10). The quotient must be
// RN(x / scale) bit for bit; the uncorrected x * RN(1 / scale) is the control that must differ.
TEST(E4m3TensorReciprocal, ExactOnEverySignificandPair) {
  constexpr uint32_t kScaleSignificands = 1u << 23, kXSignificands = 1u << 10;
  constexpr uint32_t kChunk = 1u << 12;
  std::atomic<uint32_t> next{0};
  std::atomic<int64_t> pairs{0}, wrong{0}, uncorrected_wrong{0};
  auto work = [&] {
    int64_t my_pairs = 0, my_wrong = 0, my_uncorrected = 0;
    for (uint32_t c; (c = next.fetch_add(kChunk)) < kScaleSignificands;) {
      for (uint32_t m = c; m < c + kChunk; m += kScaleStride) {
        const float scale = bit_cast<float>(0x3F800000u | m);
        const E4m3TensorReciprocal r = e4m3_tensor_reciprocal(scale);
        for (uint32_t mx = 0; mx < kXSignificands; ++mx) {
          const float x = bit_cast<float>(0x3F800000u | (mx << 13));
          const uint32_t exact = bit_cast<uint32_t>(x / scale);
          my_wrong += bit_cast<uint32_t>(e4m3_tensor_quotient(x, r)) != exact;
          my_uncorrected += bit_cast<uint32_t>(x * r.recip) != exact;
        }
        my_pairs += kXSignificands;
      }
    }
    pairs += my_pairs; wrong += my_wrong; uncorrected_wrong += my_uncorrected;
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  // The stride restarts at every chunk: ceil(kChunk / kScaleStride) scales per chunk.
  constexpr int64_t kScalesPerChunk = (kChunk + kScaleStride - 1) / kScaleStride;
  EXPECT_EQ(pairs.load(), int64_t{kScaleSignificands / kChunk} * kScalesPerChunk * kXSignificands);
  EXPECT_GT(uncorrected_wrong.load(), pairs.load() / 5);  // ~27%: the correction is what makes it exact
}

// Per-tensor scales over the whole float range: calibrated-looking values, random significands
// at every exponent (subnormal and negative ones too), the prescale's edges, the specials, and
// random float bits. Every bf16 and fp16 x gets quantize_e4m3's code, and the quotient's bits
// wherever x / scale is in [2^-11, 1024) (below, both round to a signed zero code; above, both
// saturate).
TEST(E4m3TensorReciprocal, CodesOfTheDivisionForEveryValueAndScale) {
  const std::vector<float> xs = every_16_bit_value();
  std::vector<float> scales = {1.0f, 1.0f / 448.0f, 0.0123f, 0.5f, 3.0e5f, 2.5e-7f,
                               0x1.fffffep+0f, 0x1p-126f, down(0x1p-126f), 0x1p-149f,
                               0x1p+127f, std::numeric_limits<float>::max(), -1.0f / 64.0f,
                               0.0f, -0.0f, kInf, -kInf, kNan};
  uint64_t state = 2026;
  for (int e = -149; e < 128; ++e) {
    const uint32_t m = static_cast<uint32_t>(splitmix64(&state)) & 0x7FFFFFu;
    const float s = std::ldexp(bit_cast<float>(0x3F800000u | m), e);
    scales.push_back(e % 7 == 0 ? -s : s);
  }
  for (int i = 0; i < 64; ++i) scales.push_back(bit_cast<float>(static_cast<uint32_t>(splitmix64(&state))));
  int64_t code_mismatches = 0, quotient_mismatches = 0, exact_region = 0, checked = 0;
  for (const float s : scales) {
    const E4m3TensorReciprocal r = e4m3_tensor_reciprocal(s);
    for (size_t xi = 0; xi < xs.size(); xi += kScaleStride) {
      const float x = xs[xi];
      const float q = e4m3_tensor_quotient(x, r);
      const float exact = div_rn(x, s);
      ++checked;
      if (encode_e4m3(q) != quantize_e4m3(x, s) && ++code_mismatches < 5) {
        ADD_FAILURE() << "x " << x << " scale " << s << ": quotient " << q << ", division " << exact;
      }
      const float aq = std::fabs(exact);
      if (aq >= 0x1p-11f && aq < 1024.0f) {
        ++exact_region;
        quotient_mismatches += bit_cast<uint32_t>(q) != bit_cast<uint32_t>(exact);
      }
    }
  }
  EXPECT_EQ(code_mismatches, 0);
  EXPECT_EQ(quotient_mismatches, 0);
  EXPECT_GT(checked, 300 * (int64_t{2} << 16) / static_cast<int64_t>(kScaleStride));
  EXPECT_GT(exact_region, checked / 20);  // the exact region is well populated
}

// The special scales and values, with the division's answer spelled out.
TEST(E4m3TensorReciprocal, SpecialScalesAndValues) {
  const float big = std::numeric_limits<float>::max();
  for (const float s : {0x1p-149f, 1.0f, 0x1p+127f, big, -3.0f, 0.0f, -0.0f, kInf, -kInf, kNan}) {
    const E4m3TensorReciprocal r = e4m3_tensor_reciprocal(s);
    for (const float x : {0.0f, -0.0f, 1.0f, -1.0f, kInf, -kInf, kNan, big, -big, 0x1p-149f, -0x1p-133f}) {
      EXPECT_EQ(encode_e4m3(e4m3_tensor_quotient(x, r)), quantize_e4m3(x, s)) << x << " / " << s;
    }
  }
  const E4m3TensorReciprocal zero = e4m3_tensor_reciprocal(0.0f), inf = e4m3_tensor_reciprocal(kInf);
  EXPECT_EQ(e4m3_tensor_quotient(2.0f, zero), kInf);     // x / 0
  EXPECT_EQ(e4m3_tensor_quotient(-2.0f, zero), -kInf);
  EXPECT_TRUE(std::isnan(e4m3_tensor_quotient(0.0f, zero)));  // 0 / 0
  EXPECT_EQ(bit_cast<uint32_t>(e4m3_tensor_quotient(-2.0f, inf)), bit_cast<uint32_t>(-0.0f));  // x / inf
  EXPECT_TRUE(std::isnan(e4m3_tensor_quotient(kInf, inf)));  // inf / inf
  EXPECT_EQ(bit_cast<uint32_t>(e4m3_tensor_quotient(-0.0f, e4m3_tensor_reciprocal(1.0f))),
            bit_cast<uint32_t>(-0.0f));
  EXPECT_EQ(bit_cast<uint32_t>(e4m3_tensor_quotient(3.0f, e4m3_tensor_reciprocal(-0.0f))),
            bit_cast<uint32_t>(-kInf));
}

}  // namespace
}  // namespace arf::quant
