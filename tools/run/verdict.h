// The exit-status contract of arfusion-run, as a pure function of what happened to the ranks, so
// it is tested without starting processes (test_verdict.cc). The launcher (launcher.h) records a
// RunRecord while it runs and prints the Verdict's message as its last line.
//
// Exit status, in order of precedence:
//   124        --timeout expired before any rank failed; every rank still running was stopped
//   code       the FIRST rank to fail exited with `code` (1..255, not 77); the others were stopped
//   128+sig    the first rank to fail died from signal `sig` (as a shell reports it)
//   77         no rank failed and at least one exited 77 (skipped: no GPU); ctest reports a skip
//   0          every rank exited 0
// The launcher's own errors are 2 (bad command line) and 125 (fork/pipe/poll failed); a rank
// that cannot exec its command exits 126 (not executable) or 127 (not found), which then counts
// as that rank's failure. A rank's own code may coincide with these; the message names the rank.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace arf::run {

struct RankExit {
  int rank = 0;
  pid_t pid = 0;
  int wait_status = 0;  // as waitpid(2) reports it
};

struct RunRecord {
  int num_ranks = 0;
  std::vector<RankExit> exits;     // in the order the launcher reaped them
  int first_failure = -1;          // index into exits of the first failing rank, or -1
  std::vector<int> stopped_ranks;  // still running when the launcher began stopping (SIGTERM)
  std::vector<int> killed_ranks;   // needed SIGKILL (grace expired, or a second signal)
  bool timed_out = false;
  double timeout_seconds = 0;
  double grace_seconds = 0;
  int received_signal = 0;           // first SIGINT/SIGTERM/SIGHUP the launcher got, or 0
  std::vector<int> signalled_ranks;  // ranks it was forwarded to
};

struct Verdict {
  int exit_code = 0;
  std::string message;  // one line without newline; empty when every rank exited 0 unprompted
};

// A rank "fails" unless it exited 0 or 77.
bool is_failure(int wait_status);

// 0..255 for an exit, 128+sig for a signal death.
int shell_status(int wait_status);

// "status 3" or "signal 9 (SIGKILL)".
std::string describe_wait_status(int wait_status);

// "0,2,3", or "none".
std::string format_ranks(const std::vector<int>& ranks);

// "SIGTERM" (or "signal 40" for one without a name).
std::string signal_name(int sig);

Verdict judge(const RunRecord& record);

}  // namespace arf::run
