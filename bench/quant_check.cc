// The quant gate: stage fresh data, run every variant once per rank between barriers, compare.
#include "quant_check.h"

#include <algorithm>
#include <numeric>

#include "export/reference_api.h"
#include "output_hash.h"

namespace arf::bench {
namespace {

constexpr int kPoisonByte = 0xFF;

struct Outputs {
  std::vector<uint16_t> residual, norm;  // norm only for a side-output call
  std::vector<uint8_t> quant, scale;
};

struct State {
  const std::vector<CallSpec>* calls = nullptr;
  size_t anchor = 0;
  std::vector<uint16_t> residual;                // replicated input, filled in slices
  std::vector<Outputs> anchor_out;               // [rank]
  std::vector<std::vector<int64_t>> wrong;       // [rank][call]
  std::vector<std::vector<std::string>> detail;  // [rank][call]
};

std::string cuda_error(cudaError_t err, const char* what) {
  return err == cudaSuccess ? "" : std::string(what) + ": " + cudaGetErrorString(err);
}

int64_t slice_begin(int64_t rows, int part, int parts) { return rows * part / parts; }

template <typename V>
int64_t count_diff(const V& got, const V& want, const char* what, std::string* first) {
  if (got.size() != want.size()) {
    if (first->empty()) *first = std::string(what) + ": sizes differ";
    return static_cast<int64_t>(std::max(got.size(), want.size()));
  }
  int64_t n = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (n++ == 0 && first->empty()) *first = std::string(what) + ": first at " + std::to_string(i);
  }
  return n;
}

// Residual slices first (the pool's threads share the work), then each rank uploads its own input.
std::string stage(const BenchContext& ctx, const CallSpec& spec, uint64_t call, int rank,
                  State& st) {
  const DType dt = ref_dtype(ctx.args->dtype);
  // Under arfusion-run this process is the only filler: it fills every rank's slice.
  const bool all_slices = ctx.pool->multi_process();
  for (int part = all_slices ? 0 : rank; part < (all_slices ? ctx.world() : rank + 1); ++part) {
    const int64_t row0 = slice_begin(spec.num_tokens, part, ctx.world());
    const int64_t row1 = slice_begin(spec.num_tokens, part + 1, ctx.world());
    if (row1 > row0) {
      ref::fill_random(st.residual.data() + row0 * spec.hidden, (row1 - row0) * spec.hidden,
                       dt, replicated_seed(call, 16 + part));
    }
  }
  std::vector<uint16_t> input(spec.elems());
  ref::fill_random(input.data(), spec.elems(), dt, input_seed(rank, call));
  if (!ctx.pool->agree(rank, true)) return "a peer failed";  // residual complete
  std::string why = upload(ctx.buffers[rank].input[0], input, ctx.streams[rank]);
  if (why.empty()) why = upload(ctx.buffers[rank].residual_in[0], st.residual, ctx.streams[rank]);
  return why;
}

// Poison, one call, drain. Stream-ordered only: no device-synchronizing call while peers spin.
std::string run_one(const BenchContext& ctx, const CallSpec& spec, int rank) {
  const RankBuffers& b = ctx.buffers[rank];
  cudaStream_t s = ctx.streams[rank];
  const size_t act = static_cast<size_t>(spec.elems()) * dtype_size(ctx.args->dtype);
  std::string why = cuda_error(cudaMemsetAsync(b.residual_out, kPoisonByte, act, s), "poison");
  if (why.empty()) why = cuda_error(cudaMemsetAsync(b.norm_out, kPoisonByte, act, s), "poison");
  if (why.empty())
    why = cuda_error(cudaMemsetAsync(b.quant_out, kPoisonByte, spec.quant_bytes(), s), "poison");
  if (why.empty())
    why = cuda_error(cudaMemsetAsync(b.scale_out, kPoisonByte, spec.scale_bytes(), s), "poison");
  if (why.empty()) why = enqueue_call(ctx, spec, rank, /*call=*/0);  // reads input set 0
  if (why.empty()) why = cuda_error(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  if (why.empty()) why = comm_health(ctx, rank);
  return why;
}

std::string fetch(const BenchContext& ctx, const CallSpec& spec, int rank, Outputs* out) {
  const RankBuffers& b = ctx.buffers[rank];
  cudaStream_t s = ctx.streams[rank];
  std::string why = download(b.residual_out, spec.elems(), s, &out->residual);
  if (why.empty() && spec.norm_side_output) why = download(b.norm_out, spec.elems(), s, &out->norm);
  if (why.empty()) why = download_bytes(b.quant_out, spec.quant_bytes(), s, &out->quant);
  if (why.empty()) why = download_bytes(b.scale_out, spec.scale_bytes(), s, &out->scale);
  return why;
}

// A non-anchor call against the same rank's anchor.
void compare_to_anchor(int rank, size_t c, const Outputs& got, State& st) {
  const Outputs& want = st.anchor_out[rank];
  std::string& first = st.detail[rank][c];
  int64_t& n = st.wrong[rank][c];
  n += count_diff(got.residual, want.residual, "residual_out vs side-output call", &first);
  n += count_diff(got.quant, want.quant, "quant_out vs side-output call", &first);
  n += count_diff(got.scale, want.scale, "scale_out vs side-output call", &first);
  if (!first.empty()) first = "rank " + std::to_string(rank) + ": " + first;
}

// One rank's thread: stage, then every call between barriers (the anchor first, so that the others
// are compared as they come and only the anchor's outputs are kept).
std::string run_rank(const BenchContext& ctx, uint64_t call, int rank, State& st) {
  const std::vector<CallSpec>& calls = *st.calls;
  std::string why = stage(ctx, calls[0], call, rank, st);
  std::vector<size_t> order(calls.size());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[0], order[st.anchor]);
  for (size_t c : order) {
    if (ctx.pool->agree(rank, why.empty())) why = run_one(ctx, calls[c], rank);
    // Pageable downloads may synchronize the device: only once no peer's call is in flight.
    if (!ctx.pool->agree(rank, why.empty())) return why.empty() ? "a peer failed" : why;
    Outputs out;
    why = fetch(ctx, calls[c], rank, &out);
    if (!why.empty()) continue;  // the next agree() tells the peers
    if (c == st.anchor) {
      st.anchor_out[rank] = std::move(out);
    } else {
      compare_to_anchor(rank, c, out, st);
    }
  }
  return why;
}

ref::QuantSpec ref_spec(const CallSpec& s) {
  ref::QuantSpec spec;
  switch (s.pattern) {
    case arfPatternResidualRmsNormFp8PerTensor:
      spec.kind = ref::QuantKind::kFp8PerTensor;
      break;
    case arfPatternResidualRmsNormFp8PerGroup:
      spec.kind = ref::QuantKind::kFp8PerGroup;
      break;
    case arfPatternResidualRmsNormNvfp4:
      spec.kind = ref::QuantKind::kNvfp4;
      break;
    case arfPatternResidualRmsNormMxfp4:
      spec.kind = ref::QuantKind::kMxfp4;
      break;
    default:
      spec.kind = ref::QuantKind::kFp8PerToken;
      break;
  }
  spec.static_scale = kStaticScale;
  spec.global_scale = kGlobalScale;
  spec.ue8m0 = s.pattern == arfPatternResidualRmsNormFp8PerGroup && s.scale_format != arfScaleFp32;
  return spec;
}

// One-byte scales: UE8M0 packed, and the FP4 formats' e4m3 / UE8M0 codes; fp32 otherwise.
quant::ScaleStorage storage_of(const CallSpec& s) {
  const bool bytes = s.pattern == arfPatternResidualRmsNormNvfp4 ||
                     s.pattern == arfPatternResidualRmsNormMxfp4 ||
                     s.scale_format == arfScaleUe8m0Packed;
  return bytes ? quant::ScaleStorage::kByte : quant::ScaleStorage::kFp32;
}

// A rank's anchor against the reference quantization of its own norm_out.
int64_t check_reference(const BenchContext& ctx, const CallSpec& spec, int rank, const Outputs& got,
                        std::string* detail) {
  ref::QuantResult want;
  const std::string why =
      ref::quantize_reference(got.norm.data(), ref_dtype(ctx.args->dtype), spec.num_tokens,
                              spec.hidden, ref_spec(spec), &want);
  if (!why.empty()) {
    *detail = "reference: " + why;
    return 1;
  }
  const auto layout = static_cast<quant::ScaleLayout>(spec.scale_layout);
  const std::vector<uint8_t> scales = ref::pack_scales(want, layout, storage_of(spec));
  std::string first;
  int64_t n = count_diff(got.quant, want.values, "quant_out", &first);
  n += count_diff(got.scale, scales, "scale_out", &first);
  if (n > 0) {
    *detail = "rank " + std::to_string(rank) + " vs quantize_reference(own norm_out): " +
              ref::first_quant_mismatch(want, got.quant.data(), got.scale.data(), layout,
                                        storage_of(spec), /*max_steps=*/0);
  }
  return n;
}

// Under arfusion-run: every rank checks its own anchor against the reference (not only rank 0),
// ranks are compared with rank 0 through a hash of the anchor's outputs (output_hash.h), and the
// per-rank counts are shared so that every process reports the same result.
void compare_across_processes(BenchContext& ctx, bool has_anchor, State& st,
                              QuantCheckResult* result) {
  const int world = ctx.world();
  const int me = ctx.local_rank();
  const size_t a = st.anchor;
  const Outputs& mine = st.anchor_out[me];
  std::vector<std::string> hashes(world);
  hashes[me] = std::to_string(hash_output(
      mine.scale, hash_output(mine.quant, hash_output(mine.norm, hash_output(mine.residual)))));
  ctx.pool->share(&hashes);
  if (has_anchor) {
    st.wrong[me][a] += check_reference(ctx, (*st.calls)[a], me, mine, &st.detail[me][a]);
  }
  for (size_t c = 0; c < st.calls->size(); ++c) {
    std::vector<int64_t> wrong(world);
    std::vector<std::string> detail(world);
    wrong[me] = st.wrong[me][c];
    detail[me] = st.detail[me][c];
    ctx.pool->share(&wrong);
    ctx.pool->share(&detail);
    for (int r = 0; r < world; ++r) {
      st.wrong[r][c] = wrong[r];
      st.detail[r][c] = detail[r];
    }
  }
  for (int r = 1; r < world; ++r) {
    if (hashes[r] == hashes[0]) continue;
    ++st.wrong[r][a];  // at least one byte differs; which one is not known across processes
    if (st.detail[r][a].empty()) {
      st.detail[r][a] = "rank " + std::to_string(r) + ": outputs differ from rank 0's";
    }
  }
  if (!ctx.pool->channel_error().empty()) {
    result->error = "check: host channel: " + ctx.pool->channel_error();
  }
}

}  // namespace

QuantCheckResult check_quant(BenchContext& ctx, const std::vector<CallSpec>& calls, uint64_t call) {
  const int world = ctx.world();
  State st;
  st.calls = &calls;
  auto side = std::find_if(calls.begin(), calls.end(),
                           [](const CallSpec& c) { return c.norm_side_output; });
  st.anchor = side == calls.end() ? 0 : static_cast<size_t>(side - calls.begin());
  st.residual.resize(calls[0].elems());
  st.anchor_out.resize(world);
  st.wrong.assign(world, std::vector<int64_t>(calls.size(), 0));
  st.detail.assign(world, std::vector<std::string>(calls.size()));
  std::vector<std::string> errors(world);
  ctx.pool->run([&](int rank) { errors[rank] = run_rank(ctx, call, rank, st); });
  ctx.pool->share(&errors);
  QuantCheckResult result;
  if (!ctx.pool->channel_error().empty()) {
    result.error = "check: host channel: " + ctx.pool->channel_error();
    return result;
  }
  for (int r = 0; r < world && result.error.empty(); ++r) {
    if (!errors[r].empty()) result.error = "check: rank " + std::to_string(r) + ": " + errors[r];
  }
  if (!result.error.empty()) return result;
  result.wrong.assign(calls.size(), 0);
  result.detail.assign(calls.size(), "");
  const size_t a = st.anchor;
  if (ctx.pool->multi_process()) {
    compare_across_processes(ctx, side != calls.end(), st, &result);
  } else {
    // Without a side-output call there is no norm_out to quantize; identity checks still run.
    if (side != calls.end()) {
      result.wrong[a] = check_reference(ctx, calls[a], 0, st.anchor_out[0], &result.detail[a]);
    }
    // Other ranks' anchors against rank 0's, in parallel on the rank threads.
    ctx.pool->run([&](int rank) {
      if (rank == 0) return;
      const Outputs& got = st.anchor_out[rank];
      const Outputs& want = st.anchor_out[0];
      std::string& first = st.detail[rank][a];
      int64_t& n = st.wrong[rank][a];
      n += count_diff(got.residual, want.residual, "residual_out vs rank 0", &first);
      n += count_diff(got.norm, want.norm, "norm_out vs rank 0", &first);
      n += count_diff(got.quant, want.quant, "quant_out vs rank 0", &first);
      n += count_diff(got.scale, want.scale, "scale_out vs rank 0", &first);
      if (!first.empty()) first = "rank " + std::to_string(rank) + ": " + first;
    });
  }
  for (int r = 0; r < world; ++r) {
    for (size_t c = 0; c < calls.size(); ++c) {
      result.wrong[c] += st.wrong[r][c];
      if (result.detail[c].empty()) result.detail[c] = st.detail[r][c];
    }
  }
  return result;
}

}  // namespace arf::bench
