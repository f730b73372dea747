// nccl::settle: a non-blocking NCCL communicator answers calls with ncclInProgress and takes the
// next call only once ncclCommGetAsyncError says the last one finished. These drive settle() with
// a fake API (no NCCL, no GPU): in-progress then success, in-progress then an error, never
// finishing (bounded), and a call that failed outright. Then nccl::shut_down, the teardown
// arfCommDestroy runs before synchronizing the device: finalize + destroy when NCCL finishes,
// abort when it does not within the bound (a kernel whose peer died) or when asked to.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "core/nccl_api.h"

namespace arf::nccl {
namespace {

std::atomic<int> polls_left{0};
ncclResult_t final_state = ncclSuccess;
std::atomic<int> finalized{0}, destroyed{0}, aborted{0};

ncclResult_t fake_async_error(ncclComm_t, ncclResult_t* state) {
  *state = polls_left.fetch_sub(1) > 0 ? ncclInProgress : final_state;
  return ncclSuccess;
}
const char* fake_error_string(ncclResult_t) { return "fake nccl error"; }
ncclResult_t fake_finalize(ncclComm_t) {
  finalized.fetch_add(1);
  return ncclInProgress;
}
ncclResult_t fake_destroy(ncclComm_t) {
  destroyed.fetch_add(1);
  return ncclSuccess;
}
ncclResult_t fake_abort(ncclComm_t) {
  aborted.fetch_add(1);
  return ncclSuccess;
}

Api fake_api() {
  Api api;
  api.comm_get_async_error = fake_async_error;
  api.get_error_string = fake_error_string;
  api.comm_finalize = fake_finalize;
  api.comm_destroy = fake_destroy;
  api.comm_abort = fake_abort;
  return api;
}

ncclComm_t fake_comm() { return reinterpret_cast<ncclComm_t>(uintptr_t{0x1000}); }

void reset_counts() {
  finalized = 0;
  destroyed = 0;
  aborted = 0;
}

TEST(NcclSettle, InProgressIsPolledUntilTheCommunicatorSettles) {
  const Api api = fake_api();
  polls_left = 50;
  final_state = ncclSuccess;
  EXPECT_TRUE(settle(api, nullptr, ncclInProgress, "ncclAllReduce", 5.0).is_ok());
  EXPECT_LT(polls_left.load(), 0);  // every in-progress answer was consumed
  EXPECT_TRUE(settle(api, nullptr, ncclSuccess, "ncclAllReduce", 5.0).is_ok());
}

TEST(NcclSettle, AnErrorAfterInProgressIsAnNcclError) {
  const Api api = fake_api();
  polls_left = 3;
  final_state = ncclRemoteError;
  const Status s = settle(api, nullptr, ncclInProgress, "ncclAllReduce", 5.0);
  EXPECT_EQ(s.code(), arfNcclError);
  EXPECT_NE(s.message().find("ncclAllReduce"), std::string::npos) << s.message();
}

TEST(NcclSettle, AnOutrightFailureIsReportedWithoutPolling) {
  const Api api = fake_api();
  polls_left = 1000;
  const Status s = settle(api, nullptr, ncclInvalidArgument, "ncclBroadcast", 5.0);
  EXPECT_EQ(s.code(), arfNcclError);
  EXPECT_EQ(polls_left.load(), 1000);
}

TEST(NcclSettle, NeverSettlingIsATimeoutWithinTheBound) {
  const Api api = fake_api();
  polls_left = 1 << 30;
  const auto start = std::chrono::steady_clock::now();
  const Status s = settle(api, nullptr, ncclInProgress, "ncclAllReduce", 0.2);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s.code(), arfTimeout);
  EXPECT_NE(s.message().find("ncclAllReduce"), std::string::npos) << s.message();
  EXPECT_GE(took, 0.2);
  EXPECT_LT(took, 2.0);
}

TEST(NcclShutDown, AHealthyCommunicatorIsFinalizedThenDestroyed) {
  const Api api = fake_api();
  reset_counts();
  polls_left = 20;
  final_state = ncclSuccess;
  EXPECT_TRUE(shut_down(api, fake_comm(), /*abort=*/false, 5.0).is_ok());
  EXPECT_EQ(finalized.load(), 1);
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_EQ(aborted.load(), 0);
}

// An nccl call in flight whose peer died: NCCL's kernel never finishes, so neither does finalize.
// The teardown must abort within the bound (and never destroy, which would wait for the kernel).
TEST(NcclShutDown, AFinalizeThatNeverFinishesIsAbortedWithinTheBound) {
  const Api api = fake_api();
  reset_counts();
  polls_left = 1 << 30;
  const auto start = std::chrono::steady_clock::now();
  const Status s = shut_down(api, fake_comm(), /*abort=*/false, 0.2);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s.code(), arfTimeout);
  EXPECT_NE(s.message().find("ncclCommFinalize"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("aborted"), std::string::npos) << s.message();
  EXPECT_EQ(aborted.load(), 1);
  EXPECT_EQ(destroyed.load(), 0);
  EXPECT_LT(took, 2.0);
}

TEST(NcclShutDown, AFailedCommunicatorIsAbortedAtOnce) {
  const Api api = fake_api();
  reset_counts();
  polls_left = 1 << 30;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(shut_down(api, fake_comm(), /*abort=*/true, 30.0).is_ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  EXPECT_EQ(aborted.load(), 1);
  EXPECT_EQ(finalized.load(), 0);
  EXPECT_EQ(destroyed.load(), 0);
}

TEST(NcclShutDown, AFinalizeErrorAbortsAndIsReported) {
  const Api api = fake_api();
  reset_counts();
  polls_left = 2;
  final_state = ncclRemoteError;
  const Status s = shut_down(api, fake_comm(), /*abort=*/false, 5.0);
  EXPECT_EQ(s.code(), arfNcclError);
  EXPECT_EQ(aborted.load(), 1);
  EXPECT_EQ(destroyed.load(), 0);
}

}  // namespace
}  // namespace arf::nccl
