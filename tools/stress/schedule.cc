// The soak's deterministic call schedule (schedule.h).
#include "schedule.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace arf::stress {
namespace {

constexpr float kEpsChoices[4] = {1e-6f, 1e-5f, 1e-3f, 0.1f};

int64_t quant_block(Pat p) {
  switch (p) {
    case Pat::kFp8Group: return 128;
    case Pat::kNvfp4: return 16;
    case Pat::kMxfp4: return 32;
    default: return 8;
  }
}

std::tuple<int, int, int64_t> key_of(Pat p, arfAlgorithm_t a, int64_t hidden) {
  // Flat calls plan as allreduce/auto (arfAllReduce has no algorithm argument).
  if (p == Pat::kFlat) return {static_cast<int>(Pat::kAllReduce), static_cast<int>(arfAlgoAuto), hidden};
  return {static_cast<int>(p), static_cast<int>(a), hidden};
}

}  // namespace

PlanInfo plan_info_from(arfStatus_t status, const arfPlan_t& plan) {
  PlanInfo info;
  if (status != arfSuccess) return info;
  info.ok = true;
  info.algorithm = plan.algorithm;
  info.inner = plan.inner_allreduce;
  info.kernels = plan.num_kernels;
  info.grid = plan.grid;
  info.block = plan.block;
  info.fallback_level = plan.fallback_level;
  return info;
}

std::vector<int64_t> hiddens_for(Pat p, const std::vector<int64_t>& hiddens) {
  std::vector<int64_t> out;
  for (int64_t h : hiddens) {
    if (h % quant_block(p) == 0) out.push_back(h);
  }
  return out;
}

// ---- BoundaryTable -----------------------------------------------------------------------------

BoundaryTable BoundaryTable::probe(const ScheduleOptions& o, const PlanOracle& oracle) {
  BoundaryTable t;
  std::set<std::tuple<int, int, int64_t>> done;
  for (Pat p : o.patterns) {
    for (int64_t h : hiddens_for(p, o.hiddens)) {
      const std::vector<arfAlgorithm_t> as =
          p == Pat::kFlat ? std::vector<arfAlgorithm_t>{arfAlgoAuto} : o.algos;
      for (arfAlgorithm_t a : as) {
        const auto key = key_of(p, a, h);
        if (!done.insert(key).second) continue;  // flat and allreduce/auto share a key
        CallSpec c;
        c.pattern = static_cast<Pat>(std::get<0>(key));
        c.algorithm = static_cast<arfAlgorithm_t>(std::get<1>(key));
        c.hidden = h;
        std::set<int64_t> edges;
        PlanInfo prev;
        int64_t first_ok = 0, last_ok = 0, full_grid = 0;
        int max_grid = 0;
        for (int64_t tok = 1; tok <= o.max_tokens; ++tok) {
          c.tokens = tok;
          const PlanInfo here = oracle(c);
          if (here.ok) {
            if (first_ok == 0) first_ok = tok;
            last_ok = tok;
            if (here.grid > max_grid) {
              max_grid = here.grid;
              full_grid = tok;
            }
          }
          if (tok > 1 && !here.same_dispatch(prev)) {
            if (prev.ok) edges.insert(tok - 1);  // the last of the old dispatch
            if (here.ok) edges.insert(tok);      // the first of the new one
          }
          prev = here;
        }
        if (first_ok > 0) {
          edges.insert(first_ok);
          edges.insert(last_ok);
        }
        t.table_[key].assign(edges.begin(), edges.end());
        t.full_grid_[key] = full_grid;
      }
    }
  }
  return t;
}

const std::vector<int64_t>& BoundaryTable::at(Pat p, arfAlgorithm_t a, int64_t hidden) const {
  const auto it = table_.find(key_of(p, a, hidden));
  return it == table_.end() ? empty_ : it->second;
}

int64_t BoundaryTable::full_grid_tokens(Pat p, arfAlgorithm_t a, int64_t hidden) const {
  const auto it = full_grid_.find(key_of(p, a, hidden));
  return it == full_grid_.end() ? 0 : it->second;
}

size_t BoundaryTable::num_points() const {
  size_t n = 0;
  for (const auto& [k, v] : table_) n += v.size();
  return n;
}

// ---- Rng -----------------------------------------------------------------------------------------

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rng::below(uint64_t n) {
  // Rejection keeps it exactly uniform (the bias of a plain modulo is tiny, but free to avoid).
  const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % n);
  uint64_t x;
  do {
    x = next();
  } while (x >= limit);
  return x % n;
}

bool Rng::chance(uint32_t num, uint32_t den) { return below(den) < num; }

size_t Rng::pick_weighted(const std::vector<uint32_t>& weights) {
  uint64_t sum = 0;
  for (uint32_t w : weights) sum += w;
  uint64_t r = below(sum);
  size_t i = 0;
  while (r >= weights[i]) r -= weights[i++];
  return i;
}

int64_t Rng::log_uniform(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  // u in [0, 1) with 53 bits, then lo * (hi/lo)^u; IEEE double exp/log give the same value on
  // every rank of one binary, which is all the schedule needs.
  const double u = static_cast<double>(next() >> 11) * 0x1p-53;
  const double v = std::exp(std::log(static_cast<double>(lo)) +
                            u * (std::log(static_cast<double>(hi) + 1.0) - std::log(static_cast<double>(lo))));
  return std::clamp<int64_t>(static_cast<int64_t>(v), lo, hi);
}

// ---- Generator -----------------------------------------------------------------------------------

const char* token_mix_name(TokenMix m) { return m == TokenMix::kVolume ? "volume" : "engine"; }

uint32_t sandwich_numerator(double share) {
  if (!(share > 0.0)) return 0;
  if (share >= 1.0) return kSandwichDen;
  return static_cast<uint32_t>(std::llround(share * kSandwichDen));
}

Generator::Generator(const ScheduleOptions& o, const BoundaryTable* table, PlanOracle oracle)
    : o_(o), table_(table), oracle_(std::move(oracle)), rng_(o.seed ^ 0x636875726E21ull),
      sandwich_rng_(o.seed ^ 0x73616E6477696368ull), sandwich_num_(sandwich_numerator(o.sandwich_share)) {
  std::sort(o_.hiddens.begin(), o_.hiddens.end());
  capacity_elems_ = o_.max_tokens * o_.hiddens.back();
}

void Generator::draw_tokens(CallSpec* c, const std::vector<int64_t>& hiddens) {
  // Hidden first: never the previous call's (when the pattern allows another).
  std::vector<int64_t> others;
  for (int64_t h : hiddens) {
    if (h != previous_hidden_) others.push_back(h);
  }
  c->hidden = rng_.pick(others.empty() ? hiddens : others);
  const int64_t largest = hiddens.back();
  const auto large = [&] {
    // The largest hidden, or the largest other one right after it (a new hidden every call).
    c->hidden = largest;
    for (auto it = hiddens.rbegin(); it != hiddens.rend() && *it == previous_hidden_; ++it) {
      if (it + 1 != hiddens.rend()) c->hidden = *(it + 1);
    }
    if (rng_.chance(1, 2)) {
      c->tokens = o_.max_tokens;
    } else {
      c->tokens = std::max<int64_t>(1, o_.max_tokens / 2 + static_cast<int64_t>(
                                            rng_.below(static_cast<uint64_t>(o_.max_tokens / 2 + 1))));
    }
  };
  if (pending_ == 1) {
    c->token_kind = TokenKind::kTinyAfterLarge;
    c->tokens = 1 + static_cast<int64_t>(rng_.below(4));
    pending_ = 2;
    return;
  }
  if (pending_ == 2) {
    c->token_kind = TokenKind::kLargeAfterTiny;
    large();
    if (o_.mix == TokenMix::kVolume) draw_large_volume(c);
    pending_ = 0;
    return;
  }
  const uint64_t r = rng_.below(100);
  if (r < 40) {
    c->token_kind = TokenKind::kTiny;
    c->tokens = std::min<int64_t>(o_.max_tokens, 1 + static_cast<int64_t>(rng_.below(8)));
  } else if (r < 70) {
    c->token_kind = TokenKind::kLogUniform;
    c->tokens = rng_.log_uniform(1, o_.max_tokens);
  } else if (r < 85) {
    c->token_kind = TokenKind::kBoundary;
    const std::vector<int64_t>& b = table_->at(c->pattern, c->algorithm, c->hidden);
    c->tokens = b.empty() ? rng_.log_uniform(1, o_.max_tokens) : rng_.pick(b);
  } else if (o_.mix == TokenMix::kVolume && !rng_.chance(2, 15)) {
    const int64_t full_grid = table_->full_grid_tokens(c->pattern, c->algorithm, c->hidden);
    c->token_kind = full_grid > 0 ? TokenKind::kFullGrid : TokenKind::kLogUniform;
    c->tokens = full_grid > 0 ? full_grid : rng_.log_uniform(1, o_.max_tokens);
  } else if (previous_hidden_ != largest || hiddens.size() == 1) {
    c->token_kind = TokenKind::kFull;
    c->hidden = largest;
    c->tokens = o_.max_tokens;
  } else {  // full capacity right after the largest hidden would repeat the hidden
    c->token_kind = TokenKind::kLogUniform;
    c->tokens = rng_.log_uniform(1, o_.max_tokens);
  }
  // After a large call (a quarter of capacity or more; in the volume mix also one at full grid),
  // half the time: tiny, then large.
  bool large_call = c->tokens * c->hidden * 4 >= capacity_elems_;
  if (o_.mix == TokenMix::kVolume && !large_call) {
    const int64_t full_grid = table_->full_grid_tokens(c->pattern, c->algorithm, c->hidden);
    large_call = full_grid > 0 && c->tokens >= full_grid;
  }
  if (large_call && rng_.chance(1, 2)) pending_ = 1;
}

void Generator::draw_large_volume(CallSpec* c) {
  // c holds the engine mix's large call (hidden and tokens); 3 times in 4 it becomes full grid.
  const int64_t full_grid = table_->full_grid_tokens(c->pattern, c->algorithm, c->hidden);
  if (full_grid > 0 && !rng_.chance(1, 4)) c->tokens = full_grid;
}

void Generator::draw_options(CallSpec* c) {
  const Pat p = c->pattern;
  if (p == Pat::kAllReduce || p == Pat::kFlat) {
    c->allreduce_out_is_input = rng_.chance(3, 10);
  }
  if (p == Pat::kFlat) {
    c->flat_count = c->tokens * c->hidden;
    if (c->hidden > 8 && rng_.chance(1, 4)) {  // a count that is not a whole number of rows
      c->flat_count -= 8 * (1 + static_cast<int64_t>(rng_.below(static_cast<uint64_t>(c->hidden / 8 - 1))));
    }
  }
  if (pat_has_norm(p)) {
    c->residual_null = rng_.chance(1, 8);
    c->residual_in_place = !c->residual_null && rng_.chance(1, 2);
    c->norm_out_is_input = rng_.chance(3, 10);
    c->per_rank_residual_gamma = rng_.chance(1, 8);
    c->gamma_fp32 = rng_.chance(3, 10);
    c->gamma_plus_one = rng_.chance(3, 10);
    c->eps = kEpsChoices[rng_.below(4)];
    c->rounding = rng_.chance(1, 2) ? arfNormRoundOnce : arfNormRoundBeforeWeight;
  }
  if (p == Pat::kFp8Group) {
    c->layout = rng_.chance(1, 2) ? arfScaleRowMajor : arfScaleMnMajor;
    c->format = static_cast<arfScaleFormat_t>(rng_.below(3));
  } else if (p == Pat::kNvfp4 || p == Pat::kMxfp4) {
    c->layout = rng_.chance(1, 2) ? arfScaleRowMajor : arfScaleSwizzled128x4;
  }
  if (pat_is_quant(p)) {
    const uint64_t f = rng_.below(10);
    if (c->algorithm == arfAlgoUnfused) {
      c->fallback = f < 8 ? arfFallbackAuto : arfFallbackThreeKernels;
    } else {
      c->fallback = f < 7 ? arfFallbackAuto : static_cast<arfFallbackLevel_t>(f - 6);
    }
  }
}

bool apply_plan(CallSpec* c, const PlanOracle& oracle) {
  if (c->pattern == Pat::kFlat) {  // arfAllReduce: any multiple of 8 up to capacity runs
    c->plan_algorithm = arfAlgoAuto;
    c->skipped = false;
    return true;
  }
  const auto attempt = [&] {
    if (pat_has_scale_out(c->pattern) &&
        arfScaleBufferBytes(to_arf_pattern(c->pattern), c->layout, c->format,
                            static_cast<size_t>(c->tokens), static_cast<size_t>(c->hidden)) == 0) {
      return PlanInfo{};
    }
    return oracle(*c);
  };
  PlanInfo info = attempt();
  if (!info.ok && c->fallback != arfFallbackAuto) {
    c->fallback = arfFallbackAuto;
    info = attempt();
  }
  if (!info.ok && (c->layout != arfScaleRowMajor || c->format != arfScaleFp32)) {
    c->layout = arfScaleRowMajor;
    c->format = arfScaleFp32;
    info = attempt();
  }
  c->skipped = !info.ok;
  c->plan_algorithm = info.algorithm;
  c->plan_grid = info.grid;
  c->plan_block = info.block;
  c->plan_kernels = info.kernels;
  return info.ok;
}

void Generator::plan(CallSpec* c) { apply_plan(c, oracle_); }

CallSpec Generator::next() {
  CallSpec c;
  c.pattern = rng_.pick(o_.patterns);
  if (c.pattern == Pat::kFlat) {
    c.algorithm = arfAlgoAuto;
  } else {
    c.algorithm = o_.algo_weights.empty() ? rng_.pick(o_.algos)
                                          : o_.algos[rng_.pick_weighted(o_.algo_weights)];
  }
  draw_tokens(&c, hiddens_for(c.pattern, o_.hiddens));
  previous_hidden_ = c.hidden;
  draw_options(&c);
  if (sandwich_num_ > 0 && pat_has_norm(c.pattern)) c.sandwich = sandwich_rng_.chance(sandwich_num_, kSandwichDen);
  plan(&c);
  return c;
}

}  // namespace arf::stress
