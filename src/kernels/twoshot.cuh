// twoshot: reduce-scatter then all-gather, both by push, each closed by a release/acquire barrier.
// Each row is split into `world` parts; rank p reduces part p of every row it is sent and pushes the
// rounded sum to every rank's gather inbox; then every rank runs the epilogue from local memory.
// No end barrier is needed: peers never read our memory. A peer's next push into our GATHER inbox
// happens only after the next call's first barrier, which we reach only after finishing this call.
// Its next push into our SCATTER inbox can come right after it passes this call's second barrier,
// but we have read our scatter inbox before arriving at that barrier.
#pragma once

#include "kernels/debug_stall.cuh"
#include "kernels/pdl.cuh"
#include "kernels/protocol.cuh"
#include "kernels/row_epilogue.cuh"

namespace arf {

// Phase 1: push vector v of each owned row to the scatter inbox of its owner, slot [our rank].
template <typename T, int kWorld, int kVecs>
__device__ __forceinline__ void twoshot_scatter_rows(const KernelParams& p) {
  for (int64_t row = blockIdx.x; row < p.num_rows; row += gridDim.x) {
    const RowSlice rs = row_slice(p, row);
    const int part = protocol::twoshot_part_vecs(p.row_elems / kElemsPerVec, kWorld);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!rs.owns(k)) continue;
      const int owner = protocol::twoshot_owner(rs.vec(k), part);
      const int64_t dst = p.rank * p.scatter_slot_elems +
                          protocol::twoshot_scatter_offset(row, rs.vec(k) - owner * part, part);
      st_v4(elem_ptr(p.peers.scatter[owner], dst), ld_v4(elem_ptr(p.input, rs.elem(k))));
    }
  }
}

// Phase 2: reduce our part of each owned row over the slots in rank order, push to every gather inbox.
template <typename T, int kWorld>
__device__ __forceinline__ void twoshot_reduce_rows(const KernelParams& p) {
  const int part = protocol::twoshot_part_vecs(p.row_elems / kElemsPerVec, kWorld);
  for (int64_t row = blockIdx.x; row < p.num_rows; row += gridDim.x) {
    const RowSlice rs = row_slice(p, row);
    for (int j = threadIdx.x; j < part; j += blockDim.x) {
      const int vec = p.rank * part + j;
      if (vec >= rs.row_vecs) break;
      uint4 vals[kWorld];
#pragma unroll
      for (int src = 0; src < kWorld; ++src) {
        vals[src] = protocol::ld_volatile_v4(elem_ptr(
            p.peers.scatter[p.rank], src * p.scatter_slot_elems + protocol::twoshot_scatter_offset(row, j, part)));
      }
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int src = 0; src < kWorld; ++src) add_to<T>(acc, canonicalize(vals[src]));
      const uint4 sum = round_sum<T>(acc);
      const int64_t elem = rs.first_elem + static_cast<int64_t>(vec) * kElemsPerVec;
#pragma unroll
      for (int dst = 0; dst < kWorld; ++dst) st_v4(elem_ptr(p.peers.gather[dst], elem), sum);
    }
  }
}

// Thread map: CTA b owns rows b, b + G, ... in all three phases, so CTA b's barriers pair exactly the
// CTAs that exchange those rows; thread t owns vectors t + k*B (phases 1, 3) and part vectors
// t, t + B, ... (phase 2).
template <typename T, int kWorld, typename Epilogue>
__global__ void __launch_bounds__(kMaxBlockThreads, kMinCtasPerSm) twoshot_kernel(const KernelParams p) {
  pdl_wait();
  const protocol::Entry entry = protocol::enter<false>(p);
  if (entry.aborted) return;
  const uint32_t call = static_cast<uint32_t>(entry.call);
  const uint32_t epoch = entry.cta_epoch;
  debug::stall(p, debug::StallPoint::kBeforePublish, epoch);
  twoshot_scatter_rows<T, kWorld, Epilogue::kVecs>(p);
  bool ok = false;
  if (protocol::peer_barrier<kWorld>(p, epoch + 1, Phase::kTwoshotScatterBarrier, call)) {
    debug::stall(p, debug::StallPoint::kBeforeRead, epoch);
    twoshot_reduce_rows<T, kWorld>(p);
    debug::stall(p, debug::StallPoint::kBeforeCloseBarrier, epoch);
    if (protocol::peer_barrier<kWorld>(p, epoch + 2, Phase::kTwoshotGatherBarrier, call)) {
      debug::stall(p, debug::StallPoint::kBeforeFinalRead, epoch);
      for_each_owned_row<Epilogue>(p, [&](const RowSlice& rs, int k) {
        return protocol::ld_volatile_v4(elem_ptr(p.peers.gather[p.rank], rs.elem(k)));
      });
      ok = true;
    }
  }
  protocol::store_cta_epoch(p, epoch + 2);
  if (ok) protocol::call_exit(p, entry, false);
  pdl_launch_dependents();
}

}  // namespace arf
