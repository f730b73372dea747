// Where quantized values and their scales live in memory: __host__ __device__ index arithmetic
// shared by the quantizing kernels, the CPU reference (quant_reference.cc) and the host's buffer
// sizing. Offsets are 64-bit throughout (T * H passes 2^31 at large batches).
//
// Scale layouts (T tokens, `cols` scales per token: H/128 per-group, H/16 NVFP4, H/32 MXFP4, 1
// per-token):
//  * kRowMajor: [T, cols]. Per-token scales are [T] (cols = 1); for NVFP4/MXFP4 this is the
//    "linear" layout.
//  * kMnMajor (FP8 per-group only), the Hopper DeepGEMM/TMA layout: fp32 scales as [cols, Tp] with
//    Tp = round_up(T, 4), so every column starts 16-byte aligned. UE8M0 byte scales are packed 4
//    per 32-bit word along K as DeepGEMM's SM100 path and FlashInfer's packed group quant do:
//    word (c / 4) * Tp + t, byte c % 4 of it (little-endian).
//  * kSwizzled128x4 (NVFP4/MXFP4 only), the cuBLASLt/CUTLASS/TRT-LLM block-scale layout: 512-byte
//    tiles of 128 rows x 4 scale columns, tiles ordered row-tile-major; inside a tile, row r and
//    column k sit at (r % 32) * 16 + (r / 32) * 4 + k (TRT-LLM get_sf_out_offset_128x4).
// Every layout's buffer is the full padded size below, and padding (rows >= T, columns >= cols)
// must be zero: consumers read whole tiles. A caller that sizes an MN-major buffer by its last
// valid element (T + (cols - 1) * Tp) is too small; validation must ask for scale_buffer_bytes.
#pragma once

#include <cstdint>

#include "base/host_device.h"
#include "base/int_math.h"
#include "common/quant_formats.h"

namespace arf::quant {

inline constexpr int kFp8GroupElems = 128;    // FP8 per-group: one scale per 1x128 elements
inline constexpr int kNvfp4BlockElems = 16;   // NVFP4: one e4m3 scale per 16 elements
inline constexpr int kMxfp4BlockElems = 32;   // MXFP4: one UE8M0 scale per 32 elements
inline constexpr int kMnMajorTokenAlign = 4;  // 4 x 4-byte words = TMA's 16-byte alignment
inline constexpr int kSwizzleTileRows = 128;
inline constexpr int kSwizzleTileCols = 4;
inline constexpr int kSwizzleTileBytes = kSwizzleTileRows * kSwizzleTileCols;

enum class ScaleLayout : int { kRowMajor = 0, kMnMajor = 1, kSwizzled128x4 = 2 };
// Scale element storage: fp32 values, or one-byte codes (UE8M0 exponents, NVFP4 e4m3 codes).
enum class ScaleStorage : int { kFp32 = 0, kByte = 1 };

// ---- per-layout offsets (in scale elements for fp32 layouts, in bytes for byte layouts) --------

ARF_HD constexpr int64_t row_major_offset(int64_t t, int64_t c, int64_t cols) {
  return t * cols + c;
}

ARF_HD constexpr int64_t mn_major_tokens(int64_t num_tokens) {
  return round_up(num_tokens, kMnMajorTokenAlign);
}

// fp32 MN-major: element offset of scale (t, c) in [cols, Tp].
ARF_HD constexpr int64_t mn_major_offset(int64_t t, int64_t c, int64_t num_tokens) {
  return c * mn_major_tokens(num_tokens) + t;
}

// UE8M0 MN-major, 4 codes per 32-bit word: byte offset of scale (t, c).
ARF_HD constexpr int64_t mn_major_packed_offset(int64_t t, int64_t c, int64_t num_tokens) {
  return ((c / 4) * mn_major_tokens(num_tokens) + t) * 4 + c % 4;
}

// 128x4-swizzled byte offset of scale (t, c) for a row of `cols` scales. Valid for the padding
// too (t < round_up(T, 128), c < round_up(cols, 4)), which is how kernels zero it.
ARF_HD constexpr int64_t swizzled_128x4_offset(int64_t t, int64_t c, int64_t cols) {
  const int64_t col_tiles = ceil_div(cols, kSwizzleTileCols);
  const int64_t tile = (t / kSwizzleTileRows) * col_tiles + c / kSwizzleTileCols;
  const int64_t in_tile = (t % 32) * 16 + ((t % kSwizzleTileRows) / 32) * 4 + c % kSwizzleTileCols;
  return tile * kSwizzleTileBytes + in_tile;
}

// ---- the three layouts behind one interface ---------------------------------------------------

ARF_HD constexpr int64_t scale_elem_bytes(ScaleStorage storage) {
  return storage == ScaleStorage::kFp32 ? 4 : 1;
}

// Which (layout, storage) pairs exist: the swizzled layout holds byte codes only.
ARF_HD constexpr bool scale_layout_supported(ScaleLayout layout, ScaleStorage storage) {
  return layout != ScaleLayout::kSwizzled128x4 || storage == ScaleStorage::kByte;
}

// A row-major buffer of up to two dimensions, each the same function of the token count T for
// every T: tokens_scale * round_up(T, tokens_align) + fixed (tokens_scale 0: independent of T).
// The public arfQuantOutputLayout reports buffers so (core/quant_rules.cc), for callers that shape
// a buffer before T is known.
struct BufferDim {
  int64_t tokens_align, tokens_scale, fixed;
  ARF_HD constexpr int64_t at(int64_t num_tokens) const {
    return tokens_scale * round_up(num_tokens, tokens_align) + fixed;
  }
};
struct BufferShape {
  int rank;            // 1 or 2; 0: no such buffer
  int64_t elem_bytes;
  BufferDim dims[2];
  ARF_HD constexpr int64_t bytes(int64_t num_tokens) const {
    int64_t n = rank > 0 ? elem_bytes : 0;
    for (int i = 0; i < rank; ++i) n *= dims[i].at(num_tokens);
    return n;
  }
};

// The scale buffer of (layout, storage) for rows of `cols` scales, as the array a consumer views:
// row-major [T, cols]; MN-major fp32 [cols, Tp], MN-major packed bytes [ceil(cols / 4), 4 * Tp]
// (Tp = round_up(T, 4)); 128x4-swizzled bytes [round_up(T, 128), round_up(cols, 4)]. Padding
// included; rank 0 for an unsupported pair. The one statement of a scale buffer's extent:
// scale_buffer_bytes multiplies it out.
ARF_HD constexpr BufferShape scale_buffer_shape(ScaleLayout layout, ScaleStorage storage, int64_t cols) {
  if (!scale_layout_supported(layout, storage)) return {0, 0, {{1, 0, 0}, {1, 0, 0}}};
  const int64_t e = scale_elem_bytes(storage);
  switch (layout) {
    case ScaleLayout::kRowMajor:
      return {2, e, {{1, 1, 0}, {1, 0, cols}}};
    case ScaleLayout::kMnMajor:
      return storage == ScaleStorage::kFp32
                 ? BufferShape{2, e, {{1, 0, cols}, {kMnMajorTokenAlign, 1, 0}}}
                 : BufferShape{2, e, {{1, 0, ceil_div(cols, 4)}, {kMnMajorTokenAlign, 4, 0}}};
    case ScaleLayout::kSwizzled128x4:
      return {2, e, {{kSwizzleTileRows, 1, 0}, {1, 0, round_up(cols, kSwizzleTileCols)}}};
  }
  return {0, 0, {{1, 0, 0}, {1, 0, 0}}};
}

// Bytes a scale buffer must have, padding included (0 for an unsupported pair).
ARF_HD constexpr int64_t scale_buffer_bytes(ScaleLayout layout, ScaleStorage storage,
                                            int64_t num_tokens, int64_t cols) {
  return scale_buffer_shape(layout, storage, cols).bytes(num_tokens);
}

// Byte offset of scale (t, c), padding positions included; -1 for an unsupported pair.
ARF_HD constexpr int64_t scale_byte_offset(ScaleLayout layout, ScaleStorage storage, int64_t t,
                                           int64_t c, int64_t num_tokens, int64_t cols) {
  if (!scale_layout_supported(layout, storage)) return -1;
  switch (layout) {
    case ScaleLayout::kRowMajor:
      return row_major_offset(t, c, cols) * scale_elem_bytes(storage);
    case ScaleLayout::kMnMajor:
      return storage == ScaleStorage::kFp32 ? mn_major_offset(t, c, num_tokens) * 4
                                            : mn_major_packed_offset(t, c, num_tokens);
    case ScaleLayout::kSwizzled128x4:
      return swizzled_128x4_offset(t, c, cols);
  }
  return -1;
}

// scale_byte_offset without a switch, as kernels use it: every layout's offset is a row part plus a
// column part, each linear in the bit fields t = 128 t7 + 32 t5 + t0 (t7 = t / 128, t5 = t / 32 % 4,
// t0 = t % 32) and c = 4 c2 + c0 (c2 = c / 4, c0 = c % 4), so one set of five coefficients per
// call describes it: row-major (t * cols + c) * bytes, MN-major fp32 (c * Tp + t) * 4, MN-major
// packed ((c / 4) * Tp + t) * 4 + c % 4, and the 128x4 tiles (tile * 512 + t0 * 16 + t5 * 4 + c0,
// tile = t7 * col_tiles + c2). The host computes the coefficients once per call and the kernels
// read them from their parameters (tests/cpu/test_quant_layout.cc: equal to scale_byte_offset on
// every padded position).
struct ScaleAddressing {
  int64_t t7, t5, t0, c2, c0;  // bytes per unit of each field
  ARF_HD constexpr int64_t row_part(int64_t t) const {
    return (t >> 7) * t7 + ((t >> 5) & 3) * t5 + (t & 31) * t0;
  }
  ARF_HD constexpr int64_t col_part(int64_t c) const { return (c >> 2) * c2 + (c & 3) * c0; }
  ARF_HD constexpr int64_t offset(int64_t t, int64_t c) const { return row_part(t) + col_part(c); }
};

// The coefficients of (layout, storage) for num_tokens rows of `cols` scales (all zero for an
// unsupported pair).
ARF_HD constexpr ScaleAddressing scale_addressing(ScaleLayout layout, ScaleStorage storage,
                                                  int64_t num_tokens, int64_t cols) {
  if (!scale_layout_supported(layout, storage)) return {0, 0, 0, 0, 0};
  const int64_t e = scale_elem_bytes(storage);
  switch (layout) {
    case ScaleLayout::kRowMajor:
      return {128 * cols * e, 32 * cols * e, cols * e, 4 * e, e};
    case ScaleLayout::kMnMajor: {
      const int64_t tp = mn_major_tokens(num_tokens);
      return storage == ScaleStorage::kFp32 ? ScaleAddressing{512, 128, 4, 16 * tp, 4 * tp}
                                            : ScaleAddressing{512, 128, 4, 4 * tp, 1};
    }
    case ScaleLayout::kSwizzled128x4:
      return {ceil_div(cols, kSwizzleTileCols) * kSwizzleTileBytes, 4, 16, kSwizzleTileBytes, 1};
  }
  return {0, 0, 0, 0, 0};
}

// The padded grid a layout covers: every (t, c) with t < padded_tokens and c < padded_cols has an
// offset, and together they cover the buffer exactly once (tests/cpu/test_quant_layout.cc).
ARF_HD constexpr int64_t scale_padded_tokens(ScaleLayout layout, int64_t num_tokens) {
  return layout == ScaleLayout::kMnMajor         ? mn_major_tokens(num_tokens)
         : layout == ScaleLayout::kSwizzled128x4 ? round_up(num_tokens, kSwizzleTileRows)
                                                 : num_tokens;
}
ARF_HD constexpr int64_t scale_padded_cols(ScaleLayout layout, ScaleStorage storage, int64_t cols) {
  return layout == ScaleLayout::kSwizzled128x4 ? round_up(cols, kSwizzleTileCols)
         : layout == ScaleLayout::kMnMajor && storage == ScaleStorage::kByte ? round_up(cols, 4)
                                                                             : cols;
}

// ---- packed FP4 values: [T, H/2] bytes, element 2i in the low nibble, 2i+1 in the high one ----

ARF_HD constexpr int64_t fp4_byte_offset(int64_t t, int64_t c, int64_t hidden) {
  return (t * hidden + c) / 2;
}
ARF_HD constexpr uint8_t pack_fp4_pair(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 0xFu) | ((odd & 0xFu) << 4));
}
ARF_HD constexpr uint8_t fp4_nibble(uint8_t byte, int64_t c) {
  return static_cast<uint8_t>((c & 1) ? byte >> 4 : byte & 0xFu);
}

}  // namespace arf::quant
