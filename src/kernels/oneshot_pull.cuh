// oneshot_pull: copy-in, start barrier, every rank reads the row from all peers' copy-in buffers,
// end barrier. Without the end barrier a fast rank returns and its next call overwrites its copy-in
// buffer while a slow peer is still reading it (silent corruption under skew, as AMD's AITER once shipped).
// A rank whose input IS its copy-in buffer (arfCommGetInputBuffer) skips the copy: what peers read
// after the start barrier is the same, so ranks may differ in this; validation keeps every other
// tensor of the call out of that buffer, and the end barrier still holds the rank's next write to
// it (the caller's, in stream order) until every peer has read it.
#pragma once

#include "kernels/debug_stall.cuh"
#include "kernels/pdl.cuh"
#include "kernels/protocol.cuh"
#include "kernels/row_epilogue.cuh"

namespace arf {

template <typename T, int kVecs>
__device__ __forceinline__ void pull_copy_in_rows(const KernelParams& p) {
  for (int64_t row = blockIdx.x; row < p.num_rows; row += gridDim.x) {
    const RowSlice rs = row_slice(p, row);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (rs.owns(k)) {
        st_v4(elem_ptr(p.peers.pull[p.rank], rs.elem(k)), ld_v4(elem_ptr(p.input, rs.elem(k))));
      }
    }
  }
}

// Sums vector k of a row over every rank's copy-in buffer, in rank order; all loads in flight first.
template <typename T, int kWorld>
__device__ __forceinline__ uint4 pull_reduce_vec(const KernelParams& p, int64_t elem) {
  uint4 vals[kWorld];
#pragma unroll
  for (int src = 0; src < kWorld; ++src) vals[src] = protocol::ld_volatile_v4(elem_ptr(p.peers.pull[src], elem));
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int src = 0; src < kWorld; ++src) add_to<T>(acc, canonicalize(vals[src]));
  return round_sum<T>(acc);
}

// Thread map: CTA b owns rows b, b + G, ...; thread t owns vectors t + k*B of each row (RowSlice),
// in the copy-in phase and in the read phase alike.
template <typename T, int kWorld, typename Epilogue>
__global__ void __launch_bounds__(kMaxBlockThreads, kMinCtasPerSm) oneshot_pull_kernel(const KernelParams p) {
  pdl_wait();
  const protocol::Entry entry = protocol::enter<false>(p);
  if (entry.aborted) return;
  const uint32_t call = static_cast<uint32_t>(entry.call);
  const uint32_t epoch = entry.cta_epoch;
  debug::stall(p, debug::StallPoint::kBeforePublish, epoch);
  if (p.input != p.peers.pull[p.rank]) pull_copy_in_rows<T, Epilogue::kVecs>(p);
  bool ok = false;
  // Release/acquire: the copy-in was written in this kernel, and peers read it next.
  if (protocol::peer_barrier<kWorld>(p, epoch + 1, Phase::kPullStartBarrier, call)) {
    debug::stall(p, debug::StallPoint::kBeforeRead, epoch);
    for_each_owned_row<Epilogue>(
        p, [&](const RowSlice& rs, int k) { return pull_reduce_vec<T, kWorld>(p, rs.elem(k)); });
    debug::stall(p, debug::StallPoint::kBeforeCloseBarrier, epoch);
#ifndef ARF_NEGATIVE_CONTROL_NO_END_BARRIER
    // Peers are done reading our copy-in buffer only once they pass this barrier.
    ok = protocol::peer_barrier<kWorld>(p, epoch + 2, Phase::kPullEndBarrier, call);
#else
    ok = true;
#endif
  }
  protocol::store_cta_epoch(p, epoch + 2);
  if (ok) protocol::call_exit(p, entry, false);
  pdl_launch_dependents();
}

}  // namespace arf
