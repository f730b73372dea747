// Host-thread model of twoshot's protocol (src/kernels/twoshot.cuh): scatter each part of the row to
// its owner, barrier (e+1), owner reduces its part in rank order and pushes the sum to every
// gather inbox, barrier (e+2), every rank reads its own gather inbox — and no end barrier. The
// kernel's argument that none is needed (a peer's next scatter push can only follow our arrival at
// the gather barrier, after we read our scatter inbox; its next gather push only follows the next
// call's first barrier) is checked under random skew with sizes that change every call. A
// negative control drops the gather barrier and must be caught.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "cpu/protocol_model.h"
#include "common/protocol_index.h"

namespace arf::protocol {
namespace {

uint32_t payload(int call, int rank, int elem) {
  return static_cast<uint32_t>(call) * 2654435761u + static_cast<uint32_t>(rank) * 40503u +
         static_cast<uint32_t>(elem) * 97u;
}

uint32_t expected_sum(int call, int world, int elem) {
  uint32_t s = 0;
  for (int r = 0; r < world; ++r) s += payload(call, r, elem);
  return s;
}

using Inbox = std::unique_ptr<std::atomic<uint32_t>[]>;

struct TwoshotModel {
  int world, max_elems;
  std::vector<Inbox> scatter, gather;  // scatter[owner][src * max_elems + j]
  model::HostPeerFlags flags;
  std::atomic<int> wrong{0}, timeouts{0};

  TwoshotModel(int w, int n) : world(w), max_elems(n), flags(w) {
    for (int r = 0; r < w; ++r) {
      scatter.emplace_back(new std::atomic<uint32_t>[static_cast<size_t>(w) * n]);
      gather.emplace_back(new std::atomic<uint32_t>[n]);
      for (int i = 0; i < w * n; ++i) scatter[r][i].store(0);
      for (int i = 0; i < n; ++i) gather[r][i].store(0);
    }
  }

  void barrier(int me, uint32_t epoch) { flags.barrier(me, epoch, &timeouts); }

  void call(int me, int call, int n, bool gather_barrier, uint32_t epoch, std::mt19937_64& rng) {
    const int part = twoshot_part_vecs(n, world);
    const bool slow = me == call % world;
    auto maybe_sleep = [&](int i) {
      if (slow && i % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20));
    };
    for (int i = 0; i < n; ++i) {  // scatter
      const int owner = twoshot_owner(i, part);
      scatter[owner][me * max_elems + (i - owner * part)].store(payload(call, me, i), std::memory_order_relaxed);
    }
    barrier(me, epoch + 1);
    for (int j = 0; j < part && me * part + j < n; ++j) {  // reduce our part, push everywhere
      maybe_sleep(j);
      const int i = me * part + j;
      uint32_t sum = 0;
      for (int src = 0; src < world; ++src) {
        const uint32_t v = scatter[me][src * max_elems + j].load(std::memory_order_relaxed);
        if (v != payload(call, src, i)) wrong.fetch_add(1);
        sum += v;
      }
      for (int dst = 0; dst < world; ++dst) gather[dst][i].store(sum, std::memory_order_relaxed);
    }
    if (gather_barrier) barrier(me, epoch + 2);
    for (int i = 0; i < n; ++i) {  // epilogue from our own gather inbox
      maybe_sleep(i);
      if (gather[me][i].load(std::memory_order_relaxed) != expected_sum(call, world, i)) wrong.fetch_add(1);
    }
  }
};

using model::ModelResult;

ModelResult run_twoshot_model(int world, int calls, int max_elems, bool gather_barrier, uint64_t seed) {
  TwoshotModel m(world, max_elems);
  std::vector<int> sizes(calls);
  std::mt19937_64 shapes(seed);
  for (int& n : sizes) n = 1 + static_cast<int>(shapes() % max_elems);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(seed * 131 + r);
      for (int c = 0; c < calls; ++c) m.call(r, c, sizes[c], gather_barrier, 2u * c, rng);
    });
  }
  for (auto& t : threads) t.join();
  return {m.wrong.load(), m.timeouts.load()};
}

TEST(TwoshotModel, NoEndBarrierNeeded) {
  for (int world : {2, 4, 8}) {
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      const ModelResult r = run_twoshot_model(world, 40, 64, /*gather_barrier=*/true, seed);
      EXPECT_EQ(r.wrong, 0) << "world " << world << " seed " << seed;
      EXPECT_EQ(r.timeouts, 0) << "world " << world << " seed " << seed;
    }
  }
}

TEST(TwoshotModel, WithoutTheGatherBarrierTheCorruptionIsDetected) {
  int detected = 0;
  for (uint64_t seed = 1; seed <= 20 && detected == 0; ++seed) {
    if (run_twoshot_model(4, 40, 64, /*gather_barrier=*/false, seed).wrong > 0) detected = 1;
  }
  EXPECT_EQ(detected, 1) << "dropping the gather barrier went unnoticed in 20 runs";
}

}  // namespace
}  // namespace arf::protocol
