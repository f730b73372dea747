// The local transport's rendezvous, on every path that ends before CUDA is touched: a bounded wait
// that names the missing ranks, late arrivals failing fast, duplicate ranks, world-size mismatch,
// a rank that fails before joining (abandon), and capacity that differs between ranks. The
// successful path enables peer access and needs a GPU (tests/gpu).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "transport/local.h"

namespace arf::local {
namespace {

using Clock = std::chrono::steady_clock;

RankInfo info(int64_t max_tokens = 1024) {
  RankInfo i;
  i.device = 0;
  i.sm_count = 132;
  i.dtype = DType::kBf16;
  i.max_tokens = max_tokens;
  i.max_hidden = 8192;
  i.oneshot_max_tokens = max_tokens;
  return i;
}

arfUniqueId fresh_id() {
  Result<arfUniqueId> id = new_unique_id();
  EXPECT_TRUE(id.is_ok()) << id.status().message();
  return id.is_ok() ? id.value() : arfUniqueId{};
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::future<Status> join_async(const arfUniqueId& id, int rank, int world, double timeout,
                               RankInfo i = info()) {
  return std::async(std::launch::async, [=] { return join(id, rank, world, i, timeout).status(); });
}

TEST(Rendezvous, TimeoutNamesMissingRanksAndLateArrivalsFailFast) {
  const arfUniqueId id = fresh_id();
  auto r2 = join_async(id, 2, 4, 30.0);
  auto r0 = join_async(id, 0, 4, 1.0);  // long enough for rank 2 to arrive first
  const Status s0 = r0.get();
  EXPECT_EQ(s0.code(), arfTimeout);
  EXPECT_NE(s0.message().find("rank(s) 1, 3 of world 4 never joined"), std::string::npos)
      << s0.message();
  // The rank with the long timeout is released by the first expiry, with the same report.
  const Status s2 = r2.get();
  EXPECT_EQ(s2.code(), arfTimeout);
  EXPECT_EQ(s2.message(), s0.message());
  const auto start = Clock::now();
  const Status late = join(id, 1, 4, info(), 30.0).status();
  EXPECT_EQ(late.code(), arfTimeout);
  EXPECT_LT(seconds_since(start), 5.0);
}

TEST(Rendezvous, DuplicateRankIsRejectedAndDoesNotDisturbTheGroup) {
  const arfUniqueId id = fresh_id();
  auto first = join_async(id, 0, 2, 30.0);
  // A duplicate is only a duplicate once the first has arrived (no introspection API: give the
  // thread ample time; had it not arrived, the call below would wait and time out instead).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const Status dup = join(id, 0, 2, info(), 5.0).status();
  EXPECT_EQ(dup.code(), arfInvalidArgument);
  EXPECT_NE(dup.message().find("duplicate rank 0"), std::string::npos) << dup.message();
  abandon(id, 1, 2, Status(arfCudaError, "cudaMalloc failed"));
  const Status s = first.get();
  EXPECT_EQ(s.code(), arfCudaError);
  EXPECT_NE(s.message().find("rank 1 failed before joining: cudaMalloc failed"), std::string::npos)
      << s.message();
}

TEST(Rendezvous, WorldSizeMismatch) {
  const arfUniqueId id = fresh_id();
  // abandon() registers the id with world 4 without blocking; then a world-2 caller is refused.
  abandon(id, 3, 4, Status(arfInternal, "test"));
  const Status s = join(id, 1, 2, info(), 1.0).status();
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("world size mismatch: rank 1 says 2"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("say 4"), std::string::npos) << s.message();
}

TEST(Rendezvous, AbandonReleasesWaitersAtOnce) {
  const arfUniqueId id = fresh_id();
  const auto start = Clock::now();
  auto r0 = join_async(id, 0, 4, 30.0);
  auto r1 = join_async(id, 1, 4, 30.0);
  abandon(id, 2, 4, Status(arfCudaError, "out of memory"));
  for (auto* f : {&r0, &r1}) {
    const Status s = f->get();
    EXPECT_EQ(s.code(), arfCudaError);
    EXPECT_NE(s.message().find("rank 2 failed before joining: out of memory"), std::string::npos);
  }
  // A rank that arrives after the failure learns it immediately too.
  const Status late = join(id, 3, 4, info(), 30.0).status();
  EXPECT_EQ(late.code(), arfCudaError);
  EXPECT_LT(seconds_since(start), 5.0);
}

TEST(Rendezvous, CapacityDisagreementFailsEveryRank) {
  const arfUniqueId id = fresh_id();
  auto r0 = join_async(id, 0, 2, 30.0, info(1024));
  auto r1 = join_async(id, 1, 2, 30.0, info(512));
  for (auto* f : {&r0, &r1}) {
    const Status s = f->get();
    EXPECT_EQ(s.code(), arfInvalidArgument);
    EXPECT_NE(s.message().find("ranks disagree on the communicator config"), std::string::npos)
        << s.message();
  }
}

// ARF_DEBUG_COUNTERS_NEAR_WRAP must be the same on every rank: a rank whose counters start
// elsewhere would wait for epochs no peer ever writes. Every rank fails, naming the two values.
TEST(Rendezvous, CountersNearWrapDisagreementFailsEveryRank) {
  const arfUniqueId id = fresh_id();
  RankInfo near_wrap = info();
  near_wrap.counters_near_wrap = 50;
  auto r0 = join_async(id, 0, 2, 30.0, info());
  auto r1 = join_async(id, 1, 2, 30.0, near_wrap);
  for (auto* f : {&r0, &r1}) {
    const Status s = f->get();
    EXPECT_EQ(s.code(), arfInvalidArgument);
    EXPECT_NE(s.message().find("ARF_DEBUG_COUNTERS_NEAR_WRAP: rank 0 has 0, rank 1 has 50"),
              std::string::npos)
        << s.message();
  }
  // verify_calls may differ (the communicator runs the check on every rank when any asks).
  std::vector<RankInfo> infos(2, info());
  infos[1].verify_calls = true;
  EXPECT_TRUE(check_same_settings(infos).is_ok());
}

TEST(Rendezvous, BadRankRejected) {
  const arfUniqueId id = fresh_id();
  const Status s = join(id, 5, 4, info(), 1.0).status();
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("rank 5 of world 4"), std::string::npos);
}

TEST(EnqueueOrder, VirtualRanksWaitForDeviceMatesOnly) {
  std::vector<RankInfo> infos(3, info());
  infos[2].device = 1;  // ranks 0 and 1 share device 0; rank 2 is alone on device 1
  LocalGroup group(infos);
  EXPECT_TRUE(group.shares_device(0));
  EXPECT_FALSE(group.shares_device(2));
  EXPECT_TRUE(group.wait_enqueue_turn(0, 0, 0.05).is_ok());  // call 0 never waits
  const Status late = group.wait_enqueue_turn(0, 1, 0.05);   // rank 1 has not enqueued call 0
  EXPECT_EQ(late.code(), arfTimeout);
  EXPECT_NE(late.message().find("for peer 1 (same device 0) in phase host_enqueue: it has not enqueued kernel 0"), std::string::npos)
      << late.message();
  group.mark_enqueued(1, 1);
  EXPECT_TRUE(group.wait_enqueue_turn(0, 1, 0.05).is_ok());
  EXPECT_TRUE(group.wait_enqueue_turn(2, 7, 0.05).is_ok());  // no mates: never waits
  // A waiter is released as soon as its mate catches up.
  auto waiter = std::async(std::launch::async, [&] { return group.wait_enqueue_turn(1, 3, 30.0); });
  group.mark_enqueued(0, 3);
  EXPECT_TRUE(waiter.get().is_ok());
}

TEST(EnqueueOrder, AFailedMateEndsTheWaitAtOnceWithItsReason) {
  std::vector<RankInfo> infos(2, info());
  LocalGroup group(infos);
  auto waiter = std::async(std::launch::async, [&] { return group.wait_enqueue_turn(0, 5, 30.0); });
  const auto start = std::chrono::steady_clock::now();
  group.mark_failed(1, invalid_argument("call 4 differs from rank 0's"));
  group.mark_failed(1, invalid_argument("a later reason"));  // the first one stays
  const Status s = waiter.get();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  EXPECT_EQ(s.code(), arfCommFailed);
  EXPECT_NE(s.message().find("peer 1 (same device 0) failed before enqueuing kernel 4: call 4 differs"),
            std::string::npos)
      << s.message();
}

TEST(UniqueId, DistinctAcrossCalls) {
  const arfUniqueId a = fresh_id();
  const arfUniqueId b = fresh_id();
  EXPECT_NE(std::string(a.internal, 64), std::string(b.internal, 64));
}

// The ipc transport names its rendezvous socket after bytes 0-15 of the id, so those bytes must
// be random, not just distinct: over 256 fresh ids every one of their 128 bits must be set in
// 25%-75% of the ids (a fair random bit leaves that range with probability ~1e-15), and no two
// ids may share them. A layout that put a clock, a pid or a counter there fails: a pid's bits
// and a clock's or counter's high bits never change between calls.
TEST(UniqueId, TheBytesThatKeyTheSocketAreRandom) {
  constexpr int kIds = 256;
  std::array<int, 128> ones{};
  std::set<std::string> keys;
  for (int i = 0; i < kIds; ++i) {
    const arfUniqueId id = fresh_id();
    keys.insert(std::string(id.internal, 16));
    for (int bit = 0; bit < 128; ++bit) {
      ones[bit] += (static_cast<uint8_t>(id.internal[bit / 8]) >> (bit % 8)) & 1;
    }
  }
  EXPECT_EQ(keys.size(), static_cast<size_t>(kIds));
  for (int bit = 0; bit < 128; ++bit) {
    EXPECT_GE(ones[bit], kIds / 4) << "bit " << bit << " of the socket key is nearly always 0";
    EXPECT_LE(ones[bit], 3 * kIds / 4) << "bit " << bit << " of the socket key is nearly always 1";
  }
  // The text form (arfUniqueIdToString) is those 16 bytes.
  arfUniqueId id;
  ASSERT_EQ(arfGetUniqueId(&id), arfSuccess);
  char text[ARF_UNIQUE_ID_STRING_BYTES];
  ASSERT_EQ(arfUniqueIdToString(&id, text), arfSuccess);
  arfUniqueId parsed;
  ASSERT_EQ(arfUniqueIdFromString(text, &parsed), arfSuccess);
  EXPECT_EQ(std::string(parsed.internal, 16), std::string(id.internal, 16));
}


// Group::exchange (group.h) on the local transport: every rank gets every contribution, rounds
// repeat, and a rank that never arrives is named after the bound.
TEST(Exchange, EveryRankGetsEveryContributionRoundAfterRound) {
  std::vector<RankInfo> infos(3, info());
  LocalGroup group(infos);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::future<Result<std::vector<std::string>>>> got;
    for (int r = 0; r < 3; ++r) {
      got.push_back(std::async(std::launch::async, [&group, r, round] {
        return group.exchange(r, std::to_string(round) + ":" + std::to_string(r), 10.0);
      }));
    }
    for (int r = 0; r < 3; ++r) {
      Result<std::vector<std::string>> all = got[r].get();
      ASSERT_TRUE(all.is_ok()) << all.status().message();
      ASSERT_EQ(all.value().size(), 3u);
      for (int q = 0; q < 3; ++q) {
        EXPECT_EQ(all.value()[q], std::to_string(round) + ":" + std::to_string(q));
      }
    }
  }
}

TEST(Exchange, AbsentRankTimesOutNamed) {
  std::vector<RankInfo> infos(3, info());
  LocalGroup group(infos);
  auto a = std::async(std::launch::async, [&] { return group.exchange(0, "x", 1.0); });
  const Result<std::vector<std::string>> b = group.exchange(2, "y", 0.2);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), arfTimeout);
  EXPECT_NE(b.status().message().find("for rank(s) 1"), std::string::npos) << b.status().message();
  EXPECT_FALSE(a.get().is_ok());
}

}  // namespace
}  // namespace arf::local
