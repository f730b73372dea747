// Shared pieces of the host-thread protocol models (test_protocol_*_model.cc): the per-CTA peer
// barrier of protocol.cuh played by threads — each rank writes `epoch` into every peer's flag word
// for it (release) and waits, bounded, until every peer's word for it reaches `epoch` (acquire,
// compared with epoch_reached) — and the result of a model run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "common/protocol_index.h"

namespace arf::protocol::model {

struct ModelResult {
  int wrong = 0;     // elements read that belong to another call
  int timeouts = 0;  // bounded waits that expired
};

class HostPeerFlags {
 public:
  explicit HostPeerFlags(int world) : world_(world) {
    for (int r = 0; r < world; ++r) {
      flags_.emplace_back(new std::atomic<uint32_t>[world]);
      for (int s = 0; s < world; ++s) flags_[r][s].store(0);
    }
  }

  // Returns false (and counts it) if a peer did not arrive within 10 s.
  bool barrier(int me, uint32_t epoch, std::atomic<int>* timeouts) {
    for (int peer = 0; peer < world_; ++peer) {
      if (peer != me) flags_[peer][me].store(epoch, std::memory_order_release);
    }
    for (int peer = 0; peer < world_; ++peer) {
      if (peer == me) continue;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!epoch_reached(flags_[me][peer].load(std::memory_order_acquire), epoch)) {
        if (std::chrono::steady_clock::now() > deadline) {
          timeouts->fetch_add(1);
          return false;
        }
        std::this_thread::yield();
      }
    }
    return true;
  }

 private:
  int world_;
  std::vector<std::unique_ptr<std::atomic<uint32_t>[]>> flags_;  // [dst][src]
};

}  // namespace arf::protocol::model
