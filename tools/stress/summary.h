// What a soak found: running totals (merged by the verifier threads), the run's facts, the text
// report, the JSON summary (-J) and the exit code.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "args.h"
#include "schedule.h"
#include "verify.h"

namespace arf::stress {

struct Totals {
  uint64_t steps = 0;
  uint64_t calls = 0;
  uint64_t graph_replays = 0;
  uint64_t wrong_elems = 0;
  uint64_t cross_rank_elems = 0;
  uint64_t bad_calls = 0;
  bool has_first = false;  // the first bad call (lowest call index)
  Mismatch first;
  CallSpec first_call;
  int64_t first_step = 0;
  int first_graph = -1;
  std::vector<uint64_t> calls_per_combo;
  std::set<std::pair<size_t, int64_t>> shapes;  // (combo, tokens) verified

  void add_call(const CallSpec& call, const CallCheck& check, int64_t step, int graph);
  void merge(const Totals& other);
  // Boundary points of the map that were verified at least once.
  size_t boundary_points_hit(const DispatchMap& map) const;
};

// Facts about the run the report states besides the totals.
struct RunFacts {
  std::string variant;          // library build: "release", "no_end_barrier", ...
  std::string git_commit;       // ARF_GIT_COMMIT, if set
  double elapsed_seconds = 0;   // soak only (after setup)
  double setup_seconds = 0;
  double verify_wait_seconds = 0;  // rank threads waiting for a free output slot, summed
  std::string verifier = "host";  // "host" (CPU reference, verifier.h) or "gpu" (gpu_verifier.h)
  int verify_threads = 0;         // host verifier threads (0 with the GPU verifier)
  int64_t pinned_bytes = 0;
  int64_t device_bytes = 0;
  uint64_t timeouts = 0;        // ranks that saw arfTimeout / a failed communicator
  uint64_t errors = 0;          // CUDA or API errors during the soak
  uint64_t unverified_steps = 0;  // submitted by some ranks only (after a failure)
  bool hang = false;            // the watchdog fired
  std::string first_error;      // first timeout or error message
  // Under arfusion-run: steps compared with the other processes' ranks by hash (cross_process.h).
  bool cross_process = false;
  uint64_t cross_process_steps = 0;
  uint64_t cross_process_mismatched_steps = 0;
  int64_t cross_process_first_step = -1;
  int cross_process_first_rank = -1;
};

// The exit code (args.h) for these results.
int exit_code(const StressArgs& args, const Totals& totals, const RunFacts& facts);

// Human-readable report on stdout.
void print_header(const StressArgs& args, const DispatchMap& map, const std::string& variant);
void print_boundaries(const DispatchMap& map);
void print_progress(const Totals& totals, double seconds);
void print_result(const StressArgs& args, const DispatchMap& map, const Totals& totals,
                  const RunFacts& facts);

// -J FILE. Returns false (with a message on stderr) if the file cannot be written.
bool write_json(const std::string& path, const StressArgs& args, const DispatchMap& map,
                const Totals& totals, const RunFacts& facts);

}  // namespace arf::stress
