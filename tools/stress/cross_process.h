// The cross-rank half of the check when the ranks are processes (arfusion-run). Each process
// checks its own rank's outputs against the reference; what it cannot see is whether they equal
// the other ranks' bitwise, which the contract requires (norm_out's tolerance against the double
// reference would let two ranks differ by an ulp and both pass). So each process records one hash
// per verified step over its outputs (Verifier), and at the end the processes exchange them: every
// step whose hash differs from rank 0's is a cross-rank mismatch. Host code, tested on the CPU with
// forked processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace arf {
class ProcessGroup;  // tools/common/process_group.h
}  // namespace arf

namespace arf::stress {

// Value of a step that was not verified (an unverified step is not compared). Hashes that happen
// to be 0 are stored as 1.
inline constexpr uint64_t kNoStepHash = 0;

struct CrossProcessResult {
  uint64_t steps_compared = 0;    // steps every rank verified
  uint64_t mismatched_steps = 0;  // of those, steps where some rank's hash differs from rank 0's
  int64_t first_step = -1;        // lowest mismatched step, and the lowest rank differing there
  int first_rank = -1;
  std::string error;  // the host channel failed ("" otherwise); nothing compared
};

// Collective over the group: every process passes its hashes indexed by step (kNoStepHash where
// it verified nothing). Every process receives the same result.
CrossProcessResult compare_step_hashes(ProcessGroup& group, const std::vector<uint64_t>& hashes);

}  // namespace arf::stress
