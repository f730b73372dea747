// `--verify gpu`: the checks of verify.h done by kernels on the GPU, so the soak runs at GPU speed
// instead of the host verifier's (546 calls/s on one H200 with 8 virtual ranks, limited by host
// threads comparing bytes).
//
// Flow (the host verifier's, with device memory in place of pinned memory):
//  - every rank copies each step's outputs into its output slot (step % ring_depth), which lives
//    in DEVICE memory in this mode (resources.h), and records the slot's event — the very copies
//    the host verifier gets, at the same place in the stream (after the consumer, so the check
//    sees each call's outputs exactly once, and before the slot can be reused);
//  - every ring_depth steps the rank threads meet at a GATE (step_gate) before enqueuing anything
//    of the step; the last to arrive drains every rank stream, then runs, on the verifier's own
//    CHECK STREAM and on an otherwise idle device, the pending steps' checks: one check kernel per
//    call (one block per row: the device reference computed from the data set rows the call used
//    — the device rings, which nothing overwrites after the upload; the consumer only overwrites
//    the work slots — compared with every rank's outputs and bitwise with rank 0's), a one-thread
//    finalize kernel (per-call counts into the run's totals, the step's lowest first-bad key into
//    the run's first bad record with the bad element's bits), a 72-byte copy of the totals into
//    the slot's pinned mirror; it then reads the mirrors in step order and frees the slots, and
//    releases the ranks. close() checks what is left after the rank threads joined.
// Why a gate and not a concurrent check stream: virtual ranks need every CTA of every rank's
// collective resident at once (the grid cap fills the device: policy.h), and any other kernel on
// the device can take the room of a CTA that its peers spin for. The first version checked
// concurrently (a check stream waiting on the slot events, later a reaper thread enqueueing behind
// host-side event waits): on the H200 with 4 and 8 virtual ranks the collectives timed out within
// 7-150 calls, and not once in 20000 calls with the checks skipped or with 2 ranks. The gate costs a drain every ring_depth steps.
//
// Restriction: every rank on ONE device (virtual ranks), since the check kernel reads all ranks'
// inputs and outputs; args.cc refuses --verify gpu otherwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <condition_variable>
#include <vector>

#include "dataset.h"
#include "gpu_check.h"
#include "gpu_report.h"
#include "resources.h"
#include "schedule.h"
#include "step_pipeline.h"
#include "step_verifier.h"
#include "summary.h"

namespace arf::stress {

// ---- kernels (gpu_check_kernels.cu) ------------------------------------------------------------
// One call: grid = tokens blocks, one row each; counts and the lowest key into state->call_*[i]
// and state->step_key.
cudaError_t launch_check_call(const gv::CallView& view, int64_t tokens, int call_in_step,
                              gv::CheckState* state, cudaStream_t stream);
struct FinalizeParams {
  uint64_t step = 0;
  int num_calls = 0;
  const uint16_t* slot[gv::kMaxRanks] = {};      // each rank's output slot of the step
  int64_t offset[gv::kMaxCallsPerStep] = {};     // words: the call's out_a within the slot
  int64_t out_words[gv::kMaxCallsPerStep] = {};  // tokens * hidden: out_b = out_a + this
};
cudaError_t launch_finalize(const FinalizeParams& params, gv::CheckState* state,
                            cudaStream_t stream);
// Loads both kernels now (lazy loading would wait for the device to go idle: resources.h).
cudaError_t preload_check_kernels();

// ---- the verifier ------------------------------------------------------------------------------
struct GpuVerifierConfig {
  const Resources* resources = nullptr;  // output slots must be on the device (device_slots)
  const std::vector<DataSet>* sets = nullptr;  // host references: the want bits of a first bad
  DType dtype = DType::kBf16;
  std::function<void()> on_first_wrong;  // called once, from the thread that runs the checks
};

// The CallView of call `i` of `step` whose outputs are in output slot `slot` (host code).
gv::CallView call_view(const Resources& res, const StepSpec& step, size_t i, int slot);

class GpuVerifier : public StepVerifier {
 public:
  // Allocates its device state, stream, events and pinned mirrors and loads the kernels: construct
  // it before the first collective. Throws StressError.
  explicit GpuVerifier(const GpuVerifierConfig& config);
  ~GpuVerifier() override;
  GpuVerifier(const GpuVerifier&) = delete;
  GpuVerifier& operator=(const GpuVerifier&) = delete;

  bool slot_free(int64_t step) const override;
  bool step_gate(int rank, int64_t step, const std::function<bool()>& aborted) override;
  void submit(int rank, const StepSpec& step) override;
  uint64_t close() override;
  Totals totals() const override;
  uint64_t steps_verified() const override { return pipeline_.steps_verified(); }
  std::string error() const override;

 private:
  using Job = StepPipeline::Job;
  // The last rank at a gate (or close()): drain the rank streams, check every queued step.
  void check_pending();
  bool enqueue_check(const Job& job);  // false on an error (error() is set)
  void reap(const Job& job);           // after the check stream finished the job
  void set_error(const std::string& message);

  GpuVerifierConfig config_;
  int depth_ = 0;
  int world_ = 0;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> done_;            // [slot]
  gv::CheckState* state_ = nullptr;          // device
  gv::CheckState* mirror_ = nullptr;         // pinned, [slot]
  StepPipeline pipeline_;                    // arrivals and slots; jobs taken at the gates
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  int gate_arrived_ = 0;
  uint64_t gate_generation_ = 0;

  mutable std::mutex totals_mu_;
  Totals totals_;
  std::string error_;
};

}  // namespace arf::stress
