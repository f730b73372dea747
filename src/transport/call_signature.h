// Cross-rank check that every rank issues the same sequence of collectives, for ranks that share a
// process (the local transport). Each rank records its call i: the signature (pattern, requested
// algorithm and fallback, dtype, shape) of a call it launches, or that it refused the call before
// launch (validation or planning said no), with the reason. Each rank's entry is compared with
// every peer's entry of the same call index already recorded:
//  - two launched calls with different signatures: a mismatch (one rank skipping a call or
//    passing another token count), reported with both signatures before the later rank launches;
//  - a refused call against a launched one: the ranks diverged, reported to the later rank naming
//    the refusing rank and its reason (a launching rank must not launch; a refusing rank learns
//    that its peer's kernel waits for a call it will never make);
//  - calls every rank refused agree, whatever their signatures: nothing was launched anywhere,
//    so the communicator stays usable (a bad call made on every rank).
// Best effort by design: calls are kept in a ring of `window` slots per rank, so a rank more than
// `window` calls behind a peer is not compared with it (nor ever flagged wrongly).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "common/kernel_params.h"

namespace arf::local {

struct CallSignature {
  int pattern = 0;
  int algorithm = 0;  // as requested (auto or forced): the plan derives from it on every rank
  int fallback = 0;
  int dtype = 0;
  int64_t num_elems = 0;
  int64_t row_elems = 0;
  int post_norm = 0;  // 1: a sandwich call (post_gamma set)

  bool operator==(const CallSignature&) const = default;
  std::string text() const;
};

// One rank's call i as the check sees it.
struct CallEntry {
  CallSignature signature;  // of a launched call (unused when refused)
  bool refused = false;     // refused before launch on this rank
  std::string reason;       // why, when refused (the refusal's message)
};

// Compares `mine` (rank `rank`'s call `call_index`) with `theirs` (rank `peer`'s, same index):
// OK when they agree (equal signatures, or both refused); InvalidArgument for two launched calls
// that differ; CommFailed naming the refusing rank and its reason when one refused and the other
// launched. Shared by both transports' logs, so their verdicts read the same.
Status compare_calls(uint64_t call_index, int rank, const CallEntry& mine, int peer,
                     const CallEntry& theirs);

class CallSignatureLog {
 public:
  explicit CallSignatureLog(size_t window = 1024);

  // Records rank's call `call_index` (0-based, counted per rank; refused calls with tokens take
  // their place like launched ones) and compares it with every peer's entry of that call already
  // recorded (compare_calls; the first disagreement is returned). Thread-safe.
  Status record(int rank, uint64_t call_index, const CallEntry& entry);
  // A launched call with this signature.
  Status record(int rank, uint64_t call_index, const CallSignature& signature) {
    return record(rank, call_index, CallEntry{signature, false, {}});
  }

 private:
  struct Slot {
    uint64_t call_index = UINT64_MAX;  // none yet
    CallEntry entry;
  };
  std::mutex mu_;
  std::vector<std::array<Slot, kMaxRanks>> ring_;  // [call % window][rank]
};

}  // namespace arf::local
