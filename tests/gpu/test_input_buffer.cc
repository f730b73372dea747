// Zero-copy inputs (arfCommGetInputBuffer): a call whose input is the communicator's input buffer
// must give the bits the same call gives with its input elsewhere, whichever ranks use the buffer,
// on every algorithm, with the buffer garbaged right behind each call (a peer still reading it
// after its owner's call returned would read garbage), calls with the input elsewhere (whose
// copy-in overwrites the buffer) interleaved, host skew, shapes changing every call. And the
// forms the header refuses are refused before any launch, on every rank, leaving the
// communicator usable.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

constexpr arfAlgorithm_t kAlgorithms[] = {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                          arfAlgoTwoshot, arfAlgoUnfused};

using AlgoWorld = std::tuple<arfAlgorithm_t, int>;

std::string algo_world_name(const ::testing::TestParamInfo<AlgoWorld>& info) {
  return algorithm_tag(std::get<0>(info.param)) + "_ws" + std::to_string(std::get<1>(info.param));
}

std::unique_ptr<World> make_world(int world_size) {
  WorldOptions options;
  options.world_size = world_size;
  return World::create(options);
}

// Token counts small and large, up to capacity, widths rotating; every third call a plain
// all-reduce, every fifth a flat arfAllReduce; no call aliases its input (refused with the buffer).
std::vector<CallSpec> changing_calls(arfAlgorithm_t algorithm, int64_t capacity) {
  const int64_t tokens[] = {1, 5, 64, 300, capacity, 2, 129, 1000, 3, capacity, 17, 8};
  const int64_t widths[] = {4096, 2880, 8192, 1024};
  std::vector<CallSpec> specs;
  for (size_t i = 0; i < std::size(tokens); ++i) {
    CallSpec s;
    s.algorithm = algorithm;
    s.num_tokens = tokens[i];
    s.hidden = widths[i % std::size(widths)];
    if (i % 3 == 2) s.pattern = arfPatternAllReduce;
    if (i % 5 == 4) {
      s.pattern = arfPatternAllReduce;
      s.flat = true;
    }
    if (i % 4 == 1 && s.has_norm()) s.alias = kResidualInPlace;
    specs.push_back(s);
  }
  return specs;
}

class InputBuffer : public ::testing::TestWithParam<AlgoWorld> {};

TEST_P(InputBuffer, SameBitsAsACopiedInput) {
  const auto [algorithm, world_size] = GetParam();
  const auto world = make_world(world_size);
  ASSERT_NE(world, nullptr);
  const std::vector<CallSpec> specs =
      changing_calls(algorithm, static_cast<int64_t>(world->options().max_tokens));
  const std::vector<CallData> data = make_all_call_data(specs, world_size, world->dtype(), test_seed());
  RunOptions copied;
  copied.max_skew_us = 100;
  const std::vector<CallResult> want = run_calls(*world, specs, data, copied);
  check_calls(*world, specs, data, want);

  struct Mode {
    const char* what;
    std::function<bool(int, size_t)> use;
  };
  const Mode modes[] = {
      {"every rank's input in its input buffer", [](int, size_t) { return true; }},
      {"half the ranks' inputs in the buffer, changing every call",
       [](int r, size_t c) { return (r + static_cast<int>(c)) % 2 == 0; }},
      {"the buffer on every other call (the calls between copy into it)",
       [](int, size_t c) { return c % 2 == 0; }},
  };
  for (const Mode& mode : modes) {
    SCOPED_TRACE(mode.what);
    RunOptions options = copied;
    options.input_in_buffer = mode.use;
    const std::vector<CallResult> got = run_calls(*world, specs, data, options);
    check_calls(*world, specs, data, got);
    check_identical(specs, want, got, mode.what);
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, InputBuffer,
                         ::testing::Combine(::testing::ValuesIn(kAlgorithms), ::testing::Values(2, 4, 8)),
                         algo_world_name);

// Every rank makes the same refused call (so no rank launches and none waits), then a good one.
TEST(InputBufferRules, RefusedBeforeLaunchAndTheCommunicatorStaysUsable) {
  const auto world = make_world(2);
  ASSERT_NE(world, nullptr);
  CallSpec spec;
  spec.num_tokens = 16;
  spec.hidden = 4096;
  const size_t bytes = static_cast<size_t>(spec.elems()) * 2;
  struct Bad {
    const char* what;
    const char* message;
    std::function<void(arfFusedArgs_t*, char* buffer)> edit;
  };
  const Bad bad[] = {
      {"norm_out == input == the buffer", "an output may not alias an input that is the input buffer",
       [](arfFusedArgs_t* a, char* b) { a->input = b; a->norm_out = b; }},
      {"input inside the buffer, not at its base", "must start at its base",
       [](arfFusedArgs_t* a, char* b) { a->input = b + 4096; }},
      {"residual_in in the buffer", "only a call's input may live there",
       [](arfFusedArgs_t* a, char* b) { a->residual_in = b; }},
      {"residual_out in the buffer", "only a call's input may live there",
       [bytes](arfFusedArgs_t* a, char* b) { a->residual_out = b + bytes; }},
  };
  world->run_ranks([&](int r) {
    CallBuffers buffers(world->device(r), spec, world->dtype());
    void* raw = nullptr;
    size_t capacity = 0;
    ASSERT_EQ(arfCommGetInputBuffer(world->comm(r), &raw, &capacity), arfSuccess);
    EXPECT_EQ(capacity, world->options().max_tokens * world->options().max_hidden * 2);
    char* buffer = static_cast<char*>(raw);
    for (const Bad& b : bad) {
      arfFusedArgs_t a = buffers.args();
      b.edit(&a, buffer);
      const arfStatus_t st = arfFusedAllReduce(world->comm(r), &a, world->stream(r));
      EXPECT_EQ(st, arfInvalidArgument) << b.what;
      const std::string message = arfGetLastErrorString();
      EXPECT_NE(message.find(b.message), std::string::npos) << b.what << ": " << message;
    }
    const arfStatus_t flat = arfAllReduce(world->comm(r), buffer, buffer, 4096, world->dtype(), world->stream(r));
    EXPECT_EQ(flat, arfInvalidArgument) << "flat all-reduce in place on the buffer";
    EXPECT_EQ(arfCommGetAsyncError(world->comm(r)), arfSuccess);
  });
  const std::vector<CallSpec> specs = {spec};
  const std::vector<CallData> data = make_all_call_data(specs, 2, world->dtype(), test_seed());
  RunOptions options;
  options.input_in_buffer = [](int, size_t) { return true; };
  check_calls(*world, specs, data, run_calls(*world, specs, data, options));
}

}  // namespace
}  // namespace arf::test
