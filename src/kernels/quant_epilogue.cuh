// Quantized epilogues: residual add + RMSNorm, then quantization of the dtype-ROUNDED norm
// value (the unfused contract) in the same kernel, and the quantize-only epilogue of fallback
// level 2. The encodings and layouts are the host+device code of quant_formats.h / quant_layout.h,
// the very functions the CPU reference (src/reference/quant_reference.cc) calls, so a kernel fed
// the same norm bits writes the same bytes.
//
// Each quantizer reduces |x| over its block with lane shuffles: thread t owns vectors t + kB of a
// row (RowSlice), B is a multiple of 32, so a block of 16 vectors (FP8 1x128 group), 4 (MXFP4, 32
// elements) or 2 (NVFP4, 16 elements) sits on that many aligned adjacent lanes. Shuffles run on all
// lanes; lanes that own no vector contribute 0 and store nothing.
#pragma once

#include <type_traits>

#include "common/quant_formats.h"
#include "common/quant_layout.h"
#include "kernels/row_epilogue.cuh"

namespace arf {

// ---- stores ----------------------------------------------------------------------------------

__device__ __forceinline__ void store_fp8x8(void* base, int64_t elem, const uint8_t (&c)[8]) {
  uint2 v;
  v.x = c[0] | (c[1] << 8) | (c[2] << 16) | (static_cast<uint32_t>(c[3]) << 24);
  v.y = c[4] | (c[5] << 8) | (c[6] << 16) | (static_cast<uint32_t>(c[7]) << 24);
  *reinterpret_cast<uint2*>(static_cast<char*>(base) + elem) = v;
}

__device__ __forceinline__ void store_fp4x8(void* base, int64_t elem, const uint8_t (&c)[8]) {
  uint32_t v = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(quant::pack_fp4_pair(c[2 * i], c[2 * i + 1])) << (8 * i);
  *reinterpret_cast<uint32_t*>(static_cast<char*>(base) + elem / 2) = v;
}

__device__ __forceinline__ quant::ScaleLayout scale_layout(const KernelParams& p) {
  return static_cast<quant::ScaleLayout>(p.scale_layout);
}

// How the dynamic FP8 scales take amax / 448: a runtime value (uniform over the grid), not a
// template argument, so the kernel set does not double; the two rules differ in one operation
// per row or group (a division or a multiplication by RN(1/448)).
__device__ __forceinline__ quant::Fp8ScaleRule scale_rule(const KernelParams& p) {
  return static_cast<quant::Fp8ScaleRule>(p.scale_rule);
}

// Writes one scale (fp32 value or byte code) at (row, col) of the caller's layout.
__device__ __forceinline__ void store_scale(const KernelParams& p, quant::ScaleStorage storage,
                                            int64_t row, int64_t col, int64_t cols, float value,
                                            uint8_t code) {
  const int64_t off = quant::scale_byte_offset(scale_layout(p), storage, row, col, p.num_rows, cols);
  char* base = static_cast<char*>(p.scale_out) + off;
  if (storage == quant::ScaleStorage::kFp32) {
    *reinterpret_cast<float*>(base) = value;
  } else {
    *reinterpret_cast<uint8_t*>(base) = code;
  }
}

// Zeroes every padding position of the scale buffer (rows >= T, columns >= cols of the padded
// grid), spread over the whole grid: consumers read whole tiles, and tests poison the buffer.
__device__ __forceinline__ void zero_scale_padding(const KernelParams& p, quant::ScaleStorage storage,
                                                   int64_t cols) {
  const quant::ScaleLayout layout = scale_layout(p);
  const int64_t rows = quant::scale_padded_tokens(layout, p.num_rows);
  const int64_t padded_cols = quant::scale_padded_cols(layout, storage, cols);
  const int64_t total = rows * padded_cols;
  if (total == p.num_rows * cols) return;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t t = i / padded_cols, c = i % padded_cols;
    if (t < p.num_rows && c < cols) continue;
    store_scale(p, storage, t, c, cols, 0.0f, 0);
  }
}

// The rounded norm of the thread's vectors, kept packed (4 registers a vector instead of 8) and
// unpacked where used: the 64-register budget of the launch bounds is tight.
template <int kVecs>
using RowValues = uint4[kVecs];

// amax over this thread's 8 elements of vector k (0 when not owned), NaN ignored (quant_formats.h
// abs_max): a packed max of |x| on the 16-bit halves (max.bf16x2 / max.f16x2 return the other
// operand for a NaN one, and the running maximum starts at +0, so it is never NaN), widened once.
// Exact: widening is exact and monotonic, so the halves' maximum is the floats' maximum.
template <typename T>
__device__ __forceinline__ float packed_amax(const uint4& v) {
  using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  uint32_t acc_bits = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t abs_bits = words[i] & 0x7FFF7FFFu;  // |x| of both halves (NaN stays NaN)
    acc_bits = bit_cast<uint32_t>(__hmax2(bit_cast<T2>(acc_bits), bit_cast<T2>(abs_bits)));
  }
  return fmaxf(DTypeOps<T>::to_float(static_cast<uint16_t>(acc_bits & 0xFFFFu)),
               DTypeOps<T>::to_float(static_cast<uint16_t>(acc_bits >> 16)));
}

template <typename T, int kVecs>
__device__ __forceinline__ float vec_amax(const RowSlice& s, const RowValues<kVecs>& v, int k) {
  return s.owns(k) ? packed_amax<T>(v[k]) : 0.0f;
}

// e4m3 codes of a vector, element i's code from quotient(x_i): pairs of quotients share one
// conversion instruction (encode_e4m3x2_device), bytes in element order.
template <typename T, typename Quotient>
__device__ __forceinline__ uint2 fp8_vec(const uint4& v, Quotient quotient) {
  float y[8];
  unpack<T>(v, y);
  uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t lo = quant::encode_e4m3x2_device(quotient(y[4 * i]), quotient(y[4 * i + 1]));
    const uint32_t hi = quant::encode_e4m3x2_device(quotient(y[4 * i + 2]), quotient(y[4 * i + 3]));
    w[i] = lo | (hi << 16);
  }
  return make_uint2(w[0], w[1]);
}

__device__ __forceinline__ void store_fp8x8(void* base, int64_t elem, const uint2& codes) {
  *reinterpret_cast<uint2*>(static_cast<char*>(base) + elem) = codes;
}

// A dynamic scale: the reciprocal with Markstein's correction, no division (E4m3Reciprocal).
template <typename T>
__device__ __forceinline__ uint2 fp8_vec(const uint4& v, const quant::E4m3Reciprocal& r) {
  return fp8_vec<T>(v, [&](float x) { return quant::e4m3_dynamic_quotient(x, r); });
}
// A per-tensor scale (E4m3TensorReciprocal): prescaled, then the same, no division.
template <typename T>
__device__ __forceinline__ uint2 fp8_vec(const uint4& v, const quant::E4m3TensorReciprocal& r) {
  return fp8_vec<T>(v, [&](float x) { return quant::e4m3_tensor_quotient(x, r); });
}

// e4m3 codes of every owned vector with one scale for the whole row (per-tensor, per-token).
template <typename T, int kVecs, typename Divisor>
__device__ __forceinline__ void store_fp8_row(const KernelParams& p, const RowSlice& s,
                                              const RowValues<kVecs>& v, const Divisor& d) {
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (s.owns(k)) store_fp8x8(p.quant_out, s.elem(k), fp8_vec<T>(v[k], d));
  }
}

// ---- quantizers: quantize<T>(p, s, v) with v the rounded norm vectors of the thread --------------

// Per-CTA state of a quantizer (cta_state, once before the rows): what every row shares. scale_in
// is an input no output may overlap (validation), so it is read once, ahead of every store.
// kStagesRows of each quantizer: whether its streaming epilogue stages rows (kernel_set.h,
// stages_rows, with the measurements that chose it).
// Per-tensor: the caller's scale (any float) prescaled and inverted once per CTA; no division.
struct Fp8PerTensorQuant {
  static constexpr bool kStagesRows = true;
  struct Cta {
    quant::E4m3TensorReciprocal recip;
  };
  __device__ static Cta cta_state(const KernelParams& p) {
    return {quant::e4m3_tensor_reciprocal(*p.scale_in)};
  }
  __device__ static void write_scale_padding(const KernelParams&) {}
  template <typename T, int kVecs, typename Reducer>
  __device__ static void quantize(const KernelParams& p, const RowSlice& s, const RowValues<kVecs>& v,
                                  const Cta& cta, Reducer&) {
    store_fp8_row<T, kVecs>(p, s, v, cta.recip);
  }
};

struct Fp8PerTokenQuant {
  static constexpr bool kStagesRows = true;
  struct Cta {};
  __device__ static Cta cta_state(const KernelParams&) { return {}; }
  __device__ static void write_scale_padding(const KernelParams&) {}
  template <typename T, int kVecs, typename Reducer>
  __device__ static void quantize(const KernelParams& p, const RowSlice& s, const RowValues<kVecs>& v,
                                  const Cta&, Reducer& red) {
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) amax = fmaxf(amax, vec_amax<T, kVecs>(s, v, k));
    const float scale = quant::fp8_dynamic_scale(red.template reduce<MaxOp>(amax), scale_rule(p));
    if (threadIdx.x == 0) static_cast<float*>(p.scale_out)[s.row] = scale;
    store_fp8_row<T, kVecs>(p, s, v, quant::e4m3_reciprocal(scale));
  }
};

// Where scale (row, col) of the call goes: the host's coefficients (KernelParams::scale_addr),
// read from the parameter bank at the store.
__device__ __forceinline__ char* scale_at(const KernelParams& p, int64_t row, int col) {
  return static_cast<char*>(p.scale_out) + p.scale_addr.offset(row, col);
}

// One scale per 1x128 group (16 vectors on 16 lanes): fp32 amax/448, or rounded up to a power of
// two (UE8M0) stored as fp32 or as packed bytes.
struct Fp8PerGroupQuant {
  static constexpr bool kStagesRows = true;
  static constexpr int kGroupVecs = quant::kFp8GroupElems / kElemsPerVec;
  __device__ static quant::ScaleStorage storage(const KernelParams& p) {
    return p.scale_format == kScaleFormatUe8m0Packed ? quant::ScaleStorage::kByte : quant::ScaleStorage::kFp32;
  }
  struct Cta {};
  __device__ static Cta cta_state(const KernelParams&) { return {}; }
  __device__ static void write_scale_padding(const KernelParams& p) {
    zero_scale_padding(p, storage(p), p.row_elems / quant::kFp8GroupElems);
  }
  template <typename T, int kVecs, typename Reducer>
  __device__ static void quantize(const KernelParams& p, const RowSlice& s, const RowValues<kVecs>& v,
                                  const Cta&, Reducer&) {
    const bool fp32_scale = p.scale_format == kScaleFormatFp32;
    const bool byte_scale = p.scale_format == kScaleFormatUe8m0Packed;
    const quant::Fp8ScaleRule rule = scale_rule(p);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const float amax = lanes_reduce<kGroupVecs, MaxOp>(vec_amax<T, kVecs>(s, v, k));
      if (!s.owns(k)) continue;
      float scale;
      uint8_t code = 0;
      uint2 codes;
      if (fp32_scale) {
        scale = quant::fp8_dynamic_scale(amax, rule);
        codes = fp8_vec<T>(v[k], quant::e4m3_reciprocal(scale));
      } else {
        // A power of two: x * 2^-e is x / 2^e bit for bit (quant_formats.h ue8m0_reciprocal).
        code = quant::fp8_dynamic_scale_ue8m0(amax, rule);
        scale = quant::decode_ue8m0(code);
        const float mult = quant::ue8m0_reciprocal(code);
        codes = fp8_vec<T>(v[k], [&](float x) { return quant::mul_rn(x, mult); });
      }
      store_fp8x8(p.quant_out, s.elem(k), codes);
      if (s.vec(k) % kGroupVecs == 0) {
        char* const at = scale_at(p, s.row, s.vec(k) / kGroupVecs);
        if (byte_scale) {
          *reinterpret_cast<uint8_t*>(at) = code;
        } else {
          *reinterpret_cast<float*>(at) = scale;
        }
      }
    }
  }
};

// FP4 with one byte scale per block of kBlockVecs vectors: NVFP4 (e4m3 per 16 elements, global
// scale) or MXFP4 (UE8M0 per 32).
template <bool kNvfp4>
struct Fp4Quant {
  static constexpr bool kStagesRows = false;
  static constexpr int kBlockElems = kNvfp4 ? quant::kNvfp4BlockElems : quant::kMxfp4BlockElems;
  static constexpr int kBlockVecs = kBlockElems / kElemsPerVec;
  __device__ static void write_scale_padding(const KernelParams& p) {
    zero_scale_padding(p, quant::ScaleStorage::kByte, p.row_elems / kBlockElems);
  }
  struct Cta {
    float global_scale;  // NVFP4's scale_in
  };
  __device__ static Cta cta_state(const KernelParams& p) { return {kNvfp4 ? *p.scale_in : 0.0f}; }
  template <typename T, int kVecs, typename Reducer>
  __device__ static void quantize(const KernelParams& p, const RowSlice& s, const RowValues<kVecs>& v,
                                  const Cta& cta, Reducer&) {
    const float global_scale = cta.global_scale;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const float amax = lanes_reduce<kBlockVecs, MaxOp>(vec_amax<T, kVecs>(s, v, k));
      if (!s.owns(k)) continue;
      uint8_t code;
      float mult;
      if constexpr (kNvfp4) {
        const quant::Nvfp4BlockScale bs = quant::nvfp4_block_scale(amax, global_scale);
        code = bs.sf;
        mult = bs.mult;
      } else {
        code = quant::mxfp4_scale_code(amax);
        mult = quant::ue8m0_reciprocal(code);
      }
      float y[8];
      unpack<T>(v[k], y);
      uint8_t c[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) c[i] = quant::quantize_e2m1(y[i], mult);
      store_fp4x8(p.quant_out, s.elem(k), c);
      if (s.vec(k) % kBlockVecs == 0) {
        *reinterpret_cast<uint8_t*>(scale_at(p, s.row, s.vec(k) / kBlockVecs)) = code;
      }
    }
  }
};
using Nvfp4Quant = Fp4Quant<true>;
using Mxfp4Quant = Fp4Quant<false>;

// ---- epilogues ---------------------------------------------------------------------------------

// Level 1 (and the second kernel of level 3): residual + RMSNorm + quantization; norm_out, when the
// caller passes one, is the dtype side output.
template <typename T, int kVecsPerThread, typename Quant, bool kStreaming = false>
struct ResidualRmsNormQuantEpilogue {
  using Norm = ResidualRmsNormEpilogue<T, kVecsPerThread, kStreaming>;
  static constexpr int kVecs = kVecsPerThread;
  static constexpr bool kStagesRows = Norm::kStagesRows && Quant::kStagesRows;
  struct Cta {
    typename Norm::Cta norm;
    typename Quant::Cta quant;
  };
  using Prefetch = typename Norm::Prefetch;
  __device__ static Cta cta_state(const KernelParams& p) { return {Norm::cta_state(p), Quant::cta_state(p)}; }
  __device__ static Prefetch prefetch(const KernelParams& p, const RowSlice& s, const Cta& cta) {
    return Norm::prefetch(p, s, cta.norm);
  }
  __device__ static void write_scale_padding(const KernelParams& p) { Quant::write_scale_padding(p); }
  template <typename Reducer>
  __device__ static void post_norm(const KernelParams& p, const RowSlice& s, uint4 (&ar)[kVecs], Reducer& red) {
    Norm::post_norm(p, s, ar, red);
  }
  template <typename Reducer>
  __device__ static void apply(const KernelParams& p, const RowSlice& s, const uint4 (&ar)[kVecs],
                               const Prefetch& pre, const Cta& cta, Reducer& red) {
    uint4 normed[kVecs];
    Norm::normalize(p, s, ar, pre, cta.norm, red, normed);
    if (p.norm_out != nullptr) {
#pragma unroll
      for (int k = 0; k < kVecs; ++k) {
        if (s.owns(k)) st_v4(elem_ptr(p.norm_out, s.elem(k)), normed[k]);
      }
    }
    Quant::template quantize<T, kVecs>(p, s, normed, cta.quant, red);
  }
};

// Level 2's second kernel: quantizes rows that already hold the rounded norm (read as `ar`, raw:
// the local epilogue kernel does not canonicalise, so -0.0 keeps its sign as in level 1).
template <typename T, int kVecsPerThread, typename Quant, bool kStreaming = false>  // (no gamma)
struct QuantOnlyEpilogue : NoPostNorm {
  static constexpr int kVecs = kVecsPerThread;
  static constexpr bool kStagesRows = false;
  using Cta = typename Quant::Cta;
  struct Prefetch {};
  __device__ static Cta cta_state(const KernelParams& p) { return Quant::cta_state(p); }
  __device__ static Prefetch prefetch(const KernelParams&, const RowSlice&, const Cta&) { return {}; }
  __device__ static void write_scale_padding(const KernelParams& p) { Quant::write_scale_padding(p); }
  template <typename Reducer>
  __device__ static void apply(const KernelParams& p, const RowSlice& s, const uint4 (&ar)[kVecs],
                               const Prefetch&, const Cta& cta, Reducer& red) {
    Quant::template quantize<T, kVecs>(p, s, ar, cta, red);
  }
};

}  // namespace arf
