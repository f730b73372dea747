// The per-call path of the communicator (communicator.h): failed? -> async error -> validate ->
// plan -> same call on every rank -> kernel parameters -> launch (comm_enqueue.cc, comm_nccl.cc).
#include "core/communicator.h"

#include <algorithm>
#include <string>

#include "core/quant_rules.h"
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
Result<Plan> with_nccl_reason(Result<Plan> plan, const arfFusedArgs_t& args,
                              const StaticFacts& facts, const std::string& nccl_why) {
  if (!plan.is_ok() && args.algorithm == arfAlgoNccl && !facts.nccl) {
    return Status(plan.status().code(), plan.status().message() + ": " + nccl_why);
  }
  return plan;
}

// Refuses work on a failed communicator; the first call to see a device error fails it.
Status check_healthy(bool failed, const Status& failure) {
  if (!failed) return Status::ok();
  return Status(arfCommFailed, "communicator failed earlier: " + failure.message());
}

}  // namespace

Result<Plan> plan_for_shape(const arfFusedArgs_t& args, const StaticFacts& facts,
                            const TuningTable* table) {
  CallShape shape;
  shape.pattern = static_cast<Pattern>(args.pattern);
  shape.requested = static_cast<Algorithm>(args.algorithm);
  shape.requested_fallback = static_cast<int>(args.fallback);
  shape.dtype = static_cast<DType>(args.dtype);
  shape.num_elems = static_cast<int64_t>(args.num_tokens * args.hidden);
  shape.row_elems = static_cast<int>(args.hidden);
  shape.num_rows = static_cast<int64_t>(args.num_tokens);
  return make_plan(shape, facts, table);
}

Result<Plan> Communicator::plan_shape(const arfFusedArgs_t& caller_args) const {
  const arfFusedArgs_t args = upgrade_fused_args(&caller_args);
  ARF_RETURN_IF_ERROR(validate_shape(args, facts_));
  return with_nccl_reason(plan_for_shape(args, facts_, tuning_table_.get()), args, facts_,
                          nccl_why_);
}

Result<Plan> Communicator::plan(const arfFusedArgs_t& caller_args) const {
  const arfFusedArgs_t args = upgrade_fused_args(&caller_args);
  ARF_RETURN_IF_ERROR(validate(args, facts_, device_, pointer_check_, input_buffer()));
  return with_nccl_reason(plan_for_shape(args, facts_, tuning_table_.get()), args, facts_,
                          nccl_why_);
}

Status Communicator::check_same_call(const local::CallSignature& signature) {
  Status same = group_->record_call(rank_, calls_issued_, signature);
  if (!same.is_ok()) {
    // The ranks no longer issue the same calls: peers may already wait for this one.
    host_failed_call_ = std::min(host_failed_call_, collective_calls_enqueued_);
    return fail(same);
  }
  ++calls_issued_;
  return Status::ok();
}

Status Communicator::fused_allreduce(const arfFusedArgs_t& caller_args, cudaStream_t stream) {
  // Fields a version-1 caller's struct lacks read as zero from here on.
  const arfFusedArgs_t args = upgrade_fused_args(&caller_args);
  ARF_RETURN_IF_ERROR(check_healthy(failed_, failure_));
  ARF_RETURN_IF_ERROR(stream_check_.before_call(stream));
  (void)async_error();
  ARF_RETURN_IF_ERROR(check_healthy(failed_, failure_));
  Result<Plan> plan = this->plan(args);  // validates
  if (!plan.is_ok()) return plan.status();
  if (args.num_tokens == 0) return Status::ok();
  local::CallSignature signature;
  signature.pattern = static_cast<int>(args.pattern);
  signature.algorithm = static_cast<int>(args.algorithm);
  signature.fallback = static_cast<int>(args.fallback);
  signature.dtype = static_cast<int>(args.dtype);
  signature.num_elems = static_cast<int64_t>(args.num_tokens * args.hidden);
  signature.row_elems = static_cast<int64_t>(args.hidden);
  ARF_RETURN_IF_ERROR(check_same_call(signature));

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
  ARF_RETURN_IF_ERROR(check_healthy(failed_, failure_));
  ARF_RETURN_IF_ERROR(stream_check_.before_call(stream));
  (void)async_error();
  ARF_RETURN_IF_ERROR(check_healthy(failed_, failure_));
  ARF_RETURN_IF_ERROR(
      validate_allreduce(count, dtype, in, out, facts_, device_, pointer_check_, input_buffer()));
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
  if (!plan.is_ok()) return plan.status();
  if (count == 0) return Status::ok();
  local::CallSignature signature;
  signature.pattern = static_cast<int>(Pattern::kAllReduce);
  signature.dtype = static_cast<int>(dtype);
  signature.num_elems = elems;
  signature.row_elems = shape.row_elems;
  ARF_RETURN_IF_ERROR(check_same_call(signature));

  KernelParams p = base_params_;
  p.num_elems = elems;
  p.row_elems = shape.row_elems;
  p.num_rows = static_cast<int>(shape.num_rows);
  p.input = in;
  p.allreduce_out = out;
  return launch_checked(plan.value(), Pattern::kAllReduce, p, stream);
}

}  // namespace arf
