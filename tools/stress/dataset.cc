// Data sets and their references (dataset.h).
#include "dataset.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "export/reference_api.h"
#include "schedule.h"

namespace arf::stress {
namespace {

constexpr int64_t kRowsPerTask = 64;

uint64_t mix3(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full ^
               (c + 0x165667B19E3779F9ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void parallel_for(int64_t n, int threads, void (*fn)(int64_t, void*), void* ctx) {
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  const int count = std::max(1, std::min<int>(threads, static_cast<int>(n)));
  for (int t = 0; t < count; ++t) {
    pool.emplace_back([&] {
      for (int64_t i = next++; i < n; i = next++) fn(i, ctx);
    });
  }
  for (std::thread& t : pool) t.join();
}

struct Job {
  const DataOptions* options;
  std::vector<DataSet>* sets;
  int64_t tasks_per_set;
};

// Inputs of one set, in one task per set (fill_random is sequential per seed).
void fill_set(int64_t s, void* ctx) {
  const Job& job = *static_cast<const Job*>(ctx);
  const DataOptions& o = *job.options;
  DataSet& set = (*job.sets)[static_cast<size_t>(s)];
  const int64_t elems = o.rows * o.hidden;
  set.gamma_kind = static_cast<int>(s % kGammaKinds);
  set.inputs.assign(static_cast<size_t>(o.world), std::vector<uint16_t>(static_cast<size_t>(elems)));
  for (int r = 0; r < o.world; ++r) {
    ref::fill_random(set.inputs[r].data(), elems, o.dtype, input_seed(o.seed, static_cast<int>(s), r));
  }
  set.residual.resize(static_cast<size_t>(elems));
  ref::fill_random(set.residual.data(), elems, o.dtype, residual_seed(o.seed, static_cast<int>(s)));
  set.gamma16.resize(static_cast<size_t>(o.hidden));
  ref::fill_random(set.gamma16.data(), o.hidden, o.dtype, gamma_seed(o.seed, static_cast<int>(s)));
  // fp32 gamma: the same draws with bits below the activation dtype's precision, so an fp32 gamma
  // that the kernel rounded to the activation dtype would be caught.
  set.gamma32.resize(static_cast<size_t>(o.hidden));
  for (int64_t c = 0; c < o.hidden; ++c) {
    set.gamma32[c] = ref::to_float(set.gamma16[c], o.dtype) * (1.0f + 0x1.0p-12f);
  }
  set.allreduce.resize(static_cast<size_t>(elems));
  set.residual_out.resize(static_cast<size_t>(elems));
  set.norm_out.resize(static_cast<size_t>(elems));
  set.norm_exact.resize(static_cast<size_t>(elems));
}

// Reference of one block of rows of one set.
void reference_block(int64_t task, void* ctx) {
  const Job& job = *static_cast<const Job*>(ctx);
  const DataOptions& o = *job.options;
  DataSet& set = (*job.sets)[static_cast<size_t>(task / job.tasks_per_set)];
  const int64_t first_row = (task % job.tasks_per_set) * kRowsPerTask;
  const int64_t rows = std::min(kRowsPerTask, o.rows - first_row);
  const int64_t base = first_row * o.hidden;
  ref::FusedInputs in;
  in.dtype = o.dtype;
  in.num_tokens = rows;
  in.hidden = o.hidden;
  for (const auto& input : set.inputs) in.rank_inputs.push_back(input.data() + base);
  in.residual_in = set.residual.data() + base;
  const bool fp32 = gamma_fp32(set.gamma_kind);
  in.gamma = fp32 ? static_cast<const void*>(set.gamma32.data())
                  : static_cast<const void*>(set.gamma16.data());
  in.gamma_dtype = fp32 ? DType::kFp32 : o.dtype;
  in.gamma_offset = gamma_plus_one(set.gamma_kind) ? 1.0f : 0.0f;
  in.eps = o.eps;
  const ref::FusedOutputs out = ref::reference_fused(in);
  std::copy(out.allreduce.begin(), out.allreduce.end(), set.allreduce.begin() + base);
  std::copy(out.residual_out.begin(), out.residual_out.end(), set.residual_out.begin() + base);
  std::copy(out.norm_out.begin(), out.norm_out.end(), set.norm_out.begin() + base);
  std::copy(out.norm_exact.begin(), out.norm_exact.end(), set.norm_exact.begin() + base);
}

}  // namespace

uint64_t input_seed(uint64_t seed, int set, int rank) { return mix3(seed, set, 1000 + rank); }
uint64_t residual_seed(uint64_t seed, int set) { return mix3(seed, set, 1); }
uint64_t gamma_seed(uint64_t seed, int set) { return mix3(seed, set, 2); }

std::vector<DataSet> make_data_sets(const DataOptions& options) {
  std::vector<DataSet> sets(static_cast<size_t>(options.num_sets));
  const int threads = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Job job{&options, &sets, (options.rows + kRowsPerTask - 1) / kRowsPerTask};
  parallel_for(options.num_sets, threads, fill_set, &job);
  parallel_for(options.num_sets * job.tasks_per_set, threads, reference_block, &job);
  return sets;
}

void release_inputs(std::vector<DataSet>* sets) {
  for (DataSet& set : *sets) {
    std::vector<std::vector<uint16_t>>().swap(set.inputs);
    std::vector<uint16_t>().swap(set.residual);
  }
}

int64_t data_set_host_bytes(const DataOptions& o) {
  // inputs (world) + residual + allreduce + residual_out + norm_out at 2 bytes, norm_exact at 8.
  const int64_t elems = o.rows * o.hidden;
  return static_cast<int64_t>(o.num_sets) * elems * (2 * (o.world + 4) + 8);
}

}  // namespace arf::stress
