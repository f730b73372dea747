// Plan -> check -> time for one (shape, column).
#include "measure.h"

#include "check.h"

namespace arf::bench {

Cell planned_cell(BenchContext& ctx, const CallSpec& spec, const char* column, arfPlan_t* plan) {
  Cell cell;
  cell.column = column;
  // Plans are identical on every rank (the library's contract), so one local rank's speaks for all.
  const arfFusedArgs_t args = make_fused_args(spec, ctx.buffers[ctx.local_rank()], 0);
  const arfStatus_t st = arfPlan(ctx.comms[ctx.local_rank()], &args, plan);
  if (st != arfSuccess) {
    cell.unsupported = st == arfUnsupported;
    cell.error = std::string(arfGetStatusString(st)) + ": " + arfGetLastErrorString();
    return cell;
  }
  cell.chosen = arfAlgorithmName(plan->algorithm);
  cell.inner = arfAlgorithmName(plan->inner_allreduce);
  cell.reason = plan->reason;
  return cell;
}

Cell measure_algorithm(BenchContext& ctx, const CallSpec& spec, const TimingConfig& cfg,
                       uint64_t* call) {
  // Planning first keeps a refused forced algorithm from ever launching.
  arfPlan_t plan;
  Cell cell = planned_cell(ctx, spec, arfAlgorithmName(spec.algorithm), &plan);
  if (!cell.error.empty()) return cell;
  if (ctx.args->check != 0) {
    CheckResult check = check_call(ctx, spec, ++*call);
    cell.wrong = check.wrong;
    cell.note = check.detail;
    if (!check.error.empty()) {
      cell.error = check.error;
      return cell;
    }
  }
  Timing t = time_collective(
      *ctx.pool, ctx.streams,
      [&](int rank, int i, cudaStream_t) { return enqueue_call(ctx, spec, rank, i); },
      [&](int rank) { return comm_health(ctx, rank); }, cfg);
  cell.us = t.max_us;
  cell.repeats_us = t.repeat_us;
  cell.error = t.error;
  return cell;
}

Cell measure_nccl(BenchContext& ctx, const NcclBaseline& nccl, const CallSpec& spec,
                  const TimingConfig& cfg) {
  Cell cell;
  cell.column = nccl.label();
  cell.chosen = nccl.label();
  Timing t = time_collective(
      *ctx.pool, ctx.streams,
      [&](int rank, int i, cudaStream_t stream) {
        return nccl.enqueue(ctx, spec, rank, i, stream);
      },
      [&](int rank) { return nccl.health(rank); }, cfg);
  cell.us = t.max_us;
  cell.repeats_us = t.repeat_us;
  cell.error = t.error;
  return cell;
}

namespace {

Cell skipped_cell(const std::string& column) {
  Cell cell;
  cell.column = column;
  cell.skipped = true;
  cell.error = "not run: a communicator failed earlier";
  return cell;
}

}  // namespace

Row measure_algorithms_row(BenchContext& ctx, const std::vector<arfAlgorithm_t>& algorithms,
                           const NcclBaseline* nccl, CallSpec spec, const TimingConfig& cfg,
                           uint64_t* calls, std::string* stopped) {
  Row row;
  row.tokens = spec.num_tokens;
  row.row_elems = spec.hidden;
  row.count = spec.elems();
  row.bytes = spec.elems() * static_cast<int64_t>(dtype_size(ctx.args->dtype));
  for (arfAlgorithm_t algo : algorithms) {
    spec.algorithm = algo;
    if (!stopped->empty()) {
      row.cells.push_back(skipped_cell(arfAlgorithmName(algo)));
      continue;
    }
    row.cells.push_back(measure_algorithm(ctx, spec, cfg, calls));
    *stopped = first_failed_comm(ctx);
  }
  if (nccl != nullptr) {
    row.cells.push_back(stopped->empty() ? measure_nccl(ctx, *nccl, spec, cfg)
                                         : skipped_cell(nccl->label()));
  }
  return row;
}

}  // namespace arf::bench
