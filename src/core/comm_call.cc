// The per-call path of the communicator (communicator.h): failed? -> async error (and peers'
// failures) -> validate -> plan -> same call on every rank -> kernel parameters -> launch
// (comm_enqueue.cc, comm_nccl.cc). A call refused by validation or planning takes its place in the
// sequence (refuse): on every rank it keeps the communicator usable; against a peer that launched
// it, it fails every rank and releases the peers' waiting kernels (release_peers).
#include "core/communicator.h"

#include <algorithm>
#include <string>

#include "core/quant_rules.h"
#include "core/scoped_device.h"
#include "launch/release.h"
#include "policy/policy.h"

namespace arf {

// Calls carry the public enums into CallShape and the call signature as the internal ones.
static_assert(static_cast<int>(Algorithm::kAuto) == arfAlgoAuto &&
              static_cast<int>(Algorithm::kOneshotLamport) == arfAlgoOneshotLamport &&
              static_cast<int>(Algorithm::kOneshotPull) == arfAlgoOneshotPull &&
              static_cast<int>(Algorithm::kTwoshot) == arfAlgoTwoshot &&
              static_cast<int>(Algorithm::kUnfused) == arfAlgoUnfused &&
              static_cast<int>(Algorithm::kNccl) == arfAlgoNccl);
static_assert(static_cast<int>(Pattern::kAllReduce) == arfPatternAllReduce &&
              static_cast<int>(Pattern::kResidualRmsNorm) == arfPatternResidualRmsNorm);

namespace {

// A forced `nccl` call that cannot run while NCCL is off says why it is off.
Result<Plan> with_nccl_reason(Result<Plan> plan, const FusedArgs& args,
                              const StaticFacts& facts, const std::string& nccl_why) {
  if (!plan.is_ok() && args->algorithm == arfAlgoNccl && !facts.nccl) {
    return Status(plan.status().code(), plan.status().message() + ": " + nccl_why);
  }
  return plan;
}

// Refuses work on a failed communicator; the first call to see a device error fails it.
Status check_healthy(const FailureState& state) {
  if (!state.failed()) return Status::ok();
  return Status(arfCommFailed, "communicator failed earlier: " + state.failure().message());
}

}  // namespace

Result<Plan> plan_for_shape(const FusedArgs& fused, const StaticFacts& facts,
                            const TuningTable* table) {
  const arfFusedArgs_t& args = fused.get();
  CallShape shape;
  shape.pattern = static_cast<Pattern>(args.pattern);
  shape.requested = static_cast<Algorithm>(args.algorithm);
  shape.requested_fallback = static_cast<int>(args.fallback);
  shape.dtype = static_cast<DType>(args.dtype);
  shape.num_elems = static_cast<int64_t>(args.num_tokens * args.hidden);
  shape.row_elems = static_cast<int>(args.hidden);
  shape.num_rows = static_cast<int64_t>(args.num_tokens);
  shape.post_norm = args.post_gamma != nullptr;
  return make_plan(shape, facts, table);
}

Result<Plan> Communicator::plan_shape(const FusedArgs& args) const {
  ARF_RETURN_IF_ERROR(validate_shape(args, facts_));
  return with_nccl_reason(plan_for_shape(args, facts_, tuning_table_.get()), args, facts_,
                          nccl_why_);
}

Result<Plan> Communicator::plan(const FusedArgs& args) const {
  ARF_RETURN_IF_ERROR(validate(args, facts_, device_, pointer_check_, input_buffer()));
  return with_nccl_reason(plan_for_shape(args, facts_, tuning_table_.get()), args, facts_,
                          nccl_why_);
}

Status Communicator::check_same_call(const local::CallSignature& signature, cudaStream_t stream) {
  Status same = group_->record_call(rank_, calls_issued_, local::CallEntry{signature, false, {}});
  if (!same.is_ok()) {
    // The ranks no longer issue the same calls: peers may already wait for this one (a mismatch),
    // or a peer refused it (CommFailed naming the peer and why). Nothing of it is launched here.
    failure_.note_lost_call(collective_calls_enqueued_.load(std::memory_order_relaxed));
    const Status failed = fail(same);
    release_peers(stream);
    return failed;
  }
  ++calls_issued_;
  return Status::ok();
}

Status Communicator::refuse(Status why, bool has_tokens, cudaStream_t stream) {
  // A call without tokens is a no-op on every rank: it takes no place in the sequence.
  if (!has_tokens) return why;
  local::CallEntry entry;
  entry.refused = true;
  entry.reason = why.message();
  // The refused call takes its place in the sequence, on every rank that refuses it too.
  const Status same = group_->record_call(rank_, calls_issued_++, entry);
  if (same.is_ok()) return why;  // no peer launched it (yet): the communicator stays usable
  // A peer has launched the call this rank refuses: its kernels wait for ours. Fail every rank
  // (the mark reaches their next call) and release the kernels already waiting.
  failure_.note_lost_call(collective_calls_enqueued_.load(std::memory_order_relaxed));
  (void)fail(Status(arfCommFailed, same.message()));
  release_peers(stream);
  return Status(why.code(), same.message());
}

void Communicator::release_peers(cudaStream_t stream) {
  // A communicator that runs everything on nccl has no peer protocol state to release.
  if (!facts_.custom) return;
  // A captured stream would only record the release into the caller's graph; the mates' waits
  // then end at the bound.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (capture != cudaStreamCaptureStatusNone) return;
  ScopedDevice scoped;
  if (!scoped.enter(device_).is_ok()) return;
  // Best effort: if the launch fails, the mates' waits still end at the bound.
  if (!launch_release(base_params_, stream).is_ok()) (void)cudaGetLastError();
}

Status Communicator::fused_allreduce(const FusedArgs& fused, cudaStream_t stream) {
  const arfFusedArgs_t& args = fused.get();
  ARF_RETURN_IF_ERROR(check_healthy(failure_));
  ARF_RETURN_IF_ERROR(stream_check_.before_call(stream));
  (void)async_error();
  ARF_RETURN_IF_ERROR(check_healthy(failure_));
  Result<Plan> plan = this->plan(fused);  // validates
  if (!plan.is_ok()) return refuse(plan.status(), args.num_tokens > 0, stream);
  if (args.num_tokens == 0) return Status::ok();
  local::CallSignature signature;
  signature.pattern = static_cast<int>(args.pattern);
  signature.algorithm = static_cast<int>(args.algorithm);
  signature.fallback = static_cast<int>(args.fallback);
  signature.dtype = static_cast<int>(args.dtype);
  signature.num_elems = static_cast<int64_t>(args.num_tokens * args.hidden);
  signature.row_elems = static_cast<int64_t>(args.hidden);
  signature.post_norm = args.post_gamma != nullptr ? 1 : 0;
  ARF_RETURN_IF_ERROR(check_same_call(signature, stream));

  KernelParams p = base_params_;
  p.num_elems = static_cast<int64_t>(args.num_tokens * args.hidden);
  p.row_elems = static_cast<int>(args.hidden);
  p.num_rows = static_cast<int>(args.num_tokens);
  p.input = args.input;
  if (args.pattern == arfPatternAllReduce) {
    p.allreduce_out = args.allreduce_out;
  } else {
    // Tensors a pattern does not use stay null, whatever the caller left in them.
    p.residual_in = args.residual_in;
    p.residual_out = args.residual_out;
    p.norm_out = args.norm_out;
    p.gamma = args.gamma;
    p.post_gamma = args.post_gamma;  // a sandwich call's post-norm; NULL otherwise
    p.gamma_fp32 = args.gamma_dtype == arfFloat32 ? 1 : 0;
    p.gamma_offset = args.gamma_plus_one ? 1.0f : 0.0f;
    p.eps = args.eps;
  }
  if (args.pattern != arfPatternAllReduce) p.norm_rounding = static_cast<int>(args.norm_rounding);
  const Pattern pattern = static_cast<Pattern>(args.pattern);
  if (is_quant_pattern(pattern)) {
    p.quant_out = args.quant_out;
    if (quant_writes_scales(pattern)) p.scale_out = args.scale_out;
    if (quant_reads_scale_in(pattern)) p.scale_in = args.scale_in;
    // The public enums and quant::ScaleLayout / the kernels' format codes match numerically.
    p.scale_layout = static_cast<int>(args.scale_layout);
    p.scale_format = static_cast<int>(args.scale_format);
    p.scale_rule = static_cast<int>(args.scale_rule);  // validated: divide unless FP8 dynamic
    p.scale_addr = quant_scale_addressing(pattern, p.scale_layout, p.scale_format,
                                          static_cast<int64_t>(args.num_tokens),
                                          static_cast<int64_t>(args.hidden));
    p.fallback_level = plan.value().fallback_level;
  }
  return launch_checked(plan.value(), pattern, p, stream);
}

Status Communicator::allreduce(const void* in, void* out, size_t count, arfDataType_t dtype,
                               cudaStream_t stream) {
  ARF_RETURN_IF_ERROR(check_healthy(failure_));
  ARF_RETURN_IF_ERROR(stream_check_.before_call(stream));
  (void)async_error();
  ARF_RETURN_IF_ERROR(check_healthy(failure_));
  if (Status valid = validate_allreduce(count, dtype, in, out, facts_, device_, pointer_check_,
                                        input_buffer());
      !valid.is_ok()) {
    return refuse(valid, count > 0, stream);
  }
  // A flat count is laid out as rows of max_hidden (the last one partial), so it reuses the
  // row-based kernels and their capacity accounting unchanged.
  const int64_t elems = static_cast<int64_t>(count);
  CallShape shape;
  shape.pattern = Pattern::kAllReduce;
  shape.dtype = facts_.dtype;
  shape.num_elems = elems;
  shape.row_elems = static_cast<int>(std::max<int64_t>(std::min(elems, facts_.max_hidden), 8));
  shape.num_rows = (elems + shape.row_elems - 1) / shape.row_elems;
  Result<Plan> plan = make_plan(shape, facts_, tuning_table_.get());
  if (!plan.is_ok()) return refuse(plan.status(), count > 0, stream);
  if (count == 0) return Status::ok();
  local::CallSignature signature;
  signature.pattern = static_cast<int>(Pattern::kAllReduce);
  signature.dtype = static_cast<int>(dtype);
  signature.num_elems = elems;
  signature.row_elems = shape.row_elems;
  ARF_RETURN_IF_ERROR(check_same_call(signature, stream));

  KernelParams p = base_params_;
  p.num_elems = elems;
  p.row_elems = shape.row_elems;
  p.num_rows = static_cast<int>(shape.num_rows);
  p.input = in;
  p.allreduce_out = out;
  return launch_checked(plan.value(), Pattern::kAllReduce, p, stream);
}

}  // namespace arf
