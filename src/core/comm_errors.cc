// The communicator's failure state (communicator.h): the one way it fails (fail), the device error
// records of every rank read and reported (async_error), and the first call that may be lost. The
// last two may run on another thread than the calls (failure_state.h).
#include "core/communicator.h"

#include <algorithm>
#include <optional>
#include <string>

namespace arf {
namespace {

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
  if (r.code == kErrorCodeReleased) {
    return "released: rank " + std::to_string(r.rank) + " stopped waiting for peer " +
           std::to_string(r.peer) + where +
           " because a rank failed the communicator (the ranks no longer issue the same calls); "
           "calls from " + std::to_string(r.call) + " on are lost";
  }
  if (r.code == arfInternal) {
    return "integrity check failed: rank " + std::to_string(r.rank) + " in call " +
           std::to_string(r.call) + " received data of call " + std::to_string(r.seen_call) +
           " (low 32 bits) from peer " + std::to_string(r.peer) + where + peer_state +
           "; calls from " + std::to_string(r.call) + " on are lost";
  }
  return "timeout: rank " + std::to_string(r.rank) + " waited for peer " + std::to_string(r.peer) +
         where + peer_state + "; calls from " + std::to_string(r.call) + " on are lost";
}

}  // namespace

// Kernels write these codes into the error records that async_error reports as arfStatus_t.
static_assert(kErrorCodeTimeout == arfTimeout && kErrorCodeInternal == arfInternal &&
              kErrorCodeReleased == arfCommFailed);

Status Communicator::fail(Status why) {
  bool recorded = false;
  Status failure = failure_.fail(std::move(why), &recorded);
  if (recorded) group_->mark_failed(rank_, failure);
  return failure;
}

Status Communicator::async_error() {
  if (failure_.failed()) return failure_.failure();
  const std::optional<ErrorRecord> r = first_error_record(error_records_);
  // A peer that failed the communicator on the host (a refused call, a mismatch, a failed wait)
  // says why; a released wait does not, so the peer's reason comes first then.
  if (!r || r->code == kErrorCodeReleased) {
    if (Status peer = group_->peer_failure(rank_); !peer.is_ok()) return fail(peer);
  }
  if (!r) return Status::ok();
  const arfStatus_t status =
      r->code > 0 && r->code <= arfCommFailed ? static_cast<arfStatus_t>(r->code) : arfInternal;
  return fail(Status(status, describe_record(*r)));
}

uint64_t Communicator::first_lost_call() {
  (void)async_error();
  uint64_t first = failure_.lost_call();
  for (const ErrorRecord* record : error_records_) {
    if (const std::optional<ErrorRecord> r = read_error_record(record)) first = std::min(first, r->call);
  }
  // A communicator failed by NCCL or a host-side wait before any device record names no index:
  // the call being issued then is the first that may be lost.
  if (failure_.failed() && first == UINT64_MAX) {
    first = collective_calls_enqueued_.load(std::memory_order_relaxed);
  }
  return first;
}

}  // namespace arf
