// Enqueue order of graph replays between device mates (launch_order.h).
#include "launch_order.h"

#include <chrono>
#include <thread>

namespace arf::stress {

LaunchOrder::LaunchOrder(const std::vector<int>& devices)
    : mates_(devices.size()),
      launched_(new std::atomic<int64_t>[devices.size()]),
      finished_(new std::atomic<bool>[devices.size()]) {
  for (size_t r = 0; r < devices.size(); ++r) {
    launched_[r].store(0);
    finished_[r].store(false);
    for (size_t m = 0; m < devices.size(); ++m) {
      if (m != r && devices[m] == devices[r]) mates_[r].push_back(static_cast<int>(m));
    }
  }
}

void LaunchOrder::launched(int r, int64_t steps) { launched_[r].store(steps, std::memory_order_release); }

void LaunchOrder::finished(int r) { finished_[r].store(true, std::memory_order_release); }

std::string LaunchOrder::wait_for_mates(int r, int64_t steps, double timeout_seconds) const {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_seconds));
  for (int mate : mates_[static_cast<size_t>(r)]) {
    while (launched_[mate].load(std::memory_order_acquire) < steps) {
      // Read `finished` first: a mate that launched and then finished is seen as launched.
      if (finished_[mate].load(std::memory_order_acquire) && launched_[mate].load(std::memory_order_acquire) < steps) {
        return "rank " + std::to_string(mate) + " stopped before step " + std::to_string(steps - 1);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return "rank " + std::to_string(mate) + " did not launch step " + std::to_string(steps - 1) +
               " within " + std::to_string(static_cast<int>(timeout_seconds)) + " s";
      }
      std::this_thread::yield();
    }
  }
  return "";
}

}  // namespace arf::stress
