// oneshot_pull: copy-in, start barrier, every rank reads the row from all peers' copy-in buffers,
// end barrier. The end barrier is the seed-004 fix: without it a fast rank returns and its next call
// overwrites its copy-in buffer while a slow peer is still reading it (silent corruption under skew).
#pragma once

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

template <typename T, int kWorld, typename Epilogue>
__device__ __forceinline__ void pull_reduce_rows(const KernelParams& p) {
  for (int64_t row = blockIdx.x; row < p.num_rows; row += gridDim.x) {
    const RowSlice rs = row_slice(p, row);
    const typename Epilogue::Prefetch pre = Epilogue::prefetch(p, rs);
    uint4 ar[Epilogue::kVecs];
#pragma unroll
    for (int k = 0; k < Epilogue::kVecs; ++k) {
      if (!rs.owns(k)) continue;
      uint4 vals[kWorld];  // all loads in flight before the first add
#pragma unroll
      for (int src = 0; src < kWorld; ++src) {
        vals[src] = protocol::ld_volatile_v4(elem_ptr(p.peers.pull[src], rs.elem(k)));
      }
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int src = 0; src < kWorld; ++src) add_to<T>(acc, canonicalize(vals[src]));
      ar[k] = round_sum<T>(acc);
    }
    Epilogue::apply(p, rs, ar, pre);
  }
}

// Thread map: CTA b owns rows b, b + G, ...; thread t owns vectors t + k*B of each row (RowSlice),
// in the copy-in phase and in the read phase alike.
template <typename T, int kWorld, typename Epilogue>
__global__ void __launch_bounds__(kMaxBlockThreads, kMinCtasPerSm) oneshot_pull_kernel(const KernelParams p) {
  if (protocol::aborted(p)) return;
  const uint32_t epoch = protocol::load_cta_epoch(p);
  pull_copy_in_rows<T, Epilogue::kVecs>(p);
  // Release/acquire: the copy-in was written in this kernel (design rule 3).
  if (protocol::peer_barrier<kWorld>(p, epoch + 1, Phase::kPullStartBarrier)) {
    pull_reduce_rows<T, kWorld, Epilogue>(p);
#ifndef ARF_NEGATIVE_CONTROL_NO_END_BARRIER
    // Peers are done reading our copy-in buffer only once they pass this barrier.
    protocol::peer_barrier<kWorld>(p, epoch + 2, Phase::kPullEndBarrier);
#endif
  }
  protocol::store_cta_epoch(p, epoch + 2);
}

}  // namespace arf
