// Verifier threads (verifier.h).
#include "verifier.h"

#include <cuda_runtime_api.h>

#include "calls.h"

namespace arf::stress {

Verifier::Verifier(const VerifierConfig& config)
    : config_(config),
      depth_(config.resources->options().ring_depth),
      world_(config.resources->world()),
      pending_(static_cast<size_t>(depth_)),
      released_(new std::atomic<int64_t>[static_cast<size_t>(depth_)]) {
  // Slot s serves steps s, s + depth, ...: free for step s from the start.
  for (int s = 0; s < depth_; ++s) released_[s].store(s);
  for (int t = 0; t < config.threads; ++t) threads_.emplace_back(&Verifier::worker, this);
}

Verifier::~Verifier() { close(); }

bool Verifier::slot_free(int64_t step) const {
  return released_[step % depth_].load(std::memory_order_acquire) >= step;
}

void Verifier::submit(int rank, const StepSpec& step) {
  (void)rank;
  Pending& p = pending_[static_cast<size_t>(step.step % depth_)];
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.step != step.step) {  // first rank to submit this step
    p.step = step.step;
    p.arrived = 0;
    p.spec = step;
  }
  if (++p.arrived < world_) return;
  {
    std::lock_guard<std::mutex> qlock(queue_mu_);
    queue_.push_back({static_cast<int>(step.step % depth_), p.spec});
  }
  queue_cv_.notify_one();
}

void Verifier::worker() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closing and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    verify(job);
  }
}

void Verifier::verify(const Job& job) {
  const Resources& res = *config_.resources;
  const int64_t hidden = res.options().hidden;
  for (int r = 0; r < world_; ++r) {
    const cudaError_t err = cudaEventSynchronize(res.rank(r).host[job.slot].ready);
    if (err != cudaSuccess) {
      std::lock_guard<std::mutex> lock(totals_mu_);
      if (error_.empty()) {
        error_ = std::string("waiting for rank ") + std::to_string(r) + "'s outputs: " +
                 cudaGetErrorString(err);
      }
      return;  // the slot stays taken: the soak stops on the error anyway
    }
  }
  Totals local;
  local.steps = 1;
  local.graph_replays = job.spec.graph >= 0 ? 1 : 0;
  const std::vector<int64_t> offsets = step_output_offsets(job.spec, hidden, nullptr);
  std::vector<RankOutputs> outputs(static_cast<size_t>(world_));
  for (size_t i = 0; i < job.spec.calls.size(); ++i) {
    const CallSpec& call = job.spec.calls[i];
    const int64_t n = call.tokens * hidden;
    for (int r = 0; r < world_; ++r) {
      const uint16_t* base = res.rank(r).host[job.slot].data + offsets[i];
      outputs[r] = call.pattern == arfPatternAllReduce ? RankOutputs{base, nullptr, nullptr}
                                                       : RankOutputs{nullptr, base, base + n};
    }
    const CallCheck check =
        check_call(call, (*config_.sets)[static_cast<size_t>(call.set)], hidden, config_.dtype,
                   outputs);
    local.add_call(call, check, job.spec.step, job.spec.graph);
  }
  bool first_wrong = false;
  {
    std::lock_guard<std::mutex> lock(totals_mu_);
    totals_.merge(local);
    if (local.bad_calls > 0 && !reported_wrong_) first_wrong = reported_wrong_ = true;
  }
  if (first_wrong && config_.on_first_wrong) config_.on_first_wrong();
  steps_verified_.fetch_add(1);
  released_[job.slot].store(job.spec.step + depth_, std::memory_order_release);
}

uint64_t Verifier::close() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    closing_ = true;
  }
  queue_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  uint64_t partial = 0;
  for (Pending& p : pending_) {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.step >= 0 && p.arrived > 0 && p.arrived < world_) ++partial;
  }
  return partial;
}

Totals Verifier::totals() const {
  std::lock_guard<std::mutex> lock(totals_mu_);
  return totals_;
}

std::string Verifier::error() const {
  std::lock_guard<std::mutex> lock(totals_mu_);
  return error_;
}

}  // namespace arf::stress
