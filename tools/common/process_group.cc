// The multi-process run's host channel (process_group.h).
#include "process_group.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "export/tool_api.h"

namespace arf {

std::unique_ptr<ProcessGroup> ProcessGroup::from_env(double timeout_seconds, std::string* why) {
  why->clear();
  if (std::getenv(kEnvRendezvousId) == nullptr) return nullptr;
  Result<EnvPlacement> place = placement_from_env();
  if (!place.is_ok()) {
    *why = place.status().message();
    return nullptr;
  }
  Result<ipc::UniqueId> id = ipc::UniqueId::parse(place.value().rendezvous_id);
  if (!id.is_ok()) {
    *why = std::string(kEnvRendezvousId) + ": " + id.status().message();
    return nullptr;
  }
  ipc::UniqueId derived = id.value();
  derived.bytes[0] ^= 0xB5;  // any fixed change: a key of its own, the same on every rank
  Result<ipc::Bootstrap> joined = ipc::Bootstrap::connect(
      derived, place.value().rank, place.value().world_size, timeout_seconds);
  if (!joined.is_ok()) {
    *why = "the tool's host group: " + joined.status().message();
    return nullptr;
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(joined.take(), place.value().device));
}

void ProcessGroup::fail(const std::string& what, const Status& s) {
  if (error_.empty()) error_ = what + ": " + s.message();
}

bool ProcessGroup::vote(bool ok) {
  if (!error_.empty()) return false;
  Result<ipc::VoteResult> v = bootstrap_.vote(ok);
  if (!v.is_ok()) {
    fail("vote", v.status());
    return false;
  }
  return v.value().all_yes;
}

void ProcessGroup::barrier() {
  if (!error_.empty()) return;
  if (Status s = bootstrap_.barrier(); !s.is_ok()) fail("barrier", s);
}

std::vector<std::string> ProcessGroup::all_gather(const std::string& mine) {
  std::vector<std::string> out(static_cast<size_t>(world()));
  if (!error_.empty()) return out;
  // The bootstrap gathers equal sizes: lengths first, then every blob padded to the longest.
  Result<std::vector<uint64_t>> lengths = bootstrap_.all_gather_value<uint64_t>(mine.size());
  if (!lengths.is_ok()) {
    fail("all_gather (lengths)", lengths.status());
    return out;
  }
  uint64_t longest = 0;
  for (uint64_t n : lengths.value()) longest = std::max(longest, n);
  std::vector<uint8_t> padded(longest, 0);
  std::memcpy(padded.data(), mine.data(), mine.size());
  Result<std::vector<uint8_t>> all = bootstrap_.all_gather(padded);
  if (!all.is_ok()) {
    fail("all_gather", all.status());
    return out;
  }
  for (size_t r = 0; r < out.size(); ++r) {
    const char* at = reinterpret_cast<const char*>(all.value().data()) + r * longest;
    out[r].assign(at, lengths.value()[r]);
  }
  return out;
}

}  // namespace arf
