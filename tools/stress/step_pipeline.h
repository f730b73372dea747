// The step bookkeeping both verifiers share (verifier.h on host threads, gpu_verifier.h on the
// GPU): every rank submits each step after recording its output slot's event; the last rank's
// submission turns the step into a job; worker threads take jobs in submission order; a checked
// step frees its output slot (step % depth) for the step `depth` later. A rank thread waits for
// its slot to be free before reusing it, so checking that falls behind slows the soak down
// (back-pressure) instead of letting checks be skipped.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "schedule.h"

namespace arf::stress {

class StepPipeline {
 public:
  struct Job {
    int slot = 0;
    StepSpec spec;
  };

  StepPipeline(int depth, int world);
  StepPipeline(const StepPipeline&) = delete;
  StepPipeline& operator=(const StepPipeline&) = delete;

  // Rank threads. True once the slot of `step` is free (its previous step was checked).
  bool slot_free(int64_t step) const;
  // Rank threads: the job of `step` when this is the world-th submission of it, else nothing.
  std::optional<Job> arrive(const StepSpec& step);
  // Hands a job to the workers (in the order of push).
  void push(Job job);
  // Worker threads: runs `check` on each job until close_queue() was called and the queue drained.
  void run_worker(const std::function<void(const Job&)>& check);
  // After a job's check: its slot serves step + depth next; the step counts as verified.
  void release(const Job& job);
  // Any thread: removes and returns every queued job, in push order, without waiting (for an owner
  // that checks jobs at points of its choosing instead of in worker threads).
  std::deque<Job> take_queued();
  // Main thread: lets the workers return once the queue is drained (the owner joins them).
  void close_queue();
  // After the workers joined: steps only some ranks submitted (left unchecked after a failure).
  uint64_t partial_steps();
  uint64_t steps_verified() const { return steps_verified_.load(); }

 private:
  struct Pending {
    std::mutex mu;
    int64_t step = -1;
    int arrived = 0;
    StepSpec spec;
  };

  int depth_;
  int world_;
  std::vector<Pending> pending_;                      // [slot]
  std::unique_ptr<std::atomic<int64_t>[]> released_;  // [slot]: steps < value may use the slot
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Job> queue_;
  bool closing_ = false;
  std::atomic<uint64_t> steps_verified_{0};
};

}  // namespace arf::stress
