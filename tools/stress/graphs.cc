// Capture of the windows' graphs (graphs.h).
#include "graphs.h"

namespace arf::stress {
namespace {

std::string failed(const std::string& what, cudaError_t e) { return what + ": " + cudaGetErrorString(e); }

// Enqueues call `c` of slot `t` (and its overwrite kernel) on the capturing stream.
std::string capture_call(const CaptureJob& job, const CallSpec& c, const TensorSet& t) {
  const cudaStream_t s = job.buffers->stream;
  arfStatus_t st;
  if (c.pattern == Pat::kFlat) {
    const FlatArgs f = flat_args(c, t);
    st = arfAllReduce(job.comm, f.in, f.out, f.count, job.constants.dtype, s);
  } else {
    const arfFusedArgs_t a = fused_args(c, job.constants.dtype, t);
    st = arfFusedAllReduce(job.comm, &a, s);
  }
  if (st != arfSuccess) return std::string(arfGetStatusString(st)) + ": " + arfGetLastErrorString();
  if (!job.overwrite_inside) return "";
  const DeviceCall d = device_call(c, job.constants, job.rank, job.world, t);
  if (const cudaError_t e = launch_overwrite(d, job.shape, s); e != cudaSuccess) return failed("overwrite kernel", e);
  return "";
}

}  // namespace

TensorSet tensor_set(const Tensors& t) {
  TensorSet s;
  s.input = t.input;
  s.residual_in = t.residual_in;
  s.residual_out = t.residual_out;
  s.norm_out = t.norm_out;
  s.allreduce_out = t.allreduce_out;
  s.gamma = t.gamma;
  s.post_gamma = t.post_gamma;
  s.quant_out = t.quant_out;
  s.scale_out = t.scale_out;
  s.scale_in = t.scale_in;
  return s;
}

std::string capture_windows(const CaptureJob& job, const std::vector<std::vector<CallSpec>>& windows,
                            std::vector<cudaGraphExec_t>* out) {
  RankBuffers& b = *job.buffers;
  if (const cudaError_t e = cudaSetDevice(b.device); e != cudaSuccess) return failed("cudaSetDevice", e);
  for (size_t g = 0; g < windows.size(); ++g) {
    const std::string where = "graph " + std::to_string(g) + " of rank " + std::to_string(job.rank);
    if (windows[g].empty() || windows[g].size() > b.slots.size()) {
      return where + ": " + std::to_string(windows[g].size()) + " calls (the planner refused the window's draws?)";
    }
    if (const cudaError_t e = cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal); e != cudaSuccess) {
      return failed(where + ": cudaStreamBeginCapture", e);
    }
    std::string why;
    for (size_t i = 0; i < windows[g].size() && why.empty(); ++i) {
      why = capture_call(job, windows[g][i], tensor_set(b.slots[i]));
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(b.stream, &graph);
    if (why.empty() && ended != cudaSuccess) why = failed("cudaStreamEndCapture", ended);
    cudaGraphExec_t exec = nullptr;
    if (why.empty()) {
      if (const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess) why = failed("cudaGraphInstantiate", e);
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!why.empty()) return where + ": " + why;
    out->push_back(exec);
    // Uploaded now, so that the first replay does no device work a peer could wait behind.
    if (const cudaError_t e = cudaGraphUpload(exec, b.stream); e != cudaSuccess) return failed(where + ": cudaGraphUpload", e);
  }
  if (const cudaError_t e = cudaStreamSynchronize(b.stream); e != cudaSuccess) return failed("graph upload", e);
  return "";
}

void destroy_graphs(std::vector<cudaGraphExec_t>* graphs) {
  for (cudaGraphExec_t g : *graphs) cudaGraphExecDestroy(g);
  graphs->clear();
}

}  // namespace arf::stress
