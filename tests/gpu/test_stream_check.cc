// ARF_DEBUG_CHECKS=1 (arfusion.h, Streams): a call on a second stream while the rank's previous call
// still runs is refused before launch, naming both streams, the communicator keeps working, and a
// switch after the previous call completed is allowed. Without the variable nothing is checked.
#include <gtest/gtest.h>

#include <barrier>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/foreign_kernels.h"
#include "gpu/harness.h"

namespace arf::test {
namespace {

struct StreamCase {
  arfStatus_t first[2] = {arfInternal, arfInternal};
  arfStatus_t refused = arfInternal;
  std::string message;
  arfStatus_t second[2] = {arfInternal, arfInternal};
  arfStatus_t async[2] = {arfInternal, arfInternal};
};

// Rank 0 issues a call on its stream, then a call on `other` while the first still runs: rank 1
// makes its call too (virtual ranks' calls return only once every mate has enqueued theirs:
// arfusion.h), but behind a 300 ms kernel on its stream, so the collective is still in flight on
// the device when rank 0 switches streams. Both ranks then make a second call, rank 0 on `other`.
StreamCase run_case(bool debug_checks) {
  if (debug_checks) setenv("ARF_DEBUG_CHECKS", "1", 1);
  WorldOptions options;
  options.world_size = 2;
  const auto world = World::create(options);
  unsetenv("ARF_DEBUG_CHECKS");
  StreamCase out;
  if (world == nullptr) {
    ADD_FAILURE() << "world creation failed";
    return out;
  }
  CallSpec spec;
  spec.algorithm = arfAlgoOneshotLamport;
  spec.num_tokens = 16;
  const CallData data = make_call_data(spec, 2, world->dtype(), test_seed());
  cudaStream_t other = nullptr;
  cuda_ok(cudaSetDevice(world->device(0)), "set device");
  cuda_ok(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), "second stream");
  std::barrier step(2);
  HangGuard guard(60, "stream check test");
  cuda_ok(preload_foreign_kernels(), "preload");
  world->run_ranks([&](int r) {
    // All allocations precede all launches (a cudaMalloc would wait for a spinning peer kernel).
    CallBuffers a(world->device(r), spec, world->dtype());
    CallBuffers b(world->device(r), spec, world->dtype());
    a.upload(data, r, world->stream(r));
    b.upload(data, r, world->stream(r));
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "upload");
    step.arrive_and_wait();
    if (r == 0) {
      out.first[0] = a.launch(world->comm(0), world->stream(0));  // waits on the device for rank 1
      if (debug_checks) {
        out.refused = b.launch(world->comm(0), other);
        out.message = arfGetLastErrorString();
      }
    } else {
      cuda_ok(launch_whole_sm_kernel(1, 300000000, world->stream(1)), "delay rank 1");
      out.first[1] = a.launch(world->comm(1), world->stream(1));
    }
    cuda_ok(cudaStreamSynchronize(world->stream(r)), "first call");
    step.arrive_and_wait();
    // The previous call has completed: moving to another stream is allowed.
    const cudaStream_t s = r == 0 ? other : world->stream(r);
    out.second[r] = b.launch(world->comm(r), s);
    cuda_ok(cudaStreamSynchronize(s), "second call");
    out.async[r] = arfCommGetAsyncError(world->comm(r));
  });
  cudaStreamDestroy(other);
  return out;
}

TEST(DebugChecks, SecondStreamWhilePreviousCallRunsIsRefused) {
  const StreamCase c = run_case(/*debug_checks=*/true);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(c.first[r], arfSuccess);
    EXPECT_EQ(c.second[r], arfSuccess);
    EXPECT_EQ(c.async[r], arfSuccess) << "the refused call must not disturb the collective";
  }
  EXPECT_EQ(c.refused, arfInvalidArgument) << c.message;
  EXPECT_NE(c.message.find("ARF_DEBUG_CHECKS"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("one stream at a time"), std::string::npos) << c.message;
}

TEST(DebugChecks, OffByDefault) {
  const StreamCase c = run_case(/*debug_checks=*/false);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(c.first[r], arfSuccess);
    EXPECT_EQ(c.second[r], arfSuccess);
    EXPECT_EQ(c.async[r], arfSuccess);
  }
}

}  // namespace
}  // namespace arf::test
