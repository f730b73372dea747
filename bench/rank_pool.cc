// Persistent rank threads with a generation-counted task hand-off and a voting barrier.
#include "rank_pool.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "process_group.h"

namespace arf::bench {

RankPool::RankPool(const std::vector<int>& devices)
    : world_(static_cast<int>(devices.size())),
      votes_(devices.size(), 1),
      barrier_(static_cast<std::ptrdiff_t>(devices.size()), Completion{this}) {
  threads_.reserve(devices.size());
  for (size_t r = 0; r < devices.size(); ++r) {
    threads_.emplace_back(&RankPool::thread_main, this, static_cast<int>(r), devices[r]);
  }
}

RankPool::RankPool(ProcessGroup* group)
    : group_(group),
      world_(group->world()),
      first_local_(group->rank()),
      votes_(1, 1),
      barrier_(1, Completion{this}) {
  threads_.emplace_back(&RankPool::thread_main, this, group->rank(), group->device());
}

RankPool::~RankPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankPool::run(const std::function<void(int)>& fn) {
  std::unique_lock<std::mutex> lock(mutex_);
  task_ = &fn;
  pending_ = static_cast<int>(threads_.size());
  ++generation_;
  wake_.notify_all();
  done_.wait(lock, [&] { return pending_ == 0; });
  task_ = nullptr;
}

bool RankPool::agree(int rank, bool ok) {
  if (group_ != nullptr) return group_->vote(ok);
  votes_[rank] = ok ? 1 : 0;
  barrier_.arrive_and_wait();
  // all_ok_ is stable until every rank arrives at the next barrier, which cannot happen before
  // this rank (one of the arrivals) has read it.
  return all_ok_;
}

void RankPool::spin_sync() {
  if (group_ != nullptr) {
    // A socket round trip through rank 0: the processes leave it tens of microseconds apart (as
    // nccl-tests' MPI barrier does); the first kernels absorb that skew by waiting for peers.
    group_->barrier();
    return;
  }
  // The generation is read before arriving, and cannot advance before this thread arrives.
  const unsigned generation = spin_generation_.load(std::memory_order_acquire);
  if (spin_arrivals_.fetch_add(1, std::memory_order_acq_rel) + 1 == world()) {
    spin_arrivals_.store(0, std::memory_order_relaxed);
    spin_generation_.fetch_add(1, std::memory_order_release);  // publishes the reset too
    return;
  }
  constexpr int kSpinsBeforeYield = 1 << 16;
  for (int spins = 0; spin_generation_.load(std::memory_order_acquire) == generation; ++spins) {
    // More ranks than free cores: yield so the last arrival gets to run.
    if (spins > kSpinsBeforeYield) std::this_thread::yield();
  }
}

void RankPool::share(std::vector<std::string>* per_rank) {
  if (group_ == nullptr) return;
  const std::vector<std::string> all = group_->all_gather((*per_rank)[first_local_]);
  if (!group_->error().empty()) return;
  *per_rank = all;
}

namespace {

template <typename T>
void share_values(RankPool* pool, std::vector<T>* per_rank) {
  std::vector<std::string> bytes(per_rank->size());
  std::string& mine = bytes[pool->first_local()];
  mine.resize(sizeof(T));
  std::memcpy(mine.data(), &(*per_rank)[pool->first_local()], sizeof(T));
  pool->share(&bytes);
  if (!pool->channel_error().empty()) return;
  for (size_t r = 0; r < bytes.size(); ++r) {
    if (bytes[r].size() == sizeof(T)) std::memcpy(&(*per_rank)[r], bytes[r].data(), sizeof(T));
  }
}

}  // namespace

void RankPool::share(std::vector<double>* per_rank) {
  if (group_ != nullptr) share_values(this, per_rank);
}

void RankPool::share(std::vector<int64_t>* per_rank) {
  if (group_ != nullptr) share_values(this, per_rank);
}

std::string RankPool::channel_error() const { return group_ != nullptr ? group_->error() : ""; }

void RankPool::Completion::operator()() noexcept {
  bool ok = true;
  for (char v : pool->votes_) ok = ok && v;
  pool->all_ok_ = ok;
}

void RankPool::thread_main(int rank, int device) {
  // The CUDA current device is per thread; set it once so every call of this rank lands on it.
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "arfusion-bench: rank %d: cudaSetDevice(%d): %s\n", rank, device,
                 cudaGetErrorString(err));
    std::abort();
  }
  unsigned long seen = 0;
  for (;;) {
    const std::function<void(int)>* task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
    }
    try {
      (*task)(rank);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "arfusion-bench: rank %d: %s\n", rank, e.what());
      std::abort();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace arf::bench
