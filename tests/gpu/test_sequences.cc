// Sequences of calls in one communicator: token counts and widths changing on every call, auto at
// its dispatch boundaries, flat all-reduce counts, legal aliasing, Gemma/fp32 gamma, inputs made
// of the Lamport sentinel (-0.0) and the negative subnormals a flush-to-zero turns into it, and
// NaN/Inf inputs.
// Every batch is checked by run_and_check (reference, cross-rank, fused == unfused bitwise).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

constexpr arfAlgorithm_t kAllAlgorithms[] = {arfAlgoAuto, arfAlgoOneshotLamport,
                                             arfAlgoOneshotPull, arfAlgoTwoshot, arfAlgoUnfused};

std::unique_ptr<World> make_world(int world_size, arfDataType_t dtype) {
  WorldOptions options;
  options.world_size = world_size;
  options.dtype = dtype;
  return World::create(options);
}

using AlgoWorldDtype = std::tuple<arfAlgorithm_t, int, arfDataType_t>;

std::string algo_world_dtype_name(const ::testing::TestParamInfo<AlgoWorldDtype>& info) {
  return algorithm_tag(std::get<0>(info.param)) + "_" + dtype_tag(std::get<2>(info.param)) +
         "_ws" + std::to_string(std::get<1>(info.param));
}

// ---- back-to-back calls with changing shapes -------------------------------------------------

class BackToBack : public ::testing::TestWithParam<AlgoWorldDtype> {};

// Token counts from 1 to the capacity across the plan's boundaries, then reversed: shrinking after growing is where a rank that runs
// ahead finds a peer's buffer still sized (and filled) for the previous call. Widths rotate too, so
// grids change on every call. Host skew up to 300 us per rank per call.
TEST_P(BackToBack, ChangingTokensEveryCall) {
  const auto [algorithm, world_size, dtype] = GetParam();
  const auto world = make_world(world_size, dtype);
  ASSERT_NE(world, nullptr);
  const int64_t capacity = static_cast<int64_t>(world->options().max_tokens);
  std::vector<int64_t> tokens = {1, 2, 3, 7, 16, 17, 64, 127, 128, 1000, capacity};
  tokens.insert(tokens.end(), tokens.rbegin() + 1, tokens.rend());
  const int64_t widths[] = {4096, 2880, 7168};
  std::vector<CallSpec> specs;
  for (size_t i = 0; i < tokens.size(); ++i) {
    CallSpec s;
    s.algorithm = algorithm;
    s.num_tokens = tokens[i];
    s.hidden = widths[i % 3];
    // Every fifth call is a plain all-reduce: patterns interleave in one communicator too.
    s.pattern = i % 5 == 4 ? arfPatternAllReduce : arfPatternResidualRmsNorm;
    specs.push_back(s);
  }
  RunOptions options;
  options.max_skew_us = 300;
  run_and_check(*world, specs, options);
}

INSTANTIATE_TEST_SUITE_P(Bf16, BackToBack,
                         ::testing::Combine(::testing::ValuesIn(kAllAlgorithms),
                                            ::testing::Values(2, 4, 8),
                                            ::testing::Values(arfBFloat16)),
                         algo_world_dtype_name);
INSTANTIATE_TEST_SUITE_P(Fp16, BackToBack,
                         ::testing::Combine(::testing::ValuesIn(kAllAlgorithms),
                                            ::testing::Values(8), ::testing::Values(arfFloat16)),
                         algo_world_dtype_name);

// ---- auto at its dispatch boundaries ---------------------------------------------------------

class AutoBoundaries : public ::testing::TestWithParam<std::tuple<int, arfDataType_t>> {};

// Asks arfPlan (pure) where auto changes algorithm, grid or block as tokens grow, then runs the
// token counts on both sides of every change, in one batch.
TEST_P(AutoBoundaries, BothSidesOfEveryPlanChange) {
  const auto [world_size, dtype] = GetParam();
  const auto world = make_world(world_size, dtype);
  ASSERT_NE(world, nullptr);
  std::vector<CallSpec> specs;
  for (int64_t hidden : {2880, 8192}) {
    // Sized for the largest call: arfPlan checks the tensors of each shape for overlap.
    CallSpec probe;
    probe.hidden = hidden;
    probe.num_tokens = static_cast<int64_t>(world->options().max_tokens);
    CallBuffers buffers(world->device(0), probe, dtype);
    arfFusedArgs_t args = buffers.args();
    arfPlan_t previous{};
    std::vector<int64_t> changes, algorithm_changes;
    for (int64_t t = 1; t <= static_cast<int64_t>(world->options().max_tokens); ++t) {
      args.num_tokens = static_cast<size_t>(t);
      arfPlan_t plan;
      ASSERT_EQ(arfPlan(world->comm(0), &args, &plan), arfSuccess) << t;
      if (t > 1 && plan.algorithm != previous.algorithm) algorithm_changes.push_back(t);
      else if (t > 1 && (plan.grid != previous.grid || plan.block != previous.block)) {
        changes.push_back(t);
      }
      previous = plan;
    }
    // Grids may grow with every token; keep the first and last few plus every algorithm switch.
    std::set<int64_t> picked(algorithm_changes.begin(), algorithm_changes.end());
    for (size_t i = 0; i < changes.size(); ++i) {
      if (i < 4 || i + 4 >= changes.size()) picked.insert(changes[i]);
    }
    for (int64_t t : picked) {
      for (int64_t tokens : {t - 1, t}) {
        CallSpec s;
        s.hidden = hidden;
        s.num_tokens = tokens;
        specs.push_back(s);
      }
    }
  }
  if (specs.empty()) GTEST_SKIP() << "auto never changes its plan at these widths";
  run_and_check(*world, specs);
}

INSTANTIATE_TEST_SUITE_P(Auto, AutoBoundaries,
                         ::testing::Values(std::make_tuple(2, arfBFloat16),
                                           std::make_tuple(8, arfBFloat16),
                                           std::make_tuple(4, arfFloat16)),
                         [](const auto& info) {
                           return std::string(dtype_tag(std::get<1>(info.param))) + "_ws" +
                                  std::to_string(std::get<0>(info.param));
                         });

// ---- flat arfAllReduce -----------------------------------------------------------------------

class FlatAllReduce : public ::testing::TestWithParam<std::tuple<int, arfDataType_t>> {};

// Counts that are multiples of 8 but not of max_hidden (the library picks its own row width), up
// to the capacity max_tokens * max_hidden; every other call in place.
TEST_P(FlatAllReduce, CountsOffTheRowGrid) {
  const auto [world_size, dtype] = GetParam();
  const auto world = make_world(world_size, dtype);
  ASSERT_NE(world, nullptr);
  const int64_t max_hidden = static_cast<int64_t>(world->options().max_hidden);
  const int64_t capacity = static_cast<int64_t>(world->options().max_tokens) * max_hidden;
  const int64_t counts[] = {8, 24, max_hidden + 8, 5 * max_hidden + 8, 1000 * max_hidden + 56,
                            capacity - 8, capacity, 2888};
  std::vector<CallSpec> specs;
  for (size_t i = 0; i < std::size(counts); ++i) {
    CallSpec s;
    s.flat = true;
    s.pattern = arfPatternAllReduce;
    s.num_tokens = 1;
    s.hidden = counts[i];
    s.alias = i % 2 == 1 ? kAllReduceInPlace : kNoAlias;
    specs.push_back(s);
  }
  run_and_check(*world, specs);
}

INSTANTIATE_TEST_SUITE_P(Flat, FlatAllReduce,
                         ::testing::Values(std::make_tuple(1, arfBFloat16),
                                           std::make_tuple(2, arfBFloat16),
                                           std::make_tuple(8, arfBFloat16),
                                           std::make_tuple(4, arfFloat16)),
                         [](const auto& info) {
                           return std::string(dtype_tag(std::get<1>(info.param))) + "_ws" +
                                  std::to_string(std::get<0>(info.param));
                         });

// ---- aliasing, gamma variants, sentinel inputs -----------------------------------------------

class Variants : public ::testing::TestWithParam<AlgoWorldDtype> {
 protected:
  void SetUp() override {
    world_ = make_world(std::get<1>(GetParam()), std::get<2>(GetParam()));
    ASSERT_NE(world_, nullptr);
  }
  CallSpec spec(int64_t tokens, int64_t hidden) const {
    CallSpec s;
    s.algorithm = std::get<0>(GetParam());
    s.num_tokens = tokens;
    s.hidden = hidden;
    return s;
  }
  std::unique_ptr<World> world_;
};

// residual_out == residual_in, norm_out == input (together and apart), allreduce_out == input:
// the in-place forms must give exactly what the out-of-place forms give (the reference).
TEST_P(Variants, LegalAliasing) {
  std::vector<CallSpec> specs;
  for (unsigned alias : {unsigned{kResidualInPlace}, unsigned{kNormIntoInput},
                         unsigned{kResidualInPlace | kNormIntoInput}}) {
    for (int64_t tokens : {1, 33, 300}) {
      CallSpec s = spec(tokens, tokens == 33 ? 2880 : 4096);
      s.alias = alias;
      specs.push_back(s);
    }
  }
  for (int64_t tokens : {5, 200}) {
    CallSpec s = spec(tokens, 5120);
    s.pattern = arfPatternAllReduce;
    s.alias = kAllReduceInPlace;
    specs.push_back(s);
  }
  run_and_check(*world_, specs);
}

TEST_P(Variants, GemmaAndFp32Gamma) {
  std::vector<CallSpec> specs;
  for (int variant = 0; variant < 4; ++variant) {
    for (int64_t tokens : {3, 130}) {
      CallSpec s = spec(tokens, variant % 2 == 0 ? 7168 : 2048);
      s.gamma_plus_one = (variant & 1) != 0;
      s.gamma_fp32 = (variant & 2) != 0;
      s.eps = variant == 3 ? 1e-5f : 1e-6f;
      specs.push_back(s);
    }
  }
  run_and_check(*world_, specs);
}

// All -0.0 (the Lamport "not yet written" sentinel) on every rank, all negative subnormals, and a
// mix with -0.0 in every lane from some rank: must neither hang nor leak -0.0 into outputs.
TEST_P(Variants, SentinelAndSubnormalInputs) {
  std::vector<CallSpec> specs;
  for (Content content : {Content::kAllNegativeZero, Content::kAllNegativeSubnormal,
                          Content::kSentinelMix}) {
    for (arfPattern_t pattern : {arfPatternAllReduce, arfPatternResidualRmsNorm}) {
      for (int64_t tokens : {1, 64}) {
        CallSpec s = spec(tokens, 4096);
        s.pattern = pattern;
        s.content = content;
        specs.push_back(s);
      }
    }
  }
  RunOptions options;
  options.hang_seconds = 60;
  run_and_check(*world_, specs, options);
}

// NaN and +-Inf in the inputs of some ranks and in residual_in (edge_values.h: rows by kind, the
// semantics asserted). The Lamport sentinel is -0.0 only, so NaN data must flow through: no rank
// may wait for it (a timeout is an async error and fails run_calls). Checked against the reference
// with NaN matching any NaN, +-Inf exactly; across ranks and against the unfused rerun bit for bit,
// NaN payloads included. Row 0 has NaN; 6 and 64 tokens reach every row kind (64 at 2880 columns).
TEST_P(Variants, NanAndInfInputs) {
  std::vector<CallSpec> specs;
  for (arfPattern_t pattern : {arfPatternAllReduce, arfPatternResidualRmsNorm}) {
    for (int64_t tokens : {1, 6, 64}) {
      CallSpec s = spec(tokens, tokens == 64 ? 2880 : 4096);
      s.pattern = pattern;
      s.content = Content::kNanInf;
      specs.push_back(s);
    }
  }
  RunOptions options;
  options.hang_seconds = 60;
  run_and_check(*world_, specs, options);
}

INSTANTIATE_TEST_SUITE_P(All, Variants,
                         ::testing::Combine(::testing::ValuesIn(kAllAlgorithms),
                                            ::testing::Values(2, 8),
                                            ::testing::Values(arfBFloat16, arfFloat16)),
                         algo_world_dtype_name);
INSTANTIATE_TEST_SUITE_P(World1, Variants,
                         ::testing::Combine(::testing::Values(arfAlgoAuto),
                                            ::testing::Values(1),
                                            ::testing::Values(arfBFloat16, arfFloat16)),
                         algo_world_dtype_name);

}  // namespace
}  // namespace arf::test
