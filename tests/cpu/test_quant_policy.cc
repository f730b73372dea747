// The fallback chain of the quantized patterns in the planner (arfusion.h, arfFallbackLevel_t):
// what auto picks, every forced (algorithm, level) pair, infeasible requests, the rule for the
// unquantized patterns, and a fuzz over random communicators and shapes checking that the level
// is a pure function of shape + StaticFacts and that every plan keeps the chain's invariants.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/launch_plan.h"
#include "cpu/plan_test_util.h"
#include "policy/policy.h"

namespace arf {
namespace {

constexpr Pattern kQuantPatterns[] = {Pattern::kFp8PerTensor, Pattern::kFp8PerToken,
                                      Pattern::kFp8PerGroup, Pattern::kNvfp4, Pattern::kMxfp4};

StaticFacts facts_for(int world, int64_t max_tokens = 1024, int64_t max_hidden = 8192,
                      int64_t oneshot_max_tokens = 0) {
  StaticFacts f;
  f.world = world;
  f.max_tokens = max_tokens;
  f.max_hidden = max_hidden;
  f.oneshot_max_tokens = oneshot_max_tokens ? oneshot_max_tokens : max_tokens;
  f.min_sm_count = 132;
  f.max_ranks_per_device = world;  // virtual ranks: the tightest grid cap
  return f;
}

// Where ranks share a GPU the plan adds the shared-device gate kernel (not in num_kernels).
int gate_kernels(const StaticFacts& f) { return f.world > 1 && f.max_ranks_per_device > 1 ? 1 : 0; }

CallShape quant_call(Pattern pattern, int64_t tokens, int hidden,
                     Algorithm requested = Algorithm::kAuto, int fallback = 0) {
  return call_shape(tokens, hidden, pattern, requested, fallback);
}

void expect_error(const CallShape& shape, const StaticFacts& facts, arfStatus_t code,
                  const std::string& substring) {
  Result<Plan> r = make_plan(shape, facts);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), code) << r.status().message();
  EXPECT_NE(r.status().message().find(substring), std::string::npos) << r.status().message();
}

TEST(QuantAuto, LevelOneWithTheAlgorithmAutoPicksForResidualRmsNorm) {
  for (int world : {1, 2, 4, 8}) {
    const StaticFacts f = facts_for(world);
    for (Pattern pattern : kQuantPatterns) {
      // World 8 at hidden 8192: 32 tokens is the last oneshot size, 33 the first twoshot one.
      for (int64_t tokens : {1, 32, 33, 1024}) {
        const Plan norm = plan_ok(quant_call(Pattern::kResidualRmsNorm, tokens, 8192), f);
        const Plan p = plan_ok(quant_call(pattern, tokens, 8192), f);
        EXPECT_EQ(p.algorithm, norm.algorithm) << p.reason;
        EXPECT_EQ(p.inner_allreduce, p.algorithm);
        EXPECT_EQ(p.fallback_level, 1);
        EXPECT_EQ(p.num_kernels, 1);
        EXPECT_EQ(p.shared_device_gate, gate_kernels(f) == 1);
        EXPECT_EQ(p.grid, norm.grid);
        EXPECT_EQ(p.block, norm.block);
        EXPECT_FALSE(p.forced);
        EXPECT_EQ(p.reason, norm.reason + "; level 1 (one kernel)");
      }
    }
  }
}

TEST(QuantAuto, UnquantizedPatternsReportLevelOne) {
  const StaticFacts f = facts_for(4);
  EXPECT_EQ(plan_ok(quant_call(Pattern::kAllReduce, 4, 4096), f).fallback_level, 1);
  EXPECT_EQ(plan_ok(quant_call(Pattern::kResidualRmsNorm, 4, 4096), f).fallback_level, 1);
  const Plan unfused =
      plan_ok(quant_call(Pattern::kResidualRmsNorm, 4, 4096, Algorithm::kUnfused), f);
  EXPECT_EQ(unfused.fallback_level, 1);
  EXPECT_EQ(unfused.num_kernels, 2);
}

struct LevelCase {
  Algorithm requested;
  int fallback;
  Algorithm algorithm;  // expected plan
  Algorithm inner;
  int level;
  int num_kernels;
};

TEST(QuantForced, EveryAlgorithmAndLevel) {
  // World 8, one rank per GPU, 4 tokens x 4096: auto picks oneshot_lamport.
  StaticFacts f = facts_for(8);
  f.max_ranks_per_device = 1;
  const Algorithm kL = Algorithm::kOneshotLamport, kP = Algorithm::kOneshotPull,
                  kT = Algorithm::kTwoshot, kU = Algorithm::kUnfused, kA = Algorithm::kAuto;
  const LevelCase cases[] = {
      {kA, 0, kL, kL, 1, 1}, {kA, 1, kL, kL, 1, 1}, {kA, 2, kL, kL, 2, 2}, {kA, 3, kU, kL, 3, 2},
      {kL, 0, kL, kL, 1, 1}, {kL, 2, kL, kL, 2, 2}, {kL, 3, kU, kL, 3, 2}, {kP, 1, kP, kP, 1, 1},
      {kP, 2, kP, kP, 2, 2}, {kP, 3, kU, kP, 3, 2}, {kT, 0, kT, kT, 1, 1}, {kT, 2, kT, kT, 2, 2},
      {kT, 3, kU, kT, 3, 2}, {kU, 0, kU, kL, 3, 2}, {kU, 3, kU, kL, 3, 2},
  };
  for (Pattern pattern : kQuantPatterns) {
    for (const LevelCase& c : cases) {
      const Plan p = plan_ok(quant_call(pattern, 4, 4096, c.requested, c.fallback), f);
      const std::string what = "requested " + std::to_string(static_cast<int>(c.requested)) +
                               " level " + std::to_string(c.fallback) + ": " + p.reason;
      EXPECT_EQ(p.algorithm, c.algorithm) << what;
      EXPECT_EQ(p.inner_allreduce, c.inner) << what;
      EXPECT_EQ(p.fallback_level, c.level) << what;
      EXPECT_EQ(p.num_kernels, c.num_kernels) << what;
      EXPECT_EQ(p.forced, c.requested != kA) << what;
      EXPECT_NE(p.reason.find("level " + std::to_string(c.level)), std::string::npos) << what;
    }
  }
}

TEST(QuantForced, LevelThreeReasonNamesTheInnerAlgorithm) {
  const Plan p =
      plan_ok(quant_call(Pattern::kFp8PerGroup, 4, 4096, Algorithm::kTwoshot, 3), facts_for(8));
  EXPECT_EQ(p.reason,
            "forced: twoshot; level 3 (all-reduce, then norm + quant): unfused, inner "
            "twoshot");
}

TEST(QuantForced, LevelThreeInnerFollowsAutoAcrossTheOneshotBoundary) {
  StaticFacts f = facts_for(8);
  f.max_ranks_per_device = 1;  // the NVLink limits (ranks sharing a GPU follow their own rule)
  for (int fallback : {0, 3}) {
    const Algorithm requested = fallback == 0 ? Algorithm::kUnfused : Algorithm::kAuto;
    EXPECT_EQ(
        plan_ok(quant_call(Pattern::kNvfp4, 32, 8192, requested, fallback), f).inner_allreduce,
        Algorithm::kOneshotLamport);
    EXPECT_EQ(
        plan_ok(quant_call(Pattern::kNvfp4, 33, 8192, requested, fallback), f).inner_allreduce,
        Algorithm::kTwoshot);
  }
}

TEST(QuantForced, UnfusedWithLevelOneOrTwoIsUnsupported) {
  for (int level : {1, 2}) {
    expect_error(quant_call(Pattern::kFp8PerToken, 4, 4096, Algorithm::kUnfused, level),
                 facts_for(2), arfUnsupported,
                 "needs a fused algorithm; algorithm unfused is "
                 "level 3");
  }
}

TEST(QuantForced, InfeasibleAlgorithmAtEveryLevel) {
  // The Lamport slot holds 16 tokens: a forced oneshot_lamport of 17 cannot run at any level,
  // including as level 3's inner all-reduce (never silently replaced).
  const StaticFacts f = facts_for(8, 1024, 8192, /*oneshot_max_tokens=*/16);
  for (int level : {0, 1, 2, 3}) {
    expect_error(quant_call(Pattern::kMxfp4, 17, 8192, Algorithm::kOneshotLamport, level), f,
                 arfUnsupported, "forced algorithm oneshot_lamport cannot run this call");
    // Auto steps around it at every level.
    const Plan p = plan_ok(quant_call(Pattern::kMxfp4, 17, 8192, Algorithm::kAuto, level), f);
    EXPECT_EQ(p.inner_allreduce, Algorithm::kTwoshot) << p.reason;
  }
  // nccl is level 3 only (the level rule answers before feasibility), and needs an NCCL
  // communicator (test_policy_nccl.cc).
  expect_error(quant_call(Pattern::kMxfp4, 1, 8192, Algorithm::kNccl, 2), f, arfUnsupported,
               "algorithm nccl is level 3");
  expect_error(quant_call(Pattern::kMxfp4, 1, 8192, Algorithm::kNccl, 3), f, arfUnsupported,
               "no NCCL communicator");
}

TEST(QuantForced, UnquantizedPatternsTakeAutoOnly) {
  const StaticFacts f = facts_for(2);
  for (Pattern pattern : {Pattern::kAllReduce, Pattern::kResidualRmsNorm}) {
    for (int level : {1, 2, 3}) {
      expect_error(quant_call(pattern, 4, 4096, Algorithm::kAuto, level), f, arfInvalidArgument,
                   "applies to quantized patterns only");
    }
  }
  for (int level : {-1, 4}) {
    expect_error(quant_call(Pattern::kFp8PerTensor, 4, 4096, Algorithm::kAuto, level), f,
                 arfInvalidArgument, "is not a valid arfFallbackLevel_t");
  }
}

bool same_plan(const Plan& a, const Plan& b) {
  return a.algorithm == b.algorithm && a.inner_allreduce == b.inner_allreduce && a.grid == b.grid &&
         a.block == b.block && a.num_kernels == b.num_kernels && a.forced == b.forced &&
         a.fallback_level == b.fallback_level && a.reason == b.reason;
}

// Fuzz over every pattern, requested algorithm and requested level. Each rank computes its plan
// from its own copy of the agreed facts; the results must agree, and the chain's invariants hold.
TEST(QuantSymmetry, RandomShapesLevelsAndAlgorithms) {
  std::mt19937_64 rng(20261203);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int worlds[] = {1, 2, 4, 8};
  int planned_by_level[4] = {0, 0, 0, 0};
  for (int iter = 0; iter < 20000; ++iter) {
    const int world = worlds[pick(0, 3)];
    const int64_t max_tokens = pick(1, 4096);
    const int64_t max_hidden = pick(1, kMaxHidden / 128) * 128;
    StaticFacts f = facts_for(world, max_tokens, max_hidden, pick(1, max_tokens));
    f.max_ranks_per_device = static_cast<int>(pick(0, 1) ? world : 1);
    f.min_sm_count = static_cast<int>(pick(1, 200));
    f.dtype = pick(0, 1) ? DType::kFp16 : DType::kBf16;
    const Pattern pattern = static_cast<Pattern>(pick(0, 6));
    CallShape s =
        quant_call(pattern, pick(0, max_tokens), static_cast<int>(pick(1, max_hidden / 8) * 8),
                   static_cast<Algorithm>(pick(0, 5)), static_cast<int>(pick(0, 3)));
    s.dtype = f.dtype;

    const Result<Plan> first = make_plan(s, f);
    for (int rank = 1; rank < world; ++rank) {
      const StaticFacts facts_copy = f;
      const CallShape shape_copy = s;
      const Result<Plan> other = make_plan(shape_copy, facts_copy);
      ASSERT_EQ(other.is_ok(), first.is_ok());
      if (first.is_ok()) {
        ASSERT_TRUE(same_plan(first.value(), other.value()));
      } else {
        ASSERT_EQ(other.status().message(), first.status().message());
      }
    }
    const bool quant = is_quant_pattern(pattern);
    if (!first.is_ok()) {
      const arfStatus_t code = first.status().code();
      if (!quant && s.requested_fallback != 0) {
        ASSERT_EQ(code, arfInvalidArgument) << first.status().message();
      } else {
        ASSERT_EQ(code, arfUnsupported) << first.status().message();
        ASSERT_NE(s.requested, Algorithm::kAuto) << first.status().message();
      }
      continue;
    }
    ASSERT_TRUE(quant || s.requested_fallback == 0);
    const Plan& p = first.value();
    ++planned_by_level[p.fallback_level];
    ASSERT_TRUE(algorithm_feasible(p.inner_allreduce, s, f, nullptr)) << p.reason;
    ASSERT_LE(p.grid, grid_cap(p, f));
    ASSERT_EQ(p.block, block_threads_for_row(s.row_elems));
    if (!quant) {
      ASSERT_EQ(p.fallback_level, 1);
      continue;
    }
    // Level 3 is exactly the unfused algorithm; levels 1 and 2 run a fused one.
    ASSERT_EQ(p.fallback_level == 3, p.algorithm == Algorithm::kUnfused) << p.reason;
    ASSERT_EQ(p.num_kernels, p.fallback_level == 1 ? 1 : 2);
    ASSERT_EQ(p.shared_device_gate, gate_kernels(f) == 1);
    if (p.fallback_level != 3) ASSERT_EQ(p.inner_allreduce, p.algorithm);
    if (s.requested_fallback != 0) {
      ASSERT_EQ(p.fallback_level, s.requested_fallback);
    } else {
      ASSERT_EQ(p.fallback_level, s.requested == Algorithm::kUnfused ? 3 : 1);
    }
    // The all-reduce that runs does not depend on the level: levels 1, 2 and 3 of one call reduce
    // with the same algorithm and grid, which is what lets the GPU tests demand identical bits.
    if (s.requested != Algorithm::kUnfused) {
      for (int level : {1, 2, 3}) {
        CallShape at = s;
        at.requested_fallback = level;
        const Plan q = plan_ok(at, f);
        ASSERT_EQ(q.inner_allreduce, p.inner_allreduce);
        ASSERT_EQ(q.grid, p.grid);
      }
    }
  }
  EXPECT_GT(planned_by_level[1], 2000);
  EXPECT_GT(planned_by_level[2], 1000);
  EXPECT_GT(planned_by_level[3], 1000);
}

}  // namespace
}  // namespace arf
