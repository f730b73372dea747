// The comm-free C API of version 4: arfPlanFromFacts (the planner for given facts, pointers
// ignored), arfPlanFactsInit and arfCommWorkspaceBytes. Neither needs a GPU; both must agree with
// what a communicator with the same facts does (make_plan, workspace_layout).
#include <gtest/gtest.h>

#include <string>

#include "arfusion/arfusion.h"
#include "policy/policy.h"
#include "transport/workspace.h"

namespace arf {
namespace {

arfFusedArgs_t shape(arfPattern_t pattern, size_t tokens, size_t hidden) {
  arfFusedArgs_t a;
  arfFusedArgsInit(&a);
  a.pattern = pattern;
  a.num_tokens = tokens;
  a.hidden = hidden;
  return a;  // every pointer NULL: arfPlanFromFacts must not look at them
}

TEST(PlanFromFacts, AgreesWithThePlannerForEveryWorldAndTokenCount) {
  for (int world : {1, 2, 4, 8}) {
    for (int per_device : {1, world}) {
      arfPlanFacts_t f;
      arfPlanFactsInit(&f);
      f.world_size = world;
      f.max_tokens = 4096;
      f.ranks_per_device = per_device;
      StaticFacts sf;
      sf.world = world;
      sf.max_tokens = 4096;
      sf.max_hidden = 8192;
      sf.oneshot_max_tokens = 4096;
      sf.min_sm_count = 132;
      sf.max_ranks_per_device = per_device;
      for (size_t tokens : {1, 7, 64, 513, 4096}) {
        const arfFusedArgs_t a = shape(arfPatternResidualRmsNorm, tokens, 8192);
        arfPlan_t plan;
        ASSERT_EQ(arfPlanFromFacts(&f, &a, &plan), arfSuccess) << arfGetLastErrorString();
        CallShape s;
        s.num_elems = static_cast<int64_t>(tokens) * 8192;
        s.row_elems = 8192;
        s.num_rows = static_cast<int64_t>(tokens);
        const Result<Plan> want = make_plan(s, sf, nullptr);
        ASSERT_TRUE(want.is_ok());
        EXPECT_EQ(plan.algorithm, static_cast<arfAlgorithm_t>(want.value().algorithm));
        EXPECT_EQ(plan.grid, want.value().grid) << world << " " << per_device << " " << tokens;
        EXPECT_EQ(plan.block, want.value().block);
        EXPECT_EQ(std::string(plan.reason), want.value().reason.substr(0, sizeof(plan.reason) - 1));
      }
    }
  }
}

TEST(PlanFromFacts, ValidatesTheShapeAndTheFacts) {
  arfPlanFacts_t f;
  arfPlanFactsInit(&f);
  f.world_size = 2;
  arfPlan_t plan;
  arfFusedArgs_t a = shape(arfPatternResidualRmsNormFp8PerGroup, 4, 4100);  // not a multiple of 128
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &plan), arfInvalidArgument);
  a.hidden = 16384;  // beyond the facts' max_hidden 8192
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &plan), arfInvalidArgument);
  EXPECT_NE(std::string(arfGetLastErrorString()).find("max_hidden"), std::string::npos);
  a.hidden = 4096;
  a.algorithm = arfAlgoNccl;  // the facts have no NCCL
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &plan), arfUnsupported);
  a.algorithm = arfAlgoAuto;
  ASSERT_EQ(arfPlanFromFacts(&f, &a, &plan), arfSuccess) << arfGetLastErrorString();
  f.world_size = 3;
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &plan), arfInvalidArgument);
  f.world_size = 2;
  // Version 5 kept arfPlanFacts_t as version 4 declared it: a version-4 caller's facts still plan.
  f.version = 4;
  ASSERT_EQ(arfPlanFromFacts(&f, &a, &plan), arfSuccess) << arfGetLastErrorString();
  f.version = 3;
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &plan), arfInvalidArgument);
  f.version = ARF_API_VERSION + 1;
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &plan), arfInvalidArgument);
  f.version = ARF_API_VERSION;
  // The scale rule is validated without tensors too.
  a.scale_rule = arfFp8ScaleTimesReciprocal;
  ASSERT_EQ(arfPlanFromFacts(&f, &a, &plan), arfSuccess) << arfGetLastErrorString();
  a.pattern = arfPatternResidualRmsNorm;
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &plan), arfInvalidArgument);
  EXPECT_NE(std::string(arfGetLastErrorString()).find("scale_rule"), std::string::npos);
  a.pattern = arfPatternResidualRmsNormFp8PerGroup;
  f.struct_size = 8;
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &plan), arfInvalidArgument);
  EXPECT_EQ(arfPlanFromFacts(nullptr, &a, &plan), arfInvalidArgument);
}

TEST(WorkspaceBytes, EqualsTheLayoutACommunicatorAllocates) {
  arfCommConfig_t c;
  arfCommConfigInit(&c);
  c.world_size = 8;
  c.max_tokens = 2048;
  c.max_hidden = 8192;
  c.oneshot_max_tokens = 256;
  size_t bytes = 0;
  ASSERT_EQ(arfCommWorkspaceBytes(&c, &bytes), arfSuccess) << arfGetLastErrorString();
  const Result<WorkspaceLayout> l = workspace_layout(8, DType::kBf16, 2048, 8192, 256);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(bytes, static_cast<size_t>(l.value().total_bytes));
  // oneshot_max_tokens 0 means max_tokens, and more than max_tokens is capped, as at creation.
  c.oneshot_max_tokens = 0;
  ASSERT_EQ(arfCommWorkspaceBytes(&c, &bytes), arfSuccess);
  EXPECT_EQ(bytes, static_cast<size_t>(workspace_layout(8, DType::kBf16, 2048, 8192, 2048).value().total_bytes));
  c.oneshot_max_tokens = 1 << 20;
  size_t capped = 0;
  ASSERT_EQ(arfCommWorkspaceBytes(&c, &capped), arfSuccess);
  EXPECT_EQ(capped, bytes);
  c.max_hidden = 12;  // refused at creation too
  EXPECT_EQ(arfCommWorkspaceBytes(&c, &bytes), arfInvalidArgument);
}

}  // namespace
}  // namespace arf
