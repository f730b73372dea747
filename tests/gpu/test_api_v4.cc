// API version 4 on the GPU: residual_in NULL (the first layer), arfNormRoundBeforeWeight,
// arfPlanShape against arfPlan, and two communicators of the same ranks used in turn from two
// streams (an engine's attention-TP and MoE-TP groups).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

class Options : public ::testing::TestWithParam<std::tuple<arfAlgorithm_t, int, arfDataType_t>> {};

// Every combination of no residual x rounding, in place or not, against the reference and (through
// run_and_check) bitwise against the unfused path.
TEST_P(Options, NoResidualAndRoundBeforeWeightFollowTheContract) {
  const auto [algorithm, world_size, dtype] = GetParam();
  WorldOptions options;
  options.world_size = world_size;
  options.dtype = dtype;
  options.max_tokens = 256;
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  std::vector<CallSpec> specs;
  const int64_t tokens[] = {1, 5, 64, 256};
  for (int i = 0; i < 16; ++i) {
    CallSpec s;
    s.algorithm = algorithm;
    s.num_tokens = tokens[i % 4];
    s.hidden = i % 2 ? 4096 : 1024;
    s.no_residual = (i & 1) != 0;
    s.norm_rounding = (i & 2) ? arfNormRoundBeforeWeight : arfNormRoundOnce;
    s.gamma_fp32 = (i & 4) != 0;
    s.gamma_plus_one = (i & 8) != 0;
    s.alias = (i % 3 == 0) ? (kResidualInPlace | kNormIntoInput) : kNoAlias;
    specs.push_back(s);
  }
  run_and_check(*world, specs);
}

INSTANTIATE_TEST_SUITE_P(
    ApiV4, Options,
    ::testing::Values(std::make_tuple(arfAlgoAuto, 1, arfBFloat16),
                      std::make_tuple(arfAlgoAuto, 2, arfBFloat16),
                      std::make_tuple(arfAlgoOneshotLamport, 2, arfFloat16),
                      std::make_tuple(arfAlgoOneshotPull, 4, arfBFloat16),
                      std::make_tuple(arfAlgoTwoshot, 8, arfBFloat16),
                      std::make_tuple(arfAlgoUnfused, 8, arfFloat16)),
    [](const auto& info) {
      return algorithm_tag(std::get<0>(info.param)) + "_ws" + std::to_string(std::get<1>(info.param)) +
             "_" + dtype_tag(std::get<2>(info.param));
    });

TEST(PlanShape, EqualsArfPlanWithoutTensors) {
  WorldOptions options;
  options.world_size = 4;
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  for (arfAlgorithm_t algorithm : {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoTwoshot, arfAlgoUnfused}) {
    for (int64_t tokens : {1, 33, 1024}) {
      CallSpec spec;
      spec.algorithm = algorithm;
      spec.num_tokens = tokens;
      CallBuffers buffers(world->device(0), spec, world->dtype());
      const arfFusedArgs_t full = buffers.args();
      arfFusedArgs_t bare = full;
      bare.input = bare.residual_in = bare.gamma = nullptr;
      bare.residual_out = bare.norm_out = nullptr;
      arfPlan_t a{}, b{};
      ASSERT_EQ(arfPlan(world->comm(0), &full, &a), arfSuccess) << arfGetLastErrorString();
      ASSERT_EQ(arfPlanShape(world->comm(0), &bare, &b), arfSuccess) << arfGetLastErrorString();
      EXPECT_EQ(a.algorithm, b.algorithm);
      EXPECT_EQ(a.grid, b.grid);
      EXPECT_EQ(a.block, b.block);
      EXPECT_EQ(a.num_kernels, b.num_kernels);
      EXPECT_EQ(std::string(a.reason), std::string(b.reason));
      EXPECT_EQ(arfPlan(world->comm(0), &bare, &a), arfInvalidArgument);  // arfPlan needs tensors
    }
  }
  arfPlanFacts_t facts;
  ASSERT_EQ(arfCommGetPlanFacts(world->comm(0), &facts), arfSuccess);
  EXPECT_EQ(facts.world_size, 4);
  EXPECT_EQ(facts.max_tokens, options.max_tokens);
}

// Two communicators over the same ranks; each rank issues A on stream a, then B on stream b after
// an event on a, then A again after an event on b, and so on: the two groups' protocol state,
// gates and enqueue order are independent, and in-turn use never mixes them.
TEST(TwoCommunicators, InTurnFromTwoStreams) {
  WorldOptions options;
  options.world_size = 4;
  const auto a = World::create(options);
  const auto b = World::create(options);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<CallSpec> specs(12);
  for (size_t c = 0; c < specs.size(); ++c) {
    specs[c].num_tokens = 1 + static_cast<int64_t>(c) * 37;
    specs[c].algorithm = c % 3 == 0 ? arfAlgoTwoshot : c % 3 == 1 ? arfAlgoOneshotLamport : arfAlgoAuto;
  }
  const std::vector<CallData> data = make_all_call_data(specs, 4, a->dtype(), test_seed());
  std::vector<std::vector<std::unique_ptr<CallBuffers>>> buffers(4);
  HangGuard guard(120, "two communicators in turn");
  a->run_ranks([&](int r) {
    cudaEvent_t done_a, done_b;
    cuda_ok(cudaEventCreateWithFlags(&done_a, cudaEventDisableTiming), "event");
    cuda_ok(cudaEventCreateWithFlags(&done_b, cudaEventDisableTiming), "event");
    for (size_t c = 0; c < specs.size(); ++c) {
      buffers[r].push_back(std::make_unique<CallBuffers>(a->device(r), specs[c], a->dtype()));
      buffers[r][c]->upload(data[c], r, a->stream(r));
    }
    cuda_ok(cudaStreamSynchronize(a->stream(r)), "upload");
    for (size_t c = 0; c < specs.size(); ++c) {
      const bool on_a = c % 2 == 0;
      const World& w = on_a ? *a : *b;
      const cudaStream_t s = w.stream(r);
      cuda_ok(cudaStreamWaitEvent(s, on_a ? done_b : done_a, 0), "wait");
      EXPECT_EQ(buffers[r][c]->launch(w.comm(r), s), arfSuccess) << arfGetLastErrorString();
      cuda_ok(cudaEventRecord(on_a ? done_a : done_b, s), "record");
    }
    cuda_ok(cudaStreamSynchronize(a->stream(r)), "sync a");
    cuda_ok(cudaStreamSynchronize(b->stream(r)), "sync b");
    EXPECT_EQ(arfCommGetAsyncError(a->comm(r)), arfSuccess) << arfGetLastErrorString();
    EXPECT_EQ(arfCommGetAsyncError(b->comm(r)), arfSuccess) << arfGetLastErrorString();
    cudaEventDestroy(done_a);
    cudaEventDestroy(done_b);
  });
  std::vector<CallResult> results(specs.size(), CallResult(4));
  for (size_t c = 0; c < specs.size(); ++c) {
    for (int r = 0; r < 4; ++r) results[c][r] = buffers[r][c]->download(a->stream(r));
  }
  check_calls(*a, specs, data, results);
}

}  // namespace
}  // namespace arf::test
