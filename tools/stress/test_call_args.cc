// CPU tests of call_args.h with fake pointers: what the library is given and what our kernels
// assume agree, and the overwrite kernel is never told to garbage an output.
#include <gtest/gtest.h>

#include <vector>

#include "call_args.h"
#include "replay_csv.h"
#include "schedule.h"

namespace arf::stress {
namespace {

TensorSet fake_tensors() {
  TensorSet t;
  auto p = [](uintptr_t a) { return reinterpret_cast<uint16_t*>(a); };
  t.input = p(0x10000);
  t.residual_in = p(0x20000);
  t.residual_out = p(0x30000);
  t.norm_out = p(0x40000);
  t.allreduce_out = p(0x50000);
  t.gamma = p(0x60000);
  t.quant_out = reinterpret_cast<uint8_t*>(0x70000);
  t.scale_out = reinterpret_cast<uint8_t*>(0x80000);
  t.scale_in = reinterpret_cast<float*>(0x90000);
  return t;
}

TEST(StressCallArgs, Aliasing) {
  const TensorSet t = fake_tensors();
  const RunConstants k;
  CallSpec c;
  c.pattern = Pat::kAllReduce;
  c.allreduce_out_is_input = true;
  EXPECT_EQ(fused_args(c, arfBFloat16, t).allreduce_out, t.input);
  EXPECT_EQ(device_call(c, k, 0, 2, t).input_is_output, 1u);
  c.pattern = Pat::kFlat;
  c.flat_count = 64;
  EXPECT_EQ(flat_args(c, t).out, t.input);
  EXPECT_EQ(flat_args(c, t).count, 64u);
  c.allreduce_out_is_input = false;
  EXPECT_EQ(flat_args(c, t).out, t.allreduce_out);
  EXPECT_EQ(device_call(c, k, 0, 2, t).input_is_output, 0u);

  c = CallSpec{};
  c.pattern = Pat::kResidualRmsNorm;
  c.residual_in_place = true;
  c.norm_out_is_input = true;
  arfFusedArgs_t a = fused_args(c, arfBFloat16, t);
  EXPECT_EQ(a.residual_out, t.residual_in);
  EXPECT_EQ(a.norm_out, t.input);
  DeviceCall d = device_call(c, k, 1, 2, t);
  EXPECT_EQ(d.residual_is_output, 1u);
  EXPECT_EQ(d.input_is_output, 1u);
  EXPECT_EQ(d.residual_out, t.residual_in);
  c.residual_null = true;  // in place is meaningless without a residual
  a = fused_args(c, arfBFloat16, t);
  EXPECT_EQ(a.residual_in, nullptr);
  EXPECT_EQ(a.residual_out, t.residual_out);
  d = device_call(c, k, 1, 2, t);
  EXPECT_EQ(d.residual_in, nullptr);
  EXPECT_EQ(d.residual_is_output, 0u);
  EXPECT_EQ(d.residual_null, 1u);
}

TEST(StressCallArgs, QuantTensors) {
  const TensorSet t = fake_tensors();
  CallSpec c;
  c.tokens = 5;
  c.hidden = 1024;
  c.pattern = Pat::kFp8Tensor;
  arfFusedArgs_t a = fused_args(c, arfBFloat16, t);
  EXPECT_EQ(a.scale_out, nullptr);
  EXPECT_EQ(a.scale_in, t.scale_in);
  EXPECT_EQ(a.norm_out, t.norm_out);  // always the side output, checked
  EXPECT_EQ(device_call(c, RunConstants{}, 0, 2, t).scale_bytes, 0);
  c.pattern = Pat::kFp8Group;
  c.layout = arfScaleMnMajor;
  c.format = arfScaleUe8m0Packed;
  a = fused_args(c, arfBFloat16, t);
  EXPECT_EQ(a.scale_in, nullptr);
  EXPECT_EQ(a.scale_out, t.scale_out);
  const DeviceCall d = device_call(c, RunConstants{}, 0, 2, t);
  EXPECT_EQ(d.scale_bytes, static_cast<int64_t>(arfScaleBufferBytes(arfPatternResidualRmsNormFp8PerGroup,
                                                                   arfScaleMnMajor, arfScaleUe8m0Packed, 5, 1024)));
  EXPECT_EQ(d.layout, 1u);
  c.pattern = Pat::kNvfp4;
  c.layout = arfScaleSwizzled128x4;
  c.format = arfScaleFp32;
  EXPECT_EQ(fused_args(c, arfBFloat16, t).scale_in, t.scale_in);
  EXPECT_EQ(device_call(c, RunConstants{}, 0, 2, t).layout, 2u);
}

// The property the overwrite kernel relies on, over many generated calls: it garbages input
// unless input is an output, and residual_in unless residual_in is an output.
TEST(StressCallArgs, OverwriteNeverHitsAnOutput) {
  ScheduleOptions o;
  o.patterns = {Pat::kAllReduce, Pat::kFlat, Pat::kResidualRmsNorm, Pat::kFp8Token, Pat::kNvfp4};
  o.algos = {arfAlgoAuto};
  o.hiddens = {128, 1024};
  o.max_tokens = 16;
  const PlanOracle any = [](const CallSpec&) {
    PlanInfo p;
    p.ok = true;
    return p;
  };
  const BoundaryTable table;
  Generator g(o, &table, any);
  const TensorSet t = fake_tensors();
  for (int i = 0; i < 5000; ++i) {
    const CallSpec c = g.next();
    const DeviceCall d = device_call(c, RunConstants{}, 0, 2, t);
    const void* outputs[] = {d.allreduce_out, d.residual_out, d.norm_out, d.quant_out, d.scale_out};
    for (const void* out : outputs) {
      if (out == nullptr) continue;
      if (!d.input_is_output) {
        ASSERT_NE(out, static_cast<const void*>(d.input)) << replay_csv_row(c);
      }
      if (!d.residual_is_output && d.residual_in != nullptr) {
        ASSERT_NE(out, static_cast<const void*>(d.residual_in)) << replay_csv_row(c);
      }
    }
    ASSERT_EQ(d.count, c.pattern == Pat::kFlat ? c.flat_count : c.tokens * c.hidden);
  }
}

// Every unit (row or chunk) of every comparable call is recomputed on exactly one rank: under
// rotate wholly on one rank, each rank in turn; under split spread over the ranks, the first unit
// on a different rank each call. A call whose outputs differ by rank (per-rank residual/gamma) and
// every call under --reference all are recomputed wholly on every rank. The kernels' own rule
// (reference_unit on the DeviceCall) agrees with the host's.
TEST(StressCallArgs, EveryUnitRecomputedOnceUnderRotateAndSplit) {
  const TensorSet t = fake_tensors();
  CallSpec c;
  c.pattern = Pat::kResidualRmsNorm;
  c.tokens = 4;
  c.hidden = 128;
  for (ReferenceMode mode : {ReferenceMode::kRotate, ReferenceMode::kSplit}) {
    RunConstants k;
    k.reference = mode;
    for (uint32_t world : {1u, 2u, 4u, 8u}) {
      std::vector<int> whole_calls(world, 0), first_units(world, 0);
      for (uint64_t call = 0; call < 4 * world; ++call) {
        c.index = call;
        for (int64_t unit = 0; unit < 3 * static_cast<int64_t>(world) + 1; ++unit) {
          int on = 0;
          for (uint32_t r = 0; r < world; ++r) {
            const ReferenceUnits ref = reference_units(c, k, r, world);
            const DeviceCall d = device_call(c, k, r, world, t);
            EXPECT_EQ(reference_unit(d, unit), ref.covers(unit));
            if (ref.covers(unit)) {
              ++on;
              if (unit == 0) ++first_units[r];
            }
          }
          EXPECT_EQ(on, 1) << reference_mode_name(mode) << " world " << world << " call " << call << " unit " << unit;
        }
        for (uint32_t r = 0; r < world; ++r) {
          const ReferenceUnits ref = reference_units(c, k, r, world);
          whole_calls[r] += ref.stride == 1;
          if (mode == ReferenceMode::kSplit && world > 1) {
            EXPECT_EQ(ref.stride, world);
          }
        }
      }
      for (uint32_t r = 0; r < world; ++r) {
        EXPECT_EQ(first_units[r], 4) << reference_mode_name(mode) << " world " << world << " rank " << r;
        if (mode == ReferenceMode::kRotate) {
          EXPECT_EQ(whole_calls[r], 4) << "world " << world << " rank " << r;
        }
      }
    }
  }
  RunConstants k;
  k.reference = ReferenceMode::kSplit;
  c.per_rank_residual_gamma = true;  // outputs differ by rank: nobody else can vouch for them
  ASSERT_FALSE(c.comparable_across_ranks());
  for (uint32_t r = 0; r < 8; ++r) EXPECT_EQ(reference_units(c, k, r, 8).stride, 1u);
  c.per_rank_residual_gamma = false;
  k.reference = ReferenceMode::kAll;
  for (uint32_t r = 0; r < 8; ++r) {
    const ReferenceUnits ref = reference_units(c, k, r, 8);
    EXPECT_TRUE(ref.stride == 1 && ref.phase == 0);
  }
}

// The input-buffer draw: about the asked share of (call, rank) pairs, ranks differing, never with an
// output aliasing the input, never at 0 %, always at 100 %.
TEST(StressCallArgs, InputInBufferDraw) {
  CallSpec c;
  c.pattern = Pat::kResidualRmsNorm;
  int hits = 0, differ = 0;
  constexpr int kCalls = 3000;
  for (int call = 0; call < kCalls; ++call) {
    c.index = static_cast<uint64_t>(call);
    const bool r0 = input_in_buffer(c, 7, 0, 33), r1 = input_in_buffer(c, 7, 1, 33);
    hits += r0;
    differ += r0 != r1;
    EXPECT_FALSE(input_in_buffer(c, 7, 0, 0));
    EXPECT_TRUE(input_in_buffer(c, 7, 0, 100));
  }
  EXPECT_GT(hits, kCalls * 28 / 100);
  EXPECT_LT(hits, kCalls * 38 / 100);
  EXPECT_GT(differ, kCalls / 5);  // ranks make their own choice
  c.norm_out_is_input = true;
  EXPECT_FALSE(input_in_buffer(c, 7, 0, 100));
  c.norm_out_is_input = false;
  c.pattern = Pat::kFlat;
  c.allreduce_out_is_input = true;
  EXPECT_FALSE(input_in_buffer(c, 7, 0, 100));
}

}  // namespace
}  // namespace arf::stress
