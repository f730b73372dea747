// launch(): turns a LaunchPlan into kernel launches. Which kernels a call runs is
// kernel_set.h's call_kernels; this file finds them in the kernel table (every row of
// kernel_set.def, each compiled in its own translation unit: kernel_row.cuh), refuses a call whose
// kernels this build lacks before launching anything, and chains them:
//   one kernel           fused algorithm with the pattern's epilogue
//   unfused / level 3    all-reduce kernel -> local epilogue kernel (norm [+ quant])
//   level 2              fused all-reduce + norm kernel -> local quantize-only kernel
#include "launch/launch.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "base/cuda_check.h"
#include "base/names.h"
#include "common/kernel_params.h"
#include "launch/kernel_set.h"
#include "kernels/shared_device_gate.cuh"

namespace arf {
namespace {

// Every built kernel, indexed by key: one slot per declared kernel (kernel_set.h, kernel_index),
// null where this build has no kernel. Filled once, from each row's entries.
class KernelTable {
 public:
  KernelTable() {
    add_rows(std::make_index_sequence<std::size(kKernelRows)>{});
  }

  KernelFn find(const KernelKey& key) const {
    const int i = kernel_index(key);
    return i < 0 ? nullptr : slots_[static_cast<size_t>(i)];
  }
  const std::vector<KernelEntry>& entries() const { return entries_; }

 private:
  // Row kI of kKernelRows, its worlds as a parameter pack (they are packed at the front).
  template <size_t kI, size_t... kW>
  static std::span<const KernelEntry> row(std::index_sequence<kW...>) {
    constexpr KernelRow r = kKernelRows[kI];
    return row_kernels<r.dtype, r.kernel, r.patterns, r.worlds[kW]...>();
  }

  template <size_t... kI>
  void add_rows(std::index_sequence<kI...>) {
    (add_row<kI>(), ...);
  }

  // A row outside this build (row_in_build) is never referenced: its translation unit may be absent.
  template <size_t kI>
  void add_row() {
    if constexpr (row_in_build(kKernelRows[kI])) {
      for (const KernelEntry& e : row<kI>(std::make_index_sequence<kKernelRows[kI].num_worlds()>{})) {
        slots_[static_cast<size_t>(kernel_index(e.key))] = e.fn;
        entries_.push_back(e);
      }
    }
  }

  std::array<KernelFn, declared_kernel_count()> slots_{};
  std::vector<KernelEntry> entries_;
};

const KernelTable& kernel_table() {
  static const KernelTable table;  // thread-safe initialisation, on the first communicator's preload
  return table;
}

std::string describe(const KernelKey& key) {
  const char* set = key.patterns == PatternSet::kQuantOnly ? " (quantize only)" : "";
  std::string text = std::string(kernel_kind_name(key.kernel)) + " kernel for " + dtype_name(key.dtype) +
                     ", pattern " + pattern_name(static_cast<arfPattern_t>(key.pattern)) + set;
  if (key.world != 0) text += ", world " + std::to_string(key.world);
  return text + ", " + std::to_string(key.vecs) + " vectors per thread";
}

// The entry points of the call's kernels, or why this build cannot run them (nothing launched).
Result<std::array<KernelFn, 2>> find_kernels(const CallKernels& call) {
  std::array<KernelFn, 2> fns{};
  for (int i = 0; i < call.count; ++i) {
    const KernelKey& key = call.keys[static_cast<size_t>(i)];
    fns[static_cast<size_t>(i)] = kernel_table().find(key);
    if (fns[static_cast<size_t>(i)] != nullptr) continue;
    if (!declared(key)) return internal_error("no " + describe(key) + " in kernel_set.def");
#if defined(ARF_DIAGNOSTIC_KERNEL_SUBSET)
    return unsupported("this diagnostic build has the bf16 kernels of the unquantized patterns only; no " +
                       describe(key));
#else
    return internal_error("the " + describe(key) + " is declared but not built");
#endif
  }
  return fns;
}

// The second kernel of a split call waits for nobody and keeps no per-CTA state: a streaming
// kernel with the plan's epilogue grid (policy.h, protocol_free_grid_cap), whatever the first
// kernel's co-residency cap (rows are independent: same bits for any grid).
int epilogue_grid(const LaunchPlan& plan, const KernelParams& params) {
  const int64_t rows = std::max<int64_t>(params.num_rows, 1);
  return static_cast<int>(std::clamp<int64_t>(plan.epilogue_grid, 1, std::min<int64_t>(rows, kMaxProtocolFreeGrid)));
}

// <<<grid, block, smem, stream>>>(params), or the same through cudaLaunchKernelEx with the
// programmatic-stream-serialization attribute when params.programmatic_launch (kernels/pdl.cuh).
// smem: the dynamic shared memory of `key` over the call's rows (kernel_set.h,
// staged_rows_smem_bytes; 0 for most kernels).
cudaError_t launch_kernel(KernelFn kernel, const KernelKey& key, int grid, int block, const KernelParams& params,
                          cudaStream_t stream) {
  const size_t smem = staged_rows_smem_bytes(key, params.row_elems);
  if (!params.programmatic_launch) {
    kernel<<<grid, block, smem, stream>>>(params);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(static_cast<unsigned>(block));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, params);
}

// The kernels exist for 1 and 2 vectors a thread: a block that leaves more of a row per thread
// would drop vectors. The planner's blocks (block_threads_for_row) always cover; this keeps a
// planner change from turning into lost outputs.
Status check_block_covers_row(const LaunchPlan& plan, int row_elems) {
  const int row_vecs = (row_elems + kElemsPerVec - 1) / kElemsPerVec;
  if ((row_vecs + plan.block - 1) / plan.block <= kMaxVecsPerThread) return Status::ok();
  return internal_error("plan's block of " + std::to_string(plan.block) + " threads leaves more than " +
                        std::to_string(kMaxVecsPerThread) + " vectors a thread of a row of " +
                        std::to_string(row_elems) + " columns");
}

Status check_launch(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return Status::ok();
  return Status(arfCudaError, std::string("launch of ") + what + " failed: " + cudaGetErrorString(err));
}

// Launches the call's kernels (found by find_kernels) with each kernel's parameters:
//  - unfused and level 3: the all-reduce kernel writes the rounded sum into norm_out (or the local
//    scratch when a quantized pattern has no norm side output); the epilogue kernel then reads it
//    and overwrites it row by row with the norm;
//  - level 2: the fused all-reduce + residual + RMSNorm kernel writes the norm (into norm_out, or
//    the local scratch), then the quantize-only kernel reads it back.
Status launch_chain(const LaunchPlan& plan, Pattern pattern, const CallKernels& call,
                    const std::array<KernelFn, 2>& fns, const KernelParams& params, cudaStream_t stream,
                    const BetweenKernels& between_kernels) {
  if (call.chain == KernelChain::kOneKernel) {
    return check_launch("all-reduce kernel", launch_kernel(fns[0], call.keys[0], plan.grid, plan.block, params, stream));
  }
  KernelParams first = params;
  if (call.chain == KernelChain::kUnfused) {
    if (pattern != Pattern::kAllReduce) {
      first.allreduce_out = params.norm_out != nullptr ? params.norm_out : params.scratch;
    }
  } else if (first.norm_out == nullptr) {
    first.norm_out = params.scratch;
  }
  ARF_RETURN_IF_ERROR(
      check_launch("all-reduce kernel", launch_kernel(fns[0], call.keys[0], plan.grid, plan.block, first, stream)));
  if (call.count == 1) return Status::ok();  // unfused allreduce: no epilogue
  if (between_kernels) ARF_RETURN_IF_ERROR(between_kernels());
  KernelParams second = params;
  second.input = call.chain == KernelChain::kUnfused ? first.allreduce_out : first.norm_out;
  return check_launch("epilogue kernel",
                      launch_kernel(fns[1], call.keys[1], epilogue_grid(plan, second), plan.block, second, stream));
}

// The plan owes the gate whenever ranks share a GPU (captured calls too: the graph replays it);
// a rank launches it when it has device mates (launch_plan.h). The negative-control build
// without it keeps the protocol that deadlocks.
bool needs_gate(const LaunchPlan& plan, const KernelParams& params) {
#if defined(ARF_NEGATIVE_CONTROL_NO_SHARED_DEVICE_GATE)
  (void)plan;
  (void)params;
  return false;
#else
  return launches_shared_device_gate(plan, params.device_mates);
#endif
}

Status launch_gate(const KernelParams& params, cudaStream_t stream) {
  shared_device_gate_kernel<<<1, 32, 0, stream>>>(params);
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::ok();
  return Status(arfCudaError, std::string("launch of the shared-device gate failed: ") +
                                  cudaGetErrorString(err));
}

}  // namespace

Status launch(const LaunchPlan& plan, Pattern pattern, DType dtype, const KernelParams& params,
              cudaStream_t stream, const BetweenKernels& between_kernels) {
  if (dtype != DType::kBf16 && dtype != DType::kFp16) return unsupported("activation dtype must be bf16 or fp16");
  if (plan.block <= 0 || plan.block > kMaxBlockThreads || plan.block % 32 != 0 || plan.grid <= 0) {
    return internal_error("plan has an invalid launch shape");
  }
  ARF_RETURN_IF_ERROR(check_block_covers_row(plan, params.row_elems));
  const CallKernels call = call_kernels(plan, pattern, dtype, params.world, params.fallback_level, params.row_elems);
  if (call.count == 0) return internal_error("no all-reduce kernel for this algorithm");
  Result<std::array<KernelFn, 2>> fns = find_kernels(call);
  if (!fns.is_ok()) return fns.status();
  if (needs_gate(plan, params)) {
    ARF_RETURN_IF_ERROR(launch_gate(params, stream));
    if (between_kernels) ARF_RETURN_IF_ERROR(between_kernels());
  }
  return launch_chain(plan, pattern, call, fns.value(), params, stream, between_kernels);
}

Status launch_epilogue(const LaunchPlan& plan, Pattern pattern, DType dtype, const KernelParams& params,
                       cudaStream_t stream) {
  if (pattern == Pattern::kAllReduce) return internal_error("allreduce has no epilogue");
  if (dtype != DType::kBf16 && dtype != DType::kFp16) return unsupported("activation dtype must be bf16 or fp16");
  ARF_RETURN_IF_ERROR(check_block_covers_row(plan, params.row_elems));
  CallKernels call;
  call.keys[0] = epilogue_kernel_key(dtype, pattern, vecs_per_thread(params.row_elems, plan.block), false);
  call.count = 1;
  Result<std::array<KernelFn, 2>> fns = find_kernels(call);
  if (!fns.is_ok()) return fns.status();
  return check_launch("epilogue kernel",
                      launch_kernel(fns.value()[0], call.keys[0], epilogue_grid(plan, params), plan.block, params, stream));
}

Status preload_kernels(int world, DType dtype, int64_t max_hidden) {
  cudaFuncAttributes attr;
  ARF_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, shared_device_gate_kernel));
#if defined(ARF_DIAGNOSTIC_KERNEL_SUBSET)
  if (dtype != DType::kBf16) return unsupported("this diagnostic build has bf16 kernels only");
#endif
  if (dtype != DType::kBf16 && dtype != DType::kFp16) return unsupported("activation dtype must be bf16 or fp16");
  if (world != 1 && world != 2 && world != 4 && world != 8) {
    return unsupported("world size " + std::to_string(world) + " has no kernels (1, 2, 4, 8)");
  }
  if (max_hidden < 1 || max_hidden > kMaxHidden) return internal_error("max_hidden out of range");
  int device = 0, optin = 0;
  ARF_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  ARF_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  for (const KernelEntry& e : kernel_table().entries()) {
    if (e.key.dtype != dtype || (e.key.world != 0 && e.key.world != world)) continue;
    const void* fn = reinterpret_cast<const void*>(e.fn);
    ARF_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, fn));
    // Staged rows take more than the default 48 KiB of dynamic shared memory: up to 192 KiB at
    // 16384 columns, which Hopper allows a block (227 KiB) and earlier GPUs may not (A100 163 KiB,
    // sm_86/89 99 KiB), so the limit is what this communicator's widest row takes, checked
    // against the device here rather than failing at a launch.
    if (stages_rows(e.key)) {
      const size_t bytes = staged_rows_smem_bytes(e.key, static_cast<int>(max_hidden));
      if (bytes + attr.sharedSizeBytes > static_cast<size_t>(optin)) {
        const int64_t widest = widest_staged_row(static_cast<size_t>(optin) - attr.sharedSizeBytes);
        return unsupported("max_hidden " + std::to_string(max_hidden) + " needs " + std::to_string(bytes) +
                           " bytes of shared memory per block for staged rows, and this device allows " +
                           std::to_string(optin - static_cast<int>(attr.sharedSizeBytes)) +
                           ": create the communicator with max_hidden <= " + std::to_string(widest));
      }
      ARF_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(bytes)));
    }
  }
  return Status::ok();
}

}  // namespace arf
