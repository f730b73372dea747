// CPU reference of the quantized epilogues: what each quant pattern must write, computed
// from the dtype-ROUNDED norm_out (the bf16/fp16 bits reference_fused or the kernel's own norm
// output produce), as the unfused contract says (docs/architecture.md, "Numerics").
//
// Arithmetic order, shared with the kernels through src/common/quant_formats.h (the reference
// calls those very functions; a kernel that does the same gets the same bits):
//   x     = float(norm_bits)                                exact
//   amax  = max |x| over the row / group / block             exact, order-free; NaN ignored
//   fp8 per-tensor  q = e4m3(x / scale)                      scale given, division (__fdiv_rn)
//   fp8 per-token   s = max(amax / 448, 2^-9/448); q = e4m3(x / s); amax / 448 by the spec's
//                   scale_rule: RN(amax / 448) or RN(amax * RN(1/448)) (quant::Fp8ScaleRule)
//   fp8 per-group   s as per-token over 128 elements; UE8M0: s = 2^ceil(log2(s)); q = e4m3(x / s)
//                   (for UE8M0, x * 2^-k gives the same bits as x / 2^k: either is fine)
//   nvfp4 (16)      sf = e4m3((amax / 6) * gs); mult = gs / float(sf), 0 if sf is 0;
//                   q = e2m1(x * mult)
//   mxfp4 (32)      e = clamp(floor(log2 amax) - 2 + 127); q = e2m1(x * 2^(127 - e))
// Encodings saturate (e4m3 to +-448, e2m1 to +-6); quant_formats.h states NaN/-0/subnormal rules.
//
// Results are logical ([T, H] values, [T, scale_cols] scales); pack_scales applies a layout from
// src/common/quant_layout.h. first_quant_mismatch is the GPU tests' comparison.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/kernel_params.h"
#include "common/quant_formats.h"
#include "common/quant_layout.h"

namespace arf::ref {

enum class QuantKind : int {
  kFp8PerTensor = 0,  // static scale given
  kFp8PerToken = 1,   // dynamic, one fp32 scale per token
  kFp8PerGroup = 2,   // dynamic, one scale per 1x128 group (fp32, or power-of-two UE8M0)
  kNvfp4 = 3,         // e2m1 + e4m3 scale per 16 + fp32 global scale
  kMxfp4 = 4,         // e2m1 + UE8M0 scale per 32
};

struct QuantSpec {
  QuantKind kind = QuantKind::kFp8PerToken;
  float static_scale = 1.0f;  // kFp8PerTensor: q = saturate(x / static_scale); > 0, finite
  float global_scale = 1.0f;  // kNvfp4: gs above (typically 448 * 6 / tensor amax); > 0, finite
  bool ue8m0 = false;         // kFp8PerGroup: scales rounded up to powers of two
  // kFp8PerToken / kFp8PerGroup: how amax / 448 is taken (arfFusedArgs_t::scale_rule); the other
  // kinds take kDivide only (quant_spec_error).
  quant::Fp8ScaleRule scale_rule = quant::Fp8ScaleRule::kDivide;
};

struct QuantResult {
  QuantSpec spec;
  int64_t num_tokens = 0;
  int64_t hidden = 0;
  int64_t scale_cols = 0;       // scales per token: 0, 1, H/128, H/16 or H/32
  std::vector<uint8_t> values;  // e4m3 codes [T * H], or packed e2m1 [T * H / 2]
  std::vector<float> scales;    // [T * scale_cols] each block's decoded scale (NVFP4: float(sf))
  std::vector<uint8_t> scale_codes;  // [T * scale_cols] byte codes: UE8M0 (group with ue8m0,
                                     // MXFP4) or e4m3 (NVFP4); empty when scales are fp32 only
};

// Elements sharing one scale (0 for per-tensor, hidden for per-token).
int64_t quant_block_elems(QuantKind kind, int64_t hidden);
int64_t quant_scale_cols(QuantKind kind, int64_t hidden);

// "" when the spec and hidden size are quantizable; otherwise what is wrong (hidden not a multiple
// of the block, a scale that is not positive and finite, ...). The text names the rule, so
// validation can reuse it.
std::string quant_spec_error(const QuantSpec& spec, int64_t hidden);

// Quantizes [num_tokens, hidden] norm_out bits of `dtype`. Returns quant_spec_error's text (and
// leaves *out untouched) when the spec is invalid.
std::string quantize_reference(const uint16_t* norm_bits, DType dtype, int64_t num_tokens,
                               int64_t hidden, const QuantSpec& spec, QuantResult* out);

// Which scale buffers each pattern can write: per-token fp32 row-major ([T]); per-group row-major
// or MN-major, as fp32 or (UE8M0 only) as byte codes, a UE8M0 scale stored as fp32 being its power
// of two; NVFP4/MXFP4 byte codes, linear (row-major) or 128x4-swizzled; per-tensor none.
bool quant_scales_supported(const QuantSpec& spec, quant::ScaleLayout layout,
                            quant::ScaleStorage storage);

// The scale buffer a kernel writes for `r` in (layout, storage): scale_buffer_bytes long, padding
// zero, fp32 little-endian. Empty for per-tensor or an unsupported combination.
std::vector<uint8_t> pack_scales(const QuantResult& r, quant::ScaleLayout layout,
                                 quant::ScaleStorage storage);

// Dequantized [T * H] values in double: decode(q) * scale (NVFP4: decode(q) * float(sf) / gs).
std::vector<double> dequantize(const QuantResult& r);

// Signed position of a code on its format's number line (+0 and -0 are both 0), so two codes are
// within k steps of each other exactly when their ordinals differ by at most k. NaN codes (e4m3
// 0x7F/0xFF) have none: callers compare them separately.
int e4m3_ordinal(uint8_t code);
int e2m1_ordinal(uint8_t code);

// The GPU tests' comparison of a kernel's outputs with the reference `want`:
//  * scales: the kernel's scale buffer (layout, storage) must equal pack_scales(want) byte for
//    byte, padding included (both come from the same rounded norm values, so they are exact);
//  * values: each element within `max_steps` steps of the reference code (equivalently, with equal
//    scales, within max_steps format steps after dequantization); NaN only where the reference has
//    NaN. A kernel fed the same norm_out bits should match with max_steps = 0.
// Returns "" when everything matches, else the first mismatch and the mismatch count. got_scales
// is ignored for per-tensor FP8.
std::string first_quant_mismatch(const QuantResult& want, const uint8_t* got_values,
                                 const uint8_t* got_scales, quant::ScaleLayout layout,
                                 quant::ScaleStorage storage, int max_steps = 1);

}  // namespace arf::ref
