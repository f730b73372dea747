// Promises of arfusion.h that are about the communicator rather than the numbers:
//  - arfCommGetAsyncError / arfCommGetFirstLostCall polled from a watchdog thread while the ranks'
//    threads issue calls (Thread safety), healthy and after a failure;
//  - ARF_DEBUG_COUNTERS_NEAR_WRAP: a run that crosses the 32-bit wrap of the call index and of the
//    barrier and gate epochs, every algorithm, with the integrity check on, gives exact results;
//  - verify_calls asked for by one rank only is agreed at creation (no spurious arfInternal);
//  - in a mixed placement a rank alone on its GPU launches no shared-device gate;
//  - max_ctas bounds every call's grid, and calls complete (or are refused, never hang).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/api_internal.h"
#include "core/communicator.h"
#include "gpu/harness.h"

namespace arf::test {
namespace {

// Polls every communicator of `world` from one extra thread until stopped, as an engine's watchdog
// polls NCCL; counts what it saw.
class Watchdog {
 public:
  explicit Watchdog(const World& world) : world_(world), thread_([this] { run(); }) {}
  ~Watchdog() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int polls() const { return polls_.load(); }
  int errors() const { return errors_.load(); }
  const std::string& first_error() const { return first_error_; }  // after stop()

 private:
  void run() {
    while (!stop_.load()) {
      for (int r = 0; r < world_.size(); ++r) {
        const arfStatus_t st = arfCommGetAsyncError(world_.comm(r));
        uint64_t lost = 0;
        (void)arfCommGetFirstLostCall(world_.comm(r), &lost);
        if (st != arfSuccess && errors_.fetch_add(1) == 0) first_error_ = arfGetLastErrorString();
      }
      polls_.fetch_add(1);
    }
  }
  const World& world_;
  std::atomic<bool> stop_{false};
  std::atomic<int> polls_{0}, errors_{0};
  std::string first_error_;
  std::thread thread_;
};

std::vector<CallSpec> cycling_specs(int n) {
  const arfAlgorithm_t algorithms[] = {arfAlgoOneshotLamport, arfAlgoOneshotPull, arfAlgoTwoshot,
                                       arfAlgoUnfused};
  const size_t tokens[] = {1, 4, 1023, 264, 2};
  const size_t hidden[] = {4096, 128, 16384};
  std::vector<CallSpec> specs;
  for (int i = 0; i < n; ++i) {
    CallSpec s;
    s.algorithm = algorithms[i % 4];
    s.num_tokens = tokens[i % 5];
    s.hidden = hidden[i % 3];
    s.pattern = i % 7 == 6 ? arfPatternAllReduce : arfPatternResidualRmsNorm;
    specs.push_back(s);
  }
  return specs;
}

TEST(Watchdog, PollsEveryCommunicatorWhileCallsRun) {
  WorldOptions options;
  options.world_size = 4;
  options.max_hidden = 16384;
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  Watchdog watchdog(*world);
  run_and_check(*world, cycling_specs(60));
  watchdog.stop();
  EXPECT_GT(watchdog.polls(), 0);
  EXPECT_EQ(watchdog.errors(), 0) << watchdog.first_error();
}

// A rank that skips a call makes its peers' waits expire: the watchdog, not the calling threads,
// is the first to see arfTimeout, and every rank then refuses further calls.
TEST(Watchdog, SeesATimeoutWhileTheRanksStillCall) {
  WorldOptions options;
  options.world_size = 2;
  options.timeout_seconds = 1.0;
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  Watchdog watchdog(*world);
  CallSpec spec;
  spec.algorithm = arfAlgoTwoshot;
  spec.num_tokens = 32;
  const CallData data = make_call_data(spec, 2, world->dtype(), test_seed());
  HangGuard guard(60, "watchdog timeout");
  std::vector<arfStatus_t> later(2);
  world->run_ranks([&](int r) {
    CallBuffers buffers(world->device(r), spec, world->dtype());
    buffers.upload(data, r, world->stream(r));
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "upload");
    if (r == 0) (void)buffers.launch(world->comm(r), world->stream(r));  // rank 1 never joins
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "sync");
    // Let the watchdog see the record before this thread's own call does.
    for (int i = 0; i < 200 && watchdog.errors() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    later[r] = buffers.launch(world->comm(r), world->stream(r));
  });
  watchdog.stop();
  EXPECT_GT(watchdog.errors(), 0);
  // The device's record ("waited for peer 1 in phase ...") or, for ranks sharing a GPU, rank 0's
  // host enqueue wait ("waited 1 s for peer 1 ... host_enqueue"), whichever failed first.
  EXPECT_NE(watchdog.first_error().find("timeout: rank 0 waited"), std::string::npos)
      << watchdog.first_error();
  EXPECT_NE(watchdog.first_error().find("peer 1"), std::string::npos) << watchdog.first_error();
  EXPECT_EQ(later[0], arfCommFailed);
  EXPECT_EQ(later[1], arfCommFailed);
  uint64_t lost = 0;
  EXPECT_EQ(arfCommGetFirstLostCall(world->comm(1), &lost), arfSuccess);
  EXPECT_EQ(lost, 0u);
}

uint64_t device_call_index(const World& world, int rank) {
  uint64_t index = 0;
  ControlBlock* ctrl = communicator_of(world.comm(rank))->control_block();
  cuda_ok(cudaSetDevice(world.device(rank)), "set device");
  cuda_ok(cudaMemcpy(&index, &ctrl->call_index, sizeof(index), cudaMemcpyDeviceToHost), "peek");
  return index;
}

// 100 calls cycling lamport, pull, twoshot and unfused over tokens {1, 4, 1023, 264, 2} and
// hidden {4096, 128, 16384}, with every rank's counters started 50 calls short of 2^32: the call
// index, the gate epoch and CTA 0's barrier epoch all wrap within the run (the check reruns every
// call unfused: 200 collective calls). verify_calls is on, so a flag of the wrong call would be an
// arfInternal instead of a silent pass.
TEST(CountersNearWrap, EveryAlgorithmCrossesTheWrapExactly) {
  constexpr uint32_t kBeforeWrap = 50;
  for (int world_size : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world_size));
    WorldOptions options;
    options.world_size = world_size;
    options.max_tokens = 1024;
    options.max_hidden = 16384;
    setenv("ARF_DEBUG_COUNTERS_NEAR_WRAP", std::to_string(kBeforeWrap).c_str(), 1);
    setenv("ARF_VERIFY_CALLS", "1", 1);
    const auto world = World::create(options);
    unsetenv("ARF_DEBUG_COUNTERS_NEAR_WRAP");
    unsetenv("ARF_VERIFY_CALLS");
    ASSERT_NE(world, nullptr);
    const uint64_t start = (uint64_t{1} << 32) - kBeforeWrap;
    for (int r = 0; r < world_size; ++r) EXPECT_EQ(device_call_index(*world, r), start);
    run_and_check(*world, cycling_specs(100));
    for (int r = 0; r < world_size; ++r) {
      EXPECT_EQ(arfCommGetAsyncError(world->comm(r)), arfSuccess) << arfGetLastErrorString();
      uint64_t lost = 0;
      EXPECT_EQ(arfCommGetFirstLostCall(world->comm(r), &lost), arfSuccess);
      EXPECT_EQ(lost, UINT64_MAX);
      EXPECT_EQ(device_call_index(*world, r), start + 200) << "rank " << r;
    }
  }
}

TEST(CountersNearWrap, AMalformedSettingFailsCreation) {
  setenv("ARF_DEBUG_COUNTERS_NEAR_WRAP", "50x", 1);
  arfCommConfig_t config;
  arfCommConfigInit(&config);
  arfComm_t comms[2] = {nullptr, nullptr};
  const int devices[2] = {test_devices(2)[0], test_devices(2)[1]};
  const arfStatus_t st = arfCommInitAll(comms, 2, devices, &config);
  const std::string message = arfGetLastErrorString();
  unsetenv("ARF_DEBUG_COUNTERS_NEAR_WRAP");
  EXPECT_EQ(st, arfInvalidArgument);
  EXPECT_NE(message.find("ARF_DEBUG_COUNTERS_NEAR_WRAP=\"50x\""), std::string::npos) << message;
}

// Rank 0 asks for the integrity check, rank 1 does not: agreed at creation, both run it (rank 1
// publishes the Lamport slot headers rank 0 checks), so nothing is reported; before the agreement
// rank 0 found rank 1's headers unwritten and reported arfInternal.
TEST(VerifyCalls, OneRankAskingTurnsItOnForEveryRank) {
  WorldOptions options;
  options.world_size = 2;
  options.per_rank = [](int rank, arfCommConfig_t* c) { c->verify_calls = rank == 0 ? 1 : 0; };
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  std::vector<CallSpec> specs = cycling_specs(12);
  for (CallSpec& s : specs) s.hidden = std::min<size_t>(s.hidden, 8192);
  run_and_check(*world, specs);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(arfCommGetAsyncError(world->comm(r)), arfSuccess) << arfGetLastErrorString();
    EXPECT_EQ(communicator_of(world->comm(r))->verify_calls(), 1) << "rank " << r;
  }
}

uint32_t device_gate_epoch(const World& world, int rank) {
  uint32_t epoch = 0;
  ControlBlock* ctrl = communicator_of(world.comm(rank))->control_block();
  cuda_ok(cudaSetDevice(world.device(rank)), "set device");
  cuda_ok(cudaMemcpy(&epoch, &ctrl->gate_epoch, sizeof(epoch), cudaMemcpyDeviceToHost), "peek");
  return epoch;
}

// World 4 on two GPUs, ranks 0-2 on GPU 0 and rank 3 alone on GPU 1: the plan owes the gate
// (ranks share a GPU), ranks 0-2 pass one per call, rank 3 launches none (its gate epoch stays
// 0), and every output is right (rank 3's collective has the same grid as its peers').
TEST(MixedPlacement, ARankAloneOnItsGpuLaunchesNoGate) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) GTEST_SKIP() << "needs 2 GPUs";
  WorldOptions options;
  options.world_size = 4;
  options.devices = {0, 0, 0, 1};
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  std::vector<CallSpec> specs = cycling_specs(20);
  for (CallSpec& s : specs) s.hidden = std::min<size_t>(s.hidden, 8192);
  run_and_check(*world, specs);  // 40 calls: the check reruns them unfused
  for (int r = 0; r < 3; ++r) EXPECT_EQ(device_gate_epoch(*world, r), 40u) << "rank " << r;
  EXPECT_EQ(device_gate_epoch(*world, 3), 0u) << "the lone rank ran a gate";
}

// max_ctas (arfCommConfig_t, API version 6): every call of every algorithm completes within the
// bound (the plan's grid says so, and the outputs are exact), and the facts report it.
TEST(MaxCtas, EveryAlgorithmCompletesWithinTheBound) {
  for (int max_ctas : {4, 24}) {
    SCOPED_TRACE("max_ctas " + std::to_string(max_ctas));
    WorldOptions options;
    options.world_size = 4;
    options.max_hidden = 16384;
    options.per_rank = [max_ctas](int, arfCommConfig_t* c) { c->max_ctas = max_ctas; };
    const auto world = World::create(options);
    ASSERT_NE(world, nullptr);
    arfPlanFacts_t facts;
    arfPlanFactsInit(&facts);
    ASSERT_EQ(arfCommGetPlanFacts(world->comm(0), &facts), arfSuccess);
    EXPECT_EQ(facts.max_ctas, max_ctas);
    const int per_rank = max_ctas / facts.ranks_per_device;
    const std::vector<CallSpec> specs = cycling_specs(40);
    for (const CallSpec& spec : specs) {
      CallBuffers buffers(world->device(0), spec, world->dtype());
      arfFusedArgs_t args = buffers.args();
      arfPlan_t plan;
      ASSERT_EQ(arfPlan(world->comm(0), &args, &plan), arfSuccess) << arfGetLastErrorString();
      EXPECT_LE(plan.grid, per_rank) << plan_text(plan);
    }
    run_and_check(*world, specs);
  }
}

// Four ranks on one GPU with max_ctas 3: no rank can have a CTA, so every call is refused before
// launch (arfUnsupported naming the bound) on every rank, and nothing waits.
TEST(MaxCtas, TooSmallForTheRanksOfAGpuIsRefusedNotHung) {
  WorldOptions options;
  options.world_size = 4;
  options.devices = {0, 0, 0, 0};
  options.per_rank = [](int, arfCommConfig_t* c) { c->max_ctas = 3; };
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  CallSpec spec;
  spec.num_tokens = 64;
  HangGuard guard(60, "max_ctas too small");
  world->run_ranks([&](int r) {
    CallBuffers buffers(world->device(r), spec, world->dtype());
    const arfStatus_t st = buffers.launch(world->comm(r), world->stream(r));
    EXPECT_EQ(st, arfUnsupported) << "rank " << r;
    EXPECT_NE(std::string(arfGetLastErrorString()).find("max_ctas 3"), std::string::npos)
        << arfGetLastErrorString();
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "sync");
    EXPECT_EQ(arfCommGetAsyncError(world->comm(r)), arfSuccess) << arfGetLastErrorString();
  });
}

// Ranks that disagree on max_ctas would plan different grids: creation fails on every rank,
// naming the values.
TEST(MaxCtas, RanksThatDisagreeFailCreation) {
  arfUniqueId id;
  ASSERT_EQ(arfGetUniqueId(&id), arfSuccess);
  const std::vector<int> devices = test_devices(2);
  std::vector<arfStatus_t> status(2);
  std::vector<std::string> message(2);
  std::vector<arfComm_t> comms(2, nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      arfCommConfig_t c;
      arfCommConfigInit(&c);
      c.rank = r;
      c.world_size = 2;
      c.device = devices[r];
      c.id = id;
      c.max_ctas = r == 0 ? 16 : 32;
      status[r] = arfCommInitRank(&comms[r], &c);
      message[r] = arfGetLastErrorString();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r], arfInvalidArgument) << message[r];
    EXPECT_NE(message[r].find("ranks disagree on max_ctas: rank 0 has 16, rank 1 has 32"),
              std::string::npos)
        << message[r];
    (void)arfCommDestroy(comms[r]);
  }
}

}  // namespace
}  // namespace arf::test
