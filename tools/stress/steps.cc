// The run's steps: eager calls and graph replays (steps.h).
#include "steps.h"

namespace arf::stress {
namespace {

// Streams of their own, so that adding graphs leaves the eager calls' sequence as it was.
constexpr uint64_t kWindowStream = 0x77696e646f777300ull;  // "windows"
constexpr uint64_t kPickStream = 0x7069636b73746570ull;    // "pickstep"
// Draws a window may take before giving up on filling it (a schedule whose calls the planner
// refuses this often cannot run anyway).
constexpr int kMaxDrawsPerCall = 1000;

}  // namespace

std::vector<std::vector<CallSpec>> draw_windows(const ScheduleOptions& o, const StepOptions& steps,
                                                const BoundaryTable* table, const PlanOracle& oracle) {
  std::vector<std::vector<CallSpec>> windows;
  if (steps.graphs <= 0) return windows;
  ScheduleOptions wo = o;
  wo.seed = o.seed ^ kWindowStream;
  Generator gen(wo, table, oracle);
  for (int g = 0; g < steps.graphs; ++g) {
    std::vector<CallSpec> w;
    for (int draws = 0; static_cast<int>(w.size()) < steps.window && draws < kMaxDrawsPerCall * steps.window;
         ++draws) {
      CallSpec c = gen.next();
      if (!c.skipped) w.push_back(c);
    }
    windows.push_back(std::move(w));
  }
  return windows;
}

StepSource::StepSource(const ScheduleOptions& o, const StepOptions& steps, const BoundaryTable* table,
                       PlanOracle oracle)
    : steps_(steps), eager_(o, table, oracle), pick_(o.seed ^ kPickStream),
      windows_(draw_windows(o, steps, table, oracle)) {}

Step StepSource::next() {
  Step s;
  if (!windows_.empty() && pick_.chance(3, 4)) {
    s.graph = static_cast<int>(pick_.below(windows_.size()));
    s.calls = windows_[static_cast<size_t>(s.graph)];
    return s;
  }
  s.calls.push_back(eager_.next());
  return s;
}

}  // namespace arf::stress
