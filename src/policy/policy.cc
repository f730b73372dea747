// Policy: feasibility mask -> tuned table or default thresholds -> choice, in the spirit of NCCL's
// sym_kernels.cc. Everything here is a pure function of (CallShape, StaticFacts, TuningTable): no
// timing, no device queries, no
// per-rank state, so every rank computes the same Plan (an engine has hung
// because per-rank launch shapes diverged). The block size comes from common/launch_plan.h
// (block_threads_for_row), the one definition the planner, the launcher and the CPU tests share.
#include "policy/policy.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "base/int_math.h"
#include "base/names.h"
#include "common/launch_plan.h"

namespace arf {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;

const char* algorithm_name(Algorithm a) { return arf::algorithm_name(static_cast<arfAlgorithm_t>(a)); }

bool world_supported(int world) { return world == 1 || world == 2 || world == 4 || world == 8; }

// Bytes per rank above which one-shot Lamport stops winning on Hopper with NVLink. One-shot moves
// world x the data of two-shot, so the limit shrinks as the world grows. The starting points were
// the fused one-shot crossovers other Hopper implementations ship (about 8 MiB per rank at world 2,
// 1-2 MiB at world 4, 0.5 MiB at world 8); world 2's and world 4's were then measured on ours. World 1 never
// communicates, so any size is "one-shot".
int64_t oneshot_limit_bytes(int world) {
  switch (world) {
    case 2: return 8 * kMiB;
    case 4: return 256 * kKiB;  // measured, 4x H200 NV18 (6774abd): two-shot wins from 512 KiB
    case 8: return 512 * kKiB;
    default: return INT64_MAX;
  }
}

// "16 KiB", "2.5 MiB", "96 B": reasons are read by people, so sizes are in the unit they think in.
std::string format_bytes(int64_t bytes) {
  char buf[32];
  if (bytes < kKiB) {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  } else if (bytes < kMiB) {
    if (bytes % kKiB == 0) {
      std::snprintf(buf, sizeof(buf), "%lld KiB", static_cast<long long>(bytes / kKiB));
    } else {
      std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(bytes) / kKiB);
    }
  } else if (bytes % kMiB == 0) {
    std::snprintf(buf, sizeof(buf), "%lld MiB", static_cast<long long>(bytes / kMiB));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / kMiB);
  }
  return buf;
}

// Checks shared by every algorithm: the kernels are instantiated for these worlds and row widths only.
bool shape_feasible(const CallShape& shape, const StaticFacts& facts, std::string* why) {
  if (!world_supported(facts.world)) {
    *why = "world " + std::to_string(facts.world) + " is not 1, 2, 4 or 8";
    return false;
  }
  if (shape.row_elems <= 0 || shape.row_elems % kElemsPerVec != 0 ||
      block_threads_for_row(shape.row_elems) == 0 || shape.row_elems > facts.max_hidden) {
    *why = "row of " + std::to_string(shape.row_elems) + " elements is not a multiple of 8 in [8, " +
           std::to_string(std::min<int64_t>(facts.max_hidden, kMaxHidden)) + "]";
    return false;
  }
  if (shape.num_elems < 0 || shape.num_rows < 0 ||
      shape.num_elems > shape.num_rows * shape.row_elems) {
    *why = "inconsistent shape: " + std::to_string(shape.num_elems) + " elements in " +
           std::to_string(shape.num_rows) + " rows of " + std::to_string(shape.row_elems);
    return false;
  }
  return true;
}

// Ranks sharing a device have no links between them: every push and pull crosses the one HBM and
// every rank's CTAs share its SMs, so the NVLink limits above do not apply. Measured on one H200
// with every rank on it (plain all-reduce 16 KiB-64 MiB, residual + RMSNorm at hidden 8192, 1-2048
// tokens, every algorithm forced; gpu_acceptance.sh policy):
//   2 ranks: oneshot_lamport is 15-31% faster than two-shot up to 2 MiB; above, oneshot_pull is
//            5-34% faster than two-shot.
//   4 ranks: oneshot_lamport is 6-38% faster up to 512 KiB; above, oneshot_pull wins the plain
//            all-reduce by 1-24%, two-shot the fused epilogue by 1-5% up to 4 MiB and oneshot_pull
//            it by 2-4% from 8 MiB.
// The 2-rank plain limit and the 4-rank fused switch to oneshot_pull were re-measured with this
// rule in place (plain 2 MiB oneshot_lamport 10.39 vs oneshot_pull 10.83 us; fused 2048 tokens
// oneshot_pull 276.17 vs two-shot 287.94 us), after the entry change that made oneshot_pull 9%
// faster there. With both changes auto was within 2% of the fastest column at every size measured.
//   8 ranks: two-shot within 2% of the best at every size; oneshot_pull 5-42% and
//            oneshot_lamport 9-307% slower.
// Worlds where only some ranks share a device (unmeasured) take two-shot, as all sharing did
// before the measurement. Returns nothing when the rule's algorithms cannot run this call.
std::optional<Plan> choose_shared_device(const CallShape& shape, const StaticFacts& facts,
                                         int64_t bytes, bool lamport_ok, bool twoshot_ok) {
  const bool all_on_one = facts.max_ranks_per_device == facts.world;
  const bool flat = shape.pattern == Pattern::kAllReduce;
  int64_t lamport_limit = 0;
  int64_t pull_above = -1;  // oneshot_pull past the Lamport limit for calls over this (-1: never)
  if (all_on_one && facts.world == 2) {
    lamport_limit = 2 * kMiB;
    pull_above = 0;
  } else if (all_on_one && facts.world == 4) {
    lamport_limit = 512 * kKiB;
    pull_above = flat ? 0 : 4 * kMiB;
  }
  const Algorithm above = pull_above >= 0 && bytes > pull_above ? Algorithm::kOneshotPull : Algorithm::kTwoshot;
  const std::string sharing = "auto: " + std::to_string(facts.max_ranks_per_device) +
                              " ranks share a device (no links; measured on one GPU)";
  Plan plan;
  if (lamport_ok && bytes <= lamport_limit) {
    plan.algorithm = Algorithm::kOneshotLamport;
    plan.reason = sharing + ", " + format_bytes(bytes) + "/rank <= " + format_bytes(lamport_limit) +
                  " -> oneshot_lamport";
    return plan;
  }
  std::string size;
  if (lamport_limit > 0) {
    size = bytes > lamport_limit ? ", " + format_bytes(bytes) + "/rank > " + format_bytes(lamport_limit)
                                 : ", oneshot_lamport infeasible";
  }
  if (pull_above > 0) size += bytes > pull_above ? " and > " + format_bytes(pull_above) : ", <= " + format_bytes(pull_above);
  if (above == Algorithm::kOneshotPull && algorithm_feasible(above, shape, facts, nullptr)) {
    plan.algorithm = above;
    plan.reason = sharing + size + " -> oneshot_pull";
    return plan;
  }
  if (!twoshot_ok) return std::nullopt;
  plan.algorithm = Algorithm::kTwoshot;
  plan.reason = sharing + size + " -> twoshot";
  return plan;
}

// What auto picks among the fused (single-kernel) algorithms; also the inner all-reduce of unfused.
Result<Plan> choose_auto(const CallShape& shape, const StaticFacts& facts) {
  Plan plan;
  std::string lamport_why;
  const bool lamport_ok =
      algorithm_feasible(Algorithm::kOneshotLamport, shape, facts, &lamport_why);
  if (facts.world == 1 && lamport_ok) {
    plan.algorithm = Algorithm::kOneshotLamport;
    plan.reason = "world 1: epilogue only, no communication";
    return plan;
  }
  std::string twoshot_why;
  const bool twoshot_ok = algorithm_feasible(Algorithm::kTwoshot, shape, facts, &twoshot_why);
  const int64_t bytes = shape.num_elems * static_cast<int64_t>(dtype_bytes(shape.dtype));
  if (facts.max_ranks_per_device > 1) {
    if (std::optional<Plan> shared = choose_shared_device(shape, facts, bytes, lamport_ok, twoshot_ok)) {
      return *shared;
    }
  }
  const int64_t limit = oneshot_limit_bytes(facts.world);
  const std::string world_str = " at world " + std::to_string(facts.world);
  if (lamport_ok && bytes <= limit) {
    plan.algorithm = Algorithm::kOneshotLamport;
    plan.reason = "auto: " + format_bytes(bytes) + "/rank <= " + format_bytes(limit) +
                  " oneshot limit" + world_str;
    return plan;
  }
  const std::string why_not_oneshot =
      lamport_ok ? format_bytes(bytes) + "/rank > " + format_bytes(limit) + " oneshot limit" + world_str
                 : "oneshot_lamport infeasible (" + lamport_why + ")";
  std::string pull_why;
  const bool pull_ok = algorithm_feasible(Algorithm::kOneshotPull, shape, facts, &pull_why);
  // World 2: two-shot's reduce-scatter and all-gather read as many bytes from the one peer as
  // oneshot_pull's single read, and synchronize twice. Measured on 2x H200 over NV18 (hidden
  // 8192; docs/performance.md, real ranks): pull even at 1024 tokens, 3-5% faster at
  // 2048-4096.
  if (facts.world == 2 && pull_ok) {
    plan.algorithm = Algorithm::kOneshotPull;
    plan.reason = "auto: " + why_not_oneshot + " -> oneshot_pull (world 2: two-shot reads as much)";
    return plan;
  }
  if (twoshot_ok) {
    plan.algorithm = Algorithm::kTwoshot;
    plan.reason = "auto: " + why_not_oneshot + " -> twoshot";
    return plan;
  }
  if (pull_ok) {
    plan.algorithm = Algorithm::kOneshotPull;
    plan.reason = "auto: " + why_not_oneshot + ", twoshot infeasible (" + twoshot_why +
                  ") -> oneshot_pull";
    return plan;
  }
  return unsupported("no algorithm can run this call: " + why_not_oneshot + "; twoshot: " +
                     twoshot_why + "; oneshot_pull: " + pull_why);
}

}  // namespace

int co_resident_grid_cap(const StaticFacts& facts, int block) {
  // Spinning CTAs of every rank sharing a device must all be resident at once, or a waiting CTA can
  // occupy the slot its peer needs and the wait never ends (kernel_params.h, co_resident_ctas_per_sm).
  const int ranks = std::max(1, facts.max_ranks_per_device);
  const int per_sm = co_resident_ctas_per_sm(std::clamp(block, 1, kMaxBlockThreads));
  const int64_t cap = static_cast<int64_t>(per_sm) * facts.min_sm_count / ranks;
  return static_cast<int>(std::clamp<int64_t>(cap, 1, kMaxCtas));
}

int protocol_free_grid_cap(const StaticFacts& facts, int block) {
  const int per_sm = std::min(32, resident_ctas_per_sm(std::clamp(block, 1, kMaxBlockThreads)));
  const int64_t cap = static_cast<int64_t>(per_sm) * std::max(1, facts.min_sm_count);
  return static_cast<int>(std::clamp<int64_t>(cap, 1, kMaxProtocolFreeGrid));
}

int grid_cap(const Plan& plan, const StaticFacts& facts) {
  const bool protocol_free = facts.world == 1 && plan.inner_allreduce == Algorithm::kOneshotLamport;
  return protocol_free ? protocol_free_grid_cap(facts, plan.block) : co_resident_grid_cap(facts, plan.block);
}

int co_resident_test_grid_cap(const StaticFacts& facts) {
  const int ranks = std::max(1, facts.max_ranks_per_device);
  return std::clamp(facts.min_sm_count / ranks, 1, kMaxCtas);
}

bool algorithm_feasible(Algorithm algorithm, const CallShape& shape, const StaticFacts& facts,
                        std::string* why) {
  std::string local_why;
  if (why == nullptr) why = &local_why;
  if (algorithm == Algorithm::kNccl) {
    // ncclAllReduce needs no workspace; the epilogue's scratch is bounded like the shape itself.
    if (!facts.nccl) {
      *why = "this communicator has no NCCL communicator (NCCL not loadable, ranks sharing a GPU, "
             "world 1, or its creation failed at init)";
      return false;
    }
    return shape_feasible(shape, facts, why);
  }
  if (algorithm == Algorithm::kAuto) {
    *why = "auto is not an algorithm";
    return false;
  }
  if (!facts.custom) {
    *why = "the custom algorithms were disabled at init (a pair of ranks cannot reach each other's "
           "memory); this communicator runs on nccl";
    return false;
  }
  if (!shape_feasible(shape, facts, why)) return false;
  const int64_t capacity_elems = facts.max_tokens * facts.max_hidden;
  switch (algorithm) {
    case Algorithm::kOneshotLamport: {
      const int64_t lamport_elems = facts.oneshot_max_tokens * facts.max_hidden;
      if (shape.num_elems > lamport_elems) {
        *why = std::to_string(shape.num_elems) + " elements exceed the Lamport slot of " +
               std::to_string(lamport_elems) + " (oneshot_max_tokens " +
               std::to_string(facts.oneshot_max_tokens) + " x max_hidden " +
               std::to_string(facts.max_hidden) + ")";
        return false;
      }
      return true;
    }
    case Algorithm::kOneshotPull:
    case Algorithm::kTwoshot: {
      if (shape.num_elems > capacity_elems) {
        *why = std::to_string(shape.num_elems) + " elements exceed the capacity of " +
               std::to_string(capacity_elems) + " (max_tokens x max_hidden)";
        return false;
      }
      if (algorithm == Algorithm::kTwoshot) {
        // The scatter inbox holds, per source, max_tokens rows of the widest part; a call fits if
        // its rows of its own part width do. Same split as protocol_index.h (twoshot_part_vecs),
        // restated so the policy stays free of kernel headers.
        const int64_t part = ceil_div(shape.row_elems / kElemsPerVec, facts.world);
        const int64_t slot_part = ceil_div(facts.max_hidden / kElemsPerVec, facts.world);
        if (shape.num_rows * part > facts.max_tokens * slot_part) {
          *why = std::to_string(shape.num_rows) + " rows exceed the twoshot scatter inbox";
          return false;
        }
      }
      return true;
    }
    case Algorithm::kUnfused: {
      // Runs the all-reduce auto would choose for a plain all-reduce of this shape.
      CallShape inner = shape;
      inner.pattern = Pattern::kAllReduce;
      inner.requested = Algorithm::kAuto;
      Result<Plan> inner_plan = choose_auto(inner, facts);
      if (!inner_plan.is_ok()) *why = inner_plan.status().message();
      return inner_plan.is_ok();
    }
    default:
      *why = "unknown algorithm " + std::to_string(static_cast<int>(algorithm));
      return false;
  }
}

namespace {

const char* level_name(int level) {
  switch (level) {
    case 1: return "1 (one kernel)";
    case 2: return "2 (fused all-reduce + norm, then quant)";
    case 3: return "3 (all-reduce, then norm + quant)";
  }
  return "auto";
}

// The fallback rule of arfusion.h (beside arfFallbackLevel_t): which requests are well formed and
// runnable, before any algorithm is considered. validate.cc rejects the malformed ones earlier with
// InvalidArgument; the policy re-checks so that make_plan is safe on its own.
Status check_fallback_request(const CallShape& shape) {
  const int level = shape.requested_fallback;
  if (level < 0 || level > 3) {
    return invalid_argument("fallback level " + std::to_string(level) +
                            " is not a valid arfFallbackLevel_t");
  }
  if (!is_quant_pattern(shape.pattern)) {
    if (level != 0) {
      return invalid_argument("fallback level " + std::to_string(level) +
                              " applies to quantized patterns only (use algorithm unfused to run "
                              "residual_rmsnorm as two kernels)");
    }
    return Status::ok();
  }
  if ((shape.requested == Algorithm::kUnfused || shape.requested == Algorithm::kNccl) &&
      (level == 1 || level == 2)) {
    return unsupported(std::string("fallback level ") + level_name(level) +
                       " needs a fused algorithm; algorithm " + algorithm_name(shape.requested) +
                       " is level 3");
  }
  return Status::ok();
}

// Applies the fallback level of a quantized call to a plan whose algorithm is chosen (a fused one,
// or kUnfused when the caller forced it). Auto takes the tuned table's level when it gave one
// (tuned_level 1..3), else level 1, always eligible once a fused algorithm is feasible; level 3
// runs the chosen fused algorithm as the inner all-reduce.
void apply_quant_level(const CallShape& shape, int tuned_level, Plan* plan) {
  int level = shape.requested_fallback;
  if (level == 0 && tuned_level != 0) level = tuned_level;
  // NCCL's all-reduce cannot carry our epilogue: nccl is always all-reduce, then norm + quant.
  const bool split_only =
      plan->algorithm == Algorithm::kUnfused || plan->algorithm == Algorithm::kNccl;
  if (level == 0 || split_only) level = split_only ? 3 : 1;
  plan->fallback_level = level;
  plan->num_kernels = level == 1 ? 1 : 2;
  plan->reason += std::string("; level ") + level_name(level);
  if (level == 3 && !split_only) {
    plan->inner_allreduce = plan->algorithm;
    plan->algorithm = Algorithm::kUnfused;
    plan->reason += std::string(": unfused, inner ") + algorithm_name(plan->inner_allreduce);
  }
}

// Replaces the default choice `plan` of an auto call by the tuned table's, when the table has one
// for this call and it is feasible. Quantized calls with a forced level keep the defaults: the
// table's algorithm was measured together with its level. Returns the table's level (quantized
// patterns) or 0 when the table decided nothing.
int apply_tuned_table(const CallShape& shape, const StaticFacts& facts, const TuningTable* table,
                      Plan* plan) {
  if (table == nullptr || shape.requested_fallback != 0) return 0;
  const TuningKey key{facts.world, sharing_of(facts.max_ranks_per_device), shape.dtype,
                      tuning_group_of(shape.pattern), shape.row_elems};
  const std::optional<TuningChoice> choice = table->lookup(key, shape.num_rows);
  if (!choice) return 0;
  std::string where = std::string(algorithm_name(choice->algorithm)) + " for tokens " +
                      std::to_string(choice->from_tokens) + ".." +
                      std::to_string(choice->to_tokens) + " at hidden " +
                      std::to_string(choice->hidden);
  if (choice->hidden != shape.row_elems) {
    where += " (nearest tabulated hidden; this call is " + std::to_string(choice->tokens) +
             " of its tokens)";
  }
  std::string why;
  if (!algorithm_feasible(choice->algorithm, shape, facts, &why)) {
    plan->reason = "tuned table had no feasible choice (" + where + ": " + why + ") -> default " +
                   plan->reason;
    return 0;
  }
  plan->algorithm = choice->algorithm;
  plan->reason = "tuned table: " + where;
  return is_quant_pattern(shape.pattern) ? choice->level : 0;
}

// The co-resident test mode (StaticFacts::co_resident_test): no gate, every grid within the bound,
// and the reason says so first (arfPlan_t.reason keeps 127 characters).
void apply_co_resident_test(const StaticFacts& facts, Plan* plan) {
  const int cap = co_resident_test_grid_cap(facts);
  plan->shared_device_gate = false;
  plan->grid = std::min(plan->grid, cap);
  plan->epilogue_grid = std::min(plan->epilogue_grid, cap);
  plan->reason = std::string(kCoResidentTestReason) + " (no gate, no return wait, grids <= " +
                 std::to_string(cap) + " = " + std::to_string(facts.min_sm_count) + " SMs / " +
                 std::to_string(std::max(1, facts.max_ranks_per_device)) + " ranks): " + plan->reason;
}

}  // namespace

Result<Plan> make_plan(const CallShape& shape, const StaticFacts& facts,
                       const TuningTable* table) {
  ARF_RETURN_IF_ERROR(check_fallback_request(shape));
  Plan plan;
  int tuned_level = 0;
  if (shape.requested == Algorithm::kAuto) {
    Result<Plan> chosen = choose_auto(shape, facts);
    std::string nccl_why;
    if (!chosen.is_ok() && algorithm_feasible(Algorithm::kNccl, shape, facts, &nccl_why)) {
      // Beyond every custom algorithm's buffers (over capacity), or custom algorithms disabled:
      // NCCL needs no workspace. It cannot honour a forced fused level.
      if (is_quant_pattern(shape.pattern) &&
          (shape.requested_fallback == 1 || shape.requested_fallback == 2)) {
        return unsupported(std::string("fallback level ") + level_name(shape.requested_fallback) +
                           " needs a fused algorithm, and only nccl (level 3) can run this call: " +
                           chosen.status().message());
      }
      plan.algorithm = Algorithm::kNccl;
      plan.reason = "auto: custom algorithms cannot run this call (" + chosen.status().message() +
                    ") -> nccl";
    } else {
      if (!chosen.is_ok()) return chosen.status();
      plan = chosen.take();
      tuned_level = apply_tuned_table(shape, facts, table, &plan);
    }
  } else {
    std::string why;
    if (!algorithm_feasible(shape.requested, shape, facts, &why)) {
      return unsupported(std::string("forced algorithm ") + algorithm_name(shape.requested) +
                         " cannot run this call: " + why);
    }
    plan.algorithm = shape.requested;
    plan.forced = true;
    plan.reason = std::string("forced: ") + algorithm_name(shape.requested);
  }
  plan.inner_allreduce = plan.algorithm;
  plan.num_kernels = 1;
  plan.fallback_level = 1;
  if (plan.algorithm == Algorithm::kUnfused) {
    CallShape inner = shape;
    inner.pattern = Pattern::kAllReduce;
    inner.requested = Algorithm::kAuto;
    Result<Plan> inner_plan = choose_auto(inner, facts);
    if (!inner_plan.is_ok()) return inner_plan.status();  // excluded by algorithm_feasible
    plan.inner_allreduce = inner_plan.value().algorithm;
    // A plain all-reduce has no epilogue, so there is no second kernel to run.
    plan.num_kernels = shape.pattern == Pattern::kAllReduce ? 1 : 2;
    plan.reason += std::string(" (inner ") + algorithm_name(plan.inner_allreduce) + ")";
  }
  if (plan.algorithm == Algorithm::kNccl) {
    // ncclAllReduce, then (fused patterns) our epilogue kernel over the sum.
    plan.num_kernels = shape.pattern == Pattern::kAllReduce ? 1 : 2;
  }
  if (is_quant_pattern(shape.pattern)) apply_quant_level(shape, tuned_level, &plan);
  // One CTA per row at most; every rank derives the same numbers from the same inputs.
  const int64_t rows = std::max<int64_t>(shape.num_rows, 1);
  plan.block = block_threads_for_row(shape.row_elems);
  plan.grid = static_cast<int>(std::min<int64_t>(rows, grid_cap(plan, facts)));
  plan.epilogue_grid = static_cast<int>(std::min<int64_t>(rows, protocol_free_grid_cap(facts, plan.block)));
  plan.shared_device_gate =
      facts.max_ranks_per_device > 1 && facts.world > 1 && plan.algorithm != Algorithm::kNccl;
  if (facts.co_resident_test) apply_co_resident_test(facts, &plan);
  return plan;
}

}  // namespace arf
