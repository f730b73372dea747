// Policy: feasibility -> default table -> choice. A pure function of (CallShape, StaticFacts): no
// timing, no runtime state, so every rank computes the same Plan (algorithm AND grid).
#pragma once

#include "core/status.h"
#include "policy/plan.h"

namespace arf {

// Largest grid any rank may launch so that all ranks sharing a device co-reside:
// kMinCtasPerSm * min_sm_count / max_ranks_per_device, clamped to [1, kMaxCtas].
int co_resident_grid_cap(const StaticFacts& facts);

// Whether `algorithm` can run this shape on this communicator (capacity of its buffers, world size).
// On false, *why says which limit.
bool algorithm_feasible(Algorithm algorithm, const CallShape& shape, const StaticFacts& facts,
                        std::string* why);

// The plan for a validated call. A forced algorithm that is not feasible -> arfUnsupported.
Result<Plan> make_plan(const CallShape& shape, const StaticFacts& facts);

}  // namespace arf
