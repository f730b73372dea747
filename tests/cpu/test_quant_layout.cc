// Tests of src/common/quant_layout.h: hand-checked offsets of every scale layout (against the
// formulas TRT-LLM's and FlashInfer's code and tests use, written here independently), and for each
// layout a bijection check: every position of the padded grid, padding included, maps to its own
// in-bounds slot and together they fill the buffer exactly.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/quant_layout.h"

namespace arf::quant {
namespace {

// The 128x4 layout as TRT-LLM's get_sf_out_offset_128x4 spells it: [mTile, kTile, 32, 4, 4] with
// strides (kTiles * 512, 512, 16, 4, 1).
int64_t trtllm_128x4(int64_t m, int64_t k, int64_t cols) {
  const int64_t k_tiles = (cols + 3) / 4;
  return (m / 128) * k_tiles * 512 + (k / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 + k % 4;
}

TEST(QuantLayout, RoundingHelpers) {
  EXPECT_EQ(ceil_div(0, 4), 0);
  EXPECT_EQ(ceil_div(5, 4), 2);
  EXPECT_EQ(round_up(1, 4), 4);
  EXPECT_EQ(round_up(4, 4), 4);
  EXPECT_EQ(round_up(129, 128), 256);
  EXPECT_EQ(mn_major_tokens(1), 4);
  EXPECT_EQ(mn_major_tokens(8), 8);
  EXPECT_EQ(mn_major_tokens(0), 0);
}

TEST(QuantLayout, RowMajorHandChecked) {
  EXPECT_EQ(row_major_offset(0, 0, 56), 0);
  EXPECT_EQ(row_major_offset(2, 3, 56), 115);
  EXPECT_EQ(scale_byte_offset(ScaleLayout::kRowMajor, ScaleStorage::kFp32, 2, 3, 10, 56), 460);
  EXPECT_EQ(scale_byte_offset(ScaleLayout::kRowMajor, ScaleStorage::kByte, 2, 3, 10, 56), 115);
  EXPECT_EQ(scale_buffer_bytes(ScaleLayout::kRowMajor, ScaleStorage::kFp32, 10, 56), 2240);
  EXPECT_EQ(scale_buffer_bytes(ScaleLayout::kRowMajor, ScaleStorage::kFp32, 10, 1),
            40);  // per-token
}

TEST(QuantLayout, MnMajorFp32HandChecked) {
  // T = 3 pads to 4: scale (t, c) at c * 4 + t.
  EXPECT_EQ(mn_major_offset(0, 0, 3), 0);
  EXPECT_EQ(mn_major_offset(2, 0, 3), 2);
  EXPECT_EQ(mn_major_offset(0, 1, 3), 4);
  EXPECT_EQ(mn_major_offset(2, 55, 3), 222);
  EXPECT_EQ(scale_byte_offset(ScaleLayout::kMnMajor, ScaleStorage::kFp32, 2, 55, 3, 56), 888);
  EXPECT_EQ(scale_buffer_bytes(ScaleLayout::kMnMajor, ScaleStorage::kFp32, 3, 56), 56 * 4 * 4);
  EXPECT_EQ(scale_buffer_bytes(ScaleLayout::kMnMajor, ScaleStorage::kFp32, 4096, 56),
            56 * 4096 * 4);
}

TEST(QuantLayout, MnMajorPackedUe8m0MatchesFlashInferPacking) {
  // FlashInfer's group-quant test: elem_idx = (g // 4) * tma_aligned_mn + t; byte elem_idx * 4 + g
  // % 4.
  for (const int64_t tokens : {1, 3, 4, 5, 127}) {
    for (const int64_t groups : {1, 2, 3, 5, 6, 56}) {
      const int64_t aligned = (tokens + 3) / 4 * 4;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t g = 0; g < groups; ++g) {
          ASSERT_EQ(mn_major_packed_offset(t, g, tokens), ((g / 4) * aligned + t) * 4 + g % 4)
              << tokens << " " << groups << " " << t << " " << g;
        }
      }
    }
  }
  EXPECT_EQ(mn_major_packed_offset(0, 1, 3), 1);
  EXPECT_EQ(mn_major_packed_offset(1, 0, 3), 4);
  EXPECT_EQ(mn_major_packed_offset(0, 4, 3), 16);
  EXPECT_EQ(mn_major_packed_offset(1, 5, 3), 21);
  EXPECT_EQ(scale_buffer_bytes(ScaleLayout::kMnMajor, ScaleStorage::kByte, 3, 5), 2 * 4 * 4);
}

TEST(QuantLayout, Swizzled128x4HandChecked) {
  EXPECT_EQ(swizzled_128x4_offset(0, 0, 8), 0);
  EXPECT_EQ(swizzled_128x4_offset(0, 3, 8), 3);
  EXPECT_EQ(swizzled_128x4_offset(0, 4, 8), 512);  // next column tile
  EXPECT_EQ(swizzled_128x4_offset(1, 0, 8), 16);
  EXPECT_EQ(swizzled_128x4_offset(31, 0, 8), 496);
  EXPECT_EQ(swizzled_128x4_offset(32, 0, 8), 4);  // rows 32 apart share a 16-byte line
  EXPECT_EQ(swizzled_128x4_offset(96, 3, 8), 15);
  EXPECT_EQ(swizzled_128x4_offset(33, 2, 8), 22);
  EXPECT_EQ(swizzled_128x4_offset(128, 0, 8), 1024);  // next row tile, after both column tiles
  EXPECT_EQ(swizzled_128x4_offset(128, 0, 5), 1024);  // 5 columns still take 2 column tiles
  for (const int64_t cols : {1, 4, 5, 90, 180, 448}) {
    for (int64_t m = 0; m < 300; ++m) {
      for (int64_t k = 0; k < round_up(cols, 4); ++k) {
        ASSERT_EQ(swizzled_128x4_offset(m, k, cols), trtllm_128x4(m, k, cols)) << m << " " << k;
      }
    }
  }
}

TEST(QuantLayout, SwizzledBufferSizes) {
  // round_up(T, 128) * round_up(H / 16, 4): hidden 7168 NVFP4, 2880 NVFP4 and 2880 MXFP4.
  EXPECT_EQ(scale_buffer_bytes(ScaleLayout::kSwizzled128x4, ScaleStorage::kByte, 1, 448),
            128 * 448);
  EXPECT_EQ(scale_buffer_bytes(ScaleLayout::kSwizzled128x4, ScaleStorage::kByte, 129, 180),
            256 * 180);
  EXPECT_EQ(scale_buffer_bytes(ScaleLayout::kSwizzled128x4, ScaleStorage::kByte, 128, 90),
            128 * 92);
  EXPECT_EQ(scale_buffer_bytes(ScaleLayout::kSwizzled128x4, ScaleStorage::kByte, 0, 90), 0);
}

TEST(QuantLayout, UnsupportedPairsHaveNoBuffer) {
  EXPECT_FALSE(scale_layout_supported(ScaleLayout::kSwizzled128x4, ScaleStorage::kFp32));
  EXPECT_EQ(scale_buffer_bytes(ScaleLayout::kSwizzled128x4, ScaleStorage::kFp32, 4, 4), 0);
  EXPECT_EQ(scale_byte_offset(ScaleLayout::kSwizzled128x4, ScaleStorage::kFp32, 0, 0, 4, 4), -1);
  EXPECT_TRUE(scale_layout_supported(ScaleLayout::kMnMajor, ScaleStorage::kByte));
}

// Every (t, c) of the padded grid gets a distinct, element-aligned, in-bounds slot, and the slots
// of the padded grid fill the buffer exactly; the unpadded grid's slots are a subset of them.
std::string check_bijection(ScaleLayout layout, ScaleStorage storage, int64_t tokens,
                            int64_t cols) {
  const int64_t bytes = scale_buffer_bytes(layout, storage, tokens, cols);
  const int64_t eb = scale_elem_bytes(storage);
  const int64_t rows = scale_padded_tokens(layout, tokens);
  const int64_t padded_cols = scale_padded_cols(layout, storage, cols);
  if (rows * padded_cols * eb != bytes) return "padded grid does not match the buffer size";
  std::vector<int> hits(bytes, 0);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t c = 0; c < padded_cols; ++c) {
      const int64_t off = scale_byte_offset(layout, storage, t, c, tokens, cols);
      if (off < 0 || off + eb > bytes || off % eb != 0) {
        return "(" + std::to_string(t) + ", " + std::to_string(c) + ") -> " + std::to_string(off);
      }
      for (int64_t b = 0; b < eb; ++b) ++hits[off + b];
    }
  }
  for (int64_t b = 0; b < bytes; ++b) {
    if (hits[b] != 1)
      return "byte " + std::to_string(b) + " hit " + std::to_string(hits[b]) + " times";
  }
  return "";
}

TEST(QuantLayout, EveryLayoutIsABijectionOntoItsPaddedBuffer) {
  const ScaleLayout layouts[] = {ScaleLayout::kRowMajor, ScaleLayout::kMnMajor,
                                 ScaleLayout::kSwizzled128x4};
  const ScaleStorage storages[] = {ScaleStorage::kFp32, ScaleStorage::kByte};
  for (const ScaleLayout layout : layouts) {
    for (const ScaleStorage storage : storages) {
      if (!scale_layout_supported(layout, storage)) continue;
      for (const int64_t tokens : {1, 2, 3, 4, 5, 31, 32, 127, 128, 129, 257}) {
        for (const int64_t cols : {1, 2, 3, 4, 5, 16, 22, 56, 57, 90, 180}) {
          EXPECT_EQ(check_bijection(layout, storage, tokens, cols), "")
              << "layout " << static_cast<int>(layout) << " storage " << static_cast<int>(storage)
              << " tokens " << tokens << " cols " << cols;
        }
      }
    }
  }
}

// The kernels' switch-free addressing (ScaleAddressing) is scale_byte_offset on every position of
// every padded grid, padding included, for every supported pair, and 64-bit at large shapes.
TEST(QuantLayout, ScaleAddressingEqualsScaleByteOffset) {
  const ScaleLayout layouts[] = {ScaleLayout::kRowMajor, ScaleLayout::kMnMajor,
                                 ScaleLayout::kSwizzled128x4};
  const ScaleStorage storages[] = {ScaleStorage::kFp32, ScaleStorage::kByte};
  int64_t checked = 0;
  for (const ScaleLayout layout : layouts) {
    for (const ScaleStorage storage : storages) {
      if (!scale_layout_supported(layout, storage)) continue;
      for (const int64_t tokens : {1, 2, 3, 4, 5, 31, 32, 33, 127, 128, 129, 255, 257, 1000}) {
        for (const int64_t cols : {1, 2, 3, 4, 5, 7, 8, 16, 22, 56, 57, 64, 90, 180, 1024}) {
          const ScaleAddressing a = scale_addressing(layout, storage, tokens, cols);
          const int64_t rows = scale_padded_tokens(layout, tokens);
          const int64_t padded_cols = scale_padded_cols(layout, storage, cols);
          for (int64_t t = 0; t < rows; ++t) {
            for (int64_t c = 0; c < padded_cols; ++c, ++checked) {
              ASSERT_EQ(a.offset(t, c), scale_byte_offset(layout, storage, t, c, tokens, cols))
                  << "layout " << static_cast<int>(layout) << " storage " << static_cast<int>(storage)
                  << " tokens " << tokens << " cols " << cols << " t " << t << " c " << c;
            }
          }
        }
      }
      const int64_t big_t = 3'000'000, big_c = 127;  // offsets past 2^31
      EXPECT_EQ(scale_addressing(layout, storage, big_t, 128).offset(big_t - 1, big_c),
                scale_byte_offset(layout, storage, big_t - 1, big_c, big_t, 128));
    }
  }
  EXPECT_GT(checked, int64_t{1} << 20);
  EXPECT_EQ(scale_addressing(ScaleLayout::kSwizzled128x4, ScaleStorage::kFp32, 8, 8).t7, 0);  // unsupported
}

TEST(QuantLayout, PackedFp4LowNibbleIsTheEvenElement) {
  EXPECT_EQ(fp4_byte_offset(0, 0, 16), 0);
  EXPECT_EQ(fp4_byte_offset(0, 1, 16), 0);
  EXPECT_EQ(fp4_byte_offset(0, 2, 16), 1);
  EXPECT_EQ(fp4_byte_offset(1, 0, 16), 8);
  EXPECT_EQ(fp4_byte_offset(3, 15, 16), 31);
  EXPECT_EQ(pack_fp4_pair(0x1, 0xF), 0xF1);
  EXPECT_EQ(pack_fp4_pair(0x7A, 0x35), 0x5A);  // only the low nibble of each argument counts
  EXPECT_EQ(fp4_nibble(0xF1, 0), 0x1);
  EXPECT_EQ(fp4_nibble(0xF1, 1), 0xF);
  EXPECT_EQ(fp4_nibble(0xF1, 6), 0x1);
  // Large offsets stay 64-bit: 65536 tokens x 16384 hidden.
  EXPECT_EQ(fp4_byte_offset(65535, 16383, 16384), (int64_t{65536} * 16384 - 1) / 2);
}

}  // namespace
}  // namespace arf::quant
