// The protocol's index arithmetic (src/common/protocol_index.h), and a host-thread model of the
// Lamport protocol driven with random interleavings: N threads play N ranks, each pushing into its
// peers' buffers, lazily clearing, polling for the -0.0 sentinel and rotating buffers exactly as the
// kernel does, with token counts that change every call. Every value read must be the one its
// producer pushed for that call.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/protocol_index.h"

namespace arf::protocol {
namespace {

TEST(ProtocolIndex, LamportRotationVisitsAllThreeBuffersAndClearsThePreviousOne) {
  uint32_t b = 0;
  std::set<uint32_t> seen;
  for (int call = 0; call < 9; ++call) {
    seen.insert(b);
    const uint32_t next = lamport_next_buffer(b);
    EXPECT_NE(next, b);
    EXPECT_EQ(lamport_clear_buffer(next), b) << "call k+1 must clear the buffer call k read";
    EXPECT_NE(lamport_clear_buffer(b), b);
    EXPECT_NE(lamport_clear_buffer(b), next) << "the buffer a peer one call ahead writes is never cleared";
    b = next;
  }
  EXPECT_EQ(seen.size(), 3u);
}

TEST(ProtocolIndex, EpochComparisonSurvivesWrap) {
  EXPECT_TRUE(epoch_reached(5, 5));
  EXPECT_TRUE(epoch_reached(6, 5));
  EXPECT_FALSE(epoch_reached(4, 5));
  EXPECT_TRUE(epoch_reached(0u, 0xffffffffu)) << "0 follows 2^32-1";
  EXPECT_TRUE(epoch_reached(1u, 0xffffffffu));
  EXPECT_FALSE(epoch_reached(0xffffffffu, 0u));
}

TEST(ProtocolIndex, LamportOffsetsAre64BitAndDisjoint) {
  const int64_t slot = int64_t{1} << 28;  // 2^28 elements: 32-bit offsets would overflow
  EXPECT_EQ(lamport_slot_offset(2, 7, 8, slot), (2 * 8 + 7) * slot);
  EXPECT_GT(lamport_slot_offset(2, 7, 8, slot), int64_t{1} << 32);
  for (int world : {2, 4, 8}) {
    std::set<int64_t> starts;
    for (uint32_t b = 0; b < 3; ++b)
      for (int r = 0; r < world; ++r) starts.insert(lamport_slot_offset(b, r, world, 1000));
    EXPECT_EQ(starts.size(), static_cast<size_t>(3 * world));
  }
}

TEST(ProtocolIndex, FlagIndexIsUniquePerCtaAndSource) {
  std::set<int> seen;
  for (int cta = 0; cta < kMaxCtas; ++cta)
    for (int src = 0; src < kMaxRanks; ++src) seen.insert(flag_index(cta, src));
  EXPECT_EQ(seen.size(), static_cast<size_t>(kMaxCtas * kMaxRanks));
  EXPECT_EQ(*seen.rbegin(), kMaxCtas * kMaxRanks - 1);
}

TEST(ProtocolIndex, TwoshotPartsCoverEveryVectorOnce) {
  for (int world : {1, 2, 4, 8}) {
    for (int row_vecs : {1, 2, 3, 7, 256, 360, 640, 896, 1024, 2048}) {
      const int part = twoshot_part_vecs(row_vecs, world);
      std::vector<int> owner_count(world, 0);
      std::set<int64_t> offsets;
      for (int v = 0; v < row_vecs; ++v) {
        const int owner = twoshot_owner(v, part);
        ASSERT_GE(owner, 0);
        ASSERT_LT(owner, world) << "row_vecs " << row_vecs << " world " << world;
        ++owner_count[owner];
        offsets.insert(twoshot_scatter_offset(3, v - owner * part, part) + owner * 1'000'000);
      }
      EXPECT_EQ(offsets.size(), static_cast<size_t>(row_vecs));
      for (int o = 0; o < world; ++o) EXPECT_LE(owner_count[o], part);
    }
  }
}

// ---- host model of the Lamport protocol ------------------------------------------------------

constexpr uint16_t kSentinel = 0x8000;

uint16_t payload(int call, int rank, int elem) {
  // Never the sentinel: the kernel canonicalises -0.0 before pushing.
  const uint16_t v = static_cast<uint16_t>((call * 131 + rank * 17 + elem * 7) & 0x7fff);
  return v;
}

struct ModelRank {
  // [buffer][src slot][elem]
  std::vector<std::atomic<uint16_t>> slots;
  uint32_t buffer = 0;
  int64_t clear_elems[3] = {0, 0, 0};
};

void run_lamport_model(int world, int calls, int max_elems, uint64_t seed) {
  std::vector<ModelRank> ranks(world);
  const int64_t slot_elems = max_elems;
  for (auto& r : ranks) {
    r.slots = std::vector<std::atomic<uint16_t>>(3 * world * slot_elems);
    for (auto& e : r.slots) e.store(kSentinel);
  }
  std::vector<int> sizes(calls);
  std::mt19937_64 shape_rng(seed);
  for (int& s : sizes) s = 1 + static_cast<int>(shape_rng() % max_elems);  // same sequence on all ranks

  std::atomic<int> errors{0};
  auto rank_main = [&](int me) {
    std::mt19937_64 rng(seed * 31 + me);
    auto jitter = [&] {
      if (rng() % 8 == 0) std::this_thread::yield();
      if (rng() % 512 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
    };
    ModelRank& self = ranks[me];
    for (int call = 0; call < calls; ++call) {
      const uint32_t b = self.buffer;
      const uint32_t clear_b = lamport_clear_buffer(b);
      const int n = sizes[call];
      for (int peer = 0; peer < world; ++peer) {  // push
        if (peer == me) continue;
        for (int i = 0; i < n; ++i) {
          ranks[peer].slots[lamport_slot_offset(b, me, world, slot_elems) + i].store(payload(call, me, i));
          jitter();
        }
      }
      for (int src = 0; src < world; ++src) {  // lazy clear of the previous call's buffer
        if (src == me) continue;
        for (int64_t i = 0; i < self.clear_elems[clear_b]; ++i) {
          self.slots[lamport_slot_offset(clear_b, src, world, slot_elems) + i].store(kSentinel);
        }
      }
      for (int src = 0; src < world; ++src) {  // poll + check
        if (src == me) continue;
        for (int i = 0; i < n; ++i) {
          auto& cell = self.slots[lamport_slot_offset(b, src, world, slot_elems) + i];
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          uint16_t v;
          while ((v = cell.load()) == kSentinel) {
            if (std::chrono::steady_clock::now() > deadline) {
              errors.fetch_add(1);
              return;
            }
            std::this_thread::yield();
          }
          if (v != payload(call, src, i)) errors.fetch_add(1);
          jitter();
        }
      }
      self.clear_elems[b] = n;  // arrive: record use, rotate
      self.buffer = lamport_next_buffer(b);
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0) << "world " << world << " seed " << seed;
}

TEST(LamportModel, RandomInterleavingsNeverReadAnotherCallsData) {
  for (int world : {2, 4, 8}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) run_lamport_model(world, 60, 48, seed);
  }
}

}  // namespace
}  // namespace arf::protocol
