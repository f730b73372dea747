// The process harness of tests/ipc (ipc_test_util.h). No CUDA call anywhere in this file: it runs
// in the parent, which must stay CUDA-free so that its children may initialise CUDA after fork.
#include "ipc/ipc_test_util.h"

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "callkit/processes.h"

namespace arf::ipc_test {
namespace {

constexpr size_t kMaxReportedMismatches = 12;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Writes all of `data` (a pipe or stderr), retrying on EINTR and partial writes. Best effort: a
// reader that went away loses the rest, which the parent then reports as missing records.
void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\t', ' ');
  return s;
}

// The child's life after the kit forked it (dying with the parent is the kit's): set the
// environment CUDA reads at initialisation, run the body, exit. Exceptions are failures of this
// rank, not of the parent's gtest.
[[noreturn]] void child_main(const std::string& scenario, const RankSlot& slot, int num_groups,
                             int report_fd, const RankBody& body) {
  // Before the first CUDA call, as the other tools do (tests/gpu/gpu_main.cc says why).
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // nccl algorithm: no NVLink multicast
  RankContext ctx(slot, num_groups, scenario, report_fd);
  try {
    body(ctx);
  } catch (const std::exception& e) {
    ctx.fail(std::string("exception: ") + e.what());
  } catch (...) {
    ctx.fail("unknown exception");
  }
  ctx.exit_now();
}

// "H key\thex\n" and "T key\ttext\n" records, as RankContext writes them.
void parse_records(const std::string& raw, ProcessResult* r) {
  std::istringstream in(raw);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (line.size() < 3 || line[1] != ' ' || tab == std::string::npos) {
      r->report_error = "malformed report record: '" + line + "'";
      continue;
    }
    const std::string key = line.substr(2, tab - 2);
    const std::string value = line.substr(tab + 1);
    if (line[0] == 'H') {
      r->hashes[key] = std::strtoull(value.c_str(), nullptr, 16);
    } else if (line[0] == 'T') {
      r->texts[key] = value;
    } else {
      r->report_error = "unknown report record kind: '" + line + "'";
    }
  }
}

int count_groups(const std::vector<RankSlot>& slots) {
  int groups = 1;
  for (const RankSlot& s : slots) groups = std::max(groups, s.group + 1);
  return groups;
}

}  // namespace

// ---- devices, seeds, text ----------------------------------------------------------------------

std::vector<int> listed_devices() {
  std::vector<int> devices;
  if (const char* env = std::getenv("ARF_TEST_DEVICES"); env != nullptr) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ',')) {
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      // main() refuses a malformed list before any test runs; skipping here only avoids UB.
      if (end != item.c_str() && *end == '\0' && v >= 0 && v < 1024) {
        devices.push_back(static_cast<int>(v));
      }
    }
  }
  if (devices.empty()) devices.push_back(0);
  return devices;
}

int device_for_rank(int rank) {
  const std::vector<int> devices = listed_devices();
  return devices[static_cast<size_t>(rank) % devices.size()];
}

uint64_t hash_bytes(const void* data, size_t bytes, uint64_t salt) {
  uint64_t h = 0xCBF29CE484222325ull ^ mix_seed(salt, bytes);
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

std::string test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info == nullptr ? "none" : std::string(info->test_suite_name()) + "." + info->name();
}

uint64_t test_seed() {
  const std::string name = test_name();
  return hash_bytes(name.data(), name.size(), 0);
}

std::string fmt_seconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", seconds);
  return buf;
}

bool names_number(std::string_view text, std::string_view word, int number) {
  const std::string t = lower(text);
  const std::string w = lower(word);
  for (size_t pos = t.find(w); pos != std::string::npos; pos = t.find(w, pos + 1)) {
    size_t i = pos + w.size();
    if (t.compare(i, 3, "(s)") == 0) {
      i += 3;
    } else if (i < t.size() && t[i] == 's') {
      ++i;
    }
    while (i < t.size() && (t[i] == ' ' || t[i] == ':' || t[i] == '=' || t[i] == '#')) ++i;
    // A list: "1", "1, 3", "1,3", "1 and 3".
    while (i < t.size() && is_digit(t[i])) {
      int64_t v = 0;
      while (i < t.size() && is_digit(t[i])) {
        v = std::min<int64_t>(v * 10 + (t[i] - '0'), int64_t{1} << 40);
        ++i;
      }
      if (v == number) return true;
      if (t.compare(i, 2, ", ") == 0) {
        i += 2;
      } else if (i < t.size() && t[i] == ',') {
        ++i;
      } else if (t.compare(i, 5, " and ") == 0) {
        i += 5;
      } else {
        break;
      }
    }
  }
  return false;
}

// ---- slots -----------------------------------------------------------------------------------

std::vector<RankSlot> groups(int count, int world) {
  std::vector<RankSlot> slots;
  for (int g = 0; g < count; ++g) {
    arfUniqueId id;
    const arfStatus_t st = arfGetUniqueId(&id);
    EXPECT_EQ(st, arfSuccess) << "arfGetUniqueId: " << arfGetLastErrorString();
    for (int r = 0; r < world; ++r) slots.push_back(RankSlot{g, r, world, id});
  }
  return slots;
}

std::vector<RankSlot> one_group(int world) { return groups(1, world); }

// ---- RankContext -----------------------------------------------------------------------------

RankContext::RankContext(const RankSlot& slot, int num_groups, std::string scenario, int report_fd)
    : slot_(slot), num_groups_(num_groups), scenario_(std::move(scenario)), report_fd_(report_fd) {}

std::string RankContext::prefix() const {
  std::string p = "[rank " + std::to_string(slot_.rank) + "] ";
  if (num_groups_ > 1) p += "group " + std::to_string(slot_.group) + " ";
  return p + scenario_ + ": ";
}

void RankContext::fail(const std::string& what) {
  ++failures_;
  note("FAILED: " + what);
}

void RankContext::note(const std::string& what) const {
  // One write for the whole message: lines of concurrently failing ranks do not interleave.
  std::string out;
  std::istringstream in(what);
  std::string line;
  while (std::getline(in, line)) out += prefix() + line + "\n";
  if (out.empty()) out = prefix() + "\n";
  write_all(STDERR_FILENO, out);
}

void RankContext::write_record(char kind, const std::string& key, const std::string& value) const {
  std::string rec;
  rec += kind;
  rec += ' ';
  rec += one_line(key) + '\t' + one_line(value) + '\n';
  write_all(report_fd_, rec);
}

void RankContext::publish_hash(const std::string& key, uint64_t hash) const {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, hash);
  write_record('H', key, hex);
}

void RankContext::publish_text(const std::string& key, const std::string& text) const {
  write_record('T', key, text);
}

void RankContext::exit_now(bool force_failure) const {
  std::fflush(nullptr);
  ::_exit(failures_ > 0 || force_failure ? 1 : 0);
}

// ---- ProcessResult ---------------------------------------------------------------------------

std::string ProcessResult::label(int num_groups) const {
  std::string s = "rank " + std::to_string(slot.rank);
  return num_groups > 1 ? "group " + std::to_string(slot.group) + " " + s : s;
}

std::string ProcessResult::outcome() const {
  if (!started) return "never started (fork failed)";
  if (hung) return "hung (killed at the deadline)";
  if (exited) return "exit " + std::to_string(exit_code);
  const char* name = ::strsignal(term_signal);
  return "signal " + std::to_string(term_signal) + " (" + (name ? name : "?") + ")";
}

// ---- run_processes ---------------------------------------------------------------------------

std::vector<ProcessResult> run_processes(const std::string& scenario,
                                         const std::vector<RankSlot>& slots, const RankBody& body,
                                         double deadline_seconds) {
  const int num_groups = count_groups(slots);
  std::string error;
  const std::vector<callkit::ChildOutcome> children = callkit::run_children(
      slots.size(),
      [&](size_t i, int report_fd) -> int {
        child_main(scenario, slots[i], num_groups, report_fd, body);
      },
      deadline_seconds, &error);
  if (!error.empty()) ADD_FAILURE() << error;
  std::vector<ProcessResult> results(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const callkit::ChildOutcome& child = children[i];
    ProcessResult& r = results[i];
    r.slot = slots[i];
    r.started = child.started;
    r.hung = child.hung;
    r.exited = child.exited;
    r.exit_code = child.exit_code;
    r.term_signal = child.term_signal;
    r.seconds = child.seconds;
    if (child.started && !child.reaped) {
      ADD_FAILURE() << scenario << ": " << r.label(num_groups) << " (pid " << child.pid
                    << ") could not be reaped after SIGKILL (stuck in the driver?)";
    }
    parse_records(child.report, &r);
  }
  return results;
}

// ---- parent checks ---------------------------------------------------------------------------

void expect_all_passed(const std::vector<ProcessResult>& results) {
  int num_groups = 1;
  for (const ProcessResult& r : results) num_groups = std::max(num_groups, r.slot.group + 1);
  std::string hung, failed;
  double hung_seconds = 0;
  for (const ProcessResult& r : results) {
    if (r.hung) {
      if (!hung.empty()) hung += ", ";
      hung += r.label(num_groups);
      hung_seconds = r.seconds;
    } else if (!r.passed()) {
      if (!failed.empty()) failed += "; ";
      failed += r.label(num_groups) + ": " + r.outcome();
    }
    if (!r.report_error.empty()) {
      ADD_FAILURE() << r.label(num_groups) << ": " << r.report_error;
    }
  }
  if (!hung.empty()) {
    ADD_FAILURE() << "HANG: " << hung << " still running at the deadline ("
                  << fmt_seconds(hung_seconds)
                  << "): killed. Every wait in the library is bounded, so this is a bug; the "
                     "ranks' last messages are above, prefixed [rank R].";
  }
  if (!failed.empty()) {
    ADD_FAILURE() << "ranks that failed: " << failed
                  << " (their messages are above, prefixed [rank R])";
  }
}

void expect_identical_hashes(const std::vector<ProcessResult>& results, size_t min_keys) {
  std::map<int, std::vector<const ProcessResult*>> by_group;
  for (const ProcessResult& r : results) by_group[r.slot.group].push_back(&r);
  const int num_groups = static_cast<int>(by_group.size());
  size_t reported = 0, total = 0;
  auto report = [&](const std::string& what) {
    ++total;
    if (reported < kMaxReportedMismatches) {
      ++reported;
      ADD_FAILURE() << what;
    }
  };
  for (const auto& [group, members] : by_group) {
    const bool all_passed = std::all_of(members.begin(), members.end(),
                                        [](const ProcessResult* r) { return r->passed(); });
    std::set<std::string> keys;
    for (const ProcessResult* r : members) {
      for (const auto& [key, hash] : r->hashes) keys.insert(key);
    }
    const std::string where = num_groups > 1 ? "group " + std::to_string(group) + ": " : "";
    if (all_passed && keys.size() < min_keys) {
      report(where + "only " + std::to_string(keys.size()) + " keys (plans, outputs) reported, " +
             "expected at least " + std::to_string(min_keys));
    }
    for (const std::string& key : keys) {
      const ProcessResult* first = nullptr;
      for (const ProcessResult* r : members) {
        const auto it = r->hashes.find(key);
        if (it == r->hashes.end()) {
          // A rank that failed early reports less; that failure is already on record.
          if (all_passed) report(where + r->label(num_groups) + " did not report '" + key + "'");
          continue;
        }
        if (first == nullptr) {
          first = r;
          continue;
        }
        const uint64_t want = first->hashes.at(key);
        if (it->second != want) {
          char buf[64];
          std::snprintf(buf, sizeof(buf), " (0x%016" PRIx64 " vs 0x%016" PRIx64 ")", it->second,
                        want);
          std::string detail;  // plans also come as text: show both
          const auto mine = r->texts.find(key), theirs = first->texts.find(key);
          if (mine != r->texts.end() && theirs != first->texts.end()) {
            detail = "\n  " + r->label(num_groups) + ": " + mine->second + "\n  " +
                     first->label(num_groups) + ": " + theirs->second;
          }
          report(where + "'" + key + "' differs between " + r->label(num_groups) + " and " +
                 first->label(num_groups) + buf + ": must be bitwise identical on every rank" +
                 detail);
        }
      }
    }
  }
  if (total > reported) ADD_FAILURE() << "... and " << total - reported << " more hash mismatches";
}

}  // namespace arf::ipc_test
