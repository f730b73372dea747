// The correctness matrix: every forced algorithm x pattern x dtype x world size, each run as one
// back-to-back batch over several hidden sizes and token counts, checked against the reference,
// across ranks and against the unfused path (harness.h says what each check catches).
//
// Coverage (kept so the whole GPU suite stays within ~5 minutes on one H200):
//   world 2 and 8: hidden {2048, 2880, 4096, 5120, 7168, 8192}
//   world 1 and 4: hidden {2880, 5120, 8192} (odd widths and the widest)
//   tokens per hidden: 1, 9 and 96, plus 512 at hidden 4096 (4 MiB per rank: past auto's oneshot
//   limit at world 4 and 8, so forced algorithms run shapes auto would not give them); tokens
//   change on every call.
// Algorithm auto, aliasing, gamma variants and longer sequences are in test_sequences.cc. Rows
// wider than 8192 (up to 16384) are in HugeRows below.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

using MatrixParam = std::tuple<arfAlgorithm_t, arfPattern_t, arfDataType_t, int>;

std::vector<int64_t> hidden_sizes(int world) {
  if (world == 2 || world == 8) return {2048, 2880, 4096, 5120, 7168, 8192};
  return {2880, 5120, 8192};
}

std::vector<CallSpec> matrix_specs(arfAlgorithm_t algorithm, arfPattern_t pattern, int world) {
  std::vector<CallSpec> specs;
  for (int64_t hidden : hidden_sizes(world)) {
    std::vector<int64_t> tokens = {1, 9, 96};
    if (hidden == 4096) tokens.push_back(512);
    for (int64_t t : tokens) {
      CallSpec s;
      s.pattern = pattern;
      s.algorithm = algorithm;
      s.num_tokens = t;
      s.hidden = hidden;
      specs.push_back(s);
    }
  }
  return specs;
}

class Matrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(Matrix, MatchesReferenceOnEveryRank) {
  const auto [algorithm, pattern, dtype, world_size] = GetParam();
  WorldOptions options;
  options.world_size = world_size;
  options.dtype = dtype;
  const std::unique_ptr<World> world = World::create(options);
  ASSERT_NE(world, nullptr);

  const std::vector<CallSpec> specs = matrix_specs(algorithm, pattern, world_size);
  // The plan must honour the forced algorithm on every rank before anything runs.
  for (const CallSpec& spec : specs) {
    for (int r = 0; r < world_size; ++r) {
      const CallBuffers buffers(world->device(r), spec, dtype);
      const arfFusedArgs_t args = buffers.args();
      arfPlan_t plan;
      const arfStatus_t st = arfPlan(world->comm(r), &args, &plan);
      ASSERT_EQ(st, arfSuccess) << spec.label() << " rank " << r << ": " << status_text(st);
      ASSERT_EQ(plan.algorithm, algorithm) << spec.label() << ": " << plan_text(plan);
      ASSERT_EQ(plan.forced, 1) << plan_text(plan);
    }
  }
  run_and_check(*world, specs);
}

std::string matrix_name(const ::testing::TestParamInfo<MatrixParam>& info) {
  // The instantiation prefix names the algorithm.
  const arfDataType_t dtype = std::get<2>(info.param);
  return std::string(dtype_tag(dtype)) + "_ws" + std::to_string(std::get<3>(info.param)) +
         (std::get<1>(info.param) == arfPatternAllReduce ? "_AllReduce" : "_ResidualRmsNorm");
}

auto matrix_values(arfAlgorithm_t algorithm) {
  return ::testing::Combine(::testing::Values(algorithm),
                            ::testing::Values(arfPatternAllReduce, arfPatternResidualRmsNorm),
                            ::testing::Values(arfBFloat16, arfFloat16),
                            ::testing::Values(1, 2, 4, 8));
}

// Test names: OneshotLamport/Matrix.MatchesReferenceOnEveryRank/bf16_ws8_ResidualRmsNorm.
INSTANTIATE_TEST_SUITE_P(OneshotLamport, Matrix, matrix_values(arfAlgoOneshotLamport), matrix_name);
INSTANTIATE_TEST_SUITE_P(OneshotPull, Matrix, matrix_values(arfAlgoOneshotPull), matrix_name);
INSTANTIATE_TEST_SUITE_P(Twoshot, Matrix, matrix_values(arfAlgoTwoshot), matrix_name);
INSTANTIATE_TEST_SUITE_P(Unfused, Matrix, matrix_values(arfAlgoUnfused), matrix_name);

// ---- huge rows --------------------------------------------------------------------------------

// Rows past 8192 columns, which the matrix above never reaches (its communicators stop at the
// default max_hidden 8192): CTAs wider than 512 threads (544 to 1024, one per SM) whose threads
// own 2 vectors, at the widest legal row (16384) with max_tokens rows, a width just past 8192 and
// one past 12288, and a plain all-reduce at 16384. Forced algorithms, world 2 in fp16 and world 8 in
// bf16.
using HugeParam = std::tuple<arfAlgorithm_t, int>;

class HugeRows : public ::testing::TestWithParam<HugeParam> {};

TEST_P(HugeRows, WidestRowsAtCapacity) {
  const auto [algorithm, world_size] = GetParam();
  WorldOptions options;
  options.world_size = world_size;
  options.dtype = world_size == 2 ? arfFloat16 : arfBFloat16;
  options.max_hidden = 16384;  // world 1: staged rows of 192 KiB a CTA at 16384 columns
  options.max_tokens = 256;  // 8 MiB a rank per tensor at 16384 columns
  const std::unique_ptr<World> world = World::create(options);
  ASSERT_NE(world, nullptr);
  struct Shape {
    arfPattern_t pattern;
    int64_t tokens, hidden;
    int block;  // ceil(vectors / 2) threads in whole warps: 2048, 1025 and 1537 vectors
  };
  const Shape shapes[] = {{arfPatternResidualRmsNorm, 1, 16384, 1024},
                          {arfPatternResidualRmsNorm, 256, 16384, 1024},
                          {arfPatternAllReduce, 37, 16384, 1024},
                          {arfPatternResidualRmsNorm, 9, 8200, 544},
                          {arfPatternResidualRmsNorm, 5, 12296, 800}};
  std::vector<CallSpec> specs;
  for (const Shape& shape : shapes) {
    CallSpec s;
    s.pattern = shape.pattern;
    s.algorithm = algorithm;
    s.num_tokens = shape.tokens;
    s.hidden = shape.hidden;
    specs.push_back(s);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const CallSpec& spec = specs[i];
    const CallBuffers buffers(world->device(0), spec, world->dtype());
    const arfFusedArgs_t args = buffers.args();
    arfPlan_t plan;
    const arfStatus_t st = arfPlan(world->comm(0), &args, &plan);
    ASSERT_EQ(st, arfSuccess) << spec.label() << ": " << status_text(st);
    ASSERT_EQ(plan.algorithm, algorithm) << spec.label() << ": " << plan_text(plan);
    ASSERT_EQ(plan.block, shapes[i].block) << spec.label() << ": " << plan_text(plan);
  }
  run_and_check(*world, specs);
}

INSTANTIATE_TEST_SUITE_P(Huge, HugeRows,
                         ::testing::Combine(::testing::Values(arfAlgoOneshotLamport,
                                                              arfAlgoOneshotPull, arfAlgoTwoshot,
                                                              arfAlgoUnfused),
                                            ::testing::Values(1, 2, 8)),
                         [](const ::testing::TestParamInfo<HugeParam>& info) {
                           const int world = std::get<1>(info.param);
                           return algorithm_tag(std::get<0>(info.param)) +
                                  (world == 2 ? "_fp16" : "_bf16") + "_ws" + std::to_string(world);
                         });

}  // namespace
}  // namespace arf::test
