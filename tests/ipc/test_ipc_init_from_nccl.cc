// arfCommInitRankFromNccl over processes: each rank process makes an NCCL communicator of its
// own (the way an engine's process group does), and the arfusion communicator takes its rank,
// world and device from it, the rendezvous id travelling by ncclBroadcast.
//
//   IpcInitFromNccl  world 2 and 4: ranks from ncclCommUserRank, world from ncclCommCount; a batch
//                    of calls over every algorithm checked against the reference and bitwise
//                    across ranks; no asynchronous error afterwards.
//
// Ranks sharing a GPU: NCCL refuses two ranks of one host on one device ("Duplicate GPU"), so each
// rank then names itself a host of its own (NCCL_HOSTID) and NCCL joins them over sockets on the
// loopback interface. That is a test device only: arfusion itself finds the ranks on one GPU and
// uses the ipc transport as always. With one GPU per rank (ARF_TEST_DEVICES=0,1,...) nothing is set.
//
// The NCCL id: rank 0 draws it (its process then hosts NCCL's bootstrap root, as in an engine)
// and hands it to the others through a file in a directory the parent made; the readers' wait is
// bounded.
#include <gtest/gtest.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/nccl_api.h"
#include "ipc/ipc_rank.h"
#include "ipc/ipc_test_util.h"

namespace arf::ipc_test {
namespace {

constexpr double kIdWaitSeconds = 30;

bool ranks_share_a_device(int world) {
  std::set<int> devices;
  for (int r = 0; r < world; ++r) devices.insert(device_for_rank(r));
  return static_cast<int>(devices.size()) < world;
}

// Before NCCL's first use in this process: it reads these at communicator creation.
void nccl_environment(const RankContext& ctx) {
  if (!ranks_share_a_device(ctx.world())) return;
  const std::string host = "arfusion-ipc-test-" + std::to_string(getppid()) + "-rank" +
                           std::to_string(ctx.rank());
  ::setenv("NCCL_HOSTID", host.c_str(), 1);
  ::setenv("NCCL_IB_DISABLE", "1", 1);
  ::setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
}

bool write_id(RankContext& ctx, const std::string& path, const ncclUniqueId& id) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(id.internal, sizeof(id.internal));
    if (!f) {
      ctx.fail("cannot write " + tmp);
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);  // readers never see a partial id
  if (ec) ctx.fail("rename " + tmp + ": " + ec.message());
  return !ec;
}

bool read_id(RankContext& ctx, const std::string& path, ncclUniqueId* id) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kIdWaitSeconds);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(id->internal, sizeof(id->internal))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ctx.fail("rank 0's NCCL id did not appear in " + path + " within " + fmt_seconds(kIdWaitSeconds));
  return false;
}

// Shapes and algorithms change with every call; within kMaxTokens x kMaxHidden.
std::vector<CallSpec> from_nccl_specs() {
  const arfAlgorithm_t algorithms[] = {arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                       arfAlgoTwoshot, arfAlgoUnfused};
  const int64_t tokens[] = {5, 1, 64, 257, 33, 8};
  std::vector<CallSpec> specs;
  for (int c = 0; c < 12; ++c) {
    CallSpec s;
    s.algorithm = algorithms[c % 5];
    s.num_tokens = tokens[c % 6];
    s.hidden = c % 3 == 1 ? 2048 : static_cast<int64_t>(kMaxHidden);
    s.pattern = c % 4 == 3 ? arfPatternAllReduce : arfPatternResidualRmsNorm;
    specs.push_back(s);
  }
  return specs;
}

void from_nccl_rank(RankContext& ctx, const std::string& id_path, uint64_t seed) {
  nccl_environment(ctx);
  ::setenv("ARF_NCCL", "1", 0);  // the library's NCCL loader, which arfCommInitRankFromNccl uses
  if (!init_device(ctx)) return;
  std::string why;
  const nccl::Api* api = nccl::api(&why);
  if (api == nullptr) return ctx.fail("NCCL unavailable: " + why);
  ncclUniqueId nccl_id{};
  if (ctx.rank() == 0) {
    if (api->get_unique_id(&nccl_id) != ncclSuccess) return ctx.fail("ncclGetUniqueId failed");
    if (!write_id(ctx, id_path, nccl_id)) return;
  } else if (!read_id(ctx, id_path, &nccl_id)) {
    return;
  }
  const cudaStream_t stream = make_stream(ctx);
  if (stream == nullptr) return;
  nccl::Comm nc;
  if (Status s = nc.init(*api, nccl_id, ctx.rank(), ctx.world(), kInitTimeoutSeconds); !s.is_ok()) {
    return ctx.fail("the test's NCCL communicator: " + s.message());
  }
  // The suite's capacity and bounds; rank, world, device and id are replaced by the NCCL
  // communicator's.
  const arfCommConfig_t config = ipc_config(ctx, arfBFloat16);
  arfComm_t comm = nullptr;
  if (const arfStatus_t st = arfCommInitRankFromNccl(&comm, &config, nc.get(), stream);
      st != arfSuccess) {
    (void)nc.close(false, 30.0);
    return ctx.fail("arfCommInitRankFromNccl: " + status_text(st));
  }
  int rank = -1, world = -1;
  arfCommGetRank(comm, &rank);
  arfCommGetWorldSize(comm, &world);
  if (rank != ctx.rank() || world != ctx.world()) {
    ctx.fail("rank/world " + std::to_string(rank) + "/" + std::to_string(world) +
             ", the NCCL communicator's are " + std::to_string(ctx.rank()) + "/" +
             std::to_string(ctx.world()));
  }
  if (run_checked_batch(ctx, comm, stream, arfBFloat16, from_nccl_specs(), seed)) {
    if (const arfStatus_t async = arfCommGetAsyncError(comm); async != arfSuccess) {
      ctx.fail("arfCommGetAsyncError: " + status_text(async));
    }
  }
  destroy_comm(ctx, comm);
  (void)nc.close(false, 30.0);
  cudaStreamDestroy(stream);
}

class IpcInitFromNccl : public ::testing::TestWithParam<int> {};

TEST_P(IpcInitFromNccl, RanksTakeTheirPlaceFromTheNcclCommunicator) {
  const int world = GetParam();
  char dir_template[] = "/tmp/arfusion-nccl-id-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  ASSERT_NE(dir, nullptr) << "mkdtemp";
  const std::string id_path = std::string(dir) + "/nccl_id";
  const uint64_t seed = test_seed();
  const auto results = run_processes(
      test_name(), one_group(world), [&](RankContext& ctx) { from_nccl_rank(ctx, id_path, seed); },
      kBatchDeadlineSeconds);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  expect_all_passed(results);
  expect_identical_hashes(results, from_nccl_specs().size());
}

INSTANTIATE_TEST_SUITE_P(Ipc, IpcInitFromNccl, ::testing::Values(2, 4),
                         [](const auto& info) { return "ws" + std::to_string(info.param); });

}  // namespace
}  // namespace arf::ipc_test
