// StopControl (stop_control.h).
#include "stop_control.h"

#include <algorithm>
#include <thread>

namespace arf::stress {

StopControl::StopControl(int world) : world_(world), announced_(new std::atomic<int64_t>[world]) {
  for (int r = 0; r < world; ++r) announced_[r].store(-1);
}

bool StopControl::may_run(int rank, int64_t step) {
  // Dekker-style, all sequentially consistent: either request() reads our announcement (and puts
  // the bound above it), or we read its flag and obey the bound it publishes. A rank that ran a
  // step without seeing the flag had announced it before request() read the announcements.
  announced_[rank].store(step);
  if (!requested_.load()) return true;
  int64_t bound;
  while ((bound = stop_at_.load()) == kUnset) std::this_thread::yield();
  return step < bound;
}

void StopControl::request() {
  if (requested_.exchange(true)) return;
  int64_t highest = -1;
  for (int r = 0; r < world_; ++r) highest = std::max(highest, announced_[r].load());
  stop_at_.store(highest + 1);
}

}  // namespace arf::stress
