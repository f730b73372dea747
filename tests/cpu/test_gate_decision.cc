// Which ranks launch the shared-device gate (launch_plan.h, launches_shared_device_gate): the plan
// owes it whenever ranks share a GPU (identical on every rank, from the agreed facts), and a rank
// launches it only when it has device mates. In a mixed placement (some ranks share a GPU, others
// have one each) the lone ranks launch none, and every rank still runs the same collective:
// algorithm, grid and block come from the plan alone.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/launch_plan.h"
#include "cpu/plan_test_util.h"
#include "transport/local.h"

namespace arf {
namespace {

RankInfo on_device(int device) {
  RankInfo i;
  i.device = device;
  i.device_key = device;
  i.sm_count = 132;
  i.max_tokens = 1024;
  i.max_hidden = 8192;
  i.oneshot_max_tokens = 1024;
  return i;
}

TEST(GateDecision, OnlyRanksWithDeviceMatesLaunchTheGate) {
  // World 4 on two GPUs: ranks 0-2 share GPU 0, rank 3 has GPU 1 to itself.
  const std::vector<RankInfo> infos = {on_device(0), on_device(0), on_device(0), on_device(1)};
  local::LocalGroup group(infos);
  StaticFacts facts;
  facts.world = 4;
  facts.max_tokens = 1024;
  facts.max_hidden = 8192;
  facts.oneshot_max_tokens = 1024;
  facts.min_sm_count = 132;
  facts.max_ranks_per_device = 3;
  for (const Algorithm a : {Algorithm::kAuto, Algorithm::kOneshotLamport, Algorithm::kOneshotPull,
                            Algorithm::kTwoshot, Algorithm::kUnfused}) {
    for (const int64_t tokens : {1, 37, 1024}) {
      const Plan plan =
          plan_ok(call_shape(tokens, 4096, Pattern::kResidualRmsNorm, a), facts);
      EXPECT_TRUE(plan.shared_device_gate);
      for (int r = 0; r < 4; ++r) {
        const uint32_t mates = group.device_mates_mask(r);
        EXPECT_EQ(launches_shared_device_gate(plan, mates), r != 3) << "rank " << r;
      }
    }
  }
  EXPECT_EQ(group.device_mates_mask(0), 0b0110u);
  EXPECT_EQ(group.device_mates_mask(3), 0u);
}

TEST(GateDecision, NoGateWithoutSharingWhateverTheMates) {
  StaticFacts facts;
  facts.world = 2;
  facts.max_tokens = 1024;
  facts.max_hidden = 8192;
  facts.oneshot_max_tokens = 1024;
  facts.min_sm_count = 132;
  facts.max_ranks_per_device = 1;
  const Plan plan = plan_ok(call_shape(8, 4096, Pattern::kResidualRmsNorm, Algorithm::kAuto), facts);
  EXPECT_FALSE(plan.shared_device_gate);
  EXPECT_FALSE(launches_shared_device_gate(plan, 0b10u));
  EXPECT_FALSE(launches_shared_device_gate(plan, 0u));
}

}  // namespace
}  // namespace arf
