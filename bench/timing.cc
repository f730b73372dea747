// Warm-up, optional graph capture, barrier, event-timed region, max over ranks. Ranks sharing a GPU
// must not make a device-synchronizing call while a peer's collective is in flight (arfusion.h), so
// every such step (graph instantiation and destruction) sits between barriers.
#include "timing.h"

#include <algorithm>
#include <cmath>

namespace arf::bench {
namespace {

constexpr int kCopyRepeats = 5;
constexpr int64_t kMinCopyBytes = 64 << 20;

std::string cuda_error(cudaError_t err, const char* what) {
  return err == cudaSuccess ? "" : std::string(what) + ": " + cudaGetErrorString(err);
}

// Captures `iters` calls into a graph. Thread-local capture mode: the other rank threads keep
// issuing CUDA calls (their own captures, syncs) while this one captures, which global mode
// forbids.
std::string capture(int rank, cudaStream_t stream, const EnqueueFn& enqueue, int iters,
                    cudaGraphExec_t* exec) {
  std::string why =
      cuda_error(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  if (!why.empty()) return why;
  for (int i = 0; i < iters && why.empty(); ++i) why = enqueue(rank, i, stream);
  cudaGraph_t graph = nullptr;
  // End the capture even after a failed enqueue, or the stream stays unusable.
  std::string end = cuda_error(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  if (why.empty()) why = end;
  if (why.empty()) why = cuda_error(cudaGraphInstantiate(exec, graph, 0), "cudaGraphInstantiate");
  if (graph != nullptr) cudaGraphDestroy(graph);
  return why;
}

// One rank's timing resources. Released only once no rank has work in flight: with virtual ranks,
// destroying a graph can synchronize the device, which would wait on a peer's spinning kernel.
struct RankTiming {
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;

  void release() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
};

// Eager warm-up calls, drained. Creates the events here so that only launches happen between the
// barrier and the timed region.
std::string warm_up(int rank, cudaStream_t stream, const EnqueueFn& enqueue,
                    const TimingConfig& cfg, RankTiming* rt) {
  std::string why = cuda_error(cudaEventCreate(&rt->start), "cudaEventCreate");
  if (why.empty()) why = cuda_error(cudaEventCreate(&rt->stop), "cudaEventCreate");
  for (int i = 0; i < cfg.warmup_iters && why.empty(); ++i) why = enqueue(rank, i, stream);
  if (!why.empty()) return why;
  return cuda_error(cudaStreamSynchronize(stream), "cudaStreamSynchronize (warm-up)");
}

// The first launch of an executable graph uploads it: keep it out of the timed region.
std::string first_replay(cudaStream_t stream, cudaGraphExec_t exec) {
  std::string why = cuda_error(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  if (why.empty()) why = cuda_error(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return why;
}

// `align`: one untimed call first. Its kernels wait on the device for every peer's, so the ranks'
// timed regions start together even when the host barrier released the processes far apart (a
// socket barrier across processes: up to ~1 ms seen at 4 processes, which the first timed kernels
// would otherwise spend waiting, and count).
std::string timed_region(int rank, cudaStream_t stream, const EnqueueFn& enqueue,
                         const TimingConfig& cfg, const RankTiming& rt, bool align, double* us) {
  std::string why = align ? enqueue(rank, 0, stream) : "";
  if (why.empty()) why = cuda_error(cudaEventRecord(rt.start, stream), "cudaEventRecord");
  if (rt.exec != nullptr) {
    for (int g = 0; g < cfg.graph_replays && why.empty(); ++g) {
      why = cuda_error(cudaGraphLaunch(rt.exec, stream), "cudaGraphLaunch");
    }
  } else {
    for (int i = 0; i < cfg.iters && why.empty(); ++i) why = enqueue(rank, i, stream);
  }
  if (why.empty()) why = cuda_error(cudaEventRecord(rt.stop, stream), "cudaEventRecord");
  if (why.empty()) why = cuda_error(cudaEventSynchronize(rt.stop), "cudaEventSynchronize");
  float ms = 0;
  if (why.empty()) {
    why = cuda_error(cudaEventElapsedTime(&ms, rt.start, rt.stop), "cudaEventElapsedTime");
  }
  const int calls = cfg.iters * std::max(1, cfg.graph_replays);
  *us = 1e3 * ms / calls;
  return why;
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

Timing time_collective(RankPool& pool, const std::vector<cudaStream_t>& streams,
                       const EnqueueFn& enqueue, const HealthFn& health, const TimingConfig& cfg) {
  Timing t;
  const int repeats = std::max(1, cfg.repeats);
  std::vector<std::vector<double>> rep_us(static_cast<size_t>(repeats), std::vector<double>(pool.world(), NAN));
  std::vector<std::string> errors(pool.world());
  const bool graphs = cfg.graph_replays > 0;
  pool.run([&](int rank) {
    cudaStream_t stream = streams[rank];
    RankTiming rt;
    std::string why = warm_up(rank, stream, enqueue, cfg, &rt);
    // Graph instantiation synchronizes the device (arfusion.h, virtual ranks): every rank's
    // warm-up has drained before any rank instantiates, and every rank has instantiated before
    // any rank replays. Each agree() is reached by every rank, failed or not.
    if (pool.agree(rank, why.empty()) && graphs)
      why = capture(rank, stream, enqueue, cfg.iters, &rt.exec);
    if (pool.agree(rank, why.empty()) && graphs) why = first_replay(stream, rt.exec);
    if (why.empty() && health) why = health(rank);
    // The host barrier before each timed region; if any rank failed, nobody starts the next.
    for (int r = 0; r < repeats && pool.agree(rank, why.empty()); ++r) {
      pool.spin_sync();
      why = timed_region(rank, stream, enqueue, cfg, rt, pool.multi_process(), &rep_us[r][rank]);
      if (why.empty() && health) why = health(rank);
    }
    pool.agree(rank, true);  // no rank has work in flight once all are here
    rt.release();
    errors[rank] = why;
  });
  for (std::vector<double>& per_rank : rep_us) pool.share(&per_rank);  // process mode: every rank's
  pool.share(&errors);                                                  // times and error everywhere
  t.rank_us = rep_us.back();
  if (!pool.channel_error().empty()) t.error = "host channel: " + pool.channel_error();
  for (int r = 0; r < pool.world(); ++r) {
    if (!errors[r].empty() && t.error.empty())
      t.error = "rank " + std::to_string(r) + ": " + errors[r];
  }
  for (const std::vector<double>& per_rank : rep_us) {
    if (t.error.empty() &&
        std::any_of(per_rank.begin(), per_rank.end(), [](double us) { return std::isnan(us); })) {
      t.error = "a rank skipped a timed region after a peer failed";
    }
  }
  if (!t.error.empty()) {
    t.max_us = NAN;
    return t;
  }
  for (const std::vector<double>& per_rank : rep_us) {
    t.repeat_us.push_back(*std::max_element(per_rank.begin(), per_rank.end()));
  }
  t.max_us = median(t.repeat_us);
  return t;
}

double copy_bandwidth_gbps(int64_t bytes, cudaStream_t stream, int64_t* bytes_used,
                           std::string* error) {
  void* src = nullptr;
  void* dst = nullptr;
  for (; bytes >= kMinCopyBytes; bytes /= 2) {
    if (cudaMalloc(&src, bytes) == cudaSuccess) {
      if (cudaMalloc(&dst, bytes) == cudaSuccess) break;
      cudaFree(src);
    }
    src = dst = nullptr;
    cudaGetLastError();  // clear the out-of-memory error before trying a smaller size
  }
  if (dst == nullptr) {
    *error = "no memory for a copy of " + std::to_string(kMinCopyBytes) + " bytes";
    return NAN;
  }
  *bytes_used = bytes;
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms(kCopyRepeats);
  std::string why = cuda_error(cudaMemsetAsync(src, 0, bytes, stream), "cudaMemsetAsync");
  // One untimed copy first: it pays any first-touch cost of the pages.
  for (int k = -1; k < kCopyRepeats && why.empty(); ++k) {
    cudaEventRecord(start, stream);
    why = cuda_error(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
    cudaEventRecord(stop, stream);
    if (why.empty()) why = cuda_error(cudaEventSynchronize(stop), "cudaEventSynchronize");
    if (why.empty() && k >= 0) cudaEventElapsedTime(&ms[k], start, stop);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(src);
  cudaFree(dst);
  if (!why.empty()) {
    *error = why;
    return NAN;
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * static_cast<double>(bytes) / (ms[kCopyRepeats / 2] * 1e-3) / 1e9;
}

}  // namespace arf::bench
