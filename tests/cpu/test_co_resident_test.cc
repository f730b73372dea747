// The co-resident test mode (docs/protocol.md, "The co-resident test mode"): its plans (no gate,
// every grid within the bound, the reason says so, nothing else changes), the environment value,
// and the agreement of every rank through the group.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "core/co_resident_test.h"
#include "cpu/plan_test_util.h"
#include "policy/policy.h"
#include "transport/local.h"

namespace arf {
namespace {

StaticFacts facts_for(int world, int ranks_per_device, int sm_count, bool mode) {
  StaticFacts f;
  f.world = world;
  f.dtype = DType::kBf16;
  f.max_tokens = 2048;
  f.max_hidden = 16384;
  f.oneshot_max_tokens = 2048;
  f.min_sm_count = sm_count;
  f.max_ranks_per_device = ranks_per_device;
  f.co_resident_test = mode;
  return f;
}

// Whether every device mate's CTAs of this plan's kernels fit the mode's bound: at most one CTA
// per SM in all (policy.h, co_resident_test_grid_cap), whatever kernel each mate is in.
bool within_bound(const Plan& p, const StaticFacts& f) {
  const int64_t ranks = f.max_ranks_per_device;
  return p.grid * ranks <= f.min_sm_count && p.epilogue_grid * ranks <= f.min_sm_count;
}

struct Shapes {
  std::vector<Pattern> patterns{Pattern::kAllReduce, Pattern::kResidualRmsNorm, Pattern::kFp8PerTensor,
                                Pattern::kFp8PerGroup, Pattern::kNvfp4};
  std::vector<Algorithm> algorithms{Algorithm::kAuto, Algorithm::kOneshotLamport, Algorithm::kOneshotPull,
                                    Algorithm::kTwoshot, Algorithm::kUnfused};
  std::vector<int64_t> tokens{1, 3, 64, 255, 1024, 2048};
  std::vector<int> hiddens{128, 4096, 8192, 16384};
};

// Every plan of the mode keeps the normal plan's algorithm, kernels and block, drops the gate,
// holds every grid to the bound and says so first in its reason; and the bound is one the normal
// plans break, so the check below is not one that cannot fail.
TEST(CoResidentTest, PlansDropTheGateAndBoundEveryGrid) {
  const Shapes shapes;
  for (const auto& [world, per_device, sms] : std::vector<std::tuple<int, int, int>>{
           {2, 2, 132}, {4, 4, 132}, {8, 8, 132}, {4, 2, 132}, {8, 8, 78}, {2, 2, 7}, {1, 1, 132}}) {
    const StaticFacts normal = facts_for(world, per_device, sms, false);
    const StaticFacts mode = facts_for(world, per_device, sms, true);
    const int cap = co_resident_test_grid_cap(mode);
    EXPECT_EQ(cap, std::max(1, sms / per_device));
    int normal_over_bound = 0, plans = 0;
    for (Pattern pattern : shapes.patterns) {
      for (Algorithm algorithm : shapes.algorithms) {
        for (int64_t tokens : shapes.tokens) {
          for (int hidden : shapes.hiddens) {
            if (pattern == Pattern::kFp8PerGroup && hidden % 128 != 0) continue;
            const CallShape shape = call_shape(tokens, hidden, pattern, algorithm);
            const Result<Plan> n = make_plan(shape, normal);
            const Result<Plan> m = make_plan(shape, mode);
            ASSERT_EQ(n.is_ok(), m.is_ok()) << "the mode changes which calls run";
            if (!n.is_ok()) continue;
            const Plan& a = n.value();
            const Plan& b = m.value();
            const std::string where = "world " + std::to_string(world) + "/" + std::to_string(per_device) +
                                      " per device, " + std::to_string(sms) + " SMs, " + std::to_string(tokens) +
                                      " x " + std::to_string(hidden) + ": " + b.reason;
            EXPECT_EQ(b.algorithm, a.algorithm) << where;
            EXPECT_EQ(b.inner_allreduce, a.inner_allreduce) << where;
            EXPECT_EQ(b.num_kernels, a.num_kernels) << where;
            EXPECT_EQ(b.fallback_level, a.fallback_level) << where;
            EXPECT_EQ(b.block, a.block) << where;
            EXPECT_FALSE(b.shared_device_gate) << where;
            EXPECT_TRUE(within_bound(b, mode)) << where;
            EXPECT_EQ(b.grid, std::min(a.grid, cap)) << where;
            EXPECT_EQ(b.reason.rfind(kCoResidentTestReason, 0), 0u) << where;
            EXPECT_NE(b.reason.find(a.reason), std::string::npos) << "the normal reason follows: " << where;
            EXPECT_EQ(a.reason.find(kCoResidentTestReason), std::string::npos) << a.reason;
            // Rank symmetry: a pure function of shape and facts.
            EXPECT_EQ(make_plan(shape, mode).value().grid, b.grid);
            normal_over_bound += within_bound(a, mode) ? 0 : 1;
            ++plans;
          }
        }
      }
    }
    EXPECT_GT(plans, 0);
    if (sms / per_device >= 2) {
      EXPECT_GT(normal_over_bound, 0) << "world " << world << ": no normal plan exceeds the bound";
    }
  }
}

// The normal plans of ranks sharing a GPU keep the gate; the mode's reason fits arfPlan_t.reason
// (127 characters) with its bound readable.
TEST(CoResidentTest, GateOnlyOutsideTheModeAndTheReasonFits) {
  const CallShape shape = call_shape(1024, 4096, Pattern::kResidualRmsNorm, Algorithm::kTwoshot);
  const Plan normal = plan_ok(shape, facts_for(8, 8, 132, false));
  EXPECT_TRUE(normal.shared_device_gate);
  const Plan mode = plan_ok(shape, facts_for(8, 8, 132, true));
  EXPECT_FALSE(mode.shared_device_gate);
  EXPECT_EQ(mode.grid, 16);
  const std::string head = mode.reason.substr(0, 127);
  EXPECT_NE(head.find("grids <= 16 = 132 SMs / 8 ranks"), std::string::npos) << mode.reason;
}

TEST(CoResidentTest, EnvironmentValue) {
  for (const char* off : {static_cast<const char*>(nullptr), "", "0"}) {
    const Result<bool> r = co_resident_test_requested(off);
    ASSERT_TRUE(r.is_ok());
    EXPECT_FALSE(r.value());
  }
  const Result<bool> on = co_resident_test_requested("1");
  ASSERT_TRUE(on.is_ok());
  EXPECT_TRUE(on.value());
  for (const char* bad : {"yes", "2", " 1", "true"}) {
    const Result<bool> r = co_resident_test_requested(bad);
    EXPECT_EQ(r.status().code(), arfInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("ARF_TEST_CO_RESIDENT="), std::string::npos) << r.status().message();
  }
}

// Every rank's request through the group: the common value, or the same refusal on every rank.
std::vector<Result<bool>> agree(const std::vector<bool>& requests) {
  local::RankInfo info;
  info.device = 0;
  info.sm_count = 132;
  local::LocalGroup group(std::vector<local::RankInfo>(requests.size(), info));
  std::vector<std::future<Result<bool>>> ranks;
  for (size_t r = 0; r < requests.size(); ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      return agree_co_resident_test(group, static_cast<int>(r), requests[r], 30.0);
    }));
  }
  std::vector<Result<bool>> out;
  for (auto& f : ranks) out.push_back(f.get());
  return out;
}

TEST(CoResidentTest, EveryRankAgreesOrEveryRankRefuses) {
  for (bool value : {false, true}) {
    for (const Result<bool>& r : agree(std::vector<bool>(4, value))) {
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      EXPECT_EQ(r.value(), value);
    }
  }
  const std::vector<Result<bool>> mixed = agree({true, true, false, true});
  for (const Result<bool>& r : mixed) {
    EXPECT_EQ(r.status().code(), arfInvalidArgument);
    EXPECT_EQ(r.status().message(), mixed[0].status().message());
  }
  EXPECT_NE(mixed[0].status().message().find("rank 0 has 1, rank 2 has 0"), std::string::npos)
      << mixed[0].status().message();
}

}  // namespace
}  // namespace arf
