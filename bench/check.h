// --check: one verified call before each timed (size, algorithm).
//
// Every rank gets fresh data (seeded by the call index, so an algorithm that returns a previous
// call's result is caught) and poisoned outputs (NaN bytes, so an unwritten element is caught),
// runs one call, and its outputs are compared with the CPU reference — allreduce and residual_out
// bitwise, norm_out within ref::norm_within_tolerance — and bitwise with rank 0's outputs.
#pragma once

#include <cstdint>
#include <string>

#include "context.h"

namespace arf::bench {

struct CheckResult {
  int64_t wrong = -1;  // elements wrong, summed over ranks and outputs; -1 if the call failed
  std::string detail;  // first mismatch ("" when none)
  std::string error;   // why the call could not be checked ("" when it ran)
};

// Leaves input set 0 holding the check's data; the other sets keep their allocation-time data.
CheckResult check_call(BenchContext& ctx, const CallSpec& spec, uint64_t call);

}  // namespace arf::bench
