// The `nccl` algorithm in the policy (policy.h): feasible only on communicators whose ranks all
// created an NCCL communicator (StaticFacts::nccl); two kernels' worth for fused patterns; level 3
// for quantized ones; never chosen by auto's defaults, only forced or from a tuned table.
#include <gtest/gtest.h>

#include <random>

#include "plan_test_util.h"
#include "policy/tuning_table.h"

namespace arf {
namespace {

StaticFacts facts(bool nccl, int world = 8) {
  StaticFacts f;
  f.world = world;
  f.max_tokens = 1024;
  f.max_hidden = 8192;
  f.oneshot_max_tokens = 1024;
  f.min_sm_count = 132;
  f.nccl = nccl;
  return f;
}

TEST(PolicyNccl, ForcedWithoutNcclIsUnsupportedSayingWhy) {
  const Result<Plan> p = make_plan(
      call_shape(16, 8192, Pattern::kResidualRmsNorm, Algorithm::kNccl), facts(false));
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), arfUnsupported);
  EXPECT_NE(p.status().message().find("no NCCL communicator"), std::string::npos)
      << p.status().message();
}

TEST(PolicyNccl, ForcedPlansCountTheirKernels) {
  const Plan ar = plan_ok(call_shape(16, 8192, Pattern::kAllReduce, Algorithm::kNccl), facts(true));
  EXPECT_EQ(ar.algorithm, Algorithm::kNccl);
  EXPECT_EQ(ar.inner_allreduce, Algorithm::kNccl);
  EXPECT_EQ(ar.num_kernels, 1);
  EXPECT_TRUE(ar.forced);
  const Plan norm =
      plan_ok(call_shape(16, 8192, Pattern::kResidualRmsNorm, Algorithm::kNccl), facts(true));
  EXPECT_EQ(norm.num_kernels, 2);
  EXPECT_EQ(norm.fallback_level, 1);
}

TEST(PolicyNccl, QuantizedPatternsRunAtLevelThree) {
  for (Pattern p : {Pattern::kFp8PerToken, Pattern::kNvfp4}) {
    const Plan auto_level = plan_ok(call_shape(4, 8192, p, Algorithm::kNccl), facts(true));
    EXPECT_EQ(auto_level.algorithm, Algorithm::kNccl);
    EXPECT_EQ(auto_level.fallback_level, 3);
    EXPECT_EQ(auto_level.num_kernels, 2);
    const Plan three = plan_ok(call_shape(4, 8192, p, Algorithm::kNccl, 3), facts(true));
    EXPECT_EQ(three.algorithm, Algorithm::kNccl);
    for (int level : {1, 2}) {
      const Result<Plan> bad = make_plan(call_shape(4, 8192, p, Algorithm::kNccl, level), facts(true));
      ASSERT_FALSE(bad.is_ok()) << level;
      EXPECT_EQ(bad.status().code(), arfUnsupported);
      EXPECT_NE(bad.status().message().find("algorithm nccl is level 3"), std::string::npos)
          << bad.status().message();
    }
  }
}

TEST(PolicyNccl, AutoDefaultsNeverChooseNccl) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const int64_t tokens = 1 + static_cast<int64_t>(rng() % 1024);
    const int hidden = 8 * (1 + static_cast<int>(rng() % 1024));
    for (int world : {2, 4, 8}) {
      const Plan p = plan_ok(call_shape(tokens, hidden, Pattern::kResidualRmsNorm, Algorithm::kAuto),
                             facts(true, world));
      ASSERT_NE(p.algorithm, Algorithm::kNccl) << tokens << "x" << hidden << " world " << world;
      ASSERT_NE(p.inner_allreduce, Algorithm::kNccl);
    }
  }
}

TuningKey key8(TuningGroup group) {
  return TuningKey{8, RankSharing::kOnePerDevice, DType::kBf16, group, 8192};
}

// nccl from 512 tokens for plain calls; nccl at `quant_level` for quantized ones.
TuningTable nccl_table(int quant_level) {
  TuningTable t;
  t.machine = "test";
  t.entries.push_back({key8(TuningGroup::kPlain), 1024,
                       {{1, Algorithm::kOneshotLamport, 1}, {512, Algorithm::kNccl, 1}}});
  t.entries.push_back({key8(TuningGroup::kQuant), 1024, {{1, Algorithm::kNccl, quant_level}}});
  return t;
}

TEST(PolicyNccl, TunedTableMayChooseNcclWhereItCanRun) {
  const TuningTable table = nccl_table(3);
  ASSERT_TRUE(validate_tuning_table(table).is_ok()) << validate_tuning_table(table).message();
  const CallShape big = call_shape(600, 8192, Pattern::kResidualRmsNorm, Algorithm::kAuto);
  const Plan with = plan_ok(big, facts(true), &table);
  EXPECT_EQ(with.algorithm, Algorithm::kNccl);
  EXPECT_EQ(with.num_kernels, 2);
  const Plan without = plan_ok(big, facts(false), &table);
  EXPECT_NE(without.algorithm, Algorithm::kNccl);
  EXPECT_NE(without.reason.find("tuned table had no feasible choice"), std::string::npos)
      << without.reason;
  const Plan quant = plan_ok(call_shape(8, 8192, Pattern::kFp8PerToken,
                                        Algorithm::kAuto), facts(true), &table);
  EXPECT_EQ(quant.algorithm, Algorithm::kNccl);
  EXPECT_EQ(quant.fallback_level, 3);
}

TEST(PolicyNccl, TableRefusesNcclAtFusedLevels) {
  const Status s = validate_tuning_table(nccl_table(1));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("nccl runs quantized patterns at level 3 only"), std::string::npos)
      << s.message();
  // And it reads back from JSON like any other algorithm name.
  const Result<TuningTable> parsed = parse_tuning_table(tuning_table_to_json(nccl_table(3)));
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(parsed.value(), nccl_table(3));
}


TEST(PolicyNccl, OverCapacityAutoFallsBackToNccl) {
  // 2048 tokens > max_tokens 1024: no custom algorithm's buffers hold it.
  const CallShape over = call_shape(2048, 8192, Pattern::kResidualRmsNorm, Algorithm::kAuto);
  const Plan p = plan_ok(over, facts(true));
  EXPECT_EQ(p.algorithm, Algorithm::kNccl);
  EXPECT_NE(p.reason.find("-> nccl"), std::string::npos) << p.reason;
  EXPECT_FALSE(make_plan(over, facts(false)).is_ok());
  const Plan quant =
      plan_ok(call_shape(2048, 8192, Pattern::kFp8PerToken, Algorithm::kAuto), facts(true));
  EXPECT_EQ(quant.algorithm, Algorithm::kNccl);
  EXPECT_EQ(quant.fallback_level, 3);
}


TEST(PolicyNccl, CustomDisabledRunsEverythingOnNccl) {
  StaticFacts f = facts(true);
  f.custom = false;  // the ipc probe found no path between two ranks' memory
  const Plan p = plan_ok(call_shape(4, 8192, Pattern::kResidualRmsNorm, Algorithm::kAuto), f);
  EXPECT_EQ(p.algorithm, Algorithm::kNccl);
  EXPECT_NE(p.reason.find("disabled at init"), std::string::npos) << p.reason;
  const Result<Plan> forced =
      make_plan(call_shape(4, 8192, Pattern::kResidualRmsNorm, Algorithm::kTwoshot), f);
  ASSERT_FALSE(forced.is_ok());
  EXPECT_NE(forced.status().message().find("disabled at init"), std::string::npos);
  const Result<Plan> level1 =
      make_plan(call_shape(4, 8192, Pattern::kFp8PerToken, Algorithm::kAuto, 1), f);
  ASSERT_FALSE(level1.is_ok());
  EXPECT_EQ(level1.status().code(), arfUnsupported);
  EXPECT_NE(level1.status().message().find("only nccl (level 3) can run this call"),
            std::string::npos)
      << level1.status().message();
  const Plan quant = plan_ok(call_shape(4, 8192, Pattern::kFp8PerToken, Algorithm::kAuto), f);
  EXPECT_EQ(quant.fallback_level, 3);
  EXPECT_EQ(quant.algorithm, Algorithm::kNccl);
}

}  // namespace
}  // namespace arf
