// The communicator's failure state (communicator.h): the one way it fails (fail), the device error
// records of every rank read and reported (async_error), and the first call that may be lost.
#include "core/communicator.h"

#include <algorithm>
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

}  // namespace

// Kernels write these codes into the error records that async_error reports as arfStatus_t.
static_assert(kErrorCodeTimeout == arfTimeout && kErrorCodeInternal == arfInternal);

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

}  // namespace arf
