// One persistent host thread per rank, as the local transport requires (a communicator is driven by
// one thread; peers spin on each other, so all ranks must issue their calls concurrently).
//
// Usage: pool.run([&](int rank) { ...; if (!pool.agree(rank, ok)) return; ... });
// agree() is the host barrier placed before every timed region. It also keeps the ranks' control
// flow identical: a rank that failed tells the others, and all of them skip the next collective
// together instead of leaving peers spinning on a call that will never come.
#pragma once

#include <atomic>
#include <barrier>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace arf::bench {

class RankPool {
 public:
  // Starts one thread per entry; thread r makes devices[r] its current CUDA device.
  explicit RankPool(const std::vector<int>& devices);
  ~RankPool();
  RankPool(const RankPool&) = delete;
  RankPool& operator=(const RankPool&) = delete;

  int world() const { return static_cast<int>(threads_.size()); }

  // Runs fn(rank) on every rank thread concurrently and returns when all have returned. fn must not
  // throw (an exception aborts the process: a rank that vanished would leave its peers spinning).
  void run(const std::function<void(int)>& fn);

  // Barrier across the rank threads, callable only inside run(). Returns true iff every rank
  // passed ok = true. Every rank must call it the same number of times.
  bool agree(int rank, bool ok);

  // A spinning barrier, for the instant before a timed region: agree() parks threads on a futex,
  // and waking eight of them one by one skews the ranks' launches by tens of microseconds, which
  // the peers then spend spinning inside the timed kernels. Call right after agree() returned
  // true, so every thread is awake and the spin is short. Callable only inside run().
  void spin_sync();

 private:
  struct Completion {
    RankPool* pool;
    void operator()() noexcept;
  };
  void thread_main(int rank, int device);

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
