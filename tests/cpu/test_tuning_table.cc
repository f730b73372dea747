// The tuned dispatch table (src/policy/tuning_table.h): strict parsing (a good
// table, and each malformation rejected with its reason), lookup (breakpoint
// edges, nearest hidden with tokens converted to bytes), make_plan consulting
// it (override, infeasible -> default with the reason, forced calls and
// no-entry calls untouched, quantized levels), rank symmetry (a fuzz: the same
// facts and an equal table give the same plan; a table never makes a runnable
// call fail), the JSON round trip, and how ranks agree: only rank 0 reads
// $ARF_TUNING_TABLE, every rank uses its text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/communicator.h"
#include "cpu/plan_test_util.h"
#include "policy/policy.h"
#include "policy/tuning_table.h"

namespace arf {
namespace {

StaticFacts facts_for(int world, int ranks_per_device = 1, int64_t max_tokens = 4096,
                      int64_t oneshot_max_tokens = 0) {
  StaticFacts f;
  f.world = world;
  f.dtype = DType::kBf16;
  f.max_tokens = max_tokens;
  f.max_hidden = 8192;
  f.oneshot_max_tokens = oneshot_max_tokens ? oneshot_max_tokens : max_tokens;
  f.min_sm_count = 132;
  f.max_ranks_per_device = ranks_per_device;
  return f;
}

CallShape call(int64_t tokens, int hidden, Pattern pattern = Pattern::kResidualRmsNorm,
               Algorithm requested = Algorithm::kAuto, int level = 0) {
  return call_shape(tokens, hidden, pattern, requested, level);
}

TuningKey key(int world, int hidden, TuningGroup group = TuningGroup::kPlain,
              RankSharing sharing = RankSharing::kOnePerDevice) {
  return TuningKey{world, sharing, DType::kBf16, group, hidden};
}

// world 8, one rank per device, bf16, plain, hidden 8192: oneshot_lamport
// for 1..128 tokens (the default switches to twoshot past 32), unfused for
// 129..255, twoshot for 256..4096. Plus a quant entry and a second hidden.
TuningTable sample_table() {
  TuningTable t;
  t.machine = "NVIDIA H200";
  t.date = "2026-12-01T10:00:00+0000";
  t.commit = "abc1234";
  t.entries.push_back({key(8, 8192),
                       4096,
                       {{1, Algorithm::kOneshotLamport, 1},
                        {129, Algorithm::kUnfused, 1},
                        {256, Algorithm::kTwoshot, 1}}});
  t.entries.push_back({key(8, 4096), 4096, {{1, Algorithm::kOneshotPull, 1}}});
  t.entries.push_back({key(8, 8192, TuningGroup::kQuant),
                       4096,
                       {{1, Algorithm::kOneshotLamport, 1},
                        {64, Algorithm::kTwoshot, 2},
                        {512, Algorithm::kTwoshot, 3}}});
  return t;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "fixture lacks: " << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// ---- parsing and validation ----

TEST(TuningTableParse, GoodTableReadsBackEqual) {
  const TuningTable t = sample_table();
  ASSERT_TRUE(validate_tuning_table(t).is_ok());
  const std::string text = tuning_table_to_json(t);
  Result<TuningTable> parsed = parse_tuning_table(text);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(parsed.value(), t);
  EXPECT_EQ(tuning_table_to_json(parsed.value()),
            text);  // canonical: write -> read -> write
  EXPECT_NE(text.find("\"format\": \"arfusion-tuning-table\""), std::string::npos);
  EXPECT_NE(text.find("\"version\": 1"), std::string::npos);
}

TEST(TuningTableParse, EmptyEntriesIsAValidTableWithNoOpinion) {
  TuningTable t;
  t.machine = "m";
  Result<TuningTable> parsed = parse_tuning_table(tuning_table_to_json(t));
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_FALSE(parsed.value().lookup(key(8, 8192), 1).has_value());
}

struct BadCase {
  const char* name;
  std::string text;
  const char* reason;
};

TEST(TuningTableParse, EachMalformationIsRejectedWithItsReason) {
  const std::string good = tuning_table_to_json(sample_table());
  TuningTable dup = sample_table();
  dup.entries.push_back(dup.entries[0]);
  const std::vector<BadCase> cases = {
      {"not json", "{\"format\": ", "not valid JSON"},
      {"not an object", "[]", "document: must be a JSON object"},
      {"format", replaced(good, "arfusion-tuning-table", "other"), "is not arfusion-tuning-table"},
      {"version", replaced(good, "\"version\": 1", "\"version\": 2"), "version 2 is not supported"},
      {"unknown top field", replaced(good, "\"version\": 1", "\"version\": 1, \"extra\": 0"),
       "unknown field \"extra\""},
      {"missing field", replaced(good, "\"commit\": \"abc1234\",", ""), "missing field \"commit\""},
      {"world", replaced(good, "\"world\": 8", "\"world\": 3"), "world 3 is not 1, 2, 4 or 8"},
      {"world type", replaced(good, "\"world\": 8", "\"world\": \"8\""),
       "\"world\" must be an integer"},
      {"hidden", replaced(good, "\"hidden\": 8192", "\"hidden\": 100"), "hidden 100 is not"},
      {"hidden too big", replaced(good, "\"hidden\": 8192", "\"hidden\": 32768"), "hidden 32768"},
      {"dtype", replaced(good, "\"dtype\": \"bf16\"", "\"dtype\": \"fp32\""),
       "unknown dtype \"fp32\""},
      {"sharing", replaced(good, "\"ranks_per_device\": \"one\"", "\"ranks_per_device\": \"two\""),
       "unknown ranks_per_device \"two\""},
      {"patterns", replaced(good, "\"patterns\": \"plain\"", "\"patterns\": \"fp8\""),
       "unknown patterns \"fp8\""},
      {"algorithm", replaced(good, "\"algorithm\": \"unfused\"", "\"algorithm\": \"ring\""),
       "unknown algorithm \"ring\""},
      {"auto is no table choice",
       replaced(good, "\"algorithm\": \"unfused\"", "\"algorithm\": \"auto\""),
       "unknown algorithm \"auto\""},
      {"unsorted", replaced(good, "\"min_tokens\": 129", "\"min_tokens\": 300"),
       "breakpoints not sorted: min_tokens 256 after 300"},
      {"repeated breakpoint", replaced(good, "\"min_tokens\": 129", "\"min_tokens\": 256"),
       "breakpoints not sorted"},
      {"first not 1", replaced(good, "\"min_tokens\": 1\n", "\"min_tokens\": 2\n"),
       "first range must start at min_tokens 1"},
      {"past max_tokens", replaced(good, "\"max_tokens\": 4096", "\"max_tokens\": 200"),
       "min_tokens 256 exceeds max_tokens 200"},
      {"max_tokens 0", replaced(good, "\"max_tokens\": 4096", "\"max_tokens\": 0"),
       "max_tokens 0 must be >= 1"},
      {"no ranges",
       replaced(good,
                "\"ranges\": [\n        {\n          \"algorithm\": "
                "\"oneshot_pull\",\n          \"min_tokens\": 1\n        }\n      ]",
                "\"ranges\": []"),
       "no ranges"},
      {"level on plain",
       replaced(good, "\"algorithm\": \"unfused\",", "\"algorithm\": \"unfused\", \"level\": 2,"),
       "unknown field \"level\""},
      {"quant level", replaced(good, "\"level\": 3", "\"level\": 4"), "level 4 is not 1, 2 or 3"},
      {"quant unfused",
       replaced(good, "\"algorithm\": \"twoshot\",\n          \"level\": 3",
                "\"algorithm\": \"unfused\",\n          \"level\": 3"),
       "unfused is level 3"},
      {"duplicate key", tuning_table_to_json(dup), "entries[3]: duplicate key (world 8"},
  };
  for (const BadCase& c : cases) {
    Result<TuningTable> r = parse_tuning_table(c.text);
    ASSERT_FALSE(r.is_ok()) << c.name;
    EXPECT_EQ(r.status().code(), arfInvalidArgument) << c.name;
    EXPECT_EQ(r.status().message().rfind("tuning table: ", 0), 0u) << c.name;
    EXPECT_NE(r.status().message().find(c.reason), std::string::npos)
        << c.name << ": expected '" << c.reason << "' in: " << r.status().message();
  }
}

TEST(TuningTableParse, QuantRangeWithoutLevelIsRejected) {
  const std::string good = tuning_table_to_json(sample_table());
  Result<TuningTable> r = parse_tuning_table(replaced(good, ",\n          \"level\": 3", ""));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("missing field \"level\""), std::string::npos)
      << r.status().message();
}

// ---- lookup ----

TEST(TuningTableLookup, BreakpointEdges) {
  const TuningTable t = sample_table();
  auto algo_at = [&](int64_t rows) { return t.lookup(key(8, 8192), rows)->algorithm; };
  EXPECT_EQ(algo_at(1), Algorithm::kOneshotLamport);
  EXPECT_EQ(algo_at(128), Algorithm::kOneshotLamport);
  EXPECT_EQ(algo_at(129), Algorithm::kUnfused);
  EXPECT_EQ(algo_at(255), Algorithm::kUnfused);
  EXPECT_EQ(algo_at(256), Algorithm::kTwoshot);
  EXPECT_EQ(algo_at(4096), Algorithm::kTwoshot);
  const TuningChoice c = *t.lookup(key(8, 8192), 200);
  EXPECT_EQ(c.from_tokens, 129);
  EXPECT_EQ(c.to_tokens, 255);
  EXPECT_EQ(c.hidden, 8192);
  EXPECT_EQ(t.lookup(key(8, 8192), 256)->to_tokens, 4096);
  // Outside what was measured, or no entry for the key: no opinion.
  EXPECT_FALSE(t.lookup(key(8, 8192), 4097).has_value());
  EXPECT_FALSE(t.lookup(key(8, 8192), 0).has_value());
  EXPECT_FALSE(t.lookup(key(4, 8192), 1).has_value());
  EXPECT_FALSE(t.lookup(key(8, 8192, TuningGroup::kPlain, RankSharing::kShared), 1).has_value());
  TuningKey fp16 = key(8, 8192);
  fp16.dtype = DType::kFp16;
  EXPECT_FALSE(t.lookup(fp16, 1).has_value());
}

TEST(TuningTableLookup, QuantEntriesCarryTheirLevel) {
  const TuningTable t = sample_table();
  const TuningKey q = key(8, 8192, TuningGroup::kQuant);
  EXPECT_EQ(t.lookup(q, 63)->level, 1);
  EXPECT_EQ(t.lookup(q, 64)->level, 2);
  EXPECT_EQ(t.lookup(q, 64)->algorithm, Algorithm::kTwoshot);
  EXPECT_EQ(t.lookup(q, 512)->level, 3);
}

TEST(TuningTableLookup, NearestHiddenWithTokensConvertedToItsBytes) {
  const TuningTable t = sample_table();  // plain world-8 entries at hidden 4096 and 8192
  // 7168 is nearest 8192: 146 rows of 7168 = 127.75 rows of 8192 -> 128
  // (rounded up): lamport; 147 rows -> 128.6 -> 129: unfused.
  TuningChoice c = *t.lookup(key(8, 7168), 146);
  EXPECT_EQ(c.hidden, 8192);
  EXPECT_EQ(c.tokens, 128);
  EXPECT_EQ(c.algorithm, Algorithm::kOneshotLamport);
  EXPECT_EQ(t.lookup(key(8, 7168), 147)->algorithm, Algorithm::kUnfused);
  // 6144 is as near to 4096 as to 8192: the larger hidden wins the tie.
  EXPECT_EQ(t.lookup(key(8, 6144), 1)->hidden, 8192);
  // 2048 is nearest 4096; 8191 rows of 2048 = 4095.5 -> 4096 <= max_tokens;
  // 8193 -> 4097: none.
  c = *t.lookup(key(8, 2048), 8191);
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(c.tokens, 4096);
  EXPECT_EQ(c.algorithm, Algorithm::kOneshotPull);
  EXPECT_FALSE(t.lookup(key(8, 2048), 8193).has_value());
}

// "allreduce" entries: the plain all-reduce takes them where the table has one for its (world,
// sharing, dtype), and the "plain" ones otherwise; residual_rmsnorm never takes them.
TEST(TuningTableLookup, AllReduceEntriesComeBeforePlainOnes) {
  TuningTable t = sample_table();
  const TuningKey flat8 = key(8, 8192, TuningGroup::kAllReduce);
  EXPECT_EQ(t.lookup(flat8, 129)->algorithm, Algorithm::kUnfused);  // no "allreduce" entry: plain's
  t.entries.push_back({key(8, 2048, TuningGroup::kAllReduce), 4096, {{1, Algorithm::kTwoshot, 1}}});
  ASSERT_TRUE(validate_tuning_table(t).is_ok());
  const Result<TuningTable> parsed = parse_tuning_table(tuning_table_to_json(t));
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(parsed.value(), t);
  EXPECT_NE(tuning_table_to_json(t).find("\"patterns\": \"allreduce\""), std::string::npos);
  // Now the all-reduce takes its own entry, whatever its hidden; residual_rmsnorm keeps plain's.
  EXPECT_EQ(t.lookup(flat8, 129)->algorithm, Algorithm::kTwoshot);
  EXPECT_EQ(t.lookup(flat8, 129)->hidden, 2048);
  EXPECT_EQ(t.lookup(key(8, 8192), 129)->algorithm, Algorithm::kUnfused);
  // Other worlds' all-reduces are unaffected.
  EXPECT_FALSE(t.lookup(key(4, 8192, TuningGroup::kAllReduce), 1).has_value());
  // A level on an "allreduce" range is refused as on a plain one.
  const std::string with_level = replaced(tuning_table_to_json(t), "\"patterns\": \"allreduce\"", "\"patterns\": \"quant\"");
  EXPECT_FALSE(parse_tuning_table(with_level).is_ok());  // a quant range needs its level
}

// lookup_elems reads a call by its elements (bytes per rank) exactly: for whole rows the same as
// lookup, for a flat all-reduce with a partial last row its real size, not its rows'.
TEST(TuningTableLookup, ByElementsExactlyWhateverTheRows) {
  const TuningTable t = sample_table();  // plain world 8: lamport to 128 tokens of 8192
  for (int64_t rows : {int64_t{1}, int64_t{128}, int64_t{129}, int64_t{4096}}) {
    EXPECT_EQ(t.lookup_elems(key(8, 8192), rows * 8192)->algorithm, t.lookup(key(8, 8192), rows)->algorithm);
    EXPECT_EQ(t.lookup_elems(key(8, 7168), rows * 7168)->tokens, t.lookup(key(8, 7168), rows)->tokens);
  }
  // 128 x 8192 elements laid out in rows of 7168 are 146.3 rows: 147 rows' bytes would be 128.6,
  // so 129 tokens (unfused); the elements are exactly 128 tokens (oneshot_lamport).
  const int64_t elems = 128 * 8192;
  EXPECT_EQ(t.lookup(key(8, 7168), 147)->algorithm, Algorithm::kUnfused);
  const TuningChoice c = *t.lookup_elems(key(8, 7168), elems);
  EXPECT_EQ(c.tokens, 128);
  EXPECT_EQ(c.algorithm, Algorithm::kOneshotLamport);
  EXPECT_EQ(c.entry, &t.entries[0]);
  EXPECT_EQ(c.range, 0u);
  EXPECT_EQ(t.lookup_elems(key(8, 7168), elems + 8)->range, 1u);
  EXPECT_FALSE(t.lookup_elems(key(8, 8192), 0).has_value());
  EXPECT_FALSE(t.lookup_elems(key(8, 8192), 4096 * 8192 + 1).has_value());  // past max_tokens
}

// ---- make_plan with a table ----

TEST(TunedPlan, TableOverridesTheDefaults) {
  const TuningTable t = sample_table();
  const StaticFacts f = facts_for(8);
  // 64 tokens of 8192 bf16 = 1 MiB/rank: the default is twoshot (> 512 KiB),
  // the table lamport.
  EXPECT_EQ(plan_ok(call(64, 8192), f).algorithm, Algorithm::kTwoshot);
  Plan p = plan_ok(call(64, 8192), f, &t);
  EXPECT_EQ(p.algorithm, Algorithm::kOneshotLamport);
  EXPECT_FALSE(p.forced);
  EXPECT_EQ(p.reason, "tuned table: oneshot_lamport for tokens 1..128 at hidden 8192");
  EXPECT_EQ(p.grid,
            plan_ok(call(64, 8192, Pattern::kResidualRmsNorm, Algorithm::kOneshotLamport), f).grid);
  // unfused from the table: two kernels, the inner all-reduce is the default's.
  p = plan_ok(call(200, 8192), f, &t);
  EXPECT_EQ(p.algorithm, Algorithm::kUnfused);
  EXPECT_EQ(p.inner_allreduce, Algorithm::kTwoshot);
  EXPECT_EQ(p.num_kernels, 2);
  EXPECT_EQ(p.reason,
            "tuned table: unfused for tokens 129..255 at hidden 8192 "
            "(inner twoshot)");
  // A plain all-reduce uses the plain entries too.
  EXPECT_EQ(plan_ok(call(64, 8192, Pattern::kAllReduce), f, &t).algorithm,
            Algorithm::kOneshotLamport);
  // Nearest hidden: the reason says so.
  p = plan_ok(call(146, 7168), f, &t);
  EXPECT_EQ(p.algorithm, Algorithm::kOneshotLamport);
  EXPECT_NE(p.reason.find("(nearest tabulated hidden; this call is 128 of its tokens)"),
            std::string::npos)
      << p.reason;
}

TEST(TunedPlan, InfeasibleTableChoiceFallsBackToTheDefaultWithTheReason) {
  const TuningTable t = sample_table();
  // Lamport slots hold 16 tokens of 8192: the table's lamport for 64 tokens
  // cannot run.
  const StaticFacts f = facts_for(8, 1, 4096, /*oneshot_max_tokens=*/16);
  const Plan p = plan_ok(call(64, 8192), f, &t);
  EXPECT_EQ(p.algorithm, Algorithm::kTwoshot);
  EXPECT_EQ(p.reason.rfind("tuned table had no feasible choice (oneshot_lamport for tokens "
                           "1..128 at hidden 8192: ",
                           0),
            0u)
      << p.reason;
  EXPECT_NE(p.reason.find("exceed the Lamport slot"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find(") -> default auto: "), std::string::npos) << p.reason;
}

TEST(TunedPlan, NoEntryForcedAndOutOfRangeCallsKeepTheirPlans) {
  const TuningTable t = sample_table();
  for (const StaticFacts& f : {facts_for(4), facts_for(8, 8), facts_for(2)}) {
    for (int64_t tokens : {1, 31, 64, 1000}) {
      const Plan with = plan_ok(call(tokens, 8192), f, &t);
      const Plan without = plan_ok(call(tokens, 8192), f);
      EXPECT_EQ(with.algorithm, without.algorithm);
      EXPECT_EQ(with.reason, without.reason);
    }
  }
  // A forced algorithm is never replaced, and a forced infeasible one still
  // fails.
  const StaticFacts f = facts_for(8, 1, 4096, 16);
  EXPECT_EQ(plan_ok(call(64, 8192, Pattern::kResidualRmsNorm, Algorithm::kTwoshot), f, &t).reason,
            "forced: twoshot");
  EXPECT_FALSE(
      make_plan(call(64, 8192, Pattern::kResidualRmsNorm, Algorithm::kOneshotLamport), f, &t)
          .is_ok());
}

TEST(TunedPlan, QuantLevelsFromTheTable) {
  const TuningTable t = sample_table();
  const StaticFacts f = facts_for(8);
  Plan p = plan_ok(call(100, 8192, Pattern::kFp8PerGroup), f, &t);
  EXPECT_EQ(p.algorithm, Algorithm::kTwoshot);
  EXPECT_EQ(p.fallback_level, 2);
  EXPECT_EQ(p.num_kernels, 2);
  EXPECT_EQ(p.reason.rfind("tuned table: twoshot for tokens 64..511 at hidden 8192; level 2", 0),
            0u)
      << p.reason;
  p = plan_ok(call(600, 8192, Pattern::kNvfp4), f, &t);
  EXPECT_EQ(p.algorithm, Algorithm::kUnfused);
  EXPECT_EQ(p.inner_allreduce, Algorithm::kTwoshot);
  EXPECT_EQ(p.fallback_level, 3);
  // At 32 tokens the table says level 1 lamport, as the default would.
  p = plan_ok(call(32, 8192, Pattern::kFp8PerTensor), f, &t);
  EXPECT_EQ(p.fallback_level, 1);
  EXPECT_EQ(p.algorithm, Algorithm::kOneshotLamport);
  // A forced level keeps the defaults (the table's algorithm was measured with
  // its own level).
  p = plan_ok(call(100, 8192, Pattern::kFp8PerGroup, Algorithm::kAuto, 1), f, &t);
  EXPECT_EQ(p.fallback_level, 1);
  EXPECT_EQ(p.reason.rfind("auto: ", 0), 0u) << p.reason;
}

// ---- rank symmetry ----

TuningTable random_table(std::mt19937& rng) {
  constexpr Algorithm kPlain[] = {Algorithm::kOneshotLamport, Algorithm::kOneshotPull,
                                  Algorithm::kTwoshot, Algorithm::kUnfused};
  constexpr int kWorlds[] = {1, 2, 4, 8};
  constexpr int kHiddens[] = {1024, 2880, 4096, 7168, 8192};
  TuningTable t;
  t.machine = "fuzz";
  for (int w : kWorlds) {
    for (int group = 0; group < 2; ++group) {
      for (int h : kHiddens) {
        if (rng() % 2) continue;
        TuningEntry e{
            key(w, h, static_cast<TuningGroup>(group), static_cast<RankSharing>(rng() % 2)),
            1 + static_cast<int64_t>(rng() % 2048),
            {}};
        for (int64_t min = 1; min <= e.max_tokens; min += 1 + static_cast<int64_t>(rng() % 300)) {
          TuningRange r{min, kPlain[rng() % (group ? 3 : 4)],
                        group ? 1 + static_cast<int>(rng() % 3) : 1};
          e.ranges.push_back(r);
        }
        if (std::none_of(t.entries.begin(), t.entries.end(),
                         [&](const TuningEntry& o) { return o.key == e.key; })) {
          t.entries.push_back(e);
        }
      }
    }
  }
  return t;
}

TEST(TunedPlan, FuzzSameFactsAndTableGiveTheSamePlanAndNeverAFailure) {
  std::mt19937 rng(20261201);
  constexpr Pattern kPatterns[] = {Pattern::kAllReduce, Pattern::kResidualRmsNorm,
                                   Pattern::kFp8PerGroup, Pattern::kNvfp4};
  for (int trial = 0; trial < 40; ++trial) {
    const TuningTable table = random_table(rng);
    ASSERT_TRUE(validate_tuning_table(table).is_ok()) << validate_tuning_table(table).message();
    // Each rank holds its own copy, parsed from rank 0's text (as
    // agree_tuning_table does).
    Result<TuningTable> copy = parse_tuning_table(tuning_table_to_json(table));
    ASSERT_TRUE(copy.is_ok()) << copy.status().message();
    for (int i = 0; i < 200; ++i) {
      const int world = 1 << (rng() % 4);
      const StaticFacts f = facts_for(world, 1 + static_cast<int>(rng() % 2) * (world - 1),
                                      1 + rng() % 2048, 1 + rng() % 2048);
      const int hidden = 128 * (1 + static_cast<int>(rng() % 64));
      const CallShape s = call(static_cast<int64_t>(rng() % 2100), hidden, kPatterns[rng() % 4]);
      Result<Plan> base = make_plan(s, f);
      Result<Plan> a = make_plan(s, f, &table);
      Result<Plan> b = make_plan(s, f, &copy.value());
      ASSERT_EQ(base.is_ok(), a.is_ok()) << (a.is_ok() ? base : a).status().message();
      ASSERT_EQ(a.is_ok(), b.is_ok());
      if (!a.is_ok()) continue;
      const Plan& pa = a.value();
      const Plan& pb = b.value();
      EXPECT_EQ(pa.algorithm, pb.algorithm);
      EXPECT_EQ(pa.inner_allreduce, pb.inner_allreduce);
      EXPECT_EQ(pa.grid, pb.grid);
      EXPECT_EQ(pa.block, pb.block);
      EXPECT_EQ(pa.fallback_level, pb.fallback_level);
      EXPECT_EQ(pa.num_kernels, pb.num_kernels);
      EXPECT_EQ(pa.reason, pb.reason);
      // The plan the table produced is one the policy calls feasible.
      const Algorithm ran = pa.algorithm == Algorithm::kUnfused ? pa.inner_allreduce : pa.algorithm;
      EXPECT_TRUE(algorithm_feasible(ran, s, f, nullptr)) << pa.reason;
    }
  }
}

// ---- how ranks agree: rank 0's file, rank 0's text ----

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TuningTableRanks, OnlyRankZeroReadsTheEnvironmentAndABadTableFails) {
  const std::string good = write_temp("arf_table_good.json", tuning_table_to_json(sample_table()));
  const std::string bad =
      write_temp("arf_table_bad.json",
                 replaced(tuning_table_to_json(sample_table()), "\"world\": 8", "\"world\": 6"));
  Result<std::string> r = tuning_table_contribution(0, good.c_str());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value(), tuning_table_to_json(sample_table()));
  EXPECT_TRUE(tuning_table_contribution(0, nullptr).value().empty());
  EXPECT_TRUE(tuning_table_contribution(0, "").value().empty());
  // Other ranks contribute nothing, whatever their environment says.
  EXPECT_TRUE(tuning_table_contribution(1, bad.c_str()).value().empty());
  r = tuning_table_contribution(0, bad.c_str());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), arfInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "ARF_TUNING_TABLE=" + bad + ": tuning table: entries[0]: world 6 is not 1, 2, 4 or 8");
  r = tuning_table_contribution(0, "/nonexistent/arf_table.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cannot open \"/nonexistent/arf_table.json\""),
            std::string::npos);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

TEST(TuningTableRanks, EveryRankUsesRankZerosTable) {
  std::vector<RankInfo> infos(4);
  infos[0].tuning_table_json = tuning_table_to_json(sample_table());
  TuningTable other = sample_table();
  other.entries.pop_back();
  infos[2].tuning_table_json = tuning_table_to_json(other);  // ignored: not rank 0's
  Result<std::shared_ptr<const TuningTable>> t = agree_tuning_table(infos);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ASSERT_NE(t.value(), nullptr);
  EXPECT_EQ(*t.value(), sample_table());
  infos[0].tuning_table_json.clear();
  t = agree_tuning_table(infos);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t.value(), nullptr);  // rank 0 had none: the defaults, on every rank
}

}  // namespace
}  // namespace arf
