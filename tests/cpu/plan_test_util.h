// Shared by the policy tests: make_plan that must succeed.
#pragma once

#include <gtest/gtest.h>

#include "policy/policy.h"

namespace arf {

inline Plan plan_ok(const CallShape& shape, const StaticFacts& facts) {
  Result<Plan> r = make_plan(shape, facts);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r.value() : Plan{};
}

}  // namespace arf
