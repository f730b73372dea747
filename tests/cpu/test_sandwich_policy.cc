// The planner on sandwich calls (CallShape::post_norm, arfFusedArgs_t::post_gamma): every
// algorithm and fallback level runs them, so a sandwich call plans exactly as the same call without
// post_gamma (algorithm, grid, block, kernels, level, gate), a pure function of the shape like every
// plan, and only the reason differs: it says "sandwich" and which kernel runs the post-norm.
// Pattern allreduce has no norm: a sandwich allreduce is refused by the planner itself.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "cpu/plan_test_util.h"
#include "launch/kernel_set.h"
#include "policy/policy.h"

namespace arf {
namespace {

StaticFacts facts_for(int world, int ranks_per_device, bool nccl) {
  StaticFacts f;
  f.world = world;
  f.dtype = DType::kBf16;
  f.max_tokens = 2048;
  f.max_hidden = 16384;
  f.oneshot_max_tokens = 512;
  f.min_sm_count = 132;
  f.max_ranks_per_device = ranks_per_device;
  f.nccl = nccl;
  return f;
}

constexpr Pattern kNormPatterns[] = {Pattern::kResidualRmsNorm, Pattern::kFp8PerTensor,
                                     Pattern::kFp8PerToken,     Pattern::kFp8PerGroup,
                                     Pattern::kNvfp4,           Pattern::kMxfp4};
constexpr Algorithm kAlgorithms[] = {Algorithm::kAuto,    Algorithm::kOneshotLamport,
                                     Algorithm::kOneshotPull, Algorithm::kTwoshot,
                                     Algorithm::kUnfused, Algorithm::kNccl};

bool same_launch(const Plan& a, const Plan& b) {
  return a.algorithm == b.algorithm && a.inner_allreduce == b.inner_allreduce && a.grid == b.grid &&
         a.block == b.block && a.epilogue_grid == b.epilogue_grid &&
         a.shared_device_gate == b.shared_device_gate && a.num_kernels == b.num_kernels &&
         a.forced == b.forced && a.fallback_level == b.fallback_level;
}

// Random shapes, every pattern, algorithm and level, shared and unshared devices: the sandwich
// plan is the plain plan with the reason's suffix, or both are refused with the same status.
TEST(SandwichPlan, SameLaunchAsThePlainCallAndTheReasonSaysWhere) {
  std::mt19937_64 rng(20261205);
  int planned = 0, split = 0;
  for (int world : {1, 2, 4, 8}) {
    for (int shared : {1, world}) {
      const StaticFacts facts = facts_for(world, shared, shared == 1 && world > 1);
      for (int i = 0; i < 400; ++i) {
        const Pattern pattern = kNormPatterns[rng() % 6];
        const Algorithm algorithm = kAlgorithms[rng() % 6];
        const int level = is_quant_pattern(pattern) ? static_cast<int>(rng() % 4) : 0;
        const int hidden = 128 * static_cast<int>(1 + rng() % 128);
        const int64_t tokens = 1 + static_cast<int64_t>(rng() % 2048);
        CallShape plain = call_shape(tokens, hidden, pattern, algorithm, level);
        CallShape sandwich = plain;
        sandwich.post_norm = true;
        const Result<Plan> a = make_plan(plain, facts);
        const Result<Plan> b = make_plan(sandwich, facts);
        ASSERT_EQ(a.is_ok(), b.is_ok()) << b.status().message();
        if (!a.is_ok()) {
          EXPECT_EQ(a.status().code(), b.status().code());
          EXPECT_EQ(a.status().message(), b.status().message());
          continue;
        }
        ++planned;
        const Plan& p = a.value();
        const Plan& q = b.value();
        ASSERT_TRUE(same_launch(p, q)) << q.reason;
        const bool in_epilogue = p.algorithm == Algorithm::kUnfused || p.algorithm == Algorithm::kNccl;
        split += in_epilogue;
        const std::string suffix = in_epilogue ? "; sandwich (post-norm in the epilogue kernel)"
                                               : "; sandwich (post-norm fused)";
        EXPECT_EQ(q.reason, p.reason + suffix);
        // The kernels the launcher runs for it exist: the post-norm needs none of its own.
        if (p.algorithm != Algorithm::kNccl) {
          const CallKernels call = call_kernels(q, pattern, DType::kBf16, world, q.fallback_level, hidden);
          ASSERT_GT(call.count, 0);
          for (int k = 0; k < call.count; ++k) EXPECT_TRUE(declared(call.keys[static_cast<size_t>(k)]));
        }
        // Determinism: the same shape plans the same again.
        const Result<Plan> again = make_plan(sandwich, facts);
        ASSERT_TRUE(again.is_ok());
        EXPECT_TRUE(same_launch(again.value(), q));
        EXPECT_EQ(again.value().reason, q.reason);
      }
    }
  }
  EXPECT_GT(planned, 1000);
  EXPECT_GT(split, 100);  // the epilogue-kernel chains were reached, not only the fused one
}

TEST(SandwichPlan, AllReduceHasNoNormToPrecede) {
  const StaticFacts facts = facts_for(4, 1, false);
  for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kTwoshot, Algorithm::kUnfused}) {
    CallShape s = call_shape(64, 4096, Pattern::kAllReduce, algorithm);
    s.post_norm = true;
    const Result<Plan> r = make_plan(s, facts);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), arfInvalidArgument);
    EXPECT_NE(r.status().message().find("post_gamma"), std::string::npos) << r.status().message();
    s.post_norm = false;
    EXPECT_TRUE(make_plan(s, facts).is_ok());
  }
}

}  // namespace
}  // namespace arf
