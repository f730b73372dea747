// Host threads that check every step while the GPU runs the next ones.
//
// Under arfusion-run the process verifies its own rank's outputs against the reference (built from
// every rank's inputs, which each process generates from the shared seed).
//
// Flow: each rank thread copies a step's outputs into pinned host slot (step % ring_depth),
// records the slot's event and submits the step here. When every rank has submitted it, a verifier
// thread waits for the ranks' events, checks every call of the step (verify.h), merges the totals
// and frees the slot (step_pipeline.h: back-pressure instead of skipped checks); the time spent
// waiting is reported.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dataset.h"
#include "resources.h"
#include "schedule.h"
#include "step_pipeline.h"
#include "step_verifier.h"
#include "summary.h"

namespace arf::stress {

struct VerifierConfig {
  const Resources* resources = nullptr;
  const std::vector<DataSet>* sets = nullptr;
  DType dtype = DType::kBf16;
  int threads = 2;
  std::function<void()> on_first_wrong;  // called once, from a verifier thread
  bool record_step_hashes = false;  // under arfusion-run: for the cross-process check
};

class Verifier : public StepVerifier {
 public:
  explicit Verifier(const VerifierConfig& config);
  ~Verifier() override;
  Verifier(const Verifier&) = delete;
  Verifier& operator=(const Verifier&) = delete;

  // Rank threads. True once the host slot of `step` is free (its previous step was verified).
  bool slot_free(int64_t step) const override;
  // After the rank recorded the slot's event behind its output copies.
  void submit(int rank, const StepSpec& step) override;

  // Main thread: verify every step all ranks submitted, then stop the threads. Returns the number
  // of steps that only some ranks submitted (left unverified after a failure).
  uint64_t close() override;
  Totals totals() const override;
  uint64_t steps_verified() const override { return pipeline_.steps_verified(); }
  std::string error() const override;  // a CUDA error while waiting for an event ("" if none)
  // With record_step_hashes: one hash per step over this process's outputs, indexed by step
  // (kNoStepHash where none was verified); for compare_step_hashes (cross_process.h).
  std::vector<uint64_t> step_hashes() const;

 private:
  void verify(const StepPipeline::Job& job);

  VerifierConfig config_;
  int world_ = 0;
  StepPipeline pipeline_;
  std::vector<std::thread> threads_;

  mutable std::mutex totals_mu_;
  Totals totals_;
  std::string error_;
  bool reported_wrong_ = false;
  std::vector<uint64_t> step_hashes_;
};

}  // namespace arf::stress
