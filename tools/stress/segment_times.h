// --time-segments: where each rank's stream spends its time, call by call. CUDA events with
// timing bracket the four pieces of a call on the rank's stream (rank_loop.h):
//   generate (its device delay included) | the arfusion call | overwrite | check
// Each piece's time runs from the stream reaching the event before it to reaching the event after
// it, so it includes the wait for SM room beside other ranks' kernels and, for the call, the wait
// for late peers: the four add up to the stream's busy time. A diagnostic of the soak's own
// throughput (which piece to make cheaper); it checks nothing, and it is off by default since the
// timing events cost a little.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace arf::stress {

enum Segment : int { kSegGenerate = 0, kSegCall, kSegOverwrite, kSegCheck, kSegments };

struct SegmentTimes {
  uint64_t calls = 0;
  double ms[kSegments] = {0, 0, 0, 0};

  void add(const float (&piece_ms)[kSegments]);
  void merge(const SegmentTimes& o);
};

// Per pattern name ("all" holds every call).
using SegmentTable = std::map<std::string, SegmentTimes>;

void record_segments(SegmentTable* t, const std::string& pattern, const float (&piece_ms)[kSegments]);

// The report's lines: per pattern, the mean microseconds per call of each piece and its share of
// the stream's busy time, over every rank's calls.
std::vector<std::string> segment_lines(const SegmentTable& t);

}  // namespace arf::stress
