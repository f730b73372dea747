// Helpers of the fault and lifecycle tests (test_ipc_kill.cc, test_ipc_lifecycle.cc,
// test_ipc_two_comms.cc):
//  - SharedBoard: a page of shared memory the parent maps before it forks, so that the ranks'
//    processes can meet at points the library does not give them (a barrier before measuring
//    device memory, "the peers have launched: die now", the victim's pid). Every wait is bounded
//    and gives up at once when another rank raised the board's abort word.
//  - ResourceSnapshot: what a process holds that a leaking communicator would grow: open file
//    descriptors (/proc/self/fd, with their targets for the failure message), threads
//    (/proc/self/task), memory mappings (/proc/self/maps), resident host memory, and free device
//    memory (cudaMemGetInfo after cudaDeviceSynchronize).
//  - Batch: the calls of one rank, prepared, enqueued and checked in steps (the kill test runs a
//    batch in parts around the fault).
//  - env_cycles (ARF_LIFECYCLE_CYCLES), negative_control (ARF_FAULTS_NEGATIVE_CONTROL),
//    default_environment (ARF_NCCL).
// The board and the environment helpers make no CUDA call (the parent uses them); snapshot(),
// settled_snapshot() and the batch helpers are for children only (they call CUDA).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ipc/ipc_rank.h"
#include "ipc/ipc_test_util.h"

namespace arf::ipc_test {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline constexpr int64_t kMiB = int64_t{1} << 20;

// ---- the board ---------------------------------------------------------------------------------

// Board waits: long enough for a slow init of four processes on one GPU, short enough that a rank
// that never comes fails the test well inside the parent's deadline.
inline constexpr double kBoardSeconds = 45.0;

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

// Free device memory once it stops changing (a dead process's context is torn down by the
// driver, not necessarily before kill(pid, 0) reports it gone): two equal readings 100 ms apart,
// at most 5 s. The last reading when it never settles (noted).
bool settled_snapshot(RankContext& ctx, ResourceSnapshot* out);

// Descriptors open in `after` but not in `before` (and the other way round), one per line.
std::string fd_difference(const ResourceSnapshot& before, const ResourceSnapshot& after);

// "12.5 MiB" / "-3.0 MiB".
std::string fmt_mib(int64_t bytes);

// Whether process `pid` is gone (reaped: kill(pid, 0) fails with ESRCH), waiting at most
// timeout_seconds.
bool wait_until_gone(pid_t pid, double timeout_seconds);

// ---- batches of calls (children only) --------------------------------------------------------

struct Batch {
  std::vector<CallSpec> specs;
  std::vector<CallData> data;
  std::vector<std::unique_ptr<CallBuffers>> buffers;
};

// Data of every call from mix_seed(seed, c) for ctx's world, buffers allocated on the current
// device and uploaded on `stream` (then synchronized). Plans are checked and published under
// "<prefix>call <c> plan" when `comm` is given.
bool prepare_batch(RankContext& ctx, arfComm_t comm, cudaStream_t stream, uint64_t seed,
                   const std::string& prefix, Batch* b);

// Calls [first, last) back to back, each followed by the overwrite of its inputs. False (after
// ctx.fail) at the first refused launch.
bool enqueue(RankContext& ctx, arfComm_t comm, cudaStream_t stream, const Batch& b, size_t first,
             size_t last);

// Downloads calls [first, last) (synchronizing `stream`), checks each against the reference
// (failures on `checker`) and publishes its hashes through `reporter` as "<prefix>call <c> ...".
void check_batch(RankContext& checker, const RankContext& reporter, cudaStream_t stream,
                 const Batch& b, size_t first, size_t last, const std::string& prefix);

CallSpec spec_of(arfPattern_t pattern, arfAlgorithm_t algorithm, int64_t tokens,
                 int64_t hidden = static_cast<int64_t>(kMaxHidden));

// ---- environment -------------------------------------------------------------------------------

// ARF_LIFECYCLE_CYCLES (default `fallback`), raised to `minimum` (printed when it is).
int env_cycles(int fallback, int minimum);

// ARF_FAULTS_NEGATIVE_CONTROL=1: the tests leak every communicator instead of destroying it (the
// failed one in IpcFault, every cycle's in the lifecycle tests), so that their resource checks
// are seen to FAIL (descriptors, mappings, device memory). A run with it set must fail.
bool negative_control();

// Children, before the library first looks (nccl_api.cc): ARF_NCCL=0 unless ARF_NCCL is set, so
// that a two-GPU run tests the ipc transport's own resources and builds no NCCL communicator.
void default_environment();

}  // namespace arf::ipc_test
