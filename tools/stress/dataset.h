// The soak's data: a ring of K data sets, generated on the host once, uploaded to the device before
// the first call, with the CPU reference of every row computed up front.
//
// Why rows: every output row depends only on the same row of the inputs (the all-reduce is
// element-wise, RMSNorm is per row). A call of T tokens takes rows [offset, offset + T) of one set,
// so its reference is a slice of the set's precomputed reference and checking a call costs a
// comparison, not a reference computation. That keeps verification of 8 ranks' outputs fast enough
// to check EVERY call, while set x offset still gives each call different data (a missing-barrier bug is
// invisible when a stale buffer happens to hold the same bits).
#pragma once

#include <cstdint>
#include <vector>

#include "export/tool_api.h"

namespace arf::stress {

// RMSNorm epsilon of every call (and of the reference).
inline constexpr float kEps = 1e-6f;

struct DataOptions {
  DType dtype = DType::kBf16;
  int world = 8;
  int num_sets = 8;
  int64_t rows = 1024;   // rows per set
  int64_t hidden = 4096;
  uint64_t seed = 1;
  float eps = kEps;
  int threads = 0;       // 0: hardware concurrency
};

struct DataSet {
  int gamma_kind = 0;  // schedule.h: set % kGammaKinds
  // Inputs (host copies; release_inputs() frees them once they are on the device).
  std::vector<std::vector<uint16_t>> inputs;  // [rank][rows * hidden], distinct per rank
  std::vector<uint16_t> residual;             // [rows * hidden], replicated across ranks (as in TP)
  std::vector<uint16_t> gamma16;              // [hidden] activation dtype
  std::vector<float> gamma32;                 // [hidden] for the fp32-gamma kinds
  // Reference of every row.
  std::vector<uint16_t> allreduce;     // [rows * hidden]
  std::vector<uint16_t> residual_out;  // [rows * hidden]
  std::vector<uint16_t> norm_out;      // [rows * hidden] round(norm_exact)
  std::vector<double> norm_exact;      // [rows * hidden]
};

// Deterministic in options.seed: input of (set, rank), residual and gamma of a set.
uint64_t input_seed(uint64_t seed, int set, int rank);
uint64_t residual_seed(uint64_t seed, int set);
uint64_t gamma_seed(uint64_t seed, int set);

// Generates all sets and their references, in parallel over (set, block of rows).
std::vector<DataSet> make_data_sets(const DataOptions& options);

// Drops the host inputs (the device holds them); the references stay.
void release_inputs(std::vector<DataSet>* sets);

// Bytes of host memory make_data_sets needs, for the setup message.
int64_t data_set_host_bytes(const DataOptions& options);

}  // namespace arf::stress
