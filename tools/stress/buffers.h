// One rank's device memory for the soak: tensors at full capacity (one set, or with --graphs
// one per call of a window: slots), the per-call table, the counters and the pinned mirror, the
// stream and the in-flight event ring.
//
// Contract: everything here is allocated (and zeroed) before the first collective and freed after
// the last one has drained. cudaMalloc/cudaFree/synchronous memsets synchronize the device, and
// with virtual ranks a device-synchronizing call while a peer's collective spins deadlocks until
// the bounded wait expires (arfusion.h, "Ranks sharing one GPU").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "counters.h"
#include "segment_times.h"

namespace arf::stress {

struct BufferSizes {
  int64_t max_tokens = 0;
  int64_t max_hidden = 0;
  int64_t scale_bytes = 0;  // largest arfScaleBufferBytes of any call the soak can issue
  uint64_t table_calls = 1;
  int in_flight = 1;
  bool time_segments = false;  // timing events (segment_events) and timing on `events`
  bool side_stream = false;    // --co-resident: the soak's kernels on side_stream (options.h)
  int slots = 1;               // tensor sets: 1, or --window with --graphs (call i of a window: slot i)
};

// One set of a call's tensors, each at full capacity.
struct Tensors {
  uint16_t* input = nullptr;
  uint16_t* residual_in = nullptr;
  uint16_t* residual_out = nullptr;
  uint16_t* norm_out = nullptr;
  uint16_t* allreduce_out = nullptr;
  void* gamma = nullptr;  // max_hidden fp32
  void* post_gamma = nullptr;  // max_hidden fp32 (sandwich calls)
  uint8_t* quant_out = nullptr;
  uint8_t* scale_out = nullptr;
  float* scale_in = nullptr;
};

// The largest scale buffer any (pattern, layout, format) of these hiddens needs at max_tokens.
int64_t largest_scale_bytes(int64_t max_tokens, const std::vector<int64_t>& hiddens);

class RankBuffers {
 public:
  RankBuffers() = default;
  RankBuffers(const RankBuffers&) = delete;
  RankBuffers& operator=(const RankBuffers&) = delete;
  ~RankBuffers();

  // On `device` (made current). "" on success, else the failing call.
  std::string allocate(int device, const BufferSizes& sizes);
  // Zeroes the table, the counters and the mirror (between repeats; nothing in flight).
  std::string reset();
  // Copies the table back (after the rank's stream drained).
  std::string read_table(std::vector<TableEntry>* out) const;

  int device = 0;
  cudaStream_t stream = nullptr;  // the rank stream: the library's calls (and, without a side stream, the soak's kernels)
  // --co-resident: the soak's kernels (generate, corrupt, overwrite, check) run here. The rank
  // stream waits for `generated` (the inputs) before a call; the host waits for `called` (the
  // call complete) before it enqueues anything that reads the call's outputs, so no work of the
  // soak is ever ordered behind a call that has not completed.
  cudaStream_t side_stream = nullptr;
  cudaEvent_t generated = nullptr;
  cudaEvent_t called = nullptr;
  cudaStream_t work_stream() const { return side_stream != nullptr ? side_stream : stream; }
  std::vector<cudaEvent_t> events;  // ring of in_flight events, one per call in flight
  // With time_segments: kSegments events per ring slot, recorded before generate, call, overwrite
  // and check (segment_times.h); the slot's `events` entry closes the check.
  std::vector<cudaEvent_t> segment_events;
  std::vector<Tensors> slots;  // eager calls use slot 0
  TableEntry* table = nullptr;
  DeviceCounters* counters = nullptr;
  PinnedMirror* mirror_host = nullptr;  // read by the host without synchronizing
  PinnedMirror* mirror_device = nullptr;
  BufferSizes sizes;

 private:
  std::string alloc(void** p, size_t bytes, const char* what);  // recorded for the destructor
  std::string allocate_tensors(Tensors* t);

  std::vector<void*> device_allocations_;
};

}  // namespace arf::stress
