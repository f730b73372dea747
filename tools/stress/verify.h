// Checks one call's outputs on every rank against the precomputed reference (dataset.h) and across
// ranks. What counts as wrong follows the numerics contract (docs/architecture.md):
//  - allreduce_out and residual_out: bitwise equal to the reference;
//  - norm_out: within ref::norm_within_tolerance of the double-precision value;
//  - every output bitwise identical on every rank (compared with rank 0), counted separately as
//    cross-rank mismatches: a rank that read a peer's stale buffer differs from the others even
//    where both happen to stay within the norm tolerance.
// Pure host code, thread-safe (reads only), unit-tested in test_stress.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dataset.h"
#include "schedule.h"

namespace arf::stress {

// One rank's outputs of one call, each [tokens * hidden]; null where the pattern has none.
struct RankOutputs {
  const uint16_t* allreduce = nullptr;
  const uint16_t* residual_out = nullptr;
  const uint16_t* norm_out = nullptr;
};

struct Mismatch {
  uint64_t call = 0;
  int rank = 0;
  std::string output;   // "allreduce_out", "residual_out", "norm_out"
  std::string against;  // "reference" or "rank 0"
  int64_t row = 0;      // row of the call (0 .. tokens-1)
  int64_t col = 0;
  uint16_t got = 0;
  uint16_t want = 0;    // reference bits (rounded norm) or rank 0's bits
  double want_exact = 0;  // norm: the unrounded reference; else the value of `want`
  std::string describe(DType dtype) const;
};

struct CallCheck {
  uint64_t wrong_elems = 0;       // outside the contract w.r.t. the reference, all ranks
  uint64_t cross_rank_elems = 0;  // differing from rank 0's output, all ranks
  bool has_mismatch = false;
  Mismatch first;                 // lowest rank, then output, row, column

  bool ok() const { return wrong_elems == 0 && cross_rank_elems == 0; }
};

// outputs[rank]. `set` must be the call's data set (call.set) with its reference.
CallCheck check_call(const CallSpec& call, const DataSet& set, int64_t hidden, DType dtype,
                     const std::vector<RankOutputs>& outputs);

}  // namespace arf::stress
