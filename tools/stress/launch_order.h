// The enqueue order of graph replays between ranks that share a GPU in this process. The library
// orders its eager calls itself (each kernel only after every device mate enqueued the previous
// one, and a call returns only once every mate enqueued it: arfusion.h, "Ranks sharing one GPU"),
// but a graph launch takes no turn inside the library: the caller must keep the same discipline.
// So before a rank launches the graph of step s it waits until every mate has enqueued the
// collectives of steps 0 .. s-1, and (unless nothing else runs on its stream: --co-resident)
// after the launch it waits until every mate has launched step s before it enqueues anything
// behind it. Each rank records its progress after every step, eager or graph.
//
// Bounded: a mate that left its loop (finished) without reaching the step ends the wait at once;
// otherwise the wait gives up after `timeout_seconds` (the rank then fails: exit 2).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace arf::stress {

class LaunchOrder {
 public:
  // devices[r]: the device of local rank r; ranks on one device are mates.
  explicit LaunchOrder(const std::vector<int>& devices);
  // Local rank r enqueued the collectives of steps 0 .. steps-1.
  void launched(int r, int64_t steps);
  // Local rank r leaves its loop: mates stop waiting for it.
  void finished(int r);
  // Waits until every mate of r has launched `steps` steps. "" when they have, else why not.
  std::string wait_for_mates(int r, int64_t steps, double timeout_seconds) const;
  bool has_mates(int r) const { return !mates_[static_cast<size_t>(r)].empty(); }

 private:
  std::vector<std::vector<int>> mates_;
  std::unique_ptr<std::atomic<int64_t>[]> launched_;
  std::unique_ptr<std::atomic<bool>[]> finished_;
};

}  // namespace arf::stress
