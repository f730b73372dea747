// nccl::settle: a non-blocking NCCL communicator answers calls with ncclInProgress and takes the
// next call only once ncclCommGetAsyncError says the last one finished. These drive settle() with
// a fake API (no NCCL, no GPU): in-progress then success, in-progress then an error, never
// finishing (bounded), and a call that failed outright.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "core/nccl_api.h"

namespace arf::nccl {
namespace {

std::atomic<int> polls_left{0};
ncclResult_t final_state = ncclSuccess;

ncclResult_t fake_async_error(ncclComm_t, ncclResult_t* state) {
  *state = polls_left.fetch_sub(1) > 0 ? ncclInProgress : final_state;
  return ncclSuccess;
}
const char* fake_error_string(ncclResult_t) { return "fake nccl error"; }

Api fake_api() {
  Api api;
  api.comm_get_async_error = fake_async_error;
  api.get_error_string = fake_error_string;
  return api;
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

}  // namespace
}  // namespace arf::nccl
