// The rank threads of the soak: one host thread and one stream per rank, issuing steps back to
// back (schedule.h), each step = inputs from the ring, the collective (eager call or graph replay),
// the consumer, the output copies for the verifier.
//
// Enqueue discipline for ranks sharing a GPU (src/transport/local.h): streams of different ranks can
// share a hardware queue, so anything a rank enqueues behind its collective of step k (consumer,
// copies, its next step) must enter the queues only after every rank on its device has enqueued
// step k — otherwise it could sit in front of a peer's step k, which our step k waits for. The
// library orders its own eager calls; graph launches and the tool's own work are ordered here
// (launched_ counters). Graph replays take no turn inside the library, so this is also what makes
// "every rank's launch i before any rank's launch i+1" hold for them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "args.h"
#include "resources.h"
#include "schedule.h"
#include "stop_control.h"
#include "step_verifier.h"

namespace arf::stress {

struct SoakConfig {
  const StressArgs* args = nullptr;
  const DispatchMap* map = nullptr;
  ScheduleOptions schedule;
  Resources* resources = nullptr;
  StepVerifier* verifier = nullptr;
  StopControl* stop = nullptr;
};

class Soak {
 public:
  explicit Soak(const SoakConfig& config);
  // Body of rank `rank`'s thread: runs steps until the budget, a stop request or a failure.
  // Catches everything (a rank thread must never take the process down with peers spinning).
  void run_rank(int rank);
  // Any thread: stop every rank now because of an error found elsewhere (e.g. the verifier).
  void abort(const std::string& why) { fail(-1, Failure::kError, why); }

  uint64_t timeouts() const { return timeouts_.load(); }
  uint64_t errors() const { return errors_.load(); }
  double verify_wait_seconds() const;
  std::string first_error() const;

 private:
  enum class Failure { kTimeout, kError };
  void soak_rank(int rank);
  bool run_step(int rank, const StepSpec& step);
  bool launch_collective(int rank, const StepSpec& step);
  bool wait_mates(int rank, int64_t steps);
  bool wait_slot(int rank, int64_t step);
  void skew(std::mt19937_64& rng) const;
  void fail(int rank, Failure kind, const std::string& message);

  SoakConfig config_;
  std::unique_ptr<std::atomic<int64_t>[]> launched_;  // [rank]: steps enqueued so far
  std::vector<std::vector<int>> mates_;               // [rank]: other ranks on its device
  std::vector<double> wait_seconds_;                  // [rank], written by that rank only
  std::atomic<bool> abort_{false};
  std::atomic<uint64_t> timeouts_{0};
  std::atomic<uint64_t> errors_{0};
  mutable std::mutex error_mu_;
  std::string first_error_;
};

}  // namespace arf::stress
