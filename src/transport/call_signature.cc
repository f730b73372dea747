// CallSignatureLog and compare_calls: see call_signature.h.
#include "transport/call_signature.h"

namespace arf::local {

std::string CallSignature::text() const {
  return "{pattern " + std::to_string(pattern) + ", algorithm " + std::to_string(algorithm) +
         ", fallback " + std::to_string(fallback) + ", dtype " + std::to_string(dtype) + ", " +
         std::to_string(num_elems) + " elements in rows of " + std::to_string(row_elems) +
         (post_norm != 0 ? ", sandwich" : "") + "}";
}

Status compare_calls(uint64_t call_index, int rank, const CallEntry& mine, int peer,
                     const CallEntry& theirs) {
  if (mine.refused && theirs.refused) return Status::ok();  // nothing launched anywhere
  const std::string call = "call " + std::to_string(call_index) + ": ";
  if (mine.refused || theirs.refused) {
    const int refuser = mine.refused ? rank : peer;
    const int launcher = mine.refused ? peer : rank;
    const std::string& reason = mine.refused ? mine.reason : theirs.reason;
    return Status(arfCommFailed, call + "rank " + std::to_string(refuser) +
                                     " refused this call (" + reason + ") while rank " +
                                     std::to_string(launcher) +
                                     " issued it; the communicator has failed on every rank");
  }
  if (mine.signature == theirs.signature) return Status::ok();
  return invalid_argument(call + "rank " + std::to_string(rank) + " issued " +
                          mine.signature.text() + " but rank " + std::to_string(peer) +
                          " issued " + theirs.signature.text() +
                          "; every rank must issue the same sequence of calls");
}

CallSignatureLog::CallSignatureLog(size_t window) : ring_(window == 0 ? 1 : window) {}

Status CallSignatureLog::record(int rank, uint64_t call_index, const CallEntry& entry) {
  if (rank < 0 || rank >= kMaxRanks) return internal_error("call log: bad rank");
  std::lock_guard<std::mutex> lock(mu_);
  std::array<Slot, kMaxRanks>& slots = ring_[call_index % ring_.size()];
  slots[static_cast<size_t>(rank)] = Slot{call_index, entry};
  for (int peer = 0; peer < kMaxRanks; ++peer) {
    const Slot& theirs = slots[static_cast<size_t>(peer)];
    // A peer not there yet, or lapped (more than a window ahead or behind): not compared.
    if (peer == rank || theirs.call_index != call_index) continue;
    Status same = compare_calls(call_index, rank, entry, peer, theirs.entry);
    if (!same.is_ok()) return same;
  }
  return Status::ok();
}

}  // namespace arf::local
