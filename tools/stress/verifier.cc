// Verifier threads (verifier.h).
#include "verifier.h"

#include <cuda_runtime_api.h>

#include <optional>
#include <utility>

#include "calls.h"
#include "cross_process.h"
#include "output_hash.h"

namespace arf::stress {

Verifier::Verifier(const VerifierConfig& config)
    : config_(config),
      world_(config.resources->count()),
      pipeline_(config.resources->options().ring_depth, world_) {
  for (int t = 0; t < config.threads; ++t) {
    threads_.emplace_back([this] { pipeline_.run_worker([this](const auto& job) { verify(job); }); });
  }
}

Verifier::~Verifier() { close(); }

bool Verifier::slot_free(int64_t step) const { return pipeline_.slot_free(step); }

void Verifier::submit(int rank, const StepSpec& step) {
  (void)rank;
  if (std::optional<StepPipeline::Job> job = pipeline_.arrive(step)) pipeline_.push(std::move(*job));
}

void Verifier::verify(const StepPipeline::Job& job) {
  const Resources& res = *config_.resources;
  const int64_t hidden = res.options().hidden;
  for (int r = 0; r < world_; ++r) {
    const cudaError_t err = cudaEventSynchronize(res.held(r).host[job.slot].ready);
    if (err != cudaSuccess) {
      std::lock_guard<std::mutex> lock(totals_mu_);
      if (error_.empty()) {
        error_ = std::string("waiting for rank ") + std::to_string(res.held(r).rank) +
                 "'s outputs: " +
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
  uint64_t step_hash = kOutputHashSeed;  // over every output word of the step (output_hash.h)
  for (size_t i = 0; i < job.spec.calls.size(); ++i) {
    const CallSpec& call = job.spec.calls[i];
    const int64_t n = call.tokens * hidden;
    for (int r = 0; r < world_; ++r) {
      const uint16_t* base = res.held(r).host[job.slot].data + offsets[i];
      outputs[r] = call.pattern == arfPatternAllReduce ? RankOutputs{base, nullptr, nullptr}
                                                       : RankOutputs{nullptr, base, base + n};
      if (!config_.record_step_hashes) continue;
      const int64_t words = call.pattern == arfPatternAllReduce ? n : 2 * n;
      step_hash = hash_bytes(base, static_cast<size_t>(words) * sizeof(uint16_t), step_hash);
    }
    CallCheck check = check_call(call, (*config_.sets)[static_cast<size_t>(call.set)], hidden,
                                 config_.dtype, outputs);
    // outputs[] holds this process's ranks (under arfusion-run only its own, so "vs rank 0" is a
    // comparison with itself and only the reference counts); report the global rank.
    if (check.has_mismatch) check.first.rank = res.held(check.first.rank).rank;
    local.add_call(call, check, job.spec.step, job.spec.graph);
  }
  bool first_wrong = false;
  {
    std::lock_guard<std::mutex> lock(totals_mu_);
    totals_.merge(local);
    if (config_.record_step_hashes) {
      const size_t step = static_cast<size_t>(job.spec.step);
      if (step_hashes_.size() <= step) step_hashes_.resize(step + 1, kNoStepHash);
      step_hashes_[step] = step_hash == kNoStepHash ? 1 : step_hash;
    }
    if (local.bad_calls > 0 && !reported_wrong_) first_wrong = reported_wrong_ = true;
  }
  if (first_wrong && config_.on_first_wrong) config_.on_first_wrong();
  pipeline_.release(job);
}

uint64_t Verifier::close() {
  pipeline_.close_queue();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  return pipeline_.partial_steps();
}

Totals Verifier::totals() const {
  std::lock_guard<std::mutex> lock(totals_mu_);
  return totals_;
}

std::vector<uint64_t> Verifier::step_hashes() const {
  std::lock_guard<std::mutex> lock(totals_mu_);
  return step_hashes_;
}

std::string Verifier::error() const {
  std::lock_guard<std::mutex> lock(totals_mu_);
  return error_;
}

}  // namespace arf::stress
