// The run's steps, drawn identically by every rank: an eager call from the Generator (schedule.h),
// or, with --graphs N, a replay of one of N windows of --window calls each, captured into a CUDA
// graph per rank before the first collective (graphs.h) and replayed with new data every time
// (each replay's calls take the next call indices, and the data is a hash of the index). The
// windows are drawn first, from a generator of their own, so they do not shift the eager calls;
// the choice eager / which window is a third stream. A window's calls are never skipped ones.
// With graphs, about three steps in four are replays (an engine's decode steps), the rest eager.
#pragma once

#include <cstdint>
#include <vector>

#include "call_spec.h"
#include "schedule.h"

namespace arf::stress {

struct Step {
  int graph = -1;               // -1: one eager call; else the window replayed
  std::vector<CallSpec> calls;  // one (eager, possibly skipped), or the window's (never skipped)
};

struct StepOptions {
  int graphs = 0;  // windows captured per rank (0: every step eager)
  int window = 4;  // calls per window
};

class StepSource {
 public:
  StepSource(const ScheduleOptions& o, const StepOptions& steps, const BoundaryTable* table,
             PlanOracle oracle);
  // The windows, in the order graph g is captured; empty without graphs.
  const std::vector<std::vector<CallSpec>>& windows() const { return windows_; }
  // The next step (call indices left 0: the rank loop numbers issued calls).
  Step next();

 private:
  StepOptions steps_;
  Generator eager_;
  Rng pick_;
  std::vector<std::vector<CallSpec>> windows_;
};

// The windows of a run, as StepSource draws them (the session captures them before any step).
std::vector<std::vector<CallSpec>> draw_windows(const ScheduleOptions& o, const StepOptions& steps,
                                                const BoundaryTable* table, const PlanOracle& oracle);

}  // namespace arf::stress
