// The call kit's process harness: fork one child per rank, let each report through a pipe, and
// wait for all of them with a deadline, as the multi-process tests need (tests/ipc, and the CPU
// tests of the tools' host channel through tools/common/fork_ranks.h).
//
// Why this shape:
//  - every child is started before any is waited for (ranks of one job meet each other);
//  - every wait is bounded: past the deadline the children still running are SIGKILLed and
//    reaped (bounded too: one stuck in the GPU driver is named, not waited for forever);
//  - children die with the parent (PR_SET_PDEATHSIG), so a killed test binary leaves no rank
//    spinning on a GPU;
//  - each child's report pipe is drained while it runs (a full pipe would block the child).
// The harness makes no CUDA call: a parent that had created a CUDA context would hand every child
// an unusable copy of it. Call from one thread; not reentrant.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace arf::callkit {

struct ChildOutcome {
  bool started = false;  // fork succeeded
  bool hung = false;     // still running at the deadline: SIGKILLed
  bool exited = false;   // normal exit (exit_code valid); else killed by term_signal
  bool reaped = false;   // false only for a child that outlived SIGKILL by the reap bound
  pid_t pid = -1;
  int exit_code = -1;
  int term_signal = 0;
  double seconds = 0;    // from the first fork to the exit (or to the kill)
  std::string report;    // everything the child wrote to its report fd
};

// Runs in child `index` with the write end of its report pipe (close-on-exec); its return value
// is the child's exit status. An exception escaping it exits the child with status 1.
using ChildBody = std::function<int(size_t index, int report_fd)>;

// Forks `count` children running `body` and waits for them as described above. `*error` (if not
// NULL) gets "" or why not every child started (pipe or fork failure: the rest are not started;
// the started ones are still waited for).
std::vector<ChildOutcome> run_children(size_t count, const ChildBody& body,
                                       double deadline_seconds, std::string* error);

}  // namespace arf::callkit
