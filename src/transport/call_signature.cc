// CallSignatureLog: see call_signature.h.
#include "transport/call_signature.h"

namespace arf::local {

std::string CallSignature::text() const {
  return "{pattern " + std::to_string(pattern) + ", algorithm " + std::to_string(algorithm) +
         ", fallback " + std::to_string(fallback) + ", dtype " + std::to_string(dtype) + ", " +
         std::to_string(num_elems) + " elements in rows of " + std::to_string(row_elems) + "}";
}

CallSignatureLog::CallSignatureLog(size_t window) : ring_(window == 0 ? 1 : window) {}

Status CallSignatureLog::record(int rank, uint64_t call_index, const CallSignature& signature) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = ring_[call_index % ring_.size()];
  if (slot.call_index == UINT64_MAX || slot.call_index < call_index) {
    slot = Slot{call_index, rank, signature};  // first rank to reach this call (or a newer lap)
    return Status::ok();
  }
  if (slot.call_index > call_index) return Status::ok();  // lapped: too far behind to compare
  if (slot.signature == signature) return Status::ok();
  return invalid_argument("call " + std::to_string(call_index) + ": rank " + std::to_string(rank) +
                          " issued " + signature.text() + " but rank " +
                          std::to_string(slot.first_rank) + " issued " + slot.signature.text() +
                          "; every rank must issue the same sequence of calls");
}

}  // namespace arf::local
