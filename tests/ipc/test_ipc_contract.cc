// Promises of arfusion.h across processes (ipc transport), each rank a forked process
// (ipc_test_util.h):
//
//   IpcRefusal        world 2 and 4: three good calls, then rank 1 refuses call 3 (a misaligned
//                     input) that the others issue. The refusal reaches every process through the
//                     shared call log (shared_call_log.h): every rank's stream drains within
//                     1 s of the refused call against a 20 s bound (peer kernels released),
//                     every rank then reports arfCommFailed naming rank 1 and the reason, and the
//                     three good calls are exact and bitwise equal across ranks. Two orders: the
//                     refusing rank arrives last (peer kernels already wait) or first.
//   IpcNcclTeardown   two GPUs, NCCL: rank 0 issues an nccl-algorithm call that rank 1 never
//                     joins, then destroys its communicator. NCCL's kernel waits for its peer
//                     without a bound, so destroy must shut NCCL down before it synchronizes the
//                     device: it returns (arfTimeout: finalize did not finish, NCCL aborted)
//                     within timeout_seconds + a few seconds instead of hanging.
//
// Devices: ARF_TEST_DEVICES as everywhere in tests/ipc.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ipc/fault_util.h"
#include "ipc/ipc_rank.h"
#include "ipc/ipc_test_util.h"

namespace arf::ipc_test {
namespace {

constexpr size_t kGoodCalls = 3;
constexpr int kRefuser = 1;
constexpr double kDrainLimitSeconds = 1.0;

struct RefusalParam {
  int world;
  bool refuser_last;
};

void refusal_rank(RankContext& ctx, const SharedBoard& board, bool refuser_last, uint64_t seed) {
  default_environment();
  if (!init_device(ctx)) return;
  arfCommConfig_t config = ipc_config(ctx, arfBFloat16);
  config.timeout_seconds = 20.0;
  const arfComm_t comm = init_comm(ctx, config);
  const cudaStream_t stream = make_stream(ctx);
  if (comm == nullptr || stream == nullptr) return;
  Batch batch;
  for (size_t c = 0; c <= kGoodCalls; ++c) {
    batch.specs.push_back(spec_of(arfPatternResidualRmsNorm,
                                  c % 2 == 0 ? arfAlgoOneshotPull : arfAlgoTwoshot,
                                  c == kGoodCalls ? 200 : 9 + 30 * static_cast<int64_t>(c)));
  }
  if (!prepare_batch(ctx, comm, stream, seed, "", &batch)) return destroy_comm(ctx, comm);
  if (!enqueue(ctx, comm, stream, batch, 0, kGoodCalls)) return destroy_comm(ctx, comm);
  if (!cuda_ok(ctx, cudaStreamSynchronize(stream), "good calls")) return;
  if (!board.arrive_and_wait(ctx, 0, ctx.world(), kBoardSeconds, "good calls done")) return;
  const bool refuser = ctx.rank() == kRefuser;
  if (refuser == refuser_last) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const Clock::time_point start = Clock::now();
  arfStatus_t st;
  if (refuser) {
    arfFusedArgs_t args = batch.buffers[kGoodCalls]->args();
    args.input = static_cast<const char*>(args.input) + 2;  // not 16-byte aligned
    st = arfFusedAllReduce(comm, &args, stream);
  } else {
    st = batch.buffers[kGoodCalls]->launch(comm, stream);
  }
  const std::string message = arfGetLastErrorString();
  if (!cuda_ok(ctx, cudaStreamSynchronize(stream), "the refused call")) return;
  const double drained = seconds_since(start);
  ctx.note("call 3 returned " + status_text(st) + "; stream drained after " +
           fmt_seconds(drained));
  if (drained > kDrainLimitSeconds) {
    ctx.fail("the stream took " + fmt_seconds(drained) + " to drain after the refused call (" +
             message + "): a peer kernel waited instead of being released");
  }
  if (refuser && st != arfInvalidArgument) ctx.fail("the refusing rank got " + status_text(st));
  if (!refuser && st != arfSuccess && st != arfCommFailed) ctx.fail("got " + status_text(st));
  if (!board.arrive_and_wait(ctx, 1, ctx.world(), kBoardSeconds, "refused call done")) return;
  const arfStatus_t async = arfCommGetAsyncError(comm);
  const std::string async_message = arfGetLastErrorString();
  if (async != arfCommFailed || !names_number(async_message, "rank", kRefuser) ||
      async_message.find("not 16-byte aligned") == std::string::npos) {
    ctx.fail("arfCommGetAsyncError after the refusal: " + status_text(async) +
             " (expected arfCommFailed naming rank 1 and the reason)");
  }
  uint64_t lost = 0;
  arfCommGetFirstLostCall(comm, &lost);
  if (lost != kGoodCalls) ctx.fail("first lost call " + std::to_string(lost) + ", expected 3");
  if (batch.buffers[0]->launch(comm, stream) != arfCommFailed) {
    ctx.fail("a call after the failure was not refused with arfCommFailed");
  }
  check_batch(ctx, ctx, stream, batch, 0, kGoodCalls, "");
  destroy_comm(ctx, comm);
  cudaStreamDestroy(stream);
}

class IpcRefusal : public ::testing::TestWithParam<RefusalParam> {};

TEST_P(IpcRefusal, OneRankRefusingFailsEveryProcessAtOnce) {
  const RefusalParam param = GetParam();
  const auto board = SharedBoard::create();
  ASSERT_NE(board, nullptr);
  const uint64_t seed = test_seed();
  const auto results = run_processes(
      test_name(), one_group(param.world),
      [&](RankContext& ctx) { refusal_rank(ctx, *board, param.refuser_last, seed); },
      kShortDeadlineSeconds);
  expect_all_passed(results);
  expect_identical_hashes(results, kGoodCalls);
}

INSTANTIATE_TEST_SUITE_P(Contract, IpcRefusal,
                         ::testing::Values(RefusalParam{2, true}, RefusalParam{2, false},
                                           RefusalParam{4, true}, RefusalParam{4, false}),
                         [](const auto& info) {
                           return "world" + std::to_string(info.param.world) +
                                  (info.param.refuser_last ? "_RefuserLast" : "_RefuserFirst");
                         });

constexpr double kTeardownTimeoutSeconds = 3.0;
constexpr double kTeardownSlackSeconds = 10.0;

void teardown_rank(RankContext& ctx, const SharedBoard& board) {
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);  // and ARF_NCCL left alone: this test needs NCCL
  if (!init_device(ctx)) return;
  arfCommConfig_t config = ipc_config(ctx, arfBFloat16);
  config.timeout_seconds = kTeardownTimeoutSeconds;
  const arfComm_t comm = init_comm(ctx, config);
  const cudaStream_t stream = make_stream(ctx);
  if (comm == nullptr || stream == nullptr) return;
  arfPlanFacts_t facts;
  arfPlanFactsInit(&facts);
  arfCommGetPlanFacts(comm, &facts);
  if (!facts.nccl) {
    ctx.note("no NCCL communicator (NCCL missing, or ranks share a GPU): nothing to test");
    return destroy_comm(ctx, comm);
  }
  if (ctx.rank() == 0) {
    const CallSpec spec = spec_of(arfPatternResidualRmsNorm, arfAlgoNccl, 64);
    std::unique_ptr<CallBuffers> buffers = CallBuffers::create(ctx, spec, arfBFloat16);
    const CallData data = make_call_data(spec, ctx.world(), arfBFloat16, 1);
    if (buffers == nullptr || !buffers->upload(ctx, data, stream)) return;
    if (!cuda_ok(ctx, cudaStreamSynchronize(stream), "upload")) return;
    if (const arfStatus_t st = buffers->launch(comm, stream); st != arfSuccess) {
      return ctx.fail("the nccl call: " + status_text(st));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // NCCL's kernel now waits
    const Clock::time_point start = Clock::now();
    const arfStatus_t destroyed = arfCommDestroy(comm);
    const double took = seconds_since(start);
    ctx.note("arfCommDestroy with the nccl call in flight: " + status_text(destroyed) + " after " +
             fmt_seconds(took));
    if (took > kTeardownTimeoutSeconds + kTeardownSlackSeconds) {
      ctx.fail("arfCommDestroy took " + fmt_seconds(took));
    }
    if (destroyed != arfTimeout && destroyed != arfSuccess) {
      ctx.fail("arfCommDestroy: " + status_text(destroyed));
    }
    board.word(2).store(1);
    buffers.reset();
  } else {
    // Rank 1 never joins the call; it stays alive until rank 0 is done, then leaves.
    board.wait_at_least(ctx, 2, 1, kBoardSeconds, "rank 0's destroy");
    (void)arfCommDestroy(comm);
  }
  cudaStreamDestroy(stream);
}

TEST(IpcNcclTeardown, DestroyWithAnNcclCallWhosePeerNeverJoinsIsBounded) {
  if (listed_devices().size() < 2) GTEST_SKIP() << "needs two GPUs (ARF_TEST_DEVICES=0,1)";
  const auto board = SharedBoard::create();
  ASSERT_NE(board, nullptr);
  const auto results = run_processes(
      test_name(), one_group(2), [&](RankContext& ctx) { teardown_rank(ctx, *board); },
      kShortDeadlineSeconds);
  expect_all_passed(results);
}

}  // namespace
}  // namespace arf::ipc_test
