// What the launcher (launch.h) reads of a call's plan: which kernels run, with which grids and
// block. The planner (policy/plan.h) extends it with what only it and its callers read (kernel
// count, fallback level, forced, reason); the launcher never sees those, so kernels need nothing
// from the policy layer. Host C++ only.
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/int_math.h"
#include "common/kernel_params.h"

namespace arf {

struct LaunchPlan {
  Algorithm algorithm = Algorithm::kOneshotLamport;  // never kAuto
  Algorithm inner_allreduce = Algorithm::kOneshotLamport;  // unfused: the all-reduce kernel's algorithm
  int grid = 1;    // CTAs, identical on every rank
  int block = 32;  // threads per CTA
  // CTAs of the second kernel of a two-kernel plan (unfused, nccl, level 2/3: a streaming kernel
  // without a protocol, policy.h protocol_free_grid_cap); also set, unused, for one-kernel plans.
  int epilogue_grid = 1;
  // Ranks share a GPU (virtual ranks, or processes on one GPU): the plan owes the one-CTA
  // shared-device gate kernel before the collective kernel (launch.cu; not counted in
  // Plan::num_kernels, which counts the call's collective and epilogue kernels). Decided from the
  // agreed facts, the same on every rank. Which ranks launch it is a per-rank static fact
  // (launches_shared_device_gate): in a mixed placement a rank alone on its GPU has nobody to wait
  // for and launches none, while its collective keeps the plan's algorithm and grid like every
  // rank's.
  bool shared_device_gate = false;
};

// Whether a rank launches the shared-device gate before its collective kernel: the plan owes it
// and the rank has device mates (KernelParams::device_mates, fixed at creation). The gate waits
// for exactly those mates, so a rank without any would only spend a launch.
inline bool launches_shared_device_gate(const LaunchPlan& plan, uint32_t device_mates) {
  return plan.shared_device_gate && device_mates != 0;
}

// Threads per CTA for a row of row_elems columns: one 16-byte vector per thread up to
// kNarrowBlockThreads, then two each up to 8192 columns (so every row an engine of today runs keeps
// the 512-thread block, two CTAs per SM), then ceil(vectors / 2) threads rounded up to whole warps,
// up to kMaxBlockThreads (2 vectors each at most: kMaxVecsPerThread); 0 when no block can hold the
// row. A pure function of the shape, shared by the planner and the launcher so that fused and
// unfused kernels reduce a row identically.
inline int block_threads_for_row(int row_elems) {
  if (row_elems <= 0) return 0;
  const int64_t vecs = ceil_div(row_elems, kElemsPerVec);
  const int64_t narrow = std::min<int64_t>(kNarrowBlockThreads, round_up(vecs, 32));
  if (vecs <= narrow * kMaxVecsPerThread) return static_cast<int>(narrow);
  const int64_t wide = round_up(ceil_div(vecs, kMaxVecsPerThread), 32);
  // Past kMaxHidden a thread would need more than kMaxVecsPerThread vectors (registers it lacks).
  return wide <= kMaxBlockThreads ? static_cast<int>(wide) : 0;
}

}  // namespace arf
