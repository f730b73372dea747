// Shared by the policy tests: a call shape, and make_plan that must succeed.
#pragma once

#include <gtest/gtest.h>

#include "policy/policy.h"

namespace arf {

// tokens rows of `hidden` bf16 columns (CallShape's other fields as given).
inline CallShape call_shape(int64_t tokens, int hidden, Pattern pattern, Algorithm requested,
                            int requested_fallback = 0) {
  CallShape s;
  s.pattern = pattern;
  s.requested = requested;
  s.requested_fallback = requested_fallback;
  s.dtype = DType::kBf16;
  s.num_elems = tokens * hidden;
  s.row_elems = hidden;
  s.num_rows = tokens;
  return s;
}

inline Plan plan_ok(const CallShape& shape, const StaticFacts& facts,
                    const TuningTable* table = nullptr) {
  Result<Plan> r = make_plan(shape, facts, table);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r.value() : Plan{};
}

}  // namespace arf
