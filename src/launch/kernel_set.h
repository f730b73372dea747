// The kernel set: what the library builds (the rows of kernel_set.def, as the constexpr table
// kKernelRows) and which of those kernels a call launches (call_kernels). Everything else reads the
// set from here: the build's translation units and kernel count (write_kernel_units.cc, run by
// cmake/kernel_rows.cmake), the launcher's kernel table (launch.cu: launch and preload,
// kernel_index) and the CPU tests, so a kernel a plan can reach but the build lacks is a CPU test
// failure, not a launch-time surprise.
// Host C++ only (no CUDA): the device side of a row is kernel_row.cuh.
#pragma once

#include <array>
#include <cstddef>
#include <span>

#include "common/kernel_params.h"
#include "common/launch_plan.h"

namespace arf {

// The kernel templates: the three all-reduce algorithms (oneshot_lamport.cuh, oneshot_pull.cuh,
// twoshot.cuh) and the local epilogue kernel (local_epilogue.cuh).
enum class KernelKind : int { kOneshotLamport = 0, kOneshotPull = 1, kTwoshot = 2, kLocalEpilogue = 3 };

constexpr const char* kernel_kind_name(KernelKind kernel) {
  switch (kernel) {
    case KernelKind::kOneshotLamport: return "oneshot_lamport";
    case KernelKind::kOneshotPull: return "oneshot_pull";
    case KernelKind::kTwoshot: return "twoshot";
    case KernelKind::kLocalEpilogue: return "local_epilogue";
  }
  return "unknown";
}

// The epilogues of a row, by pattern:
//   kPlain      allreduce (AllReduceEpilogue), residual_rmsnorm (ResidualRmsNormEpilogue)
//   kNorm       residual_rmsnorm only (the local epilogue: allreduce has none)
//   kQuant      the five quantized patterns, norm + quantization (ResidualRmsNormQuantEpilogue)
//   kQuantOnly  the five quantizers over an already normalised row (QuantOnlyEpilogue; level 2)
enum class PatternSet : int { kPlain = 0, kNorm = 1, kQuant = 2, kQuantOnly = 3 };

constexpr const char* pattern_set_name(PatternSet set) {
  switch (set) {
    case PatternSet::kPlain: return "plain";
    case PatternSet::kNorm: return "norm";
    case PatternSet::kQuant: return "quant";
    case PatternSet::kQuantOnly: return "quant_only";
  }
  return "unknown";
}

inline constexpr std::array<Pattern, 2> kPlainPatterns = {Pattern::kAllReduce, Pattern::kResidualRmsNorm};
inline constexpr std::array<Pattern, 1> kNormPatterns = {Pattern::kResidualRmsNorm};
inline constexpr std::array<Pattern, 5> kQuantPatterns = {Pattern::kFp8PerTensor, Pattern::kFp8PerToken,
                                                          Pattern::kFp8PerGroup, Pattern::kNvfp4, Pattern::kMxfp4};

constexpr std::span<const Pattern> patterns_in(PatternSet set) {
  switch (set) {
    case PatternSet::kPlain: return kPlainPatterns;
    case PatternSet::kNorm: return kNormPatterns;
    default: return kQuantPatterns;
  }
}

// Vectors per thread a kernel is built for (its register arrays are sized to the row).
inline constexpr std::array<int, 2> kVecCounts = {1, 2};
static_assert(kVecCounts.back() == kMaxVecsPerThread);

// One row of kernel_set.def. worlds: the world sizes built, 0-padded (none for the local epilogue).
struct KernelRow {
  DType dtype;
  KernelKind kernel;
  PatternSet patterns;
  std::array<int, 4> worlds;

  constexpr int num_worlds() const {
    int n = 0;
    for (int w : worlds) n += w != 0;
    return n;
  }
  constexpr bool has_world(int world) const {
    for (int w : worlds) {
      if (world != 0 && w == world) return true;
    }
    return false;
  }
  friend constexpr bool operator==(const KernelRow&, const KernelRow&) = default;

  // Kernels the row builds.
  constexpr int num_kernels() const {
    const int worlds_built = kernel == KernelKind::kLocalEpilogue ? 1 : num_worlds();
    return worlds_built * static_cast<int>(patterns_in(patterns).size() * kVecCounts.size());
  }
};

inline constexpr KernelRow kKernelRows[] = {
#define ARF_KERNEL_ROW(dtype, kernel, patterns, ...) \
  KernelRow{DType::dtype, KernelKind::kernel, PatternSet::patterns, {__VA_ARGS__}},
#include "launch/kernel_set.def"
#undef ARF_KERNEL_ROW
};

constexpr bool row_declared(const KernelRow& row) {
  for (const KernelRow& r : kKernelRows) {
    if (r == row) return true;
  }
  return false;
}

constexpr int declared_kernel_count() {
  int n = 0;
  for (const KernelRow& row : kKernelRows) n += row.num_kernels();
  return n;
}

// The stress tool's diagnostic library variants (cmake/stress.cmake: negative controls, debug
// stall) build the bf16 kernels of the unquantized patterns only: all arfusion-stress drives, and
// small enough to ship to a GPU machine. write_kernel_units.cc lists the other rows' translation
// units for cmake/stress.cmake to leave out of those variants.
constexpr bool in_diagnostic_subset(const KernelRow& row) {
  return row.dtype == DType::kBf16 && (row.patterns == PatternSet::kPlain || row.patterns == PatternSet::kNorm);
}

// Whether this build compiles the row's kernels (every row, except in the diagnostic variants).
constexpr bool row_in_build(const KernelRow& row) {
#if defined(ARF_DIAGNOSTIC_KERNEL_SUBSET)
  return in_diagnostic_subset(row);
#else
  (void)row;
  return true;
#endif
}

// One kernel: a row's (dtype, kernel, patterns) and one of its worlds (0 for the local epilogue),
// patterns and vector counts.
struct KernelKey {
  DType dtype = DType::kBf16;
  KernelKind kernel = KernelKind::kOneshotLamport;
  int world = 0;
  PatternSet patterns = PatternSet::kPlain;
  Pattern pattern = Pattern::kAllReduce;
  int vecs = 1;

  friend constexpr bool operator==(const KernelKey&, const KernelKey&) = default;
};

constexpr bool row_has(const KernelRow& row, const KernelKey& key) {
  if (row.dtype != key.dtype || row.kernel != key.kernel || row.patterns != key.patterns) return false;
  if (key.kernel == KernelKind::kLocalEpilogue ? key.world != 0 : !row.has_world(key.world)) return false;
  bool pattern_ok = false;
  for (Pattern p : patterns_in(row.patterns)) pattern_ok |= p == key.pattern;
  bool vecs_ok = false;
  for (int v : kVecCounts) vecs_ok |= v == key.vecs;
  return pattern_ok && vecs_ok;
}

// Whether kernel_set.def declares the kernel (built or not in this configuration).
constexpr bool declared(const KernelKey& key) {
  for (const KernelRow& row : kKernelRows) {
    if (row_has(row, key)) return true;
  }
  return false;
}

// Position of `value` in `values`, -1 when absent.
template <typename T, size_t kN>
constexpr int index_of(const std::array<T, kN>& values, const T& value) {
  for (size_t i = 0; i < kN; ++i) {
    if (values[i] == value) return static_cast<int>(i);
  }
  return -1;
}

// The kernel's place among the declared kernels, in [0, declared_kernel_count()): the rows in
// kernel_set.def's order, each row's kernels by world, pattern, vector count (the order
// kernel_row.cuh builds them in); -1 when no row declares it. The launcher's kernel table has one
// slot per declared kernel, at this index.
constexpr int kernel_index(const KernelKey& key) {
  int first = 0;
  for (const KernelRow& row : kKernelRows) {
    if (row_has(row, key)) {
      const int world = key.kernel == KernelKind::kLocalEpilogue ? 0 : index_of(row.worlds, key.world);
      const std::span<const Pattern> patterns = patterns_in(row.patterns);
      int pattern = 0;
      while (patterns[static_cast<size_t>(pattern)] != key.pattern) ++pattern;
      const int vecs = index_of(kVecCounts, key.vecs);
      const int per_world = static_cast<int>(patterns.size() * kVecCounts.size());
      return first + world * per_world + pattern * static_cast<int>(kVecCounts.size()) + vecs;
    }
    first += row.num_kernels();
  }
  return -1;
}

// Vectors per thread for a row of row_elems columns in blocks of `block` threads: 1 or 2
// (precondition: ceil(row_vecs / block) <= kMaxVecsPerThread, as block_threads_for_row's blocks give).
constexpr int vecs_per_thread(int row_elems, int block) {
  const int row_vecs = (row_elems + kElemsPerVec - 1) / kElemsPerVec;
  const int per_thread = (row_vecs + block - 1) / block;
  return per_thread <= 1 ? 1 : 2;
}

// The algorithms with an all-reduce kernel of their own (unfused runs one of them, nccl NCCL's).
constexpr bool is_fused_algorithm(Algorithm a) {
  return a == Algorithm::kOneshotLamport || a == Algorithm::kOneshotPull || a == Algorithm::kTwoshot;
}

// The all-reduce kernel of a fused algorithm (precondition: is_fused_algorithm) for `pattern`. World 1 has no peer: every algorithm is the epilogue over the input, which is
// oneshot_lamport's world-1 kernel (a streaming kernel without protocol state, the same
// epilogue type and row code, hence the same rows; kernel_set.def builds no other world-1 kernel).
constexpr KernelKey allreduce_kernel_key(DType dtype, Algorithm algorithm, int world, Pattern pattern, int vecs) {
  KernelKey key;
  key.dtype = dtype;
  key.world = world;
  key.kernel = world == 1                            ? KernelKind::kOneshotLamport
               : algorithm == Algorithm::kOneshotPull ? KernelKind::kOneshotPull
               : algorithm == Algorithm::kTwoshot     ? KernelKind::kTwoshot
                                                      : KernelKind::kOneshotLamport;
  key.patterns = is_quant_pattern(pattern) ? PatternSet::kQuant : PatternSet::kPlain;
  key.pattern = pattern;
  key.vecs = vecs;
  return key;
}

// The local epilogue kernel over already all-reduced rows: residual + RMSNorm (+ quantization),
// or with quant_only the quantizer alone over a normalised row (fallback level 2).
constexpr KernelKey epilogue_kernel_key(DType dtype, Pattern pattern, int vecs, bool quant_only) {
  KernelKey key;
  key.dtype = dtype;
  key.kernel = KernelKind::kLocalEpilogue;
  key.world = 0;
  key.patterns = !is_quant_pattern(pattern) ? PatternSet::kNorm
                 : quant_only               ? PatternSet::kQuantOnly
                                            : PatternSet::kQuant;
  key.pattern = pattern;
  key.vecs = vecs;
  return key;
}

// Rows staged through shared memory (streaming_epilogue.cuh, stream_staged_rows): the kernels that
// wait for no peer (world 1, the local epilogue), for the epilogues where staging was measured
// faster than the register loop (one H200, hidden 8192 with 512-thread blocks, the same run:
// residual + RMSNorm 0.2-20% faster at every token count 1..16384, FP8 per-tensor 3-19% faster
// but for +4% at 1024 tokens). FP8 per-token and per-group stage too (another run: 1-19% faster at
// every token count but +0.8% per-token at 1024; per-group had been 3-10% slower staged while its
// kernels held the scale addressing in registers and spilled); FP4 keeps the register loop (not
// measured staged). Each CTA keeps kStagedRowBuffers rows of input and residual_in in shared
// memory instead of registers. The host passes the buffers as dynamic shared memory
// (staged_rows_smem_bytes); kernel_row.cuh asserts, per built kernel, that the epilogue type's
// kStagesRows says the same. The buffer count is kStagedRowBuffers (kernel_params.h).
constexpr bool stages_rows(const KernelKey& key) {
  const bool streaming = key.kernel == KernelKind::kLocalEpilogue || key.world == 1;
  const bool fp8 = key.pattern == Pattern::kFp8PerTensor || key.pattern == Pattern::kFp8PerToken ||
                   key.pattern == Pattern::kFp8PerGroup;
  const bool staged_epilogue =
      key.pattern == Pattern::kResidualRmsNorm || (fp8 && key.patterns == PatternSet::kQuant);
  return streaming && staged_epilogue;
}
// Dynamic shared memory of a launch of `key` over rows of row_elems columns (0 unless it stages):
// kStagedRowBuffers x (input row + residual_in row).
constexpr size_t staged_rows_smem_bytes(const KernelKey& key, int row_elems) {
  if (!stages_rows(key)) return 0;
  const size_t row_vecs = static_cast<size_t>((row_elems + kElemsPerVec - 1) / kElemsPerVec);
  return static_cast<size_t>(kStagedRowBuffers) * 2 * row_vecs * 16;
}
// The inverse: the widest row (a multiple of kElemsPerVec columns) whose staged rows fit in
// `bytes` of dynamic shared memory, for the error that names the largest max_hidden a device
// allows.
constexpr int64_t widest_staged_row(size_t bytes) {
  constexpr size_t kBytesPerVec = static_cast<size_t>(kStagedRowBuffers) * 2 * 16;
  return static_cast<int64_t>(bytes / kBytesPerVec) * kElemsPerVec;
}
// The most any staged launch takes (rows of kMaxBlockThreads x kMaxVecsPerThread vectors): set
// once per kernel as its dynamic shared memory limit (launch.cu, preload_kernels). A launch takes
// bytes in proportion to its row, at most kMaxVecsPerThread vectors a thread, so the CTAs an SM
// keeps resident (resident_ctas_per_sm: kResidentThreadsPerSm threads) must fit in its 227 KiB
// with kResidentThreadsPerSm x kMaxVecsPerThread vectors of rows, 1 KiB reserved per CTA by the
// runtime and the kernels' static shared memory (under 1 KiB) beside them.
inline constexpr size_t kMaxStagedRowsSmemBytes =
    static_cast<size_t>(kStagedRowBuffers) * 2 * kMaxBlockThreads * kMaxVecsPerThread * 16;
static_assert(static_cast<size_t>(kStagedRowBuffers) * 2 * kResidentThreadsPerSm * kMaxVecsPerThread * 16 +
                  resident_ctas_per_sm(kNarrowBlockThreads) * 2 * 1024 <=
              227 * 1024);

// The host side of a built kernel: its key and its entry point (a kernel takes KernelParams by
// value). Each row's entries come from its translation unit (kernel_row.cuh, row_kernels); the
// launcher indexes all of them by key (launch.cu).
using KernelFn = void (*)(KernelParams);
struct KernelEntry {
  KernelKey key;
  KernelFn fn = nullptr;
};

// Defined in kernel_row.cuh, explicitly instantiated once per row by the translation units that
// write_kernel_units.cc writes from kernel_set.def. Empty for a row outside this build
// (row_in_build).
template <DType kDType, KernelKind kKernel, PatternSet kPatterns, int... kWorlds>
std::span<const KernelEntry> row_kernels();

// How a call's kernels are chained (launch.cu rewrites the parameters of each accordingly):
//   kOneKernel  the fused kernel with the pattern's epilogue
//   kUnfused    unfused and level 3: the all-reduce kernel (pattern allreduce) writes the sum,
//               the local epilogue kernel reads it (none for pattern allreduce)
//   kLevel2     the fused all-reduce + residual_rmsnorm kernel writes the norm, the local
//               quantize-only kernel reads it
enum class KernelChain : int { kOneKernel = 0, kUnfused = 1, kLevel2 = 2 };

// The collective and epilogue kernels of one call, in launch order (the shared-device gate, which
// does not depend on the pattern, is not listed).
struct CallKernels {
  KernelChain chain = KernelChain::kOneKernel;
  std::array<KernelKey, 2> keys{};
  int count = 0;
};

// What launch() launches for (plan, pattern, dtype) on a communicator of `world` ranks, with the
// call's fallback level (quantized patterns) and row width. A pure function of its arguments;
// count 0 when the plan names no fused algorithm to run (auto, nccl: launch() never gets those).
constexpr CallKernels call_kernels(const LaunchPlan& plan, Pattern pattern, DType dtype, int world,
                                   int fallback_level, int row_elems) {
  const int vecs = vecs_per_thread(row_elems, plan.block);
  CallKernels out;
  const bool unfused = plan.algorithm == Algorithm::kUnfused;
  if (!is_fused_algorithm(unfused ? plan.inner_allreduce : plan.algorithm)) return out;
  if (unfused) {
    out.chain = KernelChain::kUnfused;
    out.keys[out.count++] = allreduce_kernel_key(dtype, plan.inner_allreduce, world, Pattern::kAllReduce, vecs);
    if (pattern != Pattern::kAllReduce) out.keys[out.count++] = epilogue_kernel_key(dtype, pattern, vecs, false);
  } else if (is_quant_pattern(pattern) && fallback_level == 2) {
    out.chain = KernelChain::kLevel2;
    out.keys[out.count++] = allreduce_kernel_key(dtype, plan.algorithm, world, Pattern::kResidualRmsNorm, vecs);
    out.keys[out.count++] = epilogue_kernel_key(dtype, pattern, vecs, true);
  } else {
    out.keys[out.count++] = allreduce_kernel_key(dtype, plan.algorithm, world, pattern, vecs);
  }
  return out;
}

}  // namespace arf
