// Policy: feasibility -> tuned table (if any) -> the built-in default table -> choice. A pure
// function of (CallShape, StaticFacts, TuningTable): no timing, no runtime state, so every rank
// computes the same Plan (algorithm AND grid). The table is a separate argument rather than a StaticFacts field:
// the facts are a small value every rank agrees on field by field, the table a host-only document.
#pragma once

#include "base/status.h"
#include "policy/plan.h"
#include "policy/tuning_table.h"

namespace arf {

// Largest grid of `block`-thread CTAs any rank may launch so that all ranks sharing a device
// co-reside: min(2, resident_ctas_per_sm(block)) * min_sm_count / max_ranks_per_device (two CTAs
// per SM for blocks up to 512 threads, one above), clamped to [1, kMaxCtas].
int co_resident_grid_cap(const StaticFacts& facts, int block);

// Grid of the streaming kernels (kernels without a protocol: src/kernels/streaming_epilogue.cuh):
// one wave of resident CTAs, each looping over rows b, b + G, ...: resident_ctas_per_sm(block)
// per SM (the __launch_bounds__ guarantee, kResidentThreadsPerSm threads; at most the hardware's
// 32 CTAs) times min_sm_count.
int protocol_free_grid_cap(const StaticFacts& facts, int block);

// The most CTAs any kernel of a call may launch on one rank under StaticFacts::max_ctas: the
// bound split between the ranks sharing a GPU (max_ctas / max_ranks_per_device); INT32_MAX when
// there is no bound. Below 1 the bound leaves a rank no CTA: no algorithm can run
// (algorithm_feasible says so).
int cta_bound(const StaticFacts& facts);

// The grid cap of a plan (never above cta_bound). Kernels that wait for peers or keep per-CTA protocol state (epochs and
// flags indexed by CTA) are held to co_resident_grid_cap. At world 1 a Lamport plan (and an
// unfused one whose inner all-reduce is Lamport) runs no protocol at all: its kernel is a
// streaming kernel, capped at protocol_free_grid_cap (plan.block must be set). Forced pull and
// twoshot at world 1 run that streaming kernel too (launch/kernel_set.h: world 1 has no other)
// but keep the smaller co-residency cap; rows are independent, so a grid changes speed, not bits.
int grid_cap(const Plan& plan, const StaticFacts& facts);

// The co-resident test mode's grid bound (StaticFacts::co_resident_test): one CTA per SM for each
// rank sharing a device, min_sm_count / max_ranks_per_device (at least 1), for every kernel of the
// call whatever its block. Each CTA of ours fits an SM alone (kernel_params.h, the launch bounds;
// launch.cu checks shared memory at creation), so with at most min_sm_count CTAs of the mates in
// all, an SM without any of them is free whenever one waits to be placed: every mate's CTAs are
// resident at once, a rank one call ahead included, and no spinning CTA can starve a mate.
int co_resident_test_grid_cap(const StaticFacts& facts);

// Whether `algorithm` can run this shape on this communicator (capacity of its buffers, world size).
// On false, *why says which limit.
bool algorithm_feasible(Algorithm algorithm, const CallShape& shape, const StaticFacts& facts,
                        std::string* why);

// The plan for a validated call. A forced algorithm that is not feasible -> arfUnsupported.
// Quantized patterns also get a fallback level (Plan::fallback_level): auto -> 1 with a fused
// algorithm, 3 with algorithm unfused; a forced level 2 keeps the fused algorithm and adds the
// quant kernel; a forced level 3 turns a chosen or forced fused algorithm into the inner all-reduce
// of kUnfused; a forced level 1 or 2 with algorithm unfused -> arfUnsupported. Any non-auto level
// on a non-quantized pattern, or one outside 0..3 -> arfInvalidArgument.
//
// Defaults (auto, and the inner all-reduce of unfused): world 1 -> oneshot_lamport; otherwise the
// built-in default table (default_tuning_table.h; policy.cc, choose_auto, says in which order its
// choices and the fallbacks are tried), read by the call's bytes per rank; a quantized call at
// auto level takes its default range's level (1 in every shipped entry).
//
// Tuned table (tuning_table.h): consulted only when the algorithm is auto (and, for quantized
// patterns, the level too); its choice must be feasible (algorithm_feasible), else the default
// choice runs and the reason says "tuned table had no feasible choice (...) -> default ...". A
// table never makes a call fail that the defaults would run. No entry -> the defaults, unchanged.
// The inner all-reduce of unfused is always the default choice.
//
// In the co-resident test mode the plan has no gate, grid and epilogue_grid at most
// co_resident_test_grid_cap, and its reason starts with kCoResidentTestReason.
inline constexpr const char* kCoResidentTestReason = "co-resident test mode";

Result<Plan> make_plan(const CallShape& shape, const StaticFacts& facts,
                       const TuningTable* table = nullptr);

}  // namespace arf
