// arfCommConfig_t::max_ctas (StaticFacts::max_ctas, policy.h cta_bound): the planner bounds every
// kernel of every call, for every shape, pattern, fallback level and algorithm (auto or forced),
// to max_ctas split between the ranks sharing a GPU; the plan stays a function of the agreed facts
// (identical on every rank); a bound that leaves a rank no CTA makes the custom algorithms
// infeasible with the reason, never a plan that could not run; arfPlanFromFacts plans with the
// facts' bound (and without it for a version 4-5 caller's facts).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "arfusion/arfusion.h"
#include "cpu/plan_test_util.h"
#include "policy/tuning_table.h"

namespace arf {
namespace {

StaticFacts facts_of(int world, int per_device, int sm_count, int max_ctas) {
  StaticFacts f;
  f.world = world;
  f.max_tokens = 8192;
  f.max_hidden = 16384;
  f.oneshot_max_tokens = 1024;
  f.min_sm_count = sm_count;
  f.max_ranks_per_device = per_device;
  f.max_ctas = max_ctas;
  return f;
}

bool same_plan(const Plan& a, const Plan& b) {
  return a.algorithm == b.algorithm && a.inner_allreduce == b.inner_allreduce && a.grid == b.grid &&
         a.block == b.block && a.epilogue_grid == b.epilogue_grid &&
         a.fallback_level == b.fallback_level && a.num_kernels == b.num_kernels &&
         a.shared_device_gate == b.shared_device_gate && a.reason == b.reason;
}

// Every (world, ranks per GPU, bound) and a sweep of shapes: each plan that exists keeps every
// kernel's grid within the bound per rank, at least 1, and equals the plan of a second rank's
// copy of the facts.
TEST(MaxCtas, BoundHoldsForEveryShapeAndAlgorithm) {
  std::mt19937_64 rng(20261205);
  const Algorithm algorithms[] = {Algorithm::kAuto, Algorithm::kOneshotLamport,
                                  Algorithm::kOneshotPull, Algorithm::kTwoshot,
                                  Algorithm::kUnfused};
  const Pattern patterns[] = {Pattern::kAllReduce, Pattern::kResidualRmsNorm,
                              Pattern::kFp8PerToken, Pattern::kNvfp4};
  int checked = 0;
  for (int world : {1, 2, 4, 8}) {
    for (int per_device : {1, world}) {
      for (int bound : {1, 2, 3, 7, 8, 33, 64, 131, 264, 100000}) {
        const StaticFacts facts = facts_of(world, per_device, 132, bound);
        const int per_rank = bound / per_device;
        for (int i = 0; i < 60; ++i) {
          const int64_t tokens = 1 + static_cast<int64_t>(rng() % 8192);
          const int hidden = 128 * (1 + static_cast<int>(rng() % 128));  // 128 .. 16384
          const Algorithm a = algorithms[rng() % 5];
          const Pattern p = patterns[rng() % 4];
          const int level = is_quant_pattern(p) ? static_cast<int>(rng() % 4) : 0;
          const CallShape shape = call_shape(tokens, hidden, p, a, level);
          const Result<Plan> plan = make_plan(shape, facts);
          if (per_rank < 1) {
            // No CTA for a rank: nothing custom may be planned (no NCCL in these facts).
            EXPECT_FALSE(plan.is_ok()) << "bound " << bound << " per_device " << per_device;
            // The reason names the bound, unless the request was malformed first (a fused
            // level asked of unfused).
            if (!plan.is_ok() && a != Algorithm::kAuto && level == 0) {
              EXPECT_NE(plan.status().message().find("max_ctas " + std::to_string(bound)),
                        std::string::npos)
                  << plan.status().message();
            }
            continue;
          }
          if (!plan.is_ok()) continue;  // infeasible for its own reasons (capacity, level)
          ++checked;
          const Plan& pl = plan.value();
          EXPECT_GE(pl.grid, 1);
          EXPECT_LE(pl.grid, per_rank) << pl.reason;
          EXPECT_GE(pl.epilogue_grid, 1);
          EXPECT_LE(pl.epilogue_grid, per_rank) << pl.reason;
          const Result<Plan> other_rank = make_plan(shape, facts_of(world, per_device, 132, bound));
          ASSERT_TRUE(other_rank.is_ok());
          EXPECT_TRUE(same_plan(pl, other_rank.value())) << pl.reason;
          if (pl.grid == per_rank || pl.epilogue_grid == per_rank) {
            EXPECT_NE(pl.reason.find("max_ctas " + std::to_string(bound) + " caps the grid at " +
                                     std::to_string(per_rank)),
                      std::string::npos)
                << pl.reason;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 2000);
}

// The largest grid of all: 8192 tokens at world 8 on one GPU each is 264 CTAs (two per SM); with
// max_ctas 64 every kernel keeps to 64; the algorithm is the same as without the bound.
TEST(MaxCtas, TheWidestCallKeepsItsAlgorithmWithinTheBound) {
  const CallShape shape = call_shape(8192, 8192, Pattern::kResidualRmsNorm, Algorithm::kAuto);
  const Plan free = plan_ok(shape, facts_of(8, 1, 132, 0));
  EXPECT_EQ(free.grid, 264);
  EXPECT_EQ(free.reason.find("max_ctas"), std::string::npos);
  const Plan bounded = plan_ok(shape, facts_of(8, 1, 132, 64));
  EXPECT_EQ(bounded.grid, 64);
  EXPECT_EQ(bounded.algorithm, free.algorithm);
  EXPECT_NE(bounded.reason.find("max_ctas 64 caps the grid at 64"), std::string::npos)
      << bounded.reason;
  // A bound above what the planner would use changes nothing.
  const Plan loose = plan_ok(shape, facts_of(8, 1, 132, 1000));
  EXPECT_EQ(loose.grid, free.grid);
}

// Four ranks on one GPU and max_ctas 3: no rank gets a CTA. Every custom algorithm is infeasible
// with the reason, auto finds nothing (no NCCL where ranks share a GPU): arfUnsupported, before
// anything could be launched that might wait for SMs it cannot have.
TEST(MaxCtas, TooSmallForTheRanksSharingAGpuIsInfeasibleWithTheReason) {
  const StaticFacts facts = facts_of(4, 4, 132, 3);
  EXPECT_EQ(cta_bound(facts), 0);
  for (const Algorithm a : {Algorithm::kOneshotLamport, Algorithm::kOneshotPull,
                            Algorithm::kTwoshot, Algorithm::kUnfused}) {
    std::string why;
    EXPECT_FALSE(algorithm_feasible(a, call_shape(4, 4096, Pattern::kResidualRmsNorm, a), facts,
                                    &why));
    EXPECT_NE(why.find("max_ctas 3 leaves no CTA to each of the 4 ranks sharing a GPU"),
              std::string::npos)
        << why;
  }
  const Result<Plan> plan =
      make_plan(call_shape(4, 4096, Pattern::kResidualRmsNorm, Algorithm::kAuto), facts);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), arfUnsupported);
  EXPECT_NE(plan.status().message().find("max_ctas 3"), std::string::npos)
      << plan.status().message();
  // One CTA each is enough: every algorithm runs with a grid of 1.
  const StaticFacts four = facts_of(4, 4, 132, 4);
  const Plan one = plan_ok(call_shape(4096, 4096, Pattern::kResidualRmsNorm, Algorithm::kAuto), four);
  EXPECT_EQ(one.grid, 1);
  EXPECT_EQ(one.epilogue_grid, 1);
}

// arfPlan_t.reason keeps 127 characters, and the account of an auto choice can fill them by itself
// (ranks sharing a GPU, the call's size, candidates passed over, a quantized level, a sandwich, a
// tuned table's choice that cannot run). Whatever comes before it, the bound's note reaches the
// caller whole: the plan's reason is the unbounded plan's with the note appended, its end cut
// (at "...") where both would not fit.
TEST(MaxCtas, TheReasonKeepsTheBoundWhateverComesBeforeIt) {
  constexpr size_t kKept = sizeof(arfPlan_t{}.reason) - 1;
  // A tuned entry whose Lamport choice the facts' small Lamport slots cannot run.
  TuningTable table;
  table.entries.push_back(
      {TuningKey{8, RankSharing::kOnePerDevice, DType::kBf16, TuningGroup::kPlain, 8192},
       4096,
       {{1, Algorithm::kOneshotLamport, 1}}});
  int capped = 0, cut = 0;
  for (int world : {2, 4, 8}) {
    for (int per_device : {1, world}) {
      for (int bound : {8, 64, 264}) {
        StaticFacts facts = facts_of(world, per_device, 132, bound);
        facts.oneshot_max_tokens = 16;  // Lamport infeasible above 16 tokens: a longer account
        StaticFacts free_facts = facts;
        free_facts.max_ctas = 0;
        for (const Pattern p : {Pattern::kResidualRmsNorm, Pattern::kFp8PerToken, Pattern::kNvfp4}) {
          for (int level = 0; level < (is_quant_pattern(p) ? 4 : 1); ++level) {
            for (bool sandwich : {false, true}) {
              for (int64_t tokens : {64, 2048, 8192}) {
                for (int hidden : {2048, 8192}) {
                  CallShape shape = call_shape(tokens, hidden, p, Algorithm::kAuto, level);
                  shape.post_norm = sandwich;
                  const Result<Plan> bounded = make_plan(shape, facts, &table);
                  const Result<Plan> free = make_plan(shape, free_facts, &table);
                  ASSERT_EQ(bounded.is_ok(), free.is_ok());
                  if (!bounded.is_ok()) continue;
                  const Plan& pl = bounded.value();
                  const int per_rank = bound / per_device;
                  if (pl.grid != per_rank && pl.epilogue_grid != per_rank) {
                    EXPECT_EQ(pl.reason, free.value().reason);  // not binding: no note
                    continue;
                  }
                  ++capped;
                  const std::string& reason = pl.reason;
                  const std::string note = "; max_ctas " + std::to_string(bound) +
                                           " caps the grid at " + std::to_string(per_rank);
                  std::string want = free.value().reason + note;
                  if (want.size() > kKept) {
                    ++cut;
                    want = free.value().reason.substr(0, kKept - note.size() - 3) + "..." + note;
                  }
                  EXPECT_EQ(reason, want);
                  EXPECT_LE(reason.size(), kKept);
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(capped, 300);
  // Negative control: the sweep holds accounts that would have pushed the note out.
  EXPECT_GT(cut, 50);
}

// The longest account of the sweep's kind through the C API, where the reason is cut to 127
// characters: two ranks on one GPU, a quantized call beyond the Lamport slots. Without the bound
// its reason alone leaves no room for the note.
TEST(MaxCtas, PlanFromFactsReasonEndsWithTheBound) {
  arfPlanFacts_t f;
  arfPlanFactsInit(&f);
  f.world_size = 2;
  f.ranks_per_device = 2;
  f.max_tokens = 8192;
  arfFusedArgs_t a;
  arfFusedArgsInit(&a);
  a.pattern = arfPatternResidualRmsNormFp8PerToken;
  a.num_tokens = 8192;
  a.hidden = 2048;
  arfPlan_t plan;
  ASSERT_EQ(arfPlanFromFacts(&f, &a, &plan), arfSuccess) << arfGetLastErrorString();
  const std::string note = "; max_ctas 264 caps the grid at 132";
  const std::string free_reason = plan.reason;
  EXPECT_GT(free_reason.size() + note.size(), sizeof(plan.reason) - 1) << free_reason;
  f.max_ctas = 264;  // 132 for each of the two ranks on the GPU
  ASSERT_EQ(arfPlanFromFacts(&f, &a, &plan), arfSuccess) << arfGetLastErrorString();
  EXPECT_EQ(plan.grid, 132);
  const std::string reason = plan.reason;
  ASSERT_GE(reason.size(), note.size());
  EXPECT_EQ(reason.substr(reason.size() - note.size()), note) << reason;
  EXPECT_EQ(reason.rfind("auto: 2 ranks share a device", 0), 0u) << reason;
}

// The C API: arfPlanFromFacts plans with the facts' max_ctas; a version 4-5 caller's facts (the
// same size: max_ctas took their tail padding) plan without a bound whatever that padding holds.
TEST(MaxCtas, PlanFromFactsHonoursTheBoundOfVersionSixFactsOnly) {
  arfPlanFacts_t f;
  arfPlanFactsInit(&f);
  EXPECT_EQ(f.max_ctas, 0);
  f.world_size = 8;
  f.max_tokens = 8192;
  arfFusedArgs_t a;
  arfFusedArgsInit(&a);
  a.num_tokens = 8192;
  a.hidden = 8192;
  arfPlan_t plan;
  f.max_ctas = 48;
  ASSERT_EQ(arfPlanFromFacts(&f, &a, &plan), arfSuccess) << arfGetLastErrorString();
  EXPECT_EQ(plan.grid, 48);
  EXPECT_NE(std::string(plan.reason).find("max_ctas 48"), std::string::npos) << plan.reason;
  f.version = 5;
  ASSERT_EQ(arfPlanFromFacts(&f, &a, &plan), arfSuccess) << arfGetLastErrorString();
  EXPECT_EQ(plan.grid, 264);
  f.version = 6;
  f.max_ctas = -1;
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &plan), arfInvalidArgument);
}

}  // namespace
}  // namespace arf
