// The C API of arfusion.h: argument null-checks, Status -> arfStatus_t plus the thread-local
// last-error string, and the names tables. Nothing here throws (nor does anything it calls).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "arfusion/arfusion.h"
#include "base/names.h"
#include "base/status.h"
#include "core/abi.h"
#include "core/api_internal.h"
#include "core/communicator.h"
#include "core/env_placement.h"
#include "core/nccl_api.h"
#include "core/quant_rules.h"
#include "transport/ipc_bootstrap.h"
#include "transport/local.h"

struct arfComm {
  std::unique_ptr<arf::Communicator> impl;
};

namespace {

thread_local std::string t_last_error;

// Records a failure for arfGetLastErrorString (successes leave the last failure in place, as
// ncclGetLastError does) and returns its code.
arfStatus_t report(const arf::Status& status) {
  if (!status.is_ok()) t_last_error = status.message();
  return status.code();
}

arfStatus_t null_argument(const char* function, const char* name) {
  return report(arf::invalid_argument(std::string(function) + ": " + name + " is NULL"));
}

#define ARF_API_REQUIRE(ptr) \
  if ((ptr) == nullptr) return null_argument(__func__, #ptr)

}  // namespace

namespace arf {
Communicator* communicator_of(arfComm_t comm) { return comm != nullptr ? comm->impl.get() : nullptr; }
}  // namespace arf

extern "C" {

void arfCommConfigInit(arfCommConfig_t* config) {
  if (config == nullptr) return;
  std::memset(config, 0, sizeof(*config));
  config->struct_size = sizeof(*config);
  config->version = ARF_API_VERSION;
  config->transport = arfTransportLocal;
  config->rank = 0;
  config->world_size = 1;
  config->device = 0;
  config->max_tokens = 1024;
  config->max_hidden = 8192;
  config->dtype = arfBFloat16;
  config->oneshot_max_tokens = 0;  // = max_tokens
  config->timeout_seconds = arf::kDefaultTimeoutSeconds;
  config->init_timeout_seconds = arf::kDefaultInitTimeoutSeconds;
  config->programmatic_launch = 0;
  config->verify_calls = 0;
  config->max_ctas = 0;
}

arfStatus_t arfGetUniqueId(arfUniqueId* id) {
  ARF_API_REQUIRE(id);
  arf::Result<arfUniqueId> fresh = arf::local::new_unique_id();
  if (!fresh.is_ok()) return report(fresh.status());
  *id = fresh.value();
  return arfSuccess;
}

arfStatus_t arfUniqueIdToString(const arfUniqueId* id, char* out) {
  ARF_API_REQUIRE(id);
  ARF_API_REQUIRE(out);
  arf::ipc::UniqueId key;
  std::memcpy(key.bytes.data(), id->internal, key.bytes.size());
  const std::string hex = key.hex();
  std::memcpy(out, hex.c_str(), hex.size() + 1);
  return arfSuccess;
}

arfStatus_t arfUniqueIdFromString(const char* text, arfUniqueId* id) {
  ARF_API_REQUIRE(text);
  ARF_API_REQUIRE(id);
  arf::Result<arf::ipc::UniqueId> key = arf::ipc::UniqueId::parse(text);
  if (!key.is_ok()) return report(key.status());
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, key.value().bytes.data(), key.value().bytes.size());
  return arfSuccess;
}

arfStatus_t arfCommConfigFromEnv(arfCommConfig_t* config) {
  ARF_API_REQUIRE(config);
  arf::Result<arf::EnvPlacement> placement = arf::placement_from_env();
  if (!placement.is_ok()) return report(placement.status());
  const arf::EnvPlacement& p = placement.value();
  arfUniqueId id;
  if (const arfStatus_t st = arfUniqueIdFromString(p.rendezvous_id.c_str(), &id); st != arfSuccess) {
    return report(arf::invalid_argument(std::string(arf::kEnvRendezvousId) + ": " + t_last_error));
  }
  config->transport = arfTransportIpc;
  config->rank = p.rank;
  config->world_size = p.world_size;
  config->device = p.device;
  config->id = id;
  return arfSuccess;
}

arfStatus_t arfCommInitRank(arfComm_t* comm, const arfCommConfig_t* config) {
  ARF_API_REQUIRE(comm);
  *comm = nullptr;
  ARF_API_REQUIRE(config);
  // A version-2 caller's struct is shorter: read only what it has.
  const arfCommConfig_t full = arf::upgrade_config(config);
  arf::Result<std::unique_ptr<arf::Communicator>> created = arf::Communicator::create(full);
  if (!created.is_ok()) return report(created.status());
  *comm = new arfComm{created.take()};
  return arfSuccess;
}

arfStatus_t arfCommInitRankFromNccl(arfComm_t* comm, const arfCommConfig_t* config,
                                    void* nccl_comm, cudaStream_t stream) {
  ARF_API_REQUIRE(comm);
  *comm = nullptr;
  ARF_API_REQUIRE(config);
  ARF_API_REQUIRE(nccl_comm);
  arfCommConfig_t full = arf::upgrade_config(config);
  full.transport = arfTransportIpc;
  full.world_size = 1;  // placeholders until NCCL says: validate the caller's other fields first
  full.rank = 0;
  full.device = 0;
  if (const arf::Status s = arf::validate_config(full); !s.is_ok()) return report(s);
  std::string why;
  const arf::nccl::Api* api = arf::nccl::api(&why);
  if (api == nullptr) return report(arf::unsupported("arfCommInitRankFromNccl: NCCL: " + why));
  const double timeout = arf::effective_init_timeout(full);
  arf::Result<arf::nccl::NcclPlacement> placed =
      arf::nccl::placement_from_nccl(*api, static_cast<ncclComm_t>(nccl_comm), stream, timeout);
  if (!placed.is_ok()) return report(placed.status());
  full.rank = placed.value().rank;
  full.world_size = placed.value().world;
  full.device = placed.value().device;
  full.id = placed.value().id;
  arf::Result<std::unique_ptr<arf::Communicator>> created = arf::Communicator::create(full);
  if (!created.is_ok()) return report(created.status());
  *comm = new arfComm{created.take()};
  return arfSuccess;
}

arfStatus_t arfCommInitAll(arfComm_t* comms, int world_size, const int* devices,
                           const arfCommConfig_t* config) {
  ARF_API_REQUIRE(comms);
  ARF_API_REQUIRE(devices);
  ARF_API_REQUIRE(config);
  arfCommConfig_t base = arf::upgrade_config(config);
  base.transport = arfTransportLocal;
  base.world_size = world_size;
  base.rank = 0;
  base.device = world_size > 0 ? devices[0] : 0;
  // Reject a bad config on the caller's thread before any rank starts waiting for the others.
  const arf::Status config_status = arf::validate_config(base);
  if (!config_status.is_ok()) return report(config_status);
  if (arfGetUniqueId(&base.id) != arfSuccess) return arfInternal;

  std::vector<arf::Status> statuses(world_size);
  std::vector<std::unique_ptr<arf::Communicator>> created(world_size);
  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      arfCommConfig_t c = base;
      c.rank = r;
      c.device = devices[r];
      arf::Result<std::unique_ptr<arf::Communicator>> comm = arf::Communicator::create(c);
      if (comm.is_ok()) {
        created[r] = comm.take();
      } else {
        statuses[r] = comm.status();
      }
    });
  }
  for (std::thread& t : threads) t.join();

  for (int r = 0; r < world_size; ++r) {
    if (statuses[r].is_ok()) continue;
    // Sequential destroy from one thread is supported (no host barrier at destroy).
    for (auto& comm : created) {
      if (comm) (void)comm->destroy();
    }
    return report(arf::Status(statuses[r].code(),
                              "rank " + std::to_string(r) + ": " + statuses[r].message()));
  }
  for (int r = 0; r < world_size; ++r) comms[r] = new arfComm{std::move(created[r])};
  return arfSuccess;
}

arfStatus_t arfCommDestroy(arfComm_t comm) {
  if (comm == nullptr) return arfSuccess;
  const arf::Status status = comm->impl->destroy();
  delete comm;
  return report(status);
}

arfStatus_t arfCommGetRank(arfComm_t comm, int* rank) {
  ARF_API_REQUIRE(comm);
  ARF_API_REQUIRE(rank);
  *rank = comm->impl->rank();
  return arfSuccess;
}

arfStatus_t arfCommGetWorldSize(arfComm_t comm, int* world_size) {
  ARF_API_REQUIRE(comm);
  ARF_API_REQUIRE(world_size);
  *world_size = comm->impl->world();
  return arfSuccess;
}

arfStatus_t arfCommGetAsyncError(arfComm_t comm) {
  ARF_API_REQUIRE(comm);
  return report(comm->impl->async_error());
}

void arfFusedArgsInit(arfFusedArgs_t* args) {
  if (args == nullptr) return;
  std::memset(args, 0, sizeof(*args));
  args->struct_size = sizeof(*args);
  args->version = ARF_API_VERSION;
  args->pattern = arfPatternResidualRmsNorm;
  args->algorithm = arfAlgoAuto;
  args->dtype = arfBFloat16;
  args->gamma_dtype = arfBFloat16;
  args->gamma_plus_one = 0;
  args->eps = 1e-6f;
  // Quantization fields: pointers NULL (memset), and the defaults spelled out.
  args->scale_layout = arfScaleRowMajor;
  args->scale_format = arfScaleFp32;
  args->fallback = arfFallbackAuto;
  args->norm_rounding = arfNormRoundOnce;
  args->scale_rule = arfFp8ScaleDivide;
}

namespace {
void fill_plan(const arf::Plan& v, arfPlan_t* plan) {
  plan->algorithm = static_cast<arfAlgorithm_t>(v.algorithm);
  plan->inner_allreduce = static_cast<arfAlgorithm_t>(v.inner_allreduce);
  plan->num_kernels = v.num_kernels;
  plan->grid = v.grid;
  plan->block = v.block;
  plan->forced = v.forced ? 1 : 0;
  plan->fallback_level = v.fallback_level;
  std::snprintf(plan->reason, sizeof(plan->reason), "%s", v.reason.c_str());
}
}  // namespace

arfStatus_t arfPlan(arfComm_t comm, const arfFusedArgs_t* args, arfPlan_t* plan) {
  ARF_API_REQUIRE(comm);
  ARF_API_REQUIRE(args);
  ARF_API_REQUIRE(plan);
  // An older caller's struct is shorter: read no further than its struct_size says.
  arf::Result<arf::Plan> p = comm->impl->plan(arf::upgrade_fused_args(args));
  if (!p.is_ok()) return report(p.status());
  fill_plan(p.value(), plan);
  return arfSuccess;
}

arfStatus_t arfPlanShape(arfComm_t comm, const arfFusedArgs_t* args, arfPlan_t* plan) {
  ARF_API_REQUIRE(comm);
  ARF_API_REQUIRE(args);
  ARF_API_REQUIRE(plan);
  arf::Result<arf::Plan> p = comm->impl->plan_shape(arf::upgrade_fused_args(args));
  if (!p.is_ok()) return report(p.status());
  fill_plan(p.value(), plan);
  return arfSuccess;
}

void arfPlanFactsInit(arfPlanFacts_t* facts) {
  if (facts == nullptr) return;
  std::memset(facts, 0, sizeof(*facts));
  facts->struct_size = sizeof(*facts);
  facts->version = ARF_API_VERSION;
  facts->world_size = 1;
  facts->dtype = arfBFloat16;
  facts->max_tokens = 1024;
  facts->max_hidden = 8192;
  facts->oneshot_max_tokens = 0;
  facts->sm_count = 132;
  facts->ranks_per_device = 1;
  facts->nccl = 0;
  facts->max_ctas = 0;
}

arfStatus_t arfCommGetPlanFacts(arfComm_t comm, arfPlanFacts_t* facts) {
  ARF_API_REQUIRE(comm);
  ARF_API_REQUIRE(facts);
  const arf::StaticFacts& f = comm->impl->facts();
  arfPlanFactsInit(facts);
  facts->world_size = f.world;
  facts->dtype = f.dtype == arf::DType::kFp16 ? arfFloat16 : arfBFloat16;
  facts->max_tokens = static_cast<size_t>(f.max_tokens);
  facts->max_hidden = static_cast<size_t>(f.max_hidden);
  facts->oneshot_max_tokens = static_cast<size_t>(f.oneshot_max_tokens);
  facts->sm_count = f.min_sm_count;
  facts->ranks_per_device = f.max_ranks_per_device;
  facts->nccl = f.nccl ? 1 : 0;
  facts->max_ctas = f.max_ctas;
  return arfSuccess;
}

arfStatus_t arfPlanFromFacts(const arfPlanFacts_t* facts, const arfFusedArgs_t* args,
                             arfPlan_t* plan) {
  ARF_API_REQUIRE(facts);
  ARF_API_REQUIRE(args);
  ARF_API_REQUIRE(plan);
  // arfPlanFacts_t came with version 4; versions 4 and 5 share it; version 6 added max_ctas in
  // what had been the struct's tail padding (communicator.h): same size, so a version 4-5 caller's
  // facts are read without it (no bound).
  static_assert(ARF_API_VERSION == 6, "a new API version: say which arfPlanFacts_t it has");
  if (facts->struct_size != sizeof(arfPlanFacts_t) || facts->version < 4 ||
      facts->version > ARF_API_VERSION) {
    return report(arf::invalid_argument(
        "facts->struct_size/version " + std::to_string(facts->struct_size) + "/" +
        std::to_string(facts->version) + " do not match this library (" +
        std::to_string(sizeof(arfPlanFacts_t)) + "/4-" + std::to_string(ARF_API_VERSION) +
        "); use arfPlanFactsInit"));
  }
  const int max_ctas = facts->version >= 6 ? facts->max_ctas : 0;
  const int w = facts->world_size;
  if ((w != 1 && w != 2 && w != 4 && w != 8) || facts->sm_count < 1 || max_ctas < 0 ||
      facts->ranks_per_device < 1 || facts->ranks_per_device > w || facts->max_tokens < 1 ||
      facts->max_tokens > static_cast<size_t>(INT32_MAX) || facts->max_hidden < 8 ||
      facts->max_hidden > static_cast<size_t>(arf::kMaxHidden) || facts->max_hidden % 8 != 0 ||
      (facts->dtype != arfBFloat16 && facts->dtype != arfFloat16)) {
    return report(arf::invalid_argument(
        "facts: world_size 1/2/4/8, sm_count >= 1, 1 <= ranks_per_device <= world_size, "
        "max_tokens in [1, 2^31), max_hidden a multiple of 8 in [8, 16384], dtype bf16/fp16, "
        "max_ctas >= 0"));
  }
  arf::StaticFacts f;
  f.world = w;
  f.dtype = facts->dtype == arfFloat16 ? arf::DType::kFp16 : arf::DType::kBf16;
  f.max_tokens = static_cast<int64_t>(facts->max_tokens);
  f.max_hidden = static_cast<int64_t>(facts->max_hidden);
  f.oneshot_max_tokens = static_cast<int64_t>(
      facts->oneshot_max_tokens == 0 ? facts->max_tokens
                                     : std::min(facts->oneshot_max_tokens, facts->max_tokens));
  f.min_sm_count = facts->sm_count;
  f.max_ranks_per_device = facts->ranks_per_device;
  f.nccl = facts->nccl != 0;
  f.max_ctas = max_ctas;
  const arf::FusedArgs a = arf::upgrade_fused_args(args);
  if (const arf::Status s = arf::validate_shape(a, f); !s.is_ok()) return report(s);
  arf::Result<arf::Plan> p = arf::plan_for_shape(a, f, nullptr);
  if (!p.is_ok()) return report(p.status());
  fill_plan(p.value(), plan);
  return arfSuccess;
}

arfStatus_t arfCommGetFirstLostCall(arfComm_t comm, uint64_t* call) {
  ARF_API_REQUIRE(comm);
  ARF_API_REQUIRE(call);
  *call = comm->impl->first_lost_call();
  return arfSuccess;
}

arfStatus_t arfCommGetInputBuffer(arfComm_t comm, void** ptr, size_t* bytes) {
  ARF_API_REQUIRE(comm);
  ARF_API_REQUIRE(ptr);
  ARF_API_REQUIRE(bytes);
  const arf::InputBuffer b = comm->impl->input_buffer();
  *ptr = const_cast<void*>(b.ptr);
  *bytes = static_cast<size_t>(b.bytes);
  return arfSuccess;
}

arfStatus_t arfCommWorkspaceBytes(const arfCommConfig_t* config, size_t* bytes) {
  ARF_API_REQUIRE(config);
  ARF_API_REQUIRE(bytes);
  arf::Result<int64_t> b = arf::workspace_bytes(arf::upgrade_config(config));
  if (!b.is_ok()) return report(b.status());
  *bytes = static_cast<size_t>(b.value());
  return arfSuccess;
}

arfStatus_t arfFusedAllReduce(arfComm_t comm, const arfFusedArgs_t* args, cudaStream_t stream) {
  ARF_API_REQUIRE(comm);
  ARF_API_REQUIRE(args);
  return report(comm->impl->fused_allreduce(arf::upgrade_fused_args(args), stream));
}

arfStatus_t arfAllReduce(arfComm_t comm, const void* in, void* out, size_t count,
                         arfDataType_t dtype, cudaStream_t stream) {
  ARF_API_REQUIRE(comm);
  return report(comm->impl->allreduce(in, out, count, dtype, stream));
}

size_t arfScaleBufferBytes(arfPattern_t pattern, arfScaleLayout_t layout, arfScaleFormat_t format,
                           size_t num_tokens, size_t hidden) {
  if (static_cast<int>(pattern) < arfPatternAllReduce ||
      static_cast<int>(pattern) > arfPatternResidualRmsNormMxfp4 || num_tokens > INT64_MAX ||
      hidden > INT64_MAX) {
    return 0;
  }
  return static_cast<size_t>(arf::quant_scale_buffer_bytes(
      static_cast<arf::Pattern>(pattern), layout, format, static_cast<int64_t>(num_tokens),
      static_cast<int64_t>(hidden)));
}

arfStatus_t arfQuantOutputLayout(arfPattern_t pattern, arfScaleLayout_t layout, arfScaleFormat_t format,
                                 size_t num_tokens, size_t hidden, arfQuantOutputs_t* outputs) {
  ARF_API_REQUIRE(outputs);
  const std::string fn = "arfQuantOutputLayout: ";
  if (static_cast<int>(pattern) < arfPatternAllReduce ||
      static_cast<int>(pattern) > arfPatternResidualRmsNormMxfp4) {
    return report(arf::invalid_argument(fn + "pattern " + std::to_string(static_cast<int>(pattern)) +
                                        " is not a valid arfPattern_t"));
  }
  // Bounds that keep every size below 2^63 (no call comes near them: max_tokens and max_hidden
  // are capacities of device memory).
  constexpr size_t kMaxTokens = size_t{1} << 31, kMaxHidden = size_t{1} << 30;
  if (num_tokens > kMaxTokens || hidden > kMaxHidden) {
    return report(arf::invalid_argument(fn + "num_tokens " + std::to_string(num_tokens) + " or hidden " +
                                        std::to_string(hidden) + " beyond 2^31 / 2^30"));
  }
  arf::QuantOutputShapes shapes;
  const std::string why = arf::quant_output_shapes(static_cast<arf::Pattern>(pattern), layout, format,
                                                   static_cast<int64_t>(hidden), &shapes);
  if (!why.empty()) return report(arf::invalid_argument(fn + why));
  arf::quant_output_layout(shapes, static_cast<int64_t>(num_tokens), outputs);
  return arfSuccess;
}

const char* arfGetStatusString(arfStatus_t status) {
  switch (status) {
    case arfSuccess: return "success";
    case arfInvalidArgument: return "invalid argument";
    case arfUnsupported: return "unsupported";
    case arfCudaError: return "CUDA error";
    case arfNcclError: return "NCCL error";
    case arfTimeout: return "timeout";
    case arfInternal: return "internal error";
    case arfCommFailed: return "communicator failed";
  }
  return "unknown status";
}

const char* arfGetLastErrorString(void) { return t_last_error.c_str(); }

const char* arfAlgorithmName(arfAlgorithm_t algorithm) { return arf::algorithm_name(algorithm); }

arfStatus_t arfAlgorithmFromName(const char* name, arfAlgorithm_t* algorithm) {
  ARF_API_REQUIRE(name);
  ARF_API_REQUIRE(algorithm);
  if (const std::optional<arfAlgorithm_t> parsed = arf::algorithm_from_name(name)) {
    *algorithm = *parsed;
    return arfSuccess;
  }
  return report(arf::invalid_argument(
      std::string("unknown algorithm name \"") + name +
      "\" (expected auto, oneshot_lamport, oneshot_pull, twoshot, unfused or nccl)"));
}

arfStatus_t arfAbiQuery(const char* name, int64_t* value) {
  ARF_API_REQUIRE(name);
  ARF_API_REQUIRE(value);
  if (arf::abi_lookup(name, value)) return arfSuccess;
  return report(arf::invalid_argument(std::string("arfAbiQuery: unknown name \"") + name +
                                      "\" (arfAbiNames lists them)"));
}

const char* arfAbiNames(void) { return arf::abi_names(); }

const char* arfPatternName(arfPattern_t pattern) { return arf::pattern_name(pattern); }

}  // extern "C"
