// CPU tests of the soak's sandwich calls (post_gamma, API v6): the option and its refusal without
// ARF_EXPERIMENTAL_SANDWICH=1, the schedule's share and determinism, the arguments (shape_args'
// dummy, the real buffer), the CSV column, and the residual_out rule the check kernel runs
// (numerics.h sandwich_residual_ok) against hand-worked values, a brute-force enumeration of the
// contract and an fp32 implementation of it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "call_args.h"
#include "data_gen.h"
#include "numerics.h"
#include "options.h"
#include "replay_csv.h"
#include "schedule.h"
#include "stats.h"

namespace arf::stress {
namespace {

// The library plans (arfPlanFromFacts) and runs sandwich calls only with this variable set; the
// tests that plan them set it and restore its absence.
class SandwichEnv : public ::testing::Test {
 protected:
  void SetUp() override { setenv("ARF_EXPERIMENTAL_SANDWICH", "1", 1); }
  void TearDown() override { unsetenv("ARF_EXPERIMENTAL_SANDWICH"); }
};

// ---- the option ----------------------------------------------------------------------------------

struct Parsed {
  std::optional<StressOptions> o;
  int code = -1;
  std::string err;
};

Parsed parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), "arfusion-stress");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Parsed p;
  testing::internal::CaptureStderr();
  p.o = parse_stress_options(static_cast<int>(argv.size()), argv.data(), &p.code, [&](const char* name) {
    const auto it = env.find(name);
    return it == env.end() ? static_cast<const char*>(nullptr) : it->second.c_str();
  });
  p.err = testing::internal::GetCapturedStderr();
  return p;
}

const std::map<std::string, std::string> kOffered = {{"ARF_EXPERIMENTAL_SANDWICH", "1"}};

TEST(StressSandwichOptions, OffByDefault) {
  const Parsed p = parse({});
  ASSERT_TRUE(p.o);
  EXPECT_EQ(p.o->sandwich_share, 0.0);
  EXPECT_EQ(schedule_options(*p.o).sandwich_share, 0.0);
  // The variable alone turns nothing on.
  const Parsed q = parse({}, kOffered);
  ASSERT_TRUE(q.o);
  EXPECT_EQ(q.o->sandwich_share, 0.0);
}

TEST(StressSandwichOptions, AcceptedWithTheVariable) {
  const Parsed p = parse({"--sandwich-share", "0.25"}, kOffered);
  ASSERT_TRUE(p.o) << p.err;
  EXPECT_EQ(p.o->sandwich_share, 0.25);
  EXPECT_EQ(schedule_options(*p.o).sandwich_share, 0.25);
  const Parsed zero = parse({"--sandwich-share", "0"});  // 0 asks for nothing: no variable needed
  ASSERT_TRUE(zero.o) << zero.err;
}

TEST(StressSandwichOptions, RefusedWithoutTheVariableSayingWhichToSet) {
  for (const std::map<std::string, std::string>& env : std::vector<std::map<std::string, std::string>>{
           {}, {{"ARF_EXPERIMENTAL_SANDWICH", "0"}}, {{"ARF_EXPERIMENTAL_SANDWICH", "true"}},
           {{"ARF_EXPERIMENTAL_SANDWICH", "11"}}, {{"ARF_EXPERIMENTAL_SANDWICH", ""}}}) {
    const Parsed p = parse({"--sandwich-share", "0.5"}, env);
    EXPECT_FALSE(p.o);
    EXPECT_EQ(p.code, kStressSetup);
    EXPECT_NE(p.err.find("--sandwich-share"), std::string::npos) << p.err;
    EXPECT_NE(p.err.find("ARF_EXPERIMENTAL_SANDWICH=1"), std::string::npos) << p.err;
  }
}

TEST(StressSandwichOptions, OtherRefusals) {
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"--sandwich-share", "1.5"},
           {"--sandwich-share", "-0.1"},
           {"--sandwich-share", "0.5", "--patterns", "allreduce,flat"},  // nothing takes post_gamma
           {"--sandwich-share", "0.5", "--replay", "calls.csv"},        // the CSV says which calls
       }) {
    const Parsed p = parse(bad, kOffered);
    EXPECT_FALSE(p.o) << bad[0] << " " << bad[1] << " " << (bad.size() > 2 ? bad[2] : "");
    EXPECT_EQ(p.code, kStressSetup);
  }
}

TEST(StressSandwichOptions, RefusalText) {
  EXPECT_EQ(sandwich_refusal("x", [](const char*) { return "1"; }), "");
  const std::string why = sandwich_refusal("calls.csv", [](const char*) { return static_cast<const char*>(nullptr); });
  EXPECT_NE(why.find("calls.csv"), std::string::npos);
  EXPECT_NE(why.find("ARF_EXPERIMENTAL_SANDWICH=1"), std::string::npos);
}

// ---- schedule and arguments --------------------------------------------------------------------

arfPlanFacts_t facts2() {
  arfPlanFacts_t f;
  arfPlanFactsInit(&f);
  f.world_size = 2;
  f.max_tokens = 256;
  f.max_hidden = 8192;
  f.ranks_per_device = 2;
  return f;
}

PlanOracle facts_oracle(const arfPlanFacts_t f) {
  return [f](const CallSpec& c) {
    const arfFusedArgs_t a = shape_args(c, f.dtype);
    arfPlan_t p;
    return plan_info_from(arfPlanFromFacts(&f, &a, &p), p);
  };
}

ScheduleOptions schedule(double share) {
  ScheduleOptions o;
  o.seed = 7;
  o.patterns = {Pat::kAllReduce, Pat::kFlat, Pat::kResidualRmsNorm, Pat::kFp8Token, Pat::kFp8Group,
                Pat::kNvfp4, Pat::kMxfp4, Pat::kFp8Tensor};
  o.algos = {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull, arfAlgoTwoshot, arfAlgoUnfused};
  o.hiddens = {128, 1024, 2048, 4096, 8192};
  o.max_tokens = 256;
  o.sandwich_share = share;
  return o;
}

// What a call is apart from being a sandwich call and its plan.
std::string draw_of(const CallSpec& c) {
  std::ostringstream s;
  s << static_cast<int>(c.pattern) << ' ' << c.algorithm << ' ' << c.tokens << ' ' << c.hidden << ' '
    << c.flat_count << ' ' << static_cast<int>(c.token_kind) << ' ' << c.residual_in_place
    << c.residual_null << c.norm_out_is_input << c.allreduce_out_is_input << c.per_rank_residual_gamma
    << c.gamma_fp32 << c.gamma_plus_one << ' ' << c.eps << ' ' << c.rounding;
  return s.str();
}

TEST_F(SandwichEnv, ScheduleIsIdenticalOnEveryRankWithTheShareAsked) {
  const arfPlanFacts_t f = facts2();
  const ScheduleOptions o = schedule(0.3);
  const BoundaryTable table = BoundaryTable::probe(o, facts_oracle(f));
  Generator rank0(o, &table, facts_oracle(f)), rank1(o, &table, facts_oracle(f));
  Generator without(schedule(0.0), &table, facts_oracle(f));
  IssueStats stats;
  uint64_t norm_calls = 0, sandwich_calls = 0;
  for (int i = 0; i < 6000; ++i) {
    const CallSpec a = rank0.next(), b = rank1.next(), off = without.next();
    ASSERT_EQ(replay_csv_row(a), replay_csv_row(b)) << "call " << i;
    // The sandwich draw comes from its own stream: every other draw is the share-0 schedule's.
    ASSERT_EQ(draw_of(a), draw_of(off)) << "call " << i;
    ASSERT_FALSE(off.sandwich);
    if (!pat_has_norm(a.pattern)) {
      ASSERT_FALSE(a.sandwich) << replay_csv_row(a);
      continue;
    }
    // Every algorithm and fallback level runs sandwich calls (arfusion.h): the planner refuses
    // one exactly when it refuses its share-0 twin.
    ASSERT_EQ(a.skipped, off.skipped) << replay_csv_row(a);
    ++norm_calls;
    sandwich_calls += a.sandwich;
    if (!a.skipped) stats.record_issued(a);
  }
  const double share = static_cast<double>(sandwich_calls) / static_cast<double>(norm_calls);
  EXPECT_GT(share, 0.27) << sandwich_calls << " of " << norm_calls;
  EXPECT_LT(share, 0.33) << sandwich_calls << " of " << norm_calls;
  EXPECT_GT(stats.sandwich, 0u);
  // Every norm pattern gets some; the report shows them per pattern.
  EXPECT_EQ(stats.sandwich_per_pattern.size(), 6u);
  uint64_t sum = 0;
  for (const auto& [name, n] : stats.sandwich_per_pattern) sum += n;
  EXPECT_EQ(sum, stats.sandwich);
}

TEST_F(SandwichEnv, ShareZeroAndOne) {
  const arfPlanFacts_t f = facts2();
  const BoundaryTable table = BoundaryTable::probe(schedule(0.0), facts_oracle(f));
  Generator none(schedule(0.0), &table, facts_oracle(f)), all(schedule(1.0), &table, facts_oracle(f));
  for (int i = 0; i < 2000; ++i) {
    const CallSpec n = none.next(), a = all.next();
    ASSERT_EQ(draw_of(n), draw_of(a));
    ASSERT_FALSE(n.sandwich);
    ASSERT_EQ(a.sandwich, pat_has_norm(a.pattern)) << replay_csv_row(a);
  }
  EXPECT_EQ(sandwich_numerator(0.0), 0u);
  EXPECT_EQ(sandwich_numerator(1.0), kSandwichDen);
  EXPECT_EQ(sandwich_numerator(0.25), kSandwichDen / 4);
}

TEST_F(SandwichEnv, ShapeArgsMarkASandwichCallAndTheRankLoopGivesTheBuffer) {
  CallSpec c;
  c.pattern = Pat::kResidualRmsNorm;
  c.tokens = 4;
  c.hidden = 1024;
  EXPECT_EQ(shape_args(c, arfBFloat16).post_gamma, nullptr);
  c.sandwich = true;
  const arfFusedArgs_t a = shape_args(c, arfBFloat16);
  EXPECT_NE(a.post_gamma, nullptr);
  // The planner reads it as a sandwich call: refused without the variable, planned with it.
  const arfPlanFacts_t f = facts2();
  arfPlan_t p;
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &p), arfSuccess) << arfGetLastErrorString();
  unsetenv("ARF_EXPERIMENTAL_SANDWICH");
  EXPECT_EQ(arfPlanFromFacts(&f, &a, &p), arfUnsupported);
  setenv("ARF_EXPERIMENTAL_SANDWICH", "1", 1);

  TensorSet t;
  auto ptr = [](uintptr_t v) { return reinterpret_cast<uint16_t*>(v); };
  t.input = ptr(0x10000);
  t.residual_in = ptr(0x20000);
  t.residual_out = ptr(0x30000);
  t.norm_out = ptr(0x40000);
  t.gamma = ptr(0x60000);
  t.post_gamma = ptr(0x68000);
  const arfFusedArgs_t real = fused_args(c, arfBFloat16, t);
  EXPECT_EQ(real.post_gamma, t.post_gamma);
  EXPECT_EQ(real.gamma, t.gamma);
  const DeviceCall d = device_call(c, RunConstants{}, 0, 2, t);
  EXPECT_EQ(d.sandwich, 1u);
  EXPECT_EQ(d.post_gamma, t.post_gamma);
  c.sandwich = false;
  EXPECT_EQ(fused_args(c, arfBFloat16, t).post_gamma, nullptr);
  EXPECT_EQ(device_call(c, RunConstants{}, 0, 2, t).post_gamma, nullptr);
  EXPECT_EQ(device_call(c, RunConstants{}, 0, 2, t).sandwich, 0u);
}

TEST(StressSandwichData, PostGammaIsItsOwnStreamAndFollowsPerRankData) {
  // Shared post_gamma is one copy for all ranks (kSharedRank), per-rank differs by rank, and
  // neither is gamma.
  const uint64_t call = 5;
  const uint64_t g = stream_base(1, call, kSharedRank, kStreamGamma);
  const uint64_t pg = stream_base(1, call, shared_data_rank(false, 3), kStreamPostGamma);
  EXPECT_EQ(pg, stream_base(1, call, shared_data_rank(false, 0), kStreamPostGamma));
  EXPECT_NE(stream_base(1, call, shared_data_rank(true, 0), kStreamPostGamma),
            stream_base(1, call, shared_data_rank(true, 1), kStreamPostGamma));
  int same = 0;
  for (uint64_t i = 0; i < 4096; ++i) same += data_value16(g, i, Act::kBf16) == data_value16(pg, i, Act::kBf16);
  EXPECT_LT(same, 100);
}

// ---- the CSV column ------------------------------------------------------------------------------

TEST(StressSandwichReplay, ColumnIsOptionalAndRoundTrips) {
  std::stringstream old("pattern,tokens,hidden\n1,5,4096\n");
  ReplayFile f;
  std::string why;
  ASSERT_TRUE(parse_replay_csv(old, &f, &why)) << why;
  EXPECT_FALSE(f.calls[0].sandwich);

  CallSpec c;
  c.pattern = Pat::kNvfp4;
  c.tokens = 3;
  c.hidden = 2048;
  c.sandwich = true;
  std::stringstream csv(replay_csv_header() + "\n" + replay_csv_row(c) + "\n");
  ASSERT_TRUE(parse_replay_csv(csv, &f, &why)) << why;
  EXPECT_TRUE(f.calls[0].sandwich);
  EXPECT_EQ(replay_csv_row(f.calls[0]), replay_csv_row(c));

  std::stringstream bad("pattern,tokens,hidden,post_gamma\n0,5,4096,1\n");
  EXPECT_FALSE(parse_replay_csv(bad, &f, &why));
  EXPECT_NE(why.find("post_gamma"), std::string::npos) << why;
}

// ---- the residual_out rule ----------------------------------------------------------------------

uint16_t bf16(float v) { return from_float(v, Act::kBf16); }

// Hand-worked, bf16, round once: the sum 1.0 with s_h = 1 and post_gamma 1 gives exact h = 1.0.
// The accepted h (within 2^-7 + 1e-6 of 1.0; the spacing is 2^-8 below 1, 2^-7 above) are
// 1 - 2^-7, 1 - 2^-8, 1, 1 + 2^-7.
TEST(StressSandwichRule, HandWorkedValues) {
  const Act dt = Act::kBf16;
  const auto ok = [&](float got, bool null_residual, float residual) {
    return sandwich_residual_ok(bf16(got), 1.0, 1.0, 1.0, 0, null_residual, bf16(residual), dt);
  };
  // No residual: residual_out is h itself.
  for (float h : {1.0f - 0x1p-7f, 1.0f - 0x1p-8f, 1.0f, 1.0f + 0x1p-7f}) EXPECT_TRUE(ok(h, true, 0.0f)) << h;
  for (float h : {1.0f - 3 * 0x1p-8f, 1.0f + 0x1p-6f, 0.5f, 2.0f, -1.0f}) EXPECT_FALSE(ok(h, true, 0.0f)) << h;
  // + 0.5: h + 0.5 rounds to 1.5 - 2^-7, 1.5 (1.5 - 2^-8 is a tie, to even), 1.5, 1.5 + 2^-7.
  for (float r : {1.5f - 0x1p-7f, 1.5f, 1.5f + 0x1p-7f}) EXPECT_TRUE(ok(r, false, 0.5f)) << r;
  // Off by 2 ulp of residual_out's dtype: rejected.
  EXPECT_FALSE(ok(1.5f + 2 * 0x1p-7f, false, 0.5f));
  EXPECT_FALSE(ok(1.5f - 2 * 0x1p-7f, false, 0.5f));
  // - 0.875: residual_out near 0.125 is finer than h's steps, so between the four reachable
  // values (0.125 - 2^-7, 0.125 - 2^-8, 0.125, 0.125 + 2^-7) lie values no accepted h gives:
  // rejected, though inside the range an interval check would accept.
  for (float r : {0.125f - 0x1p-7f, 0.125f - 0x1p-8f, 0.125f, 0.125f + 0x1p-7f}) EXPECT_TRUE(ok(r, false, -0.875f)) << r;
  for (float r : {0.125f + 0x1p-10f, 0.125f - 0x1p-11f, 0.125f + 0x1p-8f}) EXPECT_FALSE(ok(r, false, -0.875f)) << r;
  // The want bits: from round(exact h).
  EXPECT_EQ(sandwich_residual_want_bits(1.0, 1.0, 1.0, 0, false, bf16(0.5f), dt), bf16(1.5f));
}

// The rule against the contract enumerated: every dtype value h with norm_element_ok (the
// norm_out rule with the sum for y and post_gamma for g) is tried, and exactly the residual_outs
// they give are accepted, over a window of candidates around the nearest one.
TEST(StressSandwichRule, ExactlyTheReachableResidualsAreAccepted) {
  std::mt19937_64 rng(5);
  uint64_t accepted = 0, rejected = 0;
  for (int e = 0; e < 3000; ++e) {
    const Act dt = e % 2 ? Act::kFp16 : Act::kBf16;
    const int before_weight = (e / 2) % 2;
    const bool residual_null = e % 7 == 0;
    const uint64_t base = stream_base(3, static_cast<uint64_t>(e), 0, kStreamInput);
    const double ar = to_float(data_value16(base, 0, dt), dt);
    const double s_h = 0.25 + static_cast<double>(rng() % 4096) / 1024.0;  // 0.25 .. 4.25
    const double pg = data_value32(base, 1) + (e % 3 == 0 ? 1.0 : 0.0);
    const uint16_t residual = residual_null ? 0 : data_value16(base, 2, dt);
    const uint16_t h0 = norm_want_bits(ar, s_h, pg, before_weight, dt);
    // The accepted h: a window of keys around h0 (checked wide enough below).
    std::set<uint16_t> reachable;
    const uint32_t centre = order_key16(h0);
    // Near zero the 1e-6 absolute part spans thousands of bf16 values: every key there.
    const uint32_t span = std::fabs(to_float(h0, dt)) < 1e-3f ? 0x10000u : 64u;
    const uint32_t lowest = order_key16(dt == Act::kFp16 ? 0xFC00u : 0xFF80u);
    const uint32_t highest = order_key16(dt == Act::kFp16 ? 0x7C00u : 0x7F80u);
    const uint32_t from = centre > lowest + span ? centre - span : lowest;
    const uint32_t to = centre + span < highest ? centre + span : highest;
    for (uint32_t k = from; k <= to; ++k) {
      const uint16_t h = from_order_key16(k);
      if (!norm_element_ok(h, ar, s_h, pg, before_weight, dt)) continue;
      ASSERT_TRUE(k != from && k != to) << "window too small at element " << e;
      reachable.insert(sandwich_residual_of(h, residual_null, residual, dt));
    }
    ASSERT_FALSE(reachable.empty());
    const uint16_t r0 = sandwich_residual_of(h0, residual_null, residual, dt);
    const uint32_t rc = order_key16(r0);
    for (uint32_t k = rc - 12; k <= rc + 12; ++k) {
      const uint16_t r = from_order_key16(k);
      const bool want = reachable.count(r) != 0;
      ASSERT_EQ(sandwich_residual_ok(r, ar, s_h, pg, before_weight, residual_null, residual, dt), want)
          << "element " << e << " residual_out 0x" << std::hex << r << " (nearest 0x" << r0 << ")";
      (want ? accepted : rejected) += 1;
    }
  }
  EXPECT_GT(accepted, 3000u);
  EXPECT_GT(rejected, 3000u * 10);
}

// Off by 2 ulp where 2 ulp is beyond the tolerance for sure (|h| >= 2^-6, so the 1e-6 absolute
// part is under a tenth of an ulp, and not within 4 ulp of a power of two, where the spacing
// changes): h moved 2 steps away from its exact value, on the side round(exact) already lies,
// is at least 1.5 ulp from it, so neither it nor (without a residual) the residual_out it gives
// may pass.
TEST(StressSandwichRule, TwoUlpOffIsRejected) {
  int tried = 0;
  for (int e = 0; e < 4000; ++e) {
    const Act dt = e % 2 ? Act::kFp16 : Act::kBf16;
    const uint64_t base = stream_base(4, static_cast<uint64_t>(e), 0, kStreamInput);
    const double ar = to_float(data_value16(base, 0, dt), dt);
    const double pg = to_float(data_value16(base, 1, dt), dt);
    const double s_h = 1.3;
    const double exact = ar * s_h * pg;
    const double mag = std::fabs(exact);
    if (!(mag >= 0x1p-6 && mag < 1000.0)) continue;
    const int mantissa_bits = dt == Act::kFp16 ? 10 : 7;
    const double pow2 = std::exp2(std::round(std::log2(mag)));
    if (std::fabs(mag - pow2) <= 4 * pow2 * std::exp2(-mantissa_bits)) continue;
    const uint16_t h0 = round_double(exact, dt);
    const int dir = static_cast<double>(to_float(h0, dt)) >= exact ? 1 : -1;
    const uint16_t h2 = from_order_key16(order_key16(h0) + 2 * dir);
    ASSERT_FALSE(sandwich_residual_ok(h2, ar, s_h, pg, 0, true, 0, dt)) << "element " << e;
    ASSERT_TRUE(sandwich_residual_ok(h0, ar, s_h, pg, 0, true, 0, dt)) << "element " << e;
    ++tried;
  }
  EXPECT_GT(tried, 1000);
}

// What an fp32 implementation of the sandwich contract writes (arfusion.h: h from the rounded sum
// as norm_out is computed — fp32 sum of squares in column order, rsqrt perturbed by up to 2 ulps
// like a hardware one —, rounded; residual_out = round(float(h) + float(residual))) passes, in both
// rounding modes, with and without a residual: no false alarm on a correct library.
TEST(StressSandwichRule, Fp32ImplementationOfTheContractPasses) {
  std::mt19937_64 rng(17);
  const float eps_choices[4] = {1e-6f, 1e-5f, 1e-3f, 0.1f};
  uint64_t checked = 0;
  for (int row = 0; row < 120; ++row) {
    const Act dt = row % 3 == 0 ? Act::kFp16 : Act::kBf16;
    const int64_t hidden = row % 4 == 0 ? 16384 : row % 4 == 1 ? 4096 : row % 4 == 2 ? 1024 : 128;
    const bool gamma_fp32 = row % 5 == 0, plus_one = row % 7 == 0, residual_null = row % 6 == 0;
    const float eps = eps_choices[row % 4];
    // The rounded sum of two ranks' inputs, as the library forms it.
    const uint64_t in0 = stream_base(2, static_cast<uint64_t>(row), 0, kStreamInput);
    const uint64_t in1 = stream_base(2, static_cast<uint64_t>(row), 1, kStreamInput);
    const uint64_t rbase = stream_base(2, static_cast<uint64_t>(row), kSharedRank, kStreamResidual);
    const uint64_t pbase = stream_base(2, static_cast<uint64_t>(row), kSharedRank, kStreamPostGamma);
    std::vector<uint16_t> ar(static_cast<size_t>(hidden));
    std::vector<float> pgraw(ar.size());
    float sumsq = 0.0f;
    double exact_sumsq = 0.0;
    for (int64_t c = 0; c < hidden; ++c) {
      float acc = sum_step(0.0f, data_value16(in0, static_cast<uint64_t>(c), dt), dt);
      acc = sum_step(acc, data_value16(in1, static_cast<uint64_t>(c), dt), dt);
      ar[c] = round_sum(acc, dt);
      const float y = to_float(ar[c], dt);
      sumsq += y * y;
      exact_sumsq += static_cast<double>(y) * y;
      pgraw[c] = gamma_fp32 ? data_value32(pbase, static_cast<uint64_t>(c))
                            : to_float(data_value16(pbase, static_cast<uint64_t>(c), dt), dt);
    }
    float s = 1.0f / std::sqrt(sumsq / static_cast<float>(hidden) + eps);
    s = u2f(f2u(s) + static_cast<uint32_t>(rng() % 5) - 2u);  // +-2 ulp
    const double s_exact = rms_scale(exact_sumsq, hidden, eps);
    for (int64_t c = 0; c < hidden; ++c) {
      const float y = to_float(ar[c], dt);
      const float g = plus_one ? pgraw[c] + 1.0f : pgraw[c];
      const float ys = y * s;
      const uint16_t h_once = from_float(ys * g, dt);
      const uint16_t h_before = from_float(to_float(from_float(ys, dt), dt) * g, dt);
      const uint16_t res = residual_null ? 0 : data_value16(rbase, static_cast<uint64_t>(c), dt);
      const double gd = static_cast<double>(pgraw[c]) + (plus_one ? 1.0 : 0.0);
      ASSERT_TRUE(sandwich_residual_ok(sandwich_residual_of(h_once, residual_null, res, dt), y, s_exact, gd, 0,
                                       residual_null, res, dt))
          << "row " << row << " col " << c;
      ASSERT_TRUE(sandwich_residual_ok(sandwich_residual_of(h_before, residual_null, res, dt), y, s_exact, gd, 1,
                                       residual_null, res, dt))
          << "row " << row << " col " << c;
      ++checked;
    }
  }
  EXPECT_GT(checked, 500000u);
}

// The key order used by the rule's search: value order, -0 just below +0, a bijection.
TEST(StressSandwichRule, OrderKeysFollowValueOrder) {
  for (const Act dt : {Act::kBf16, Act::kFp16}) {
    const uint32_t first = order_key16(dt == Act::kFp16 ? 0xFC00u : 0xFF80u);
    const uint32_t last = order_key16(dt == Act::kFp16 ? 0x7C00u : 0x7F80u);
    EXPECT_EQ(to_float(from_order_key16(first), dt), -INFINITY);
    EXPECT_EQ(to_float(from_order_key16(last), dt), INFINITY);
    double previous = 0.0;
    for (uint32_t k = first; k <= last; ++k) {
      const uint16_t b = from_order_key16(k);
      ASSERT_EQ(order_key16(b), k);
      const double v = to_float(b, dt);
      ASSERT_FALSE(std::isnan(v));
      if (k != first) {
        ASSERT_TRUE(v > previous || (v == 0.0 && previous == 0.0)) << std::hex << b;
      }
      previous = v;
    }
  }
  EXPECT_EQ(order_key16(0x8000u) + 1, order_key16(0x0000u));
}

}  // namespace
}  // namespace arf::stress
