// CUDA graphs over the ipc transport: each rank captures three back-to-back fused calls (each
// followed by a captured overwrite of its inputs) into one graph, then replays it five times with
// new random data copied into the captured input buffers before every replay, checking every
// replay's outputs against the reference and across ranks. An eager batch between two replays
// shares the protocol state (Lamport buffers and epochs, barrier flags) with the graph's calls.
// Ranks of different processes never share hardware queues, so unlike the in-process suite
// (tests/gpu/test_graph.cc) no launch order between ranks is needed.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ipc/ipc_rank.h"
#include "ipc/ipc_test_util.h"

namespace arf::ipc_test {
namespace {

constexpr int kGraphReplays = 5;

std::vector<CallSpec> graph_specs() {
  std::vector<CallSpec> specs(3);
  specs[0].num_tokens = 1;  // residual_rmsnorm, auto
  specs[1].pattern = arfPatternAllReduce;
  specs[1].algorithm = arfAlgoOneshotLamport;  // epochs advance on device between replays
  specs[1].num_tokens = 64;
  specs[2].pattern = arfPatternResidualRmsNormFp8PerToken;
  specs[2].num_tokens = 257;
  return specs;
}

// Captures every call (each followed by the overwrite of its inputs) into one executable graph;
// nullptr (after ctx.fail) when a call or the capture fails.
cudaGraphExec_t capture(RankContext& ctx, arfComm_t comm, cudaStream_t stream,
                        const std::vector<CallSpec>& specs,
                        const std::vector<std::unique_ptr<CallBuffers>>& buffers) {
  if (!cuda_ok(ctx, cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture")) {
    return nullptr;
  }
  bool captured = true;
  for (size_t c = 0; c < specs.size(); ++c) {
    if (const arfStatus_t st = buffers[c]->launch(comm, stream); st != arfSuccess) {
      ctx.fail("capturing call " + std::to_string(c) + " [" + specs[c].label() + "]: " +
               status_text(st));
      captured = false;
    }
    captured = buffers[c]->clobber_inputs(ctx, stream) && captured;
  }
  // The capture must end whatever happened, or the stream stays in capture mode.
  cudaGraph_t graph = nullptr;
  captured = cuda_ok(ctx, cudaStreamEndCapture(stream, &graph), "end capture") && captured;
  cudaGraphExec_t exec = nullptr;
  if (captured && !cuda_ok(ctx, cudaGraphInstantiate(&exec, graph, 0), "instantiate")) {
    exec = nullptr;
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  return exec;
}

// One replay: new inputs into the captured buffers, launch, check every call. Returns false when
// the ranks can no longer be in step (a CUDA error, a failed communicator); a wrong output does
// not stop the replays, so the peer is never left waiting for a replay that will not come.
bool replay_and_check(RankContext& ctx, arfComm_t comm, cudaStream_t stream, cudaGraphExec_t exec,
                      const std::vector<CallSpec>& specs,
                      const std::vector<std::unique_ptr<CallBuffers>>& buffers, int replay,
                      uint64_t seed) {
  const std::string prefix = "replay " + std::to_string(replay) + " ";
  std::vector<CallData> data;
  for (size_t c = 0; c < specs.size(); ++c) {
    data.push_back(make_call_data(specs[c], ctx.world(), arfBFloat16,
                                  mix_seed(seed, 1000 * (replay + 1) + c)));
    if (!buffers[c]->upload(ctx, data[c], stream)) return false;
  }
  if (!cuda_ok(ctx, cudaStreamSynchronize(stream), prefix + "upload") ||
      !cuda_ok(ctx, cudaGraphLaunch(exec, stream), prefix + "graph launch") ||
      !cuda_ok(ctx, cudaStreamSynchronize(stream), prefix + "synchronize")) {
    return false;
  }
  if (const arfStatus_t async = arfCommGetAsyncError(comm); async != arfSuccess) {
    ctx.fail(prefix + "arfCommGetAsyncError: " + status_text(async));
    return false;
  }
  for (size_t c = 0; c < specs.size(); ++c) {
    RankOutputs got;
    if (!buffers[c]->download(ctx, stream, &got)) return false;
    const std::string where = prefix + "call " + std::to_string(c);
    if (const std::string e = check_outputs(specs[c], arfBFloat16, data[c], got); !e.empty()) {
      ctx.fail(where + " [" + specs[c].label() + "]:\n" + e);
    }
    publish_outputs(ctx, where + " ", static_cast<uint64_t>(replay * 100) + c, got);
  }
  return true;
}

void graph_rank(RankContext& ctx, uint64_t seed) {
  if (!init_device(ctx)) return;
  const arfComm_t comm = init_comm(ctx, ipc_config(ctx, arfBFloat16));
  if (comm == nullptr) return;
  const cudaStream_t stream = make_stream(ctx);
  const std::vector<CallSpec> specs = graph_specs();
  std::vector<std::unique_ptr<CallBuffers>> buffers;
  for (size_t c = 0; c < specs.size() && stream != nullptr; ++c) {
    buffers.push_back(CallBuffers::create(ctx, specs[c], arfBFloat16));
    if (buffers.back() == nullptr) break;
    check_and_publish_plan(ctx, comm, *buffers[c], specs[c], "call " + std::to_string(c) + " plan");
  }
  const bool allocated = stream != nullptr && buffers.size() == specs.size() &&
                         buffers.back() != nullptr;
  const cudaGraphExec_t exec = allocated ? capture(ctx, comm, stream, specs, buffers) : nullptr;
  bool in_step = exec != nullptr;
  for (int replay = 0; replay < kGraphReplays && in_step; ++replay) {
    in_step = replay_and_check(ctx, comm, stream, exec, specs, buffers, replay, seed);
    // Eager calls share the protocol state (Lamport buffers, epochs) with the graph's.
    if (replay == 2 && in_step) {
      in_step = run_checked_batch(ctx, comm, stream, arfBFloat16, {specs[1], specs[0]},
                                  mix_seed(seed, 77), "eager after replay 2 ");
    }
  }
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  buffers.clear();
  if (stream != nullptr) cudaStreamDestroy(stream);
  destroy_comm(ctx, comm);
}

TEST(IpcGraph, CapturedCallsReplayWithNewInputsEveryTime) {
  const uint64_t seed = test_seed();
  const auto results = run_processes(
      test_name(), one_group(2), [&](RankContext& ctx) { graph_rank(ctx, seed); },
      kBatchDeadlineSeconds);
  expect_all_passed(results);
  // Plans, every replay's outputs and the eager calls' plans and outputs.
  expect_identical_hashes(results, graph_specs().size() * (1 + kGraphReplays));
}

}  // namespace
}  // namespace arf::ipc_test
