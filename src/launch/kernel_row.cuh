// The device side of a kernel_set.def row: row_kernels<dtype, kernel, patterns, worlds...>()
// instantiates every kernel of the row (each world x pattern x vector count) and returns their
// entries. Included only by the translation units write_kernel_units.cc writes, one per row, each
// an explicit instantiation of row_kernels for its row, so the rows compile in parallel. The
// epilogue types and kernel templates are the ones every path shares (row_epilogue.cuh,
// quant_epilogue.cuh); this file only names them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "launch/kernel_set.h"
#include "kernels/local_epilogue.cuh"
#include "kernels/oneshot_lamport.cuh"
#include "kernels/oneshot_pull.cuh"
#include "kernels/quant_epilogue.cuh"
#include "kernels/twoshot.cuh"

namespace arf {

template <DType kDType>
struct DTypeOf;
template <>
struct DTypeOf<DType::kBf16> {
  using type = __nv_bfloat16;
};
template <>
struct DTypeOf<DType::kFp16> {
  using type = __half;
};

template <Pattern kPattern>
constexpr auto quantizer_of() {
  if constexpr (kPattern == Pattern::kFp8PerTensor) return std::type_identity<Fp8PerTensorQuant>{};
  else if constexpr (kPattern == Pattern::kFp8PerToken) return std::type_identity<Fp8PerTokenQuant>{};
  else if constexpr (kPattern == Pattern::kFp8PerGroup) return std::type_identity<Fp8PerGroupQuant>{};
  else if constexpr (kPattern == Pattern::kNvfp4) return std::type_identity<Nvfp4Quant>{};
  else {
    static_assert(kPattern == Pattern::kMxfp4, "not a quantized pattern");
    return std::type_identity<Mxfp4Quant>{};
  }
}

// The epilogue type of `kPattern` in pattern set kSet. kStreaming: the kernel never waits for
// peers (a streaming kernel, streaming_epilogue.cuh), so its epilogue holds gamma in registers.
template <typename T, PatternSet kSet, Pattern kPattern, int kVecs, bool kStreaming>
constexpr auto epilogue_of() {
  if constexpr (kSet == PatternSet::kPlain || kSet == PatternSet::kNorm) {
    if constexpr (kPattern == Pattern::kAllReduce) return std::type_identity<AllReduceEpilogue<T, kVecs>>{};
    else return std::type_identity<ResidualRmsNormEpilogue<T, kVecs, kStreaming>>{};
  } else {
    using Quant = typename decltype(quantizer_of<kPattern>())::type;
    if constexpr (kSet == PatternSet::kQuant) {
      return std::type_identity<ResidualRmsNormQuantEpilogue<T, kVecs, Quant, kStreaming>>{};
    } else {
      return std::type_identity<QuantOnlyEpilogue<T, kVecs, Quant, kStreaming>>{};
    }
  }
}

// World-1 fused kernels and the local epilogue kernel never wait for a peer: both run stream_rows.
template <KernelKind kKernel, int kWorld>
inline constexpr bool kStreamingKernel = kKernel == KernelKind::kLocalEpilogue || kWorld == 1;

template <DType kDType, KernelKind kKernel, int kWorld, PatternSet kSet, Pattern kPattern, int kVecs>
KernelEntry kernel_entry() {
  using T = typename DTypeOf<kDType>::type;
  using E = typename decltype(epilogue_of<T, kSet, kPattern, kVecs, kStreamingKernel<kKernel, kWorld>>())::type;
  static_assert(RowEpilogue<E>);
  // The host sizes the dynamic shared memory of a launch from the key (kernel_set.h).
  static_assert(stages_rows(KernelKey{kDType, kKernel, kWorld, kSet, kPattern, kVecs}) ==
                (kStreamingKernel<kKernel, kWorld> && E::kStagesRows));
  KernelFn fn = nullptr;
  if constexpr (kKernel == KernelKind::kOneshotLamport) fn = &oneshot_lamport_kernel<T, kWorld, E>;
  else if constexpr (kKernel == KernelKind::kOneshotPull) fn = &oneshot_pull_kernel<T, kWorld, E>;
  else if constexpr (kKernel == KernelKind::kTwoshot) fn = &twoshot_kernel<T, kWorld, E>;
  else fn = &local_epilogue_kernel<T, E>;
  return KernelEntry{KernelKey{kDType, kKernel, kWorld, kSet, kPattern, kVecs}, fn};
}

// Appends the kernels of one (world, pattern): one per vector count.
template <DType kDType, KernelKind kKernel, int kWorld, PatternSet kSet, Pattern kPattern, size_t kN>
void add_vec_counts(std::array<KernelEntry, kN>& out, size_t& n) {
  [&]<size_t... kV>(std::index_sequence<kV...>) {
    ((out[n++] = kernel_entry<kDType, kKernel, kWorld, kSet, kPattern, kVecCounts[kV]>()), ...);
  }(std::make_index_sequence<kVecCounts.size()>{});
}

template <DType kDType, KernelKind kKernel, PatternSet kPatterns, int... kWorlds>
std::span<const KernelEntry> row_kernels() {
  constexpr KernelRow kRow{kDType, kKernel, kPatterns, {kWorlds...}};
  static_assert(row_declared(kRow), "kernel_row.cuh instantiated for a row kernel_set.def does not list");
  static_assert((kKernel == KernelKind::kLocalEpilogue) == (sizeof...(kWorlds) == 0),
                "the local epilogue lists no world; every other kernel lists at least one");
  if constexpr (!row_in_build(kRow)) {
    return {};
  } else {
    using Entries = std::array<KernelEntry, kRow.num_kernels()>;
    static const Entries entries = [] {
      Entries out{};
      size_t n = 0;
      const auto add_world = [&]<int kWorld>(std::integral_constant<int, kWorld>) {
        [&]<size_t... kP>(std::index_sequence<kP...>) {
          (add_vec_counts<kDType, kKernel, kWorld, kPatterns, patterns_in(kPatterns)[kP]>(out, n), ...);
        }(std::make_index_sequence<patterns_in(kPatterns).size()>{});
      };
      if constexpr (sizeof...(kWorlds) == 0) {
        add_world(std::integral_constant<int, 0>{});
      } else {
        (add_world(std::integral_constant<int, kWorlds>{}), ...);
      }
      return out;
    }();
    return entries;
  }
}

}  // namespace arf
