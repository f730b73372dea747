// What happens to a row once its all-reduced value is known: the epilogue types (AllReduceEpilogue,
// ResidualRmsNormEpilogue) and the row slice each thread owns. Every algorithm and the standalone
// epilogue kernel go through the same code with the same block shape, which is why the fused and
// unfused paths are bitwise equal (design.md, numerics contract).
#pragma once

#include <concepts>
#include <cstdint>

#include "kernels/kernel_params.h"
#include "kernels/vec.cuh"

namespace arf {

// Thread t of a CTA of B threads owns vectors t, t + B, t + 2B, ... (kVecs of them at most, a
// compile-time property of the epilogue type so register arrays are sized to the row) of the row:
// coalesced 16-byte accesses, and the same element->thread map in every phase of a kernel, so data
// a thread writes in one phase is read back by the same thread in the next. With B a multiple of
// 32, the vectors k of 2^n aligned adjacent lanes are 2^n adjacent vectors of the row: quantization
// blocks (16, 32, 128 elements) reduce with lane shuffles.
struct RowSlice {
  int64_t row;
  int64_t first_elem;  // row * row_elems
  int row_len;         // elements in this row (the last row of a flat all-reduce may be short)
  int row_vecs;

  __device__ bool owns(int k) const { return vec(k) < row_vecs; }
  __device__ int vec(int k) const { return static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x); }
  __device__ int64_t elem(int k) const { return first_elem + static_cast<int64_t>(vec(k)) * kElemsPerVec; }
};

__device__ __forceinline__ RowSlice row_slice(const KernelParams& p, int64_t row) {
  RowSlice s;
  s.row = row;
  s.first_elem = row * p.row_elems;
  const int64_t left = p.num_elems - s.first_elem;
  s.row_len = static_cast<int>(left < p.row_elems ? left : p.row_elems);
  s.row_vecs = s.row_len / kElemsPerVec;
  return s;
}

struct SumOp {
  __device__ static float apply(float a, float b) { return a + b; }
};
struct MaxOp {  // for non-negative, non-NaN operands (amax partials)
  __device__ static float apply(float a, float b) { return fmaxf(a, b); }
};

// Reduction over 2^n aligned adjacent lanes (xor butterfly; every lane gets the result). All 32
// lanes of the warp must call it.
template <int kLanes, typename Op>
__device__ __forceinline__ float lanes_reduce(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) {
    v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Reduction over the CTA in a fixed order (xor butterfly in each warp, then warps 0..n-1), so a
// sum is the same on every rank and every path that uses the same block size.
template <typename Op>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float warp_partials[kMaxBlockThreads / 32];
  v = lanes_reduce<32, Op>(v);
  __syncthreads();  // the previous row's readers are done with warp_partials
  if ((threadIdx.x & 31) == 0) warp_partials[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = warp_partials[0];
  const int num_warps = static_cast<int>(blockDim.x) >> 5;
  for (int w = 1; w < num_warps; ++w) total = Op::apply(total, warp_partials[w]);
  return total;
}
__device__ __forceinline__ float block_sum(float v) { return block_reduce<SumOp>(v); }

// Round the fp32 sums of one vector to the dtype: the standalone all-reduce's result. -0.0 is
// canonicalised (an fp16 underflow can produce it) so every pushed or returned value is sentinel-free.
template <typename T>
__device__ __forceinline__ uint4 round_sum(const float (&acc)[8]) {
  return canonicalize(pack<T>(acc));
}

template <typename E>
concept RowEpilogue = requires(const KernelParams& p, const RowSlice& s,
                               const uint4 (&ar)[E::kVecs], const typename E::Prefetch& pre) {
  { E::kVecs } -> std::convertible_to<int>;
  { E::prefetch(p, s) } -> std::same_as<typename E::Prefetch>;
  { E::apply(p, s, ar, pre) } -> std::same_as<void>;
  { E::write_scale_padding(p) } -> std::same_as<void>;  // once per CTA, before the rows
};

// Epilogues without scale buffers have no padding to write.
struct NoScalePadding {
  __device__ static void write_scale_padding(const KernelParams&) {}
};

// out = ar.
template <typename T, int kVecsPerThread>
struct AllReduceEpilogue : NoScalePadding {
  static constexpr int kVecs = kVecsPerThread;
  struct Prefetch {};
  __device__ static Prefetch prefetch(const KernelParams&, const RowSlice&) { return {}; }
  __device__ static void apply(const KernelParams& p, const RowSlice& s, const uint4 (&ar)[kVecs],
                               const Prefetch&) {
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (s.owns(k)) st_v4(elem_ptr(p.allreduce_out, s.elem(k)), ar[k]);
    }
  }
};

// gamma (fp32, or the activation dtype) of vector `vec` as 8 floats, offset applied.
template <typename T>
__device__ __forceinline__ void load_gamma(const KernelParams& p, int vec, float (&g)[8]) {
  if (p.gamma_fp32) {
    const float4* g4 = reinterpret_cast<const float4*>(p.gamma) + 2 * vec;
    const float4 a = g4[0], b = g4[1];
    g[0] = a.x; g[1] = a.y; g[2] = a.z; g[3] = a.w; g[4] = b.x; g[5] = b.y; g[6] = b.z; g[7] = b.w;
  } else {
    unpack<T>(ld_v4(elem_ptr(p.gamma, static_cast<int64_t>(vec) * kElemsPerVec)), g);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) g[i] += p.gamma_offset;
}

// Starts pulling a 16-byte gamma vector into L2 without holding registers for it.
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// residual_out = round(ar + residual_in) (= ar without residual_in); norm_out =
// round(residual_out * rsqrt(mean_sq + eps) * g), or with norm_rounding round(round(y * s) * g).
// prefetch() runs before the all-reduced value is waited for, so the memory latency of residual_in
// and gamma overlaps the reduction instead of following it. residual_in goes into registers.
// With kHoldGamma (kernels that never wait for peers: world 1 and the second kernel of a split
// call), gamma in the activation dtype also goes into registers when a thread owns at most two
// vectors (4 registers a vector): at decode sizes the row's critical path is then one memory round
// trip instead of two (inputs, then gamma). Otherwise gamma is only pulled into L2 and loaded while
// the row's sum of squares is reduced: a kernel that waits for peers has time for the L2 prefetch
// to land, and its registers go to the peers' values (the 64-register budget of a 512-thread CTA);
// four vectors, or fp32 gamma (8 registers a vector), cannot spare them either.
template <typename T, int kVecsPerThread, bool kHoldGamma = false>
struct ResidualRmsNormEpilogue : NoScalePadding {
  static constexpr int kVecs = kVecsPerThread;
  static constexpr bool kGammaInRegisters = kHoldGamma && kVecs <= 2;
  struct Prefetch {
    uint4 residual[kVecs];
    uint4 gamma[kGammaInRegisters ? kVecs : 1];  // raw activation-dtype gamma, if held
  };

  __device__ static Prefetch prefetch(const KernelParams& p, const RowSlice& s) {
    Prefetch pre;
    const bool hold_gamma = kGammaInRegisters && !p.gamma_fp32;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k)) continue;
      // No residual (the first layer): residual_out is the all-reduce itself (normalize()).
      if (p.residual_in != nullptr) pre.residual[k] = ld_v4(elem_ptr(p.residual_in, s.elem(k)));
      const int64_t g = static_cast<int64_t>(s.vec(k)) * kElemsPerVec;
      if (hold_gamma) {
        if constexpr (kGammaInRegisters) pre.gamma[k] = ld_v4(elem_ptr(p.gamma, g));
      } else if (p.gamma_fp32) {
        prefetch_l2(static_cast<const float*>(p.gamma) + g);
        prefetch_l2(static_cast<const float*>(p.gamma) + g + 4);
      } else {
        prefetch_l2(elem_ptr(p.gamma, g));
      }
    }
    return pre;
  }

  // Writes residual_out and returns the dtype-rounded norm of each owned vector in `normed`.
  // Called by every thread of the CTA (it contains the row's block reduction).
  __device__ static void normalize(const KernelParams& p, const RowSlice& s, const uint4 (&ar)[kVecs],
                                   const Prefetch& pre, uint4 (&normed)[kVecs]) {
    uint4 res[kVecs];
    float sum_sq = 0.0f;
    const bool has_residual = p.residual_in != nullptr;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k)) continue;
      if (has_residual) {
        float a[8], r[8];
        unpack<T>(ar[k], a);
        unpack<T>(pre.residual[k], r);
#pragma unroll
        for (int i = 0; i < 8; ++i) a[i] = __fadd_rn(a[i], r[i]);
        res[k] = pack<T>(a);
      } else {
        res[k] = ar[k];  // bitwise the all-reduce: no add, so no NaN payload or -0.0 rewriting
      }
      st_v4(elem_ptr(p.residual_out, s.elem(k)), res[k]);
      float y[8];
      unpack<T>(res[k], y);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum_sq = __fmaf_rn(y[i], y[i], sum_sq);
    }
    // 16-bit gamma is read (from prefetch()'s registers, or from L2) while the block reduces, and
    // kept packed (4 registers a vector, not 8 floats); fp32 gamma is read from L2 afterwards.
    uint4 gamma_raw[kVecs];
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k) || p.gamma_fp32) continue;
      if constexpr (kGammaInRegisters) {
        gamma_raw[k] = pre.gamma[k];
      } else {
        gamma_raw[k] = ld_v4(elem_ptr(p.gamma, static_cast<int64_t>(s.vec(k)) * kElemsPerVec));
      }
    }
    const float total = block_sum(sum_sq);
    // A zero sum (an all-zero row: padding) is not divided: __fdiv_rn's slow path for a zero
    // numerator costs every warp of the CTA a long subroutine; 0 / n is +0 all the same.
    const bool zero_row = total == 0.0f;
    const float mean_sq =
        zero_row ? 0.0f : __fdiv_rn(zero_row ? 1.0f : total, static_cast<float>(s.row_len));
    const float scale = rsqrtf(mean_sq + p.eps);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k)) continue;
      float g[8];
      if (p.gamma_fp32) {
        load_gamma<T>(p, s.vec(k), g);
      } else {
        unpack<T>(gamma_raw[k], g);
#pragma unroll
        for (int i = 0; i < 8; ++i) g[i] += p.gamma_offset;
      }
      float y[8];
      unpack<T>(res[k], y);
      if (p.norm_rounding != 0) {
        // arfNormRoundBeforeWeight: the activation-dtype intermediate of vLLM's/SGLang's kernels.
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          y[i] = __fmul_rn(DTypeOps<T>::to_float(DTypeOps<T>::from_float(__fmul_rn(y[i], scale))), g[i]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) y[i] = __fmul_rn(__fmul_rn(y[i], scale), g[i]);
      }
      normed[k] = pack<T>(y);
    }
  }

  __device__ static void apply(const KernelParams& p, const RowSlice& s, const uint4 (&ar)[kVecs],
                               const Prefetch& pre) {
    uint4 normed[kVecs];
    normalize(p, s, ar, pre, normed);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (s.owns(k)) st_v4(elem_ptr(p.norm_out, s.elem(k)), normed[k]);
    }
  }
};

// The row loop every kernel ends with: for each row this CTA owns (b, b + G, ...), start the
// epilogue's prefetch, obtain each owned vector's all-reduced value from value(row_slice, k) (which
// may wait for peers), then apply the epilogue.
template <typename Epilogue, typename ValueFn>
__device__ __forceinline__ void for_each_owned_row(const KernelParams& p, ValueFn value) {
  Epilogue::write_scale_padding(p);
  for (int64_t row = blockIdx.x; row < p.num_rows; row += gridDim.x) {
    const RowSlice rs = row_slice(p, row);
    const typename Epilogue::Prefetch pre = Epilogue::prefetch(p, rs);
    uint4 ar[Epilogue::kVecs];
#pragma unroll
    for (int k = 0; k < Epilogue::kVecs; ++k) {
      if (rs.owns(k)) ar[k] = value(rs, k);
    }
    Epilogue::apply(p, rs, ar, pre);
  }
}

}  // namespace arf
