// Ranks sharing one GPU (virtual ranks) next to other kernels on their streams, as an engine runs
// them: the co-scheduling hazards the shared-device gate and the enqueue order exist for
// (protocol.cuh, shared_device_gate; transport/local.h) and the per-call integrity check.
//  - A mate whose stream runs a kernel needing a whole SM before its call must not be starved by
//    a peer's collective spinning on every SM.
//  - Foreign kernels enqueued right behind each call, with host skew, must never block a peer's
//    call in a shared hardware queue (ctest gpu_tests_one_queue reruns these with one queue; the
//    gpu_acceptance.sh stage coresident runs them against the libraries without the return wait
//    and without the gate, arfusion_gpu_tests_no_return_wait / _no_shared_device_gate).
//  - With verify_calls, ranks whose call indices disagree get arfInternal naming the call and the
//    ranks instead of numbers; without it the same state goes unnoticed (so the check is what
//    catches it), and arfCommGetFirstLostCall names the first lost call.
#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/api_internal.h"
#include "core/communicator.h"
#include "gpu/foreign_kernels.h"
#include "gpu/harness.h"

namespace arf::test {
namespace {

bool ranks_share_a_device(const World& world) {
  for (int r = 1; r < world.size(); ++r) {
    if (world.device(r) == world.device(0)) return true;
  }
  return false;
}

int sm_count(int device) {
  int n = 0;
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
  return n;
}

class StarvedMate : public ::testing::TestWithParam<arfAlgorithm_t> {};

// Rank 0 calls at once; rank 1 first runs, on its own stream, a kernel each of whose CTAs needs a
// whole SM. Without the gate rank 0's collective (grid = one CTA per SM) would hold every SM and
// rank 1's kernel, hence its collective, could never start.
TEST_P(StarvedMate, AMateBehindAWholeSmKernelStillArrives) {
  WorldOptions options;
  options.world_size = 2;
  options.max_tokens = 1024;
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  if (!ranks_share_a_device(*world)) GTEST_SKIP() << "ranks have their own GPUs";
  ASSERT_TRUE(cuda_ok(preload_foreign_kernels(), "preload"));
  CallSpec spec;
  spec.algorithm = GetParam();
  spec.num_tokens = 1024;  // the largest grid the planner gives two ranks on one GPU
  spec.hidden = 4096;
  const CallData data = make_call_data(spec, 2, world->dtype(), test_seed());
  std::vector<std::unique_ptr<CallBuffers>> buffers(2);
  std::vector<arfStatus_t> launched(2, arfInternal);
  std::barrier ready(2);
  HangGuard guard(60, "starved mate");
  world->run_ranks([&](int r) {
    buffers[r] = std::make_unique<CallBuffers>(world->device(r), spec, world->dtype());
    buffers[r]->upload(data, r, world->stream(r));
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "upload");
    ready.arrive_and_wait();
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 is waiting by now
      cuda_ok(launch_whole_sm_kernel(2 * sm_count(world->device(r)), 200000, world->stream(r)),
              "whole-SM kernel");
    }
    launched[r] = buffers[r]->launch(world->comm(r), world->stream(r));
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "sync");
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(launched[r], arfSuccess) << r;
    EXPECT_EQ(arfCommGetAsyncError(world->comm(r)), arfSuccess) << arfGetLastErrorString();
  }
  std::vector<CallResult> results(1, CallResult(2));
  for (int r = 0; r < 2; ++r) results[0][r] = buffers[r]->download(world->stream(r));
  check_calls(*world, {spec}, {data}, results);
}

INSTANTIATE_TEST_SUITE_P(SharedDevice, StarvedMate,
                         ::testing::Values(arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                           arfAlgoTwoshot, arfAlgoUnfused),
                         [](const auto& info) { return algorithm_tag(info.param); });

// Every rank enqueues its calls back-to-back, each followed at once by a kernel reading its
// outputs and by a whole-SM kernel, with random host skew, no coordination between the ranks and
// every algorithm and shape in turn: nothing may stall, and every output must be right.
TEST(SharedDevice, ForeignKernelsBehindEveryCallNeverBlockAPeer) {
  for (int world_size : {2, 4, 8}) {
    WorldOptions options;
    options.world_size = world_size;
    options.max_tokens = 512;
    const auto world = World::create(options);
    ASSERT_NE(world, nullptr);
    ASSERT_TRUE(cuda_ok(preload_foreign_kernels(), "preload"));
    std::vector<CallSpec> specs;
    const arfAlgorithm_t algorithms[] = {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                         arfAlgoTwoshot, arfAlgoUnfused};
    const int64_t tokens[] = {512, 1, 3, 511, 2, 200, 512, 7};
    for (int i = 0; i < 24; ++i) {
      CallSpec s;
      s.algorithm = algorithms[i % 5];
      s.num_tokens = tokens[i % 8];
      s.hidden = (i % 3 == 0) ? 8192 : (i % 3 == 1) ? 1024 : 4096;
      s.pattern = i % 4 == 3 ? arfPatternAllReduce : arfPatternResidualRmsNorm;
      specs.push_back(s);
    }
    const std::vector<CallData> data = make_all_call_data(specs, world_size, world->dtype(), test_seed());
    std::vector<std::vector<std::unique_ptr<CallBuffers>>> buffers(world_size);
    std::vector<DeviceBuffer> sinks;
    for (int r = 0; r < world_size; ++r) sinks.emplace_back(world->device(r), 8);
    std::barrier ready(world_size);
    HangGuard guard(120, "foreign kernels behind every call, world " + std::to_string(world_size));
    world->run_ranks([&](int r) {
      const cudaStream_t s = world->stream(r);
      for (size_t c = 0; c < specs.size(); ++c) {
        buffers[r].push_back(std::make_unique<CallBuffers>(world->device(r), specs[c], world->dtype()));
        buffers[r][c]->upload(data[c], r, s);
      }
      cuda_ok(cudaStreamSynchronize(s), "upload");
      ready.arrive_and_wait();
      std::mt19937 rng(static_cast<unsigned>(r * 7919 + world_size));
      const int sms = sm_count(world->device(r));
      for (size_t c = 0; c < specs.size(); ++c) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        const arfStatus_t st = buffers[r][c]->launch(world->comm(r), s);
        EXPECT_EQ(st, arfSuccess) << "rank " << r << " call " << c << ": " << arfGetLastErrorString();
        const void* out = specs[c].has_norm() ? buffers[r][c]->norm_out() : buffers[r][c]->allreduce_out();
        cuda_ok(launch_reader_kernel(out, static_cast<size_t>(specs[c].elems()) * 2,
                                     static_cast<unsigned long long*>(sinks[r].get()), s), "reader");
        if (c % 3 == r % 3) cuda_ok(launch_whole_sm_kernel(sms, 20000, s), "whole-SM kernel");
      }
      cuda_ok(cudaStreamSynchronize(s), "sync");
      EXPECT_EQ(arfCommGetAsyncError(world->comm(r)), arfSuccess) << arfGetLastErrorString();
    });
    std::vector<CallResult> results(specs.size(), CallResult(world_size));
    for (size_t c = 0; c < specs.size(); ++c) {
      for (int r = 0; r < world_size; ++r) results[c][r] = buffers[r][c]->download(world->stream(r));
    }
    check_calls(*world, specs, data, results);
    if (HasFailure()) return;
  }
}

// Sets rank `rank`'s device call index to `value` (no collective may be in flight).
void set_call_index(const World& world, int rank, uint64_t value) {
  ControlBlock* ctrl = communicator_of(world.comm(rank))->control_block();
  cuda_ok(cudaSetDevice(world.device(rank)), "set device");
  cuda_ok(cudaMemcpy(&ctrl->call_index, &value, sizeof(value), cudaMemcpyHostToDevice), "poke");
}

class Integrity : public ::testing::TestWithParam<arfAlgorithm_t> {};

// Ranks whose call indices disagree model a protocol slip (ranks exchanging data of different
// calls). With verify_calls the next call fails with arfInternal naming both; without it nothing
// notices. Either way the first lost call is reported consistently.
TEST_P(Integrity, RanksInDifferentCallsAreReportedWithVerifyCalls) {
  for (int verify : {0, 1}) {
    SCOPED_TRACE("verify_calls " + std::to_string(verify));
    WorldOptions options;
    options.world_size = 2;
    options.timeout_seconds = 2.0;
    setenv("ARF_VERIFY_CALLS", verify ? "1" : "0", 1);
    const auto world = World::create(options);
    unsetenv("ARF_VERIFY_CALLS");
    ASSERT_NE(world, nullptr);
    CallSpec spec;
    spec.algorithm = GetParam();
    spec.num_tokens = 40;
    run_and_check(*world, {spec});  // two calls per rank (the check reruns it unfused)
    ASSERT_FALSE(HasFailure());
    uint64_t lost = 0;
    ASSERT_EQ(arfCommGetFirstLostCall(world->comm(0), &lost), arfSuccess);
    EXPECT_EQ(lost, UINT64_MAX);
    set_call_index(*world, 1, 1000);  // rank 1 now believes it is 998 calls ahead
    std::vector<arfStatus_t> async(2);
    std::vector<std::string> message(2);
    std::vector<uint64_t> first_lost(2);
    const CallData data = make_call_data(spec, 2, world->dtype(), test_seed() + 1);
    world->run_ranks([&](int r) {
      CallBuffers buffers(world->device(r), spec, world->dtype());
      buffers.upload(data, r, world->stream(r));
      cuda_ok(cudaStreamSynchronize(world->stream(r)), "upload");
      EXPECT_EQ(buffers.launch(world->comm(r), world->stream(r)), arfSuccess);
      cuda_ok(cudaStreamSynchronize(world->stream(r)), "sync");
      async[r] = arfCommGetAsyncError(world->comm(r));
      message[r] = arfGetLastErrorString();
      arfCommGetFirstLostCall(world->comm(r), &first_lost[r]);
    });
    for (int r = 0; r < 2; ++r) {
      if (!verify) {
        EXPECT_EQ(async[r], arfSuccess) << message[r];
        EXPECT_EQ(first_lost[r], UINT64_MAX);
        continue;
      }
      EXPECT_EQ(async[r], arfInternal) << message[r];
      EXPECT_NE(message[r].find("integrity check failed"), std::string::npos) << message[r];
      // Rank 0 is in its call 2 (the third), rank 1 in "call 1000".
      EXPECT_TRUE(message[r].find("call 2") != std::string::npos ||
                  message[r].find("call 1000") != std::string::npos) << message[r];
      EXPECT_EQ(first_lost[r], 2u) << message[r];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SharedDevice, Integrity,
                         ::testing::Values(arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                           arfAlgoTwoshot),
                         [](const auto& info) { return algorithm_tag(info.param); });

}  // namespace
}  // namespace arf::test
