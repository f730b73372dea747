// Issue statistics of the soak (stats.h).
#include "stats.h"

namespace arf::stress {

void IssueStats::record_issued(const CallSpec& c) {
  ++issued;
  ++per_algorithm[arfAlgorithmName(c.pattern == Pat::kFlat ? arfAlgoAuto : c.algorithm)];
  if (c.pattern != Pat::kFlat) ++per_plan_algorithm[arfAlgorithmName(c.plan_algorithm)];
  ++per_pattern[pat_name(c.pattern)];
  ++per_hidden[c.hidden];
  ++per_token_kind[token_kind_name(c.token_kind)];
  const int64_t elems = c.tokens * c.hidden;
  // "Large": a quarter of the communicator's capacity or more (the generator's rule).
  const bool previous_large = previous_elements * 4 >= max_tokens * largest_hidden && previous_elements > 0;
  if (previous_large && c.tokens <= 4) ++tiny_after_large;
  if (c.tokens == max_tokens && c.hidden == largest_hidden) ++full_capacity;
  previous_elements = elems;
  if (elems > largest_elements) largest_elements = elems;
  if (pat_has_norm(c.pattern)) {
    residual_null += c.residual_null;
    residual_in_place += c.residual_in_place;
    norm_out_is_input += c.norm_out_is_input;
    per_rank_data += c.per_rank_residual_gamma;
    gamma_fp32 += c.gamma_fp32;
    gamma_plus_one += c.gamma_plus_one;
    round_before_weight += c.rounding == arfNormRoundBeforeWeight;
    if (c.sandwich) {
      ++sandwich;
      ++sandwich_per_pattern[pat_name(c.pattern)];
    }
  } else {
    allreduce_out_is_input += c.allreduce_out_is_input;
  }
  if (c.recorded_grid != 0 && c.pattern != Pat::kFlat &&
      (c.recorded_grid != c.plan_grid || (c.recorded_block != 0 && c.recorded_block != c.plan_block))) {
    ++plan_mismatch_recorded;
  }
}

void IssueStats::record_skipped(const CallSpec& c) {
  ++skipped;
  ++skipped_per_algorithm[arfAlgorithmName(c.pattern == Pat::kFlat ? arfAlgoAuto : c.algorithm)];
}

bool IssueStats::operator==(const IssueStats& o) const {
  return issued == o.issued && skipped == o.skipped && per_algorithm == o.per_algorithm &&
         per_plan_algorithm == o.per_plan_algorithm && per_pattern == o.per_pattern &&
         per_hidden == o.per_hidden && per_token_kind == o.per_token_kind &&
         tiny_after_large == o.tiny_after_large && full_capacity == o.full_capacity &&
         sandwich_per_pattern == o.sandwich_per_pattern;
}

bool every_algorithm_reached(const IssueStats& s, const std::vector<arfAlgorithm_t>& algos, uint64_t n) {
  for (arfAlgorithm_t a : algos) {
    const auto it = s.per_algorithm.find(arfAlgorithmName(a));
    const uint64_t ran = it == s.per_algorithm.end() ? 0 : it->second;
    const auto sk = s.skipped_per_algorithm.find(arfAlgorithmName(a));
    const uint64_t refused = sk == s.skipped_per_algorithm.end() ? 0 : sk->second;
    if (ran < n && !(ran == 0 && refused >= n)) return false;
  }
  return true;
}

}  // namespace arf::stress
