// arfCommInitRankFromNccl: the ipc transport bootstrapped from NCCL communicators the caller made
// (one per GPU). Ranks here are threads of one process, which the ipc transport treats like
// processes (socket rendezvous, cuMem export/import). Needs two distinct GPUs (ARF_TEST_DEVICES)
// and NCCL; otherwise it says why and skips.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <string>
#include <thread>
#include <vector>

#include "core/nccl_api.h"
#include "gpu/harness.h"

namespace arf::test {
namespace {

TEST(InitFromNccl, RanksTakeTheirPlaceFromTheNcclCommunicator) {
  const std::vector<int> devices = test_devices(2);
  if (devices[0] == devices[1]) GTEST_SKIP() << "needs distinct GPUs (ARF_TEST_DEVICES=0,1)";
  std::string why;
  const nccl::Api* api = nccl::api(&why);
  if (api == nullptr) GTEST_SKIP() << "NCCL unavailable: " << why;
  ncclUniqueId nccl_id{};
  ASSERT_EQ(api->get_unique_id(&nccl_id), ncclSuccess);

  CallSpec spec;
  spec.num_tokens = 5;
  spec.hidden = 4096;
  const CallData data = make_call_data(spec, 2, arfBFloat16, test_seed());
  std::vector<RankOutputs> outputs(2);
  std::vector<std::string> errors(2);
  std::vector<int> ranks(2, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const std::string& what) { errors[r] = what; };
      if (cudaSetDevice(devices[r]) != cudaSuccess) return fail("cudaSetDevice");
      cudaStream_t stream = nullptr;
      if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        return fail("stream");
      }
      nccl::Comm nc;
      if (Status s = nc.init(*api, nccl_id, r, 2, 30.0); !s.is_ok()) return fail(s.message());
      arfCommConfig_t config;
      arfCommConfigInit(&config);
      config.max_tokens = 16;
      config.max_hidden = 4096;
      config.init_timeout_seconds = 30;
      arfComm_t comm = nullptr;
      const arfStatus_t st = arfCommInitRankFromNccl(&comm, &config, nc.get(), stream);
      if (st != arfSuccess) return fail("arfCommInitRankFromNccl: " + status_text(st));
      arfCommGetRank(comm, &ranks[r]);
      CallBuffers buffers(devices[r], spec, arfBFloat16);
      buffers.upload(data, ranks[r], stream);
      const arfStatus_t call = buffers.launch(comm, stream);
      if (call != arfSuccess) fail("call: " + status_text(call));
      if (call == arfSuccess) outputs[r] = buffers.download(stream);
      (void)arfCommDestroy(comm);
      (void)nc.close(false, 30.0);
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
  EXPECT_EQ(ranks[0] + ranks[1], 1) << "ranks come from ncclCommUserRank";
  ref::FusedInputs in;
  in.dtype = DType::kBf16;
  in.num_tokens = spec.num_tokens;
  in.hidden = spec.hidden;
  for (const auto& x : data.inputs) in.rank_inputs.push_back(x.data());
  in.residual_in = data.residual_in.data();
  in.gamma = data.gamma16.data();
  in.eps = spec.eps;
  const ref::FusedOutputs want = ref::reference_fused(in);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outputs[r].residual_out, want.residual_out) << "rank " << r;
    EXPECT_EQ(ref::first_norm_mismatch(outputs[r].norm_out.data(), want.norm_exact, spec.hidden,
                                       DType::kBf16),
              "")
        << "rank " << r;
  }
  EXPECT_EQ(outputs[0].norm_out, outputs[1].norm_out);
}

}  // namespace
}  // namespace arf::test
