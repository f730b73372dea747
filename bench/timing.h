// Timing of a collective across rank threads, nccl-tests style: warm up, host barrier, each rank
// times its own region with CUDA events, and the result is the MAX over ranks of elapsed / calls
// (the slowest rank bounds the step of a tensor-parallel model).
//
// With graph replays > 0 every rank stream-captures `iters` calls into one CUDA graph (all ranks
// capture, then all launch concurrently from their threads) and the timed region is `replays`
// graph launches, which removes host launch overhead the way a serving engine's graphs do.
//
// Ranks as processes (arfusion-run): the barrier before the timed region is a socket round trip,
// so each rank first enqueues one untimed call, which lines the ranks up on the device.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

#include "rank_pool.h"

namespace arf::bench {

// Enqueues call number `call` of this rank on `stream`; returns "" or why it failed.
using EnqueueFn = std::function<std::string(int rank, int call, cudaStream_t stream)>;
// Called after the rank's stream drained; returns "" or a device-side failure (e.g. a timeout).
using HealthFn = std::function<std::string(int rank)>;

struct TimingConfig {
  int iters = 20;
  int warmup_iters = 5;
  int graph_replays = 1;  // 0 = eager
  int repeats = 1;        // timed regions, each between host barriers
};

struct Timing {
  double max_us = 0;               // median over repeats of (max over ranks of elapsed / calls)
  std::vector<double> rank_us;     // per rank, the last repeat
  std::vector<double> repeat_us;   // per repeat, max over ranks
  std::string error;               // "" on success (first failing rank's message)
};

// The median of `v` (the mean of the two middle values for an even count); NaN when empty.
double median(std::vector<double> v);

Timing time_collective(RankPool& pool, const std::vector<cudaStream_t>& streams,
                       const EnqueueFn& enqueue, const HealthFn& health, const TimingConfig& cfg);

// Device-to-device copy bandwidth on the current device: median of several cudaMemcpyAsync of
// `bytes`, counting read + write (2 * bytes) per copy. Tries smaller sizes if `bytes` does not fit;
// *bytes_used says what ran. Returns GB/s, or NaN with *error set.
double copy_bandwidth_gbps(int64_t bytes, cudaStream_t stream, int64_t* bytes_used,
                           std::string* error);

}  // namespace arf::bench
