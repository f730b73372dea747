// Communicator creation and teardown (communicator.h): allocate the workspace, join the group of
// the config's transport (local or ipc), agree on the facts every rank plans with, build the
// kernels' base parameters; destroy synchronizes and leaves.
#include "core/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/cuda_check.h"
#include "core/co_resident_test.h"
#include "core/scoped_device.h"
#include "launch/launch.h"
#include "launch/release.h"
#include "transport/ipc.h"
#include "transport/local.h"
#include "transport/workspace.h"

namespace arf {
namespace {

// Far beyond any useful bound, small enough that the nanosecond count fits in 64 bits.
constexpr double kMaxTimeoutSeconds = 1e9;

StaticFacts agree_facts(const std::vector<RankInfo>& infos) {
  StaticFacts f;
  f.world = static_cast<int>(infos.size());
  f.dtype = infos[0].dtype;
  f.max_tokens = infos[0].max_tokens;
  f.max_hidden = infos[0].max_hidden;
  f.oneshot_max_tokens = infos[0].oneshot_max_tokens;
  f.max_ctas = infos[0].max_ctas;  // equal on every rank (check_same_settings)
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
  Result<Workspace> ws = allocate_workspace(layout, c.device, WorkspaceMemory::kPrivate,
                                            proto.counters_near_wrap);
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

// ARF_DEBUG_COUNTERS_NEAR_WRAP=N (a debug setting, arfusion.h): the protocol counters start N
// calls short of 2^32. Unset or empty: 0. Anything but a decimal in [1, 2^30] is refused, naming
// the variable: a typo must not silently run the ordinary counters.
Result<uint32_t> counters_near_wrap_from_env() {
  const char* text = std::getenv(kCountersNearWrapEnv);
  if (text == nullptr || *text == '\0') return uint32_t{0};
  uint64_t n = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9' || n > (uint64_t{1} << 30)) {
      n = 0;
      break;
    }
    n = n * 10 + static_cast<uint64_t>(*p - '0');
  }
  if (n < 1 || n > (uint64_t{1} << 30)) {
    return invalid_argument(std::string(kCountersNearWrapEnv) + "=\"" + text +
                            "\" is not a number of calls in [1, 2^30]");
  }
  return static_cast<uint32_t>(n);
}

}  // namespace

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
  const Result<bool> co_resident_test = co_resident_test_requested(std::getenv(kCoResidentTestEnv));
  if (!co_resident_test.is_ok()) return fail(co_resident_test.status());
  Result<uint32_t> near_wrap = counters_near_wrap_from_env();
  if (!near_wrap.is_ok()) return fail(near_wrap.status());
  RankInfo proto;
  proto.tuning_table_json = table_text.take();
  proto.counters_near_wrap = near_wrap.value();
  proto.max_ctas = c.max_ctas;
  const char* verify_env = std::getenv("ARF_VERIFY_CALLS");
  proto.verify_calls =
      c.verify_calls != 0 || (verify_env != nullptr && std::strcmp(verify_env, "1") == 0);
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
  if (Status preload = preload_kernels(c.world_size, proto.dtype, proto.max_hidden); !preload.is_ok()) return fail(preload);
  if (Status preload = preload_release_kernel(); !preload.is_ok()) return fail(preload);
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
  Result<bool> agreed = agree_co_resident_test(*comm->group_, c.rank, co_resident_test.value(),
                                               effective_init_timeout(c));
  if (!agreed.is_ok()) return agreed.status();  // the same on every rank; comm leaves
  comm->facts_.co_resident_test = agreed.value();
  comm->error_records_.push_back(infos[c.rank].workspace.error_host);
  for (int r = 0; r < comm->facts_.world; ++r) {
    // A peer left unmapped (peer_path_failure) has no record here; NCCL reports its own failures.
    const ErrorRecord* record = infos[r].workspace.error_host;
    if (r != c.rank && record != nullptr) comm->error_records_.push_back(record);
  }
  // The device wait bound (also destroy's bound on NCCL's teardown), final before anything fails.
  comm->timeout_seconds_ = std::min(
      c.timeout_seconds > 0 ? c.timeout_seconds : kDefaultTimeoutSeconds, kMaxTimeoutSeconds);
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
  // The integrity check compares what peers publish, so it runs on every rank or none: on every
  // rank when any asked for it (a rank without it would not publish the Lamport slot headers its
  // peers check, and they would report a spurious arfInternal).
  comm->base_params_.verify_calls =
      std::any_of(infos.begin(), infos.end(), [](const RankInfo& i) { return i.verify_calls; }) ? 1
                                                                                               : 0;
  // The counters' start (every rank's, agreed): the host's count of eager calls follows the
  // device's call index from there.
  if (proto.counters_near_wrap != 0) {
    comm->collective_calls_enqueued_.store((uint64_t{1} << 32) - proto.counters_near_wrap);
  }
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

Communicator::~Communicator() { (void)destroy(); }

Status Communicator::destroy() {
  if (!group_) return Status::ok();
  // NCCL first: its kernels wait for peers without a bound, so with an nccl call in flight whose
  // peer died a device synchronization would never return. A failed communicator aborts NCCL at
  // once (its in-flight kernels give up); a healthy one finalizes, bounded by the device wait
  // bound, and aborts when that runs out (nccl_api.h, shut_down).
  const Status nccl_closed = nccl_.close(/*abort=*/failure_.failed(), timeout_seconds_);
  // Then wait for this rank's own kernels (on whatever streams the caller used) before the group
  // may free workspaces that they read. Bounded: every spin-wait in the kernels times out.
  Status sync;
  {
    ScopedDevice scoped;
    sync = scoped.enter(device_);
    if (sync.is_ok()) {
      sync = cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);
    }
  }
  // Leave even if the sync failed: otherwise the other ranks' workspaces would never be freed.
  const Status left = group_->leave(rank_);
  group_.reset();
  ARF_RETURN_IF_ERROR(sync);
  ARF_RETURN_IF_ERROR(nccl_closed);
  return left;
}

}  // namespace arf
