// CPU tests of the run's steps (steps.h), the stop rule over steps (stop_control.h) and the enqueue
// order of graph launches between device mates (launch_order.h). The planner is arfPlanFromFacts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "launch_order.h"
#include "steps.h"
#include "stop_control.h"

namespace arf::stress {
namespace {

struct Planner {
  arfPlanFacts_t f;
  PlanOracle oracle;
  ScheduleOptions o;
  BoundaryTable table;
  Planner() {
    arfPlanFactsInit(&f);
    f.world_size = 4;
    f.ranks_per_device = 4;
    f.max_tokens = 256;
    f.max_hidden = 8192;
    oracle = [f = f](const CallSpec& c) {
      const arfFusedArgs_t a = shape_args(c, f.dtype);
      arfPlan_t p;
      return plan_info_from(arfPlanFromFacts(&f, &a, &p), p);
    };
    o.seed = 7;
    o.patterns = {Pat::kAllReduce, Pat::kFlat, Pat::kResidualRmsNorm, Pat::kFp8Group, Pat::kNvfp4};
    o.algos = {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull, arfAlgoTwoshot, arfAlgoUnfused};
    o.hiddens = {128, 1024, 4096, 8192};
    o.max_tokens = 256;
    table = BoundaryTable::probe(o, oracle);
  }
};

bool same_call(const CallSpec& a, const CallSpec& b) {
  return a.pattern == b.pattern && a.algorithm == b.algorithm && a.tokens == b.tokens && a.hidden == b.hidden &&
         a.flat_count == b.flat_count && a.skipped == b.skipped && a.residual_null == b.residual_null &&
         a.norm_out_is_input == b.norm_out_is_input && a.eps == b.eps && a.layout == b.layout;
}

TEST(StressSteps, EagerOnlyWithoutGraphsAndTheSameOnEveryRank) {
  const Planner p;
  StepSource a(p.o, StepOptions{}, &p.table, p.oracle), b(p.o, StepOptions{}, &p.table, p.oracle);
  Generator plain(p.o, &p.table, p.oracle);
  EXPECT_TRUE(a.windows().empty());
  for (int i = 0; i < 500; ++i) {
    const Step x = a.next(), y = b.next();
    ASSERT_EQ(x.graph, -1);
    ASSERT_EQ(x.calls.size(), 1u);
    EXPECT_TRUE(same_call(x.calls[0], y.calls[0])) << i;
    EXPECT_TRUE(same_call(x.calls[0], plain.next())) << "steps without graphs are the generator's calls, " << i;
  }
}

TEST(StressSteps, GraphStepsReplayTheWindowsAndLeaveTheEagerCallsAsTheyWere) {
  const Planner p;
  const StepOptions graphs{6, 4};
  StepSource a(p.o, graphs, &p.table, p.oracle), b(p.o, graphs, &p.table, p.oracle);
  Generator plain(p.o, &p.table, p.oracle);
  ASSERT_EQ(a.windows().size(), 6u);
  for (const auto& w : a.windows()) {
    ASSERT_EQ(w.size(), 4u);
    for (const CallSpec& c : w) EXPECT_FALSE(c.skipped);
  }
  EXPECT_EQ(a.windows().size(), draw_windows(p.o, graphs, &p.table, p.oracle).size());
  int replays = 0;
  std::vector<int> per_graph(6, 0);
  const int kSteps = 4000;
  for (int i = 0; i < kSteps; ++i) {
    const Step x = a.next(), y = b.next();
    ASSERT_EQ(x.graph, y.graph) << i;
    ASSERT_EQ(x.calls.size(), y.calls.size());
    if (x.graph < 0) {
      EXPECT_TRUE(same_call(x.calls[0], plain.next())) << "eager step " << i;
      continue;
    }
    ++replays;
    ++per_graph[static_cast<size_t>(x.graph)];
    const auto& w = a.windows()[static_cast<size_t>(x.graph)];
    ASSERT_EQ(x.calls.size(), w.size());
    for (size_t c = 0; c < w.size(); ++c) EXPECT_TRUE(same_call(x.calls[c], w[c]));
  }
  EXPECT_NEAR(replays, kSteps * 3 / 4, kSteps / 20) << "about three steps in four replay a graph";
  for (int n : per_graph) EXPECT_GT(n, 0) << "every window is replayed";
  ScheduleOptions reseeded = p.o;
  reseeded.seed = 8;
  const auto other = draw_windows(reseeded, graphs, &p.table, p.oracle);
  bool differ = false;
  for (size_t c = 0; c < other[0].size(); ++c) differ = differ || !same_call(other[0][c], a.windows()[0][c]);
  EXPECT_TRUE(differ) << "the windows follow the seed";
}

// A stop while some rank holds a graph step of n calls: every rank issues that whole step, no rank
// the next one.
TEST(StressSteps, StopControlEndsEveryRankAfterTheSameStep) {
  StopControl stop;
  ASSERT_TRUE(stop.may_issue(0, 1));
  ASSERT_TRUE(stop.may_issue(1, 4));  // one rank starts a replay of calls 1..4
  stop.request_stop("budget");
  EXPECT_EQ(stop.limit(), 5u);
  EXPECT_TRUE(stop.may_issue(1, 4)) << "a rank behind still issues the granted step";
  EXPECT_FALSE(stop.may_issue(5, 1));
}

TEST(StressLaunchOrder, WaitsForDeviceMatesOnly) {
  LaunchOrder order({0, 0, 1});  // ranks 0 and 1 share device 0; rank 2 is alone
  EXPECT_TRUE(order.has_mates(0));
  EXPECT_FALSE(order.has_mates(2));
  EXPECT_EQ(order.wait_for_mates(2, 100, 0.01), "");
  EXPECT_NE(order.wait_for_mates(0, 1, 0.05).find("rank 1 did not launch step 0"), std::string::npos);
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    EXPECT_EQ(order.wait_for_mates(0, 3, 30.0), "");
    done = true;
  });
  order.launched(1, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(done.load()) << "released before the mate reached the step";
  order.launched(1, 3);
  waiter.join();
  EXPECT_TRUE(done.load());
}

TEST(StressLaunchOrder, AMateThatStoppedEndsTheWaitAtOnce) {
  LaunchOrder order({0, 0});
  order.launched(1, 4);
  order.finished(1);
  EXPECT_EQ(order.wait_for_mates(0, 4, 30.0), "") << "it launched the step before it stopped";
  const auto start = std::chrono::steady_clock::now();
  const std::string why = order.wait_for_mates(0, 5, 30.0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_NE(why.find("rank 1 stopped before step 4"), std::string::npos) << why;
}

}  // namespace
}  // namespace arf::stress
