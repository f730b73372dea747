// The call-sequence CSV (docs/testing.md; one row per call, the same on every rank), read for
// `--replay` and written by `--write-schedule`, so a sequence a soak issued can be replayed.
//
// Columns are found by header name, in any order. Required: tokens, hidden, and pattern
// (arfPattern_t value: 0 allreduce, 1 residual_rmsnorm, 2..6 the quantized ones). Optional, with
// the default in brackets: call, skipped [0], flat [0] (1: arfAllReduce of tokens*hidden elements,
// or flat_count), algo [auto] (arfAlgorithmName spelling), residual_in_place, norm_out_is_input,
// allreduce_out_is_input, per_rank_residual_and_gamma, gamma_fp32, gamma_plus_one [0], eps [1e-6],
// issued_back_to_back [0] (0: the host waits for the call's check before issuing the next),
// grid, block [0: not recorded]; and the columns this tool adds: residual_null, norm_rounding
// (arfNormRounding_t), scale_layout, scale_format, fallback (enum values), flat_count, post_gamma
// [0] (1: a sandwich call, norm patterns only; replaying one needs ARF_EXPERIMENTAL_SANDWICH=1).
// Unknown columns are ignored. Rows marked skipped are kept (and not issued).
#pragma once

#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "call_spec.h"

namespace arf::stress {

struct ReplayFile {
  std::vector<CallSpec> calls;
};

// false with *error naming the line and column on malformed input.
bool parse_replay_csv(std::istream& in, ReplayFile* out, std::string* error);
bool load_replay_csv(const std::string& path, ReplayFile* out, std::string* error);

// The header and one row in the same format (call = the call's index).
std::string replay_csv_header();
std::string replay_csv_row(const CallSpec& c);

}  // namespace arf::stress
