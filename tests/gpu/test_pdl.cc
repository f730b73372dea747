// Programmatic dependent launch (arfCommConfig_t::programmatic_launch): every kernel waits for its
// predecessor's completion before touching memory and signals its dependents after its last store
// (src/kernels/pdl.cuh). Back-to-back calls with shapes, patterns and algorithms changing every
// call, inputs overwritten right behind each call, host skew: any kernel that read or wrote before
// its predecessor finished (a missing wait) shows up against the reference, across ranks, or
// against the forced-unfused rerun (run_and_check, which runs with PDL as well).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

using AlgoWorld = std::tuple<arfAlgorithm_t, int>;

class ProgrammaticLaunch : public ::testing::TestWithParam<AlgoWorld> {};

TEST_P(ProgrammaticLaunch, BackToBackCallsMatchTheContract) {
  const auto [algorithm, world_size] = GetParam();
  WorldOptions options;
  options.world_size = world_size;
  options.programmatic_launch = true;
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  std::vector<CallSpec> specs;
  const int64_t tokens[] = {1, 3, 64, 17, 512, 2, 128, 1};
  const int64_t widths[] = {4096, 7168, 2880};
  for (size_t i = 0; i < std::size(tokens); ++i) {
    CallSpec s;
    s.algorithm = algorithm;
    s.num_tokens = tokens[i];
    s.hidden = widths[i % 3];
    s.pattern = i % 4 == 3 ? arfPatternAllReduce : arfPatternResidualRmsNorm;
    specs.push_back(s);
  }
  RunOptions run;
  run.max_skew_us = 100;
  run_and_check(*world, specs, run);
}

INSTANTIATE_TEST_SUITE_P(
    Pdl, ProgrammaticLaunch,
    ::testing::Combine(::testing::Values(arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                         arfAlgoTwoshot, arfAlgoUnfused),
                       ::testing::Values(1, 2, 8)),
    [](const ::testing::TestParamInfo<AlgoWorld>& info) {
      return algorithm_tag(std::get<0>(info.param)) + "_ws" + std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace arf::test
