// The `nccl` algorithm (ncclAllReduce + our epilogue kernel) on ranks with one GPU each. It needs
// ARF_TEST_DEVICES naming distinct GPUs and NCCL loadable; otherwise the test says why and skips
// (virtual ranks share a GPU, which NCCL refuses).
//
// NCCL sums in its own order (ring/tree, in the activation dtype), so its all-reduce is checked
// against the exact sum with a bound, not bitwise: |got - exact| <= (world + 1) ulp(sum of |x_r|).
// residual_out inherits that bound plus its own rounding; norm_out must be our epilogue of the
// residual_out we got (the unfused contract, within the norm tolerance), and every output must be
// bitwise identical on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu/harness.h"

namespace arf::test {
namespace {

// Skips (with the reason visible) unless this world can run the nccl algorithm.
bool nccl_available(const World& world, std::string* why) {
  CallSpec probe;
  probe.algorithm = arfAlgoNccl;
  CallBuffers buffers(world.device(0), probe, world.dtype());
  const arfFusedArgs_t args = buffers.args();
  arfPlan_t plan;
  const arfStatus_t st = arfPlan(world.comm(0), &args, &plan);
  if (st == arfSuccess) return true;
  *why = status_text(st);
  return false;
}

class NcclAlgorithm : public ::testing::TestWithParam<arfPattern_t> {};

TEST_P(NcclAlgorithm, MatchesTheContractOnEveryRank) {
  WorldOptions options;
  options.world_size = 2;
  options.max_tokens = 512;
  options.max_hidden = 4096;
  const std::vector<int> devices = test_devices(options.world_size);
  if (devices[0] == devices[1]) {
    GTEST_SKIP() << "nccl algorithm: needs distinct GPUs (set ARF_TEST_DEVICES=0,1)";
  }
  const auto world = World::create(options);
  ASSERT_NE(world, nullptr);
  std::string why;
  if (!nccl_available(*world, &why)) GTEST_SKIP() << "nccl algorithm unavailable: " << why;

  std::vector<CallSpec> specs;
  for (int64_t tokens : {1, 7, 64, 300}) {
    CallSpec spec;
    spec.pattern = GetParam();
    spec.algorithm = arfAlgoNccl;
    spec.num_tokens = tokens;
    spec.hidden = 4096;
    spec.gamma_fp32 = tokens == 7;
    specs.push_back(spec);
  }
  const std::vector<CallData> data =
      make_all_call_data(specs, world->size(), world->dtype(), test_seed());
  const std::vector<CallResult> results = run_calls(*world, specs, data, RunOptions{});
  ASSERT_EQ(results.size(), specs.size());
  const DType dt = ref_dtype(world->dtype());

  for (size_t c = 0; c < specs.size(); ++c) {
    const CallSpec& spec = specs[c];
    const CallData& d = data[c];
    ref::FusedInputs in;
    in.dtype = dt;
    in.num_tokens = spec.num_tokens;
    in.hidden = spec.hidden;
    for (const auto& x : d.inputs) in.rank_inputs.push_back(x.data());
    const bool norm = spec.has_norm();
    if (norm) {
      in.residual_in = d.residual_in.data();
      in.gamma = spec.gamma_fp32 ? static_cast<const void*>(d.gamma32.data()) : d.gamma16.data();
      in.gamma_dtype = spec.gamma_fp32 ? DType::kFp32 : dt;
      in.eps = spec.eps;
    }
    const RankOutputs& r0 = results[c][0];
    const std::vector<uint16_t>& sum_or_residual = norm ? r0.residual_out : r0.allreduce;
    int64_t bad = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < spec.elems(); ++i) {
      if (!ref::nccl_sum_within_tolerance(in, i, sum_or_residual[static_cast<size_t>(i)])) {
        if (bad++ == 0) first = i;
      }
    }
    EXPECT_EQ(bad, 0) << spec.label() << ": " << (norm ? "residual_out" : "allreduce") << " "
                      << bad << " elements outside the NCCL bound, first at " << first;
    if (norm) {
      // Our epilogue of what NCCL summed: RMSNorm(residual_out we got) * gamma.
      const std::string norm_bad = ref::first_norm_mismatch(
          r0.norm_out.data(), ref::norm_exact_of(in, r0.residual_out.data()), spec.hidden, dt);
      EXPECT_TRUE(norm_bad.empty()) << spec.label() << ": norm_out " << norm_bad;
    }
    for (int r = 1; r < world->size(); ++r) {
      const RankOutputs& o = results[c][static_cast<size_t>(r)];
      EXPECT_EQ(o.allreduce, r0.allreduce) << spec.label() << ": rank " << r << " allreduce";
      EXPECT_EQ(o.residual_out, r0.residual_out) << spec.label() << ": rank " << r;
      EXPECT_EQ(o.norm_out, r0.norm_out) << spec.label() << ": rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Patterns, NcclAlgorithm,
                         ::testing::Values(arfPatternAllReduce, arfPatternResidualRmsNorm),
                         [](const auto& info) {
                           return std::string(info.param == arfPatternAllReduce ? "AllReduce"
                                                                                : "ResidualRmsNorm");
                         });

}  // namespace
}  // namespace arf::test
