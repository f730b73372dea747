// CPU tests of the soak's data and checks: the per-row reference slice equals the reference of the
// slice (what makes checking every call cheap), mismatches are found and located, and the exit
// code never turns a timeout into a detection.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "dataset.h"
#include "export/reference_api.h"
#include "summary.h"
#include "verify.h"

namespace arf::stress {
namespace {

constexpr int kWorld = 3;
constexpr int64_t kRows = 24;
constexpr int64_t kHidden = 40;

DataOptions small_options() {
  DataOptions o;
  o.world = kWorld;
  o.num_sets = 4;
  o.rows = kRows;
  o.hidden = kHidden;
  o.seed = 99;
  o.threads = 3;
  return o;
}

const std::vector<DataSet>& small_sets() {
  static const std::vector<DataSet> sets = make_data_sets(small_options());
  return sets;
}

TEST(DataSets, DistinctPerRankAndSetAndGammaKindPerSet) {
  const auto& sets = small_sets();
  ASSERT_EQ(sets.size(), 4u);
  std::set<std::vector<uint16_t>> inputs;
  for (size_t s = 0; s < sets.size(); ++s) {
    EXPECT_EQ(sets[s].gamma_kind, static_cast<int>(s % kGammaKinds));
    for (const auto& in : sets[s].inputs) inputs.insert(in);
  }
  EXPECT_EQ(inputs.size(), sets.size() * kWorld);
}

TEST(DataSets, ReferenceOfARowSliceIsTheSliceOfTheReference) {
  const auto& sets = small_sets();
  for (int s = 0; s < 4; ++s) {
    const DataSet& set = sets[s];
    const int64_t offset = 5 + s, tokens = 7;
    const int64_t base = offset * kHidden;
    ref::FusedInputs in;
    in.num_tokens = tokens;
    in.hidden = kHidden;
    for (const auto& input : set.inputs) in.rank_inputs.push_back(input.data() + base);
    in.residual_in = set.residual.data() + base;
    const bool fp32 = gamma_fp32(set.gamma_kind);
    in.gamma = fp32 ? static_cast<const void*>(set.gamma32.data()) : set.gamma16.data();
    in.gamma_dtype = fp32 ? DType::kFp32 : DType::kBf16;
    in.gamma_offset = gamma_plus_one(set.gamma_kind) ? 1.0f : 0.0f;
    in.eps = kEps;
    const ref::FusedOutputs want = ref::reference_fused(in);
    const int64_t n = tokens * kHidden;
    EXPECT_TRUE(std::equal(want.allreduce.begin(), want.allreduce.end(), set.allreduce.begin() + base));
    EXPECT_TRUE(std::equal(want.residual_out.begin(), want.residual_out.end(),
                           set.residual_out.begin() + base));
    EXPECT_TRUE(std::equal(want.norm_out.begin(), want.norm_out.end(), set.norm_out.begin() + base));
    EXPECT_EQ(want.norm_exact.size(), static_cast<size_t>(n));
  }
}

// Outputs of every rank as copies of the reference slice, which tests then corrupt.
struct FakeOutputs {
  std::vector<std::vector<uint16_t>> a, b;  // [rank]: allreduce or residual_out / norm_out
  std::vector<RankOutputs> views(arfPattern_t pattern) {
    std::vector<RankOutputs> v;
    for (int r = 0; r < kWorld; ++r) {
      v.push_back(pattern == arfPatternAllReduce ? RankOutputs{a[r].data(), nullptr, nullptr}
                                                 : RankOutputs{nullptr, a[r].data(), b[r].data()});
    }
    return v;
  }
};

FakeOutputs correct_outputs(const CallSpec& call, const DataSet& set) {
  FakeOutputs out;
  const int64_t base = call.row_offset * kHidden, n = call.tokens * kHidden;
  const bool ar = call.pattern == arfPatternAllReduce;
  const auto& a = ar ? set.allreduce : set.residual_out;
  for (int r = 0; r < kWorld; ++r) {
    out.a.emplace_back(a.begin() + base, a.begin() + base + n);
    out.b.emplace_back(set.norm_out.begin() + base, set.norm_out.begin() + base + n);
  }
  return out;
}

CallSpec norm_call() {
  CallSpec call;
  call.index = 42;
  call.pattern = arfPatternResidualRmsNorm;
  call.tokens = 6;
  call.set = 1;
  call.gamma_kind = 1;
  call.row_offset = 9;
  return call;
}

TEST(CheckCall, CorrectOutputsPass) {
  CallSpec call = norm_call();
  FakeOutputs out = correct_outputs(call, small_sets()[1]);
  EXPECT_TRUE(check_call(call, small_sets()[1], kHidden, DType::kBf16, out.views(call.pattern)).ok());
  call.pattern = arfPatternAllReduce;
  out = correct_outputs(call, small_sets()[1]);
  EXPECT_TRUE(check_call(call, small_sets()[1], kHidden, DType::kBf16, out.views(call.pattern)).ok());
}

TEST(CheckCall, LocatesTheFirstWrongElementAndCountsCrossRank) {
  const CallSpec call = norm_call();
  const DataSet& set = small_sets()[1];
  FakeOutputs out = correct_outputs(call, set);
  out.a[2][3 * kHidden + 17] ^= 0x0100;  // rank 2 residual_out, row 3, col 17
  out.a[1][4 * kHidden + 2] ^= 0x0001;   // rank 1, a later row: first (lowest rank wins)
  const CallCheck c = check_call(call, set, kHidden, DType::kBf16, out.views(call.pattern));
  EXPECT_EQ(c.wrong_elems, 2u);
  EXPECT_EQ(c.cross_rank_elems, 2u);
  ASSERT_TRUE(c.has_mismatch);
  EXPECT_EQ(c.first.call, 42u);
  EXPECT_EQ(c.first.rank, 1);  // lowest rank first
  EXPECT_EQ(c.first.output, "residual_out");
  EXPECT_EQ(c.first.row, 4);
  EXPECT_EQ(c.first.col, 2);
  EXPECT_NE(c.first.describe(DType::kBf16).find("rank 1 residual_out row 4 col 2"), std::string::npos);
}

TEST(CheckCall, NormWithinToleranceButDifferentAcrossRanksIsCaught) {
  const CallSpec call = norm_call();
  const DataSet& set = small_sets()[1];
  FakeOutputs out = correct_outputs(call, set);
  // Find an element whose neighbour value (1 ulp) is still within tolerance.
  const int64_t base = call.row_offset * kHidden;
  int64_t idx = -1;
  for (int64_t i = 0; i < call.tokens * kHidden && idx < 0; ++i) {
    const uint16_t next = static_cast<uint16_t>(out.b[1][i] + 1);
    if (ref::norm_within_tolerance(next, set.norm_exact[base + i], DType::kBf16)) idx = i;
  }
  ASSERT_GE(idx, 0);
  out.b[1][idx] = static_cast<uint16_t>(out.b[1][idx] + 1);
  CallCheck c = check_call(call, set, kHidden, DType::kBf16, out.views(call.pattern));
  EXPECT_EQ(c.wrong_elems, 0u);
  EXPECT_EQ(c.cross_rank_elems, 1u);
  EXPECT_EQ(c.first.against, "rank 0");
  out.b[1][idx] = 0x5A5A;  // a consumer's overwrite read late: far outside the tolerance
  c = check_call(call, set, kHidden, DType::kBf16, out.views(call.pattern));
  EXPECT_EQ(c.wrong_elems, 1u);
  EXPECT_EQ(c.first.output, "norm_out");
  EXPECT_EQ(c.first.against, "reference");
}

TEST(Totals, FirstBadIsTheLowestCallAcrossMerges) {
  CallSpec early = norm_call(), late = norm_call();
  early.index = 5;
  late.index = 9;
  CallCheck bad;
  bad.wrong_elems = 3;
  bad.has_mismatch = true;
  Totals a, b;
  bad.first.call = 9;
  a.add_call(late, bad, 9, -1);
  bad.first.call = 5;
  b.add_call(early, bad, 4, 2);
  a.merge(b);
  EXPECT_EQ(a.calls, 2u);
  EXPECT_EQ(a.bad_calls, 2u);
  EXPECT_EQ(a.wrong_elems, 6u);
  EXPECT_EQ(a.first.call, 5u);
  EXPECT_EQ(a.first_graph, 2);
}

TEST(ExitCode, DetectionOnlyCountsWithoutTimeoutsOrErrors) {
  StressArgs args;
  Totals clean, wrong;
  wrong.wrong_elems = 1;
  RunFacts ok, timeout, error;
  timeout.timeouts = 1;
  error.errors = 1;
  EXPECT_EQ(exit_code(args, clean, ok), kExitOk);
  EXPECT_EQ(exit_code(args, wrong, ok), kExitWrong);
  EXPECT_EQ(exit_code(args, wrong, timeout), kExitTimeout);
  EXPECT_EQ(exit_code(args, clean, error), kExitSetup);
  args.expect_corruption = true;
  EXPECT_EQ(exit_code(args, wrong, ok), kExitOk);
  EXPECT_EQ(exit_code(args, clean, ok), kExitWrong);
  EXPECT_EQ(exit_code(args, wrong, timeout), kExitTimeout);  // garbage after a timeout is no proof
  RunFacts hang;
  hang.hang = true;
  EXPECT_EQ(exit_code(args, wrong, hang), kExitTimeout);
}

}  // namespace
}  // namespace arf::stress
