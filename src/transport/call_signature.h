// Cross-rank check that every rank issues the same sequence of collectives, for ranks that share a
// process (the local transport). Each rank records the signature of its call i (pattern, requested
// algorithm and fallback, dtype, shape); the first rank to reach call i stores it, the others compare.
// A mismatch — one rank skipping a call or passing another token count — is reported with both
// signatures before the mismatched rank launches anything, instead of surfacing only as a bounded
// wait expiring in the peers. Best effort by design: calls are kept in a ring of `window` slots, so
// a rank more than `window` calls behind its fastest peer is not compared (it cannot be flagged
// wrongly either).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace arf::local {

struct CallSignature {
  int pattern = 0;
  int algorithm = 0;  // as requested (auto or forced): the plan derives from it on every rank
  int fallback = 0;
  int dtype = 0;
  int64_t num_elems = 0;
  int64_t row_elems = 0;

  bool operator==(const CallSignature&) const = default;
  std::string text() const;
};

class CallSignatureLog {
 public:
  explicit CallSignatureLog(size_t window = 4096);

  // Records rank's call `call_index` (0-based, counted per rank). InvalidArgument naming both ranks
  // and signatures when a rank already recorded a different signature for the same call index.
  // Thread-safe.
  Status record(int rank, uint64_t call_index, const CallSignature& signature);

 private:
  struct Slot {
    uint64_t call_index = UINT64_MAX;  // none yet
    int first_rank = -1;
    CallSignature signature;
  };
  std::mutex mu_;
  std::vector<Slot> ring_;
};

}  // namespace arf::local
