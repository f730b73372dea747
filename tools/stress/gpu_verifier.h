// `--verify gpu`: the checks of verify.h done by kernels on the GPU, so the soak runs at GPU speed
// instead of the host verifier's (bench/results/2026-11-29-run3-2b0b6bb/soak.txt: 546 calls/s,
// limited by host threads comparing bytes).
//
// Flow (the host verifier's, with device memory in place of pinned memory):
//  - every rank copies each step's outputs into its output slot (step % ring_depth), which lives
//    in DEVICE memory in this mode (resources.h), and records the slot's event — the very copies
//    the host verifier gets, at the same place in the stream (after the consumer, so the check
//    sees each call's outputs exactly once, and before the slot can be reused);
//  - when every rank has submitted the step, the reaper thread (one, steps in order) waits ON THE
//    HOST for every rank's slot event, then enqueues on the verifier's own CHECK STREAM one check
//    kernel per call of the step (one block
//    per row: the device reference computed from the data set rows the call used — the device
//    rings, which nothing overwrites after the upload; the consumer only overwrites the work
//    slots — compared with every rank's outputs and bitwise with rank 0's), a one-thread finalize
//    kernel (per-call counts into the run's totals, the step's lowest first-bad key into the run's
//    first bad record with the bad element's bits), a 72-byte copy of the totals into the slot's
//    pinned mirror, and the slot's `done` event;
//  - the reaper waits for `done`, takes the totals from the mirror (and the first bad call's spec
//    from the step), and frees the slot for the rank threads.
// Nothing on the GPU ever waits for the check stream, and the check stream never waits on the
// device (no cudaStreamWaitEvent): its work is enqueued only once the outputs it reads exist, so
// it cannot take part in a virtual-rank deadlock (soak.h, resources.h). The first version waited
// with cudaStreamWaitEvent and timed out within a dozen calls on the H200 (8 virtual ranks): a
// wait parked at the head of a hardware queue shared with a rank's stream.
//
// Restriction: every rank on ONE device (virtual ranks), since the check kernel reads all ranks'
// inputs and outputs; args.cc refuses --verify gpu otherwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
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
  std::function<void()> on_first_wrong;  // called once, from the reaper thread
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
  void submit(int rank, const StepSpec& step) override;
  uint64_t close() override;
  Totals totals() const override;
  uint64_t steps_verified() const override { return pipeline_.steps_verified(); }
  std::string error() const override;

 private:
  using Job = StepPipeline::Job;
  bool enqueue_check(const Job& job);  // reaper thread; false on an error
  void reap(const Job& job);
  void set_error(const std::string& message);

  GpuVerifierConfig config_;
  int depth_ = 0;
  int world_ = 0;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> done_;            // [slot]
  gv::CheckState* state_ = nullptr;          // device
  gv::CheckState* mirror_ = nullptr;         // pinned, [slot]
  StepPipeline pipeline_;                    // one worker (the reaper): steps in order
  std::thread reaper_;

  mutable std::mutex totals_mu_;
  Totals totals_;
  std::string error_;
};

}  // namespace arf::stress
