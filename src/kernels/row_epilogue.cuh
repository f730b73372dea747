// What happens to a row once its all-reduced value is known: the epilogue types (AllReduceEpilogue,
// ResidualRmsNormEpilogue) and the row slice each thread owns. Every algorithm and the standalone
// epilogue kernel go through the same code with the same block shape, which is why the fused and
// unfused paths are bitwise equal (the numerics contract, docs/architecture.md).
#pragma once

#include <concepts>
#include <cstdint>

#include "common/kernel_params.h"
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

// The block reduction of the kernels that wait for peers: block_reduce, two barriers each.
struct BlockReducer {
  template <typename Op>
  __device__ float reduce(float v) { return block_reduce<Op>(v); }
};

// The same reduction (same butterfly, same warp order, so the same bits) with one barrier: the
// partials of consecutive reductions alternate between two arrays. A warp writes reduction j+2's
// partial only after passing reduction j+1's barrier, which every warp reaches only after reading
// reduction j's partials, so no write meets a read of the same array. The warp partials are read as
// float4s (8 loads instead of 32) and summed in the order block_reduce sums them. Every thread of
// the CTA must call reduce() the same number of times (the streaming kernel's rows are uniform).
__device__ __forceinline__ float* alternating_partials(int parity) {
  __shared__ __align__(16) float partials[2][kMaxBlockThreads / 32];
  return partials[parity];
}
struct AlternatingReducer {
  int parity = 0;
  template <typename Op>
  __device__ float reduce(float v) {
    float* buf = alternating_partials(parity);
    parity ^= 1;
    v = lanes_reduce<32, Op>(v);
    if ((threadIdx.x & 31) == 0) buf[threadIdx.x >> 5] = v;
    __syncthreads();
    const int num_warps = static_cast<int>(blockDim.x) >> 5;
    const float4* q = reinterpret_cast<const float4*>(buf);
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxBlockThreads / 32 / 4; ++j) {
      if (4 * j >= num_warps) break;
      const float4 w = q[j];
      total = j == 0 ? w.x : Op::apply(total, w.x);
      if (4 * j + 1 < num_warps) total = Op::apply(total, w.y);
      if (4 * j + 2 < num_warps) total = Op::apply(total, w.z);
      if (4 * j + 3 < num_warps) total = Op::apply(total, w.w);
    }
    return total;
  }
};

// Round the fp32 sums of one vector to the dtype: the standalone all-reduce's result. -0.0 is
// canonicalised (an fp16 underflow can produce it) so every pushed or returned value is sentinel-free.
template <typename T>
__device__ __forceinline__ uint4 round_sum(const float (&acc)[8]) {
  return canonicalize(pack<T>(acc));
}

// Loads of the streaming kernel (kernels without a protocol, streaming_epilogue.cuh): rows it
// reads are read once, by the thread that later writes the same positions of the aliased outputs
// (norm_out == input, residual_out == residual_in, allreduce_out == input are the only overlaps
// validation admits), and nothing in the kernel writes an address before it is read: the
// non-coherent path is legal, and the data need not stay in L1.
__device__ __forceinline__ uint4 ld_stream_v4(const void* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}
template <bool kStreaming>
__device__ __forceinline__ uint4 ld_row_v4(const void* ptr) {
  if constexpr (kStreaming) return ld_stream_v4(ptr);
  return ld_v4(ptr);
}

// An epilogue type turns a row's all-reduced vectors into outputs: cta_state() once per CTA
// (values every row shares: gamma, scale_in), prefetch() before the row's
// all-reduced value is known (residual_in), apply() once it is (with the CTA's block reducer).
// post_norm() runs between the two, on the row's vectors in place: for the norm epilogues of a
// sandwich call (KernelParams::post_gamma) it replaces them by their post-norm; elsewhere nothing.
template <typename E>
concept RowEpilogue = requires(const KernelParams& p, const RowSlice& s,
                               const uint4 (&ar)[E::kVecs], uint4 (&ar_in_place)[E::kVecs],
                               const typename E::Prefetch& pre, const typename E::Cta& cta,
                               BlockReducer& red) {
  { E::kVecs } -> std::convertible_to<int>;
  { E::kStagesRows } -> std::convertible_to<bool>;  // streaming kernels: rows through shared memory
  { E::cta_state(p) } -> std::same_as<typename E::Cta>;
  { E::prefetch(p, s, cta) } -> std::same_as<typename E::Prefetch>;
  { E::apply(p, s, ar, pre, cta, red) } -> std::same_as<void>;
  { E::post_norm(p, s, ar_in_place, red) } -> std::same_as<void>;  // sandwich calls, before apply
  { E::write_scale_padding(p) } -> std::same_as<void>;  // once per CTA, before the rows
};

// Epilogues without scale buffers have no padding to write.
struct NoScalePadding {
  __device__ static void write_scale_padding(const KernelParams&) {}
};

// Epilogues that add no residual (the all-reduce, level 2's quantize-only) have no post-norm.
struct NoPostNorm {
  template <int kVecs, typename Reducer>
  __device__ static void post_norm(const KernelParams&, const RowSlice&, uint4 (&)[kVecs], Reducer&) {}
};

// out = ar.
template <typename T, int kVecsPerThread>
struct AllReduceEpilogue : NoScalePadding, NoPostNorm {
  static constexpr int kVecs = kVecsPerThread;
  static constexpr bool kStagesRows = false;
  struct Cta {};
  struct Prefetch {};
  __device__ static Cta cta_state(const KernelParams&) { return {}; }
  __device__ static Prefetch prefetch(const KernelParams&, const RowSlice&, const Cta&) { return {}; }
  template <typename Reducer>
  __device__ static void apply(const KernelParams& p, const RowSlice& s, const uint4 (&ar)[kVecs],
                               const Prefetch&, const Cta&, Reducer&) {
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (s.owns(k)) st_v4(elem_ptr(p.allreduce_out, s.elem(k)), ar[k]);
    }
  }
};

// A gamma vector (`gamma` is p.gamma or p.post_gamma: both have gamma_dtype and gamma_offset) of
// vector `vec` as 8 floats, offset applied.
template <typename T>
__device__ __forceinline__ void load_gamma(const KernelParams& p, const void* gamma, int vec, float (&g)[8]) {
  if (p.gamma_fp32) {
    const float4* g4 = reinterpret_cast<const float4*>(gamma) + 2 * vec;
    const float4 a = g4[0], b = g4[1];
    g[0] = a.x; g[1] = a.y; g[2] = a.z; g[3] = a.w; g[4] = b.x; g[5] = b.y; g[6] = b.z; g[7] = b.w;
  } else {
    unpack<T>(ld_v4(elem_ptr(gamma, static_cast<int64_t>(vec) * kElemsPerVec)), g);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) g[i] += p.gamma_offset;
}

// Starts pulling a 16-byte gamma vector into L2 without holding registers for it.
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// ---- the RMSNorm arithmetic, one copy for every kernel (same operations in the same order) ------

// residual_out's vector: round(ar + residual_in) element by element.
template <typename T>
__device__ __forceinline__ uint4 add_residual(const uint4& ar, const uint4& residual) {
  float a[8], r[8];
  unpack<T>(ar, a);
  unpack<T>(residual, r);
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = __fadd_rn(a[i], r[i]);
  return pack<T>(a);
}

// sum_sq + the squares of one vector's elements, in element order.
template <typename T>
__device__ __forceinline__ float add_squares(const uint4& res, float sum_sq) {
  float y[8];
  unpack<T>(res, y);
#pragma unroll
  for (int i = 0; i < 8; ++i) sum_sq = __fmaf_rn(y[i], y[i], sum_sq);
  return sum_sq;
}

// rsqrt(mean_sq + eps) of a row whose squares sum to `total`. A zero sum (an all-zero row:
// padding) is not divided: __fdiv_rn's slow path for a zero numerator costs every warp of the CTA
// a long subroutine; 0 / n is +0 all the same.
__device__ __forceinline__ float rms_scale(float total, int row_len, float eps) {
  const bool zero_row = total == 0.0f;
  const float mean_sq = zero_row ? 0.0f : __fdiv_rn(zero_row ? 1.0f : total, static_cast<float>(row_len));
  return rsqrtf(mean_sq + eps);
}

// The rounded norm of one vector: round(res * scale * g), or with norm_rounding
// round(round(res * scale) * g).
template <typename T>
__device__ __forceinline__ uint4 norm_vec(const uint4& res, const float (&g)[8], float scale,
                                          int norm_rounding) {
  float y[8];
  unpack<T>(res, y);
  if (norm_rounding != 0) {
    // arfNormRoundBeforeWeight: the activation-dtype intermediate of vLLM's/SGLang's kernels.
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      y[i] = __fmul_rn(DTypeOps<T>::to_float(DTypeOps<T>::from_float(__fmul_rn(y[i], scale))), g[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = __fmul_rn(__fmul_rn(y[i], scale), g[i]);
  }
  return pack<T>(y);
}

// The post-norm of a sandwich call (KernelParams::post_gamma; uniform over the grid, so every
// thread of the CTA makes the same block reductions), in place: x, a row's all-reduced vectors,
// becomes h = the rounded RMSNorm of x with post_gamma, by the arithmetic of the norm below
// (add_squares, the block reduction, rms_scale, norm_vec), which is what a separate norm of the
// rounded sum writes. The row loops call it before apply(), on their own copy of the row (never
// stored as an output), so the epilogue's code after it is the same for every call and a call
// without post_gamma pays a uniform branch. h may be -0.0 (a zero times a negative factor), as a
// separate norm's output may. post_gamma is read after the reduction (from L1 or L2 after a
// CTA's first row).
template <typename T, int kVecs, typename Reducer>
__device__ __forceinline__ void post_norm_in_place(const KernelParams& p, const RowSlice& s,
                                                   uint4 (&x)[kVecs], Reducer& red) {
  if (p.post_gamma == nullptr) return;
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (s.owns(k)) sum_sq = add_squares<T>(x[k], sum_sq);
  }
  const float scale = rms_scale(red.template reduce<SumOp>(sum_sq), s.row_len, p.eps);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (!s.owns(k)) continue;
    float g[8];
    if (p.gamma_fp32) {
      load_gamma<T>(p, p.post_gamma, s.vec(k), g);
    } else {  // packed until here: 4 registers a vector, not 8
      unpack<T>(ld_v4(elem_ptr(p.post_gamma, static_cast<int64_t>(s.vec(k)) * kElemsPerVec)), g);
#pragma unroll
      for (int i = 0; i < 8; ++i) g[i] += p.gamma_offset;
    }
    x[k] = norm_vec<T>(x[k], g, scale, p.norm_rounding);
  }
}

// residual_out = round(ar + residual_in) (= ar without residual_in); norm_out =
// round(residual_out * rsqrt(mean_sq + eps) * g), or with norm_rounding round(round(y * s) * g).
// For a sandwich call ar is already its post-norm h (post_norm, run by the row loop before apply).
// prefetch() runs before the all-reduced value is waited for, so the memory latency of residual_in
// and gamma overlaps the reduction instead of following it. residual_in goes into registers.
// kStreaming: the epilogue of the streaming kernel (world 1 and the second kernel of a split call,
// which never wait for peers): residual_in is read on the non-coherent path, and gamma in the
// activation dtype is held in registers for the CTA's whole life when a thread owns at most two
// vectors (4 registers a vector). Otherwise gamma is only pulled into L2 and loaded while the
// row's sum of squares is reduced: a kernel that waits for peers has time for the L2 prefetch to
// land, and its registers go to the peers' values (the 64-register budget of the launch bounds);
// two vectors of fp32 gamma (8 registers a vector) cannot spare them either.
template <typename T, int kVecsPerThread, bool kStreaming = false>
struct ResidualRmsNormEpilogue : NoScalePadding {
  static constexpr int kVecs = kVecsPerThread;
  static constexpr bool kGammaInRegisters = kStreaming && kVecs == 1;
  static constexpr bool kStagesRows = kStreaming && kVecs <= 2;  // (kernel_set.h, stages_rows)
  struct Cta {
    uint4 gamma[kGammaInRegisters ? kVecs : 1];  // raw activation-dtype gamma, if held
  };
  struct Prefetch {
    uint4 residual[kVecs];
  };

  __device__ static Cta cta_state(const KernelParams& p) {
    Cta c{};  // (gamma is read only where it was loaded)
    if constexpr (kGammaInRegisters) {
      if (!p.gamma_fp32) {
        const int row_vecs = p.row_elems / kElemsPerVec;
#pragma unroll
        for (int k = 0; k < kVecs; ++k) {
          const int vec = static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x);
          if (vec < row_vecs) c.gamma[k] = ld_stream_v4(elem_ptr(p.gamma, static_cast<int64_t>(vec) * kElemsPerVec));
        }
      }
    }
    return c;
  }

  template <typename Reducer>
  __device__ static void post_norm(const KernelParams& p, const RowSlice& s, uint4 (&ar)[kVecs], Reducer& red) {
    post_norm_in_place<T, kVecs>(p, s, ar, red);
  }

  __device__ static Prefetch prefetch(const KernelParams& p, const RowSlice& s, const Cta&) {
    Prefetch pre;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k)) continue;
      // No residual (the first layer): residual_out is the all-reduce itself (normalize()).
      if (p.residual_in != nullptr) pre.residual[k] = ld_row_v4<kStreaming>(elem_ptr(p.residual_in, s.elem(k)));
      if constexpr (!kStreaming) {  // (a streaming CTA finds gamma in L1 after its first row)
        const int64_t g = static_cast<int64_t>(s.vec(k)) * kElemsPerVec;
        if (p.gamma_fp32) {
          prefetch_l2(static_cast<const float*>(p.gamma) + g);
          prefetch_l2(static_cast<const float*>(p.gamma) + g + 4);
        } else {
          prefetch_l2(elem_ptr(p.gamma, g));
        }
      }
    }
    return pre;
  }

  // Writes residual_out and returns the dtype-rounded norm of each owned vector in `normed`.
  // Called by every thread of the CTA (it contains the row's block reduction).
  template <typename Reducer>
  __device__ static void normalize(const KernelParams& p, const RowSlice& s, const uint4 (&ar)[kVecs],
                                   const Prefetch& pre, const Cta& cta, Reducer& red,
                                   uint4 (&normed)[kVecs]) {
    uint4 res[kVecs];
    float sum_sq = 0.0f;
    const bool has_residual = p.residual_in != nullptr;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k)) continue;
      // Without a residual: bitwise the all-reduce (no add, so no NaN payload or -0.0 rewriting).
      res[k] = has_residual ? add_residual<T>(ar[k], pre.residual[k]) : ar[k];
      st_v4(elem_ptr(p.residual_out, s.elem(k)), res[k]);
      sum_sq = add_squares<T>(res[k], sum_sq);
    }
    // 16-bit gamma is read (from the CTA's registers, or from L2) while the block reduces, and
    // kept packed (4 registers a vector, not 8 floats); fp32 gamma is read from L2 afterwards.
    uint4 gamma_raw[kVecs];
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k) || p.gamma_fp32) continue;
      if constexpr (kGammaInRegisters) {
        gamma_raw[k] = cta.gamma[k];
      } else {
        gamma_raw[k] = ld_v4(elem_ptr(p.gamma, static_cast<int64_t>(s.vec(k)) * kElemsPerVec));
      }
    }
    const float scale = rms_scale(red.template reduce<SumOp>(sum_sq), s.row_len, p.eps);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k)) continue;
      float g[8];
      if (p.gamma_fp32) {
        load_gamma<T>(p, p.gamma, s.vec(k), g);
      } else {
        unpack<T>(gamma_raw[k], g);
#pragma unroll
        for (int i = 0; i < 8; ++i) g[i] += p.gamma_offset;
      }
      normed[k] = norm_vec<T>(res[k], g, scale, p.norm_rounding);
    }
  }

  template <typename Reducer>
  __device__ static void apply(const KernelParams& p, const RowSlice& s, const uint4 (&ar)[kVecs],
                               const Prefetch& pre, const Cta& cta, Reducer& red) {
    uint4 normed[kVecs];
    normalize(p, s, ar, pre, cta, red, normed);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (s.owns(k)) st_v4(elem_ptr(p.norm_out, s.elem(k)), normed[k]);
    }
  }
};

// The row loop of the kernels that wait for peers: for each row this CTA owns (b, b + G, ...),
// start the epilogue's prefetch, obtain each owned vector's all-reduced value from
// value(row_slice, k) (which may wait for peers), then apply the epilogue. (Kernels without a
// protocol run streaming_epilogue.cuh's loop instead.)
template <typename Epilogue, typename ValueFn>
__device__ __forceinline__ void for_each_owned_row(const KernelParams& p, ValueFn value) {
  Epilogue::write_scale_padding(p);
  const typename Epilogue::Cta cta = Epilogue::cta_state(p);
  BlockReducer red;
  for (int64_t row = blockIdx.x; row < p.num_rows; row += gridDim.x) {
    const RowSlice rs = row_slice(p, row);
    const typename Epilogue::Prefetch pre = Epilogue::prefetch(p, rs, cta);
    uint4 ar[Epilogue::kVecs];
#pragma unroll
    for (int k = 0; k < Epilogue::kVecs; ++k) {
      if (rs.owns(k)) ar[k] = value(rs, k);
    }
    Epilogue::post_norm(p, rs, ar, red);
    Epilogue::apply(p, rs, ar, pre, cta, red);
  }
}

}  // namespace arf
