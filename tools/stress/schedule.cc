// The soak's call sequence (schedule.h).
#include "schedule.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

namespace arf::stress {
namespace {

// Two draws per shape source; distinct streams so that adding a graph or a data draw does not
// shift the shape sequence of an otherwise identical run.
constexpr uint64_t kShapeStream = 0x5348415045ull;  // "SHAPE"
constexpr uint64_t kDataStream = 0x44415441ull;     // "DATA"
constexpr int kMaxRedraws = 32;

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, n) without std::uniform_int_distribution, whose output is implementation-defined:
// the same seed must give the same soak with any standard library.
uint64_t below(std::mt19937_64& rng, uint64_t n) { return n <= 1 ? 0 : rng() % n; }

template <typename T>
void shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(rng, i)]);
}

}  // namespace

std::string combo_name(const Combo& combo) {
  return std::string(arfAlgorithmName(combo.algorithm)) + "/" + arfPatternName(combo.pattern);
}

// ---- DispatchMap -------------------------------------------------------------------------------

DispatchMap DispatchMap::probe(const std::vector<Combo>& combos, int64_t max_tokens,
                               const PlanProbe& plan) {
  DispatchMap map;
  map.combos_ = combos;
  map.max_tokens_ = max_tokens;
  for (const Combo& combo : combos) {
    std::vector<PlanPoint> points;
    points.reserve(static_cast<size_t>(max_tokens));
    for (int64_t t = 1; t <= max_tokens; ++t) points.push_back(plan(combo, t));
    std::set<int64_t> edges;
    int64_t first_ok = 0, last_ok = 0;
    for (int64_t t = 1; t <= max_tokens; ++t) {
      const PlanPoint& here = points[static_cast<size_t>(t - 1)];
      if (here.ok) {
        if (first_ok == 0) first_ok = t;
        last_ok = t;
      }
      if (t == 1 || here.same_dispatch(points[static_cast<size_t>(t - 2)])) continue;
      // Both sides of the change, where runnable: t-1 is the last of the old dispatch.
      if (points[static_cast<size_t>(t - 2)].ok) edges.insert(t - 1);
      if (here.ok) edges.insert(t);
    }
    if (first_ok > 0) {
      edges.insert(first_ok);
      edges.insert(last_ok);
    }
    map.plans_.push_back(std::move(points));
    map.boundaries_.emplace_back(edges.begin(), edges.end());
  }
  return map;
}

size_t DispatchMap::num_boundary_points() const {
  size_t n = 0;
  for (const auto& b : boundaries_) n += b.size();
  return n;
}

// ---- ShapeSource -------------------------------------------------------------------------------

ShapeSource::ShapeSource(const DispatchMap& map, uint64_t seed)
    : map_(&map),
      rng_(mix(seed, kShapeStream)),
      boundary_decks_(map.combos().size()),
      draws_(map.combos().size(), 0) {}

size_t ShapeSource::next_combo() {
  if (combo_deck_.empty()) {
    for (size_t c = 0; c < map_->combos().size(); ++c) {
      if (!map_->boundaries(c).empty()) combo_deck_.push_back(c);  // skip never-runnable combos
    }
    shuffle(combo_deck_, rng_);
    // Consumed from the back: do not repeat the previous deck's last combination.
    if (combo_deck_.size() > 1 && combo_deck_.back() == last_combo_) {
      std::swap(combo_deck_.front(), combo_deck_.back());
    }
  }
  last_combo_ = combo_deck_.back();
  combo_deck_.pop_back();
  return last_combo_;
}

int64_t ShapeSource::random_feasible_tokens(size_t combo) {
  // Log-uniform: as many draws in [1, 2) as in [512, 1024), so decode sizes dominate while
  // every order of magnitude up to capacity is still visited.
  const double log_max = std::log(static_cast<double>(map_->max_tokens()) + 1.0);
  for (int i = 0; i < kMaxRedraws; ++i) {
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    const int64_t t = std::clamp<int64_t>(static_cast<int64_t>(std::exp(u * log_max)), 1,
                                          map_->max_tokens());
    if (map_->feasible(combo, t)) return t;
  }
  const std::vector<int64_t>& edges = map_->boundaries(combo);
  return edges[below(rng_, edges.size())];
}

int64_t ShapeSource::next_tokens(size_t combo) {
  // Every other shape of a combination comes from its boundary deck, so each boundary point is
  // visited once per deck cycle whatever the random draws do.
  const bool from_deck = draws_[combo]++ % 2 == 0;
  for (int attempt = 0; attempt < kMaxRedraws; ++attempt) {
    int64_t t;
    if (from_deck && attempt == 0) {
      std::vector<int64_t>& deck = boundary_decks_[combo];
      if (deck.empty()) {
        deck = map_->boundaries(combo);
        shuffle(deck, rng_);
      }
      t = deck.back();
      deck.pop_back();
    } else {
      t = random_feasible_tokens(combo);
    }
    if (t != last_tokens_) return t;
  }
  return last_tokens_;  // only reachable when a single token count is runnable
}

CallSpec ShapeSource::next() {
  CallSpec call;
  call.combo = next_combo();
  call.algorithm = map_->combos()[call.combo].algorithm;
  call.pattern = map_->combos()[call.combo].pattern;
  call.tokens = next_tokens(call.combo);
  call.gamma_kind = static_cast<int>(below(rng_, kGammaKinds));
  last_tokens_ = call.tokens;
  return call;
}

// ---- Schedule ----------------------------------------------------------------------------------

Schedule::Schedule(const DispatchMap& map, const ScheduleOptions& options)
    : map_(&map), options_(options), shapes_(map, options.seed), rng_(mix(options.seed, kDataStream)) {
  for (int g = 0; g < options.num_graphs; ++g) {
    std::vector<CallSpec> window;
    for (int i = 0; i < options.window; ++i) window.push_back(shapes_.next());
    windows_.push_back(std::move(window));
  }
}

void Schedule::draw_data(CallSpec* call) {
  // Sets of the call's gamma kind are kind, kind + kGammaKinds, ...; an all-reduce ignores gamma
  // and may use any set. A set differing from the previous call's makes a stale peer buffer hold
  // different bits even when the row offsets happen to coincide.
  const bool any_set = call->pattern == arfPatternAllReduce;
  const int candidates = any_set ? options_.num_sets : options_.num_sets / kGammaKinds;
  for (int attempt = 0; attempt < kMaxRedraws; ++attempt) {
    const int pick = static_cast<int>(below(rng_, static_cast<uint64_t>(candidates)));
    call->set = any_set ? pick : call->gamma_kind + kGammaKinds * pick;
    if (call->set != last_set_ || candidates == 1) break;
  }
  if (any_set) call->gamma_kind = call->set % kGammaKinds;
  last_set_ = call->set;
  call->row_offset = static_cast<int64_t>(
      below(rng_, static_cast<uint64_t>(options_.set_rows - call->tokens + 1)));
  call->clobber_salt = static_cast<uint32_t>(rng_());
  call->index = next_call_++;
}

int Schedule::pick_graph() {
  // Prefer a window whose first token count differs from the previous call's.
  int g = 0;
  for (int attempt = 0; attempt < kMaxRedraws; ++attempt) {
    g = static_cast<int>(below(rng_, windows_.size()));
    if (windows_[g].front().tokens != shapes_.last_tokens()) break;
  }
  return g;
}

StepSpec Schedule::next_step() {
  StepSpec step;
  step.step = next_step_++;
  const bool eager = windows_.empty() || static_cast<int>(below(rng_, 4)) < options_.eager_per_4_steps;
  if (eager) {
    step.calls.push_back(shapes_.next());
  } else {
    step.graph = pick_graph();
    step.calls = windows_[step.graph];
  }
  for (CallSpec& call : step.calls) draw_data(&call);
  shapes_.set_last_tokens(step.calls.back().tokens);
  return step;
}

}  // namespace arf::stress
