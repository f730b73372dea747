// Helpers of the fault and lifecycle tests (test_ipc_faults.cc):
//  - SharedBoard: a page of shared memory the parent maps before it forks, so that the ranks'
//    processes can meet at points the library does not give them (a barrier before measuring
//    device memory, "the peers have launched: die now", the victim's pid). Every wait is bounded
//    and gives up at once when another rank raised the board's abort word.
//  - ResourceSnapshot: what a process holds that a leaking communicator would grow: open file
//    descriptors (/proc/self/fd, with their targets for the failure message), threads
//    (/proc/self/task), memory mappings (/proc/self/maps), resident host memory, and free device
//    memory (cudaMemGetInfo after cudaDeviceSynchronize).
//  - env_cycles: ARF_LIFECYCLE_CYCLES.
// The board and the environment helpers make no CUDA call (the parent uses them); snapshot() is for
// children only (it calls CUDA).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ipc/ipc_test_util.h"

namespace arf::ipc_test {

// ---- the board ---------------------------------------------------------------------------------

class SharedBoard {
 public:
  static constexpr int kWords = 256;

  // Parent only, before run_processes: an anonymous MAP_SHARED mapping, zeroed, inherited by
  // every child forked afterwards. nullptr (after ADD_FAILURE) when mmap fails.
  static std::unique_ptr<SharedBoard> create();
  ~SharedBoard();
  SharedBoard(const SharedBoard&) = delete;
  SharedBoard& operator=(const SharedBoard&) = delete;

  std::atomic<int64_t>& word(int index) const;

  // One-shot barrier on word `index` (every barrier point of a test has its own word): counts this
  // process in and waits until `parties` have arrived. False (after ctx.fail naming `what`) on
  // timeout or when the abort word is raised.
  bool arrive_and_wait(RankContext& ctx, int index, int parties, double timeout_seconds,
                       const std::string& what) const;
  // Waits until word(index) >= value; false (after ctx.fail) on timeout or abort.
  bool wait_at_least(RankContext& ctx, int index, int64_t value, double timeout_seconds,
                     const std::string& what) const;

  // A rank that gives up raises the abort word so that the others stop waiting for it at once
  // (they fail "rank R gave up" instead of each waiting out a bound).
  void raise_abort(int rank) const;
  bool aborted() const;

 private:
  struct Memory;
  explicit SharedBoard(Memory* memory) : memory_(memory) {}
  bool wait(RankContext& ctx, int index, int64_t value, double timeout_seconds,
            const std::string& what) const;

  Memory* memory_ = nullptr;
};

// ---- resources of this process ---------------------------------------------------------------

struct ResourceSnapshot {
  std::vector<std::string> fds;  // "N -> target", one per open descriptor except the listing's own
  int threads = 0;
  int maps = 0;           // lines of /proc/self/maps
  int64_t rss_kib = 0;    // VmRSS
  size_t device_free = 0;   // cudaMemGetInfo of the current device (0 when !with_device)
  size_t device_total = 0;

  std::string summary() const;  // "fds 23, threads 7, maps 612, rss 210 MiB, device free 139.1 GiB"
};

// Children only. with_device: cudaDeviceSynchronize, then cudaMemGetInfo of the current device
// (false after ctx.fail when either fails). The host figures need no CUDA.
bool snapshot(RankContext& ctx, bool with_device, ResourceSnapshot* out);

// Descriptors open in `after` but not in `before` (and the other way round), one per line.
std::string fd_difference(const ResourceSnapshot& before, const ResourceSnapshot& after);

// "12.5 MiB" / "-3.0 MiB".
std::string fmt_mib(int64_t bytes);

// Whether process `pid` is gone (reaped: kill(pid, 0) fails with ESRCH), waiting at most
// timeout_seconds.
bool wait_until_gone(pid_t pid, double timeout_seconds);

// ---- environment -------------------------------------------------------------------------------

// ARF_LIFECYCLE_CYCLES (default `fallback`), raised to `minimum` (printed when it is).
int env_cycles(int fallback, int minimum);

}  // namespace arf::ipc_test
