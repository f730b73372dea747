// One cell of a table: plan, optionally check, then time one column (an arfusion algorithm or the
// NCCL baseline) for one shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "context.h"
#include "nccl_baseline.h"
#include "results.h"
#include "timing.h"

namespace arf::bench {

// Asks arfPlan (pure and rank-symmetric, so rank 0's answer is every rank's) for the cell's call
// before anything launches: fills column, chosen algorithm and reason, or the error (unsupported
// when the plan refuses a forced choice). *plan receives the plan when it succeeds.
Cell planned_cell(BenchContext& ctx, const CallSpec& spec, const char* column, arfPlan_t* plan);

// `call` numbers the checks of a run so that each one gets fresh data.
Cell measure_algorithm(BenchContext& ctx, const CallSpec& spec, const TimingConfig& cfg,
                       uint64_t* call);

// The NCCL column (unchecked: NCCL's sum order differs from the contract's fixed rank order).
Cell measure_nccl(BenchContext& ctx, const NcclBaseline& nccl, const CallSpec& spec,
                  const TimingConfig& cfg);

// One row of algorithm columns (then the NCCL baseline's, when `nccl` is not null) for `spec`. A
// failed communicator refuses every later call (arfCommFailed), so after the first failure the
// row's remaining cells are marked skipped and *stopped says why; the caller ends the sweep.
Row measure_algorithms_row(BenchContext& ctx, const std::vector<arfAlgorithm_t>& algorithms,
                           const NcclBaseline* nccl, CallSpec spec, const TimingConfig& cfg,
                           uint64_t* calls, std::string* stopped);

}  // namespace arf::bench
