// Policy: feasibility mask -> tuned table -> the built-in defaults -> choice, in the spirit of
// NCCL's sym_kernels.cc. Everything here is a pure function of (CallShape, StaticFacts,
// TuningTable): no timing, no device queries, no per-rank state, so every rank computes the same
// Plan (ranks whose launch shapes diverge wait for each other until the bound). The crossovers
// between algorithms are data, not code: the built-in ones are the default tuning table
// (default_tuning_table.json, embedded in the library; docs/architecture.md, Policy, says what
// each rests on), a tuned table ($ARF_TUNING_TABLE) replaces them where it has an entry. The block
// size comes from common/launch_plan.h (block_threads_for_row), the one definition the planner,
// the launcher and the CPU tests share.
#include "policy/policy.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/int_math.h"
#include "base/names.h"
#include "common/launch_plan.h"
#include "policy/default_tuning_table.h"

namespace arf {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;

const char* algorithm_name(Algorithm a) { return arf::algorithm_name(static_cast<arfAlgorithm_t>(a)); }

bool world_supported(int world) { return world == 1 || world == 2 || world == 4 || world == 8; }

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

// The words of a default range's bounds: "<B>/rank <= 512 KiB", "> 512 KiB and <= 4 MiB", "> 4 MiB"
// (a range's tokens at its entry's hidden, in bytes per rank), nothing for the only range.
std::string range_words(int64_t bytes, const TuningChoice& c, size_t dtype_size) {
  const int64_t token_bytes = static_cast<int64_t>(c.hidden) * static_cast<int64_t>(dtype_size);
  const bool first = c.range == 0;
  const bool last = c.range + 1 == c.entry->ranges.size();
  std::string words = format_bytes(bytes) + "/rank";
  if (!first) words += " > " + format_bytes((c.from_tokens - 1) * token_bytes);
  if (!first && !last) words += " and";
  if (!last) words += " <= " + format_bytes(c.to_tokens * token_bytes);
  return words;
}

// What auto picks among the fused (single-kernel) algorithms; also the inner all-reduce of unfused.
// World 1 never communicates: the epilogue over the input, oneshot_lamport's (its world-1 kernel
// is the streaming one). An empty call moves nothing: oneshot_lamport. Otherwise the first that
// can run the call of:
//  - ranks sharing a device: every rank on it, the default table's "shared" choice for the call's
//    bytes per rank, then its choices for larger calls (they hold more); only some ranks on a
//    device (not measured): twoshot;
//  - the default table's "one" (rank per device) choice for the call, then its choices for larger
//    calls;
//  - twoshot, then oneshot_pull.
// *default_level: the quantized level of the default range that was chosen, 0 when none was.
Result<Plan> choose_auto(const CallShape& shape, const StaticFacts& facts, int* default_level) {
  *default_level = 0;
  Plan plan;
  std::string lamport_why;
  const bool lamport_ok = algorithm_feasible(Algorithm::kOneshotLamport, shape, facts, &lamport_why);
  if (facts.world == 1 && lamport_ok) {
    plan.algorithm = Algorithm::kOneshotLamport;
    plan.reason = "world 1: epilogue only, no communication";
    return plan;
  }
  const int64_t bytes = shape.num_elems * static_cast<int64_t>(dtype_bytes(shape.dtype));
  if (bytes == 0 && lamport_ok) {
    plan.algorithm = Algorithm::kOneshotLamport;
    plan.reason = "auto: an empty call moves nothing -> oneshot_lamport";
    return plan;
  }
  const Result<TuningTable>& defaults = default_tuning_table();
  if (!defaults.is_ok()) return defaults.status();

  const bool shared = facts.max_ranks_per_device > 1;
  const bool all_on_one = facts.max_ranks_per_device == facts.world;
  std::string words = "auto: ";
  if (shared) {
    words += std::to_string(facts.max_ranks_per_device) + " ranks share a device" +
             (all_on_one ? " (no links; measured on one GPU), " : ", not all of them (unmeasured), ");
  }
  // Candidates in order, each once, with the level of their default range (quantized patterns).
  std::vector<std::pair<Algorithm, int>> candidates;
  auto add = [&](Algorithm a, int level) {
    for (const auto& c : candidates) {
      if (c.first == a) return;
    }
    candidates.emplace_back(a, level);
  };
  std::string where;  // the call's size against the first default range consulted
  auto add_defaults = [&](RankSharing sharing) {
    const TuningKey key{facts.world, sharing, shape.dtype, tuning_group_of(shape.pattern), shape.row_elems};
    const std::optional<TuningChoice> d = defaults.value().lookup_elems(key, shape.num_elems);
    if (!d) return;
    if (where.empty()) where = range_words(bytes, *d, dtype_bytes(shape.dtype));
    for (size_t r = d->range; r < d->entry->ranges.size(); ++r) {
      add(d->entry->ranges[r].algorithm, is_quant_pattern(shape.pattern) ? d->entry->ranges[r].level : 0);
    }
  };
  if (shared && all_on_one) add_defaults(RankSharing::kShared);
  if (shared && !all_on_one) add(Algorithm::kTwoshot, 0);
  add_defaults(RankSharing::kOnePerDevice);
  add(Algorithm::kTwoshot, 0);
  add(Algorithm::kOneshotPull, 0);
  if (where.empty()) where = format_bytes(bytes) + "/rank";
  std::string skipped;  // the candidates passed over, with why
  for (const auto& [algorithm, level] : candidates) {
    std::string why;
    if (algorithm_feasible(algorithm, shape, facts, &why)) {
      *default_level = level;
      plan.algorithm = algorithm;
      plan.reason = words + where + " at world " + std::to_string(facts.world) + skipped + " -> " +
                    algorithm_name(algorithm);
      return plan;
    }
    skipped += std::string(skipped.empty() ? ": " : "; ") + algorithm_name(algorithm) + " infeasible (" +
               why + ")";
  }
  const bool lamport_tried = std::any_of(candidates.begin(), candidates.end(),
                                         [](const auto& c) { return c.first == Algorithm::kOneshotLamport; });
  return unsupported("no algorithm can run this call: " + where + " at world " + std::to_string(facts.world) +
                     skipped + (lamport_ok || lamport_tried ? "" : "; oneshot_lamport infeasible (" + lamport_why + ")"));
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

int cta_bound(const StaticFacts& facts) {
  if (facts.max_ctas <= 0) return INT32_MAX;
  return facts.max_ctas / std::max(1, facts.max_ranks_per_device);
}

int grid_cap(const Plan& plan, const StaticFacts& facts) {
  const bool protocol_free = facts.world == 1 && plan.inner_allreduce == Algorithm::kOneshotLamport;
  const int cap = protocol_free ? protocol_free_grid_cap(facts, plan.block)
                                : co_resident_grid_cap(facts, plan.block);
  return std::min(cap, cta_bound(facts));
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
  if (cta_bound(facts) < 1) {
    *why = "max_ctas " + std::to_string(facts.max_ctas) + " leaves no CTA to each of the " +
           std::to_string(facts.max_ranks_per_device) + " ranks sharing a GPU (at least " +
           std::to_string(facts.max_ranks_per_device) + " needed)";
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
      int level = 0;
      Result<Plan> inner_plan = choose_auto(inner, facts, &level);
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
  if (shape.post_norm && shape.pattern == Pattern::kAllReduce) {
    return invalid_argument("post_gamma (a sandwich call) needs a norm pattern; pattern allreduce "
                            "has no norm to precede");
  }
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

// A sandwich call runs on whatever the plan chose: the post-norm is part of the epilogue every
// kernel chain shares (kernel_set.h, call_kernels), so it runs in the kernel that adds the
// residual: the fused kernel (levels 1 and 2), or the epilogue kernel after the all-reduce kernel
// (unfused, level 3, nccl). The reason says which.
void note_sandwich(Plan* plan) {
  const bool split = plan->algorithm == Algorithm::kUnfused || plan->algorithm == Algorithm::kNccl;
  plan->reason += split ? "; sandwich (post-norm in the epilogue kernel)" : "; sandwich (post-norm fused)";
}

// arfPlan_t.reason keeps this many characters of Plan::reason (api.cc cuts the rest).
constexpr size_t kPublicReasonChars = sizeof(arfPlan_t{}.reason) - 1;

// Appends `note` so that it reaches arfPlan_t.reason whole: when reason and note together are
// longer than that keeps, the reason's end is cut to make room (ending in "...") instead of the
// note. For a fact that no other field of arfPlan_t explains (why the grid is smaller than the
// call would have): what is cut is the end of the choice's account, whose outcome arfPlan_t holds
// (algorithm, inner_allreduce, fallback_level).
void append_kept_note(const std::string& note, std::string* reason) {
  static constexpr std::string_view kCut = "...";
  if (reason->size() + note.size() > kPublicReasonChars) {
    reason->resize(kPublicReasonChars - note.size() - kCut.size());
    *reason += kCut;
  }
  *reason += note;
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
    int default_level = 0;
    Result<Plan> chosen = choose_auto(shape, facts, &default_level);
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
      if (tuned_level == 0) tuned_level = default_level;
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
    int level = 0;
    Result<Plan> inner_plan = choose_auto(inner, facts, &level);
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
  if (shape.post_norm) note_sandwich(&plan);
  // One CTA per row at most; every rank derives the same numbers from the same inputs.
  const int64_t rows = std::max<int64_t>(shape.num_rows, 1);
  plan.block = block_threads_for_row(shape.row_elems);
  plan.grid = static_cast<int>(std::min<int64_t>(rows, grid_cap(plan, facts)));
  const int64_t epilogue = std::min<int64_t>(rows, protocol_free_grid_cap(facts, plan.block));
  plan.epilogue_grid = static_cast<int>(std::min<int64_t>(epilogue, cta_bound(facts)));
  const bool capped = plan.grid == cta_bound(facts) || plan.epilogue_grid == cta_bound(facts);
  plan.shared_device_gate =
      facts.max_ranks_per_device > 1 && facts.world > 1 && plan.algorithm != Algorithm::kNccl;
  if (facts.co_resident_test) apply_co_resident_test(facts, &plan);
  // Last, so that nothing written after it can push it out of arfPlan_t.reason.
  if (capped) {
    append_kept_note("; max_ctas " + std::to_string(facts.max_ctas) + " caps the grid at " +
                         std::to_string(cta_bound(facts)),
                     &plan.reason);
  }
  return plan;
}

}  // namespace arf
