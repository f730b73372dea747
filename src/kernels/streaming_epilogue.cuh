// The row loop of every kernel without a protocol (world 1: oneshot_lamport_kernel<T, 1, E>; the
// second kernel of a split call: local_epilogue_kernel): a persistent grid of the CTAs every SM
// keeps resident (policy.h, protocol_free_grid_cap) streams rows b, b + G, ... and keeps the
// memory system busy across the rows' reductions, in one of two ways:
//  - staged rows (epilogues whose kStagesRows is set: kernel_set.h, stages_rows, says which and
//    the measurements behind it): kStagedRowBuffers rows of input and
//    residual_in per CTA are copied into shared memory by cp.async, so kStagedRowBuffers - 1 rows
//    are in flight while one is reduced, normalised and stored, without registers held for them
//    (registers cap the CTAs per SM, and so the bytes in flight, of the register loop; capping
//    them for more CTAs spills: dev/experiments/stream_variants.cu);
//  - software pipelining (the other epilogues): at the top of each row the next row's input and
//    residual_in are loaded into a second set of registers.
// In every way per-CTA state (gamma in registers, scale_in: the epilogue's
// cta_state) is loaded once, not once a row, and a block reduction costs one barrier
// (AlternatingReducer). The epilogue code, the thread -> element map (RowSlice) and the block
// shape are those of the kernels that wait for peers, so every path still writes the same bits
// (row_epilogue.cuh).
//
// Aliasing: the next rows' loads may be issued before this row's stores because rows are
// disjoint; within a row each thread reads its positions before it writes the aliased outputs
// (norm_out == input, residual_out == residual_in, allreduce_out == input), so no address is read
// after a write, which is what makes the non-coherent loads legal (ld_stream_v4) and the staged
// rows' copies current.
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

// 16-byte copies global -> shared that complete asynchronously (cp.async, through L2 only: the
// rows are read once). A thread's copies are complete, and visible to that thread, once its
// cp.async.wait_group has returned for their group.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>  // returns once at most kPending of this thread's groups are incomplete
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// Staged rows. Stage j of the CTA's dynamic shared memory holds one row's input vectors, then its
// residual_in vectors, at the row's vector indices, so each thread copies and later reads only its
// own positions (RowSlice): its own wait_group makes them visible to it and no barrier is needed.
// Iteration i copies row i + kStagedRowBuffers - 1 into the stage row i - 1 used: that row's
// values were consumed (stored) in iteration i - 1, so its shared-memory reads are complete. Every
// thread commits one group per iteration, empty past the last row, so "all but
// kStagedRowBuffers - 1 groups complete" always means "this row's group complete".
// kBuffers other than kStagedRowBuffers: launch-shape experiments only (the host sizes the
// library's launches for kStagedRowBuffers).
template <typename Epilogue, bool kCanonical, int kBuffers = kStagedRowBuffers>
__device__ __forceinline__ void stream_staged_rows(const KernelParams& p) {
  constexpr int kVecs = Epilogue::kVecs;
  static_assert(kVecs <= 2 && requires(typename Epilogue::Prefetch pre) { pre.residual[0]; },
                "staged rows are for residual-add epilogues whose prefetch is residual_in alone");
  static_assert(kBuffers >= 2);
  extern __shared__ uint4 staged_rows[];  // kBuffers x 2 x row_vecs (kernel_set.h)
  const int row_vecs = p.row_elems / kElemsPerVec;
  const bool has_residual = p.residual_in != nullptr;
  const int grid = static_cast<int>(gridDim.x);
  auto stage_of = [&](int i) { return staged_rows + static_cast<size_t>(i % kBuffers) * 2 * row_vecs; };
  auto copy_row = [&](int row, uint4* stage) {
    if (row < p.num_rows) {
      const RowSlice s = row_slice(p, row);
#pragma unroll
      for (int k = 0; k < kVecs; ++k) {
        if (!s.owns(k)) continue;
        cp_async_16(stage + s.vec(k), elem_ptr(p.input, s.elem(k)));
        if (has_residual) cp_async_16(stage + row_vecs + s.vec(k), elem_ptr(p.residual_in, s.elem(k)));
      }
    }
    cp_async_commit();
  };
  Epilogue::write_scale_padding(p);
  const typename Epilogue::Cta cta = Epilogue::cta_state(p);
  AlternatingReducer red;
  int row = static_cast<int>(blockIdx.x);
#pragma unroll
  for (int j = 0; j < kBuffers - 1; ++j) copy_row(row + j * grid, stage_of(j));
  for (int i = 0; row < p.num_rows; ++i, row += grid) {  // row < 2^31: grid <= num_rows
    copy_row(row + (kBuffers - 1) * grid, stage_of(i + kBuffers - 1));
    cp_async_wait<kBuffers - 1>();
    const RowSlice s = row_slice(p, row);
    const uint4* stage = stage_of(i);
    uint4 in[kVecs];
    typename Epilogue::Prefetch pre;  // a streaming residual-add epilogue prefetches residual_in only
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k)) continue;
      in[k] = kCanonical ? canonicalize(stage[s.vec(k)]) : stage[s.vec(k)];
      if (has_residual) pre.residual[k] = stage[row_vecs + s.vec(k)];
    }
    Epilogue::post_norm(p, s, in, red);
    Epilogue::apply(p, s, in, pre, cta, red);
  }
}

// Rows through registers. kPipelined: load the next row while this one is processed (where the
// registers allow it); without it each row is loaded at the top of its own iteration.
template <typename Epilogue, bool kCanonical, bool kPipelined = (Epilogue::kVecs <= 2)>
__device__ __forceinline__ void stream_register_rows(const KernelParams& p) {
  constexpr int kVecs = Epilogue::kVecs;
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
      // A sandwich call's post-norm before the next row's loads: their registers are not held
      // across its reduction (the FP4 epilogues at two vectors a thread spilled there).
      Epilogue::post_norm(p, s, in, red);
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
      Epilogue::post_norm(p, s, in, red);
      Epilogue::apply(p, s, in, pre, cta, red);
    }
  }
}

template <typename Epilogue, bool kCanonical>
__device__ __forceinline__ void stream_rows(const KernelParams& p) {
  static_assert(RowEpilogue<Epilogue>);
  if constexpr (Epilogue::kStagesRows) {
    stream_staged_rows<Epilogue, kCanonical>(p);
  } else {
    stream_register_rows<Epilogue, kCanonical>(p);
  }
}

}  // namespace arf
