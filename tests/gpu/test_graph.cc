// CUDA graphs: each rank captures several back-to-back calls on its own stream, each followed by a
// captured overwrite of that call's inputs (vLLM's trick: a peer still reading them after the call
// reads garbage). The graphs are then replayed with new data copied into the captured buffers
// before every replay, with random host skew between ranks (TRT-LLM's trick), and with eager calls
// on the same communicators between replays. Every replay is checked in full.
#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

constexpr int kReplays = 6;

using GraphParam = std::tuple<arfAlgorithm_t, int, arfDataType_t>;
class GraphReplay : public ::testing::TestWithParam<GraphParam> {};

std::vector<CallSpec> graph_specs(arfAlgorithm_t algorithm) {
  // Shapes and patterns change inside the graph; the last call is a Gemma/fp32-gamma one.
  std::vector<CallSpec> specs(4);
  const int64_t tokens[] = {1, 64, 300, 17};
  const int64_t hidden[] = {4096, 2880, 8192, 5120};
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].algorithm = algorithm;
    specs[i].num_tokens = tokens[i];
    specs[i].hidden = hidden[i];
  }
  specs[1].pattern = arfPatternAllReduce;
  specs[3].gamma_plus_one = true;
  specs[3].gamma_fp32 = true;
  return specs;
}

TEST_P(GraphReplay, MutatedInputsEveryReplay) {
  const auto [algorithm, world_size, dtype] = GetParam();
  WorldOptions options;
  options.world_size = world_size;
  options.dtype = dtype;
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  const std::vector<CallSpec> specs = graph_specs(algorithm);
  const size_t num_calls = specs.size();

  // buffers[r][c] stay at the captured addresses for the whole test.
  std::vector<std::vector<std::unique_ptr<CallBuffers>>> buffers(world_size);
  std::vector<cudaGraphExec_t> execs(world_size, nullptr);
  world->run_ranks([&](int r) {
    const cudaStream_t stream = world->stream(r);
    for (const CallSpec& spec : specs) {
      buffers[r].push_back(std::make_unique<CallBuffers>(world->device(r), spec, dtype));
    }
    cudaGraph_t graph = nullptr;
    if (!cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture")) {
      return;
    }
    for (size_t c = 0; c < num_calls; ++c) {
      const arfStatus_t st = buffers[r][c]->launch(world->comm(r), stream);
      EXPECT_EQ(st, arfSuccess) << "rank " << r << " capturing call " << c << ": "
                                << status_text(st);
      buffers[r][c]->clobber_inputs(stream);
    }
    if (!cuda_ok(cudaStreamEndCapture(stream, &graph), "end capture")) return;
    cuda_ok(cudaGraphInstantiate(&execs[r], graph, 0), "instantiate");
    cudaGraphDestroy(graph);
  });
  for (cudaGraphExec_t exec : execs) ASSERT_NE(exec, nullptr);

  for (int replay = 0; replay < kReplays; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    const std::vector<CallData> data = make_all_call_data(
        specs, world_size, dtype, mix_seed(test_seed(), 1000 + replay));
    std::vector<CallResult> results(num_calls, CallResult(world_size));
    {
      HangGuard guard(60, "graph replay " + std::to_string(replay));
      // Uploads from pageable memory may synchronize the device: all finish before any launch.
      std::barrier uploaded(world_size);
      world->run_ranks([&](int r) {
        const cudaStream_t stream = world->stream(r);
        for (size_t c = 0; c < num_calls; ++c) buffers[r][c]->upload(data[c], r, stream);
        cuda_ok(cudaStreamSynchronize(stream), "upload");
        uploaded.arrive_and_wait();
        std::mt19937 rng(static_cast<uint32_t>(mix_seed(replay, r)));
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
        cuda_ok(cudaGraphLaunch(execs[r], stream), "graph launch");
        cuda_ok(cudaStreamSynchronize(stream), "replay");
        const arfStatus_t async = arfCommGetAsyncError(world->comm(r));
        EXPECT_EQ(async, arfSuccess) << "rank " << r << ": " << status_text(async);
        for (size_t c = 0; c < num_calls; ++c) {
          results[c][r] = buffers[r][c]->download(stream);
        }
      });
    }
    check_calls(*world, specs, data, results);
    if (HasFailure()) break;
    // Eager calls between replays share the protocol state (Lamport buffers, epochs) with the
    // graph; odd replays are followed by one or two of them.
    if (replay % 2 == 1) {
      std::vector<CallSpec> eager(replay % 4 == 1 ? 1 : 2, specs[0]);
      eager.back().num_tokens = 33;
      run_and_check(*world, eager, {}, replay);
    }
  }
  for (int r = 0; r < world_size; ++r) {
    cudaSetDevice(world->device(r));
    cudaGraphExecDestroy(execs[r]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Graph, GraphReplay,
    ::testing::Values(std::make_tuple(arfAlgoAuto, 2, arfBFloat16),
                      std::make_tuple(arfAlgoAuto, 8, arfBFloat16),
                      std::make_tuple(arfAlgoAuto, 4, arfFloat16),
                      std::make_tuple(arfAlgoOneshotLamport, 2, arfBFloat16),
                      std::make_tuple(arfAlgoOneshotLamport, 8, arfBFloat16),
                      std::make_tuple(arfAlgoOneshotPull, 8, arfBFloat16),
                      std::make_tuple(arfAlgoTwoshot, 8, arfBFloat16),
                      std::make_tuple(arfAlgoUnfused, 8, arfBFloat16),
                      std::make_tuple(arfAlgoUnfused, 2, arfFloat16)),
    [](const auto& info) {
      return algorithm_tag(std::get<0>(info.param)) + "_" + dtype_tag(std::get<2>(info.param)) +
             "_ws" + std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace arf::test
