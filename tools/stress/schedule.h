// The soak's call schedule: a pure function of (seed, options, planner answers), drawn
// identically by every rank (each rank thread, or each process, runs its own Generator), so the
// ranks issue the same collective sequence without talking to each other.
//
// Every call draws NEW values for everything a real engine varies (call_spec.h): pattern,
// algorithm, hidden (never the previous call's), tokens, aliasing, NULL residual, gamma dtype and
// offset, eps, norm rounding, per-rank residual/gamma, quantization layout/format/fallback. The
// token mix: ~40% tiny (1..8), ~30% log-uniform 1..max_tokens, ~15% on either side of an arfPlan
// change (BoundaryTable, probed from the planner of the communicator under test, not hard-coded),
// ~15% full capacity (max_tokens at the largest hidden); after a large call, half the time a 1..4
// token call and then a large one ("tiny after large": the Lamport buffer of the big call is being
// cleared while the tiny one runs).
//
// The volume mix (TokenMix::kVolume) keeps every kind of call but spends fewer bytes per call, so a
// shared GPU soaks more calls per second (where ranks share a GPU, full-capacity calls, ~64 MiB per
// rank at the default capacity, take most of the device time): of the ~15% full-capacity draws,
// 2% of all calls stay full capacity and the rest become "full grid" calls (the fewest tokens at which the plan reaches its largest grid,
// at any hidden: every CTA busy, the per-CTA state of the whole grid in use); the large call after
// a tiny one is full grid at the largest hidden, or 1 time in 4 what the engine mix draws; and a
// call at full grid counts as large for starting a tiny-after-large pair. Grid transitions, the
// protocol's concern, stay as frequent; large byte counts (clears, bounds) become rarer.
//
// Sandwich calls (ScheduleOptions::sandwich_share, off by default): that share of the norm-pattern
// calls gets post_gamma (call_spec.h CallSpec::sandwich).
//
// A call the planner refuses is first retried with the default fallback level, then with the
// default scale layout/format; still refused, it is marked skipped (the same on every rank).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "arfusion/arfusion.h"
#include "call_spec.h"

namespace arf::stress {

// What the planner said about one call. ok == false: it cannot run.
struct PlanInfo {
  bool ok = false;
  arfAlgorithm_t algorithm = arfAlgoAuto;
  arfAlgorithm_t inner = arfAlgoAuto;
  int kernels = 0;
  int grid = 0;
  int block = 0;
  int fallback_level = 0;
  bool same_dispatch(const PlanInfo& o) const {
    return ok == o.ok && algorithm == o.algorithm && inner == o.inner && kernels == o.kernels &&
           grid == o.grid && block == o.block && fallback_level == o.fallback_level;
  }
};

// arfPlanShape on the communicator under test (rank threads), or arfPlanFromFacts (tests).
using PlanOracle = std::function<PlanInfo(const CallSpec&)>;
// The oracle of arfPlanFromFacts / arfPlanShape-style functions, for a given dtype.
PlanInfo plan_info_from(arfStatus_t status, const arfPlan_t& plan);

// How token counts are drawn (see above): kEngine as an engine's calls come, kVolume for volume
// on a shared GPU.
enum class TokenMix : uint8_t { kEngine, kVolume };
const char* token_mix_name(TokenMix m);

struct ScheduleOptions {
  uint64_t seed = 1;
  arfDataType_t dtype = arfBFloat16;
  std::vector<Pat> patterns;
  std::vector<arfAlgorithm_t> algos;
  // Parallel to algos, each > 0 (empty: all 1). Weights let a soak aim its volume: the unfused
  // path also runs the forced fused calls that fall back, so at equal weights it gets more calls.
  std::vector<uint32_t> algo_weights;
  std::vector<int64_t> hiddens;  // ascending, multiples of 8, <= max_hidden
  int64_t max_tokens = 2048;
  TokenMix mix = TokenMix::kEngine;
  // The share of norm-pattern calls that are sandwich calls (post_gamma set), in [0, 1]. Drawn
  // from a stream of its own, one draw per norm-pattern call and none at 0, so every other field
  // of the schedule is the same at any share (and at 0 the same as before the option existed).
  double sandwich_share = 0.0;
};

// The share as the numerator over kSandwichDen that Rng::chance draws with (rounded to nearest).
inline constexpr uint32_t kSandwichDen = 1000000;
uint32_t sandwich_numerator(double share);

// The hiddens a pattern may use: multiples of its quantization block (128 / 16 / 32).
std::vector<int64_t> hiddens_for(Pat p, const std::vector<int64_t>& hiddens);

// Token counts on either side of every change of arfPlan's answer (ok, algorithm, inner
// all-reduce, kernel count, grid, block, fallback level) over tokens 1..max_tokens, plus the
// smallest and largest runnable count, for each (pattern, algorithm, hidden). Flat calls use
// allreduce/auto's.
class BoundaryTable {
 public:
  static BoundaryTable probe(const ScheduleOptions& o, const PlanOracle& oracle);
  const std::vector<int64_t>& at(Pat p, arfAlgorithm_t a, int64_t hidden) const;
  // The fewest tokens whose plan has the largest grid seen over 1..max_tokens (0: never runs).
  int64_t full_grid_tokens(Pat p, arfAlgorithm_t a, int64_t hidden) const;
  size_t num_points() const;
  size_t num_combinations() const { return table_.size(); }
  // (pattern, algorithm, hidden) -> boundaries, for --list-boundaries.
  const std::map<std::tuple<int, int, int64_t>, std::vector<int64_t>>& entries() const { return table_; }

 private:
  std::map<std::tuple<int, int, int64_t>, std::vector<int64_t>> table_;
  std::map<std::tuple<int, int, int64_t>, int64_t> full_grid_;
  std::vector<int64_t> empty_;
};

// splitmix64 stream with explicit integer arithmetic (no std distributions: their results are
// implementation-defined, and the schedule must not depend on the standard library's choice).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t n);                 // uniform in [0, n), n > 0
  bool chance(uint32_t num, uint32_t den);    // probability num/den
  int64_t log_uniform(int64_t lo, int64_t hi);  // log-uniform integer in [lo, hi]
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }
  // Index i with probability weights[i] / sum; with every weight 1 the same index (and the same
  // draws from the stream) as pick over as many items, so unweighted schedules do not change.
  size_t pick_weighted(const std::vector<uint32_t>& weights);

 private:
  uint64_t state_;
};

class Generator {
 public:
  Generator(const ScheduleOptions& o, const BoundaryTable* table, PlanOracle oracle);
  // The next call (index left 0: the rank loop numbers issued calls).
  CallSpec next();

 private:
  void draw_tokens(CallSpec* c, const std::vector<int64_t>& hiddens);
  // The volume mix's large call: full grid, or 1 time in 4 the engine mix's (max_tokens, or half
  // to all of it).
  void draw_large_volume(CallSpec* c);
  void draw_options(CallSpec* c);
  void plan(CallSpec* c);

  ScheduleOptions o_;
  const BoundaryTable* table_;
  PlanOracle oracle_;
  Rng rng_;
  Rng sandwich_rng_;  // sandwich draws only (ScheduleOptions::sandwich_share)
  uint32_t sandwich_num_ = 0;
  int64_t previous_hidden_ = 0;
  int pending_ = 0;  // 1: next is tiny-after-large, 2: next is large-after-tiny
  int64_t capacity_elems_ = 0;
};

// Fills a call's plan fields from the oracle; false if it cannot run (then skipped is set).
bool apply_plan(CallSpec* c, const PlanOracle& oracle);

}  // namespace arf::stress
