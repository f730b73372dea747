// The check kernel of the soak: every output of one call on one rank against the numerics
// contract (numerics.h) and the quantization rules (quant_rules.h), with the expected values
// recomputed from the data hash of EVERY rank (data_gen.h) — nothing the library wrote is trusted
// except the outputs under test (and, for quant_out/scale_out, its own norm_out, by design; for a
// sandwich call's norm_out, its own residual_out, checked first: the contract derives the one from
// the other, and residual_out may be any of the values an accepted h gives).
//
// Layout: CTA b checks rows b, b+G, ... (flat/allreduce: a grid-stride over elements). Per row:
// pass A (all-reduce, residual_out, sum of squares in double, y cached in dynamic shared memory
// when the row fits; sandwich calls first a pass A0 over the sum for h's scale), a block
// reduction, pass B (norm_out; FP8 per-tensor codes; per-token amax), pass C (per-token codes, or
// per group/block, one lane group of a warp per block: amax, scale rule, codes). Then a grid-stride over the whole scale buffer (hash, padding == 0). Verdicts: per-CTA sums, device atomics, and the
// last CTA publishes the rank's counters to the pinned mirror (counters.h).
#include <cuda_runtime.h>

#include "data_gen.h"
#include "kernels.h"
#include "kernels_device.cuh"
#include "numerics.h"
#include "quant_rules.h"

namespace arf::stress {
namespace {

struct Ctx {
  const DeviceCall& c;
  Act dt;
  unsigned wrong = 0;
  unsigned long long hash = 0;

  __device__ void bad(uint32_t output, int64_t row, int64_t col, uint32_t got, uint32_t want) {
    ++wrong;
    if (atomicCAS(&c.counters->first_claimed, 0u, 1u) == 0u) {
      FirstBad& f = c.counters->first;
      f.call = c.call;
      f.output = output;
      f.got = got;
      f.want = want;
      f.row = row;
      f.col = col;
      __threadfence();
    }
  }
};

// gamma's or (gbase of kStreamPostGamma) post_gamma's value: both of gamma's dtype.
__device__ float gamma_value(const DeviceCall& c, uint64_t gbase, int64_t col, Act dt) {
  return c.gamma_fp32 ? data_value32(gbase, static_cast<uint64_t>(col))
                      : to_float(data_value16(gbase, static_cast<uint64_t>(col), dt), dt);
}

__device__ uint16_t expected_allreduce(const uint64_t* in_base, uint32_t world, uint64_t i, Act dt) {
  float acc = 0.0f;
  for (uint32_t r = 0; r < world; ++r) acc = sum_step(acc, data_value16(in_base[r], i, dt), dt);
  return round_sum(acc, dt);
}

__device__ float absmax_acc(float acc, float x) {
  const float a = fabs_f(x);
  return a > acc ? a : acc;  // NaN ignored
}

// One group/block of a row of the FP8 per-group, NVFP4 and MXFP4 patterns, checked by `lanes`
// consecutive threads of one warp (lanes = min(32, elems), a divisor of 32): thread `lane` reads
// elements lane, lane + lanes, ... of the group (coalesced), the group's amax is a shuffle max
// inside those lanes (max over non-NaN values: the same bits in any order), then one lane checks
// the scale and every lane its own codes. `active` false: the lanes only join the shuffles (every
// lane of the warp calls this the same number of times, so full-warp shuffles are safe).
__device__ void check_block(Ctx& k, int64_t row, int64_t blk, bool active, int64_t elems, int lanes,
                            int lane, float gs) {
  const DeviceCall& c = k.c;
  const int64_t cols = c.hidden / elems;
  const int64_t base_i = row * c.hidden + blk * elems;
  float amax = 0.0f;
  if (active) {
    for (int64_t e = lane; e < elems; e += lanes) amax = absmax_acc(amax, to_float(c.norm_out[base_i + e], k.dt));
  }
  for (int o = lanes / 2; o > 0; o >>= 1) amax = absmax_acc(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  if (!active) return;
  const bool first = lane == 0;
  const uint32_t p = c.pattern;
  float scale_div = 1.0f, mult = 1.0f;  // FP8: x = norm / scale_div; FP4: y = norm * mult
  if (p == static_cast<uint32_t>(Pat::kFp8Group)) {
    const bool fp32 = c.format != arfScaleUe8m0Packed;
    const int64_t off = scale_offset(c.layout, fp32, row, blk, c.tokens, cols);
    const float rule = fp8_dynamic_scale(amax);
    if (fp32) {
      const float got = *reinterpret_cast<const float*>(c.scale_out + off);
      const float want = c.format == arfScaleFp32 ? rule : decode_ue8m0(ue8m0_ceil(rule));
      if (first && f2u(got) != f2u(want)) k.bad(kOutScale, row, blk, f2u(got), f2u(want));
      scale_div = got;
    } else {
      const uint8_t got = c.scale_out[off];
      const uint8_t want = ue8m0_ceil(rule);
      if (first && got != want) k.bad(kOutScale, row, blk, got, want);
      scale_div = decode_ue8m0(got);
    }
  } else if (p == static_cast<uint32_t>(Pat::kNvfp4)) {
    const uint8_t sf = c.scale_out[scale_offset(c.layout, false, row, blk, c.tokens, cols)];
    if (first && !nvfp4_scale_ok(sf, amax, gs)) k.bad(kOutScale, row, blk, sf, f2u(mul_rn(div_rn(amax, 6.0f), gs)));
    mult = nvfp4_multiplier(sf, gs);
  } else {  // MXFP4
    const uint8_t code = c.scale_out[scale_offset(c.layout, false, row, blk, c.tokens, cols)];
    const uint8_t want = mxfp4_scale_code(amax);
    if (first && code != want) k.bad(kOutScale, row, blk, code, want);
    mult = ue8m0_reciprocal(code);
  }
  const uint64_t qbase = output_base(c.call, kOutQuant);
  for (int64_t e = lane; e < elems; e += lanes) {
    const int64_t i = base_i + e;
    const float x = to_float(c.norm_out[i], k.dt);
    if (p == static_cast<uint32_t>(Pat::kFp8Group)) {
      const uint8_t q = c.quant_out[i];
      const float v = div_rn(x, scale_div);
      if (!e4m3_code_ok(q, v)) k.bad(kOutQuant, row, blk * elems + e, q, f2u(v));
      k.hash += output_term(qbase, static_cast<uint64_t>(i), q);
    } else {
      const uint8_t byte = c.quant_out[i / 2];
      const uint8_t q = (i & 1) ? byte >> 4 : byte & 0xFu;
      const float v = mul_rn(x, mult);
      if (!e2m1_code_ok(q, v)) k.bad(kOutQuant, row, blk * elems + e, q, f2u(v));
      if ((i & 1) == 0) k.hash += output_term(qbase, static_cast<uint64_t>(i / 2), byte);
    }
  }
}

__device__ void check_flat(Ctx& k, const uint64_t* in_base) {
  const DeviceCall& c = k.c;
  const uint64_t obase = output_base(c.call, kOutAllReduce);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.count; i += stride) {
    const uint16_t got = c.allreduce_out[i];
    if (reference_unit(c, i / kFlatReferenceChunk)) {
      const uint16_t want = expected_allreduce(in_base, c.world, static_cast<uint64_t>(i), k.dt);
      if (got != want) k.bad(kOutAllReduce, i / c.hidden, i % c.hidden, got, want);
    }
    k.hash += output_term(obase, static_cast<uint64_t>(i), got);
  }
}

__device__ void check_rows(Ctx& k, const uint64_t* in_base, float* ycache, bool cached, double* dscratch,
                           float* fscratch) {
  const DeviceCall& c = k.c;
  const Act dt = k.dt;
  const uint32_t data_rank = shared_data_rank(c.per_rank != 0, c.rank);
  const uint64_t res_base = stream_base(c.seed, c.call, data_rank, kStreamResidual);
  const uint64_t gbase = stream_base(c.seed, c.call, data_rank, kStreamGamma);
  const uint64_t pbase = stream_base(c.seed, c.call, data_rank, kStreamPostGamma);
  const bool sandwich = c.sandwich != 0;
  const uint64_t rbase = output_base(c.call, kOutResidual);
  const uint64_t nbase = output_base(c.call, kOutNorm);
  const uint64_t qbase = output_base(c.call, kOutQuant);
  const uint32_t p = c.pattern;
  const bool nvfp4 = p == static_cast<uint32_t>(Pat::kNvfp4);
  const float scale_in = (p == static_cast<uint32_t>(Pat::kFp8Tensor) || nvfp4)
                             ? scale_in_value(c.seed, c.call, nvfp4) : 1.0f;
  const double plus = c.gamma_plus_one ? 1.0 : 0.0;
  // In a row this rank does not recompute (reference_unit: the same for the whole CTA, which owns
  // the row) passes A and B only hash residual_out and norm_out: the rank that recomputes the row
  // and the cross-rank comparison of the hashes cover them. Everything after them reads this
  // rank's own outputs and runs anyway.
  for (int64_t row = blockIdx.x; row < c.tokens; row += gridDim.x) {
    const bool reference = reference_unit(c, row);
    // Sandwich calls, pass A0: the rounded sum's sum of squares, for h's scale s_h (the sum
    // cached in ycache; pass A overwrites each entry with residual_out in the same thread).
    double s_h = 0.0;
    if (sandwich && reference) {
      double sumsq_ar = 0.0;
      for (int64_t col = threadIdx.x; col < c.hidden; col += blockDim.x) {
        const uint64_t i = static_cast<uint64_t>(row * c.hidden + col);
        const float a = to_float(expected_allreduce(in_base, c.world, i, dt), dt);
        sumsq_ar += static_cast<double>(a) * static_cast<double>(a);
        if (cached) ycache[col] = a;
      }
      s_h = rms_scale(block_sum(sumsq_ar, dscratch), c.hidden, c.eps);
    }
    // Pass A: all-reduce -> residual_out (bitwise; sandwich calls: reachable from an accepted h,
    // numerics.h sandwich_residual_ok), sum of squares of the residual the norm reads: the
    // expected one, or for sandwich calls (several are right) the one the library wrote.
    double sumsq = 0.0;
    for (int64_t col = threadIdx.x; col < c.hidden; col += blockDim.x) {
      const uint64_t i = static_cast<uint64_t>(row * c.hidden + col);
      if (!reference) {
        k.hash += output_term(rbase, i, c.residual_out[i]);
        continue;
      }
      const uint16_t got = c.residual_out[i];
      float y;
      if (sandwich) {
        const double a = cached ? static_cast<double>(ycache[col])
                                : static_cast<double>(to_float(expected_allreduce(in_base, c.world, i, dt), dt));
        const double pg = static_cast<double>(gamma_value(c, pbase, col, dt)) + plus;
        const uint16_t res = c.residual_null ? 0 : data_value16(res_base, i, dt);
        if (!sandwich_residual_ok(got, a, s_h, pg, c.before_weight, c.residual_null != 0, res, dt)) {
          k.bad(kOutResidual, row, col, got,
                sandwich_residual_want_bits(a, s_h, pg, c.before_weight, c.residual_null != 0, res, dt));
        }
        y = to_float(got, dt);
      } else {
        const uint16_t ar = expected_allreduce(in_base, c.world, i, dt);
        const uint16_t want = c.residual_null ? ar : residual_rule(ar, data_value16(res_base, i, dt), dt);
        if (got != want) k.bad(kOutResidual, row, col, got, want);
        y = to_float(want, dt);
      }
      k.hash += output_term(rbase, i, got);
      sumsq += static_cast<double>(y) * static_cast<double>(y);
      if (cached) ycache[col] = y;
    }
    const double s = reference ? rms_scale(block_sum(sumsq, dscratch), c.hidden, c.eps) : 0.0;
    // Pass B: norm_out against the double reference; FP8 per-tensor codes; per-token amax.
    float amax = 0.0f;
    for (int64_t col = threadIdx.x; col < c.hidden; col += blockDim.x) {
      const uint64_t i = static_cast<uint64_t>(row * c.hidden + col);
      const uint16_t got = c.norm_out[i];
      if (reference) {
        float y;
        if (cached) {
          y = ycache[col];
        } else if (sandwich) {
          y = to_float(c.residual_out[i], dt);  // what pass A read (and checked)
        } else {
          const uint16_t ar = expected_allreduce(in_base, c.world, i, dt);
          y = to_float(c.residual_null ? ar : residual_rule(ar, data_value16(res_base, i, dt), dt), dt);
        }
        const double g = static_cast<double>(gamma_value(c, gbase, col, dt)) + plus;
        if (!norm_element_ok(got, y, s, g, c.before_weight, dt)) {
          k.bad(kOutNorm, row, col, got, norm_want_bits(y, s, g, c.before_weight, dt));
        }
      }
      k.hash += output_term(nbase, i, got);
      const float x = to_float(got, dt);
      if (p == static_cast<uint32_t>(Pat::kFp8Tensor)) {
        const uint8_t q = c.quant_out[i];
        const float v = div_rn(x, scale_in);
        if (!e4m3_code_ok(q, v)) k.bad(kOutQuant, row, col, q, f2u(v));
        k.hash += output_term(qbase, i, q);
      }
      amax = absmax_acc(amax, x);
    }
    if (p == static_cast<uint32_t>(Pat::kFp8Token)) {
      // Pass C, per token: scale_out[row] = max(amax / 448, floor), codes = e4m3(norm / scale).
      const float row_amax = block_max(amax, fscratch);
      const float rule = fp8_dynamic_scale(row_amax);
      const float scale = *reinterpret_cast<const float*>(c.scale_out + row * 4);
      if (threadIdx.x == 0 && f2u(scale) != f2u(rule)) k.bad(kOutScale, row, 0, f2u(scale), f2u(rule));
      for (int64_t col = threadIdx.x; col < c.hidden; col += blockDim.x) {
        const uint64_t i = static_cast<uint64_t>(row * c.hidden + col);
        const uint8_t q = c.quant_out[i];
        const float v = div_rn(to_float(c.norm_out[i], dt), scale);
        if (!e4m3_code_ok(q, v)) k.bad(kOutQuant, row, col, q, f2u(v));
        k.hash += output_term(qbase, i, q);
      }
    } else if (p == static_cast<uint32_t>(Pat::kFp8Group) || nvfp4 || p == static_cast<uint32_t>(Pat::kMxfp4)) {
      const int64_t elems = p == static_cast<uint32_t>(Pat::kFp8Group) ? 128 : nvfp4 ? 16 : 32;
      const int lanes = elems < 32 ? static_cast<int>(elems) : 32;
      const int groups = static_cast<int>(blockDim.x) / lanes;  // blockDim.x is a multiple of 32
      const int group = static_cast<int>(threadIdx.x) / lanes, lane = static_cast<int>(threadIdx.x) % lanes;
      for (int64_t first_blk = 0; first_blk < c.hidden / elems; first_blk += groups) {
        const int64_t blk = first_blk + group;
        check_block(k, row, blk, blk < c.hidden / elems, elems, lanes, lane, scale_in);
      }
    }
    __syncthreads();  // ycache is rewritten by the next row
  }
}

// The whole scale buffer: hashed byte by byte; bytes outside [T, cols] must be 0 (the generate
// kernel filled them with 0xA5 before the call).
__device__ void check_scale_buffer(Ctx& k) {
  const DeviceCall& c = k.c;
  if (c.scale_out == nullptr || c.scale_bytes == 0) return;
  const uint32_t p = c.pattern;
  const int64_t cols = scale_cols_dev(p, c.hidden);
  const bool fp32 = scale_is_fp32_dev(p, c.format);
  const uint64_t sbase = output_base(c.call, kOutScale);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < c.scale_bytes; b += stride) {
    const uint8_t v = c.scale_out[b];
    if (!scale_byte_is_valid(c.layout, fp32, b, c.tokens, cols) && v != 0) k.bad(kOutScalePad, -1, b, v, 0);
    k.hash += output_term(sbase, static_cast<uint64_t>(b), v);
  }
}

// The last CTA of the kernel: the rank's totals into the pinned mirror, checks_done last.
__device__ void publish(const DeviceCall& c) {
  DeviceCounters* dc = c.counters;
  volatile PinnedMirror* m = c.mirror;
  atomicOr(&c.table[c.call % c.table_calls].flags, kSlotChecked | (c.comparable ? kSlotComparable : 0u));
  m->wrong_total = atomicAdd(&dc->wrong_total, 0ull);
  m->last_call = c.call;
  if (atomicAdd(&dc->first_claimed, 0u) != 0u) {
    const volatile FirstBad& f = dc->first;
    m->first.call = f.call;
    m->first.output = f.output;
    m->first.got = f.got;
    m->first.want = f.want;
    m->first.row = f.row;
    m->first.col = f.col;
    m->first_valid = 1;
  }
  const unsigned long long checks = atomicAdd(&dc->checks_done, 1ull) + 1ull;
  __threadfence_system();
  m->checks_done = checks;
  __threadfence_system();
}

}  // namespace

__global__ void __launch_bounds__(1024) check_kernel(DeviceCall c, int smem_bytes) {
  extern __shared__ float ycache[];
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  __shared__ uint64_t in_base[ARF_MAX_RANKS];
  __shared__ unsigned long long block_hash;
  __shared__ unsigned block_wrong;
  if (c.table == nullptr) return;  // warm-up launch
  if (threadIdx.x == 0) {
    block_hash = 0;
    block_wrong = 0;
  }
  if (threadIdx.x < c.world) in_base[threadIdx.x] = stream_base(c.seed, c.call, threadIdx.x, kStreamInput);
  __syncthreads();
  Ctx k{c, c.fp16 ? Act::kFp16 : Act::kBf16};
  if (pat_has_norm_dev(c.pattern)) {
    const bool cached = c.hidden * 4 <= smem_bytes;
    check_rows(k, in_base, ycache, cached, dscratch, fscratch);
  } else {
    check_flat(k, in_base);
  }
  check_scale_buffer(k);
  atomicAdd(&block_hash, k.hash);
  atomicAdd(&block_wrong, k.wrong);
  __syncthreads();
  if (threadIdx.x != 0) return;
  TableEntry& slot = c.table[c.call % c.table_calls];
  if (block_wrong != 0) {
    atomicAdd(&slot.wrong, block_wrong);
    atomicAdd(&c.counters->wrong_total, static_cast<unsigned long long>(block_wrong));
  }
  if (c.comparable) atomicAdd(&slot.hash, block_hash);
  __threadfence();
  if (atomicAdd(&c.counters->cta_done, 1u) == gridDim.x - 1) {
    __threadfence();
    atomicExch(&c.counters->cta_done, 0u);  // the next check kernel of this stream starts from 0
    publish(c);
  }
}

const void* check_kernel_address() { return reinterpret_cast<const void*>(&check_kernel); }

cudaError_t launch_check(const DeviceCall& c, const ForeignShape& s, int sm_count, cudaStream_t stream) {
  int64_t want;
  if (pat_has_norm_dev(c.pattern)) {
    want = c.tokens;
  } else {
    want = (c.count + s.block - 1) / s.block;
  }
  const int grid = static_cast<int>(want < 1 ? 1 : want < sm_count ? want : sm_count);
  check_kernel<<<grid, s.block, s.smem_bytes, stream>>>(c, s.smem_bytes);
  return cudaGetLastError();
}

}  // namespace arf::stress
