#include "step_pipeline.h"

#include <utility>

namespace arf::stress {

StepPipeline::StepPipeline(int depth, int world)
    : depth_(depth),
      world_(world),
      pending_(static_cast<size_t>(depth)),
      released_(new std::atomic<int64_t>[static_cast<size_t>(depth)]) {
  // Slot s serves steps s, s + depth, ...: free for step s from the start.
  for (int s = 0; s < depth_; ++s) released_[s].store(s);
}

bool StepPipeline::slot_free(int64_t step) const {
  return released_[step % depth_].load(std::memory_order_acquire) >= step;
}

std::optional<StepPipeline::Job> StepPipeline::arrive(const StepSpec& step) {
  const int slot = static_cast<int>(step.step % depth_);
  Pending& p = pending_[static_cast<size_t>(slot)];
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.step != step.step) {  // first rank to submit this step
    p.step = step.step;
    p.arrived = 0;
    p.spec = step;
  }
  if (++p.arrived < world_) return std::nullopt;
  return Job{slot, p.spec};
}

void StepPipeline::push(Job job) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back(std::move(job));
  }
  queue_cv_.notify_one();
}

void StepPipeline::run_worker(const std::function<void(const Job&)>& check) {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closing and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    check(job);
  }
}

std::deque<StepPipeline::Job> StepPipeline::take_queued() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  std::deque<Job> jobs;
  jobs.swap(queue_);
  return jobs;
}

void StepPipeline::release(const Job& job) {
  steps_verified_.fetch_add(1);
  released_[job.slot].store(job.spec.step + depth_, std::memory_order_release);
}

void StepPipeline::close_queue() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    closing_ = true;
  }
  queue_cv_.notify_all();
}

uint64_t StepPipeline::partial_steps() {
  uint64_t partial = 0;
  for (Pending& p : pending_) {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.step >= 0 && p.arrived > 0 && p.arrived < world_) ++partial;
  }
  return partial;
}

}  // namespace arf::stress
