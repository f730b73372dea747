// The row loop of every kernel without a protocol (world 1: oneshot_lamport_kernel<T, 1, E>; the
// second kernel of a split call: local_epilogue_kernel): a persistent grid of at most
// kMinCtasPerSm CTAs per SM (policy.h, protocol_free_grid_cap) streams rows b, b + G, ... and
// keeps the memory system busy across the rows' reductions:
//  - software pipelining: at the top of each row the next row's input and residual_in are loaded
//    into a second set of registers, so they are in flight while this row reduces, normalises and
//    stores (one CTA per row left HBM idle from a row's last load to the next CTA's first);
//  - per-CTA state (gamma in registers, scale_in, scale addressing: the epilogue's cta_state) is
//    loaded once, not once a row;
//  - one barrier per block reduction (AlternatingReducer).
// The epilogue code, the thread -> element map (RowSlice) and the block shape are those of the
// kernels that wait for peers, so every path still writes the same bits (row_epilogue.cuh).
//
// Aliasing: the next row's loads may be issued before this row's stores because rows are
// disjoint; within a row each thread reads its positions before it writes the aliased outputs
// (norm_out == input, residual_out == residual_in, allreduce_out == input), so no address is read
// after a write, which is what makes the non-coherent loads legal (ld_stream_v4).
//
// Four vectors per thread (hidden > 8192) cannot hold a second row in 64 registers; those
// instantiations load each row at the top of its own iteration (no pipelining) and rely on the
// second CTA of the SM for overlap.
#pragma once

#include "kernels/row_epilogue.cuh"

namespace arf {

// Input vectors of one row: canonicalised (-0.0 -> +0.0) where the input is a rank's raw data (the
// world-1 fused kernel, as every all-reduce canonicalises its sum), raw where it is an earlier
// kernel's output (local_epilogue_kernel: a sum, or for level 2 the norm, whose -0.0 keeps its
// sign as in level 1).
template <int kVecs, bool kCanonical>
__device__ __forceinline__ void load_row_input(const KernelParams& p, const RowSlice& s, uint4 (&in)[kVecs]) {
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (!s.owns(k)) continue;
    const uint4 v = ld_stream_v4(elem_ptr(p.input, s.elem(k)));
    in[k] = kCanonical ? canonicalize(v) : v;
  }
}

template <typename Epilogue, bool kCanonical>
__device__ __forceinline__ void stream_rows(const KernelParams& p) {
  static_assert(RowEpilogue<Epilogue>);
  constexpr int kVecs = Epilogue::kVecs;
  constexpr bool kPipelined = kVecs <= 2;
  using Prefetch = typename Epilogue::Prefetch;
  Epilogue::write_scale_padding(p);
  const typename Epilogue::Cta cta = Epilogue::cta_state(p);
  AlternatingReducer red;
  int row = static_cast<int>(blockIdx.x);
  const int grid = static_cast<int>(gridDim.x);
  if (row >= p.num_rows) return;
  if constexpr (kPipelined) {
    RowSlice s = row_slice(p, row);
    uint4 in[kVecs];
    load_row_input<kVecs, kCanonical>(p, s, in);
    Prefetch pre = Epilogue::prefetch(p, s, cta);
    for (;;) {
      const int next = row + grid;  // < 2^31: num_rows is an int and grid <= num_rows
      const bool more = next < p.num_rows;
      RowSlice s_next;
      uint4 in_next[kVecs];
      Prefetch pre_next;
      if (more) {  // uniform across the CTA
        s_next = row_slice(p, next);
        load_row_input<kVecs, kCanonical>(p, s_next, in_next);
        pre_next = Epilogue::prefetch(p, s_next, cta);
      }
      Epilogue::apply(p, s, in, pre, cta, red);
      if (!more) break;
      row = next;
      s = s_next;
#pragma unroll
      for (int k = 0; k < kVecs; ++k) in[k] = in_next[k];
      pre = pre_next;
    }
  } else {
    for (; row < p.num_rows; row += grid) {
      const RowSlice s = row_slice(p, row);
      uint4 in[kVecs];
      load_row_input<kVecs, kCanonical>(p, s, in);
      const Prefetch pre = Epilogue::prefetch(p, s, cta);
      Epilogue::apply(p, s, in, pre, cta, red);
    }
  }
}

}  // namespace arf
