// One rank process's GPU work and checks (ipc_rank.h). Runs only in forked children.
#include "ipc/ipc_rank.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/quant_layout.h"
#include "reference/cpu_reference.h"
#include "reference/quant_reference.h"

namespace arf::ipc_test {
namespace {

std::string call_where(size_t call, const CallSpec& spec) {
  return "call " + std::to_string(call) + " [" + spec.label() + "]";
}

// A plan hashed field by field: the struct has padding and reason[] has bytes after its NUL.
uint64_t plan_hash(const arfPlan_t& p) {
  const int64_t fields[] = {p.algorithm, p.inner_allreduce, p.num_kernels, p.grid,
                            p.block,     p.forced,          p.fallback_level};
  const uint64_t h = hash_bytes(fields, sizeof(fields), 0);
  return hash_bytes(p.reason, strnlen(p.reason, sizeof(p.reason)), h);
}

// The rules of our own algorithms' plans (arfusion.h: the fallback chain; fused = one kernel),
// as "; "-prefixed problems, "" when none.
std::string own_algorithm_plan_error(const CallSpec& spec, const arfPlan_t& p) {
  std::ostringstream os;
  const bool forced = spec.algorithm != arfAlgoAuto;
  if (spec.quantized()) {
    // Auto may take a level from a tuned table (ARF_TUNING_TABLE); a forced algorithm fixes it.
    if ((p.fallback_level == 3) != (p.algorithm == arfAlgoUnfused)) os << "; level 3 != unfused";
    if (p.num_kernels != (p.fallback_level == 1 ? 1 : 2)) os << "; num_kernels " << p.num_kernels;
    if (spec.algorithm == arfAlgoUnfused && p.fallback_level != 3) os << "; unfused not level 3";
    if (forced && spec.algorithm != arfAlgoUnfused && p.fallback_level != 1) {
      os << "; a forced fused algorithm must run at level 1";
    }
  } else if (p.fallback_level != 1) {
    os << "; fallback_level " << p.fallback_level << " for an unquantized pattern";
  }
  if (p.algorithm != arfAlgoUnfused) {
    if (p.inner_allreduce != p.algorithm) os << "; inner_allreduce differs for a fused plan";
    if (!spec.quantized() && p.num_kernels != 1) {
      os << "; fused but " << p.num_kernels << " kernels";
    }
  } else if (p.inner_allreduce == arfAlgoUnfused || p.inner_allreduce == arfAlgoAuto) {
    os << "; unfused without a real inner all-reduce";
  }
  return os.str();
}

// What arfPlan must say about a call of `spec`; "" when it agrees.
std::string plan_error(const CallSpec& spec, const arfPlan_t& p) {
  std::ostringstream os;
  if (p.algorithm == arfAlgoAuto) os << "; algorithm auto (never runs)";
  if (p.grid < 1 || p.block < 1) os << "; empty launch";
  const bool forced = spec.algorithm != arfAlgoAuto;
  if (forced != (p.forced != 0)) os << "; forced " << p.forced;
  if (forced && p.algorithm != spec.algorithm) os << "; the forced algorithm does not run";
  // nccl (never forced here; only a tuned table picks it) is NCCL's all-reduce plus our epilogue
  // kernel: the kernel and level rules of our own algorithms do not describe it.
  if (p.algorithm != arfAlgoNccl) os << own_algorithm_plan_error(spec, p);
  const std::string s = os.str();
  return s.empty() ? "" : s.substr(2) + " in " + plan_text(p);
}

// Reports a kit step's failure through ctx; whether the step succeeded.
bool kit_ok(RankContext& ctx, const std::string& error) {
  if (error.empty()) return true;
  ctx.fail(error);
  return false;
}

}  // namespace

std::string status_text(arfStatus_t status) {
  return std::string(arfGetStatusString(status)) + ": " + arfGetLastErrorString();
}

std::string plan_text(const arfPlan_t& p) {
  std::ostringstream os;
  os << arfAlgorithmName(p.algorithm) << " (inner " << arfAlgorithmName(p.inner_allreduce) << ", "
     << p.num_kernels << " kernels, grid " << p.grid << ", block " << p.block << ", level "
     << p.fallback_level << (p.forced ? ", forced" : "") << ": "
     << std::string(p.reason, strnlen(p.reason, sizeof(p.reason))) << ")";
  return os.str();
}

// ---- setup -----------------------------------------------------------------------------------

bool cuda_ok(RankContext& ctx, cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return true;
  ctx.fail(what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  return false;
}

bool init_device(RankContext& ctx) {
  const int device = ctx.device();
  return cuda_ok(ctx, cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")") &&
         cuda_ok(ctx, cudaFree(nullptr), "creating the context on device " +
                                             std::to_string(device));
}

arfCommConfig_t ipc_config(const RankContext& ctx, arfDataType_t dtype) {
  arfCommConfig_t c;
  arfCommConfigInit(&c);
  c.transport = arfTransportIpc;
  c.rank = ctx.rank();
  c.world_size = ctx.world();
  c.device = ctx.device();
  c.id = ctx.slot().id;
  c.max_tokens = kMaxTokens;
  c.max_hidden = kMaxHidden;
  c.dtype = dtype;
  c.timeout_seconds = kDeviceTimeoutSeconds;
  c.init_timeout_seconds = kInitTimeoutSeconds;
  return c;
}

arfComm_t init_comm(RankContext& ctx, const arfCommConfig_t& config) {
  arfComm_t comm = nullptr;
  const arfStatus_t st = arfCommInitRank(&comm, &config);
  if (st != arfSuccess) {
    ctx.fail("arfCommInitRank(rank " + std::to_string(config.rank) + " of " +
             std::to_string(config.world_size) + ", device " + std::to_string(config.device) +
             "): " + status_text(st));
    return nullptr;
  }
  if (comm == nullptr) ctx.fail("arfCommInitRank returned arfSuccess and a NULL communicator");
  return comm;
}

void destroy_comm(RankContext& ctx, arfComm_t comm) {
  const arfStatus_t st = arfCommDestroy(comm);
  // After an earlier failure (a peer's timeout, say) destroy may report it again: not news.
  if (st != arfSuccess && !ctx.failed()) ctx.fail("arfCommDestroy: " + status_text(st));
}

cudaStream_t make_stream(RankContext& ctx) {
  cudaStream_t stream = nullptr;
  if (!cuda_ok(ctx, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream")) {
    return nullptr;
  }
  return stream;
}

// ---- calls -----------------------------------------------------------------------------------

std::unique_ptr<CallBuffers> CallBuffers::create(RankContext& ctx, const CallSpec& spec,
                                                 arfDataType_t dtype) {
  if (spec.quantized() && spec.scale_bytes() == 0) {
    ctx.fail("arfScaleBufferBytes is 0 for " + spec.label());
    return nullptr;
  }
  int device = 0;
  if (!cuda_ok(ctx, cudaGetDevice(&device), "cudaGetDevice")) return nullptr;
  std::unique_ptr<CallBuffers> b(new CallBuffers(device, spec, dtype));
  if (!kit_ok(ctx, b->error())) return nullptr;
  return b;
}

bool CallBuffers::upload(RankContext& ctx, const CallData& data, cudaStream_t stream) const {
  return kit_ok(ctx, callkit::CallBuffers::upload(data, ctx.rank(), stream));
}

bool CallBuffers::clobber_inputs(RankContext& ctx, cudaStream_t stream) const {
  return kit_ok(ctx, callkit::CallBuffers::clobber_inputs(stream));
}

bool CallBuffers::download(RankContext& ctx, cudaStream_t stream, RankOutputs* out) const {
  return kit_ok(ctx, callkit::CallBuffers::download(stream, out));
}

// ---- checks ----------------------------------------------------------------------------------

std::string check_outputs(const CallSpec& spec, arfDataType_t dtype, const CallData& data,
                          const RankOutputs& got) {
  const DType rd = callkit::ref_dtype(dtype);
  const int64_t n = spec.elems();
  const ref::FusedOutputs want = ref::reference_fused(callkit::reference_inputs(spec, dtype, data));
  std::string errors;
  auto add = [&](const std::string& e) {
    if (e.empty()) return;
    if (!errors.empty()) errors += '\n';
    errors += e;
  };
  if (!spec.has_norm()) {
    if (got.allreduce.size() != static_cast<size_t>(n)) return "allreduce_out not downloaded";
    add(ref::first_bitwise_mismatch(got.allreduce.data(), want.allreduce.data(), n, spec.hidden,
                                    "allreduce_out vs reference"));
    return errors;
  }
  if (got.residual_out.size() != static_cast<size_t>(n) ||
      got.norm_out.size() != static_cast<size_t>(n)) {
    return "residual_out / norm_out not downloaded";
  }
  // Random data has no NaN; a NaN in the reference would let the tolerance excuse a NaN output.
  for (double v : want.norm_exact) {
    if (std::isnan(v)) return "reference norm has NaN (test data bug)";
  }
  add(ref::first_bitwise_mismatch(got.residual_out.data(), want.residual_out.data(), n,
                                  spec.hidden, "residual_out vs reference"));
  add(ref::first_norm_mismatch(got.norm_out.data(), want.norm_exact, spec.hidden, rd));
  if (!spec.quantized()) return errors;
  // The kernel quantizes its own rounded norm, so the reference of THAT norm must match exactly.
  ref::QuantSpec qspec;
  qspec.kind = ref::QuantKind::kFp8PerToken;
  ref::QuantResult q;
  const std::string qerr = ref::quantize_reference(got.norm_out.data(), rd, spec.num_tokens,
                                                   spec.hidden, qspec, &q);
  if (!qerr.empty()) {
    add("quant reference: " + qerr);
    return errors;
  }
  if (got.quant_out.size() != static_cast<size_t>(n) || got.scale_out.empty()) {
    add("quant_out / scale_out not downloaded");
    return errors;
  }
  add(ref::first_quant_mismatch(q, got.quant_out.data(), got.scale_out.data(),
                                quant::ScaleLayout::kRowMajor, quant::ScaleStorage::kFp32,
                                /*max_steps=*/0));
  return errors;
}

void publish_outputs(const RankContext& ctx, const std::string& key_prefix, uint64_t salt,
                     const RankOutputs& got) {
  auto publish16 = [&](const std::vector<uint16_t>& v, const char* name) {
    if (!v.empty()) ctx.publish_hash(key_prefix + name, hash_bytes(v.data(), v.size() * 2, salt));
  };
  auto publish8 = [&](const std::vector<uint8_t>& v, const char* name) {
    if (!v.empty()) ctx.publish_hash(key_prefix + name, hash_bytes(v.data(), v.size(), salt));
  };
  publish16(got.allreduce, "allreduce_out");
  publish16(got.residual_out, "residual_out");
  publish16(got.norm_out, "norm_out");
  publish8(got.quant_out, "quant_out");
  publish8(got.scale_out, "scale_out");
}

void check_and_publish_plan(RankContext& ctx, arfComm_t comm, const CallBuffers& buffers,
                            const CallSpec& spec, const std::string& key) {
  if (spec.flat) return;  // arfPlan takes fused args; a flat call has none
  const arfFusedArgs_t args = buffers.args();
  arfPlan_t plan{};
  const arfStatus_t st = arfPlan(comm, &args, &plan);
  if (st != arfSuccess) {
    ctx.fail(key + " [" + spec.label() + "]: arfPlan: " + status_text(st));
    return;
  }
  if (const std::string e = plan_error(spec, plan); !e.empty()) {
    ctx.fail(key + " [" + spec.label() + "]: " + e);
  }
  ctx.publish_hash(key, plan_hash(plan));
  ctx.publish_text(key, plan_text(plan));
}

bool run_checked_batch(RankContext& ctx, arfComm_t comm, cudaStream_t stream,
                       arfDataType_t dtype, const std::vector<CallSpec>& specs, uint64_t seed,
                       const std::string& key_prefix) {
  std::vector<CallData> data;
  std::vector<std::unique_ptr<CallBuffers>> buffers;
  for (size_t c = 0; c < specs.size(); ++c) {
    data.push_back(make_call_data(specs[c], ctx.world(), dtype, mix_seed(seed, c)));
    buffers.push_back(CallBuffers::create(ctx, specs[c], dtype));
    if (buffers.back() == nullptr || !buffers.back()->upload(ctx, data[c], stream)) return false;
    check_and_publish_plan(ctx, comm, *buffers[c], specs[c],
                           key_prefix + "call " + std::to_string(c) + " plan");
  }
  if (!cuda_ok(ctx, cudaStreamSynchronize(stream), "synchronize after uploads")) return false;

  // Back to back, no host synchronization: the protocol must keep consecutive calls apart.
  const auto start = std::chrono::steady_clock::now();
  bool enqueued = true;
  for (size_t c = 0; c < specs.size() && enqueued; ++c) {
    const arfStatus_t st = buffers[c]->launch(comm, stream);
    if (st != arfSuccess) {
      // Stop here: later calls would only add the peers' timeouts to the log.
      ctx.fail(call_where(c, specs[c]) + ": launch: " + status_text(st));
      enqueued = false;
      break;
    }
    enqueued = buffers[c]->clobber_inputs(ctx, stream);
  }
  const bool synced = cuda_ok(ctx, cudaStreamSynchronize(stream), "synchronize after the calls");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const arfStatus_t async = arfCommGetAsyncError(comm);
  if (async != arfSuccess) {
    ctx.fail("arfCommGetAsyncError after " + std::to_string(specs.size()) + " calls (" +
             std::to_string(seconds) + " s): " + status_text(async));
  }
  // Outputs of a failed communicator say nothing new; a wrong plan does not stop the checks.
  if (!enqueued || !synced || async != arfSuccess) return false;
  for (size_t c = 0; c < specs.size(); ++c) {
    RankOutputs got;
    if (!buffers[c]->download(ctx, stream, &got)) return false;
    if (const std::string e = check_outputs(specs[c], dtype, data[c], got); !e.empty()) {
      ctx.fail(call_where(c, specs[c]) + ":\n" + e);
    }
    publish_outputs(ctx, key_prefix + "call " + std::to_string(c) + " ", c, got);
  }
  return true;
}

}  // namespace arf::ipc_test
