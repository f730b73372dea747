// The planner's built-in defaults (src/policy/default_tuning_table.json, embedded in the library):
// the table parses and validates, and every decision the defaults make is pinned here, at each
// side of each crossover, for every topology, pattern kind and dtype, fused and as a flat
// all-reduce whose last row is partial, together with the fallbacks when a default choice cannot
// run the call (a small Lamport slot) and the rules that come before the table (world 1, an
// empty call, worlds where only some ranks share a device). These are the decisions the planner
// made when the crossovers were constants in its code; a change to the table that moves one
// fails here.
#include <gtest/gtest.h>

#include <string>

#include "cpu/plan_test_util.h"
#include "policy/default_tuning_table.h"
#include "policy/policy.h"

namespace arf {
namespace {

constexpr Algorithm kL = Algorithm::kOneshotLamport;
constexpr Algorithm kP = Algorithm::kOneshotPull;
constexpr Algorithm kT = Algorithm::kTwoshot;

StaticFacts facts_for(int world, int ranks_per_device, DType dtype, int64_t max_hidden = 8192,
                      int64_t oneshot_max_tokens = 4096) {
  StaticFacts f;
  f.world = world;
  f.dtype = dtype;
  f.max_tokens = 4096;
  f.max_hidden = max_hidden;
  f.oneshot_max_tokens = oneshot_max_tokens;
  f.min_sm_count = 132;
  f.max_ranks_per_device = ranks_per_device;
  return f;
}

// A flat all-reduce of `count` elements, laid out as comm_call.cc does (rows of max_hidden).
CallShape flat(int64_t count, const StaticFacts& f) {
  CallShape s;
  s.pattern = Pattern::kAllReduce;
  s.dtype = f.dtype;
  s.num_elems = count;
  s.row_elems = static_cast<int>(std::max<int64_t>(std::min(count, f.max_hidden), 8));
  s.num_rows = (count + s.row_elems - 1) / s.row_elems;
  return s;
}

TEST(DefaultTuningTable, ParsesAndCoversEverySize) {
  const Result<TuningTable>& t = default_tuning_table();
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_FALSE(t.value().entries.empty());
  for (const TuningEntry& e : t.value().entries) {
    EXPECT_EQ(e.key.hidden, 8192) << describe_key(e.key);  // its crossovers are stated at 8192
    EXPECT_GE(e.max_tokens, int64_t{1} << 40) << describe_key(e.key);  // every size a device holds
  }
}

// One topology's crossovers: the algorithm up to and including each last token count (bf16/fp16
// rows of 8192 columns, 16 KiB each), the last range's to any size.
struct Crossovers {
  int world;
  int ranks_per_device;
  bool allreduce;  // the plain all-reduce (else residual_rmsnorm and the quantized patterns)
  std::vector<std::pair<int64_t, Algorithm>> ranges;  // (last token count, algorithm); last: 0 = no end
};

void PrintTo(const Crossovers& c, std::ostream* os) {
  *os << "world " << c.world << ", " << c.ranks_per_device << " per device" << (c.allreduce ? ", allreduce" : "");
}

class DefaultDecisions : public ::testing::TestWithParam<Crossovers> {};

TEST_P(DefaultDecisions, EachSideOfEachCrossover) {
  const Crossovers c = GetParam();
  const Pattern fused[] = {Pattern::kResidualRmsNorm, Pattern::kFp8PerTensor, Pattern::kFp8PerToken,
                           Pattern::kFp8PerGroup, Pattern::kNvfp4, Pattern::kMxfp4};
  for (DType dtype : {DType::kBf16, DType::kFp16}) {
    const StaticFacts f = facts_for(c.world, c.ranks_per_device, dtype);
    const StaticFacts odd = facts_for(c.world, c.ranks_per_device, dtype, /*max_hidden=*/7168);
    int64_t first = 1;
    for (const auto& [last, algorithm] : c.ranges) {
      const int64_t end = last == 0 ? 2048 : last;
      for (int64_t tokens : {first, end}) {
        const std::string what = std::to_string(tokens) + " tokens, dtype " + dtype_name(dtype);
        if (c.allreduce) {
          // By bytes, exactly: the same count as a flat all-reduce with rows of 8192 and of 7168
          // (a partial last row), and one vector either side of the range's ends.
          for (const StaticFacts& facts : {f, odd}) {
            const Plan p = plan_ok(flat(tokens * 8192, facts), facts);
            EXPECT_EQ(p.algorithm, algorithm) << what << ", max_hidden " << facts.max_hidden << ": " << p.reason;
            if (tokens == end && last != 0) {
              EXPECT_NE(plan_ok(flat(tokens * 8192 + 8, facts), facts).algorithm, algorithm) << what;
            }
            if (tokens == first && first > 1) {
              EXPECT_NE(plan_ok(flat((tokens - 1) * 8192, facts), facts).algorithm, algorithm) << what;
              EXPECT_EQ(plan_ok(flat((tokens - 1) * 8192 + 8, facts), facts).algorithm, algorithm) << what;
            }
          }
          continue;
        }
        for (Pattern pattern : fused) {
          CallShape s = call_shape(tokens, 8192, pattern, Algorithm::kAuto);
          s.dtype = dtype;
          const Plan p = plan_ok(s, f);
          EXPECT_EQ(p.algorithm, algorithm) << what << ", pattern " << static_cast<int>(pattern) << ": " << p.reason;
          EXPECT_EQ(p.fallback_level, 1) << what;
          EXPECT_EQ(p.num_kernels, 1) << what;
          // The same bytes in rows of 4096.
          s = call_shape(tokens * 2, 4096, pattern, Algorithm::kAuto);
          s.dtype = dtype;
          EXPECT_EQ(plan_ok(s, f).algorithm, algorithm) << what << " as rows of 4096";
        }
      }
      first = end + 1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    BuiltIn, DefaultDecisions,
    ::testing::Values(
        // One rank per GPU (NVLink): oneshot_lamport to 8 MiB / 256 KiB / 512 KiB per rank; then
        // oneshot_pull at world 2, twoshot at 4 and 8.
        Crossovers{2, 1, false, {{512, kL}, {0, kP}}}, Crossovers{2, 1, true, {{512, kL}, {0, kP}}},
        Crossovers{4, 1, false, {{16, kL}, {0, kT}}}, Crossovers{4, 1, true, {{16, kL}, {0, kT}}},
        Crossovers{8, 1, false, {{32, kL}, {0, kT}}}, Crossovers{8, 1, true, {{32, kL}, {0, kT}}},
        // Every rank on one GPU: world 2 oneshot_lamport to 2 MiB, then oneshot_pull; world 4
        // oneshot_lamport to 512 KiB, then twoshot to 4 MiB and oneshot_pull (fused), oneshot_pull
        // (the plain all-reduce); world 8 twoshot.
        Crossovers{2, 2, false, {{128, kL}, {0, kP}}}, Crossovers{2, 2, true, {{128, kL}, {0, kP}}},
        Crossovers{4, 4, false, {{32, kL}, {256, kT}, {0, kP}}}, Crossovers{4, 4, true, {{32, kL}, {0, kP}}},
        Crossovers{8, 8, false, {{0, kT}}}, Crossovers{8, 8, true, {{0, kT}}},
        // Only some ranks share a GPU (not measured): twoshot.
        Crossovers{4, 2, false, {{0, kT}}}, Crossovers{4, 3, true, {{0, kT}}}, Crossovers{8, 2, false, {{0, kT}}},
        Crossovers{8, 4, true, {{0, kT}}}));

// A default choice that cannot run the call gives way to the choice for larger calls: with a
// Lamport slot of 4 tokens, 5 tokens are past it but within every Lamport range.
TEST(DefaultRules, InfeasibleChoiceTakesTheNextRange) {
  struct Case {
    int world, ranks_per_device;
    Pattern pattern;
    Algorithm expected;
  };
  const Case cases[] = {
      {2, 1, Pattern::kResidualRmsNorm, kP}, {4, 1, Pattern::kResidualRmsNorm, kT}, {8, 1, Pattern::kAllReduce, kT},
      {2, 2, Pattern::kFp8PerGroup, kP},     {4, 4, Pattern::kResidualRmsNorm, kT}, {4, 4, Pattern::kAllReduce, kP},
      {4, 4, Pattern::kNvfp4, kT},
  };
  for (const Case& c : cases) {
    const StaticFacts f = facts_for(c.world, c.ranks_per_device, DType::kBf16, 8192, /*oneshot_max_tokens=*/4);
    EXPECT_EQ(plan_ok(call_shape(4, 8192, c.pattern, Algorithm::kAuto), f).algorithm, kL) << c.world;
    const Plan p = plan_ok(call_shape(5, 8192, c.pattern, Algorithm::kAuto), f);
    EXPECT_EQ(p.algorithm, c.expected) << c.world << " " << c.ranks_per_device << ": " << p.reason;
    EXPECT_NE(p.reason.find("oneshot_lamport infeasible"), std::string::npos) << p.reason;
  }
}

// Before the table: world 1 is the epilogue alone (oneshot_lamport's streaming kernel; twoshot
// when the Lamport slot cannot hold the call), and an empty call takes oneshot_lamport whatever
// the topology.
TEST(DefaultRules, WorldOneAndEmptyCalls) {
  EXPECT_EQ(plan_ok(call_shape(4096, 8192, Pattern::kResidualRmsNorm, Algorithm::kAuto),
                    facts_for(1, 1, DType::kBf16)).algorithm, kL);
  EXPECT_EQ(plan_ok(call_shape(5, 8192, Pattern::kResidualRmsNorm, Algorithm::kAuto),
                    facts_for(1, 1, DType::kBf16, 8192, 4)).algorithm, kT);
  for (const auto& [world, sharing] : {std::pair{2, 1}, std::pair{8, 1}, std::pair{8, 8}, std::pair{4, 2}}) {
    const StaticFacts f = facts_for(world, sharing, DType::kFp16);
    EXPECT_EQ(plan_ok(call_shape(0, 8192, Pattern::kNvfp4, Algorithm::kAuto), f).algorithm, kL) << world;
    EXPECT_EQ(plan_ok(flat(0, f), f).algorithm, kL) << world;
  }
}

// Forced levels and the inner all-reduce of unfused come from the same defaults.
TEST(DefaultRules, ForcedLevelsAndUnfusedFollowTheDefaults) {
  const StaticFacts f = facts_for(4, 4, DType::kBf16);
  for (int level : {2, 3}) {
    const Plan small = plan_ok(call_shape(32, 8192, Pattern::kFp8PerToken, Algorithm::kAuto, level), f);
    EXPECT_EQ(level == 3 ? small.inner_allreduce : small.algorithm, kL) << level;
    const Plan mid = plan_ok(call_shape(33, 8192, Pattern::kFp8PerToken, Algorithm::kAuto, level), f);
    EXPECT_EQ(level == 3 ? mid.inner_allreduce : mid.algorithm, kT) << level;
  }
  // unfused's inner all-reduce is the plain all-reduce's default: oneshot_pull from 33 tokens.
  EXPECT_EQ(plan_ok(call_shape(33, 8192, Pattern::kResidualRmsNorm, Algorithm::kUnfused), f).inner_allreduce, kP);
  EXPECT_EQ(plan_ok(call_shape(32, 8192, Pattern::kResidualRmsNorm, Algorithm::kUnfused), f).inner_allreduce, kL);
}

}  // namespace
}  // namespace arf
