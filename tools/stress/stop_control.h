// Ends a soak at one common step on every rank when a stop is requested at an arbitrary moment (time
// budget, first wrong call, Ctrl-C, a failure): a rank that stopped one step earlier than its peers
// would leave them spinning in a collective it never joins. Host-only, unit-tested.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace arf::stress {

class StopControl {
 public:
  explicit StopControl(int world);
  // Rank `rank`, before step `step` (increasing). True: run it. After a request, every rank runs
  // exactly the steps below one common bound (it may spin briefly while the bound is published).
  bool may_run(int rank, int64_t step);
  // Any thread, any number of times.
  void request();
  bool requested() const { return requested_.load(); }

 private:
  static constexpr int64_t kUnset = INT64_MIN;
  int world_;
  std::unique_ptr<std::atomic<int64_t>[]> announced_;  // [rank]: last step it considered
  std::atomic<bool> requested_{false};
  std::atomic<int64_t> stop_at_{kUnset};
};

}  // namespace arf::stress
