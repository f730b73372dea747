// Host-thread model of oneshot_pull's barrier protocol (src/kernels/protocol.cuh, docs/protocol.md):
// N threads play N ranks; each call copies distinct data into its own buffer, meets its peers at a
// start barrier (epoch e+1), reads every peer's buffer, then meets them at an end barrier (e+2).
// Flags and epochs use the same rules as the kernels: per-rank monotonic epochs compared with
// epoch_reached, release stores and acquire loads. The model with the end barrier must never read
// another call's data; the model WITHOUT it (a fast rank's next call overwrites the buffer a slow
// peer is still reading) must be caught — a negative control
// proving that this style of check can see the bug at all. Zero-copy inputs (arfCommGetInputBuffer:
// the caller writes the buffer, in stream order before the call, instead of the kernel's copy-in)
// are this same sequence: the rank's write to its buffer precedes its start barrier either way, and
// its next write (the caller's or the next copy-in) follows its end barrier.
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
  return static_cast<uint32_t>(call) * 1000003u + static_cast<uint32_t>(rank) * 7919u +
         static_cast<uint32_t>(elem);
}

using model::HostPeerFlags;
using model::ModelResult;

// One CTA per rank.
ModelResult run_pull_model(int world, int calls, int max_elems, bool end_barrier, uint64_t seed) {
  std::vector<std::unique_ptr<std::atomic<uint32_t>[]>> buffers;
  for (int r = 0; r < world; ++r) {
    buffers.emplace_back(new std::atomic<uint32_t>[max_elems]);
    for (int i = 0; i < max_elems; ++i) buffers[r][i].store(0);
  }
  HostPeerFlags flags(world);
  std::vector<int> sizes(calls);
  std::mt19937_64 shapes(seed);
  for (int& n : sizes) n = 1 + static_cast<int>(shapes() % max_elems);  // same on every rank

  std::atomic<int> wrong{0}, timeouts{0};
  auto barrier = [&](int me, uint32_t epoch) { flags.barrier(me, epoch, &timeouts); };
  auto rank_main = [&](int me) {
    std::mt19937_64 rng(seed * 31 + me);
    uint32_t epoch = 0;
    for (int call = 0; call < calls; ++call) {
      const int n = sizes[call];
      for (int i = 0; i < n; ++i) buffers[me][i].store(payload(call, me, i), std::memory_order_relaxed);
      barrier(me, epoch + 1);
      // Rank (call % world) is the slow reader of this call: the skew the end barrier exists for.
      const bool slow = me == call % world;
      for (int src = 0; src < world; ++src) {
        for (int i = 0; i < n; ++i) {
          if (slow && i % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20));
          if (buffers[src][i].load(std::memory_order_relaxed) != payload(call, src, i)) wrong.fetch_add(1);
        }
      }
      if (end_barrier) barrier(me, epoch + 2);
      epoch += 2;
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  return {wrong.load(), timeouts.load()};
}

TEST(PullBarrierModel, WithEndBarrierNoCallReadsAnotherCallsData) {
  for (int world : {2, 4, 8}) {
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      const ModelResult r = run_pull_model(world, 40, 64, /*end_barrier=*/true, seed);
      EXPECT_EQ(r.wrong, 0) << "world " << world << " seed " << seed;
      EXPECT_EQ(r.timeouts, 0) << "world " << world << " seed " << seed;
    }
  }
}

// Negative control: without the end barrier a fast rank's next copy-in overwrites the buffer a slow
// peer is still reading. The check must see it (it is timing-dependent, so the model runs until it
// does, bounded).
TEST(PullBarrierModel, WithoutEndBarrierTheCorruptionIsDetected) {
  int detected_in_runs = 0;
  for (uint64_t seed = 1; seed <= 20 && detected_in_runs == 0; ++seed) {
    const ModelResult r = run_pull_model(4, 40, 64, /*end_barrier=*/false, seed);
    if (r.wrong > 0) detected_in_runs = static_cast<int>(seed);
  }
  EXPECT_GT(detected_in_runs, 0) << "20 runs without the end barrier and no stale read seen: the "
                                    "model cannot see the missing-end-barrier bug";
}

}  // namespace
}  // namespace arf::protocol
