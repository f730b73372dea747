// FailureState and the error-record reader (failure_state.h).
#include "core/failure_state.h"

#include <utility>

namespace arf {
namespace {

// Host-mapped memory written by the device: read through atomic_ref so that a host thread reading
// it concurrently with another is well defined (and the compiler re-reads it on every poll).
template <typename T>
T load_relaxed(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load(std::memory_order_relaxed);
}

}  // namespace

Status FailureState::fail(Status why, bool* recorded) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool first = !failed_.load(std::memory_order_relaxed);
  if (first) {
    failure_ = std::move(why);
    failed_.store(true, std::memory_order_release);
  }
  if (recorded != nullptr) *recorded = first;
  return failure_;
}

Status FailureState::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void FailureState::note_lost_call(uint64_t call) {
  uint64_t seen = lost_call_.load(std::memory_order_relaxed);
  while (call < seen &&
         !lost_call_.compare_exchange_weak(seen, call, std::memory_order_acq_rel)) {
  }
}

std::optional<ErrorRecord> read_error_record(const ErrorRecord* record) {
  const int32_t code =
      std::atomic_ref<int32_t>(const_cast<int32_t&>(record->code)).load(std::memory_order_acquire);
  if (code == 0) return std::nullopt;
  ErrorRecord r{};
  r.code = code;
  r.claim = load_relaxed(record->claim);
  r.rank = load_relaxed(record->rank);
  r.peer = load_relaxed(record->peer);
  r.phase = load_relaxed(record->phase);
  r.cta = load_relaxed(record->cta);
  r.epoch = load_relaxed(record->epoch);
  r.seen_call = load_relaxed(record->seen_call);
  r.call = load_relaxed(record->call);
  r.peer_entered = load_relaxed(record->peer_entered);
  r.peer_completed = load_relaxed(record->peer_completed);
  return r;
}

std::optional<ErrorRecord> first_error_record(const std::vector<const ErrorRecord*>& records) {
  for (const ErrorRecord* record : records) {
    if (std::optional<ErrorRecord> r = read_error_record(record)) return r;
  }
  return std::nullopt;
}

}  // namespace arf
