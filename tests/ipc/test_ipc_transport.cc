// The ipc transport (arfTransportIpc: one process per rank) end to end on real GPUs. Each test
// forks one child per rank (ipc_test_util.h: the parent never touches CUDA, children _exit and
// never return into gtest); each child creates its communicator with arfCommInitRank, runs its
// rank's scenario and checks its own outputs against the CPU reference (ipc_rank.h); the parent
// checks exit statuses and that every rank of a group reported the same output hashes.
//
// Scenarios:
//   Correctness  back-to-back calls at world 2 and 4: allreduce (fused and flat), residual_rmsnorm
//                (bf16, fp16, fp32 gamma) and FP8 per-token, every algorithm, tokens 1..257;
//                arfPlan identical on every rank
//   Rendezvous   two groups with different ids started together stay apart
//   Init         a rank that never joins (arfTimeout naming it); mismatched capacity
//                (arfInvalidArgument on every rank, no wait)
//   Failure      a rank that exits after init: the peer's call times out naming it, later calls
//                are refused, destroy returns; a rank that issues a different call: refused
//                before launch naming both ranks (shared call log), the peer times out
//   Graph        (test_ipc_graph.cc) three captured calls replayed with new inputs each time
//   Env          the communicator from arfCommConfigFromEnv (what arfusion-run sets)
//
// Devices: ARF_TEST_DEVICES ("0,1"; rank r gets entry r % n), default every rank on device 0,
// where the ranks' processes time-slice the GPU (each protocol wait may cost a scheduler slice),
// hence the modest call counts. Without a device the binary prints SKIPPED and exits 77
// (ipc_main.cc).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "ipc/ipc_rank.h"
#include "ipc/ipc_test_util.h"

namespace arf::ipc_test {
namespace {

using Clock = std::chrono::steady_clock;

// The failure scenarios' bounds, short so that they cost seconds, not the defaults' minutes.
constexpr double kShortInitTimeoutSeconds = 2.0;
constexpr double kShortDeviceTimeoutSeconds = 2.0;
// What "within the bound" allows on top of the bound itself (scheduling, teardown of the wait).
constexpr double kBoundSlackSeconds = 3.0;
constexpr double kDestroyBoundSeconds = 10.0;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The common child: join the group, run one checked batch, leave.
void join_and_run_batch(RankContext& ctx, const arfCommConfig_t& config,
                        const std::vector<CallSpec>& specs, uint64_t seed) {
  if (!init_device(ctx)) return;
  const arfComm_t comm = init_comm(ctx, config);
  if (comm == nullptr) return;
  if (const cudaStream_t stream = make_stream(ctx); stream != nullptr) {
    run_checked_batch(ctx, comm, stream, config.dtype, specs, seed);
    cudaStreamDestroy(stream);
  }
  destroy_comm(ctx, comm);
}

// ---- a. correctness --------------------------------------------------------------------------

struct CorrectnessCase {
  const char* tag;
  arfPattern_t pattern;
  arfDataType_t dtype;
  bool gamma_fp32;
  int world;
};

// Every algorithm at every token count; tokens change with every call and algorithms with every
// call, so consecutive calls differ in shape and protocol (Lamport epochs, barrier flags).
// The allreduce case adds flat arfAllReduce calls between them.
std::vector<CallSpec> correctness_specs(const CorrectnessCase& c) {
  const int64_t tokens[] = {1, 5, 64, 257};
  const arfAlgorithm_t algorithms[] = {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                       arfAlgoTwoshot, arfAlgoUnfused};
  std::vector<CallSpec> specs;
  for (int64_t t : tokens) {
    for (arfAlgorithm_t a : algorithms) {
      CallSpec s;
      s.pattern = c.pattern;
      s.algorithm = a;
      s.num_tokens = t;
      s.hidden = static_cast<int64_t>(kMaxHidden);
      s.gamma_fp32 = c.gamma_fp32;
      specs.push_back(s);
    }
    if (c.pattern == arfPatternAllReduce && (t == 5 || t == 257)) {
      CallSpec flat = specs.back();
      flat.algorithm = arfAlgoAuto;
      flat.flat = true;
      specs.push_back(flat);
    }
  }
  return specs;
}

// gtest prints parameters in --gtest_list_tests and failure headers; bytes would say nothing.
void PrintTo(const CorrectnessCase& c, std::ostream* os) {
  *os << c.tag << " world " << c.world;
}

class Correctness : public ::testing::TestWithParam<CorrectnessCase> {};

TEST_P(Correctness, BackToBackCallsMatchTheReferenceOnEveryRank) {
  const CorrectnessCase c = GetParam();
  const std::vector<CallSpec> specs = correctness_specs(c);
  const uint64_t seed = test_seed();
  const auto results = run_processes(
      test_name(), one_group(c.world),
      [&](RankContext& ctx) {
        join_and_run_batch(ctx, ipc_config(ctx, c.dtype), specs, seed);
      },
      kBatchDeadlineSeconds);
  expect_all_passed(results);
  // Every call publishes its plan (flat calls excepted) and at least one output.
  expect_identical_hashes(results, specs.size());
}

INSTANTIATE_TEST_SUITE_P(
    Ipc, Correctness,
    ::testing::Values(
        CorrectnessCase{"AllReduce_bf16", arfPatternAllReduce, arfBFloat16, false, 2},
        CorrectnessCase{"AllReduce_bf16", arfPatternAllReduce, arfBFloat16, false, 4},
        CorrectnessCase{"ResidualRmsNorm_bf16", arfPatternResidualRmsNorm, arfBFloat16, false, 2},
        CorrectnessCase{"ResidualRmsNorm_bf16", arfPatternResidualRmsNorm, arfBFloat16, false, 4},
        CorrectnessCase{"ResidualRmsNorm_bf16_gamma_fp32", arfPatternResidualRmsNorm, arfBFloat16,
                        true, 2},
        CorrectnessCase{"ResidualRmsNorm_fp16", arfPatternResidualRmsNorm, arfFloat16, false, 4},
        CorrectnessCase{"Fp8PerToken_bf16", arfPatternResidualRmsNormFp8PerToken, arfBFloat16,
                        false, 2},
        CorrectnessCase{"Fp8PerToken_bf16", arfPatternResidualRmsNormFp8PerToken, arfBFloat16,
                        false, 4}),
    [](const auto& info) {
      return std::string(info.param.tag) + "_ws" + std::to_string(info.param.world);
    });

// ---- b. rendezvous isolation -----------------------------------------------------------------

TEST(IpcRendezvous, TwoGroupsWithDifferentIdsStayApart) {
  const std::vector<RankSlot> slots = groups(2, 2);
  ASSERT_EQ(slots.size(), 4u);
  ASSERT_NE(std::memcmp(slots[0].id.internal, slots[2].id.internal, 16), 0) << "ids must differ";
  // Lamport (pushes into peers' buffers) is where a cross-group mix-up would land first.
  std::vector<CallSpec> specs;
  const arfAlgorithm_t algorithms[] = {arfAlgoOneshotLamport, arfAlgoOneshotPull, arfAlgoTwoshot,
                                       arfAlgoAuto};
  for (arfAlgorithm_t a : algorithms) {
    for (int64_t t : {5, 64}) {
      CallSpec s;
      s.algorithm = a;
      s.num_tokens = t;
      specs.push_back(s);
    }
  }
  const uint64_t seed = test_seed();
  // Each group draws its own data: a rank that read the other group's buffers fails its check.
  const auto results = run_processes(
      test_name(), slots,
      [&](RankContext& ctx) {
        join_and_run_batch(ctx, ipc_config(ctx, arfBFloat16), specs, mix_seed(seed, ctx.group()));
      },
      kBatchDeadlineSeconds);
  expect_all_passed(results);
  expect_identical_hashes(results, specs.size());
}

// ---- c. a rank that never joins --------------------------------------------------------------

TEST(IpcInit, RankThatNeverJoinsTimesOutNamingIt) {
  const std::vector<RankSlot> slots = one_group(2);
  const auto results = run_processes(
      test_name(), {slots[0]},  // rank 1 never starts
      [&](RankContext& ctx) {
        if (!init_device(ctx)) return;
        arfCommConfig_t config = ipc_config(ctx, arfBFloat16);
        config.init_timeout_seconds = kShortInitTimeoutSeconds;
        arfComm_t comm = nullptr;
        const Clock::time_point start = Clock::now();
        const arfStatus_t st = arfCommInitRank(&comm, &config);
        const double elapsed = seconds_since(start);
        const std::string message = arfGetLastErrorString();
        ctx.note("arfCommInitRank: " + std::string(arfGetStatusString(st)) + " after " +
                 fmt_seconds(elapsed) + ": " + message);
        if (st != arfTimeout) {
          ctx.fail("expected arfTimeout, got " + std::string(arfGetStatusString(st)));
        }
        if (comm != nullptr) {
          ctx.fail("a failed arfCommInitRank must leave *comm NULL");
          arfCommDestroy(comm);
        }
        if (!names_number(message, "rank", 1)) {
          ctx.fail("the error does not name rank 1, the one that never joined: " + message);
        }
        if (elapsed < 0.8 * kShortInitTimeoutSeconds) {
          ctx.fail("gave up after " + fmt_seconds(elapsed) + ", before the " +
                   fmt_seconds(kShortInitTimeoutSeconds) + " bound");
        }
        if (elapsed > kShortInitTimeoutSeconds + kBoundSlackSeconds) {
          ctx.fail("took " + fmt_seconds(elapsed) + ": init_timeout_seconds " +
                   fmt_seconds(kShortInitTimeoutSeconds) + " was not honoured");
        }
      },
      kShortDeadlineSeconds);
  expect_all_passed(results);
}

// ---- d. a rank that exits right after init ---------------------------------------------------

// Rank 0's side: one call that its peer never joins.
void call_into_a_dead_peer(RankContext& ctx, arfComm_t comm, uint64_t seed) {
  const cudaStream_t stream = make_stream(ctx);
  if (stream == nullptr) return;
  CallSpec spec;
  spec.num_tokens = 16;
  const CallData data = make_call_data(spec, ctx.world(), arfBFloat16, seed);
  const auto buffers = CallBuffers::create(ctx, spec, arfBFloat16);
  if (buffers == nullptr || !buffers->upload(ctx, data, stream) ||
      !cuda_ok(ctx, cudaStreamSynchronize(stream), "upload")) {
    return;
  }
  const Clock::time_point start = Clock::now();
  const arfStatus_t launched = buffers->launch(comm, stream);
  const std::string launch_message = arfGetLastErrorString();
  // The kernel must give up at its bound and exit cleanly (a trap would kill the context).
  cuda_ok(ctx, cudaStreamSynchronize(stream), "synchronize after the call into a dead peer");
  const double elapsed = seconds_since(start);
  const arfStatus_t async = arfCommGetAsyncError(comm);
  const std::string message = launched == arfSuccess ? arfGetLastErrorString() : launch_message;
  ctx.note("call: " + std::string(arfGetStatusString(launched)) + ", async error: " +
           arfGetStatusString(async) + " after " + fmt_seconds(elapsed) + ": " + message);
  // Either the kernel's bounded wait expired (async), or the call itself saw the timeout.
  const bool timed_out = launched == arfTimeout || (launched == arfSuccess && async == arfTimeout);
  if (!timed_out) {
    ctx.fail("expected arfTimeout from the call or arfCommGetAsyncError; got call " +
             std::string(arfGetStatusString(launched)) + ", async " + arfGetStatusString(async) +
             ": " + message);
  } else if (!names_number(message, "peer", 1)) {
    ctx.fail("the timeout does not name peer 1: " + message);
  }
  if (elapsed > kShortDeviceTimeoutSeconds + kBoundSlackSeconds) {
    ctx.fail("the call took " + fmt_seconds(elapsed) + " to give up (timeout_seconds " +
             fmt_seconds(kShortDeviceTimeoutSeconds) + ")");
  }
  if (const arfStatus_t later = buffers->launch(comm, stream); later != arfCommFailed) {
    ctx.fail("a call after the failure must be refused with arfCommFailed, got " +
             status_text(later));
  }
  cuda_ok(ctx, cudaStreamSynchronize(stream), "synchronize after the refused call");
  cudaStreamDestroy(stream);
}

// The failure scenarios' communicator: bf16, device waits bounded by kShortDeviceTimeoutSeconds.
arfComm_t init_short_timeout_comm(RankContext& ctx) {
  if (!init_device(ctx)) return nullptr;
  arfCommConfig_t config = ipc_config(ctx, arfBFloat16);
  config.timeout_seconds = kShortDeviceTimeoutSeconds;
  return init_comm(ctx, config);
}

TEST(IpcFailure, PeerThatExitsAfterInitTimesOutTheCall) {
  const uint64_t seed = test_seed();
  const auto results = run_processes(
      test_name(), one_group(2),
      [&](RankContext& ctx) {
        // Creation succeeds on every rank or on none (arfusion.h), however soon rank 1 leaves.
        const arfComm_t comm = init_short_timeout_comm(ctx);
        if (comm == nullptr) return;
        if (ctx.rank() == 1) {
          ctx.note("leaving without a call or arfCommDestroy");
          ctx.exit_now();
        }
        call_into_a_dead_peer(ctx, comm, seed);
        const Clock::time_point start = Clock::now();
        const arfStatus_t destroyed = arfCommDestroy(comm);
        const double elapsed = seconds_since(start);
        if (destroyed != arfSuccess && destroyed != arfCommFailed && destroyed != arfTimeout) {
          ctx.fail("arfCommDestroy of the failed communicator: " + status_text(destroyed));
        }
        if (elapsed > kDestroyBoundSeconds) {
          ctx.fail("arfCommDestroy took " + fmt_seconds(elapsed) + " with a dead peer");
        }
      },
      kShortDeadlineSeconds);
  expect_all_passed(results);
}

// ---- d2. a rank that issues a different call ---------------------------------------------------

// Rank 1 calls with 17 tokens where rank 0 called with 16: the shared call log
// (src/transport/shared_call_log.h) refuses rank 1's call before it launches, naming both ranks;
// rank 0, already launched, gives up at its bounded wait naming peer 1 (call_into_a_dead_peer).
TEST(IpcFailure, MismatchedCallIsRefusedBeforeLaunch) {
  const uint64_t seed = test_seed();
  const auto results = run_processes(
      test_name(), one_group(2),
      [&](RankContext& ctx) {
        const arfComm_t comm = init_short_timeout_comm(ctx);
        if (comm == nullptr) return;
        if (ctx.rank() == 0) {
          call_into_a_dead_peer(ctx, comm, seed);
        } else {
          // Rank 0 publishes its call first, so rank 1 is the one that compares.
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          const cudaStream_t stream = make_stream(ctx);
          if (stream == nullptr) return;
          CallSpec spec;
          spec.num_tokens = 17;
          const CallData data = make_call_data(spec, ctx.world(), arfBFloat16, seed);
          const auto buffers = CallBuffers::create(ctx, spec, arfBFloat16);
          if (buffers == nullptr || !buffers->upload(ctx, data, stream)) return;
          const arfStatus_t st = buffers->launch(comm, stream);
          const std::string message = arfGetLastErrorString();
          ctx.note("mismatched call: " + std::string(arfGetStatusString(st)) + ": " + message);
          if (st != arfInvalidArgument || message.find("rank 1 issued") == std::string::npos ||
              message.find("but rank 0 issued") == std::string::npos) {
            ctx.fail("expected arfInvalidArgument naming ranks 1 and 0, got " + status_text(st));
          }
          if (const arfStatus_t later = buffers->launch(comm, stream); later != arfCommFailed) {
            ctx.fail("after the mismatch the communicator must refuse with arfCommFailed, got " +
                     status_text(later));
          }
          cuda_ok(ctx, cudaStreamSynchronize(stream), "synchronize");
          cudaStreamDestroy(stream);
        }
        (void)arfCommDestroy(comm);
      },
      kShortDeadlineSeconds);
  expect_all_passed(results);
}

// ---- e. mismatched configuration -------------------------------------------------------------

TEST(IpcInit, MismatchedCapacityFailsEveryRankAtOnce) {
  constexpr double kInitTimeout = 20.0;
  const auto results = run_processes(
      test_name(), one_group(2),
      [&](RankContext& ctx) {
        if (!init_device(ctx)) return;
        arfCommConfig_t config = ipc_config(ctx, arfBFloat16);
        config.init_timeout_seconds = kInitTimeout;
        if (ctx.rank() == 1) config.max_tokens = kMaxTokens / 2;
        arfComm_t comm = nullptr;
        const Clock::time_point start = Clock::now();
        const arfStatus_t st = arfCommInitRank(&comm, &config);
        const double elapsed = seconds_since(start);
        const std::string message = arfGetLastErrorString();
        ctx.note("arfCommInitRank (max_tokens " + std::to_string(config.max_tokens) + "): " +
                 arfGetStatusString(st) + " after " + fmt_seconds(elapsed) + ": " + message);
        if (st != arfInvalidArgument) {
          ctx.fail("expected arfInvalidArgument, got " + std::string(arfGetStatusString(st)));
        }
        if (comm != nullptr) {
          ctx.fail("a failed arfCommInitRank must leave *comm NULL");
          arfCommDestroy(comm);
        }
        if (message.find("max_tokens") == std::string::npos) {
          ctx.fail("the error does not say what differs (max_tokens): " + message);
        }
        // Found by comparing, not by waiting: far below the init timeout.
        if (elapsed > kInitTimeout / 2) {
          ctx.fail("took " + fmt_seconds(elapsed) + ": the mismatch was waited out");
        }
      },
      kShortDeadlineSeconds);
  expect_all_passed(results);
}

// ---- g. arfCommConfigFromEnv -----------------------------------------------------------------

// arfCommConfigFromEnv must refuse with arfInvalidArgument naming `variable`.
void expect_env_refused(RankContext& ctx, const char* variable, const char* why) {
  arfCommConfig_t config;
  arfCommConfigInit(&config);
  const arfStatus_t st = arfCommConfigFromEnv(&config);
  const std::string message = arfGetLastErrorString();
  if (st != arfInvalidArgument || message.find(variable) == std::string::npos) {
    ctx.fail(std::string("arfCommConfigFromEnv with ") + why + ": expected arfInvalidArgument " +
             "naming " + variable + ", got " + arfGetStatusString(st) + ": " + message);
  }
}

void env_rank(RankContext& ctx, const std::string& id_text, const std::vector<CallSpec>& specs,
              uint64_t seed) {
  const std::string rank = std::to_string(ctx.rank());
  ::setenv("ARF_WORLD_SIZE", std::to_string(ctx.world()).c_str(), 1);
  ::setenv("ARF_DEVICE", std::to_string(ctx.device()).c_str(), 1);
  ::setenv("ARF_RENDEZVOUS_ID", id_text.c_str(), 1);
  ::unsetenv("ARF_RANK");
  expect_env_refused(ctx, "ARF_RANK", "ARF_RANK unset");
  ::setenv("ARF_RANK", rank.c_str(), 1);
  ::setenv("ARF_WORLD_SIZE", "two", 1);
  expect_env_refused(ctx, "ARF_WORLD_SIZE", "ARF_WORLD_SIZE=two");
  ::setenv("ARF_WORLD_SIZE", std::to_string(ctx.world()).c_str(), 1);

  arfCommConfig_t config;
  arfCommConfigInit(&config);
  config.max_tokens = kMaxTokens;
  config.max_hidden = kMaxHidden;
  config.timeout_seconds = kDeviceTimeoutSeconds;
  config.init_timeout_seconds = kInitTimeoutSeconds;
  if (const arfStatus_t st = arfCommConfigFromEnv(&config); st != arfSuccess) {
    ctx.fail("arfCommConfigFromEnv: " + status_text(st));
    return;
  }
  const bool same_id = std::memcmp(config.id.internal, ctx.slot().id.internal, 16) == 0;
  if (config.transport != arfTransportIpc || config.rank != ctx.rank() ||
      config.world_size != ctx.world() || config.device != ctx.device() || !same_id) {
    // Joining with a wrong config would only add the peer's rendezvous timeout to the log.
    ctx.fail("arfCommConfigFromEnv filled transport " + std::to_string(config.transport) +
             ", rank " + std::to_string(config.rank) + ", world " +
             std::to_string(config.world_size) + ", device " + std::to_string(config.device) +
             " (id " + (same_id ? "matches)" : "differs)"));
    return;
  }
  if (config.max_tokens != kMaxTokens || config.max_hidden != kMaxHidden ||
      config.timeout_seconds != kDeviceTimeoutSeconds) {
    ctx.fail("arfCommConfigFromEnv changed the capacity or timeouts");
  }
  join_and_run_batch(ctx, config, specs, seed);
}

TEST(IpcEnv, CommunicatorFromTheEnvironment) {
  // The id travels as text, as arfusion-run hands it over; the parent makes it without CUDA.
  const std::vector<RankSlot> slots = one_group(2);
  char text[ARF_UNIQUE_ID_STRING_BYTES] = {};
  ASSERT_EQ(arfUniqueIdToString(&slots[0].id, text), arfSuccess) << arfGetLastErrorString();
  ASSERT_EQ(std::strlen(text), 32u) << text;
  arfUniqueId parsed;
  std::memset(&parsed, 0xAB, sizeof(parsed));
  ASSERT_EQ(arfUniqueIdFromString(text, &parsed), arfSuccess) << arfGetLastErrorString();
  EXPECT_EQ(std::memcmp(parsed.internal, slots[0].id.internal, 16), 0) << "round trip of " << text;
  for (size_t i = 16; i < sizeof(parsed.internal); ++i) {
    EXPECT_EQ(parsed.internal[i], 0) << "byte " << i << " of a parsed id must be zero";
  }
  EXPECT_EQ(arfUniqueIdFromString("not-an-id", &parsed), arfInvalidArgument);

  std::vector<CallSpec> specs(4);
  specs[0].num_tokens = 1;
  specs[1].num_tokens = 64;
  specs[2].pattern = arfPatternAllReduce;
  specs[2].num_tokens = 5;
  specs[3].pattern = arfPatternResidualRmsNormFp8PerToken;
  specs[3].num_tokens = 17;
  const uint64_t seed = test_seed();
  const std::string id_text = text;
  const auto results = run_processes(
      test_name(), slots,
      [&](RankContext& ctx) { env_rank(ctx, id_text, specs, seed); }, kBatchDeadlineSeconds);
  expect_all_passed(results);
  expect_identical_hashes(results, specs.size());
}

}  // namespace
}  // namespace arf::ipc_test
