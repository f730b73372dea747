// The soak's verdict: per repeat what was issued (coverage), what the check kernels found,
// what the library reported (async errors, first lost call), the cross-rank comparison; printed
// as a table, written as JSON (-J), and folded into the exit code.
//
// Wrong elements are split at the first lost call: those in calls the library declared lost
// (after a timeout) are expected garbage and do not make a run "wrong" on their own (it already
// failed with exit 2); those before it are silent corruption.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "counters.h"
#include "cross_rank.h"
#include "options.h"
#include "segment_times.h"
#include "self_test.h"
#include "rank_loop.h"
#include "stats.h"

namespace arf::stress {

struct RankReport {
  int rank = 0;
  uint64_t checks_done = 0;
  uint64_t wrong = 0;
  uint64_t wrong_before_loss = 0;  // in calls below the first lost call (all, without an error)
  bool first_valid = false;
  FirstBad first{};
  Failure failure = Failure::kNone;
  arfStatus_t status = arfSuccess;
  std::string message;
  uint64_t first_lost = UINT64_MAX;
  uint64_t input_in_buffer = 0;  // calls whose input was the communicator's input buffer
};

struct RepeatReport {
  int repeat = 0;
  double seconds = 0;
  uint64_t graph_replays = 0;  // steps that replayed a captured window (first local rank)
  IssueStats stats;          // of the first local rank (every rank's must agree)
  bool stats_agree = true;   // in one process: every rank issued the same calls
  std::vector<RankReport> ranks;
  CrossRankResult cross;
  bool cross_done = false;   // compared here (in one process, or rank 0 of a process job)
  std::string stop_reason;
  SegmentTable segments;     // --time-segments: every local rank's stream time per piece
  bool self_test_done = false;  // --corrupt-every: the verdict below was computed
  SelfTestVerdict self_test;
};

struct RunReport {
  std::vector<RepeatReport> repeats;
  std::string setup_error;    // non-empty: exit 3
  size_t boundary_combinations = 0;
  size_t boundary_points = 0;
  std::string foreign;        // the foreign kernels' footprint, as printed
  // Contexts on the ranks' devices are shared through MPS (cudaDevAttrMpsEnabled on any of them):
  // processes sharing a GPU then run concurrently instead of time-sliced, a different regime.
  bool mps = false;
};

// Wrong elements of a rank's table in calls that lie wholly below `limit` (see cross_rank.h for
// folded slots).
uint64_t wrong_below(const std::vector<TableEntry>& table, uint64_t issued, uint64_t limit);

// The exit code (options.h StressExit), --expect-failure included.
int exit_code(const StressOptions& o, const RunReport& r);

// One line per repeat: clean, or what failed where.
std::string repeat_line(const RepeatReport& r);
void print_report(const StressOptions& o, const RunReport& r);
bool write_json(const std::string& path, const StressOptions& o, const RunReport& r);
// -J's file; under arfusion-run each rank writes its own: FILE.json -> FILE.rank<r>.json.
std::string json_path_for(const StressOptions& o);

}  // namespace arf::stress
