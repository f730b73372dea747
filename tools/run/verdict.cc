// The exit-status contract of arfusion-run (verdict.h).
#include "verdict.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstring>

#include "args.h"

namespace arf::run {
namespace {

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", seconds);
  return text;
}

// "; SIGKILL after the 5 s grace: ranks 2,3", or "".
std::string killed_clause(const RunRecord& r) {
  if (r.killed_ranks.empty()) return "";
  return "; SIGKILL (grace " + seconds_text(r.grace_seconds) +
         " over, or a second signal): ranks " + format_ranks(r.killed_ranks);
}

// Nothing failed: 77 if any rank skipped, else 0 (silent unless a signal was forwarded).
Verdict judge_clean(const RunRecord& r, const std::string& lead, bool announce_success) {
  std::vector<int> skipped;
  for (const RankExit& e : r.exits) {
    if (WIFEXITED(e.wait_status) && WEXITSTATUS(e.wait_status) == kExitSkipped) {
      skipped.push_back(e.rank);
    }
  }
  if (!skipped.empty()) {
    const bool all = static_cast<int>(skipped.size()) == r.num_ranks;
    return {kExitSkipped, lead + (all ? "every rank" : "ranks " + format_ranks(skipped)) +
                              " exited 77 (skipped)" + (all ? "" : ", the others 0")};
  }
  if (!announce_success) return {0, ""};
  return {0, lead + "every rank exited 0"};
}

}  // namespace

bool is_failure(int wait_status) {
  if (!WIFEXITED(wait_status)) return true;
  const int code = WEXITSTATUS(wait_status);
  return code != 0 && code != kExitSkipped;
}

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kExitLauncherError;  // stopped/continued are never reaped as exits
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return "status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return "signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
  }
  return "wait status " + std::to_string(wait_status);
}

std::string format_ranks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "none";
  std::string text;
  for (int rank : ranks) {
    if (!text.empty()) text += ',';
    text += std::to_string(rank);
  }
  return text;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

Verdict judge(const RunRecord& r) {
  std::string lead = "arfusion-run: ";
  if (r.received_signal != 0) {
    lead += "received " + signal_name(r.received_signal) + ", forwarded to ranks " +
            format_ranks(r.signalled_ranks) + "; ";
  }
  if (r.timed_out) {
    return {kExitTimeout, lead + "timeout after " + seconds_text(r.timeout_seconds) +
                              "; ranks still running, stopped: " + format_ranks(r.stopped_ranks) +
                              killed_clause(r) + "; exit " + std::to_string(kExitTimeout)};
  }
  if (r.first_failure >= 0) {
    const RankExit& e = r.exits[static_cast<size_t>(r.first_failure)];
    const int code = shell_status(e.wait_status);
    return {code, lead + "rank " + std::to_string(e.rank) + " (pid " + std::to_string(e.pid) +
                      ") exited with " + describe_wait_status(e.wait_status) +
                      " first; stopped ranks " + format_ranks(r.stopped_ranks) + killed_clause(r) +
                      "; exit " + std::to_string(code)};
  }
  return judge_clean(r, lead, /*announce_success=*/r.received_signal != 0);
}

}  // namespace arf::run
