// Accumulation and formatting of --time-segments (segment_times.h).
#include "segment_times.h"

#include <cinttypes>
#include <cstdio>

namespace arf::stress {

void SegmentTimes::add(const float (&piece_ms)[kSegments]) {
  ++calls;
  for (int s = 0; s < kSegments; ++s) ms[s] += piece_ms[s];
}

void SegmentTimes::merge(const SegmentTimes& o) {
  calls += o.calls;
  for (int s = 0; s < kSegments; ++s) ms[s] += o.ms[s];
}

void record_segments(SegmentTable* t, const std::string& pattern, const float (&piece_ms)[kSegments]) {
  (*t)[pattern].add(piece_ms);
  (*t)["all"].add(piece_ms);
}

std::vector<std::string> segment_lines(const SegmentTable& t) {
  std::vector<std::string> lines;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-10s %10s %18s %18s %18s %18s", "pattern", "calls", "generate us (%)",
                "call us (%)", "overwrite us (%)", "check us (%)");
  lines.emplace_back(buf);
  for (const auto& [name, s] : t) {
    if (s.calls == 0) continue;
    double busy = 0;
    for (double v : s.ms) busy += v;
    int n = std::snprintf(buf, sizeof buf, "%-10s %10" PRIu64, name.c_str(), s.calls);
    for (int k = 0; k < kSegments && n > 0 && n < static_cast<int>(sizeof buf); ++k) {
      const double us = 1000.0 * s.ms[k] / static_cast<double>(s.calls);
      const double share = busy > 0 ? 100.0 * s.ms[k] / busy : 0.0;
      n += std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), " %11.1f (%3.0f)", us, share);
    }
    lines.emplace_back(buf);
  }
  return lines;
}

}  // namespace arf::stress
