// Process harness of the ipc transport's tests (tests/ipc): one forked child per rank, a parent
// that only forks, waits with a deadline and compares what the children reported.
//
// Why processes and why this shape:
//  - The ipc transport is one process per rank; threads of one process would share a CUDA context
//    and test the wrong thing. Children are forked from the gtest binary so each test is
//    self-contained (no launcher, no second executable).
//  - The parent never initialises CUDA: after fork only the child may, and a parent that had
//    created a context would hand every child an unusable copy of it. This file makes no CUDA
//    call; arfGetUniqueId (used to make ids) does not either.
//  - Children never return into gtest: a child runs its rank's body, prints every failure to
//    stderr prefixed "[rank R]" and _exit()s 0 (all checks passed) or 1. Its only other output is
//    a report pipe of records: 64-bit hashes of its output buffers (and plans), keyed by call and
//    buffer, and short texts. The parent compares the hashes of all ranks of a group: this is the
//    cross-rank bitwise identity check, done without shipping whole buffers between processes.
//  - Every wait is bounded: the parent polls waitpid against a deadline and SIGKILLs what is left,
//    naming the ranks that hung; children die with the parent (PR_SET_PDEATHSIG), so a killed
//    test binary leaves no rank spinning on a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "arfusion/arfusion.h"
#include "callkit/call_data.h"

namespace arf::ipc_test {

// ---- devices and seeds (no CUDA) --------------------------------------------------------------

// Device ordinals from ARF_TEST_DEVICES ("0,1", comma-separated), {0} when unset or empty.
std::vector<int> listed_devices();
// Rank r of a group runs on listed_devices()[r % count]: one GPU means every rank shares it.
int device_for_rank(int rank);

using callkit::mix_seed;
// FNV-1a over the bytes, started from `salt` (the call index, so equal buffers of different calls
// never share a hash by construction).
uint64_t hash_bytes(const void* data, size_t bytes, uint64_t salt);
// The running gtest test's full name ("Suite.Name/param"), which prefixes its children's
// messages, and a hash of it: each test draws its own data. Parent only.
std::string test_name();
uint64_t test_seed();

// The parent's deadlines (the backstop: every wait in the library is bounded well below them).
// A batch of tens of calls at world 4 on one time-sliced GPU takes seconds, not minutes.
inline constexpr double kBatchDeadlineSeconds = 180;
inline constexpr double kShortDeadlineSeconds = 60;

// "2.01 s", for messages about bounds.
std::string fmt_seconds(double seconds);

// Whether `text` names `number` after `word` (case-insensitive), as in "rank 1", "rank(s) 1, 3",
// "peer 1", "ranks: 0, 1". Used to check that error messages name the rank they are about.
bool names_number(std::string_view text, std::string_view word, int number);

// ---- one rank's process ----------------------------------------------------------------------

// Where a child sits: rank `rank` of group `group` (groups are independent communicators with
// their own ids, started at the same time).
struct RankSlot {
  int group = 0;
  int rank = 0;
  int world = 1;
  arfUniqueId id{};
};

// One group of `world` ranks with a fresh id; or `count` such groups, each with its own id.
std::vector<RankSlot> one_group(int world);
std::vector<RankSlot> groups(int count, int world);

// The child's side: who it is, and how it reports. Not thread-safe (one thread per child).
class RankContext {
 public:
  RankContext(const RankSlot& slot, int num_groups, std::string scenario, int report_fd);

  const RankSlot& slot() const { return slot_; }
  int rank() const { return slot_.rank; }
  int world() const { return slot_.world; }
  int group() const { return slot_.group; }
  int device() const { return device_for_rank(slot_.rank); }

  // Records a failed check and prints it at once to stderr, every line prefixed
  // "[rank R] (group G) <scenario>: ", so that a later hang still leaves the cause in the log.
  void fail(const std::string& what);
  bool failed() const { return failures_ > 0; }
  // Progress/diagnostic line on stderr with the same prefix; not a failure.
  void note(const std::string& what) const;

  // Report records. Keys are single-line; a key published twice keeps the last value.
  void publish_hash(const std::string& key, uint64_t hash) const;
  void publish_text(const std::string& key, const std::string& text) const;

  // Flushes stdio and _exit()s: 1 if any check failed (or `force_failure`), else 0. Never returns.
  [[noreturn]] void exit_now(bool force_failure = false) const;

 private:
  std::string prefix() const;
  void write_record(char kind, const std::string& key, const std::string& value) const;

  RankSlot slot_;
  int num_groups_ = 1;
  std::string scenario_;
  int report_fd_ = -1;
  int failures_ = 0;
};

using RankBody = std::function<void(RankContext&)>;

// ---- the parent's side -----------------------------------------------------------------------

struct ProcessResult {
  RankSlot slot;
  bool started = false;  // fork succeeded
  bool hung = false;     // still running at the deadline: killed
  bool exited = false;   // normal exit (exit_code valid); else killed by term_signal
  int exit_code = -1;
  int term_signal = 0;
  double seconds = 0;    // from fork to exit (or to the kill)
  std::map<std::string, uint64_t> hashes;
  std::map<std::string, std::string> texts;
  std::string report_error;  // a malformed record, if any

  bool passed() const { return started && !hung && exited && exit_code == 0; }
  std::string label(int num_groups) const;  // "rank 1" or "group 1 rank 0"
  std::string outcome() const;              // "exit 0", "exit 1", "signal 9 (Killed)", "hung ..."
};

// Forks one child per slot (callkit::run_children: the forking, the report pipes, the deadline and
// the kill), each running body(ctx) and then exiting (exit_now), all started before any is waited
// for. Waits at most deadline_seconds for all of them; children still running then
// are SIGKILLed (result.hung) and reaped (bounded too). Sets CUDA_DEVICE_MAX_CONNECTIONS=32 in
// each child (unless set) before the body runs, i.e. before any CUDA call. `scenario` prefixes
// the children's messages (the test's name).
std::vector<ProcessResult> run_processes(const std::string& scenario,
                                         const std::vector<RankSlot>& slots, const RankBody& body,
                                         double deadline_seconds);

// gtest checks in the parent. expect_all_passed: every child exited 0; a failure names each
// rank that did not (hung ones first, as a hang is the worse bug) and its outcome.
void expect_all_passed(const std::vector<ProcessResult>& results);
// Within each group, every rank reported the same hash for every key (and, when every rank of
// the group passed, the same set of keys, at least min_keys of them: a test that published
// nothing cannot pass this). Failures name the key and the ranks that differ, with both ranks'
// texts under the same key when they published one (plans do).
void expect_identical_hashes(const std::vector<ProcessResult>& results, size_t min_keys);

}  // namespace arf::ipc_test
