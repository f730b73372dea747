// The plan of one call: which algorithm runs, with which grid, decided by policy.cc from the shape
// and StaticFacts only, so every rank computes the same plan (a rank planning another grid would pair
// CTAs its peers do not have).
#pragma once

#include <cstdint>
#include <string>

#include "common/kernel_params.h"
#include "common/launch_plan.h"

namespace arf {

// Facts fixed at communicator creation and identical on every rank (agreed during the rendezvous).
struct StaticFacts {
  int world = 1;
  DType dtype = DType::kBf16;
  int64_t max_tokens = 0;
  int64_t max_hidden = 0;
  int64_t oneshot_max_tokens = 0;  // Lamport capacity in tokens of max_hidden
  int min_sm_count = 0;            // smallest multiprocessor count among the ranks' devices
  int max_ranks_per_device = 1;    // >1 when ranks share a GPU (virtual ranks)
  // Every rank created its NCCL communicator at init (agreed), so the `nccl` algorithm can run.
  bool nccl = false;
  // The custom (peer-memory) algorithms may run. False only when the ipc transport found a pair
  // of ranks that cannot reach each other's memory and every rank has NCCL: then every call runs
  // on `nccl` (agreed at init, like everything here).
  bool custom = true;
  // The co-resident test mode (ARF_TEST_CO_RESIDENT=1 on every rank at creation; docs/protocol.md,
  // "The co-resident test mode"): no shared-device gate, no return wait, and every grid bounded so
  // that all device mates' CTAs are resident at once (policy.h, co_resident_test_grid_cap). A
  // testing knob: arfPlanFacts_t does not carry it, so arfPlanFromFacts plans the normal mode.
  bool co_resident_test = false;
  // arfCommConfig_t::max_ctas: the most CTAs one call keeps on a GPU at once, over every rank on
  // it (0: no bound). Agreed at init (equal on every rank); policy.h, cta_bound.
  int max_ctas = 0;
};

// The shape of one call, as the planner sees it.
struct CallShape {
  Pattern pattern = Pattern::kResidualRmsNorm;
  Algorithm requested = Algorithm::kAuto;
  // arfFallbackLevel_t the caller asked for: 0 = auto, else the forced level 1..3. Only quantized
  // patterns take a non-auto level (the rule is in arfusion.h, beside arfFallbackLevel_t).
  int requested_fallback = 0;
  DType dtype = DType::kBf16;
  int64_t num_elems = 0;  // per rank
  int row_elems = 0;      // hidden (allreduce of a flat count: the chosen row width)
  int64_t num_rows = 0;
  // A sandwich call (arfFusedArgs_t::post_gamma set): every kernel chain runs it (the post-norm is
  // part of the shared epilogue, kernels/row_epilogue.cuh), so it changes no choice, only the
  // reason; allreduce takes none.
  bool post_norm = false;
};

// The launch part (LaunchPlan: algorithm, inner_allreduce, grid, block, epilogue_grid,
// shared_device_gate) plus what the planner decides for its callers.
struct Plan : LaunchPlan {
  int num_kernels = 1;
  bool forced = false;
  // Quantized patterns: 1 = one kernel (all-reduce + norm + quant, algorithm fused); 2 = the fused
  // algorithm writes the norm, then a quant kernel; 3 = algorithm kUnfused: the inner all-reduce
  // kernel, then norm + quant. Other patterns: always 1 (their unfused split is algorithm kUnfused).
  int fallback_level = 1;
  std::string reason;
};

}  // namespace arf
