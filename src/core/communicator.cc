// Communicator: config validation, init (workspace + rendezvous + agreed facts), the per-call path
// (failed? -> async error -> validate -> plan -> params -> launch) and teardown.
#include "core/communicator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <optional>
#include <thread>

#include "base/cuda_check.h"
#include "core/quant_rules.h"
#include "kernels/launch.h"
#include "policy/policy.h"
#include "transport/ipc.h"
#include "transport/local.h"
#include "transport/workspace.h"

namespace arf {

// Kernels write these codes into the error records that async_error reports as arfStatus_t.
static_assert(kErrorCodeTimeout == arfTimeout && kErrorCodeInternal == arfInternal);

namespace {

constexpr double kDefaultTimeoutSeconds = 10.0;
constexpr double kDefaultInitTimeoutSeconds = 60.0;
// Far beyond any useful bound, small enough that the nanosecond count fits in 64 bits.
constexpr double kMaxTimeoutSeconds = 1e9;

// Makes `device` current for one call and restores the caller's device afterwards, so that one
// thread may drive several communicators (on different devices) without surprises.
class ScopedDevice {
 public:
  Status enter(int device) {
    ARF_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
    if (previous_ != device) {
      ARF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
      restore_ = true;
    }
    return Status::ok();
  }
  // A destructor cannot report; cudaSetDevice to a device that was current a moment ago fails only
  // if the runtime is already broken, which the next checked call will report.
  ~ScopedDevice() {
    if (restore_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

const char* phase_name(int32_t phase) {
  switch (static_cast<Phase>(phase)) {
    case Phase::kNone: return "none";
    case Phase::kLamportPoll: return "lamport_poll";
    case Phase::kPullStartBarrier: return "pull_start_barrier";
    case Phase::kPullEndBarrier: return "pull_end_barrier";
    case Phase::kTwoshotScatterBarrier: return "twoshot_scatter_barrier";
    case Phase::kTwoshotGatherBarrier: return "twoshot_gather_barrier";
    case Phase::kSharedDeviceGate: return "shared_device_gate";
  }
  return "unknown";
}

// "timeout: rank 1 waited for peer 0 in phase lamport_poll (call 1756, cta 49, epoch 1); peer 0
// had started 1756 calls and completed 1755" — a copy of the record, read once (volatile).
std::string describe_record(const ErrorRecord& r) {
  const std::string where = " in phase " + std::string(phase_name(r.phase)) + " (call " +
                            std::to_string(r.call) + ", cta " + std::to_string(r.cta) +
                            ", epoch " + std::to_string(r.epoch) + ")";
  const std::string peer_state = "; peer " + std::to_string(r.peer) + " had started " +
                                 std::to_string(r.peer_entered) + " calls and completed " +
                                 std::to_string(r.peer_completed);
  if (r.code == arfInternal) {
    return "integrity check failed: rank " + std::to_string(r.rank) + " in call " +
           std::to_string(r.call) + " received data of call " + std::to_string(r.seen_call) +
           " (low 32 bits) from peer " + std::to_string(r.peer) + where + peer_state +
           "; calls from " + std::to_string(r.call) + " on are lost";
  }
  return "timeout: rank " + std::to_string(r.rank) + " waited for peer " + std::to_string(r.peer) +
         where + peer_state + "; calls from " + std::to_string(r.call) + " on are lost";
}

ErrorRecord snapshot(const ErrorRecord* record) {
  const volatile ErrorRecord* v = record;
  ErrorRecord r{};
  r.code = v->code;
  r.claim = v->claim;
  r.rank = v->rank;
  r.peer = v->peer;
  r.phase = v->phase;
  r.cta = v->cta;
  r.epoch = v->epoch;
  r.seen_call = v->seen_call;
  r.call = v->call;
  r.peer_entered = v->peer_entered;
  r.peer_completed = v->peer_completed;
  return r;
}

bool valid_timeout(double s) { return std::isfinite(s) && s >= 0.0; }

StaticFacts agree_facts(const std::vector<RankInfo>& infos) {
  StaticFacts f;
  f.world = static_cast<int>(infos.size());
  f.dtype = infos[0].dtype;
  f.max_tokens = infos[0].max_tokens;
  f.max_hidden = infos[0].max_hidden;
  f.oneshot_max_tokens = infos[0].oneshot_max_tokens;
  f.min_sm_count = infos[0].sm_count;
  std::map<int, int> ranks_on_device;
  for (const RankInfo& info : infos) {
    f.min_sm_count = std::min(f.min_sm_count, info.sm_count);
    f.max_ranks_per_device = std::max(f.max_ranks_per_device, ++ranks_on_device[info.device_key]);
  }
  return f;
}

KernelParams make_base_params(int rank, const StaticFacts& facts,
                              const std::vector<RankInfo>& infos, double timeout_seconds) {
  KernelParams p{};
  p.rank = rank;
  p.world = facts.world;
  for (int r = 0; r < facts.world; ++r) {
    const Workspace& ws = infos[r].workspace;
    if (ws.base == nullptr) continue;  // unmapped peer (Group::peer_path_failure): nccl only
    p.peers.lamport[r] = ws.lamport();
    p.peers.pull[r] = ws.pull();
    p.peers.scatter[r] = ws.scatter();
    p.peers.gather[r] = ws.gather();
    p.peers.flags[r] = ws.flags();
    p.peers.verify[r] = ws.verify();
    p.peers.ctrl[r] = ws.ctrl();
  }
  const Workspace& mine = infos[rank].workspace;
  p.lamport_slot_elems = mine.layout.lamport_slot_elems;
  p.scatter_slot_elems = mine.layout.scatter_slot_elems;
  p.ctrl = mine.ctrl();
  p.error = mine.error_device;
  p.scratch = mine.scratch();
  p.fallback_level = 1;
  const double seconds = timeout_seconds > 0 ? timeout_seconds : kDefaultTimeoutSeconds;
  p.timeout_ns = static_cast<uint64_t>(std::min(seconds, kMaxTimeoutSeconds) * 1e9);
  return p;
}


// Local transport: allocate, then meet the other ranks of this process. join reports its own
// failures to every rank; only the workspace is ours to undo.
template <typename Fail>
Result<std::shared_ptr<Group>> join_local(const arfCommConfig_t& c, const RankInfo& proto,
                                          const WorkspaceLayout& layout, Fail&& fail) {
  Result<Workspace> ws = allocate_workspace(layout, c.device);
  if (!ws.is_ok()) return fail(ws.status());
  RankInfo info = proto;
  info.workspace = ws.value();
  Result<std::shared_ptr<local::LocalGroup>> group =
      local::join(c.id, c.rank, c.world_size, info, effective_init_timeout(c));
  if (!group.is_ok()) {
    (void)free_workspace(&info.workspace);  // the join error is the one worth reporting
    return group.status();
  }
  return std::shared_ptr<Group>(group.take());
}

// ipc transport: join allocates the shareable workspace itself and agrees with every process.
Result<std::shared_ptr<Group>> join_ipc(const arfCommConfig_t& c, const RankInfo& proto,
                                        const WorkspaceLayout& layout) {
  ipc::JoinRequest request;
  request.id = c.id;
  request.rank = c.rank;
  request.world = c.world_size;
  request.timeout_seconds = effective_init_timeout(c);
  request.proto = proto;
  request.layout = layout;
  return ipc::join(request);
}

// setup_nccl's agreement rounds: every rank casts "1<payload>" (yes) or "0<why>" (no), cut to what
// Group::exchange carries.
std::string ballot(bool yes, const std::string& text) {
  std::string b = (yes ? "1" : "0") + text;
  b.resize(std::min(b.size(), Group::kMaxExchangeBytes));
  return b;
}

// The lowest rank that voted no, with its reason; nullopt when every rank said yes.
std::optional<std::pair<size_t, std::string>> first_no(const std::vector<std::string>& ballots) {
  for (size_t r = 0; r < ballots.size(); ++r) {
    const std::string& b = ballots[r];
    if (b.empty() || b[0] != '1') return std::make_pair(r, b.empty() ? std::string("?") : b.substr(1));
  }
  return std::nullopt;
}

}  // namespace

Result<std::string> tuning_table_contribution(int rank, const char* env_value) {
  if (rank != 0 || env_value == nullptr || *env_value == '\0') return std::string();
  const std::string origin = std::string(kTuningTableEnv) + "=" + env_value + ": ";
  Result<std::string> text = read_tuning_table_file(env_value);
  if (!text.is_ok()) return Status(text.status().code(), origin + text.status().message());
  Result<TuningTable> table = parse_tuning_table(text.value());
  if (!table.is_ok()) return Status(table.status().code(), origin + table.status().message());
  return text;
}

Result<std::shared_ptr<const TuningTable>> agree_tuning_table(
    const std::vector<RankInfo>& infos) {
  if (infos.empty() || infos[0].tuning_table_json.empty()) {
    return std::shared_ptr<const TuningTable>();
  }
  Result<TuningTable> table = parse_tuning_table(infos[0].tuning_table_json);
  if (!table.is_ok()) return table.status();
  return std::shared_ptr<const TuningTable>(std::make_shared<const TuningTable>(table.take()));
}

double effective_init_timeout(const arfCommConfig_t& c) {
  return c.init_timeout_seconds > 0 ? c.init_timeout_seconds : kDefaultInitTimeoutSeconds;
}

arfCommConfig_t upgrade_config(const arfCommConfig_t* caller) {
  arfCommConfig_t c;
  std::memset(&c, 0, sizeof(c));
  const size_t n = caller->struct_size == kCommConfigV2Bytes   ? kCommConfigV2Bytes
                   : caller->struct_size == kCommConfigV3Bytes ? kCommConfigV3Bytes
                                                               : sizeof(c);
  std::memcpy(&c, caller, n);
  return c;
}

Result<int64_t> workspace_bytes(const arfCommConfig_t& c) {
  ARF_RETURN_IF_ERROR(validate_config(c));
  const int64_t oneshot = static_cast<int64_t>(
      c.oneshot_max_tokens == 0 ? c.max_tokens : std::min(c.oneshot_max_tokens, c.max_tokens));
  Result<WorkspaceLayout> layout =
      workspace_layout(c.world_size, c.dtype == arfFloat16 ? DType::kFp16 : DType::kBf16,
                       static_cast<int64_t>(c.max_tokens), static_cast<int64_t>(c.max_hidden),
                       oneshot);
  if (!layout.is_ok()) return layout.status();
  return layout.value().total_bytes;
}

Status validate_config(const arfCommConfig_t& c) {
  const bool v2_size = c.struct_size == kCommConfigV2Bytes;
  const bool v3_size = c.struct_size == kCommConfigV3Bytes;
  const bool size_ok = v2_size || v3_size || c.struct_size == sizeof(arfCommConfig_t);
  // Version 3 added programmatic_launch, version 4 verify_calls; a version 1 or 2 struct has the
  // version 2 layout.
  const bool version_ok = v2_size   ? (c.version >= 1 && c.version <= 2)
                          : v3_size ? c.version == 3
                                    : (c.version == 4 && ARF_API_VERSION == 4);
  if (!size_ok || !version_ok) {
    return invalid_argument("config struct_size " + std::to_string(c.struct_size) + " / version " +
                            std::to_string(c.version) + " do not match this library (" +
                            std::to_string(sizeof(arfCommConfig_t)) + " / " +
                            std::to_string(ARF_API_VERSION) + ", " +
                            std::to_string(kCommConfigV3Bytes) + " / 3, or " +
                            std::to_string(kCommConfigV2Bytes) +
                            " / 1-2); use arfCommConfigInit");
  }
  if (c.programmatic_launch != 0 && c.programmatic_launch != 1) {
    return invalid_argument("programmatic_launch " + std::to_string(c.programmatic_launch) +
                            " must be 0 or 1");
  }
  if (c.verify_calls != 0 && c.verify_calls != 1) {
    return invalid_argument("verify_calls " + std::to_string(c.verify_calls) + " must be 0 or 1");
  }
  const int transport = raw_enum(c.transport);
  if (transport != arfTransportLocal && transport != arfTransportIpc) {
    return invalid_argument("config transport " + std::to_string(transport) +
                            " is not a valid arfTransport_t");
  }
  const int w = c.world_size;
  if (w != 1 && w != 2 && w != 4 && w != 8) {
    return invalid_argument("world_size " + std::to_string(w) + " is not 1, 2, 4 or 8");
  }
  if (c.rank < 0 || c.rank >= w) {
    return invalid_argument("rank " + std::to_string(c.rank) + " is outside [0, " +
                            std::to_string(w) + ")");
  }
  if (c.device < 0) return invalid_argument("device " + std::to_string(c.device) + " is negative");
  if (c.max_hidden < static_cast<size_t>(kElemsPerVec) ||
      c.max_hidden > static_cast<size_t>(kMaxHidden) || c.max_hidden % kElemsPerVec != 0) {
    return invalid_argument("max_hidden " + std::to_string(c.max_hidden) +
                            " must be a multiple of 8 in [8, " + std::to_string(kMaxHidden) + "]");
  }
  if (c.max_tokens < 1 || c.max_tokens > static_cast<size_t>(INT32_MAX)) {
    return invalid_argument("max_tokens " + std::to_string(c.max_tokens) +
                            " must be in [1, 2^31)");
  }
  if (raw_enum(c.dtype) != arfBFloat16 && raw_enum(c.dtype) != arfFloat16) {
    return invalid_argument("config dtype " + std::to_string(raw_enum(c.dtype)) +
                            " must be arfBFloat16 or arfFloat16");
  }
  if (!valid_timeout(c.timeout_seconds) || !valid_timeout(c.init_timeout_seconds)) {
    return invalid_argument("timeout_seconds " + std::to_string(c.timeout_seconds) +
                            " and init_timeout_seconds " + std::to_string(c.init_timeout_seconds) +
                            " must be finite and >= 0");
  }
  return Status::ok();
}

Result<std::unique_ptr<Communicator>> Communicator::create(const arfCommConfig_t& c) {
  ARF_RETURN_IF_ERROR(validate_config(c));
  const bool ipc = c.transport == arfTransportIpc;
  // From here on world and rank are sane, so a failure can be announced to the waiting peers (in
  // this process; an ipc rank that fails before its bootstrap connects is reported by rank 0's
  // bounded wait, naming it as never joined).
  auto fail = [&c, ipc](Status s) {
    if (!ipc) local::abandon(c.id, c.rank, c.world_size, s);
    return s;
  };
  int device_count = 0;
  Status s = cuda_status(cudaGetDeviceCount(&device_count), "cudaGetDeviceCount", __FILE__,
                         __LINE__);
  if (!s.is_ok()) return fail(s);
  if (c.device >= device_count) {
    return fail(invalid_argument("device " + std::to_string(c.device) +
                                 " does not exist (this process sees " +
                                 std::to_string(device_count) + " device(s))"));
  }
  Result<std::string> table_text = tuning_table_contribution(c.rank, std::getenv(kTuningTableEnv));
  if (!table_text.is_ok()) return fail(table_text.status());
  RankInfo proto;
  proto.tuning_table_json = table_text.take();
  proto.device = c.device;
  proto.device_key = c.device;  // local; ipc derives it from device UUIDs
  proto.dtype = c.dtype == arfFloat16 ? DType::kFp16 : DType::kBf16;
  proto.max_tokens = static_cast<int64_t>(c.max_tokens);
  proto.max_hidden = static_cast<int64_t>(c.max_hidden);
  // Lamport capacity beyond max_tokens could never be used: every call is bounded by max_tokens.
  proto.oneshot_max_tokens = static_cast<int64_t>(
      c.oneshot_max_tokens == 0 ? c.max_tokens : std::min(c.oneshot_max_tokens, c.max_tokens));
  s = cuda_status(cudaSetDevice(c.device), "cudaSetDevice", __FILE__, __LINE__);
  if (s.is_ok()) {
    s = cuda_status(
        cudaDeviceGetAttribute(&proto.sm_count, cudaDevAttrMultiProcessorCount, c.device),
        "cudaDeviceGetAttribute(MultiProcessorCount)", __FILE__, __LINE__);
  }
  Result<WorkspaceLayout> layout = workspace_layout(c.world_size, proto.dtype, proto.max_tokens,
                                                    proto.max_hidden, proto.oneshot_max_tokens);
  if (!s.is_ok() || !layout.is_ok()) return fail(s.is_ok() ? layout.status() : s);
  // Load every kernel now: a lazily loaded kernel's first launch would wait behind peers' spinning
  // kernels when ranks share a GPU.
  if (Status preload = preload_kernels(c.world_size, proto.dtype); !preload.is_ok()) return fail(preload);
  Result<std::shared_ptr<Group>> group =
      ipc ? join_ipc(c, proto, layout.value()) : join_local(c, proto, layout.value(), fail);
  if (!group.is_ok()) return group.status();

  std::unique_ptr<Communicator> comm(new Communicator());
  comm->rank_ = c.rank;
  comm->device_ = c.device;
  comm->group_ = group.take();
  const std::vector<RankInfo>& infos = comm->group_->infos();
  comm->facts_ = agree_facts(infos);
  Result<std::shared_ptr<const TuningTable>> table = agree_tuning_table(infos);
  if (!table.is_ok()) return table.status();  // rank 0 validated it: not expected; comm leaves
  comm->tuning_table_ = table.take();
  comm->error_records_.push_back(infos[c.rank].workspace.error_host);
  for (int r = 0; r < comm->facts_.world; ++r) {
    // A peer left unmapped (peer_path_failure) has no record here; NCCL reports its own failures.
    const ErrorRecord* record = infos[r].workspace.error_host;
    if (r != c.rank && record != nullptr) comm->error_records_.push_back(record);
  }
  if (Status nccl = comm->setup_nccl(effective_init_timeout(c)); !nccl.is_ok()) return nccl;
  // Ranks that cannot reach each other's memory run every call on NCCL, or fail together. The
  // failure text and facts_.nccl are identical on every rank, so every rank takes one branch.
  if (const std::string no_path = comm->group_->peer_path_failure(); !no_path.empty()) {
    if (!comm->facts_.nccl) {
      return unsupported(no_path + "; no fallback: " + comm->nccl_why_);
    }
    comm->facts_.custom = false;
  }
  comm->base_params_ = make_base_params(c.rank, comm->facts_, infos, c.timeout_seconds);
  comm->base_params_.programmatic_launch = c.programmatic_launch;
  const char* verify_env = std::getenv("ARF_VERIFY_CALLS");
  comm->base_params_.verify_calls =
      c.verify_calls != 0 || (verify_env != nullptr && std::strcmp(verify_env, "1") == 0) ? 1 : 0;
  comm->base_params_.device_mates = comm->group_->device_mates_mask(c.rank);
  comm->timeout_seconds_ = static_cast<double>(comm->base_params_.timeout_ns) * 1e-9;
  comm->pointer_check_ = cuda_pointer_check();
  {
    ScopedDevice scoped;
    Status check = scoped.enter(c.device);
    if (check.is_ok()) check = comm->stream_check_.init(StreamOrderCheck::requested_by_environment());
    if (!check.is_ok()) return check;  // comm's destructor leaves the group
  }
  return comm;
}

Status Communicator::setup_nccl(double timeout_seconds) {
  // Whether to try at all follows from agreed facts, so every rank takes the same branch.
  if (facts_.world < 2) {
    nccl_why_ = "world 1 has nothing to all-reduce";
    return Status::ok();
  }
  if (facts_.max_ranks_per_device > 1) {
    nccl_why_ = "ranks share a GPU (NCCL needs one rank per GPU)";
    return Status::ok();
  }
  std::string why;
  const nccl::Api* api = nccl::api(&why);
  // Round 1: who can load NCCL; rank 0 also hands out the id ("1" + NCCL_UNIQUE_ID_BYTES).
  std::string mine = ballot(api != nullptr, api != nullptr ? "" : why);
  ncclUniqueId id{};
  if (rank_ == 0 && api != nullptr) {
    const Status got = nccl::status(*api, api->get_unique_id(&id), "ncclGetUniqueId");
    mine = ballot(got.is_ok(), got.is_ok() ? std::string(id.internal, sizeof(id.internal))
                                           : got.message());
  }
  Result<std::vector<std::string>> loaded = group_->exchange(rank_, mine, timeout_seconds);
  if (!loaded.is_ok()) return loaded.status();
  if (const auto no = first_no(loaded.value())) {
    nccl_why_ = "rank " + std::to_string(no->first) + " cannot use NCCL: " + no->second;
    return Status::ok();
  }
  if (loaded.value()[0].size() != 1 + sizeof(id.internal)) return internal_error("bad NCCL id");
  std::memcpy(id.internal, loaded.value()[0].data() + 1, sizeof(id.internal));
  // Round 2: create, then agree; one rank's failure disables nccl on all.
  Status created;
  {
    ScopedDevice scoped;
    created = scoped.enter(device_);
    if (created.is_ok()) created = nccl_.init(*api, id, rank_, facts_.world, timeout_seconds);
  }
  Result<std::vector<std::string>> made = group_->exchange(
      rank_, ballot(created.is_ok(), created.is_ok() ? "" : created.message()), timeout_seconds);
  if (!made.is_ok()) return made.status();
  if (const auto no = first_no(made.value())) {
    (void)nccl_.close(/*abort=*/true);
    nccl_why_ = "NCCL communicator creation failed on rank " + std::to_string(no->first) + ": " +
                no->second;
    return Status::ok();
  }
  facts_.nccl = true;
  return Status::ok();
}

Communicator::~Communicator() { (void)destroy(); }

Status Communicator::destroy() {
  if (!group_) return Status::ok();
  // Wait for this rank's kernels (on whatever streams the caller used) before the group may free
  // workspaces that they read. Bounded: every spin-wait in the kernels times out.
  Status sync;
  {
    ScopedDevice scoped;
    sync = scoped.enter(device_);
    if (sync.is_ok()) {
      sync = cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);
    }
  }
  // After the sync: this rank's NCCL work is done (destroy is local, not collective).
  const Status nccl_closed = nccl_.close(/*abort=*/!sync.is_ok());
  // Leave even if the sync failed: otherwise the other ranks' workspaces would never be freed.
  const Status left = group_->leave(rank_);
  group_.reset();
  ARF_RETURN_IF_ERROR(sync);
  ARF_RETURN_IF_ERROR(nccl_closed);
  return left;
}

Result<Plan> plan_for_shape(const arfFusedArgs_t& args, const StaticFacts& facts,
                            const TuningTable* table) {
  CallShape shape;
  shape.pattern = static_cast<Pattern>(args.pattern);
  shape.requested = static_cast<Algorithm>(args.algorithm);
  shape.requested_fallback = static_cast<int>(args.fallback);
  shape.dtype = static_cast<DType>(args.dtype);
  shape.num_elems = static_cast<int64_t>(args.num_tokens * args.hidden);
  shape.row_elems = static_cast<int>(args.hidden);
  shape.num_rows = static_cast<int64_t>(args.num_tokens);
  return make_plan(shape, facts, table);
}

Result<Plan> Communicator::plan_shape(const arfFusedArgs_t& caller_args) const {
  const arfFusedArgs_t args = upgrade_fused_args(&caller_args);
  ARF_RETURN_IF_ERROR(validate_shape(args, facts_));
  Result<Plan> plan = plan_for_shape(args, facts_, tuning_table_.get());
  if (!plan.is_ok() && args.algorithm == arfAlgoNccl && !facts_.nccl) {
    return Status(plan.status().code(), plan.status().message() + ": " + nccl_why_);
  }
  return plan;
}

Result<Plan> Communicator::plan(const arfFusedArgs_t& caller_args) const {
  const arfFusedArgs_t args = upgrade_fused_args(&caller_args);
  ARF_RETURN_IF_ERROR(validate(args, facts_, device_, pointer_check_));
  CallShape shape;
  shape.pattern = static_cast<Pattern>(args.pattern);
  shape.requested = static_cast<Algorithm>(args.algorithm);
  shape.requested_fallback = static_cast<int>(args.fallback);
  shape.dtype = static_cast<DType>(args.dtype);
  shape.num_elems = static_cast<int64_t>(args.num_tokens * args.hidden);
  shape.row_elems = static_cast<int>(args.hidden);
  shape.num_rows = static_cast<int64_t>(args.num_tokens);
  Result<Plan> plan = make_plan(shape, facts_, tuning_table_.get());
  if (!plan.is_ok() && shape.requested == Algorithm::kNccl && !facts_.nccl) {
    return Status(plan.status().code(), plan.status().message() + ": " + nccl_why_);
  }
  return plan;
}

Status Communicator::fail(Status why) {
  if (!failed_) {
    failed_ = true;
    failure_ = std::move(why);
    group_->mark_failed(rank_, failure_);
  }
  return failure_;
}

Status Communicator::async_error() {
  if (failed_) return failure_;
  for (const ErrorRecord* record : error_records_) {
    if (reinterpret_cast<const volatile ErrorRecord*>(record)->code == 0) continue;
    // The kernel publishes `code` last, after a system fence: the details are complete.
    const ErrorRecord r = snapshot(record);
    const arfStatus_t status =
        r.code > 0 && r.code <= arfCommFailed ? static_cast<arfStatus_t>(r.code) : arfInternal;
    return fail(Status(status, describe_record(r)));
  }
  return Status::ok();
}

uint64_t Communicator::first_lost_call() {
  (void)async_error();
  uint64_t first = host_failed_call_;
  for (const ErrorRecord* record : error_records_) {
    const ErrorRecord r = snapshot(record);
    if (r.code != 0) first = std::min(first, r.call);
  }
  // A communicator failed by NCCL or a host-side wait before any device record names no index:
  // the call being issued then is the first that may be lost.
  if (failed_ && first == UINT64_MAX) first = collective_calls_enqueued_;
  return first;
}

Status Communicator::launch_nccl(const Plan& plan, Pattern pattern, const KernelParams& params,
                                 cudaStream_t stream) {
  // The sum lands where unfused puts it: the caller's output, else norm_out, else the scratch.
  void* sum = pattern == Pattern::kAllReduce ? params.allreduce_out
              : params.norm_out != nullptr   ? params.norm_out
                                             : params.scratch;
  ScopedDevice scoped;
  ARF_RETURN_IF_ERROR(scoped.enter(device_));
  if (Status reduced = nccl_.all_reduce(params.input, sum, static_cast<size_t>(params.num_elems),
                                        facts_.dtype, stream);
      !reduced.is_ok()) {
    // NCCL refused or did not settle the collective: peers may be inside it, so later calls
    // would pair with the wrong ones. The communicator is failed, like after a kernel timeout.
    return fail(reduced);
  }
  if (pattern != Pattern::kAllReduce) {
    KernelParams epilogue = params;
    epilogue.input = sum;
    ARF_RETURN_IF_ERROR(launch_epilogue(plan, pattern, facts_.dtype, epilogue, stream));
  }
  last_plan_ = plan;
  return stream_check_.after_call(stream);
}

Status Communicator::launch_checked(const Plan& plan, Pattern pattern, const KernelParams& params,
                                    cudaStream_t stream) {
  // One rank per GPU (facts_.nccl): no virtual-rank enqueue order to keep.
  if (plan.algorithm == Algorithm::kNccl) return launch_nccl(plan, pattern, params, stream);
  // A captured call enqueues nothing now (its graph launch does, in the caller's order), so it
  // takes no turn; waiting here would also deadlock one thread capturing every rank in turn.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool ordered = group_->shares_device(rank_);
  if (ordered) ARF_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  const bool take_turn = ordered && capture == cudaStreamCaptureStatusNone;
  // Ranks sharing a GPU may share hardware queues: kernel i of every rank must be enqueued before
  // kernel i+1 of any rank, or a spinning kernel can sit in the queue ahead of the peer kernel it
  // waits for. Counted per kernel, so the two kernels of an unfused call are ordered too.
  const uint64_t call_index = collective_calls_enqueued_;
  auto wait_turn = [&]() -> Status {
    if (!take_turn) return Status::ok();
    Status turn = group_->wait_enqueue_turn(rank_, kernels_enqueued_, timeout_seconds_);
    if (!turn.is_ok()) {
      // The ranks no longer issue the same sequence of calls: the collective is broken.
      host_failed_call_ = std::min(host_failed_call_, call_index);
      return fail(Status(turn.code(),
                         turn.message() + " (this rank's call " + std::to_string(call_index) + ")"));
    }
    return turn;
  };
  auto mark_enqueued = [&] {
    if (take_turn) group_->mark_enqueued(rank_, ++kernels_enqueued_);
  };
  ARF_RETURN_IF_ERROR(wait_turn());
  ScopedDevice scoped;
  ARF_RETURN_IF_ERROR(scoped.enter(device_));
  ARF_RETURN_IF_ERROR(launch(plan, pattern, facts_.dtype, params, stream, [&] {
    mark_enqueued();
    return wait_turn();
  }));
  mark_enqueued();
  ++collective_calls_enqueued_;
  last_plan_ = plan;
#if !defined(ARF_NEGATIVE_CONTROL_NO_SHARED_DEVICE_GATE)
  // Return only once every mate has enqueued this call too. Streams may share a hardware FIFO: a
  // kernel the caller enqueues after this call (stream-ordered behind our spinning kernel) must
  // not enter a shared FIFO ahead of a mate's kernel of this call, or it blocks the FIFO head
  // while our kernel waits for the mate's, which sits behind it (local.h).
  ARF_RETURN_IF_ERROR(wait_turn());
#endif
  return stream_check_.after_call(stream);
}

Status Communicator::check_same_call(const local::CallSignature& signature) {
  Status same = group_->record_call(rank_, calls_issued_, signature);
  if (!same.is_ok()) {
    // The ranks no longer issue the same calls: peers may already wait for this one.
    host_failed_call_ = std::min(host_failed_call_, collective_calls_enqueued_);
    return fail(same);
  }
  ++calls_issued_;
  return Status::ok();
}

namespace {
// Refuses work on a failed communicator; the first call to see a device error fails it.
Status check_healthy(bool failed, const Status& failure) {
  if (!failed) return Status::ok();
  return Status(arfCommFailed, "communicator failed earlier: " + failure.message());
}
}  // namespace

Status Communicator::fused_allreduce(const arfFusedArgs_t& caller_args, cudaStream_t stream) {
  // Fields a version-1 caller's struct lacks read as zero from here on.
  const arfFusedArgs_t args = upgrade_fused_args(&caller_args);
  ARF_RETURN_IF_ERROR(check_healthy(failed_, failure_));
  ARF_RETURN_IF_ERROR(stream_check_.before_call(stream));
  (void)async_error();
  ARF_RETURN_IF_ERROR(check_healthy(failed_, failure_));
  Result<Plan> plan = this->plan(args);  // validates
  if (!plan.is_ok()) return plan.status();
  if (args.num_tokens == 0) return Status::ok();
  local::CallSignature signature;
  signature.pattern = static_cast<int>(args.pattern);
  signature.algorithm = static_cast<int>(args.algorithm);
  signature.fallback = static_cast<int>(args.fallback);
  signature.dtype = static_cast<int>(args.dtype);
  signature.num_elems = static_cast<int64_t>(args.num_tokens * args.hidden);
  signature.row_elems = static_cast<int64_t>(args.hidden);
  ARF_RETURN_IF_ERROR(check_same_call(signature));

  KernelParams p = base_params_;
  p.num_elems = static_cast<int64_t>(args.num_tokens * args.hidden);
  p.row_elems = static_cast<int>(args.hidden);
  p.num_rows = static_cast<int>(args.num_tokens);
  p.input = args.input;
  if (args.pattern == arfPatternAllReduce) {
    p.allreduce_out = args.allreduce_out;
  } else {
    // Tensors a pattern does not use stay null, whatever the caller left in them.
    p.residual_in = args.residual_in;
    p.residual_out = args.residual_out;
    p.norm_out = args.norm_out;
    p.gamma = args.gamma;
    p.gamma_fp32 = args.gamma_dtype == arfFloat32 ? 1 : 0;
    p.gamma_offset = args.gamma_plus_one ? 1.0f : 0.0f;
    p.eps = args.eps;
  }
  if (args.pattern != arfPatternAllReduce) p.norm_rounding = static_cast<int>(args.norm_rounding);
  const Pattern pattern = static_cast<Pattern>(args.pattern);
  if (is_quant_pattern(pattern)) {
    p.quant_out = args.quant_out;
    if (quant_writes_scales(pattern)) p.scale_out = args.scale_out;
    if (quant_reads_scale_in(pattern)) p.scale_in = args.scale_in;
    // The public enums and quant::ScaleLayout / the kernels' format codes match numerically.
    p.scale_layout = static_cast<int>(args.scale_layout);
    p.scale_format = static_cast<int>(args.scale_format);
    p.fallback_level = plan.value().fallback_level;
  }
  return launch_checked(plan.value(), pattern, p, stream);
}

Status Communicator::allreduce(const void* in, void* out, size_t count, arfDataType_t dtype,
                               cudaStream_t stream) {
  ARF_RETURN_IF_ERROR(check_healthy(failed_, failure_));
  ARF_RETURN_IF_ERROR(stream_check_.before_call(stream));
  (void)async_error();
  ARF_RETURN_IF_ERROR(check_healthy(failed_, failure_));
  ARF_RETURN_IF_ERROR(validate_allreduce(count, dtype, in, out, facts_, device_, pointer_check_));
  // A flat count is laid out as rows of max_hidden (the last one partial), so it reuses the
  // row-based kernels and their capacity accounting unchanged.
  const int64_t elems = static_cast<int64_t>(count);
  CallShape shape;
  shape.pattern = Pattern::kAllReduce;
  shape.dtype = facts_.dtype;
  shape.num_elems = elems;
  shape.row_elems = static_cast<int>(std::max<int64_t>(std::min(elems, facts_.max_hidden), 8));
  shape.num_rows = (elems + shape.row_elems - 1) / shape.row_elems;
  Result<Plan> plan = make_plan(shape, facts_, tuning_table_.get());
  if (!plan.is_ok()) return plan.status();
  if (count == 0) return Status::ok();
  local::CallSignature signature;
  signature.pattern = static_cast<int>(Pattern::kAllReduce);
  signature.dtype = static_cast<int>(dtype);
  signature.num_elems = elems;
  signature.row_elems = shape.row_elems;
  ARF_RETURN_IF_ERROR(check_same_call(signature));

  KernelParams p = base_params_;
  p.num_elems = elems;
  p.row_elems = shape.row_elems;
  p.num_rows = static_cast<int>(shape.num_rows);
  p.input = in;
  p.allreduce_out = out;
  return launch_checked(plan.value(), Pattern::kAllReduce, p, stream);
}

}  // namespace arf
