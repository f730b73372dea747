// The main thread's watch over a running repeat: time budget and Ctrl-C (a common stop through
// StopControl), progress lines, and the watchdog. Everything it reads is the ranks' pinned
// mirrors (counters.h), read without synchronizing anything.
//
// Watchdog: when no check kernel completes on any local rank for --hang-seconds, the bounded
// waits (default 10 s) should long have expired; spinning kernels cannot be cancelled, so it
// prints what it knows, calls on_hang (the JSON report) and leaves with _Exit(2).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <vector>

#include "buffers.h"
#include "options.h"
#include "stop_control.h"

namespace arf::stress {

struct MonitorInputs {
  const StressOptions* options = nullptr;
  std::vector<const RankBuffers*> buffers;  // the local ranks'
  StopControl* stop = nullptr;
  const std::atomic<int>* running = nullptr;  // rank threads still in run_rank
  std::chrono::steady_clock::time_point start;
  std::function<void(const std::string&)> on_hang;
};

// Routes SIGINT to a stop request (a second Ctrl-C kills).
void install_interrupt_handler();

// Returns when every rank thread has finished.
void monitor(const MonitorInputs& in);

// A mirror's fields, read without synchronizing (volatile loads of pinned memory).
struct MirrorSnapshot {
  uint64_t checks_done = 0;
  uint64_t wrong_total = 0;
  uint64_t last_call = 0;
  bool first_valid = false;
  FirstBad first{};
};
MirrorSnapshot read_mirror(const PinnedMirror* m);

}  // namespace arf::stress
