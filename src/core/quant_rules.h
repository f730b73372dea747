// What the host needs to know about each quantized pattern, in one place: which hidden
// sizes it takes, which scale layouts and formats, which of quant_out / scale_out / scale_in it
// uses, and the shape and bytes of each of them. validate.cc turns these into error messages,
// api.cc's arfQuantOutputLayout and arfScaleBufferBytes into a layout and a size (the torch ops
// allocate their outputs from that layout), comm_call.cc into KernelParams.
//
// Why here and not in the reference: arfusion_reference (src/reference/quant_reference.cc) is a
// separate library the runtime must not link, and its quant_spec_error speaks in QuantSpec terms.
// These rules restate the few it shares (the block sizes come from quant_layout.h, so the numbers
// cannot drift); tests/cpu/test_quant_rules.cc checks both agree on every pattern and hidden size.
//
// Everything is pure (no CUDA calls), thread-safe, and takes the public enums as ints so that an
// out-of-range value from a caller is a checked error, never undefined behaviour.
#pragma once

#include <cstdint>
#include <string>

#include "arfusion/arfusion.h"
#include "common/kernel_params.h"
#include "common/quant_layout.h"

namespace arf {

// Elements sharing one scale along a row: 128 (fp8 per-group), 16 (nvfp4), 32 (mxfp4); 0 for
// fp8 per-tensor (one static scale) and per-token (the whole row), and for non-quant patterns.
int64_t quant_group_elems(Pattern pattern);

// Scales per token in scale_out: 1 (per-token), hidden / group (per-group, nvfp4, mxfp4), 0 when
// the pattern writes no scales. Precondition: quant_hidden_error(pattern, hidden) is "".
int64_t quant_scale_cols(Pattern pattern, int64_t hidden);

bool quant_writes_scales(Pattern pattern);   // scale_out is required
bool quant_reads_scale_in(Pattern pattern);  // scale_in (a device fp32) is required
bool quant_is_fp4(Pattern pattern);          // quant_out holds packed e2m1 pairs

// Bytes of quant_out for num_tokens x hidden: one e4m3 byte per element, or half a byte (fp4).
// 0 for non-quant patterns. (quant_output_shapes' quant_out, multiplied out.)
int64_t quant_out_bytes(Pattern pattern, int64_t num_tokens, int64_t hidden);

// "" if the pattern can quantize rows of `hidden` elements, else the rule, e.g.
// "pattern residual_rmsnorm_fp8_per_group needs hidden % 128 == 0 (one scale per 1x128 group);
// hidden is 2880". Non-quant patterns: always "".
std::string quant_hidden_error(Pattern pattern, int64_t hidden);

// "" if (scale_layout, scale_format) are legal for the pattern, else what is wrong, naming the
// argument: layouts and formats outside their enums; MN-major for anything but fp8 per-group;
// 128x4-swizzled for anything but nvfp4 / mxfp4; a scale_format other than fp32 for anything but
// fp8 per-group. Patterns without scale_out (per-tensor) take the defaults only, so a caller who
// set a layout for them learns that it is ignored rather than silently losing it.
// Non-quant patterns: always "" (their quant fields are ignored, like every unused tensor).
std::string quant_scale_error(Pattern pattern, int scale_layout, int scale_format);

// True for the patterns whose scale is computed from an amax (fp8 per-token and per-group): the
// ones arfFusedArgs_t::scale_rule applies to.
bool quant_has_dynamic_fp8_scale(Pattern pattern);

// "" if scale_rule is legal for the pattern, else what is wrong: a value outside
// arfFp8ScaleRule_t (any pattern), or a rule other than arfFp8ScaleDivide for a pattern without a
// dynamic FP8 scale (refused rather than ignored, so a caller who asked for torch's rounding where
// it cannot apply learns so).
std::string quant_scale_rule_error(Pattern pattern, int scale_rule);

// How a legal (pattern, scale_format) stores each scale: one byte (UE8M0 packed, nvfp4's e4m3,
// mxfp4's UE8M0) or one fp32.
quant::ScaleStorage quant_scale_storage(Pattern pattern, int scale_format);

// The switch-free addressing of scale_out (quant_layout.h ScaleAddressing) for a call of
// num_tokens rows: what KernelParams::scale_addr carries to the kernels. All zero when the pattern
// stores no per-block scales (per-tensor, per-token) or the layout, format or hidden size is not
// legal for it.
quant::ScaleAddressing quant_scale_addressing(Pattern pattern, int scale_layout, int scale_format,
                                              int64_t num_tokens, int64_t hidden);

// The layout of a quantized call's outputs (arfQuantOutputLayout): quant_out [T, H] e4m3 or
// [T, H/2] packed e2m1 bytes, and scale_out as quant_layout.h's scale_buffer_shape lays out the
// pattern's storage and scale columns (per-token: [T, 1] fp32; per-tensor writes none: rank 1,
// [0]), each with the element type the public header names.
struct QuantOutputShapes {
  quant::BufferShape quant_out, scale_out;
  arfElementType_t quant_element, scale_element;
};

// "" with *out filled when the pattern quantizes and hidden (> 0), the layout and the format are
// legal for it (quant_hidden_error, quant_scale_error); else the reason, *out untouched.
std::string quant_output_shapes(Pattern pattern, int scale_layout, int scale_format, int64_t hidden,
                                QuantOutputShapes* out);

// The shapes at num_tokens, as the public struct carries them.
void quant_output_layout(const QuantOutputShapes& shapes, int64_t num_tokens, arfQuantOutputs_t* out);

// Bytes scale_out must span, padding included: quant_output_shapes' scale_out at num_tokens. 0
// when the pattern writes no scales, or when the hidden size, layout or format is not legal for it
// (see the two error functions above).
int64_t quant_scale_buffer_bytes(Pattern pattern, int scale_layout, int scale_format,
                                 int64_t num_tokens, int64_t hidden);

}  // namespace arf
