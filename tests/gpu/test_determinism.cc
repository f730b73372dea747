// Batch invariance: a row's outputs are bitwise independent of how many other rows share the call
// and of which algorithm ran it. It holds by construction (every algorithm sums ranks in the order
// 0..N-1 in fp32, and the row's block shape depends on the hidden size only), so no separate
// "deterministic mode" has to switch fusion off; this test is what keeps it true.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

constexpr int64_t kMaxRows = 256;
constexpr int64_t kHidden = 4096;
const int64_t kBatchSizes[] = {1, 2, 3, 7, 16, 17, 64, 127, 128, 255, 256};

// The first `rows` rows of `full` (same rank inputs, residual and gamma).
CallData prefix(const CallData& full, int64_t rows) {
  CallData d;
  const size_t n = static_cast<size_t>(rows * kHidden);
  for (const auto& in : full.inputs) d.inputs.emplace_back(in.begin(), in.begin() + n);
  d.residual_in.assign(full.residual_in.begin(), full.residual_in.begin() + n);
  d.gamma16 = full.gamma16;
  d.gamma32 = full.gamma32;
  return d;
}

bool same_row(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t row) {
  for (int64_t c = 0; c < kHidden; ++c) {
    if (a[row * kHidden + c] != b[row * kHidden + c]) return false;
  }
  return true;
}

class BatchInvariance : public ::testing::TestWithParam<int> {};

TEST_P(BatchInvariance, RowOutputsIndependentOfBatchAndAlgorithm) {
  WorldOptions options;
  options.world_size = GetParam();
  options.max_tokens = kMaxRows;
  options.max_hidden = kHidden;
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);

  CallSpec full_spec;
  full_spec.num_tokens = kMaxRows;
  full_spec.hidden = kHidden;
  const CallData full = make_call_data(full_spec, world->size(), world->dtype(), test_seed());

  // Every (algorithm, batch size) in one back-to-back sequence: shapes change every call.
  std::vector<CallSpec> specs;
  std::vector<CallData> data;
  for (arfAlgorithm_t algorithm : {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                   arfAlgoTwoshot, arfAlgoUnfused}) {
    for (int64_t rows : kBatchSizes) {
      CallSpec spec = full_spec;
      spec.algorithm = algorithm;
      spec.num_tokens = rows;
      specs.push_back(spec);
      data.push_back(prefix(full, rows));
    }
  }
  const std::vector<CallResult> results = run_calls(*world, specs, data, RunOptions{});
  check_calls(*world, specs, data, results);

  // The reference row: auto with the full batch on rank 0.
  const size_t reference_call = std::size(kBatchSizes) - 1;
  ASSERT_EQ(specs[reference_call].num_tokens, kMaxRows);
  const RankOutputs& want = results[reference_call][0];
  int mismatches = 0;
  for (size_t c = 0; c < specs.size() && mismatches < 8; ++c) {
    for (int r = 0; r < world->size(); ++r) {
      const RankOutputs& got = results[c][r];
      for (int64_t row = 0; row < specs[c].num_tokens && mismatches < 8; ++row) {
        if (!same_row(got.residual_out, want.residual_out, row) ||
            !same_row(got.norm_out, want.norm_out, row)) {
          ADD_FAILURE() << specs[c].label() << " rank " << r << " row " << row
                        << " differs from the same row computed in a batch of " << kMaxRows;
          ++mismatches;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, BatchInvariance, ::testing::Values(2, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "ws" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace arf::test
