// --check: stage fresh data, run one call per rank, compute the reference on all host cores, count
// wrong elements per rank.
#include "check.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include "export/reference_api.h"
#include "output_hash.h"

namespace arf::bench {
namespace {

// 0xFFFF is a NaN in both bf16 and fp16, which no correct output equals bitwise or within
// tolerance.
constexpr int kPoisonByte = 0xFF;

struct CheckData {
  std::vector<std::vector<uint16_t>> inputs;  // [rank]
  std::vector<uint16_t> residual;             // replicated on every rank
  std::vector<uint16_t> gamma;
  std::vector<std::vector<uint16_t>> got;       // [rank]: allreduce_out, or residual_out (fused)
  std::vector<std::vector<uint16_t>> got_norm;  // [rank]: norm_out (fused)
  std::vector<uint16_t> want;                   // reference of `got`
  std::vector<double> want_norm;                // unrounded reference norm
};

bool is_fused(const CallSpec& spec) { return spec.pattern == arfPatternResidualRmsNorm; }
int64_t slice_begin(int64_t rows, int part, int parts) { return rows * part / parts; }

std::vector<void*> outputs(const CallSpec& spec, const RankBuffers& b) {
  if (is_fused(spec)) return {b.residual_out, b.norm_out};
  return {b.allreduce_out};
}

void fill_host(const BenchContext& ctx, const CallSpec& spec, uint64_t call, int rank,
               CheckData& d) {
  const DType dt = ref_dtype(ctx.args->dtype);
  d.inputs[rank].resize(spec.elems());
  ref::fill_random(d.inputs[rank].data(), spec.elems(), dt, input_seed(rank, call));
  if (!is_fused(spec)) return;
  // Each rank fills one slice of the replicated residual, spreading the work over the threads.
  const int64_t row0 = slice_begin(spec.num_tokens, rank, ctx.world());
  const int64_t row1 = slice_begin(spec.num_tokens, rank + 1, ctx.world());
  if (row1 == row0) return;
  ref::fill_random(d.residual.data() + row0 * spec.hidden, (row1 - row0) * spec.hidden, dt,
                   replicated_seed(call, 16 + rank));
}

std::string cuda_error(cudaError_t err, const char* what) {
  return err == cudaSuccess ? "" : std::string(what) + ": " + cudaGetErrorString(err);
}

std::string stage(const BenchContext& ctx, const CallSpec& spec, int rank, const CheckData& d) {
  const RankBuffers& b = ctx.buffers[rank];
  cudaStream_t stream = ctx.streams[rank];
  std::string why = upload(b.input[0], d.inputs[rank], stream);
  if (why.empty() && is_fused(spec)) why = upload(b.residual_in[0], d.residual, stream);
  const size_t bytes = spec.elems() * sizeof(uint16_t);
  for (void* out : outputs(spec, b)) {
    if (why.empty()) why = cuda_error(cudaMemsetAsync(out, kPoisonByte, bytes, stream), "poison");
  }
  if (why.empty()) why = cuda_error(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return why;
}

std::string run_one_call(const BenchContext& ctx, const CallSpec& spec, int rank) {
  cudaStream_t stream = ctx.streams[rank];
  std::string why = enqueue_call(ctx, spec, rank, /*call=*/0);  // call 0 reads input set 0
  if (why.empty()) why = cuda_error(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (why.empty()) why = comm_health(ctx, rank);
  return why;
}

std::string download_outputs(const BenchContext& ctx, const CallSpec& spec, int rank,
                             CheckData& d) {
  const RankBuffers& b = ctx.buffers[rank];
  cudaStream_t stream = ctx.streams[rank];
  if (!is_fused(spec)) return download(b.allreduce_out, spec.elems(), stream, &d.got[rank]);
  std::string why = download(b.residual_out, spec.elems(), stream, &d.got[rank]);
  if (why.empty()) why = download(b.norm_out, spec.elems(), stream, &d.got_norm[rank]);
  return why;
}

// The reference's view of rows [row0, row1) of the call.
ref::FusedInputs reference_inputs(const BenchContext& ctx, const CallSpec& spec,
                                  const CheckData& d, int64_t row0, int64_t row1) {
  const int64_t offset = row0 * spec.hidden;
  arfFusedArgs_t defaults;  // the bench calls with the API's default eps and plain gamma
  arfFusedArgsInit(&defaults);
  ref::FusedInputs in;
  in.dtype = ref_dtype(ctx.args->dtype);
  in.num_tokens = row1 - row0;
  in.hidden = spec.hidden;
  for (const auto& x : d.inputs) in.rank_inputs.push_back(x.data() + offset);
  if (is_fused(spec)) {
    in.residual_in = d.residual.data() + offset;
    in.gamma = d.gamma.data();
    in.gamma_dtype = in.dtype;
    in.gamma_offset = defaults.gamma_plus_one ? 1.0f : 0.0f;
    in.eps = defaults.eps;
  }
  return in;
}

void reference_rows(const BenchContext& ctx, const CallSpec& spec, int64_t row0, int64_t row1,
                    CheckData& d) {
  if (row1 == row0) return;
  const int64_t offset = row0 * spec.hidden;
  const int64_t count = (row1 - row0) * spec.hidden;
  const ref::FusedInputs in = reference_inputs(ctx, spec, d, row0, row1);
  const ref::FusedOutputs out = ref::reference_fused(in);
  const std::vector<uint16_t>& want = is_fused(spec) ? out.residual_out : out.allreduce;
  std::copy_n(want.begin(), count, d.want.begin() + offset);
  if (is_fused(spec)) std::copy_n(out.norm_exact.begin(), count, d.want_norm.begin() + offset);
}

// Rows are independent in the reference, so it runs on every host core (world 1 has one rank
// thread but the largest epilogue shapes).
void compute_reference(const BenchContext& ctx, const CallSpec& spec, CheckData& d) {
  d.want.resize(spec.elems());
  if (is_fused(spec)) d.want_norm.resize(spec.elems());
  const int workers = static_cast<int>(
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, spec.num_tokens));
  std::vector<std::jthread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      reference_rows(ctx, spec, slice_begin(spec.num_tokens, w, workers),
                     slice_begin(spec.num_tokens, w + 1, workers), d);
    });
  }
}

std::string describe(const CallSpec& spec, DType dt, int rank, const CheckData& d) {
  const int64_t n = spec.elems(), row = spec.hidden;
  const char* name = is_fused(spec) ? "residual_out" : "allreduce_out";
  // nccl's sum is held to a bound, not bitwise (count_wrong): its report starts at the norm.
  std::string why = spec.algorithm == arfAlgoNccl
                        ? std::string()
                        : ref::first_bitwise_mismatch(d.got[rank].data(), d.want.data(), n, row, name);
  if (why.empty() && is_fused(spec))
    why = ref::first_norm_mismatch(d.got_norm[rank].data(), d.want_norm, row, dt);
  if (why.empty())
    why = ref::first_bitwise_mismatch(d.got[rank].data(), d.got[0].data(), n, row, "vs rank 0");
  if (why.empty() && is_fused(spec)) {
    why = ref::first_bitwise_mismatch(d.got_norm[rank].data(), d.got_norm[0].data(), n, row,
                                      "norm_out vs rank 0");
  }
  return "rank " + std::to_string(rank) + ": " + why;
}

// `nccl` (NCCL's summation order): the sum within ref::nccl_sum_within_tolerance instead of
// bitwise, and want_norm is our epilogue of rank 0's residual_out (set by check_call).
// Under arfusion-run rank 0's outputs live in another process: ranks are compared with it through
// output_hash (check_call), and here each rank only with itself.
int64_t count_wrong(const CallSpec& spec, DType dt, int rank, const CheckData& d,
                    const ref::FusedInputs& all_rows, std::string* detail) {
  const std::vector<uint16_t>& got = d.got[rank];
  const std::vector<uint16_t>& got0 = d.got[0].empty() ? got : d.got[0];
  const bool nccl = spec.algorithm == arfAlgoNccl;
  int64_t wrong = 0;
  for (int64_t i = 0; i < spec.elems(); ++i) {
    const bool sum_ok =
        nccl ? ref::nccl_sum_within_tolerance(all_rows, i, got[i]) : got[i] == d.want[i];
    wrong += !sum_ok || (got[i] != got0[i]);
  }
  if (is_fused(spec)) {
    const std::vector<uint16_t>& norm = d.got_norm[rank];
    const std::vector<uint16_t>& norm0 = d.got_norm[0].empty() ? norm : d.got_norm[0];
    for (int64_t i = 0; i < spec.elems(); ++i) {
      wrong += !ref::norm_within_tolerance(norm[i], d.want_norm[i], dt) || norm[i] != norm0[i];
    }
  }
  if (wrong > 0) *detail = describe(spec, dt, rank, d);
  return wrong;
}

// A rank's outputs as one hash, for the comparison with rank 0 across processes (output_hash.h).
std::string output_hash(const CheckData& d, int rank) {
  return std::to_string(hash_output(d.got_norm[rank], hash_output(d.got[rank])));
}

}  // namespace

CheckResult check_call(BenchContext& ctx, const CallSpec& spec, uint64_t call) {
  const int world = ctx.world();
  CheckData d;
  d.inputs.resize(world);
  d.got.resize(world);
  d.got_norm.resize(world);
  if (is_fused(spec)) {
    d.residual.resize(spec.elems());
    d.gamma = gamma_values(spec.hidden, ctx.args->dtype);
  }
  std::vector<std::string> errors(world);
  ctx.pool->run([&](int rank) {
    if (ctx.pool->multi_process()) {
      // Every process needs every rank's input for the reference (the seeds make them equal).
      for (int r = 0; r < world; ++r) fill_host(ctx, spec, call, r, d);
    } else {
      fill_host(ctx, spec, call, rank, d);
    }
    std::string why;
    if (ctx.pool->agree(rank, true)) why = stage(ctx, spec, rank, d);  // residual slices complete
    if (ctx.pool->agree(rank, why.empty())) why = run_one_call(ctx, spec, rank);
    // Pageable downloads may synchronize the device; with virtual ranks that must wait until no
    // peer's call is in flight (arfusion.h).
    if (ctx.pool->agree(rank, why.empty())) why = download_outputs(ctx, spec, rank, d);
    errors[rank] = why;
  });
  ctx.pool->share(&errors);
  CheckResult result;
  if (!ctx.pool->channel_error().empty()) {
    result.error = "check: host channel: " + ctx.pool->channel_error();
    return result;
  }
  for (int r = 0; r < world; ++r) {
    if (!errors[r].empty()) {
      result.error = "check: rank " + std::to_string(r) + ": " + errors[r];
      return result;
    }
  }
  compute_reference(ctx, spec, d);
  const ref::FusedInputs all_rows = reference_inputs(ctx, spec, d, 0, spec.num_tokens);
  if (spec.algorithm == arfAlgoNccl && is_fused(spec)) {
    d.want_norm = ref::norm_exact_of(all_rows, d.got[ctx.local_rank()].data());
  }
  std::vector<int64_t> wrong(world);
  std::vector<std::string> details(world);
  std::vector<std::string> hashes(world);
  const DType dt = ref_dtype(ctx.args->dtype);
  ctx.pool->run([&](int rank) {
    wrong[rank] = count_wrong(spec, dt, rank, d, all_rows, &details[rank]);
    if (ctx.pool->multi_process()) hashes[rank] = output_hash(d, rank);
  });
  ctx.pool->share(&wrong);
  ctx.pool->share(&details);
  ctx.pool->share(&hashes);
  if (!ctx.pool->channel_error().empty()) {
    result.error = "check: host channel: " + ctx.pool->channel_error();
    return result;
  }
  for (int r = 1; r < world && ctx.pool->multi_process(); ++r) {
    if (hashes[r] == hashes[0]) continue;
    ++wrong[r];  // at least one element differs; which one is not known across processes
    if (details[r].empty()) {
      details[r] = "rank " + std::to_string(r) + ": outputs differ from rank 0's";
    }
  }
  result.wrong = std::accumulate(wrong.begin(), wrong.end(), int64_t{0});
  for (const std::string& s : details) {
    if (result.detail.empty()) result.detail = s;
  }
  return result;
}

}  // namespace arf::bench
