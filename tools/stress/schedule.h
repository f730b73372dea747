// The soak's call sequence: which algorithm, pattern, token count and data every call uses.
//
// Why it looks like this: a missing-barrier bug shipped in AMD's AITER hid because
// unit tests repeated one shape with one grid. So the token count changes on EVERY call, and the
// sequence visits both sides of every dispatch boundary — every token count at which arfPlan's
// algorithm, inner all-reduce, kernel count, grid or block changes — of every (algorithm, pattern)
// combination, interleaved with log-uniform random counts. Boundaries are not hard-coded: they are
// found by probing the planner of the communicator under test (DispatchMap::probe), so a policy
// change moves the soak with it.
//
// Everything here is a pure function of (options, dispatch map): every rank thread builds its own
// Schedule and draws the same sequence, which is what keeps the ranks' calls identical (a
// collective requirement) without any exchange between rank threads.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"

namespace arf::stress {

// What arfPlan answered for one (algorithm, pattern, tokens). ok == false: not runnable.
struct PlanPoint {
  bool ok = false;
  arfAlgorithm_t algorithm = arfAlgoAuto;
  arfAlgorithm_t inner = arfAlgoAuto;
  int num_kernels = 0;
  int grid = 0;
  int block = 0;

  bool same_dispatch(const PlanPoint& o) const {
    return ok == o.ok && algorithm == o.algorithm && inner == o.inner &&
           num_kernels == o.num_kernels && grid == o.grid && block == o.block;
  }
};

struct Combo {
  arfAlgorithm_t algorithm = arfAlgoAuto;
  arfPattern_t pattern = arfPatternResidualRmsNorm;
};
std::string combo_name(const Combo& combo);  // "twoshot/residual_rmsnorm"

using PlanProbe = std::function<PlanPoint(const Combo& combo, int64_t tokens)>;

// arfPlan's answer for every combination and every token count 1..max_tokens.
class DispatchMap {
 public:
  DispatchMap() = default;
  static DispatchMap probe(const std::vector<Combo>& combos, int64_t max_tokens,
                           const PlanProbe& plan);

  const std::vector<Combo>& combos() const { return combos_; }
  int64_t max_tokens() const { return max_tokens_; }
  const PlanPoint& plan(size_t combo, int64_t tokens) const {
    return plans_[combo][static_cast<size_t>(tokens - 1)];
  }
  bool feasible(size_t combo, int64_t tokens) const {
    return tokens >= 1 && tokens <= max_tokens_ && plan(combo, tokens).ok;
  }
  // Feasible token counts on either side of a dispatch change, plus the smallest and largest
  // feasible counts; sorted, unique.
  const std::vector<int64_t>& boundaries(size_t combo) const { return boundaries_[combo]; }
  size_t num_boundary_points() const;

 private:
  std::vector<Combo> combos_;
  int64_t max_tokens_ = 0;
  std::vector<std::vector<PlanPoint>> plans_;       // [combo][tokens - 1]
  std::vector<std::vector<int64_t>> boundaries_;   // [combo]
};

// The gamma a call's residual_rmsnorm uses: activation dtype or fp32, and (1 + gamma) or gamma.
// Fixed per data set (set index % kGammaKinds), so the reference is computed once per set.
inline constexpr int kGammaKinds = 4;
inline bool gamma_fp32(int kind) { return (kind & 1) != 0; }
inline bool gamma_plus_one(int kind) { return (kind & 2) != 0; }

// One call of the schedule: its shape and where its data comes from. A schedule entry rather than
// the call kit's spec (tools/common/callkit/): the soak's data lives in rings of sets (set,
// row_offset) and is checked against precomputed rows, never drawn per call; calls.cc turns an
// entry into the kit's spec for the library's arguments.
struct CallSpec {
  uint64_t index = 0;  // global call number, 0-based
  size_t combo = 0;    // into DispatchMap::combos()
  arfAlgorithm_t algorithm = arfAlgoAuto;
  arfPattern_t pattern = arfPatternResidualRmsNorm;
  int64_t tokens = 1;
  int gamma_kind = 0;      // set % kGammaKinds
  int set = 0;             // data set of the ring
  int64_t row_offset = 0;  // first row of the set this call uses
  uint32_t clobber_salt = 0;  // varies what the consumer writes over the inputs
};

// One host-side step of a rank: one eager call, or one replay of a captured graph.
struct StepSpec {
  int64_t step = 0;
  int graph = -1;  // -1: eager
  std::vector<CallSpec> calls;
};

struct ScheduleOptions {
  uint64_t seed = 1;
  int num_sets = 8;        // data sets in the ring (a multiple of kGammaKinds)
  int64_t set_rows = 0;    // rows per set (>= max_tokens)
  int num_graphs = 0;      // 0: eager only
  int window = 4;          // calls per captured graph
  int eager_per_4_steps = 1;  // graph mode: this many of every 4 steps (on average) are eager
};

// Shapes (combo + token count + gamma kind) in the order described at the top of this file.
class ShapeSource {
 public:
  ShapeSource(const DispatchMap& map, uint64_t seed);
  // Next shape; tokens differ from the previous shape's whenever max feasible tokens > 1.
  CallSpec next();
  // The token count of the call issued last (graph replays issue shapes drawn long before).
  int64_t last_tokens() const { return last_tokens_; }
  void set_last_tokens(int64_t tokens) { last_tokens_ = tokens; }

 private:
  size_t next_combo();
  int64_t next_tokens(size_t combo);
  int64_t random_feasible_tokens(size_t combo);

  const DispatchMap* map_;
  std::mt19937_64 rng_;
  std::vector<size_t> combo_deck_;
  std::vector<std::vector<int64_t>> boundary_decks_;  // [combo], consumed from the back
  std::vector<uint64_t> draws_;                       // [combo]: shapes drawn so far
  int64_t last_tokens_ = 0;
  size_t last_combo_ = SIZE_MAX;
};

class Schedule {
 public:
  Schedule(const DispatchMap& map, const ScheduleOptions& options);

  // The windows captured into graphs (shapes only; data is drawn per replay). Empty when eager.
  const std::vector<std::vector<CallSpec>>& graph_windows() const { return windows_; }
  // Steps in order, from step 0 up. Deterministic, so a call budget ("stop before the step whose
  // first call index is >= N") ends every rank at the same step.
  StepSpec next_step();

 private:
  void draw_data(CallSpec* call);
  int pick_graph();

  const DispatchMap* map_;
  ScheduleOptions options_;
  ShapeSource shapes_;
  std::mt19937_64 rng_;
  std::vector<std::vector<CallSpec>> windows_;
  int64_t next_step_ = 0;
  uint64_t next_call_ = 0;
  int last_set_ = -1;
};

}  // namespace arf::stress
