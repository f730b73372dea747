// The main thread's watch over a repeat (monitor.h).
#include "monitor.h"

#include <algorithm>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace arf::stress {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void on_sigint(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

void install_interrupt_handler() { std::signal(SIGINT, on_sigint); }

MirrorSnapshot read_mirror(const PinnedMirror* m) {
  const volatile PinnedMirror* v = m;
  MirrorSnapshot s;
  s.checks_done = v->checks_done;  // written last by the device: read first
  std::atomic_thread_fence(std::memory_order_acquire);
  s.wrong_total = v->wrong_total;
  s.last_call = v->last_call;
  s.first_valid = v->first_valid != 0;
  if (s.first_valid) {
    s.first.call = v->first.call;
    s.first.output = v->first.output;
    s.first.got = v->first.got;
    s.first.want = v->first.want;
    s.first.row = v->first.row;
    s.first.col = v->first.col;
  }
  return s;
}

void monitor(const MonitorInputs& in) {
  const StressOptions& o = *in.options;
  uint64_t last_total = 0;
  auto last_change = std::chrono::steady_clock::now();
  auto last_print = last_change;
  while (in.running->load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_interrupted) in.stop->request_stop("interrupted (SIGINT)");
    if (o.seconds > 0 && since(in.start) > o.seconds) in.stop->request_stop("time budget");
    uint64_t total = 0, lo = UINT64_MAX, hi = 0, wrong = 0;
    for (const RankBuffers* b : in.buffers) {
      const MirrorSnapshot s = read_mirror(b->mirror_host);
      total += s.checks_done;
      lo = std::min(lo, s.checks_done);
      hi = std::max(hi, s.checks_done);
      wrong += s.wrong_total;
    }
    if (total != last_total) {
      last_total = total;
      last_change = std::chrono::steady_clock::now();
    } else if (since(last_change) > o.hang_seconds) {
      char line[256];
      std::snprintf(line, sizeof(line),
                    "HANG: no call completed for %.0f s (checked per rank %" PRIu64 "..%" PRIu64
                    ", %" PRIu64 " wrong); the bounded waits should have expired long before",
                    o.hang_seconds, lo, hi, wrong);
      std::printf("%s\n", line);
      std::fflush(stdout);
      if (in.on_hang) in.on_hang(line);
      std::_Exit(kStressTimeout);
    }
    if (o.progress_seconds > 0 && since(last_print) >= o.progress_seconds) {
      last_print = std::chrono::steady_clock::now();
      const double t = since(in.start);
      std::printf("[%7.1f s] calls checked per rank %" PRIu64 "..%" PRIu64 " (%.0f/s), wrong %" PRIu64 "%s\n",
                  t, lo, hi, t > 0 ? static_cast<double>(lo) / t : 0.0, wrong,
                  in.stop->stop_requested() ? ", stopping" : "");
      std::fflush(stdout);
    }
  }
}

}  // namespace arf::stress
