// CPU tests of the call-sequence CSV (replay_csv.h): the repro file as recorded, a round trip of
// a generated schedule, and errors that name their line.
#include <gtest/gtest.h>

#include <sstream>

#include "replay_csv.h"
#include "schedule.h"

namespace arf::stress {
namespace {

TEST(StressReplay, ReadsTheLamportRepro) {
  ReplayFile f;
  std::string why;
  ASSERT_TRUE(load_replay_csv(ARF_STRESS_REPRO_CSV, &f, &why)) << why;
  ASSERT_EQ(f.calls.size(), 1759u);
  int back_to_back = 0, allreduce = 0;
  for (const CallSpec& c : f.calls) {
    EXPECT_EQ(c.algorithm, arfAlgoOneshotLamport);
    EXPECT_EQ(c.hidden, 4096);
    EXPECT_FALSE(c.skipped);
    back_to_back += !c.wait_after;
    allreduce += c.pattern == Pat::kAllReduce;
  }
  EXPECT_EQ(back_to_back, 442);
  EXPECT_EQ(allreduce, 273);
  // The stalled neighbourhood (README: calls 1754-1756 have 627, 1 and 1023 tokens).
  EXPECT_EQ(f.calls[1754].tokens, 627);
  EXPECT_EQ(f.calls[1755].tokens, 1);
  EXPECT_EQ(f.calls[1756].tokens, 1023);
  EXPECT_TRUE(f.calls[1756].residual_in_place);
  EXPECT_TRUE(f.calls[1756].norm_out_is_input);
  EXPECT_FLOAT_EQ(f.calls[1756].eps, 0.1f);
  EXPECT_EQ(f.calls[1756].recorded_grid, 132);
  EXPECT_EQ(f.calls[4].gamma_plus_one, true);
  EXPECT_EQ(f.calls[15].per_rank_residual_gamma, true);
}

TEST(StressReplay, RoundTripOfAGeneratedSchedule) {
  ScheduleOptions o;
  o.patterns = {Pat::kAllReduce, Pat::kFlat, Pat::kResidualRmsNorm, Pat::kFp8Group, Pat::kNvfp4};
  o.algos = {arfAlgoAuto, arfAlgoTwoshot};
  o.hiddens = {128, 1024, 4096};
  o.max_tokens = 64;
  arfPlanFacts_t f;
  arfPlanFactsInit(&f);
  f.world_size = 2;
  f.max_tokens = 64;
  f.max_hidden = 4096;
  const PlanOracle oracle = [f](const CallSpec& c) {
    const arfFusedArgs_t a = shape_args(c, f.dtype);
    arfPlan_t p;
    return plan_info_from(arfPlanFromFacts(&f, &a, &p), p);
  };
  const BoundaryTable t = BoundaryTable::probe(o, oracle);
  Generator g(o, &t, oracle);
  std::stringstream csv;
  csv << replay_csv_header() << '\n';
  std::vector<CallSpec> written;
  for (int i = 0; i < 500; ++i) {
    CallSpec c = g.next();
    c.index = static_cast<uint64_t>(i);
    c.wait_after = i % 3 == 0;
    written.push_back(c);
    csv << replay_csv_row(c) << '\n';
  }
  ReplayFile back;
  std::string why;
  ASSERT_TRUE(parse_replay_csv(csv, &back, &why)) << why;
  ASSERT_EQ(back.calls.size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    CallSpec b = back.calls[i];
    // What a replay does not carry over: how the token count was drawn and the plan, which the
    // replay asks the planner for again (the recorded grid/block are kept for comparison).
    EXPECT_EQ(b.recorded_grid, written[i].plan_grid);
    b.token_kind = written[i].token_kind;
    b.plan_algorithm = written[i].plan_algorithm;
    b.plan_grid = written[i].plan_grid;
    b.plan_block = written[i].plan_block;
    b.plan_kernels = written[i].plan_kernels;
    b.recorded_grid = written[i].recorded_grid;
    b.recorded_block = written[i].recorded_block;
    ASSERT_EQ(replay_csv_row(b), replay_csv_row(written[i])) << "row " << i;
  }
}

TEST(StressReplay, ErrorsNameTheLine) {
  const auto fails = [](const std::string& text, const std::string& needle) {
    std::stringstream in(text);
    ReplayFile f;
    std::string why;
    EXPECT_FALSE(parse_replay_csv(in, &f, &why)) << text;
    EXPECT_NE(why.find(needle), std::string::npos) << why;
  };
  fails("call,pattern,tokens\n0,1,5\n", "hidden");
  fails("pattern,tokens,hidden\n1,5,4096\n1,x,4096\n", "line 3");
  fails("pattern,tokens,hidden\n1,5,4095\n", "line 2");
  fails("pattern,tokens,hidden\n9,5,4096\n", "pattern");
  fails("pattern,tokens,hidden,algo\n1,5,4096,fastest\n", "algo");
  fails("pattern,tokens,hidden\n1,5\n", "cells");
  fails("pattern,tokens,hidden,flat\n1,5,4096,1\n", "flat");
  fails("pattern,tokens,hidden\n", "no calls");
}

}  // namespace
}  // namespace arf::stress
