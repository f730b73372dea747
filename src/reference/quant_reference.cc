// CPU reference of the quantized epilogues: loops over rows and blocks that call the per-element
// and per-block rules of src/common/quant_formats.h (the kernels call the same functions), plus
// layout packing, dequantization and the comparison the GPU tests use.
#include "reference/quant_reference.h"

#include <cfloat>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/quant_formats.h"
#include "reference/cpu_reference.h"

// Same guard as cpu_reference.cc: the shared rules assume float arithmetic in float.
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "quant_reference.cc needs FLT_EVAL_METHOD == 0 (e.g. x86-64 SSE, AArch64)"
#endif

namespace arf::ref {
namespace {

using quant::ScaleLayout;
using quant::ScaleStorage;

bool positive_finite(float v) { return v > 0.0f && std::isfinite(v); }
bool is_fp4(QuantKind kind) { return kind == QuantKind::kNvfp4 || kind == QuantKind::kMxfp4; }
bool has_scale_codes(const QuantSpec& s) {
  return is_fp4(s.kind) || (s.kind == QuantKind::kFp8PerGroup && s.ue8m0);
}

float block_amax(const uint16_t* bits, int64_t n, DType dtype) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = quant::abs_max(amax, to_float(bits[i], dtype));
  return amax;
}

void quantize_fp8_block(const uint16_t* bits, int64_t n, DType dtype, float scale, uint8_t* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = quant::quantize_e4m3(to_float(bits[i], dtype), scale);
}

// `packed` points at the byte holding the block's first (even) element.
void quantize_fp4_block(const uint16_t* bits, int64_t n, DType dtype, float mult, uint8_t* packed) {
  for (int64_t i = 0; i < n; i += 2) {
    packed[i / 2] = quant::pack_fp4_pair(quant::quantize_e2m1(to_float(bits[i], dtype), mult),
                                         quant::quantize_e2m1(to_float(bits[i + 1], dtype), mult));
  }
}

// One scale block of token t: writes the block's values, decoded scale and (if any) code.
void quantize_block(const uint16_t* x, DType dtype, int64_t block, int64_t elem, int64_t scale_idx,
                    QuantResult* r) {
  const QuantSpec& s = r->spec;
  const float amax = block_amax(x, block, dtype);
  switch (s.kind) {
    case QuantKind::kFp8PerToken:
    case QuantKind::kFp8PerGroup: {
      float scale = quant::fp8_dynamic_scale(amax, s.scale_rule);
      if (s.ue8m0) {
        r->scale_codes[scale_idx] = quant::fp8_dynamic_scale_ue8m0(amax, s.scale_rule);
        scale = quant::decode_ue8m0(r->scale_codes[scale_idx]);
      }
      r->scales[scale_idx] = scale;
      quantize_fp8_block(x, block, dtype, scale, &r->values[elem]);
      break;
    }
    case QuantKind::kNvfp4: {
      const quant::Nvfp4BlockScale bs = quant::nvfp4_block_scale(amax, s.global_scale);
      r->scale_codes[scale_idx] = bs.sf;
      r->scales[scale_idx] = quant::decode_e4m3(bs.sf);
      quantize_fp4_block(x, block, dtype, bs.mult, &r->values[elem / 2]);
      break;
    }
    case QuantKind::kMxfp4: {
      const uint8_t code = quant::mxfp4_scale_code(amax);
      r->scale_codes[scale_idx] = code;
      r->scales[scale_idx] = quant::decode_ue8m0(code);
      quantize_fp4_block(x, block, dtype, quant::ue8m0_reciprocal(code), &r->values[elem / 2]);
      break;
    }
    case QuantKind::kFp8PerTensor:
      break;  // no blocks
  }
}

// Scale (t, c) whose bytes contain `byte`, or {-1, -1} for padding.
void locate_scale(const QuantResult& r, ScaleLayout layout, ScaleStorage storage, int64_t byte,
                  int64_t* t_out, int64_t* c_out) {
  const int64_t eb = quant::scale_elem_bytes(storage);
  *t_out = *c_out = -1;
  for (int64_t t = 0; t < r.num_tokens; ++t) {
    for (int64_t c = 0; c < r.scale_cols; ++c) {
      const int64_t off =
          quant::scale_byte_offset(layout, storage, t, c, r.num_tokens, r.scale_cols);
      if (byte >= off && byte < off + eb) {
        *t_out = t;
        *c_out = c;
        return;
      }
    }
  }
}

std::string describe_scale(const uint8_t* buf, int64_t byte, ScaleStorage storage) {
  char text[64];
  if (storage == ScaleStorage::kFp32) {
    float v;
    std::memcpy(&v, buf + (byte - byte % 4), sizeof(v));
    std::snprintf(text, sizeof(text), "%.9g", v);
  } else {
    std::snprintf(text, sizeof(text), "0x%02x", buf[byte]);
  }
  return text;
}

std::string first_scale_mismatch(const QuantResult& want, const uint8_t* got, ScaleLayout layout,
                                 ScaleStorage storage) {
  const std::vector<uint8_t> expect = pack_scales(want, layout, storage);
  int64_t first = -1, count = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(expect.size()); ++i) {
    if (got[i] != expect[i]) {
      if (first < 0) first = i;
      ++count;
    }
  }
  if (first < 0) return "";
  int64_t t, c;
  locate_scale(want, layout, storage, first, &t, &c);
  char head[200];
  if (t < 0) {
    std::snprintf(head, sizeof(head),
                  "scales: %" PRId64 " of %zu bytes differ; first at byte %" PRId64
                  " (padding, must be 0): got 0x%02x",
                  count, expect.size(), first, got[first]);
    return head;
  }
  std::snprintf(head, sizeof(head),
                "scales: %" PRId64 " of %zu bytes differ; first at byte %" PRId64 " (token %" PRId64
                ", scale column %" PRId64 "): got ",
                count, expect.size(), first, t, c);
  return head + describe_scale(got, first, storage) + " want " +
         describe_scale(expect.data(), first, storage);
}

uint8_t value_code(const QuantResult& r, const uint8_t* values, int64_t i) {
  return is_fp4(r.spec.kind) ? quant::fp4_nibble(values[i / 2], i) : values[i];
}

bool codes_close(bool fp4, uint8_t got, uint8_t want, int max_steps) {
  if (fp4) return std::abs(e2m1_ordinal(got) - e2m1_ordinal(want)) <= max_steps;
  const bool got_nan = (got & 0x7Fu) == 0x7Fu, want_nan = (want & 0x7Fu) == 0x7Fu;
  if (got_nan || want_nan) return got_nan && want_nan;
  return std::abs(e4m3_ordinal(got) - e4m3_ordinal(want)) <= max_steps;
}

std::string first_value_mismatch(const QuantResult& want, const uint8_t* got, int max_steps) {
  const bool fp4 = is_fp4(want.spec.kind);
  const int64_t count = want.num_tokens * want.hidden;
  int64_t first = -1, bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!codes_close(fp4, value_code(want, got, i), value_code(want, want.values.data(), i),
                     max_steps)) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (first < 0) return "";
  const uint8_t g = value_code(want, got, first), w = value_code(want, want.values.data(), first);
  const double gv = fp4 ? quant::decode_e2m1(g) : quant::decode_e4m3(g);
  const double wv = fp4 ? quant::decode_e2m1(w) : quant::decode_e4m3(w);
  char text[256];
  std::snprintf(text, sizeof(text),
                "quant values: %" PRId64 " of %" PRId64
                " differ by more than %d step(s); first at "
                "row %" PRId64 " col %" PRId64 ": got 0x%02x (%.9g) want 0x%02x (%.9g), unscaled",
                bad, count, max_steps, first / want.hidden, first % want.hidden, g, gv, w, wv);
  return text;
}

}  // namespace

int64_t quant_block_elems(QuantKind kind, int64_t hidden) {
  switch (kind) {
    case QuantKind::kFp8PerTensor:
      return 0;
    case QuantKind::kFp8PerToken:
      return hidden;
    case QuantKind::kFp8PerGroup:
      return quant::kFp8GroupElems;
    case QuantKind::kNvfp4:
      return quant::kNvfp4BlockElems;
    case QuantKind::kMxfp4:
      return quant::kMxfp4BlockElems;
  }
  return 0;
}

int64_t quant_scale_cols(QuantKind kind, int64_t hidden) {
  const int64_t block = quant_block_elems(kind, hidden);
  return block == 0 ? 0 : hidden / block;
}

std::string quant_spec_error(const QuantSpec& spec, int64_t hidden) {
  if (hidden <= 0) return "hidden must be positive";
  if (spec.ue8m0 && spec.kind != QuantKind::kFp8PerGroup)
    return "ue8m0 applies to fp8 per-group only";
  if (spec.scale_rule != quant::Fp8ScaleRule::kDivide &&
      spec.scale_rule != quant::Fp8ScaleRule::kTimesReciprocal)
    return "unknown fp8 scale rule";
  if (spec.scale_rule != quant::Fp8ScaleRule::kDivide && spec.kind != QuantKind::kFp8PerToken &&
      spec.kind != QuantKind::kFp8PerGroup)
    return "scale rule times_reciprocal applies to fp8 per-token and per-group only";
  switch (spec.kind) {
    case QuantKind::kFp8PerTensor:
      if (!positive_finite(spec.static_scale))
        return "fp8 per-tensor scale must be positive and finite";
      return "";
    case QuantKind::kFp8PerToken:
      return "";
    case QuantKind::kFp8PerGroup:
      if (hidden % quant::kFp8GroupElems != 0) return "fp8 per-group needs hidden % 128 == 0";
      return "";
    case QuantKind::kNvfp4:
      if (hidden % quant::kNvfp4BlockElems != 0) return "nvfp4 needs hidden % 16 == 0";
      if (!positive_finite(spec.global_scale))
        return "nvfp4 global scale must be positive and finite";
      return "";
    case QuantKind::kMxfp4:
      if (hidden % quant::kMxfp4BlockElems != 0) return "mxfp4 needs hidden % 32 == 0";
      return "";
  }
  return "unknown quant kind";
}

std::string quantize_reference(const uint16_t* norm_bits, DType dtype, int64_t num_tokens,
                               int64_t hidden, const QuantSpec& spec, QuantResult* out) {
  std::string error = quant_spec_error(spec, hidden);
  if (error.empty() && num_tokens < 0) error = "num_tokens must be >= 0";
  if (!error.empty()) return error;

  QuantResult r;
  r.spec = spec;
  r.num_tokens = num_tokens;
  r.hidden = hidden;
  r.scale_cols = quant_scale_cols(spec.kind, hidden);
  const int64_t count = num_tokens * hidden;
  r.values.resize(is_fp4(spec.kind) ? count / 2 : count);
  r.scales.resize(num_tokens * r.scale_cols);
  if (has_scale_codes(spec)) r.scale_codes.resize(r.scales.size());

  if (spec.kind == QuantKind::kFp8PerTensor) {
    quantize_fp8_block(norm_bits, count, dtype, spec.static_scale, r.values.data());
  } else {
    const int64_t block = quant_block_elems(spec.kind, hidden);
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t c = 0; c < r.scale_cols; ++c) {
        const int64_t elem = t * hidden + c * block;
        quantize_block(norm_bits + elem, dtype, block, elem, t * r.scale_cols + c, &r);
      }
    }
  }
  *out = std::move(r);
  return "";
}

bool quant_scales_supported(const QuantSpec& spec, ScaleLayout layout, ScaleStorage storage) {
  switch (spec.kind) {
    case QuantKind::kFp8PerTensor:
      return false;
    case QuantKind::kFp8PerToken:
      return layout == ScaleLayout::kRowMajor && storage == ScaleStorage::kFp32;
    case QuantKind::kFp8PerGroup:
      return (layout == ScaleLayout::kRowMajor || layout == ScaleLayout::kMnMajor) &&
             (storage == ScaleStorage::kFp32 || spec.ue8m0);
    case QuantKind::kNvfp4:
    case QuantKind::kMxfp4:
      return (layout == ScaleLayout::kRowMajor || layout == ScaleLayout::kSwizzled128x4) &&
             storage == ScaleStorage::kByte;
  }
  return false;
}

std::vector<uint8_t> pack_scales(const QuantResult& r, ScaleLayout layout, ScaleStorage storage) {
  if (!quant_scales_supported(r.spec, layout, storage)) return {};
  std::vector<uint8_t> buf(quant::scale_buffer_bytes(layout, storage, r.num_tokens, r.scale_cols),
                           0);
  for (int64_t t = 0; t < r.num_tokens; ++t) {
    for (int64_t c = 0; c < r.scale_cols; ++c) {
      const int64_t i = t * r.scale_cols + c;
      const int64_t off =
          quant::scale_byte_offset(layout, storage, t, c, r.num_tokens, r.scale_cols);
      if (storage == ScaleStorage::kFp32) {
        std::memcpy(&buf[off], &r.scales[i], sizeof(float));  // little-endian, as on the GPU
      } else {
        buf[off] = r.scale_codes[i];
      }
    }
  }
  return buf;
}

std::vector<double> dequantize(const QuantResult& r) {
  const int64_t count = r.num_tokens * r.hidden;
  const bool fp4 = is_fp4(r.spec.kind);
  const int64_t block = quant_block_elems(r.spec.kind, r.hidden);
  std::vector<double> out(count);
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t code = value_code(r, r.values.data(), i);
    const double v = fp4 ? quant::decode_e2m1(code) : quant::decode_e4m3(code);
    if (r.spec.kind == QuantKind::kFp8PerTensor) {
      out[i] = v * r.spec.static_scale;
      continue;
    }
    const int64_t t = i / r.hidden, c = (i % r.hidden) / block;
    const double scale = r.scales[t * r.scale_cols + c];
    out[i] = r.spec.kind == QuantKind::kNvfp4 ? v * scale / r.spec.global_scale : v * scale;
  }
  return out;
}

int e4m3_ordinal(uint8_t code) {
  const int magnitude = code & 0x7F;
  return (code & 0x80) ? -magnitude : magnitude;
}

int e2m1_ordinal(uint8_t code) {
  const int magnitude = code & 0x7;
  return (code & 0x8) ? -magnitude : magnitude;
}

std::string first_quant_mismatch(const QuantResult& want, const uint8_t* got_values,
                                 const uint8_t* got_scales, ScaleLayout layout,
                                 ScaleStorage storage, int max_steps) {
  std::string scales;
  if (want.spec.kind != QuantKind::kFp8PerTensor) {
    if (!quant_scales_supported(want.spec, layout, storage)) {
      return "scales: this pattern cannot store scales in the requested layout/storage";
    }
    scales = first_scale_mismatch(want, got_scales, layout, storage);
  }
  const std::string values = first_value_mismatch(want, got_values, max_steps);
  if (scales.empty() || values.empty()) return scales + values;
  return scales + "; " + values;
}

}  // namespace arf::ref
