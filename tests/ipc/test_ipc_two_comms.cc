// Two communicators of the same ranks (attention-TP and MoE-TP) used in turn from two streams
// ordered by events. Every test forks its ranks (ipc_test_util.h: the parent never initialises
// CUDA; children die with it, PR_SET_PDEATHSIG; every wait is bounded and the parent SIGKILLs what
// outlives its deadline).
//
//   IpcTwoCommunicators 50 calls (world 2 and 4, ipc), every output checked against the reference
//                      and bitwise across ranks; neither communicator reports an error or a lost
//                      call afterwards.
//
// Devices: ARF_TEST_DEVICES as everywhere in tests/ipc (rank r on entry r % n), default all on
// device 0. NCCL: the children set ARF_NCCL=0 unless ARF_NCCL is already set
// (default_environment).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ipc/fault_util.h"
#include "ipc/ipc_rank.h"
#include "ipc/ipc_test_util.h"

namespace arf::ipc_test {
namespace {

constexpr int kTwoCommCalls = 50;
// B (the "MoE" group) has its own, smaller capacity: a different workspace layout than A's.
constexpr size_t kCommBMaxTokens = 256;

// Call c runs on A (even c, stream a) or B (odd c, stream b): shapes, patterns and algorithms
// change with every call, so consecutive calls on each communicator differ in protocol too.
std::vector<CallSpec> two_comm_specs() {
  const arfAlgorithm_t algorithms[] = {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                       arfAlgoTwoshot, arfAlgoUnfused};
  const int64_t tokens[] = {1, 7, 64, 33, 130, 5, 256, 17, 90};
  std::vector<CallSpec> specs;
  for (int c = 0; c < kTwoCommCalls; ++c) {
    CallSpec s;
    s.algorithm = algorithms[(c / 2) % 5];  // A and B both see every algorithm
    s.num_tokens = tokens[c % 9];
    s.hidden = c % 4 == 3 ? 2048 : static_cast<int64_t>(kMaxHidden);
    s.pattern = c % 3 == 2   ? arfPatternAllReduce
                : c % 7 == 4 ? arfPatternResidualRmsNormFp8PerToken
                             : arfPatternResidualRmsNorm;
    s.gamma_fp32 = s.pattern == arfPatternResidualRmsNorm && c % 5 == 1;
    if (c % 2 == 0 && c % 10 == 6) s.num_tokens = 400;  // beyond B's capacity: A only
    specs.push_back(s);
  }
  return specs;
}

void two_comm_rank(RankContext& ctx, const arfUniqueId& id_b, uint64_t seed) {
  default_environment();
  if (!init_device(ctx)) return;
  const arfCommConfig_t config_a = ipc_config(ctx, arfBFloat16);
  arfCommConfig_t config_b = config_a;
  config_b.id = id_b;
  config_b.max_tokens = kCommBMaxTokens;
  // Every rank creates A, then B (creation is collective: the same order everywhere).
  const arfComm_t a = init_comm(ctx, config_a);
  if (a == nullptr) return;
  const arfComm_t b = init_comm(ctx, config_b);
  const cudaStream_t stream_a = make_stream(ctx);
  const cudaStream_t stream_b = make_stream(ctx);
  cudaEvent_t done_a = nullptr, done_b = nullptr;
  bool ok = b != nullptr && stream_a != nullptr && stream_b != nullptr &&
            cuda_ok(ctx, cudaEventCreateWithFlags(&done_a, cudaEventDisableTiming), "event") &&
            cuda_ok(ctx, cudaEventCreateWithFlags(&done_b, cudaEventDisableTiming), "event");
  Batch batch;
  batch.specs = two_comm_specs();
  if (ok) {
    // Uploads on stream a, synchronized; plans checked against the call's own communicator.
    for (size_t c = 0; c < batch.specs.size() && ok; ++c) {
      batch.data.push_back(
          make_call_data(batch.specs[c], ctx.world(), arfBFloat16, mix_seed(seed, c)));
      batch.buffers.push_back(CallBuffers::create(ctx, batch.specs[c], arfBFloat16));
      ok = batch.buffers.back() != nullptr &&
           batch.buffers.back()->upload(ctx, batch.data[c], stream_a);
      if (ok) {
        check_and_publish_plan(ctx, c % 2 == 0 ? a : b, *batch.buffers[c], batch.specs[c],
                               "call " + std::to_string(c) + " plan");
      }
    }
    ok = ok && cuda_ok(ctx, cudaStreamSynchronize(stream_a), "synchronize the uploads");
  }
  const Clock::time_point start = Clock::now();
  for (size_t c = 0; c < batch.specs.size() && ok; ++c) {
    const bool on_a = c % 2 == 0;
    const cudaStream_t s = on_a ? stream_a : stream_b;
    // A's call c waits for B's call c-1 and the other way round: in turn, never concurrent.
    ok = cuda_ok(ctx, cudaStreamWaitEvent(s, on_a ? done_b : done_a, 0), "cudaStreamWaitEvent");
    if (!ok) break;
    if (const arfStatus_t st = batch.buffers[c]->launch(on_a ? a : b, s); st != arfSuccess) {
      ctx.fail("call " + std::to_string(c) + " on " + (on_a ? "A" : "B") + " [" +
               batch.specs[c].label() + "]: " + status_text(st));
      ok = false;
      break;
    }
    ok = batch.buffers[c]->clobber_inputs(ctx, s) &&
         cuda_ok(ctx, cudaEventRecord(on_a ? done_a : done_b, s), "cudaEventRecord");
  }
  const bool synced = stream_a != nullptr && stream_b != nullptr &&
                      cuda_ok(ctx, cudaStreamSynchronize(stream_a), "synchronize stream a") &&
                      cuda_ok(ctx, cudaStreamSynchronize(stream_b), "synchronize stream b");
  if (ok && synced) {
    ctx.note(std::to_string(kTwoCommCalls) + " calls in turn in " +
             fmt_seconds(seconds_since(start)));
    for (const auto& [comm, name] : {std::pair{a, "A"}, std::pair{b, "B"}}) {
      // Catches one communicator's kernels timing out on (or reading) the other's state.
      if (const arfStatus_t async = arfCommGetAsyncError(comm); async != arfSuccess) {
        ctx.fail(std::string("arfCommGetAsyncError(") + name + "): " + status_text(async));
        ok = false;
      }
      uint64_t lost = 0;
      if (arfCommGetFirstLostCall(comm, &lost) != arfSuccess || lost != UINT64_MAX) {
        ctx.fail(std::string("arfCommGetFirstLostCall(") + name + ") of a healthy communicator: " +
                 std::to_string(lost) + " (expected UINT64_MAX)");
      }
    }
    if (ok) {
      for (size_t c = 0; c < batch.specs.size(); ++c) {
        RankOutputs got;
        if (!batch.buffers[c]->download(ctx, c % 2 == 0 ? stream_a : stream_b, &got)) break;
        if (const std::string e = check_outputs(batch.specs[c], arfBFloat16, batch.data[c], got);
            !e.empty()) {
          ctx.fail("call " + std::to_string(c) + " on " + (c % 2 == 0 ? "A" : "B") + " [" +
                   batch.specs[c].label() + "]:\n" + e);
        }
        publish_outputs(ctx, "call " + std::to_string(c) + " ", c, got);
      }
    }
  }
  batch.buffers.clear();
  if (done_a != nullptr) cudaEventDestroy(done_a);
  if (done_b != nullptr) cudaEventDestroy(done_b);
  if (stream_a != nullptr) cudaStreamDestroy(stream_a);
  if (stream_b != nullptr) cudaStreamDestroy(stream_b);
  if (b != nullptr) destroy_comm(ctx, b);
  destroy_comm(ctx, a);
}

class IpcTwoCommunicators : public ::testing::TestWithParam<int> {};

TEST_P(IpcTwoCommunicators, InTurnFromTwoStreams) {
  const int world = GetParam();
  arfUniqueId id_b;
  ASSERT_EQ(arfGetUniqueId(&id_b), arfSuccess);
  const uint64_t seed = test_seed();
  const Clock::time_point start = Clock::now();
  const auto results = run_processes(
      test_name(), one_group(world), [&](RankContext& ctx) { two_comm_rank(ctx, id_b, seed); },
      kBatchDeadlineSeconds);
  std::printf("IpcTwoCommunicators: world %d, %d calls in turn: %s\n", world, kTwoCommCalls,
              fmt_seconds(seconds_since(start)).c_str());
  expect_all_passed(results);
  // A plan and at least one output per call.
  expect_identical_hashes(results, 2 * kTwoCommCalls);
}

INSTANTIATE_TEST_SUITE_P(Ipc, IpcTwoCommunicators, ::testing::Values(2, 4),
                         [](const auto& info) { return "ws" + std::to_string(info.param); });

}  // namespace
}  // namespace arf::ipc_test
