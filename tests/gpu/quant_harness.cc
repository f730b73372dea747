// Implementation of the quantized patterns' GPU harness (quant_harness.h).
#include "gpu/quant_harness.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <memory>
#include <sstream>

#include "core/quant_rules.h"
#include "reference/cpu_reference.h"
#include "reference/quant_reference.h"

namespace arf::test {
namespace {

constexpr size_t kMaxReported = 12;
Pattern internal(arfPattern_t pattern) { return static_cast<Pattern>(pattern); }

ref::QuantSpec ref_spec(const QuantCallSpec& s) {
  ref::QuantSpec spec;
  switch (s.pattern) {
    case arfPatternResidualRmsNormFp8PerTensor: spec.kind = ref::QuantKind::kFp8PerTensor; break;
    case arfPatternResidualRmsNormFp8PerGroup: spec.kind = ref::QuantKind::kFp8PerGroup; break;
    case arfPatternResidualRmsNormNvfp4: spec.kind = ref::QuantKind::kNvfp4; break;
    case arfPatternResidualRmsNormMxfp4: spec.kind = ref::QuantKind::kMxfp4; break;
    default: spec.kind = ref::QuantKind::kFp8PerToken; break;
  }
  spec.static_scale = s.static_scale;
  spec.global_scale = kGlobalScale;
  spec.ue8m0 = s.pattern == arfPatternResidualRmsNormFp8PerGroup && s.scale_format != arfScaleFp32;
  spec.scale_rule = static_cast<quant::Fp8ScaleRule>(s.scale_rule);
  return spec;
}

std::string where(size_t call, const QuantCallSpec& spec, int rank) {
  return "call " + std::to_string(call) + " [" + spec.label() + "] rank " + std::to_string(rank) +
         ": ";
}

template <typename V>
std::string first_byte_mismatch(const V& got, const V& want, const char* what) {
  if (got.size() != want.size()) {
    return std::string(what) + ": " + std::to_string(got.size()) + " elements, expected " +
           std::to_string(want.size());
  }
  int64_t count = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++count;
  }
  if (count == 0) return "";
  std::ostringstream os;
  os << what << ": " << count << " mismatches, first at " << first << " (0x" << std::hex
     << static_cast<uint32_t>(got[first]) << " vs 0x" << static_cast<uint32_t>(want[first]) << ")";
  return os.str();
}

std::string plan_error(const QuantCallSpec& spec, const arfPlan_t& p) {
  std::ostringstream os;
  const int level = spec.expected_level();
  if (p.fallback_level != level) os << "fallback_level " << p.fallback_level << " != " << level;
  if ((p.fallback_level == 3) != (p.algorithm == arfAlgoUnfused)) os << "; level 3 != unfused";
  if (p.num_kernels != (p.fallback_level == 1 ? 1 : 2)) os << "; num_kernels " << p.num_kernels;
  const bool fused = spec.algorithm != arfAlgoAuto && spec.algorithm != arfAlgoUnfused;
  if (fused && (level == 3 ? p.inner_allreduce : p.algorithm) != spec.algorithm) {
    os << "; the forced algorithm does not run";
  }
  return os.str().empty() ? "" : os.str() + " in " + plan_text(p);
}

bool same_plan(const arfPlan_t& a, const arfPlan_t& b) {
  return a.algorithm == b.algorithm && a.inner_allreduce == b.inner_allreduce &&
         a.num_kernels == b.num_kernels && a.grid == b.grid && a.block == b.block &&
         a.fallback_level == b.fallback_level &&
         std::strncmp(a.reason, b.reason, sizeof(a.reason)) == 0;
}

}  // namespace

int QuantCallSpec::expected_level() const {
  if (fallback != arfFallbackAuto) return static_cast<int>(fallback);
  return algorithm == arfAlgoUnfused ? 3 : 1;
}

CallSpec QuantCallSpec::data_spec() const {
  test::CallSpec s;
  s.pattern = arfPatternResidualRmsNorm;
  s.num_tokens = num_tokens;
  s.hidden = hidden;
  s.post_norm = post_norm;  // a sandwich group's data carries post_gamma
  return s;
}

std::string QuantCallSpec::label() const {
  return callkit::CallSpec::label() + " data " + std::to_string(data_index);
}

std::vector<QuantCallResult> run_quant_calls(const World& world,
                                             const std::vector<QuantCallSpec>& specs,
                                             const std::vector<CallData>& data) {
  const int world_size = world.size();
  const size_t num_calls = specs.size();
  std::vector<QuantCallResult> results(num_calls, QuantCallResult(world_size));
  std::vector<std::vector<arfPlan_t>> plans(num_calls, std::vector<arfPlan_t>(world_size));
  std::vector<std::vector<std::unique_ptr<CallBuffers>>> buffers(world_size);
  HangGuard guard(120, "a batch of " + std::to_string(num_calls) + " quantized calls");
  std::barrier ready(world_size), enqueued(world_size);
  world.run_ranks([&](int r) {
    const cudaStream_t stream = world.stream(r);
    bool ok = true;
    for (size_t c = 0; c < num_calls; ++c) {
      buffers[r].push_back(std::make_unique<CallBuffers>(world.device(r), specs[c],
                                                         world.dtype(), Content::kRandom));
      buffers[r][c]->upload(data[specs[c].data_index], r, stream);
      const arfFusedArgs_t args = buffers[r][c]->args();
      const arfStatus_t st = arfPlan(world.comm(r), &args, &plans[c][r]);
      if (st != arfSuccess) {
        ADD_FAILURE() << where(c, specs[c], r) << "arfPlan: " << status_text(st);
        ok = false;
      }
    }
    ok = cuda_ok(cudaStreamSynchronize(stream), "upload") && ok;
    // No rank launches until every rank has allocated (virtual ranks: no cudaMalloc while a peer
    // spins); a rank that cannot launch drops out so that the others do not wait for it.
    ready.arrive_and_wait();
    if (!ok) {
      enqueued.arrive_and_drop();
      return;
    }
    for (size_t c = 0; c < num_calls; ++c) {
      const arfStatus_t st = buffers[r][c]->launch(world.comm(r), stream);
      if (st != arfSuccess) ADD_FAILURE() << where(c, specs[c], r) << status_text(st);
      enqueued.arrive_and_wait();  // as harness_run.cc: the clobber never queues ahead of a peer
      buffers[r][c]->clobber_inputs(stream);
    }
    cuda_ok(cudaStreamSynchronize(stream), "stream after calls");
    const arfStatus_t async = arfCommGetAsyncError(world.comm(r));
    if (async != arfSuccess)
      ADD_FAILURE() << "rank " << r << " async error: " << status_text(async);
    for (size_t c = 0; c < num_calls; ++c) results[c][r] = buffers[r][c]->download(stream);
  });
  size_t reported = 0;
  for (size_t c = 0; c < num_calls && reported < kMaxReported; ++c) {
    for (int r = 0; r < world_size; ++r) {
      std::string e = plan_error(specs[c], plans[c][r]);
      if (e.empty() && !same_plan(plans[c][r], plans[c][0])) e = "plan differs from rank 0's";
      if (!e.empty() && reported++ < kMaxReported) ADD_FAILURE() << where(c, specs[c], r) << e;
    }
  }
  return results;
}

void check_quant_calls(const World& world, const std::vector<QuantCallSpec>& specs,
                       const std::vector<CallData>& data,
                       const std::vector<QuantCallResult>& results) {
  const DType dtype = ref_dtype(world.dtype());
  // One reference per data set (every call of a group shares it), and each group's anchor: its
  // first call with the norm side output, which the others must match bit for bit.
  std::vector<ref::FusedOutputs> want(data.size());
  std::vector<ref::FusedInputs> want_in(data.size());
  std::vector<int64_t> anchor(data.size(), -1);
  for (size_t c = 0; c < specs.size(); ++c) {
    int64_t& a = anchor[specs[c].data_index];
    if (a < 0 && specs[c].norm_side_output) a = static_cast<int64_t>(c);
  }
  parallel_for(static_cast<int64_t>(data.size()), [&](int64_t d) {
    if (anchor[d] < 0) return;
    want_in[d] = callkit::reference_inputs(specs[anchor[d]], world.dtype(), data[d]);
    want[d] = ref::reference_fused(want_in[d]);
  });
  std::vector<std::vector<std::string>> errors(specs.size());
  parallel_for(static_cast<int64_t>(specs.size()), [&](int64_t c) {
    const QuantCallSpec& spec = specs[c];
    const size_t d = spec.data_index;
    auto fail = [&](int r, const std::string& msg) {
      if (!msg.empty()) errors[c].push_back(where(c, spec, r) + msg);
    };
    if (anchor[d] < 0) return fail(0, "group without a norm side output call (test bug)");
    const QuantRankOutputs& got0 = results[c][0];
    const QuantRankOutputs& base = results[anchor[d]][0];
    if (got0.residual_out.size() != static_cast<size_t>(spec.elems())) {
      return fail(0, "outputs not downloaded");
    }
    if (spec.post_norm) {  // within the contract given the kernel's own post-norm (harness.h)
      fail(0, sandwich_mismatch(want_in[d], want[d], got0.residual_out.data(),
                                spec.norm_side_output ? got0.norm_out.data() : nullptr));
    } else {
      fail(0, ref::first_bitwise_mismatch(got0.residual_out.data(), want[d].residual_out.data(),
                                          spec.elems(), spec.hidden, "residual_out vs reference"));
    }
    if (spec.norm_side_output) {
      if (!spec.post_norm) {
        fail(0, ref::first_norm_mismatch(got0.norm_out.data(), want[d].norm_exact, spec.hidden, dtype));
      }
      ref::QuantResult q;
      const std::string error = ref::quantize_reference(
          got0.norm_out.data(), dtype, spec.num_tokens, spec.hidden, ref_spec(spec), &q);
      if (!error.empty()) return fail(0, "reference: " + error);
      const quant::ScaleStorage storage =
          quant_scale_storage(internal(spec.pattern), spec.scale_format);
      fail(0, ref::first_quant_mismatch(q, got0.quant_out.data(), got0.scale_out.data(),
                                        static_cast<quant::ScaleLayout>(spec.scale_layout), storage,
                                        /*max_steps=*/0));
      fail(0, first_byte_mismatch(got0.norm_out, base.norm_out, "norm_out vs group anchor"));
    }
    fail(0, first_byte_mismatch(got0.residual_out, base.residual_out, "residual_out vs anchor"));
    fail(0, first_byte_mismatch(got0.quant_out, base.quant_out, "quant_out vs group anchor"));
    fail(0, first_byte_mismatch(got0.scale_out, base.scale_out, "scale_out vs group anchor"));
    for (int r = 1; r < world.size(); ++r) {
      const QuantRankOutputs& got = results[c][r];
      fail(r, first_byte_mismatch(got.residual_out, got0.residual_out, "residual_out vs rank 0"));
      fail(r, first_byte_mismatch(got.norm_out, got0.norm_out, "norm_out vs rank 0"));
      fail(r, first_byte_mismatch(got.quant_out, got0.quant_out, "quant_out vs rank 0"));
      fail(r, first_byte_mismatch(got.scale_out, got0.scale_out, "scale_out vs rank 0"));
    }
  });
  size_t reported = 0, total = 0;
  for (const auto& call_errors : errors) {
    for (const std::string& e : call_errors) {
      if (reported++ < kMaxReported) ADD_FAILURE() << e;
      ++total;
    }
  }
  if (total > kMaxReported) ADD_FAILURE() << "... and " << total - kMaxReported << " more";
}

}  // namespace arf::test
