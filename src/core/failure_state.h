// A communicator's failure state, and the reading of the device's error records, shared by the
// thread that issues the communicator's calls and any thread that polls arfCommGetAsyncError or
// arfCommGetFirstLostCall meanwhile (a watchdog thread, as engines poll NCCL). Every member is
// safe to call from several threads at once; the first failure recorded wins and stays.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "base/status.h"
#include "common/kernel_params.h"

namespace arf {

class FailureState {
 public:
  // Whether a failure is recorded. Never turns false again.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Records `why` unless a failure is recorded already; returns the recorded one (the first).
  // *recorded says whether this call recorded it (so the caller announces it once).
  Status fail(Status why, bool* recorded = nullptr);
  // The recorded failure, or ok while healthy.
  Status failure() const;
  // The first call whose outputs may be lost as the host knows it (a call this rank failed on
  // before its kernels ran, or the call a peer refused): lowered, never raised. UINT64_MAX: none.
  void note_lost_call(uint64_t call);
  uint64_t lost_call() const { return lost_call_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  Status failure_;  // guarded by mu_
  std::atomic<uint64_t> lost_call_{UINT64_MAX};
};

// A copy of an error record that the device may be writing while we read: nullopt while its code
// is 0. The kernel writes the details first and the code last, after a system fence, so an
// acquire load of a non-zero code makes the details complete (protocol.cuh, record_failure).
std::optional<ErrorRecord> read_error_record(const ErrorRecord* record);

// The first record of `records` (in order) that holds an error, or nullopt.
std::optional<ErrorRecord> first_error_record(const std::vector<const ErrorRecord*>& records);

}  // namespace arf
