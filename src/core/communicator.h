// One rank of a communicator: its config, workspace, the rendezvous group that connects it to its
// peers, the static facts every rank agreed on, and its failure state. The C API (api.cc) is a thin
// shell over this class; everything here returns Status and throws nothing. Defined by concern:
// comm_config.cc (config upgrade, validation, tuning table), comm_create.cc (creation, teardown),
// comm_call.cc (the call path: plan, same-call check, kernel parameters), comm_enqueue.cc (the
// custom kernels' launch in the virtual-rank enqueue order), comm_nccl.cc (the `nccl` algorithm's
// vote and launch), comm_errors.cc (fail, error records, first lost call).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "base/status.h"
#include "core/failure_state.h"
#include "core/nccl_api.h"
#include "core/stream_order_check.h"
#include "core/validate.h"
#include "common/kernel_params.h"
#include "policy/plan.h"
#include "policy/tuning_table.h"
#include "transport/group.h"

namespace arf {

// Size of arfCommConfig_t as API versions 1 and 2 declared it (without programmatic_launch), as
// version 3 did (without verify_calls) and as versions 4 and 5 did (without max_ctas).
inline constexpr size_t kCommConfigV2Bytes = offsetof(arfCommConfig_t, programmatic_launch);
inline constexpr size_t kCommConfigV3Bytes = offsetof(arfCommConfig_t, verify_calls);
inline constexpr size_t kCommConfigV5Bytes = offsetof(arfCommConfig_t, max_ctas);
// A version-5 caller's sizeof ended right after verify_calls (the struct's alignment is 8 and
// verify_calls ended on it): max_ctas must start exactly there.
static_assert(kCommConfigV5Bytes == offsetof(arfCommConfig_t, verify_calls) + sizeof(int) &&
              kCommConfigV5Bytes % alignof(arfCommConfig_t) == 0);
// arfPlanFacts_t::max_ctas (version 6) took the tail padding of the version 4-5 struct: the size
// did not change, so the version, not the size, says whether a caller's struct has it.
static_assert(sizeof(arfPlanFacts_t) ==
              (offsetof(arfPlanFacts_t, max_ctas) + alignof(arfPlanFacts_t) - 1) /
                  alignof(arfPlanFacts_t) * alignof(arfPlanFacts_t));

// A debug setting read at creation (arfusion.h): the protocol counters start this many calls
// short of their 32-bit wrap on every rank (workspace.h, allocate_workspace).
inline constexpr const char* kCountersNearWrapEnv = "ARF_DEBUG_COUNTERS_NEAR_WRAP";

// arfCommConfigInit's timeouts, also the bounds of a config that leaves one at 0.
inline constexpr double kDefaultTimeoutSeconds = 10.0;
inline constexpr double kDefaultInitTimeoutSeconds = 60.0;

// The caller's config as a full current struct: a struct of an older version's size is copied
// and the fields it lacks are zero. Any other size is copied whole (validate_config then judges
// it).
arfCommConfig_t upgrade_config(const arfCommConfig_t* caller);

// The bound of every init-time wait: init_timeout_seconds, or kDefaultInitTimeoutSeconds when 0.
double effective_init_timeout(const arfCommConfig_t& c);

// The bytes of the workspace a rank with this config allocates on its device (arfCommWorkspaceBytes).
Result<int64_t> workspace_bytes(const arfCommConfig_t& config);

// Checks a config on its own (no CUDA calls): struct_size/version, world in {1,2,4,8},
// 0 <= rank < world, max_hidden a multiple of 8 in [8, 16384], 1 <= max_tokens <= INT32_MAX,
// dtype bf16/fp16, timeouts finite and >= 0, transport local or ipc.
Status validate_config(const arfCommConfig_t& config);

// The tuning table text rank `rank` contributes to the rendezvous: rank 0 reads the file named by
// `env_value` ($ARF_TUNING_TABLE; null or empty = no table) and validates it; other ranks
// contribute nothing (they use rank 0's). A file that cannot be read or fails validation is an
// error, so creation fails on every rank (rank 0's error reaches the others through abandon()):
// a user who names a table means it to apply, and a silent fall back to the defaults would hide a
// typo until someone measured.
Result<std::string> tuning_table_contribution(int rank, const char* env_value);

// The table every rank of a group plans with: rank 0's (infos[0].tuning_table_json), parsed; null
// when rank 0 had none. Deterministic, so every rank derives an equal table from the same text.
Result<std::shared_ptr<const TuningTable>> agree_tuning_table(
    const std::vector<RankInfo>& infos);

// The plan of a validated call shape (pointers not read): what plan() and arfPlanFromFacts share.
Result<Plan> plan_for_shape(const FusedArgs& args, const StaticFacts& facts,
                            const TuningTable* table);

class Communicator {
 public:
  // Collective (see arfCommInitRank): validates the config, allocates the workspace on
  // config.device, joins the rendezvous and agrees on StaticFacts. Blocks up to
  // init_timeout_seconds. Sets the calling thread's current device. Not graph-capturable.
  static Result<std::unique_ptr<Communicator>> create(const arfCommConfig_t& config);

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();  // leaves the group if destroy() was never called (errors are dropped)

  // Collective, non-blocking across ranks: closes NCCL (bounded; aborted when failed or late, as
  // nccl_api.h shut_down says), synchronizes this rank's device, then leaves the group; the last
  // rank to leave frees every workspace. Call once; later calls are no-ops.
  Status destroy();

  // Pure and rank-symmetric: validate + make_plan. No CUDA calls except the pointer check. `args`
  // is the caller's struct as the C entry point upgraded it (validate.h, FusedArgs).
  Result<Plan> plan(const FusedArgs& args) const;
  // plan() without tensors (arfPlanShape): validate_shape + make_plan, pointers ignored.
  Result<Plan> plan_shape(const FusedArgs& args) const;

  // Stream-ordered fused all-reduce (arfFusedAllReduce). Refuses with CommFailed once failed.
  // Graph-capture safe. One host thread at a time.
  Status fused_allreduce(const FusedArgs& args, cudaStream_t stream);

  // out = sum over ranks of in, as rows of min(count, max_hidden) elements (arfAllReduce).
  Status allreduce(const void* in, void* out, size_t count, arfDataType_t dtype,
                   cudaStream_t stream);

  // Reads the host-mapped ErrorRecords of every rank of the group without synchronizing. After a
  // device timeout (or integrity failure) on any rank, marks the communicator failed and returns
  // (now and forever) arfTimeout (arfInternal) naming the rank, its peer, phase, CTA and call index.
  // Safe to call from another thread while calls run (failure_state.h), not during destroy().
  Status async_error();

  // arfCommGetFirstLostCall: the smallest call index of any rank's error record, or of a call this
  // rank failed on the host; UINT64_MAX while healthy. Thread-safe as async_error.
  uint64_t first_lost_call();

  int rank() const { return rank_; }
  int world() const { return facts_.world; }
  int device() const { return device_; }
  const StaticFacts& facts() const { return facts_; }
  // Rank 0's tuning table, shared by every rank's plans; null when none was loaded.
  const TuningTable* tuning_table() const { return tuning_table_.get(); }
  // The plan of the last successful launch (default-constructed before the first).
  const Plan& last_plan() const { return last_plan_; }
  // Whether this communicator's kernels run the per-call integrity check (agreed at creation).
  int verify_calls() const { return base_params_.verify_calls; }
  // This rank's protocol state on its device (tests corrupt it to prove the integrity check).
  ControlBlock* control_block() const { return base_params_.ctrl; }
  // arfCommGetInputBuffer: this rank's copy-in region (max_tokens x max_hidden elements), which
  // peers read in place. A call whose input starts there skips the copy (oneshot_pull.cuh).
  InputBuffer input_buffer() const {
    return {base_params_.peers.pull[rank_],
            static_cast<uint64_t>(facts_.max_tokens) * static_cast<uint64_t>(facts_.max_hidden) * 2};
  }

 private:
  Communicator() = default;
  // The one way the communicator fails: records the first reason (later ones are dropped), tells
  // device mates waiting on this rank's enqueues (Group::mark_failed), and returns the failure.
  Status fail(Status why);
  // Same call on every rank (Group::record_call): a mismatch, or a peer that refused this call,
  // fails the communicator and releases the mates' waiting kernels (nothing is launched here).
  Status check_same_call(const local::CallSignature& signature, cudaStream_t stream);
  // A call refused before launch (`why`, from validation or planning). With tokens it takes its
  // place in the call sequence: refused on every rank it is harmless (returns `why`, the
  // communicator stays usable); if a peer launched it, the communicator fails on every rank, the
  // peers' kernels are released, and the caller gets why's code with that explanation.
  Status refuse(Status why, bool has_tokens, cudaStream_t stream);
  // Enqueues the release kernel (launch/release.h) on `stream`, behind this rank's earlier calls:
  // every rank's kernels of this call and later ones give up at once instead of at the bound.
  // Skipped while `stream` captures (the bound still ends the waits). Best effort.
  void release_peers(cudaStream_t stream);
  Status launch_checked(const Plan& plan, Pattern pattern, const KernelParams& params,
                        cudaStream_t stream);
  // The `nccl` algorithm: ncclAllReduce into the output (or norm_out / scratch), then our epilogue.
  Status launch_nccl(const Plan& plan, Pattern pattern, const KernelParams& params,
                     cudaStream_t stream);
  // Collective, at the end of create: decides from agreed facts whether to try NCCL, creates this
  // rank's NCCL communicator, and agrees with every rank whether all succeeded (facts_.nccl).
  // Errors only when the group itself fails; NCCL being unusable is recorded in nccl_why_.
  Status setup_nccl(double timeout_seconds);

  int rank_ = 0;
  int device_ = 0;
  StaticFacts facts_;
  std::shared_ptr<const TuningTable> tuning_table_;  // immutable; null = built-in defaults
  nccl::Comm nccl_;        // ready iff facts_.nccl
  std::string nccl_why_;   // why facts_.nccl is false (plans of a forced nccl call quote it)
  std::shared_ptr<Group> group_;  // local or ipc; null once destroyed
  // Every rank's error record (owned by the group, alive until the last rank leaves), own first.
  // A peer's expired wait matters to us too: once it gave up, our later barriers can be satisfied
  // by its later flags and return wrong data without any wait of ours expiring.
  std::vector<const ErrorRecord*> error_records_;
  KernelParams base_params_{};  // everything but the call's shape and tensors, built once
  PointerCheck pointer_check_;
  Plan last_plan_;
  StreamOrderCheck stream_check_;  // ARF_DEBUG_CHECKS=1 only
  uint64_t calls_issued_ = 0;      // calls with tokens, for the cross-rank signature check
  uint64_t kernels_enqueued_ = 0;  // launched kernels, for the virtual-rank enqueue order (local.h)
  // Eager calls that launched collective kernels (custom algorithms): the device call index of
  // the next such call while no graph replays interleave. Names a call that failed on the host.
  // Written by the calling thread, read by a polling one (first_lost_call).
  std::atomic<uint64_t> collective_calls_enqueued_{0};
  double timeout_seconds_ = 0;   // bound of device waits and of the enqueue-order wait
  // Set by fail() only (comm_errors.cc), never cleared; with the first lost call the host knows.
  FailureState failure_;
};

}  // namespace arf
