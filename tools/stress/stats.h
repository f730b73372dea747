// What the soak issued, counted on the host from the schedule (the same on every rank): the
// report shows the coverage (per algorithm, pattern, hidden, token kind, option) so a run that
// quietly stopped varying something is visible. Also the budget rule --calls-per-algorithm.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "call_spec.h"

namespace arf::stress {

struct IssueStats {
  uint64_t issued = 0;
  uint64_t skipped = 0;
  std::map<std::string, uint64_t> per_algorithm;       // requested (flat calls count as auto)
  std::map<std::string, uint64_t> skipped_per_algorithm;
  std::map<std::string, uint64_t> per_plan_algorithm;  // what arfPlan said runs
  std::map<std::string, uint64_t> per_pattern;
  std::map<int64_t, uint64_t> per_hidden;
  std::map<std::string, uint64_t> per_token_kind;
  uint64_t tiny_after_large = 0;  // a call of <= 4 tokens right after a large one
  uint64_t full_capacity = 0;     // max_tokens at the largest hidden
  uint64_t residual_null = 0, residual_in_place = 0, norm_out_is_input = 0, allreduce_out_is_input = 0;
  uint64_t per_rank_data = 0, gamma_fp32 = 0, gamma_plus_one = 0, round_before_weight = 0;
  std::map<std::string, uint64_t> sandwich_per_pattern;  // sandwich calls (post_gamma set)
  uint64_t sandwich = 0;
  uint64_t plan_mismatch_recorded = 0;  // replay: arfPlan's grid/block != the CSV's
  int64_t largest_elements = 0;         // tokens * hidden of the largest issued call

  // Context for classifying calls.
  int64_t max_tokens = 0;
  int64_t largest_hidden = 0;
  int64_t previous_elements = 0;

  void record_issued(const CallSpec& c);
  void record_skipped(const CallSpec& c);
  bool operator==(const IssueStats& o) const;
};

// --calls-per-algorithm: every algorithm of the list issued at least n calls (an algorithm the
// planner refused n times without ever running counts as done: it cannot run here).
bool every_algorithm_reached(const IssueStats& s, const std::vector<arfAlgorithm_t>& algos, uint64_t n);

}  // namespace arf::stress
