// The one place the bench turns a CallSpec into library calls.
#include "context.h"

namespace arf::bench {

arfFusedArgs_t make_fused_args(const CallSpec& spec, const RankBuffers& b, int set) {
  callkit::CallTensors t;
  t.input = b.input[set];
  t.allreduce_out = b.allreduce_out;
  if (spec.has_norm()) t.residual_in = b.residual_in[set];
  t.residual_out = b.residual_out;
  t.norm_out = b.norm_out;
  t.gamma = b.gamma;
  t.quant_out = b.quant_out;
  t.scale_out = b.scale_out;
  // scale_in holds [kStaticScale, kGlobalScale] (buffers.h): per-tensor FP8 reads the first,
  // NVFP4 the second.
  if (b.scale_in != nullptr) {
    t.scale_in = spec.pattern == arfPatternResidualRmsNormNvfp4 ? b.scale_in + 1 : b.scale_in;
  }
  return callkit::fused_args(spec, b.dtype, t);
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
