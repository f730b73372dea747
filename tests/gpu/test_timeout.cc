// Bounded waits (no wait may hang forever): when one rank skips a call, its peers' kernels give up after the
// configured timeout instead of hanging, arfCommGetAsyncError reports arfTimeout naming the waiting
// rank, the missing peer and the phase, and the failed communicator refuses later work with
// arfCommFailed (before launching, so nothing else waits on it). Each case uses a fresh world.
#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

constexpr double kTimeoutSeconds = 0.5;

class Timeout : public ::testing::TestWithParam<std::tuple<arfAlgorithm_t, int>> {};

TEST_P(Timeout, MissingRankFailsItsPeersWithinTheBound) {
  const auto [algorithm, world_size] = GetParam();
  WorldOptions options;
  options.world_size = world_size;
  options.timeout_seconds = kTimeoutSeconds;
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);

  CallSpec spec;
  spec.algorithm = algorithm;
  spec.num_tokens = 16;
  // The short bound is no problem for calls that everyone makes.
  run_and_check(*world, {spec});
  ASSERT_FALSE(HasFailure());

  const int skipper = world_size - 1;
  const CallData data = make_call_data(spec, world_size, world->dtype(), test_seed());
  std::vector<double> elapsed(world_size, 0);
  std::vector<arfStatus_t> launched(world_size), async(world_size), async_again(world_size),
      later(world_size);
  std::vector<cudaError_t> synced(world_size);
  std::vector<std::string> message(world_size);
  std::vector<uint64_t> first_lost(world_size, 0);
  HangGuard guard(60, "timeout test");
  // All allocations precede all launches (a cudaMalloc would wait for a spinning peer kernel).
  std::barrier ready(world_size - 1);
  world->run_ranks([&](int r) {
    if (r == skipper) return;
    CallBuffers buffers(world->device(r), spec, world->dtype());
    buffers.upload(data, r, world->stream(r));
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "upload");
    ready.arrive_and_wait();
    const auto start = std::chrono::steady_clock::now();
    launched[r] = buffers.launch(world->comm(r), world->stream(r));
    synced[r] = cudaStreamSynchronize(world->stream(r));
    elapsed[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    async[r] = arfCommGetAsyncError(world->comm(r));
    message[r] = arfGetLastErrorString();
    async_again[r] = arfCommGetAsyncError(world->comm(r));
    arfCommGetFirstLostCall(world->comm(r), &first_lost[r]);
    later[r] = buffers.launch(world->comm(r), world->stream(r));
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "after the refused call");
  });
  for (int r = 0; r < world_size; ++r) {
    if (r == skipper) continue;
    SCOPED_TRACE("rank " + std::to_string(r));
    // Ranks sharing a GPU keep their enqueues in step (arfusion.h, virtual ranks): a call returns
    // only once every device mate has enqueued it, so here the call itself returns arfTimeout
    // after the bound, naming the missing peer in phase host_enqueue (its kernels, enqueued
    // before that wait, give up on the device as well). Ranks on their own GPUs return at once.
    if (world->device(r) == world->device(skipper)) {
      EXPECT_EQ(launched[r], arfTimeout) << message[r];
      EXPECT_NE(message[r].find("host_enqueue"), std::string::npos) << message[r];
    } else {
      EXPECT_EQ(launched[r], arfSuccess) << message[r];
    }
    // run_and_check made call 0 and, for a fused algorithm, its unfused rerun (call 1); the
    // skipped call is the next index, and it and everything after it are lost.
    const uint64_t skipped_call = algorithm == arfAlgoUnfused ? 1 : 2;
    EXPECT_EQ(first_lost[r], skipped_call) << message[r];
    // The kernel must exit cleanly (no trap): a trap would poison the context of every rank.
    EXPECT_EQ(synced[r], cudaSuccess) << cudaGetErrorString(synced[r]);
    EXPECT_GE(elapsed[r], 0.8 * kTimeoutSeconds) << "gave up before the bound";
    EXPECT_LT(elapsed[r], kTimeoutSeconds + 4.0) << "the bound was not honoured";
    EXPECT_EQ(async[r], arfTimeout) << message[r];
    EXPECT_EQ(async_again[r], arfTimeout) << "the failure must stick";
    // The report may be any waiting rank's (every rank reads the whole group's records), but the
    // peer it waited for can only be the one that never came.
    EXPECT_NE(message[r].find("rank "), std::string::npos) << message[r];
    EXPECT_NE(message[r].find("peer " + std::to_string(skipper)), std::string::npos)
        << message[r];
    EXPECT_NE(message[r].find("phase"), std::string::npos) << message[r];
    EXPECT_EQ(later[r], arfCommFailed);
  }
  // The rank that skipped learns of the failure too, and refuses work instead of launching a
  // kernel that would wait for peers that gave up.
  EXPECT_EQ(arfCommGetAsyncError(world->comm(skipper)), arfTimeout) << arfGetLastErrorString();
  CallBuffers buffers(world->device(skipper), spec, world->dtype());
  EXPECT_EQ(buffers.launch(world->comm(skipper), world->stream(skipper)), arfCommFailed);
  cuda_ok(cudaStreamSynchronize(world->stream(skipper)), "skipper");
}

INSTANTIATE_TEST_SUITE_P(Bounded, Timeout,
                         ::testing::Values(std::make_tuple(arfAlgoOneshotLamport, 2),
                                           std::make_tuple(arfAlgoOneshotPull, 2),
                                           std::make_tuple(arfAlgoTwoshot, 2),
                                           std::make_tuple(arfAlgoUnfused, 2),
                                           std::make_tuple(arfAlgoOneshotLamport, 4),
                                           std::make_tuple(arfAlgoTwoshot, 8)),
                         [](const auto& info) {
                           return algorithm_tag(std::get<0>(info.param)) + "_ws" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace arf::test
