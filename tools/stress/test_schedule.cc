// CPU tests of the soak's schedule (schedule.h): determinism across "ranks" (independent
// generators), the token mix, the hidden rule, the tiny-after-large transitions, the probed
// boundaries, skipping, and the stop rule. The planner is the library's arfPlanFromFacts, which
// needs no GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <thread>

#include "replay_csv.h"
#include "schedule.h"
#include "stats.h"
#include "stop_control.h"

namespace arf::stress {
namespace {

arfPlanFacts_t facts(int world, int64_t max_tokens, int64_t max_hidden) {
  arfPlanFacts_t f;
  arfPlanFactsInit(&f);
  f.world_size = world;
  f.max_tokens = static_cast<size_t>(max_tokens);
  f.max_hidden = static_cast<size_t>(max_hidden);
  f.ranks_per_device = world;  // virtual ranks on one GPU
  f.sm_count = 132;
  return f;
}

PlanOracle facts_oracle(const arfPlanFacts_t f) {
  return [f](const CallSpec& c) {
    const arfFusedArgs_t a = shape_args(c, f.dtype);
    arfPlan_t p;
    return plan_info_from(arfPlanFromFacts(&f, &a, &p), p);
  };
}

ScheduleOptions options(int64_t max_tokens = 256) {
  ScheduleOptions o;
  o.seed = 42;
  o.patterns = {Pat::kAllReduce, Pat::kFlat, Pat::kResidualRmsNorm, Pat::kFp8Token, Pat::kFp8Group,
                Pat::kNvfp4, Pat::kMxfp4, Pat::kFp8Tensor};
  o.algos = {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull, arfAlgoTwoshot, arfAlgoUnfused};
  o.hiddens = {128, 1024, 2048, 4096, 5120, 7168, 8192};
  o.max_tokens = max_tokens;
  return o;
}

struct Fixture {
  ScheduleOptions o = options();
  arfPlanFacts_t f = facts(2, o.max_tokens, 8192);
  PlanOracle oracle = facts_oracle(f);
  BoundaryTable table = BoundaryTable::probe(o, oracle);
};

TEST(StressSchedule, IdenticalOnEveryRankAndSeedDependent) {
  Fixture fx;
  Generator rank0(fx.o, &fx.table, fx.oracle), rank1(fx.o, &fx.table, facts_oracle(fx.f));
  ScheduleOptions other = fx.o;
  other.seed = 43;
  Generator different(other, &fx.table, fx.oracle);
  int same_as_other_seed = 0;
  for (int i = 0; i < 4000; ++i) {
    const std::string a = replay_csv_row(rank0.next());
    ASSERT_EQ(a, replay_csv_row(rank1.next())) << "call " << i;
    same_as_other_seed += a == replay_csv_row(different.next());
  }
  EXPECT_LT(same_as_other_seed, 40);
}

// Weights move the draw between algorithms and nothing else; weights all 1 are the unweighted
// schedule call for call (a seed's replay does not depend on whether weights were spelled out).
TEST(StressSchedule, AlgorithmWeights) {
  Fixture fx;
  ScheduleOptions ones = fx.o;
  ones.algo_weights.assign(ones.algos.size(), 1);
  Generator plain(fx.o, &fx.table, fx.oracle), spelled(ones, &fx.table, fx.oracle);
  for (int i = 0; i < 4000; ++i) ASSERT_EQ(replay_csv_row(plain.next()), replay_csv_row(spelled.next())) << i;

  ScheduleOptions w = fx.o;
  w.algos = {arfAlgoOneshotLamport, arfAlgoTwoshot, arfAlgoUnfused};
  w.algo_weights = {2, 2, 1};
  BoundaryTable table = BoundaryTable::probe(w, fx.oracle);
  Generator g(w, &table, fx.oracle);
  std::map<arfAlgorithm_t, int> drawn;
  int forced = 0;
  for (int i = 0; i < 30000; ++i) {
    const CallSpec c = g.next();
    if (c.pattern == Pat::kFlat) continue;  // flat is always auto
    ++drawn[c.algorithm];
    ++forced;
  }
  EXPECT_EQ(drawn.size(), 3u);
  EXPECT_NEAR(drawn[arfAlgoOneshotLamport] / double(forced), 0.4, 0.015);
  EXPECT_NEAR(drawn[arfAlgoTwoshot] / double(forced), 0.4, 0.015);
  EXPECT_NEAR(drawn[arfAlgoUnfused] / double(forced), 0.2, 0.015);
}

TEST(StressSchedule, MixHiddenAndTransitions) {
  Fixture fx;
  Generator g(fx.o, &fx.table, fx.oracle);
  std::map<TokenKind, int> kinds;
  std::set<Pat> patterns;
  std::set<arfAlgorithm_t> algos;
  int64_t previous_hidden = 0;
  int same_hidden = 0, quant_misfit = 0, n = 20000;
  CallSpec previous;
  for (int i = 0; i < n; ++i) {
    const CallSpec c = g.next();
    ++kinds[c.token_kind];
    patterns.insert(c.pattern);
    algos.insert(c.algorithm);
    // A new hidden every call, except where a pattern's block leaves a single choice.
    if (c.hidden == previous_hidden && hiddens_for(c.pattern, fx.o.hiddens).size() > 1) ++same_hidden;
    previous_hidden = c.hidden;
    if (c.pattern == Pat::kFp8Group && c.hidden % 128 != 0) ++quant_misfit;
    if (c.pattern == Pat::kNvfp4 && c.hidden % 16 != 0) ++quant_misfit;
    ASSERT_GE(c.tokens, 1);
    ASSERT_LE(c.tokens, fx.o.max_tokens);
    if (c.token_kind == TokenKind::kTinyAfterLarge) {
      ASSERT_LE(c.tokens, 4);
      ASSERT_GE(previous.tokens * previous.hidden * 4, fx.o.max_tokens * 8192) << "tiny after a small call";
    }
    if (previous.token_kind == TokenKind::kTinyAfterLarge) {
      ASSERT_EQ(c.token_kind, TokenKind::kLargeAfterTiny);
    }
    if (c.token_kind == TokenKind::kFull) {
      ASSERT_EQ(c.tokens, fx.o.max_tokens);
      ASSERT_EQ(c.hidden, 8192);
    }
    if (c.pattern == Pat::kFlat) {
      ASSERT_EQ(c.flat_count % 8, 0);
      ASSERT_GE(c.flat_count, 8);
      ASSERT_LE(c.flat_count, c.tokens * c.hidden);
      ASSERT_EQ(c.algorithm, arfAlgoAuto);
    }
    previous = c;
  }
  EXPECT_EQ(same_hidden, 0);
  EXPECT_EQ(quant_misfit, 0);
  EXPECT_EQ(patterns.size(), fx.o.patterns.size());
  EXPECT_EQ(algos.size(), fx.o.algos.size());
  const int base = n - kinds[TokenKind::kTinyAfterLarge] - kinds[TokenKind::kLargeAfterTiny];
  EXPECT_NEAR(kinds[TokenKind::kTiny] / double(base), 0.40, 0.03);
  EXPECT_NEAR(kinds[TokenKind::kBoundary] / double(base), 0.15, 0.03);
  // Full capacity right after a call at the largest hidden becomes log-uniform (a new hidden every
  // call), so some of the 15% move from full to log-uniform.
  EXPECT_NEAR(kinds[TokenKind::kLogUniform] / double(base), 0.33, 0.04);
  EXPECT_NEAR(kinds[TokenKind::kFull] / double(base), 0.12, 0.04);
  EXPECT_NEAR((kinds[TokenKind::kLogUniform] + kinds[TokenKind::kFull]) / double(base), 0.45, 0.03);
  EXPECT_GT(kinds[TokenKind::kTinyAfterLarge], n / 40);
}

TEST(StressSchedule, OptionsAllVary) {
  Fixture fx;
  Generator g(fx.o, &fx.table, fx.oracle);
  IssueStats s;
  s.max_tokens = fx.o.max_tokens;
  s.largest_hidden = 8192;
  std::set<float> eps;
  std::set<int> layouts, formats, fallbacks;
  for (int i = 0; i < 20000; ++i) {
    const CallSpec c = g.next();
    if (c.skipped) continue;
    s.record_issued(c);
    eps.insert(c.eps);
    layouts.insert(c.layout);
    formats.insert(c.format);
    fallbacks.insert(c.fallback);
  }
  EXPECT_GT(s.residual_null, 0u);
  EXPECT_GT(s.residual_in_place, 0u);
  EXPECT_GT(s.norm_out_is_input, 0u);
  EXPECT_GT(s.allreduce_out_is_input, 0u);
  EXPECT_GT(s.per_rank_data, 0u);
  EXPECT_GT(s.gamma_fp32, 0u);
  EXPECT_GT(s.gamma_plus_one, 0u);
  EXPECT_GT(s.round_before_weight, 0u);
  EXPECT_GT(s.tiny_after_large, 0u);
  EXPECT_GT(s.full_capacity, 0u);
  EXPECT_EQ(eps.size(), 4u);
  EXPECT_EQ(layouts.size(), 3u);
  EXPECT_EQ(formats.size(), 3u);
  EXPECT_EQ(fallbacks.size(), 4u);
}

// The volume mix at the default shape of a shared-GPU soak (8 virtual ranks, capacity 2048 x
// 16384): every kind of call the engine mix draws is still drawn, full-grid calls sit exactly at
// the first token count of the largest grid, a tiny call follows only a large one, and the bytes
// per call drop well below the engine mix's.
TEST(StressSchedule, VolumeMixKeepsEveryKindWithFewerBytes) {
  ScheduleOptions o = options(2048);
  o.hiddens = {128, 1024, 2048, 4096, 5120, 7168, 8192, 12288, 16384};
  const arfPlanFacts_t f = facts(8, o.max_tokens, 16384);
  const PlanOracle oracle = facts_oracle(f);
  const BoundaryTable table = BoundaryTable::probe(o, oracle);
  const int64_t capacity = o.max_tokens * 16384;
  const int n = 30000;
  const auto mean_elements = [&](TokenMix mix, std::map<TokenKind, int>* kinds) {
    ScheduleOptions m = o;
    m.mix = mix;
    Generator g(m, &table, oracle);
    double elements = 0;
    int issued = 0;
    CallSpec previous;
    for (int i = 0; i < n; ++i) {
      const CallSpec c = g.next();
      ++(*kinds)[c.token_kind];
      if (c.token_kind == TokenKind::kFullGrid) {
        CallSpec at = c;
        const int grid = oracle(at).grid;
        at.tokens = c.tokens - 1;
        EXPECT_TRUE(c.tokens == 1 || oracle(at).grid < grid) << "not the first token count of its grid";
        for (at.tokens = c.tokens + 1; at.tokens <= o.max_tokens; at.tokens += 97) {
          const PlanInfo p = oracle(at);
          if (p.ok) {
            EXPECT_LE(p.grid, grid) << pat_name(c.pattern) << " hidden " << c.hidden;
          }
        }
      }
      if (c.token_kind == TokenKind::kTinyAfterLarge) {
        const int64_t full_grid = table.full_grid_tokens(previous.pattern, previous.algorithm, previous.hidden);
        const bool large = previous.tokens * previous.hidden * 4 >= capacity ||
                           (mix == TokenMix::kVolume && full_grid > 0 && previous.tokens >= full_grid);
        EXPECT_TRUE(large) << "tiny after " << previous.tokens << " x " << previous.hidden;
      }
      if (!c.skipped) {
        elements += static_cast<double>(c.tokens) * static_cast<double>(c.hidden);
        ++issued;
      }
      previous = c;
    }
    return elements / issued;
  };
  std::map<TokenKind, int> engine, volume;
  const double engine_elems = mean_elements(TokenMix::kEngine, &engine);
  const double volume_elems = mean_elements(TokenMix::kVolume, &volume);
  for (TokenKind k : {TokenKind::kTiny, TokenKind::kLogUniform, TokenKind::kBoundary, TokenKind::kFull,
                      TokenKind::kTinyAfterLarge, TokenKind::kLargeAfterTiny}) {
    EXPECT_GT(engine[k], 0) << token_kind_name(k);
    EXPECT_GT(volume[k], n / 200) << token_kind_name(k);
  }
  EXPECT_EQ(engine[TokenKind::kFullGrid], 0);
  EXPECT_GT(volume[TokenKind::kFullGrid], n / 20);
  EXPECT_NEAR(volume[TokenKind::kFull] / double(n), 0.02, 0.01);
  // At least as many tiny-after-large transitions as the engine mix: the protocol's hard case.
  EXPECT_GE(volume[TokenKind::kTinyAfterLarge], engine[TokenKind::kTinyAfterLarge]);
  EXPECT_LT(volume_elems, 0.4 * engine_elems) << "engine " << engine_elems << " volume " << volume_elems;
  std::printf("mean elements per call: engine %.0f, volume %.0f (%.2fx); tiny-after-large %d / %d\n",
              engine_elems, volume_elems, engine_elems / volume_elems, engine[TokenKind::kTinyAfterLarge],
              volume[TokenKind::kTinyAfterLarge]);
}

// Every change of the plan between t-1 and t must have both t-1 and t in the table. Returns the
// number of changes whose t-1 is not itself the start of a change (only those prove that the
// "last of the old dispatch" side is recorded).
int check_both_sides(const BoundaryTable& table, const PlanOracle& oracle, int64_t max_tokens, int* changes) {
  int isolated = 0;
  for (const auto& [key, points] : table.entries()) {
    const std::set<int64_t> have(points.begin(), points.end());
    CallSpec c;
    c.pattern = static_cast<Pat>(std::get<0>(key));
    c.algorithm = static_cast<arfAlgorithm_t>(std::get<1>(key));
    c.hidden = std::get<2>(key);
    PlanInfo prev, before_prev;
    for (int64_t t = 1; t <= max_tokens; ++t) {
      c.tokens = t;
      const PlanInfo here = oracle(c);
      if (t > 1 && !here.same_dispatch(prev)) {
        ++*changes;
        if (t > 2 && prev.same_dispatch(before_prev)) ++isolated;
        if (prev.ok) {
          EXPECT_TRUE(have.count(t - 1)) << pat_name(c.pattern) << " " << t - 1;
        }
        if (here.ok) {
          EXPECT_TRUE(have.count(t)) << pat_name(c.pattern) << " " << t;
        }
      }
      before_prev = prev;
      prev = here;
    }
  }
  return isolated;
}

TEST(StressSchedule, BoundariesHoldBothSidesOfEveryPlanChange) {
  Fixture fx;
  EXPECT_GT(fx.table.num_points(), 0u);
  int changes = 0;
  check_both_sides(fx.table, fx.oracle, fx.o.max_tokens, &changes);
  EXPECT_GT(changes, 0);  // the grid grows with tokens up to the co-residency cap
  // One rank per GPU, larger capacity: auto's algorithm changes at byte limits, isolated changes.
  ScheduleOptions o = options(1024);
  o.patterns = {Pat::kResidualRmsNorm, Pat::kAllReduce};
  o.algos = {arfAlgoAuto};
  arfPlanFacts_t f = facts(2, 1024, 8192);
  f.ranks_per_device = 1;
  const PlanOracle oracle = facts_oracle(f);
  const BoundaryTable t = BoundaryTable::probe(o, oracle);
  int changes2 = 0;
  EXPECT_GT(check_both_sides(t, oracle, 1024, &changes2), 0);
}

TEST(StressSchedule, RefusedCallsAreSkippedAfterRetries) {
  ScheduleOptions o = options();
  o.patterns = {Pat::kResidualRmsNorm, Pat::kFp8Group};
  const arfPlanFacts_t f = facts(2, o.max_tokens, 8192);
  const PlanOracle real = facts_oracle(f);
  // A planner that refuses twoshot above 64 tokens and any MN-major layout.
  const PlanOracle picky = [&](const CallSpec& c) {
    if ((c.algorithm == arfAlgoTwoshot && c.tokens > 64) || c.layout == arfScaleMnMajor) return PlanInfo{};
    return real(c);
  };
  const BoundaryTable t = BoundaryTable::probe(o, picky);
  Generator g(o, &t, picky);
  int skipped = 0, mn = 0;
  for (int i = 0; i < 5000; ++i) {
    const CallSpec c = g.next();
    if (c.skipped) {
      ++skipped;
      EXPECT_EQ(c.algorithm, arfAlgoTwoshot);
      EXPECT_GT(c.tokens, 64);
    }
    mn += c.layout == arfScaleMnMajor;
  }
  EXPECT_GT(skipped, 0);
  EXPECT_EQ(mn, 0);  // retried with the default layout instead of skipped
}

TEST(StressSchedule, CallsPerAlgorithmRule) {
  IssueStats s;
  CallSpec c;
  c.algorithm = arfAlgoTwoshot;
  for (int i = 0; i < 3; ++i) s.record_issued(c);
  EXPECT_FALSE(every_algorithm_reached(s, {arfAlgoTwoshot, arfAlgoUnfused}, 3));
  c.algorithm = arfAlgoUnfused;
  for (int i = 0; i < 2; ++i) s.record_skipped(c);
  EXPECT_FALSE(every_algorithm_reached(s, {arfAlgoTwoshot, arfAlgoUnfused}, 3));
  s.record_skipped(c);  // refused 3 times, never ran: cannot run here
  EXPECT_TRUE(every_algorithm_reached(s, {arfAlgoTwoshot, arfAlgoUnfused}, 3));
}

TEST(StressSchedule, StopControlStopsEveryRankAtOneCall) {
  for (int trial = 0; trial < 20; ++trial) {
    StopControl stop;
    const int world = 4;
    std::vector<uint64_t> issued(world, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        for (uint64_t k = 0;; ++k) {
          if (!stop.may_issue(k)) break;
          issued[static_cast<size_t>(r)] = k + 1;
          if (r == trial % world && k == static_cast<uint64_t>(50 + trial)) stop.request_stop("test");
          if (k > 100000) break;
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) EXPECT_EQ(issued[static_cast<size_t>(r)], stop.limit()) << "rank " << r;
    EXPECT_EQ(stop.reason(), "test");
  }
}

}  // namespace
}  // namespace arf::stress
