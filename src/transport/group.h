// What a communicator needs from its transport once the ranks have met: every rank's facts and
// workspace (peer pointers valid in THIS process), leaving, and the per-call coordination that
// only ranks of one process can do. Implemented by local::LocalGroup (all ranks in one process,
// transport/local.h) and ipc::IpcGroup (one process per rank, transport/ipc.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "common/kernel_params.h"
#include "transport/call_signature.h"
#include "transport/workspace.h"

namespace arf {

// What a rank contributes to the rendezvous and every rank sees of every other.
struct RankInfo {
  int device = -1;      // CUDA ordinal in the contributing rank's process
  // Ranks with equal keys share one GPU (local: the ordinal; ipc: the first rank whose device has
  // the same UUID), which is what co-residency and enqueue-order rules depend on.
  int device_key = -1;
  int sm_count = 0;
  Workspace workspace;  // peer pointers: lamport(), pull(), scatter(), gather(), flags()
  // Capacity the workspace was sized for; must agree on every rank or peers would index past each
  // other's buffers and plans would differ.
  DType dtype = DType::kBf16;
  int64_t max_tokens = 0;
  int64_t max_hidden = 0;
  int64_t oneshot_max_tokens = 0;
  // ARF_DEBUG_COUNTERS_NEAR_WRAP: this rank's protocol counters start this many calls short of
  // 2^32 (0: at 0; workspace.h). Must agree, or a rank would wait for epochs no peer writes.
  uint32_t counters_near_wrap = 0;
  // arfCommConfig_t::max_ctas (0: no bound). Must agree: plans depend on it.
  int max_ctas = 0;
  // This rank asked for the per-call integrity check (config or ARF_VERIFY_CALLS). The ranks need
  // not agree: the communicator runs the check on every rank when any asked (comm_create.cc).
  bool verify_calls = false;
  // Rank 0's tuning table (JSON text, already validated by rank 0; empty = none). Only rank 0's is
  // read: every rank parses infos()[0]'s, so all plan with one table whatever their environments.
  // Carried as text so the transport stays free of policy types (the ipc bootstrap sends bytes).
  std::string tuning_table_json;
};

// Settings every rank of a group must share beyond its capacity (which each transport checks as
// it forms): OK, or InvalidArgument naming rank 0's value and the first rank that differs. Pure,
// so every rank derives the same verdict from the same infos (agreement.cc).
Status check_same_settings(const std::vector<RankInfo>& infos);

class Group {
 public:
  virtual ~Group() = default;
  int world() const { return static_cast<int>(infos().size()); }
  // Every rank's info, indexed by rank; immutable once the group is formed.
  virtual const std::vector<RankInfo>& infos() const = 0;

  // This rank is done with the group. Preconditions: called once per rank, after the rank's
  // device work has completed (the communicator synchronizes its device first). Never blocks on
  // other ranks. Returns the first error of releasing memory.
  virtual Status leave(int rank) = 0;

  // Ranks that share a GPU *and* its hardware queues (one process) must enqueue kernel i of every
  // rank before kernel i+1 of any rank (local.h explains the deadlock). Ranks in different
  // processes never share queues (contexts time-slice), so ipc never orders.
  virtual bool shares_device(int rank) const = 0;
  // Bit r set: rank r shares `rank`'s GPU (in this process, or in another one: MPS runs processes'
  // kernels at once). These are the ranks the shared-device gate (protocol.cuh) waits for.
  virtual uint32_t device_mates_mask(int rank) const = 0;
  virtual Status wait_enqueue_turn(int rank, uint64_t call, double timeout_seconds) const = 0;
  virtual void mark_enqueued(int rank, uint64_t calls) = 0;
  // This rank's communicator failed (`why`): device mates waiting for its enqueues stop waiting
  // and fail with `why` instead of waiting out the bound, and every peer sees it at its next
  // call (peer_failure). The first reason stays. Thread-safe, never blocks.
  virtual void mark_failed(int rank, const Status& why) = 0;
  // The failure of the lowest other rank that marked one, as CommFailed "rank R failed: <why>";
  // OK while none did. Thread-safe, never blocks (a few loads: called before every call).
  virtual Status peer_failure(int rank) const = 0;

  // Every rank's call i must be the same (call_signature.h, compare_calls): a launched call with
  // the same signature, or refused on every rank. InvalidArgument naming both ranks when the later
  // rank launches a different one, CommFailed naming the refusing rank and its reason when one
  // refused what another launched (local: a shared log; ipc: shared rings, shared_call_log.h).
  // Best effort: ranks far apart are not compared.
  virtual Status record_call(int rank, uint64_t call_index, const local::CallEntry& entry) = 0;

  // Why the ranks cannot use each other's memory ("" when they can). Identical on every rank. Only
  // the ipc transport forms a group in that state (its import or probe failed with Unsupported),
  // so that the communicator can run on NCCL instead; peers' workspaces may then be unmapped.
  virtual std::string peer_path_failure() const { return ""; }

  // Collective, after formation (init only): every rank contributes up to kMaxExchangeBytes and
  // every rank receives all contributions, indexed by rank. Bounded by timeout_seconds (Timeout
  // naming the ranks that did not arrive). Lets ranks agree on what each found out alone (whether
  // its NCCL communicator came up) and hand out rank 0's late decisions (the NCCL id), so plans
  // stay identical.
  static constexpr size_t kMaxExchangeBytes = 256;
  virtual Result<std::vector<std::string>> exchange(int rank, const std::string& mine,
                                                    double timeout_seconds) = 0;
};

}  // namespace arf
