// CPU tests of --verify gpu's comparison logic (gpu_check.h): the same host+device functions the
// check kernel runs, here on the host, against the CPU reference (values, bitwise) and against the
// host verifier's check_call (verdicts: counts of wrong and cross-rank elements, first mismatch).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dataset.h"
#include "export/reference_api.h"
#include "gpu_check.h"
#include "gpu_report.h"
#include "verify.h"

namespace arf::stress {
namespace {

constexpr int kWorld = 3;
constexpr int64_t kRows = 24;
constexpr int64_t kHidden = 48;

const std::vector<DataSet>& sets_of(DType dtype) {
  auto make = [](DType d) {
    DataOptions o;
    o.dtype = d;
    o.world = kWorld;
    o.num_sets = 4;
    o.rows = kRows;
    o.hidden = kHidden;
    o.seed = 7;
    o.threads = 2;
    return make_data_sets(o);
  };
  static const std::vector<DataSet> bf16 = make(DType::kBf16), fp16 = make(DType::kFp16);
  return dtype == DType::kFp16 ? fp16 : bf16;
}

uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(GpuCheck, ConversionsMatchTheCpuReference) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    ASSERT_EQ(fbits(gv::bf16_to_float(bits)), fbits(ref::bf16_to_float(bits))) << b;
    ASSERT_EQ(fbits(gv::fp16_to_float(bits)), fbits(ref::fp16_to_float(bits))) << b;
  }
  std::mt19937_64 rng(3);
  std::vector<float> values = {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 65519.99f, 1e-8f, -3e-8f,
                               std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::denorm_min(), 3.4e38f};
  for (int i = 0; i < 400000; ++i) {
    const uint32_t u = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &u, 4);
    values.push_back(f);
  }
  for (float f : values) {
    ASSERT_EQ(gv::float_to_bf16(f), ref::float_to_bf16(f)) << fbits(f);
    ASSERT_EQ(gv::float_to_fp16(f), ref::float_to_fp16(f)) << fbits(f);
  }
}

TEST(GpuCheck, KeysPackUnpackAndOrderAsTheHostVerifierReports) {
  const uint64_t k = gv::pack_key(63, 7, gv::kOutBVsRank0, (int64_t{1} << 40) - 1);
  const gv::KeyFields f = gv::unpack_key(k);
  EXPECT_EQ(f.call_in_step, 63);
  EXPECT_EQ(f.rank, 7);
  EXPECT_EQ(f.kind, gv::kOutBVsRank0);
  EXPECT_EQ(f.elem, (int64_t{1} << 40) - 1);
  EXPECT_NE(k, gv::kNoKey);
  const gv::KeyFields g = gv::unpack_key(gv::pack_key(5, 2, gv::kOutAVsReference, 1234567));
  EXPECT_EQ(g.call_in_step, 5);
  EXPECT_EQ(g.rank, 2);
  EXPECT_EQ(g.kind, gv::kOutAVsReference);
  EXPECT_EQ(g.elem, 1234567);
  // Lower call first, then rank, then kind (reference before rank 0, out_a before out_b), element.
  EXPECT_LT(gv::pack_key(0, 7, 3, 999999), gv::pack_key(1, 0, 0, 0));
  EXPECT_LT(gv::pack_key(0, 1, 3, 999999), gv::pack_key(0, 2, 0, 0));
  EXPECT_LT(gv::pack_key(0, 1, gv::kOutAVsReference, 999), gv::pack_key(0, 1, gv::kOutBVsReference, 0));
  EXPECT_LT(gv::pack_key(0, 1, gv::kOutBVsReference, 999), gv::pack_key(0, 1, gv::kOutAVsRank0, 0));
  EXPECT_LT(gv::pack_key(0, 1, 0, 10), gv::pack_key(0, 1, 0, 11));
}

// The host verifier's norm verdict: bitwise the rounded reference, else the tolerance.
bool host_norm_ok(uint16_t got, double exact, DType dtype) {
  const uint16_t want = ref::from_float(gv::double_to_float_round_odd(exact), dtype);
  return got == want || ref::norm_within_tolerance(got, exact, dtype);
}

TEST(GpuCheck, NormVerdictsMatchTheHostVerifier) {
  std::mt19937_64 rng(11);
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    const bool fp16 = dtype == DType::kFp16;
    std::vector<double> exacts = {0.0, -0.0, 1e-300, 5e-324, 1e-6, -1e-6, 2e-6, 1.0, -1.5, 1e5,
                                  70000.0, 1e39, std::numeric_limits<double>::infinity(),
                                  -std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::quiet_NaN()};
    for (const DataSet& set : sets_of(dtype)) exacts.insert(exacts.end(), set.norm_exact.begin(), set.norm_exact.end());
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int i = 0; i < 20000; ++i) exacts.push_back(normal(rng) * std::ldexp(1.0, static_cast<int>(rng() % 40) - 30));
    uint64_t checked = 0, accepted = 0;
    for (double exact : exacts) {
      // The rounded value and its neighbours (where the tolerance boundary lies), plus random bits.
      const uint16_t near = ref::from_float(static_cast<float>(exact), dtype);
      std::vector<uint16_t> gots;
      for (int d = -4; d <= 4; ++d) gots.push_back(static_cast<uint16_t>(near + d));
      gots.push_back(static_cast<uint16_t>(near ^ 0x8000u));
      gots.push_back(static_cast<uint16_t>(rng()));
      gots.push_back(fp16 ? 0x7E00 : 0x7FC0);  // NaN
      gots.push_back(fp16 ? 0x7C00 : 0x7F80);  // +Inf
      for (uint16_t got : gots) {
        const bool want = host_norm_ok(got, exact, dtype);
        ASSERT_EQ(gv::norm_ok(got, exact, fp16), want)
            << "got 0x" << std::hex << got << std::dec << " exact " << exact;
        ASSERT_EQ(gv::norm_within_tolerance(got, exact, fp16),
                  ref::norm_within_tolerance(got, exact, dtype));
        ++checked;
        accepted += want;
      }
    }
    EXPECT_GT(accepted, checked / 10);  // both verdicts are exercised
    EXPECT_LT(accepted, checked);
  }
}

// A call of `set` with every rank's outputs (correct copies of the host reference, then corrupted).
struct Call {
  CallSpec spec;
  const DataSet* set = nullptr;
  std::vector<std::vector<uint16_t>> a, b;  // [rank]

  Call(const DataSet& s, arfPattern_t pattern, int64_t offset, int64_t tokens, uint64_t index) {
    set = &s;
    spec.index = index;
    spec.pattern = pattern;
    spec.tokens = tokens;
    spec.row_offset = offset;
    spec.gamma_kind = s.gamma_kind;
    const int64_t base = offset * kHidden, n = tokens * kHidden;
    const auto& out_a = pattern == arfPatternAllReduce ? s.allreduce : s.residual_out;
    for (int r = 0; r < kWorld; ++r) {
      a.emplace_back(out_a.begin() + base, out_a.begin() + base + n);
      b.emplace_back(s.norm_out.begin() + base, s.norm_out.begin() + base + n);
    }
  }
  bool norm() const { return spec.pattern == arfPatternResidualRmsNorm; }

  CallCheck host(DType dtype) const {
    std::vector<RankOutputs> v;
    for (int r = 0; r < kWorld; ++r) {
      v.push_back(norm() ? RankOutputs{nullptr, a[r].data(), b[r].data()}
                         : RankOutputs{a[r].data(), nullptr, nullptr});
    }
    return check_call(spec, *set, kHidden, dtype, v);
  }

  gv::CallView view(DType dtype) const {
    gv::CallView v;
    v.world = kWorld;
    v.fp16 = dtype == DType::kFp16;
    v.norm = norm();
    v.hidden = kHidden;
    v.eps = kEps;
    v.gamma_offset = gamma_plus_one(set->gamma_kind) ? 1.0f : 0.0f;
    v.gamma_fp32 = gamma_fp32(set->gamma_kind);
    const int64_t base = spec.row_offset * kHidden;
    v.residual = set->residual.data() + base;
    v.gamma = v.gamma_fp32 ? static_cast<const void*>(set->gamma32.data()) : set->gamma16.data();
    for (int r = 0; r < kWorld; ++r) {
      v.input[r] = set->inputs[r].data() + base;
      v.out_a[r] = a[r].data();
      v.out_b[r] = norm() ? b[r].data() : nullptr;
    }
    return v;
  }
};

TEST(GpuCheck, DeviceReferenceIsBitwiseTheCpuReference) {
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    for (const DataSet& set : sets_of(dtype)) {
      const Call call(set, arfPatternResidualRmsNorm, 0, kRows, 0);
      const gv::CallView v = call.view(dtype);
      gv::CountingSink sink;
      std::vector<uint16_t> row(kHidden);
      for (int64_t t = 0; t < kRows; ++t) {
        for (int64_t c = 0; c < kHidden; ++c) {
          row[c] = gv::check_sum_element(v, t * kHidden + c, sink);
          ASSERT_EQ(row[c], set.residual_out[t * kHidden + c]);
        }
        const double inv_rms = gv::inv_rms_of_row(row.data(), kHidden, kEps, v.fp16);
        for (int64_t c = 0; c < kHidden; ++c) {
          const double exact = gv::norm_exact(v, c, row[c], inv_rms);
          const double want = set.norm_exact[t * kHidden + c];
          ASSERT_EQ(std::memcmp(&exact, &want, 8), 0) << "row " << t << " col " << c;
        }
      }
      EXPECT_EQ(sink.wrong, 0u);
      EXPECT_EQ(sink.cross, 0u);
      Call ar(set, arfPatternAllReduce, 0, kRows, 0);
      gv::CountingSink ar_sink;
      for (int64_t i = 0; i < kRows * kHidden; ++i) {
        ASSERT_EQ(gv::check_sum_element(ar.view(dtype), i, ar_sink), set.allreduce[i]);
      }
      EXPECT_EQ(ar_sink.wrong + ar_sink.cross, 0u);
    }
  }
}

// Random corruptions of random calls: the emulated kernel's counts and first mismatch (through
// first_mismatch's logic: key fields, got and rank-0 bits, want from the host reference) equal
// the host verifier's.
void corrupt(Call& call, std::mt19937_64& rng, DType dtype) {
  const int64_t n = call.spec.tokens * kHidden;
  const int edits = static_cast<int>(rng() % 6);
  for (int e = 0; e < edits; ++e) {
    const int r = static_cast<int>(rng() % kWorld);
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    auto& out = call.norm() && (rng() & 1) ? call.b[r] : call.a[r];
    switch (rng() % 5) {
      case 0: out[i] ^= static_cast<uint16_t>(1u << (rng() % 16)); break;
      case 1: out[i] = static_cast<uint16_t>(out[i] + 1); break;   // 1 ulp: norm may pass
      case 2: out[i] = static_cast<uint16_t>(out[i] - 1); break;
      case 3: out[i] = static_cast<uint16_t>(0x5A00u | (rng() & 0x80FFu)); break;  // consumer
      default: out[i] = dtype == DType::kFp16 ? 0x7E00 : 0x7FC0; break;            // NaN
    }
  }
}

void expect_same_verdicts(DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto& sets = sets_of(dtype);
  int bad_calls = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    const DataSet& set = sets[rng() % sets.size()];
    const arfPattern_t pattern = (rng() & 1) ? arfPatternAllReduce : arfPatternResidualRmsNorm;
    const int64_t tokens = 1 + static_cast<int64_t>(rng() % kRows);
    const int64_t offset = static_cast<int64_t>(rng() % static_cast<uint64_t>(kRows - tokens + 1));
    Call call(set, pattern, offset, tokens, 100 + trial);
    corrupt(call, rng, dtype);
    const CallCheck want = call.host(dtype);
    gv::CountingSink sink;
    sink.call_in_step = static_cast<int>(rng() % gv::kMaxCallsPerStep);
    std::vector<uint16_t> scratch(kHidden);
    gv::check_call_on_host(call.view(dtype), tokens, sink, scratch.data());
    ASSERT_EQ(sink.wrong, want.wrong_elems) << "trial " << trial;
    ASSERT_EQ(sink.cross, want.cross_rank_elems) << "trial " << trial;
    ASSERT_EQ(sink.key != gv::kNoKey, want.has_mismatch) << "trial " << trial;
    if (!want.has_mismatch) continue;
    ++bad_calls;
    const gv::KeyFields f = gv::unpack_key(sink.key);
    EXPECT_EQ(f.call_in_step, sink.call_in_step);
    const auto& out = gv::kind_is_out_b(f.kind) ? call.b : call.a;
    const Mismatch m = first_mismatch(call.spec, f, out[f.rank][f.elem], out[0][f.elem], set,
                                      kHidden, dtype);
    EXPECT_EQ(m.describe(dtype), want.first.describe(dtype)) << "trial " << trial;
    EXPECT_EQ(m.output, want.first.output);
    EXPECT_EQ(m.against, want.first.against);
  }
  EXPECT_GT(bad_calls, 500);
}

TEST(GpuCheck, SameVerdictsAsTheHostVerifierBf16) { expect_same_verdicts(DType::kBf16, 21); }
TEST(GpuCheck, SameVerdictsAsTheHostVerifierFp16) { expect_same_verdicts(DType::kFp16, 22); }

}  // namespace
}  // namespace arf::stress
