// One rank passes another token count than its peer: the rank that arrives second is refused before
// it launches (arfInvalidArgument naming both ranks' calls, local::CallSignatureLog), the one that
// launched is released at once (arfCommFailed naming the other rank), and both communicators then
// refuse work.
#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <string>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

TEST(CallMismatch, DifferentTokenCountsAreReportedNotHung) {
  WorldOptions options;
  options.world_size = 2;
  options.timeout_seconds = 10.0;  // a release must end the wait, not the bound
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);

  std::vector<CallSpec> specs(2);
  specs[0].num_tokens = 16;
  specs[1].num_tokens = 17;  // rank 1's mistake
  std::vector<arfStatus_t> launched(2), later(2);
  std::vector<std::string> message(2);
  std::vector<double> sync_seconds(2);
  HangGuard guard(60, "call mismatch test");
  std::barrier ready(2);
  world->run_ranks([&](int r) {
    const CallData data = make_call_data(specs[r], world->size(), world->dtype(), test_seed());
    CallBuffers buffers(world->device(r), specs[r], world->dtype());
    buffers.upload(data, r, world->stream(r));
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "upload");
    ready.arrive_and_wait();  // all allocations before any launch
    const auto start = std::chrono::steady_clock::now();
    launched[r] = buffers.launch(world->comm(r), world->stream(r));
    message[r] = arfGetLastErrorString();
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "sync");
    sync_seconds[r] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (void)arfCommGetAsyncError(world->comm(r));
    later[r] = buffers.launch(world->comm(r), world->stream(r));
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "sync after");
  });
  // Whichever rank reached the check second was refused; the other launched and timed out.
  const int refused = launched[0] == arfInvalidArgument ? 0 : 1;
  const int waited = 1 - refused;
  EXPECT_EQ(launched[refused], arfInvalidArgument) << message[refused];
  EXPECT_NE(message[refused].find("every rank must issue the same sequence of calls"),
            std::string::npos)
      << message[refused];
  if (world->device(0) == world->device(1)) {
    // Ranks sharing a GPU: the rank that launched learns from its mate's refusal at once, before
    // returning (it waits for the mate's enqueue, arfusion.h), instead of after the bound.
    EXPECT_EQ(launched[waited], arfCommFailed) << message[waited];
    EXPECT_NE(message[waited].find("peer " + std::to_string(refused)), std::string::npos)
        << message[waited];
    EXPECT_NE(message[waited].find("every rank must issue the same sequence of calls"),
              std::string::npos)
        << message[waited];
    EXPECT_NE(arfCommGetAsyncError(world->comm(waited)), arfSuccess);
  } else {
    // Ranks on their own GPUs: the rank that launched returns at once; its kernel is released by
    // the refused rank (a release kernel behind its earlier calls), and it then reports the
    // mismatch, naming the refused rank, instead of a timeout after the bound.
    EXPECT_EQ(launched[waited], arfSuccess) << message[waited];
    EXPECT_EQ(arfCommGetAsyncError(world->comm(waited)), arfCommFailed) << arfGetLastErrorString();
    const std::string why = arfGetLastErrorString();
    EXPECT_NE(why.find("rank " + std::to_string(refused) + " failed"), std::string::npos) << why;
    EXPECT_NE(why.find("every rank must issue the same sequence of calls"), std::string::npos)
        << why;
  }
  EXPECT_LT(sync_seconds[waited], 1.0) << "the launched call waited instead of being released";
  EXPECT_EQ(later[0], arfCommFailed);
  EXPECT_EQ(later[1], arfCommFailed);
}

}  // namespace
}  // namespace arf::test
