// The one place the bench turns a CallSpec into library calls.
#include "context.h"

namespace arf::bench {

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
  for (int r = 0; r < ctx.world(); ++r) {
    std::string why = comm_health(ctx, r);
    if (!why.empty()) return "rank " + std::to_string(r) + ": " + why;
  }
  return "";
}

}  // namespace arf::bench
