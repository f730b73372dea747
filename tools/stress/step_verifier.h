// What the rank threads (soak.h) and main need from a verifier: the host verifier (verifier.h,
// the default and the independent reference) and the GPU verifier (gpu_verifier.h, --verify gpu)
// both receive every step's outputs through the per-rank output slots (resources.h) and free a
// slot only once its step is checked, so back-pressure works the same way for both.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "schedule.h"
#include "summary.h"

namespace arf::stress {

class StepVerifier {
 public:
  virtual ~StepVerifier() = default;
  // Rank threads. True once the output slot of `step` is free (its previous step was checked).
  virtual bool slot_free(int64_t step) const = 0;
  // Rank threads, before anything of `step` is enqueued. Every rank reaches every step (the stop
  // bound is common), so a verifier may hold all ranks here; it returns false, promptly, once
  // `aborted()` turns true (a rank failed). The host verifier never holds anyone.
  virtual bool step_gate(int rank, int64_t step, const std::function<bool()>& aborted) {
    (void)rank;
    (void)step;
    (void)aborted;
    return true;
  }
  // After the rank recorded the slot's event behind its output copies.
  virtual void submit(int rank, const StepSpec& step) = 0;
  // Main thread, after the rank threads joined: check every step all ranks submitted, then stop.
  // Returns the number of steps that only some ranks submitted (left unchecked after a failure).
  virtual uint64_t close() = 0;
  virtual Totals totals() const = 0;
  virtual uint64_t steps_verified() const = 0;
  virtual std::string error() const = 0;  // a CUDA error while checking ("" if none)
};

}  // namespace arf::stress
