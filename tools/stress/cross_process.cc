// Step-hash exchange between the rank processes (cross_process.h).
#include "cross_process.h"

#include <algorithm>
#include <cstring>

#include "process_group.h"

namespace arf::stress {
namespace {

// Steps per all_gather: 512 KiB of hashes, under the bootstrap's 1 MiB per-rank blob limit.
constexpr size_t kChunkSteps = size_t{1} << 16;

std::string encode(const uint64_t* begin, size_t count) {
  return std::string(reinterpret_cast<const char*>(begin), count * sizeof(uint64_t));
}

void append_decoded(const std::string& bytes, std::vector<uint64_t>* out) {
  const size_t n = bytes.size() / sizeof(uint64_t);
  const size_t at = out->size();
  out->resize(at + n);
  std::memcpy(out->data() + at, bytes.data(), n * sizeof(uint64_t));
}

}  // namespace

CrossProcessResult compare_step_hashes(ProcessGroup& group, const std::vector<uint64_t>& hashes) {
  CrossProcessResult result;
  const int world = group.world();
  // Lengths first: every process must make the same number of chunk exchanges.
  const uint64_t mine = hashes.size();
  const std::vector<std::string> lengths = group.all_gather(encode(&mine, 1));
  uint64_t longest = 0;
  for (const std::string& l : lengths) {
    if (l.size() == sizeof(uint64_t)) {
      uint64_t n = 0;
      std::memcpy(&n, l.data(), sizeof(n));
      longest = std::max(longest, n);
    }
  }
  std::vector<std::vector<uint64_t>> all(static_cast<size_t>(world));
  for (size_t begin = 0; begin < longest && group.error().empty(); begin += kChunkSteps) {
    const size_t end = std::min<size_t>(hashes.size(), begin + kChunkSteps);
    const std::string part = begin < end ? encode(hashes.data() + begin, end - begin) : "";
    const std::vector<std::string> parts = group.all_gather(part);
    for (int r = 0; r < world; ++r) append_decoded(parts[static_cast<size_t>(r)], &all[r]);
  }
  if (!group.error().empty()) {
    result.error = group.error();
    return result;
  }
  size_t common = all[0].size();
  for (const auto& h : all) common = std::min(common, h.size());
  for (size_t step = 0; step < common; ++step) {
    if (std::any_of(all.begin(), all.end(), [&](const auto& h) { return h[step] == kNoStepHash; }))
      continue;
    ++result.steps_compared;
    for (int r = 1; r < world; ++r) {
      if (all[static_cast<size_t>(r)][step] == all[0][step]) continue;
      if (result.mismatched_steps == 0 || static_cast<int64_t>(step) < result.first_step) {
        result.first_step = static_cast<int64_t>(step);
        result.first_rank = r;
      }
      ++result.mismatched_steps;
      break;
    }
  }
  return result;
}

}  // namespace arf::stress
