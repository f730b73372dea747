// Per-call enqueue helpers, graph capture and warm-up (calls.h).
#include "calls.h"

#include <string>

#include "callkit/call_spec.h"

namespace arf::stress {
namespace {

constexpr int64_t kWordBytes = 2;

const char* at(const void* base, int64_t bytes) { return static_cast<const char*>(base) + bytes; }

void copy_async(void* dst, const void* src, int64_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                const char* what) {
  cuda_check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, stream), what);
}

}  // namespace

arfFusedArgs_t call_args(const CallSpec& call, const WorkSlot& work, arfDataType_t dtype,
                         int64_t hidden) {
  callkit::CallSpec spec;
  spec.pattern = call.pattern;
  spec.algorithm = call.algorithm;
  spec.num_tokens = call.tokens;
  spec.hidden = hidden;
  spec.gamma_fp32 = gamma_fp32(call.gamma_kind);
  spec.gamma_plus_one = gamma_plus_one(call.gamma_kind);
  spec.eps = kEps;
  callkit::CallTensors t;
  t.input = work.input;
  t.allreduce_out = work.out_a;
  t.residual_in = work.residual;
  t.residual_out = work.out_a;
  t.norm_out = work.out_b;
  t.gamma = work.gamma;
  return callkit::fused_args(spec, dtype, t);
}

int64_t call_output_words(const CallSpec& call, int64_t hidden) {
  const int64_t n = call.tokens * hidden;
  return call.pattern == arfPatternAllReduce ? n : 2 * n;
}

std::vector<int64_t> step_output_offsets(const StepSpec& step, int64_t hidden, int64_t* total) {
  std::vector<int64_t> offsets;
  int64_t next = 0;
  for (const CallSpec& call : step.calls) {
    offsets.push_back(next);
    next += call_output_words(call, hidden);
  }
  if (total != nullptr) *total = next;
  return offsets;
}

void enqueue_inputs(const RankResources& rr, const WorkSlot& work, const CallSpec& call,
                    const ResourceOptions& o) {
  const int64_t row_bytes = o.hidden * kWordBytes;
  const int64_t src = (call.set * o.set_rows + call.row_offset) * row_bytes;
  const int64_t bytes = call.tokens * row_bytes;
  copy_async(work.input, at(rr.ring_input, src), bytes, cudaMemcpyDeviceToDevice, rr.stream,
             "input ring -> work");
  if (call.pattern == arfPatternAllReduce) return;
  copy_async(work.residual, at(rr.ring_residual, src), bytes, cudaMemcpyDeviceToDevice, rr.stream,
             "residual ring -> work");
  if (gamma_fp32(call.gamma_kind)) {
    copy_async(work.gamma, at(rr.ring_gamma32, call.set * o.hidden * 4), o.hidden * 4,
               cudaMemcpyDeviceToDevice, rr.stream, "gamma32 ring -> work");
  } else {
    copy_async(work.gamma, at(rr.ring_gamma16, call.set * row_bytes), row_bytes,
               cudaMemcpyDeviceToDevice, rr.stream, "gamma ring -> work");
  }
}

ConsumerTargets consumer_targets(const CallSpec& call, const WorkSlot& work, int64_t hidden) {
  ConsumerTargets t;
  t.ptr[0] = work.input;
  t.words[0] = call.tokens * hidden;
  if (call.pattern == arfPatternAllReduce) return t;
  t.ptr[1] = work.residual;
  t.words[1] = call.tokens * hidden;
  t.ptr[2] = work.gamma;
  t.words[2] = hidden * (gamma_fp32(call.gamma_kind) ? 2 : 1);
  return t;
}

void enqueue_outputs(const RankResources& rr, const WorkSlot& work, const CallSpec& call,
                     uint16_t* host, int64_t hidden) {
  const int64_t n = call.tokens * hidden;
  // cudaMemcpyDefault: the slot is pinned host memory or, with --verify gpu, device memory.
  copy_async(host, work.out_a, n * kWordBytes, cudaMemcpyDefault, rr.stream, "outputs -> slot");
  if (call.pattern == arfPatternAllReduce) return;
  copy_async(host + n, work.out_b, n * kWordBytes, cudaMemcpyDefault, rr.stream,
             "norm_out -> slot");
}

void capture_graphs(Resources& resources, const std::vector<std::vector<CallSpec>>& windows) {
  const ResourceOptions& o = resources.options();
  for (int i = 0; i < resources.count(); ++i) {
    RankResources& rr = resources.held(i);
    cuda_check(cudaSetDevice(rr.device), "cudaSetDevice");
    for (size_t g = 0; g < windows.size(); ++g) {
      cuda_check(cudaStreamBeginCapture(rr.stream, cudaStreamCaptureModeThreadLocal), "capture");
      arfStatus_t failed = arfSuccess;
      std::string why;
      for (size_t i = 0; i < windows[g].size() && failed == arfSuccess; ++i) {
        const CallSpec& call = windows[g][i];
        const arfFusedArgs_t args = call_args(call, rr.work[i], o.dtype, o.hidden);
        failed = arfFusedAllReduce(rr.comm, &args, rr.stream);
        if (failed != arfSuccess) why = arfGetLastErrorString();
        if (failed == arfSuccess) {
          cuda_check(launch_consumer(consumer_targets(call, rr.work[i], o.hidden),
                                     static_cast<uint32_t>(g * 64 + i), rr.stream), "consumer");
        }
      }
      cudaGraph_t graph = nullptr;
      cuda_check(cudaStreamEndCapture(rr.stream, &graph), "end capture");
      if (failed != arfSuccess) {
        cudaGraphDestroy(graph);
        throw StressError("capturing graph " + std::to_string(g) + " on rank " +
                          std::to_string(rr.rank) + ": " + arfGetStatusString(failed) + ": " + why);
      }
      cudaGraphExec_t exec = nullptr;
      cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
      cudaGraphDestroy(graph);
      rr.graphs.push_back(exec);
      // Uploading now keeps the first replay from doing device work a peer could wait behind.
      cuda_check(cudaGraphUpload(exec, rr.stream), "cudaGraphUpload");
    }
    cuda_check(cudaStreamSynchronize(rr.stream), "graph upload");
  }
}

void warm_up(Resources& resources) {
  const ResourceOptions& o = resources.options();
  for (int i = 0; i < resources.count(); ++i) {
    RankResources& rr = resources.held(i);
    cuda_check(cudaSetDevice(rr.device), "cudaSetDevice");
    cuda_check(preload_consumer(), "load the consumer kernel");
    for (int kind = 0; kind < kGammaKinds; ++kind) {
      CallSpec call;
      call.pattern = arfPatternResidualRmsNorm;
      call.gamma_kind = kind;
      call.set = kind;
      enqueue_inputs(rr, rr.work[0], call, o);
      cuda_check(launch_consumer(consumer_targets(call, rr.work[0], o.hidden), 0, rr.stream),
                 "consumer");
      enqueue_outputs(rr, rr.work[0], call, rr.host[0].data, o.hidden);
      cuda_check(cudaEventRecord(rr.host[0].ready, rr.stream), "cudaEventRecord");
    }
    cuda_check(cudaStreamSynchronize(rr.stream), "warm-up");
  }
}

}  // namespace arf::stress
