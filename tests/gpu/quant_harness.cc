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
  spec.ue8m0 = s.pattern == arfPatternResidualRmsNormFp8PerGroup && s.format != arfScaleFp32;
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

// One call's device buffers on one rank.
class QuantBuffers {
 public:
  QuantBuffers(int device, const QuantCallSpec& spec, arfDataType_t dtype)
      : spec_(spec), dtype_(dtype) {
    const size_t bytes = static_cast<size_t>(spec.elems()) * 2;
    input_ = DeviceBuffer(device, bytes);
    residual_in_ = DeviceBuffer(device, bytes);
    gamma_ = DeviceBuffer(device, static_cast<size_t>(spec.hidden) * 2);
    residual_out_ = DeviceBuffer(device, bytes);
    if (spec.norm_side_output) norm_out_ = DeviceBuffer(device, bytes);
    quant_out_ = DeviceBuffer(device, spec.quant_bytes());
    scale_out_ = DeviceBuffer(device, spec.scale_bytes());
    if (quant_reads_scale_in(internal(spec.pattern))) scale_in_ = DeviceBuffer(device, 4);
    scale_in_value_ =
        spec.pattern == arfPatternResidualRmsNormNvfp4 ? kGlobalScale : spec.static_scale;
  }

  void upload(const CallData& data, int rank, cudaStream_t stream) const {
    const size_t bytes = static_cast<size_t>(spec_.elems()) * 2;
    cuda_ok(cudaMemcpyAsync(input_.get(), data.inputs[rank].data(), bytes, cudaMemcpyHostToDevice,
                            stream),
            "upload input");
    cuda_ok(cudaMemcpyAsync(residual_in_.get(), data.residual_in.data(), bytes,
                            cudaMemcpyHostToDevice, stream),
            "upload residual");
    cuda_ok(cudaMemcpyAsync(gamma_.get(), data.gamma16.data(), gamma_.bytes(),
                            cudaMemcpyHostToDevice, stream),
            "upload gamma");
    if (scale_in_.get() != nullptr) {
      // A member: it outlives the copy (cudaMemcpyAsync may read it after returning).
      cuda_ok(cudaMemcpyAsync(scale_in_.get(), &scale_in_value_, 4, cudaMemcpyHostToDevice,
                              stream),
              "upload scale_in");
    }
    // 0xFF: NaN in bf16/fp16, e4m3 and fp32, UE8M0's NaN, e2m1 -6 pairs. Scale padding is poisoned
    // too: the kernels must write it as zero.
    for (const DeviceBuffer* out : {&residual_out_, &norm_out_, &quant_out_, &scale_out_}) {
      if (out->get() != nullptr) {
        cuda_ok(cudaMemsetAsync(out->get(), 0xFF, out->bytes(), stream), "poison");
      }
    }
  }

  arfFusedArgs_t args() const {
    arfFusedArgs_t a;
    arfFusedArgsInit(&a);
    a.pattern = spec_.pattern;
    a.algorithm = spec_.algorithm;
    a.fallback = spec_.fallback;
    a.dtype = dtype_;
    a.gamma_dtype = dtype_;
    a.num_tokens = static_cast<size_t>(spec_.num_tokens);
    a.hidden = static_cast<size_t>(spec_.hidden);
    a.input = input_.get();
    a.residual_in = residual_in_.get();
    a.gamma = gamma_.get();
    a.residual_out = residual_out_.get();
    a.norm_out = norm_out_.get();
    a.quant_out = quant_out_.get();
    a.scale_out = scale_out_.get();
    a.scale_in = static_cast<const float*>(scale_in_.get());
    a.scale_layout = spec_.layout;
    a.scale_format = spec_.format;
    return a;
  }

  // The consumer trick (harness.h): whatever the call still reads afterwards becomes garbage.
  void clobber(cudaStream_t stream) const {
    for (const DeviceBuffer* in : {&input_, &residual_in_, &gamma_, &scale_in_}) {
      if (in->get() != nullptr) {
        cuda_ok(cudaMemsetAsync(in->get(), 0x5A, in->bytes(), stream), "clobber input");
      }
    }
  }

  QuantRankOutputs download(cudaStream_t stream) const {
    QuantRankOutputs out;
    if (!cuda_ok(cudaStreamSynchronize(stream), "sync before download")) return out;
    auto fetch = [](const DeviceBuffer& buf, auto& dst) {
      dst.resize(buf.bytes() / sizeof(dst[0]));
      if (buf.bytes() > 0) {
        cuda_ok(cudaMemcpy(dst.data(), buf.get(), buf.bytes(), cudaMemcpyDeviceToHost), "download");
      }
    };
    fetch(residual_out_, out.residual_out);
    fetch(norm_out_, out.norm_out);
    fetch(quant_out_, out.quant_out);
    fetch(scale_out_, out.scale_out);
    return out;
  }

 private:
  QuantCallSpec spec_;
  arfDataType_t dtype_;
  float scale_in_value_ = 0.0f;
  DeviceBuffer input_, residual_in_, gamma_, residual_out_, norm_out_, quant_out_, scale_out_,
      scale_in_;
};

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

uint64_t QuantCallSpec::quant_bytes() const {
  return static_cast<uint64_t>(quant_out_bytes(internal(pattern), num_tokens, hidden));
}

uint64_t QuantCallSpec::scale_bytes() const {
  return arfScaleBufferBytes(pattern, layout, format, static_cast<size_t>(num_tokens),
                             static_cast<size_t>(hidden));
}

int QuantCallSpec::expected_level() const {
  if (fallback != arfFallbackAuto) return static_cast<int>(fallback);
  return algorithm == arfAlgoUnfused ? 3 : 1;
}

CallSpec QuantCallSpec::data_spec() const {
  CallSpec s;
  s.pattern = arfPatternResidualRmsNorm;
  s.num_tokens = num_tokens;
  s.hidden = hidden;
  return s;
}

std::string QuantCallSpec::label() const {
  std::ostringstream os;
  os << arfPatternName(pattern) << " " << arfAlgorithmName(algorithm) << " level "
     << static_cast<int>(fallback) << " tokens " << num_tokens << " hidden " << hidden << " layout "
     << static_cast<int>(layout) << " format " << static_cast<int>(format)
     << (norm_side_output ? " +norm_out" : "") << " data " << data_index;
  if (pattern == arfPatternResidualRmsNormFp8PerTensor && static_scale != kStaticScale) {
    os << " scale " << static_scale;
  }
  return os.str();
}

std::vector<QuantCallResult> run_quant_calls(const World& world,
                                             const std::vector<QuantCallSpec>& specs,
                                             const std::vector<CallData>& data) {
  const int world_size = world.size();
  const size_t num_calls = specs.size();
  std::vector<QuantCallResult> results(num_calls, QuantCallResult(world_size));
  std::vector<std::vector<arfPlan_t>> plans(num_calls, std::vector<arfPlan_t>(world_size));
  std::vector<std::vector<std::unique_ptr<QuantBuffers>>> buffers(world_size);
  HangGuard guard(120, "a batch of " + std::to_string(num_calls) + " quantized calls");
  std::barrier ready(world_size), enqueued(world_size);
  world.run_ranks([&](int r) {
    const cudaStream_t stream = world.stream(r);
    bool ok = true;
    for (size_t c = 0; c < num_calls; ++c) {
      buffers[r].push_back(
          std::make_unique<QuantBuffers>(world.device(r), specs[c], world.dtype()));
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
      const arfFusedArgs_t args = buffers[r][c]->args();
      const arfStatus_t st = arfFusedAllReduce(world.comm(r), &args, stream);
      if (st != arfSuccess) ADD_FAILURE() << where(c, specs[c], r) << status_text(st);
      enqueued.arrive_and_wait();  // as harness_run.cc: the clobber never queues ahead of a peer
      buffers[r][c]->clobber(stream);
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
  std::vector<int64_t> anchor(data.size(), -1);
  for (size_t c = 0; c < specs.size(); ++c) {
    int64_t& a = anchor[specs[c].data_index];
    if (a < 0 && specs[c].norm_side_output) a = static_cast<int64_t>(c);
  }
  parallel_for(static_cast<int64_t>(data.size()), [&](int64_t d) {
    if (anchor[d] < 0) return;
    const QuantCallSpec& spec = specs[anchor[d]];
    ref::FusedInputs in;
    in.dtype = dtype;
    in.num_tokens = spec.num_tokens;
    in.hidden = spec.hidden;
    for (const auto& input : data[d].inputs) in.rank_inputs.push_back(input.data());
    in.residual_in = data[d].residual_in.data();
    in.gamma = data[d].gamma16.data();
    in.gamma_dtype = dtype;
    want[d] = ref::reference_fused(in);
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
    fail(0, ref::first_bitwise_mismatch(got0.residual_out.data(), want[d].residual_out.data(),
                                        spec.elems(), spec.hidden, "residual_out vs reference"));
    if (spec.norm_side_output) {
      fail(0,
           ref::first_norm_mismatch(got0.norm_out.data(), want[d].norm_exact, spec.hidden, dtype));
      ref::QuantResult q;
      const std::string error = ref::quantize_reference(
          got0.norm_out.data(), dtype, spec.num_tokens, spec.hidden, ref_spec(spec), &q);
      if (!error.empty()) return fail(0, "reference: " + error);
      const quant::ScaleStorage storage = quant_scale_storage(internal(spec.pattern), spec.format);
      fail(0, ref::first_quant_mismatch(q, got0.quant_out.data(), got0.scale_out.data(),
                                        static_cast<quant::ScaleLayout>(spec.layout), storage,
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
