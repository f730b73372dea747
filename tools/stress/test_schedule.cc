// CPU tests of the soak's sequence (schedule.h), its common stop (stop_control.h) and its command
// line (args.h). A synthetic planner stands in for arfPlan: what matters is how boundaries are
// found and visited, not where today's policy puts them.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "args.h"
#include "schedule.h"
#include "stop_control.h"

namespace arf::stress {
namespace {

constexpr int64_t kMaxTokens = 300;

// Combo 0 switches algorithm at 64/65 and its grid is min(tokens, 33); combo 1 only runs up to
// 250 tokens and changes its block at 128/129.
PlanPoint fake_plan(const Combo& combo, int64_t tokens) {
  PlanPoint p;
  if (combo.algorithm == arfAlgoAuto) {
    p = {true, tokens <= 64 ? arfAlgoOneshotLamport : arfAlgoTwoshot, arfAlgoAuto, 1,
         static_cast<int>(std::min<int64_t>(tokens, 33)), 512};
    return p;
  }
  if (tokens > 250) return p;
  return {true, arfAlgoOneshotPull, arfAlgoOneshotPull, 1, 33, tokens <= 128 ? 256 : 512};
}

DispatchMap fake_map() {
  return DispatchMap::probe({{arfAlgoAuto, arfPatternResidualRmsNorm},
                             {arfAlgoOneshotPull, arfPatternAllReduce}},
                            kMaxTokens, fake_plan);
}

TEST(DispatchMap, BothSidesOfEveryChangeAndTheEnds) {
  const DispatchMap map = fake_map();
  std::vector<int64_t> want0;
  for (int64_t t = 1; t <= 33; ++t) want0.push_back(t);  // the grid grows with every token
  want0.insert(want0.end(), {64, 65, kMaxTokens});
  EXPECT_EQ(map.boundaries(0), want0);
  // 251 is not runnable: only the runnable side of that change is a boundary.
  EXPECT_EQ(map.boundaries(1), (std::vector<int64_t>{1, 128, 129, 250}));
  EXPECT_FALSE(map.feasible(1, 251));
  EXPECT_TRUE(map.feasible(1, 250));
  EXPECT_EQ(map.num_boundary_points(), want0.size() + 4);
}

TEST(ShapeSource, VisitsEveryBoundaryChangesTokensEveryCallStaysFeasible) {
  const DispatchMap map = fake_map();
  ShapeSource shapes(map, 7);
  std::map<size_t, std::set<int64_t>> seen;
  int64_t previous = 0;
  for (int i = 0; i < 400; ++i) {
    const CallSpec call = shapes.next();
    ASSERT_TRUE(map.feasible(call.combo, call.tokens)) << i;
    ASSERT_NE(call.tokens, previous) << "call " << i << " repeats the token count";
    ASSERT_GE(call.gamma_kind, 0);
    ASSERT_LT(call.gamma_kind, kGammaKinds);
    previous = call.tokens;
    seen[call.combo].insert(call.tokens);
  }
  for (size_t c = 0; c < 2; ++c) {
    for (int64_t t : map.boundaries(c)) EXPECT_TRUE(seen[c].count(t)) << "combo " << c << " t " << t;
  }
  // The random half reaches past the boundaries too.
  EXPECT_GT(seen[0].size(), map.boundaries(0).size());
}

TEST(Schedule, IdenticalOnEveryRankAndDataRulesHold) {
  const DispatchMap map = fake_map();
  ScheduleOptions o;
  o.seed = 11;
  o.num_sets = 8;
  o.set_rows = kMaxTokens + 64;
  Schedule a(map, o), b(map, o);
  int last_set = -1;
  uint64_t next_index = 0;
  for (int s = 0; s < 300; ++s) {
    const StepSpec x = a.next_step(), y = b.next_step();
    ASSERT_EQ(x.step, s);
    ASSERT_EQ(x.calls.size(), 1u);  // eager
    const CallSpec& c = x.calls[0];
    const CallSpec& d = y.calls[0];
    ASSERT_EQ(std::make_tuple(c.index, c.combo, c.tokens, c.set, c.row_offset, c.gamma_kind,
                              c.clobber_salt),
              std::make_tuple(d.index, d.combo, d.tokens, d.set, d.row_offset, d.gamma_kind,
                              d.clobber_salt));
    EXPECT_EQ(c.index, next_index++);
    EXPECT_NE(c.set, last_set);
    EXPECT_EQ(c.set % kGammaKinds, c.gamma_kind);  // the set's reference used this gamma
    EXPECT_GE(c.row_offset, 0);
    EXPECT_LE(c.row_offset + c.tokens, o.set_rows);
    last_set = c.set;
  }
}

TEST(Schedule, GraphModeReplaysFixedShapesWithFreshData) {
  const DispatchMap map = fake_map();
  ScheduleOptions o;
  o.seed = 3;
  o.set_rows = kMaxTokens + 64;
  o.num_graphs = 3;
  o.window = 4;
  Schedule schedule(map, o);
  ASSERT_EQ(schedule.graph_windows().size(), 3u);
  int graphs = 0, eager = 0;
  std::map<int, std::set<std::pair<int, int64_t>>> data_per_graph;
  uint64_t next_index = 0;
  for (int s = 0; s < 400; ++s) {
    const StepSpec step = schedule.next_step();
    for (const CallSpec& c : step.calls) EXPECT_EQ(c.index, next_index++);
    if (step.graph < 0) {
      ++eager;
      continue;
    }
    ++graphs;
    const auto& window = schedule.graph_windows()[step.graph];
    ASSERT_EQ(step.calls.size(), window.size());
    for (size_t i = 0; i < window.size(); ++i) {
      const CallSpec& c = step.calls[i];
      // Captured shape and gamma arguments; data drawn per replay, consistent with the gamma.
      EXPECT_EQ(c.tokens, window[i].tokens);
      EXPECT_EQ(c.combo, window[i].combo);
      if (c.pattern == arfPatternResidualRmsNorm) {
        EXPECT_EQ(c.gamma_kind, window[i].gamma_kind);
      }
      EXPECT_EQ(c.set % kGammaKinds, c.gamma_kind);
      data_per_graph[step.graph].insert({c.set, c.row_offset});
    }
  }
  EXPECT_GT(graphs, 200);  // about 3 of 4 steps replay a graph
  EXPECT_GT(eager, 50);
  for (const auto& [g, data] : data_per_graph) EXPECT_GT(data.size(), 20u) << "graph " << g;
}

TEST(StopControl, EveryRankRunsTheSameStepsWhenStoppedAnytime) {
  constexpr int kWorld = 8;
  for (int trial = 0; trial < 20; ++trial) {
    StopControl stop(kWorld);
    std::vector<int64_t> ran(kWorld, 0);
    std::vector<std::thread> ranks;
    for (int r = 0; r < kWorld; ++r) {
      ranks.emplace_back([&, r] {
        for (int64_t step = 0; step < 1000000 && stop.may_run(r, step); ++step) ran[r] = step + 1;
      });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50 * trial));
    stop.request();
    stop.request();  // idempotent
    for (std::thread& t : ranks) t.join();
    for (int r = 1; r < kWorld; ++r) ASSERT_EQ(ran[r], ran[0]) << "trial " << trial;
  }
}

std::optional<StressArgs> parse(std::vector<std::string> words, int* code) {
  words.insert(words.begin(), "arfusion-stress");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return parse_args(static_cast<int>(argv.size()), argv.data(), code);
}

TEST(Args, DefaultsAreEightVirtualRanksEveryAlgorithmAndPattern) {
  int code = -1;
  const auto a = parse({}, &code);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->devices, std::vector<int>(8, 0));
  EXPECT_EQ(a->algos.size(), 5u);
  EXPECT_EQ(a->patterns.size(), 2u);
  EXPECT_FALSE(a->stop_on_wrong);
}

TEST(Args, WorldAlgorithmsAndNegativeControlFlags) {
  int code = -1;
  auto a = parse({"--nranks", "4", "-a", "twoshot,oneshot_pull,twoshot", "--patterns", "allreduce",
                  "--expect-corruption", "-G", "2", "--window", "3", "-d", "fp16"}, &code);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->devices, std::vector<int>(4, 0));
  EXPECT_EQ(a->algos, (std::vector<arfAlgorithm_t>{arfAlgoTwoshot, arfAlgoOneshotPull}));
  EXPECT_EQ(a->patterns, std::vector<arfPattern_t>{arfPatternAllReduce});
  EXPECT_TRUE(a->stop_on_wrong);  // implied: the control stops at its first detection
  EXPECT_EQ(a->num_graphs, 2);
  EXPECT_EQ(a->dtype, arfFloat16);
  a = parse({"--devices", "0,1,0,1"}, &code);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->devices, (std::vector<int>{0, 1, 0, 1}));
}

TEST(Args, BadValuesExitWithTheSetupCode) {
  for (std::vector<std::string> bad : {std::vector<std::string>{"-a", "nccl"},
                                       {"-a", "fastest"},
                                       {"--patterns", "rmsnorm"},
                                       {"--sets", "6"},
                                       {"--hidden", "100"},
                                       {"--nranks", "9"}}) {
    int code = -1;
    EXPECT_FALSE(parse(bad, &code).has_value()) << bad[0] << " " << bad[1];
    EXPECT_EQ(code, kExitSetup) << bad[0] << " " << bad[1];
  }
}


TEST(Args, VerifyGpuAndCallsPerAlgorithm) {
  int code = -1;
  auto a = parse({}, &code);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->verify_gpu);  // the host verifier stays the default
  a = parse({"--verify", "gpu", "--calls-per-algorithm", "1000", "-a", "twoshot,auto"}, &code);
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->verify_gpu);
  EXPECT_EQ(a->calls, 1000u * 2 * 2);  // x algorithms x patterns
  a = parse({"--verify", "host", "--patterns", "residual_rmsnorm", "--calls-per-algorithm", "7"},
            &code);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->verify_gpu);
  EXPECT_EQ(a->calls, 7u * 5);
  a = parse({"--verify", "gpu", "--nranks", "4"}, &code);  // virtual ranks on one device: fine
  ASSERT_TRUE(a.has_value());
  for (std::vector<std::string> bad : {std::vector<std::string>{"--verify", "cpu"},
                                       {"--verify", "gpu", "--devices", "0,1"},
                                       {"--calls", "5", "--calls-per-algorithm", "5"},
                                       {"--calls-per-algorithm", "0"}}) {
    code = -1;
    EXPECT_FALSE(parse(bad, &code).has_value()) << bad[0] << " " << bad[1];
    EXPECT_EQ(code, kExitSetup) << bad[0] << " " << bad[1];
  }
}

// Under arfusion-run (its variables in the environment) the process is one rank of an ipc job;
// what needs every rank in one process is refused before any CUDA call.
TEST(Args, UnderTheLauncherTheProcessIsOneRank) {
  setenv("ARF_RENDEZVOUS_ID", "0123456789abcdef0123456789abcdef", 1);
  setenv("ARF_RANK", "2", 1);
  setenv("ARF_WORLD_SIZE", "4", 1);
  setenv("ARF_DEVICE", "1", 1);
  int code = -1;
  auto a = parse({"--calls-per-algorithm", "10"}, &code);
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->processes());
  EXPECT_EQ(a->process_rank, 2);
  EXPECT_EQ(a->world(), 4);
  EXPECT_EQ(a->devices, std::vector<int>{1});
  EXPECT_EQ(a->local_ranks(), std::vector<int>{2});
  for (std::vector<std::string> bad : {std::vector<std::string>{"--nranks", "4"},
                                       {"--devices", "0,1"},
                                       {"--verify", "gpu"},
                                       {"--seconds", "10"},
                                       {"--stop-on-wrong", "--calls", "5"},
                                       {"--expect-corruption", "--calls", "5"},
                                       {"--calls", "0"}}) {
    code = -1;
    EXPECT_FALSE(parse(bad, &code).has_value()) << bad[0] << " " << bad[1];
    EXPECT_EQ(code, kExitSetup) << bad[0] << " " << bad[1];
  }
  setenv("ARF_RANK", "x", 1);  // malformed: an error, never a silent rank 0
  EXPECT_FALSE(parse({}, &code).has_value());
  for (const char* v : {"ARF_RENDEZVOUS_ID", "ARF_RANK", "ARF_WORLD_SIZE", "ARF_DEVICE"}) {
    unsetenv(v);
  }
  a = parse({}, &code);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->processes());
  EXPECT_EQ(a->local_ranks().size(), 8u);
}

}  // namespace
}  // namespace arf::stress
