// The one place the bench turns a CallSpec into library calls.
#include "context.h"

namespace arf::bench {

int64_t CallSpec::quant_bytes() const {
  const bool fp4 =
      pattern == arfPatternResidualRmsNormNvfp4 || pattern == arfPatternResidualRmsNormMxfp4;
  return fp4 ? elems() / 2 : elems();
}

int64_t CallSpec::scale_bytes() const {
  return static_cast<int64_t>(arfScaleBufferBytes(pattern, scale_layout, scale_format,
                                                  static_cast<size_t>(tokens),
                                                  static_cast<size_t>(row_elems)));
}

arfFusedArgs_t make_fused_args(const CallSpec& spec, const RankBuffers& b, int set) {
  arfFusedArgs_t a;
  arfFusedArgsInit(&a);
  a.pattern = spec.pattern;
  a.algorithm = spec.algorithm;
  a.dtype = b.dtype;
  a.num_tokens = static_cast<size_t>(spec.tokens);
  a.hidden = static_cast<size_t>(spec.row_elems);
  a.input = b.input[set];
  if (spec.pattern == arfPatternAllReduce) {
    a.allreduce_out = b.allreduce_out;
    return a;
  }
  a.residual_in = b.residual_in[set];
  a.residual_out = b.residual_out;
  a.norm_out = b.norm_out;
  a.gamma = b.gamma;
  a.gamma_dtype = b.dtype;
  if (!spec.quantized()) return a;
  if (!spec.norm_side_output) a.norm_out = nullptr;
  a.quant_out = b.quant_out;
  a.scale_out = spec.scale_bytes() > 0 ? b.scale_out : nullptr;
  // Only per-tensor FP8 (the static scale) and NVFP4 (the global scale) read scale_in; the others
  // get NULL, as an engine would pass.
  if (spec.pattern == arfPatternResidualRmsNormFp8PerTensor) a.scale_in = b.scale_in;
  if (spec.pattern == arfPatternResidualRmsNormNvfp4) a.scale_in = b.scale_in + 1;
  a.scale_layout = spec.scale_layout;
  a.scale_format = spec.scale_format;
  a.fallback = spec.fallback;
  return a;
}

std::string enqueue_call(const BenchContext& ctx, const CallSpec& spec, int rank, int call) {
  const RankBuffers& b = ctx.buffers[rank];
  const arfFusedArgs_t args = make_fused_args(spec, b, call % b.num_sets());
  arfStatus_t st = arfFusedAllReduce(ctx.comms[rank], &args, ctx.streams[rank]);
  if (st == arfSuccess) return "";
  return std::string(arfGetStatusString(st)) + ": " + arfGetLastErrorString();
}

std::string comm_health(const BenchContext& ctx, int rank) {
  arfStatus_t st = arfCommGetAsyncError(ctx.comms[rank]);
  if (st == arfSuccess) return "";
  const std::string detail = arfGetLastErrorString();
  return detail.empty() ? arfGetStatusString(st) : detail;
}

std::string first_failed_comm(const BenchContext& ctx) {
  std::vector<std::string> why(ctx.world());
  for (int r = 0; r < ctx.world(); ++r) {
    if (ctx.pool->local(r)) why[r] = comm_health(ctx, r);
  }
  ctx.pool->share(&why);  // process mode: every process stops the sweep at the same row
  if (!ctx.pool->channel_error().empty()) return "host channel: " + ctx.pool->channel_error();
  for (int r = 0; r < ctx.world(); ++r) {
    if (!why[r].empty()) return "rank " + std::to_string(r) + ": " + why[r];
  }
  return "";
}

}  // namespace arf::bench
