// The `local` transport: all ranks live in this process, one host thread per rank, and find each
// other through a process-global registry keyed by arfUniqueId. Devices may repeat (virtual ranks on
// one GPU), in which case "peer" buffers are simply other allocations on the same device.
//
// Lifetime: ranks join (blocking, bounded) and receive a shared LocalGroup; from then on the group
// owns every rank's workspace. Each rank leaves once (arfCommDestroy); the LAST rank to leave frees
// all workspaces, because until then a peer's kernel may still read or write them. Leaving never
// waits for other ranks, so one thread may destroy all communicators in sequence.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "arfusion/arfusion.h"
#include "base/status.h"
#include "common/kernel_params.h"
#include "transport/call_signature.h"
#include "transport/group.h"
#include "transport/workspace.h"

namespace arf::local {

using RankInfo = arf::RankInfo;

class LocalGroup final : public Group {
 public:
  explicit LocalGroup(std::vector<RankInfo> infos);
  // Every rank's info, indexed by rank; immutable once the group is formed.
  const std::vector<RankInfo>& infos() const override { return infos_; }

  // This rank is done with the group. Preconditions: called once per rank, after the rank's device
  // work has completed (the communicator synchronizes its device first). The last caller frees
  // every rank's workspace and returns the first error of doing so. Thread-safe, never blocks.
  Status leave(int rank) override;

  // Enqueue order of ranks that share a device (virtual ranks). A stream is bound to one of a
  // few hardware queues, so two ranks' streams can share a FIFO, whose head blocks everything
  // behind it while it waits for an earlier kernel of its own stream. If anything of rank A that
  // is stream-ordered behind A's spinning kernel k — A's kernel k+1, or any kernel the caller
  // enqueues after A's call k — enters a shared FIFO before B's kernel k, it blocks the FIFO
  // while A's k spins until B's k runs, which sits behind it: a deadlock broken only by the
  // timeout (reproduced on H200 with 8 virtual ranks issuing back-to-back calls). So (a) before
  // enqueuing its kernel `call` (0-based, counted per kernel: gate, collective, epilogue), a rank
  // waits until every other rank on its device has enqueued kernels 0..call-1, and (b) a call
  // returns only once every device mate has enqueued all of the call's kernels
  // (Communicator::launch_checked): the FIFO order is then the same for every rank. Ranks alone
  // on their device never wait. Bounded by timeout_seconds (Timeout naming the late rank); a mate
  // that failed (mark_failed) ends the wait at once with its reason. Each virtual rank must
  // therefore be driven from its own host thread. Calls captured into a graph are not counted:
  // the caller must launch virtual ranks' graphs in the same discipline.
  bool shares_device(int rank) const override { return !device_mates_[rank].empty(); }
  uint32_t device_mates_mask(int rank) const override {
    uint32_t mask = 0;
    for (int mate : device_mates_[rank]) mask |= 1u << mate;
    return mask;
  }
  Status wait_enqueue_turn(int rank, uint64_t call, double timeout_seconds) const override;
  // Records that `rank` has enqueued `calls` kernels. Thread-safe, never blocks.
  void mark_enqueued(int rank, uint64_t calls) override;
  void mark_failed(int rank, const Status& why) override;
  Status peer_failure(int rank) const override;

  Result<std::vector<std::string>> exchange(int rank, const std::string& mine,
                                            double timeout_seconds) override;

  // Every rank's call i must be the same (call_signature.h). Thread-safe; calls with no tokens are
  // not recorded (they are no-ops).
  Status record_call(int rank, uint64_t call_index, const CallEntry& entry) override {
    return calls_.record(rank, call_index, entry);
  }

 private:
  std::mutex mu_;
  std::vector<RankInfo> infos_;
  std::vector<bool> left_;
  int live_ranks_ = 0;
  std::vector<std::vector<int>> device_mates_;        // per rank: the other ranks on its device
  CallSignatureLog calls_;
  std::unique_ptr<std::atomic<uint64_t>[]> enqueued_;  // per rank: kernels enqueued so far
  std::unique_ptr<std::atomic<bool>[]> failed_;        // per rank: its communicator failed
  mutable std::mutex failure_mu_;
  std::vector<std::string> failure_;                    // per rank: why (failure_mu_)
  // exchange: one round at a time; a round completes when every rank arrived.
  std::condition_variable exchange_cv_;
  std::vector<bool> exchange_arrived_;
  std::vector<std::string> exchange_pending_;  // this round's contributions
  std::vector<std::string> exchange_result_;   // the last completed round's
  uint64_t exchange_generation_ = 0;
};

// Collective over `world` ranks with the same id: blocks until all have joined, then enables peer
// access from this rank's device to every other rank's device, then waits until every rank has
// done so. All ranks return the same outcome:
//  - OK and the formed group (which now owns `info.workspace`);
//  - Timeout after timeout_seconds, naming the ranks that never arrived;
//  - InvalidArgument for a world-size mismatch or a duplicate rank (to the offending caller), or
//    for capacity that differs between ranks (to all);
//  - Unsupported when a device pair cannot access each other (cudaDeviceCanAccessPeer);
//  - the error a rank reported through abandon().
// On any failure the caller still owns its workspace and must free it. Sets the current device.
Result<std::shared_ptr<LocalGroup>> join(const arfUniqueId& id, int rank, int world,
                                         const RankInfo& info, double timeout_seconds);

// A rank that fails before it can join (e.g. its allocation failed) reports it here, so the ranks
// already waiting fail at once with `why` instead of waiting out the timeout. Never blocks.
void abandon(const arfUniqueId& id, int rank, int world, const Status& why);

// A fresh random id: all 64 bytes from getrandom(2). The ipc transport names its rendezvous
// socket after the first 16 (ipc_bootstrap.h), so those must be unpredictable: 128 random bits,
// never a clock, a pid or a counter another local user could guess and take first. Two ids
// collide with probability 2^-512 (the local transport keys on all 64 bytes). Internal when the
// kernel's random source fails.
Result<arfUniqueId> new_unique_id();

}  // namespace arf::local
