// One persistent host thread per rank, as the local transport requires (a communicator is driven by
// one thread; peers spin on each other, so all ranks must issue their calls concurrently).
//
// Usage: pool.run([&](int rank) { ...; if (!pool.agree(rank, ok)) return; ... });
// agree() is the host barrier placed before every timed region. It also keeps the ranks' control
// flow identical: a rank that failed tells the others, and all of them skip the next collective
// together instead of leaving peers spinning on a call that will never come.
//
// Process mode (arfusion-bench under arfusion-run, one process per rank): the pool holds only this
// process's rank thread; agree() and spin_sync() go through the ProcessGroup, and share() hands
// each rank's entry of a per-rank result vector to every process, so the code above the pool reads
// every rank's results in both modes.
#pragma once

#include <atomic>
#include <barrier>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace arf {
class ProcessGroup;  // tools/common/process_group.h
}  // namespace arf

namespace arf::bench {

class RankPool {
 public:
  // Starts one thread per entry; thread r makes devices[r] its current CUDA device.
  explicit RankPool(const std::vector<int>& devices);
  // Process mode: one thread, for group->rank() on group->device(). The group outlives the pool.
  explicit RankPool(ProcessGroup* group);
  ~RankPool();
  RankPool(const RankPool&) = delete;
  RankPool& operator=(const RankPool&) = delete;

  int world() const { return world_; }
  // Whether this process drives `rank` (always, in thread mode).
  bool local(int rank) const { return group_ == nullptr || rank == first_local_; }
  // The lowest rank this process drives (0 in thread mode): whose communicator plans for reports.
  int first_local() const { return first_local_; }
  bool multi_process() const { return group_ != nullptr; }

  // Runs fn(rank) on every local rank thread concurrently and returns when all have returned. fn
  // must not throw (an exception aborts the process: a rank that vanished would leave its peers
  // spinning).
  void run(const std::function<void(int)>& fn);

  // Barrier across the rank threads, callable only inside run(). Returns true iff every rank
  // passed ok = true. Every rank must call it the same number of times.
  bool agree(int rank, bool ok);

  // A spinning barrier, for the instant before a timed region: agree() parks threads on a futex,
  // and waking eight of them one by one skews the ranks' launches by tens of microseconds, which
  // the peers then spend spinning inside the timed kernels. Call right after agree() returned
  // true, so every thread is awake and the spin is short. Callable only inside run().
  void spin_sync();

  // From the main thread between run()s: every process filled (*per_rank)[r] for its local ranks;
  // afterwards every entry holds rank r's value in every process. Nothing to do in thread mode.
  // Collective in process mode (same calls in the same order on every rank). On a failed host
  // channel the remote entries keep their values and channel_error() says why.
  void share(std::vector<std::string>* per_rank);
  void share(std::vector<double>* per_rank);
  void share(std::vector<int64_t>* per_rank);
  // The process channel's first failure, "" while healthy (always "" in thread mode).
  std::string channel_error() const;

 private:
  struct Completion {
    RankPool* pool;
    void operator()() noexcept;
  };
  void thread_main(int rank, int device);

  ProcessGroup* group_ = nullptr;
  int world_ = 0;
  int first_local_ = 0;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;  // workers wait for a new task or stop
  std::condition_variable done_;  // run() waits for the last worker
  const std::function<void(int)>* task_ = nullptr;
  unsigned long generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;

  std::vector<char> votes_;  // votes_[rank], read by the barrier completion
  bool all_ok_ = true;       // written by the completion, read after the barrier
  std::barrier<Completion> barrier_;

  std::atomic<int> spin_arrivals_{0};
  std::atomic<unsigned> spin_generation_{0};
};

}  // namespace arf::bench
