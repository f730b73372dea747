// The failure state arfCommGetAsyncError and arfCommGetFirstLostCall read (core/failure_state.h)
// is safe to poll from a watchdog thread while another thread issues calls: these tests run the
// pieces Communicator::async_error composes — FailureState, the error-record reader, the local
// group's failure marks — from several threads at once, with a thread playing the device that
// publishes an error record. Under ThreadSanitizer (dev/sanitize/tsan_failure_state.sh) they must
// be race-free; it reports the race when FailureState::fail drops its lock. Under the default build
// they check the semantics (first failure wins, the record is seen whole, a waiting mate is
// released).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/failure_state.h"
#include "transport/local.h"

namespace arf {
namespace {

// What a kernel's record_failure does, in host terms: details first, then the code with release.
void publish(ErrorRecord* record, uint64_t call) {
  std::atomic_ref<int32_t>(record->rank).store(1, std::memory_order_relaxed);
  std::atomic_ref<int32_t>(record->peer).store(0, std::memory_order_relaxed);
  std::atomic_ref<int32_t>(record->phase).store(static_cast<int32_t>(Phase::kLamportPoll),
                                                std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(record->call).store(call, std::memory_order_relaxed);
  std::atomic_ref<int32_t>(record->code).store(kErrorCodeTimeout, std::memory_order_release);
}

TEST(FailureState, TheFirstFailureWinsUnderContention) {
  for (int round = 0; round < 20; ++round) {
    FailureState state;
    std::atomic<int> recorded{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        bool mine = false;
        const Status s = state.fail(Status(arfTimeout, "thread " + std::to_string(t)), &mine);
        if (mine) recorded.fetch_add(1);
        EXPECT_FALSE(s.is_ok());
        state.note_lost_call(100 + static_cast<uint64_t>(t));
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(recorded.load(), 1);
    EXPECT_TRUE(state.failed());
    EXPECT_EQ(state.failure().code(), arfTimeout);
    EXPECT_EQ(state.lost_call(), 100u);  // the smallest noted call
  }
}

TEST(FailureState, HealthyUntilFailed) {
  FailureState state;
  EXPECT_FALSE(state.failed());
  EXPECT_TRUE(state.failure().is_ok());
  EXPECT_EQ(state.lost_call(), UINT64_MAX);
  state.note_lost_call(7);
  state.note_lost_call(9);  // never raised
  EXPECT_EQ(state.lost_call(), 7u);
}

// A watchdog polls the records while the calling thread keeps checking health, a device mate
// waits for this rank's enqueue, and the "device" publishes a timeout record: the watchdog sees
// the whole record, fails the state once, marks the group, and the waiting mate is released.
TEST(FailureState, AWatchdogThreadPollsWhileCallsRun) {
  std::vector<RankInfo> infos(2);
  infos[0].device = infos[1].device = 0;  // mates on one device: rank 1 waits for rank 0
  local::LocalGroup group(infos);
  ErrorRecord own{}, peer{};
  const std::vector<const ErrorRecord*> records = {&own, &peer};
  FailureState state;
  std::atomic<bool> stop{false};
  std::atomic<int> polls{0}, calls{0};

  std::thread device([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    publish(&peer, 1756);
  });
  std::thread watchdog([&] {
    while (!stop.load()) {
      polls.fetch_add(1);
      if (state.failed()) continue;
      if (const std::optional<ErrorRecord> r = first_error_record(records)) {
        EXPECT_EQ(r->call, 1756u);  // the details are complete once the code is seen
        EXPECT_EQ(r->rank, 1);
        bool mine = false;
        const Status s = state.fail(Status(arfTimeout, "rank 1 timed out"), &mine);
        if (mine) group.mark_failed(0, s);
      }
    }
  });
  std::thread mate([&] {
    const Status s = group.wait_enqueue_turn(1, 1, 30.0);
    EXPECT_EQ(s.code(), arfCommFailed) << s.message();
    EXPECT_NE(s.message().find("rank 1 timed out"), std::string::npos) << s.message();
  });
  // The calling thread: checks health before every "call" until the watchdog fails the state.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!state.failed() && std::chrono::steady_clock::now() < deadline) {
    calls.fetch_add(1);
    uint64_t lost = 0;
    if (const std::optional<ErrorRecord> r = first_error_record(records)) lost = r->call;
    if (lost != 0) state.note_lost_call(lost);
  }
  mate.join();
  stop = true;
  device.join();
  watchdog.join();
  EXPECT_TRUE(state.failed());
  EXPECT_EQ(state.failure().code(), arfTimeout);
  EXPECT_GT(polls.load(), 0);
  EXPECT_GT(calls.load(), 0);
}

}  // namespace
}  // namespace arf
