// A call refused on one rank while its peers issue it (arfusion.h, Return value): every mate fails
// at once, with an error naming the refusing rank and its reason, and mates whose kernels already
// wait are released (their call and later ones are reported lost, never corrupted); the calls
// before it complete and are exact on every rank. How long the mates wait is what this measures
// (printed as "refusal: ..."; the target is well under a second, against a 10 s bound).
//   - the refusing rank arrives first (the mates see its refusal before launching) or last (the
//     mates' kernels already spin and must be released);
//   - the same bad call on every rank stays a plain refusal (tests/gpu/test_errors.cc BadCalls).
#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct RefusalCase {
  int world = 2;
  arfAlgorithm_t algorithm = arfAlgoAuto;
  bool refuser_last = true;  // the mates launch first (their kernels wait) or see the refusal first
};

std::string case_name(const RefusalCase& c) {
  return "world" + std::to_string(c.world) + "_" + algorithm_tag(c.algorithm) +
         (c.refuser_last ? "_RefuserLast" : "_RefuserFirst");
}

class Refusal : public ::testing::TestWithParam<RefusalCase> {};

TEST_P(Refusal, OneRankRefusingFailsEveryMateAtOnce) {
  const RefusalCase rc = GetParam();
  constexpr int kGood = 3;          // calls 0..2 complete everywhere
  constexpr int kRefuser = 1;       // refuses call 3 (a misaligned input), the others issue it
  WorldOptions options;
  options.world_size = rc.world;
  options.timeout_seconds = 10.0;  // the bound: a released mate must not get anywhere near it
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  std::vector<CallSpec> specs(kGood + 1);
  for (int c = 0; c <= kGood; ++c) {
    specs[c].algorithm = rc.algorithm;
    specs[c].num_tokens = c == kGood ? 300 : 17 + 40 * c;  // the refused call has a large grid
  }
  const std::vector<CallData> data = make_all_call_data(specs, rc.world, world->dtype(), test_seed());
  std::vector<std::vector<std::unique_ptr<CallBuffers>>> buffers(rc.world);
  std::vector<arfStatus_t> refused_call(rc.world), next_call(rc.world), async(rc.world);
  std::vector<std::string> message(rc.world), async_message(rc.world);
  std::vector<double> call_ms(rc.world), drained_ms(rc.world);
  std::vector<uint64_t> lost(rc.world);
  std::barrier ready(rc.world);
  HangGuard guard(60, "refusal " + case_name(rc));
  world->run_ranks([&](int r) {
    const cudaStream_t s = world->stream(r);
    for (int c = 0; c <= kGood; ++c) {
      buffers[r].push_back(std::make_unique<CallBuffers>(world->device(r), specs[c], world->dtype()));
      buffers[r][c]->upload(data[c], r, s);
    }
    cuda_ok(cudaStreamSynchronize(s), "upload");
    ready.arrive_and_wait();
    for (int c = 0; c < kGood; ++c) {
      EXPECT_EQ(buffers[r][c]->launch(world->comm(r), s), arfSuccess) << "rank " << r << " call " << c;
    }
    cuda_ok(cudaStreamSynchronize(s), "good calls");
    ready.arrive_and_wait();
    const bool refuser = r == kRefuser;
    if (refuser == rc.refuser_last) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const Clock::time_point start = Clock::now();
    if (refuser) {
      arfFusedArgs_t args = buffers[r][kGood]->args();
      args.input = static_cast<const char*>(args.input) + 2;  // not 16-byte aligned
      refused_call[r] = arfFusedAllReduce(world->comm(r), &args, s);
    } else {
      refused_call[r] = buffers[r][kGood]->launch(world->comm(r), s);
    }
    message[r] = arfGetLastErrorString();
    call_ms[r] = ms_since(start);
    cuda_ok(cudaStreamSynchronize(s), "the refused call");
    drained_ms[r] = ms_since(start);
    ready.arrive_and_wait();  // every rank's failure is marked by now
    async[r] = arfCommGetAsyncError(world->comm(r));
    async_message[r] = arfGetLastErrorString();
    next_call[r] = buffers[r][0]->launch(world->comm(r), s);
    cuda_ok(cudaStreamSynchronize(s), "after");
    arfCommGetFirstLostCall(world->comm(r), &lost[r]);
  });
  for (int r = 0; r < rc.world; ++r) {
    std::printf("refusal %s: rank %d%s returned %s after %.2f ms, stream drained after %.2f ms\n",
                case_name(rc).c_str(), r, r == kRefuser ? " (refusing)" : "",
                arfGetStatusString(refused_call[r]), call_ms[r], drained_ms[r]);
  }
  // The calls before the refused one are exact on every rank.
  std::vector<CallSpec> good_specs(specs.begin(), specs.begin() + kGood);
  std::vector<CallData> good_data(data.begin(), data.begin() + kGood);
  std::vector<CallResult> results(kGood, CallResult(rc.world));
  for (int c = 0; c < kGood; ++c) {
    for (int r = 0; r < rc.world; ++r) results[c][r] = buffers[r][c]->download(world->stream(r));
  }
  check_calls(*world, good_specs, good_data, results);
  for (int r = 0; r < rc.world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    if (r == kRefuser) {
      EXPECT_EQ(refused_call[r], arfInvalidArgument) << message[r];
      EXPECT_NE(message[r].find("not 16-byte aligned"), std::string::npos) << message[r];
    } else {
      // At its call (it saw the refusal, or a virtual mate's enqueue wait ended), or released
      // on the device and reported from then on.
      EXPECT_TRUE(refused_call[r] == arfCommFailed || refused_call[r] == arfSuccess) << message[r];
      if (refused_call[r] == arfCommFailed) {
        EXPECT_NE(message[r].find("rank 1"), std::string::npos) << message[r];
        EXPECT_NE(message[r].find("not 16-byte aligned"), std::string::npos) << message[r];
      }
    }
    EXPECT_LT(drained_ms[r], 1000.0) << "a mate waited for the refused call: " << message[r];
    EXPECT_EQ(async[r], arfCommFailed) << async_message[r];
    EXPECT_NE(async_message[r].find("rank 1"), std::string::npos) << async_message[r];
    EXPECT_NE(async_message[r].find("not 16-byte aligned"), std::string::npos) << async_message[r];
    EXPECT_EQ(next_call[r], arfCommFailed);
    EXPECT_EQ(lost[r], static_cast<uint64_t>(kGood)) << "the refused call is the first lost one";
  }
}

std::vector<RefusalCase> refusal_cases() {
  std::vector<RefusalCase> cases;
  for (int world : {2, 4}) {
    for (arfAlgorithm_t a : {arfAlgoOneshotLamport, arfAlgoOneshotPull, arfAlgoTwoshot, arfAlgoUnfused}) {
      for (bool last : {true, false}) cases.push_back({world, a, last});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Contract, Refusal, ::testing::ValuesIn(refusal_cases()),
                         [](const auto& info) { return case_name(info.param); });

}  // namespace
}  // namespace arf::test
