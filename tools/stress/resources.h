// Everything the soak touches, created before the first collective and freed after the last.
//
// Why all up front: with virtual ranks (several ranks on one GPU) a cudaMalloc, cudaFree, pinned
// allocation or graph instantiation on one rank's thread waits for the device, i.e. for a peer's
// collective kernel, which spins until this rank's kernel runs: a deadlock until the bounded wait
// expires (include/arfusion/arfusion.h). So the soak itself only enqueues copies, kernels and
// events on pre-existing memory.
//
// Per rank: its communicator and stream; its ring of input sets (distinct per rank); `work_slots`
// sets of call buffers (one per call of a captured window; eager calls use slot 0) that the
// consumer overwrites; `ring_depth` pinned host slots, each receiving one step's outputs with an
// event the verifier waits on. Per device: the residual and gamma rings, replicated in tensor
// parallelism, so ranks sharing a GPU share one copy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "arfusion/arfusion.h"
#include "dataset.h"

namespace arf::stress {

struct ResourceOptions {
  std::vector<int> devices;  // devices[rank]; under arfusion-run {this process's device}
  int process_rank = -1;     // >= 0: this process is that rank of an ipc job (arfusion-run)
  arfDataType_t dtype = arfBFloat16;
  int64_t hidden = 4096;
  int64_t max_tokens = 1024;
  int64_t oneshot_max_tokens = 0;
  double timeout_seconds = 10;
  int num_sets = 8;
  int64_t set_rows = 1024;
  int work_slots = 1;
  int ring_depth = 6;
  bool device_slots = false;  // output slots in device memory (--verify gpu), else pinned host
};

// One call's device buffers. out_a: allreduce_out or residual_out; out_b: norm_out.
struct WorkSlot {
  void* input = nullptr;
  void* residual = nullptr;
  void* gamma = nullptr;  // hidden x 4 bytes: holds an fp32 gamma too
  void* out_a = nullptr;
  void* out_b = nullptr;
};

// One step's outputs of one rank: pinned host memory for the host verifier, device memory for
// the GPU verifier (--verify gpu); filled by stream-ordered copies either way (calls.cc).
struct HostSlot {
  uint16_t* data = nullptr;     // pinned, or device memory (ResourceOptions::device_slots)
  cudaEvent_t ready = nullptr;  // recorded after the step's output copies
};

struct RankResources {
  int rank = 0;
  int device = 0;
  arfComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* ring_input = nullptr;            // [sets][set_rows * hidden]
  const void* ring_residual = nullptr;   // [sets][set_rows * hidden], shared per device
  const void* ring_gamma16 = nullptr;    // [sets][hidden], shared per device
  const void* ring_gamma32 = nullptr;    // [sets][hidden] fp32, shared per device
  std::vector<WorkSlot> work;
  std::vector<HostSlot> host;
  std::vector<cudaGraphExec_t> graphs;
};

class Resources {
 public:
  // Creates the communicators (arfCommInitAll; under arfusion-run this process's rank only, from
  // the launcher's environment over the ipc transport) and allocates everything; throws
  // StressError.
  explicit Resources(const ResourceOptions& options);
  ~Resources();  // collective teardown from this thread; errors are ignored (reported earlier)
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;

  // Copies the sets' inputs, residuals and gammas into the device rings (synchronous).
  void upload(const std::vector<DataSet>& sets);
  // Output slots of `slot_words` 16-bit words (the largest step's outputs) and their events,
  // ring_depth per rank: pinned host memory, or device memory with device_slots. Separate from the constructor because the largest step is known only once
  // the dispatch map (which needs the communicators) has shaped the schedule.
  void allocate_host(int64_t slot_words);

  // The ranks this process holds: every rank, or its own under arfusion-run.
  int count() const { return static_cast<int>(ranks_.size()); }
  RankResources& held(int i) { return ranks_[static_cast<size_t>(i)]; }
  const RankResources& held(int i) const { return ranks_[static_cast<size_t>(i)]; }
  // By global rank; only for a rank this process holds.
  RankResources& rank(int r) { return ranks_[static_cast<size_t>(r - ranks_.front().rank)]; }
  const RankResources& rank(int r) const {
    return ranks_[static_cast<size_t>(r - ranks_.front().rank)];
  }
  const ResourceOptions& options() const { return options_; }
  int64_t pinned_bytes() const { return pinned_bytes_; }
  int64_t device_bytes() const { return device_bytes_; }

 private:
  void* device_alloc(int device, int64_t bytes);
  void allocate_rank(RankResources& rr);
  void allocate_shared();
  struct SharedRings {
    const void* residual = nullptr;
    const void* gamma16 = nullptr;
    const void* gamma32 = nullptr;
  };

  ResourceOptions options_;
  std::vector<RankResources> ranks_;
  std::vector<std::pair<int, void*>> device_memory_;  // (device, pointer) to free
  int64_t pinned_bytes_ = 0;
  int64_t device_bytes_ = 0;
};

}  // namespace arf::stress
