// Allocation and reset of one rank's buffers (buffers.h).
#include "buffers.h"

#include <algorithm>

namespace arf::stress {
namespace {

std::string failed(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

}  // namespace

int64_t largest_scale_bytes(int64_t max_tokens, const std::vector<int64_t>& hiddens) {
  int64_t best = 0;
  const arfPattern_t patterns[] = {arfPatternResidualRmsNormFp8PerToken,
                                   arfPatternResidualRmsNormFp8PerGroup,
                                   arfPatternResidualRmsNormNvfp4, arfPatternResidualRmsNormMxfp4};
  // Scale buffers grow with the token count (padding rounds it up), so max_tokens bounds them.
  for (int64_t h : hiddens) {
    for (arfPattern_t p : patterns) {
      for (int layout = 0; layout < 3; ++layout) {
        for (int format = 0; format < 3; ++format) {
          const size_t b = arfScaleBufferBytes(p, static_cast<arfScaleLayout_t>(layout),
                                               static_cast<arfScaleFormat_t>(format),
                                               static_cast<size_t>(max_tokens), static_cast<size_t>(h));
          best = std::max(best, static_cast<int64_t>(b));
        }
      }
    }
  }
  return best;
}

RankBuffers::~RankBuffers() {
  // Only reached after every collective drained (or at exit): frees are then harmless.
  if (stream == nullptr && device_allocations_.empty() && mirror_host == nullptr) return;
  cudaSetDevice(device);
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  for (cudaEvent_t e : {generated, called}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (side_stream != nullptr) cudaStreamDestroy(side_stream);
  for (cudaEvent_t e : segment_events) cudaEventDestroy(e);
  for (void* p : device_allocations_) cudaFree(p);
  if (mirror_host != nullptr) cudaFreeHost(mirror_host);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

std::string RankBuffers::allocate(int dev, const BufferSizes& s) {
  device = dev;
  sizes = s;
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess) return failed("cudaSetDevice", e);
  if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) {
    return failed("cudaStreamCreateWithFlags", e);
  }
  if (s.side_stream) {
    if ((e = cudaStreamCreateWithFlags(&side_stream, cudaStreamNonBlocking)) != cudaSuccess) {
      return failed("cudaStreamCreateWithFlags(side)", e);
    }
    for (cudaEvent_t* ev : {&generated, &called}) {
      if ((e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming)) != cudaSuccess) {
        return failed("cudaEventCreateWithFlags", e);
      }
    }
  }
  events.resize(static_cast<size_t>(s.in_flight), nullptr);
  segment_events.resize(s.time_segments ? static_cast<size_t>(s.in_flight) * kSegments : 0, nullptr);
  const unsigned flags = s.time_segments ? cudaEventDefault : cudaEventDisableTiming;
  for (std::vector<cudaEvent_t>* ring : {&events, &segment_events}) {
    for (cudaEvent_t& ev : *ring) {
      if ((e = cudaEventCreateWithFlags(&ev, flags)) != cudaSuccess) return failed("cudaEventCreateWithFlags", e);
    }
  }
  slots.assign(static_cast<size_t>(std::max(1, s.slots)), Tensors{});
  for (Tensors& t : slots) {
    if (std::string why = allocate_tensors(&t); !why.empty()) return why;
  }
  std::string why;
  void* p = nullptr;
  if (!(why = alloc(&p, s.table_calls * sizeof(TableEntry), "cudaMalloc(table)")).empty()) return why;
  table = static_cast<TableEntry*>(p);
  if (!(why = alloc(&p, sizeof(DeviceCounters), "cudaMalloc(counters)")).empty()) return why;
  counters = static_cast<DeviceCounters*>(p);
  if ((e = cudaHostAlloc(reinterpret_cast<void**>(&mirror_host), sizeof(PinnedMirror),
                         cudaHostAllocMapped | cudaHostAllocPortable)) != cudaSuccess) {
    return failed("cudaHostAlloc(mirror)", e);
  }
  if ((e = cudaHostGetDevicePointer(reinterpret_cast<void**>(&mirror_device), mirror_host, 0)) !=
      cudaSuccess) {
    return failed("cudaHostGetDevicePointer(mirror)", e);
  }
  return reset();
}

std::string RankBuffers::alloc(void** p, size_t bytes, const char* what) {
  const cudaError_t err = cudaMalloc(p, std::max<size_t>(bytes, 256));
  if (err != cudaSuccess) return failed(what, err);
  device_allocations_.push_back(*p);
  return "";
}

std::string RankBuffers::allocate_tensors(Tensors* t) {
  const size_t elems = static_cast<size_t>(sizes.max_tokens) * static_cast<size_t>(sizes.max_hidden);
  std::string why;
  void* p = nullptr;
  if (!(why = alloc(&p, elems * 2, "cudaMalloc(input)")).empty()) return why;
  t->input = static_cast<uint16_t*>(p);
  if (!(why = alloc(&p, elems * 2, "cudaMalloc(residual_in)")).empty()) return why;
  t->residual_in = static_cast<uint16_t*>(p);
  if (!(why = alloc(&p, elems * 2, "cudaMalloc(residual_out)")).empty()) return why;
  t->residual_out = static_cast<uint16_t*>(p);
  if (!(why = alloc(&p, elems * 2, "cudaMalloc(norm_out)")).empty()) return why;
  t->norm_out = static_cast<uint16_t*>(p);
  if (!(why = alloc(&p, elems * 2, "cudaMalloc(allreduce_out)")).empty()) return why;
  t->allreduce_out = static_cast<uint16_t*>(p);
  if (!(why = alloc(&t->gamma, static_cast<size_t>(sizes.max_hidden) * 4, "cudaMalloc(gamma)")).empty()) return why;
  if (!(why = alloc(&t->post_gamma, static_cast<size_t>(sizes.max_hidden) * 4, "cudaMalloc(post_gamma)")).empty()) {
    return why;
  }
  if (!(why = alloc(&p, elems, "cudaMalloc(quant_out)")).empty()) return why;
  t->quant_out = static_cast<uint8_t*>(p);
  if (!(why = alloc(&p, static_cast<size_t>(sizes.scale_bytes), "cudaMalloc(scale_out)")).empty()) return why;
  t->scale_out = static_cast<uint8_t*>(p);
  if (!(why = alloc(&p, 16, "cudaMalloc(scale_in)")).empty()) return why;
  t->scale_in = static_cast<float*>(p);
  // Inputs start as zeros: never read before the generate kernel writes them, but defined.
  for (void* q : {static_cast<void*>(t->input), static_cast<void*>(t->residual_in),
                  static_cast<void*>(t->residual_out), static_cast<void*>(t->norm_out),
                  static_cast<void*>(t->allreduce_out)}) {
    if (const cudaError_t e = cudaMemset(q, 0, elems * 2); e != cudaSuccess) return failed("cudaMemset", e);
  }
  return "";
}

std::string RankBuffers::reset() {
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaMemset(table, 0, sizes.table_calls * sizeof(TableEntry));
  if (e == cudaSuccess) e = cudaMemset(counters, 0, sizeof(DeviceCounters));
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return failed("reset (cudaMemset/cudaDeviceSynchronize)", e);
  *mirror_host = PinnedMirror{};
  return "";
}

std::string RankBuffers::read_table(std::vector<TableEntry>* out) const {
  out->assign(sizes.table_calls, TableEntry{});
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) {
    e = cudaMemcpy(out->data(), table, sizes.table_calls * sizeof(TableEntry), cudaMemcpyDeviceToHost);
  }
  return e == cudaSuccess ? "" : failed("cudaMemcpy(table)", e);
}

}  // namespace arf::stress
