// The GPU verifier's host side (gpu_verifier.h).
#include "gpu_verifier.h"

#include <chrono>
#include <optional>
#include <utility>

#include "calls.h"
#include "device.h"

namespace arf::stress {
namespace {

const uint16_t* words(const void* base, int64_t offset) {
  return static_cast<const uint16_t*>(base) + offset;
}

}  // namespace

gv::CallView call_view(const Resources& res, const StepSpec& step, size_t i, int slot) {
  const ResourceOptions& o = res.options();
  const CallSpec& call = step.calls[i];
  const std::vector<int64_t> offsets = step_output_offsets(step, o.hidden, nullptr);
  gv::CallView v;
  v.world = res.count();
  v.fp16 = o.dtype == arfFloat16;
  v.norm = call.pattern == arfPatternResidualRmsNorm;
  v.hidden = o.hidden;
  v.eps = kEps;
  v.gamma_offset = gamma_plus_one(call.gamma_kind) ? 1.0f : 0.0f;
  v.gamma_fp32 = gamma_fp32(call.gamma_kind);
  // The rows of the data set the call copied into its work slot (calls.cc, enqueue_inputs).
  const int64_t first = (call.set * o.set_rows + call.row_offset) * o.hidden;
  const RankResources& r0 = res.held(0);
  v.residual = words(r0.ring_residual, first);
  v.gamma = v.gamma_fp32 ? static_cast<const void*>(static_cast<const float*>(r0.ring_gamma32) +
                                                    call.set * o.hidden)
                         : static_cast<const void*>(words(r0.ring_gamma16, call.set * o.hidden));
  const int64_t n = call.tokens * o.hidden;
  for (int r = 0; r < res.count(); ++r) {
    v.input[r] = words(res.held(r).ring_input, first);
    v.out_a[r] = res.held(r).host[static_cast<size_t>(slot)].data + offsets[i];
    v.out_b[r] = v.norm ? v.out_a[r] + n : nullptr;
  }
  return v;
}

GpuVerifier::GpuVerifier(const GpuVerifierConfig& config)
    : config_(config),
      depth_(config.resources->options().ring_depth),
      world_(config.resources->count()),
      device_(config.resources->held(0).device),
      pipeline_(depth_, world_) {
  const ResourceOptions& o = config.resources->options();
  if (!o.device_slots) throw StressError("--verify gpu needs the output slots on the device");
  for (int r = 0; r < world_; ++r) {
    if (config.resources->held(r).device != device_) {
      throw StressError("--verify gpu needs every rank on one device");
    }
  }
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(preload_check_kernels(), "load the check kernels");
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int s = 0; s < depth_; ++s) {
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync),
               "cudaEventCreate");
    done_.push_back(e);
  }
  void* ptr = nullptr;
  cuda_check(cudaMalloc(&ptr, sizeof(gv::CheckState)), "cudaMalloc(check state)");
  state_ = static_cast<gv::CheckState*>(ptr);
  const gv::CheckState initial;
  cuda_check(cudaMemcpy(state_, &initial, sizeof(initial), cudaMemcpyHostToDevice),
             "initialise the check state");
  cuda_check(cudaHostAlloc(&ptr, sizeof(gv::CheckState) * static_cast<size_t>(depth_),
                           cudaHostAllocPortable), "cudaHostAlloc(check mirrors)");
  mirror_ = static_cast<gv::CheckState*>(ptr);
  for (int s = 0; s < depth_; ++s) mirror_[s] = initial;
}

GpuVerifier::~GpuVerifier() {
  close();
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : done_) cudaEventDestroy(e);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (state_ != nullptr) cudaFree(state_);
  if (mirror_ != nullptr) cudaFreeHost(mirror_);
}

bool GpuVerifier::slot_free(int64_t step) const { return pipeline_.slot_free(step); }

void GpuVerifier::submit(int rank, const StepSpec& step) {
  (void)rank;
  std::optional<Job> job = pipeline_.arrive(step);
  if (job) pipeline_.push(std::move(*job));  // checked at the next gate (or by close())
}

bool GpuVerifier::step_gate(int rank, int64_t step, const std::function<bool()>& aborted) {
  (void)rank;
  if (step == 0 || step % depth_ != 0) return true;
  std::unique_lock<std::mutex> lock(gate_mu_);
  const uint64_t generation = gate_generation_;
  if (++gate_arrived_ < world_) {
    // Polled, not only notified: a rank that failed never arrives, and aborted() says so.
    while (gate_generation_ == generation) {
      if (aborted()) return false;
      gate_cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
    return error().empty();
  }
  // The last rank to arrive: every rank is held here, so nothing new is enqueued; once the rank
  // streams drain, the check kernels run on an otherwise idle device.
  lock.unlock();
  check_pending();
  lock.lock();
  gate_arrived_ = 0;
  ++gate_generation_;
  gate_cv_.notify_all();
  return error().empty();
}

void GpuVerifier::check_pending() {
  std::deque<Job> jobs = pipeline_.take_queued();
  if (jobs.empty()) return;
  try {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    for (int r = 0; r < world_; ++r) {
      cuda_check(cudaStreamSynchronize(config_.resources->held(r).stream),
                 "drain rank " + std::to_string(r) + "'s stream before the checks");
    }
  } catch (const StressError& e) {
    set_error(e.what());
    return;
  }
  for (const Job& job : jobs) {
    if (!enqueue_check(job)) return;  // error() is set: the monitor stops the soak
  }
  for (const Job& job : jobs) reap(job);
}

bool GpuVerifier::enqueue_check(const Job& job) {
  const Resources& res = *config_.resources;
  const int64_t hidden = res.options().hidden;
  try {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    for (int r = 0; r < world_; ++r) {  // drained already; states what the kernels read
      cuda_check(cudaEventSynchronize(res.held(r).host[job.slot].ready),
                 "wait for rank " + std::to_string(r) + "'s outputs");
    }
    FinalizeParams fin;
    fin.step = static_cast<uint64_t>(job.spec.step);
    fin.num_calls = static_cast<int>(job.spec.calls.size());
    const std::vector<int64_t> offsets = step_output_offsets(job.spec, hidden, nullptr);
    for (int r = 0; r < world_; ++r) fin.slot[r] = res.held(r).host[job.slot].data;
    for (size_t i = 0; i < job.spec.calls.size(); ++i) {
      const CallSpec& call = job.spec.calls[i];
      fin.offset[i] = offsets[i];
      fin.out_words[i] = call.tokens * hidden;
      cuda_check(launch_check_call(call_view(res, job.spec, i, job.slot), call.tokens,
                                   static_cast<int>(i), state_, stream_), "check kernel");
    }
    cuda_check(launch_finalize(fin, state_, stream_), "finalize kernel");
    cuda_check(cudaMemcpyAsync(&mirror_[job.slot], state_, gv::kCheckStateMirrorBytes,
                               cudaMemcpyDeviceToHost, stream_), "check state -> host");
    cuda_check(cudaEventRecord(done_[static_cast<size_t>(job.slot)], stream_), "cudaEventRecord");
  } catch (const StressError& e) {
    set_error(e.what());
    return false;
  }
  return true;
}

void GpuVerifier::reap(const Job& job) {
  const cudaError_t err = cudaEventSynchronize(done_[static_cast<size_t>(job.slot)]);
  if (err != cudaSuccess) {
    set_error(std::string("check of step ") + std::to_string(job.spec.step) + ": " +
              cudaGetErrorString(err));
    return;  // the slot stays taken: the soak stops on the error anyway
  }
  const gv::CheckState& m = mirror_[job.slot];  // complete: copied before `done` on the stream
  const int64_t hidden = config_.resources->options().hidden;
  bool first_wrong = false;
  {
    std::lock_guard<std::mutex> lock(totals_mu_);
    const CallCheck clean;
    for (const CallSpec& call : job.spec.calls) {
      totals_.add_call(call, clean, job.spec.step, job.spec.graph);
    }
    totals_.steps += 1;
    totals_.graph_replays += job.spec.graph >= 0 ? 1 : 0;
    totals_.wrong_elems = m.wrong;
    totals_.cross_rank_elems = m.cross;
    totals_.bad_calls = m.bad_calls;
    if (m.first_valid != 0 && !totals_.has_first) {
      const gv::KeyFields f = gv::unpack_key(m.first_key);
      if (static_cast<int64_t>(m.first_step) != job.spec.step ||
          f.call_in_step >= static_cast<int>(job.spec.calls.size())) {
        if (error_.empty()) error_ = "GPU verifier: first bad record of an unexpected step";
      } else {
        const CallSpec& call = job.spec.calls[static_cast<size_t>(f.call_in_step)];
        totals_.has_first = true;
        totals_.first = first_mismatch(call, f, static_cast<uint16_t>(m.first_got),
                                       static_cast<uint16_t>(m.first_rank0),
                                       (*config_.sets)[static_cast<size_t>(call.set)], hidden,
                                       config_.dtype);
        totals_.first_call = call;
        totals_.first_step = job.spec.step;
        totals_.first_graph = job.spec.graph;
        first_wrong = true;
      }
    }
  }
  if (first_wrong && config_.on_first_wrong) config_.on_first_wrong();
  pipeline_.release(job);
}

uint64_t GpuVerifier::close() {
  // The rank threads have joined: whatever they left in flight drains before the last checks.
  check_pending();
  return pipeline_.partial_steps();
}

Totals GpuVerifier::totals() const {
  std::lock_guard<std::mutex> lock(totals_mu_);
  return totals_;
}

std::string GpuVerifier::error() const {
  std::lock_guard<std::mutex> lock(totals_mu_);
  return error_;
}

void GpuVerifier::set_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(totals_mu_);
  if (error_.empty()) error_ = message;
}

}  // namespace arf::stress
